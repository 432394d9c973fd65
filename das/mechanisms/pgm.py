"""What `mst` and `aim` share: Private-PGM's graphical model (`mbi`, McKenna), an optional extra.

Install with `pip install 'das[mbi]'` (mbi 2 on PyPI, which brings JAX). Measurement and selection
use das's exact samplers and accountant; mbi's `MirrorDescent` estimates the graphical model from
the noisy marginals (the "generate" step, not rewritten here), and the release is the model's
distribution over the geounit's full domain times its noisy total, rounded to integers with that
total. The fit runs until it converges (`FIT_TOL`, mbi's relative loss improvement over blocks of
50 iterations, two blocks in a row), not for a fixed small count: 300 iterations left MST's
block totals six times worse than the converged fit.
"""

from __future__ import annotations

import importlib.util
import math

import numpy as np

from das.mechanisms.base import MechanismError
from das.mechanisms.domain import Domain, Marginal, Merged
from das.mechanisms.rounding import round_by_block

EXTRA = "mbi"
SCORE_BITS = 16
FIT_TOL = 1e-5  # converged: mbi's loss fell by at most this share of itself over two blocks of 50 iterations
MAX_ITERS = 20_000  # a safety cap on one fit (convergence stops far earlier)
FIT_DETAIL = f"mbi MirrorDescent to convergence (relative loss improvement <= {FIT_TOL:g} per 50 iterations)"


def available() -> bool:
    """Whether the optional extra is installed (mbi and JAX importable)."""
    return importlib.util.find_spec("mbi") is not None and importlib.util.find_spec("jax") is not None


def load_mbi():
    """mbi, configured for das's fits (float64, no compilation cache); MechanismError naming the extra without it."""
    if not available():
        raise MechanismError(f"mst and aim need the optional extra {EXTRA!r}: pip install 'das[{EXTRA}]'")
    import jax

    jax.config.update("jax_enable_x64", True)  # mbi warns that float32 can stall its estimation
    jax.config.update("jax_enable_compilation_cache", False)  # mbi: many small programs, the cache only costs
    import mbi

    return mbi


def l1_units(truth: np.ndarray, estimate: np.ndarray) -> int:
    """sum |truth - estimate| in integer units of 2^-16, the (public) estimate rounded to that grid."""
    scale = 1 << SCORE_BITS
    return int(np.abs(truth.astype(np.int64) * scale - np.rint(estimate * scale).astype(np.int64)).sum())


class Model:
    """The noisy measurements of one geounit and mbi's model of them (over `domain`: a `Domain`, or a `Merged`
    one whose rare values are merged)."""

    def __init__(self, domain: Domain | Merged, total: int):
        self.mbi = load_mbi()
        self.domain = domain
        self.total = total
        self.space = self.mbi.Domain(domain.names, tuple(domain.factor_size(a) for a in domain.names))
        self.measurements = []
        self.model = None

    def add(self, marginal: Marginal) -> None:
        """A measured marginal, as mbi's `LinearMeasurement` of it."""
        self.add_measurement(self.linear(marginal))

    def linear(self, marginal: Marginal):
        """mbi's `LinearMeasurement` of a measured marginal (its noise's standard deviation)."""
        return self.mbi.LinearMeasurement(marginal.values, marginal.factors, stddev=math.sqrt(float(marginal.sigma2)))

    def add_measurement(self, measurement) -> None:
        """An mbi LinearMeasurement as made (e.g. re-expressed over merged values)."""
        self.measurements.append(measurement)

    def fit(self, tol: float = FIT_TOL) -> None:
        """Fit (warm-started from the last fit) until the loss stops improving by more than `tol`."""
        estimator = self.mbi.estimation.MirrorDescent()
        self.model = estimator.estimate(self.space, self.measurements, known_total=float(max(self.total, 1)),
                                        iters=MAX_ITERS, warm_start=self.model, tol=tol, patience=2)

    def marginal(self, factors: tuple[str, ...]) -> np.ndarray:
        """The model's marginal over `factors` (cells as `Domain.marginal` numbers them)."""
        return np.asarray(self.model.project(tuple(factors)).datavector(), dtype=float)

    def model_size_mb(self, cliques) -> float:
        """The junction tree's size (MB) were the model to hold `cliques` (AIM's model-size limit)."""
        return float(self.mbi.junction_tree.hypothetical_model_size(self.space, list(cliques)))

    def joint(self) -> np.ndarray:
        """The model over the whole original domain (block-major, as `Domain`; merged values spread evenly over
        their members), nonnegative."""
        return self.domain.expand(np.maximum(self.marginal(self.domain.names), 0))

    def counts(self) -> np.ndarray:
        """The model's expected counts at the noisy total, controlled-rounded (rounding.round_by_block)."""
        return round_by_block(self.joint(), self.domain.n_blocks, self.total)
