"""One colour, one name and one line style per series, in every figure das draws.

An estimator (TopDown, the raw noisy measurement, WLS), a mechanism (flat, mwem...), exact tables and an
attack method (RAP-Rank, the baselines) keep their colour across the research report, the comparison
report and the attack plot, and no two series share one, so a colour means one thing to a reader. The
colours are Kelly's colours of maximum contrast (TopDown keeps the red, WLS the blue, the noisy measurement
the grey that the reports and docs have used). A new mechanism is given its colour here.

>>> color("topdown") != color("flat") and label("rap_rank") == "RAP-Rank"
True
"""

from __future__ import annotations

from dataclasses import dataclass

from das.research.estimators import ESTIMATORS


@dataclass(frozen=True)
class Series:
    label: str
    color: str
    line: str = "-"  # matplotlib's line style: a baseline is dashed, so it reads as a reference


SERIES = {
    # estimators of the same noisy measurements: das.research.estimators.ESTIMATORS, which name their own series
    # other estimators of a published NMF (das postprocess --estimator, das.research.estimates)
    "nnls": Series("nonnegative least squares (unrounded)", "#2B3D26"),
    # other mechanism families (das synth) and the unprotected reference
    "flat": Series("flat (block-level Gaussian)", "#F38400"),
    "stability": Series("stability histogram", "#875692"),
    "mwem": Series("MWEM", "#008856"),
    "privbayes": Series("PrivBayes", "#C2B280"),
    "privsyn": Series("PrivSyn", "#E68FAC"),
    "mst": Series("MST", "#882D17"),
    "aim": Series("AIM", "#8DB600"),
    "rap": Series("RAP (relaxed adaptive projection)", "#B3446C"),
    "exact": Series("exact tables (no protection)", "#222222"),
    # the reconstruction attack's methods
    "rap_rank": Series("RAP-Rank", "#604E97"),
    "baseline_tract": Series("baseline: rest of the tract", "#0F7F8C", "--"),
    "baseline_county": Series("baseline: rest of the county", "#DCA300", ":"),
    "baseline_state": Series("baseline: rest of the state", "#654522", "-."),
    "baseline_holdout": Series("baseline: a holdout population", "#E25822", "--"),
}
UNKNOWN = Series("", "#555555")


def known() -> dict[str, Series]:
    """Every series das names: the registered estimators' (as each names itself) and das's own."""
    return {name: Series(e.label, e.color) for name, e in ESTIMATORS.items()} | SERIES


def _series(name: str) -> Series | None:
    return known().get(name)


def color(name: str) -> str:
    """The series' colour (a name das does not know: dark grey)."""
    return (_series(name) or UNKNOWN).color


def label(name: str) -> str:
    """The series' name as a reader reads it."""
    found = _series(name)
    return found.label if found is not None else name


def line(name: str) -> str:
    return (_series(name) or UNKNOWN).line
