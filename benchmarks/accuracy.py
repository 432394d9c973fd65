"""Accuracy where users look: GQ types at the state, totals by level, persons against housing units.

Each figure is the median over seeded runs (seeds 1-5) of a whole `das run` of a shipped state,
scored against the confidential input by reading the release's files. The reference is the same
runs made by das as it was before the least-squares, one-child, block-group and persons/units
changes (commit BEFORE, extracted by `code_at`), side by side in one session.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks._harness import Bench, code_at

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "f38914d"  # das before issue 11
SEEDS = (1, 2, 3, 4, 5)
PREFIX = {"county": 5, "tract": 11, "block_group": 12, "block": 15}
GQ_TYPES = ("correctional", "juvenile", "nursing", "other_institutional", "college", "military", "other_noninst")


def _geocodes(frame: pd.DataFrame) -> pd.Series:
    return (frame["TABBLKST"].astype(str) + frame["TABBLKCOU"].astype(str) + frame["TABTRACTCE"].astype(str)
            + frame["TABBLK"].astype(str))


def _by_prefix(geocode: pd.Series, digits: int, mask=None) -> pd.Series:
    keys = geocode.str.slice(0, digits)
    return (keys[mask] if mask is not None else keys).value_counts()


def contradictions(persons: pd.DataFrame, units: pd.DataFrame) -> dict:
    """Geounits (every level) with household persons but no occupied unit, the reverse, or more occupied
    units than household persons."""
    pg, ug = _geocodes(persons), _geocodes(units)
    out = {"hhp_without_occupied": 0, "occupied_without_hhp": 0, "occupied_above_hhp": 0}
    for digits in (2, *PREFIX.values()):
        hhp = _by_prefix(pg, digits, (persons["GQTYPE_PL"] == 0).to_numpy())
        occ = _by_prefix(ug, digits, ((units["RTYPE"] == 2) & (units["HH_STATUS"] == 1)).to_numpy())
        both = pd.concat([hhp.rename("hhp"), occ.rename("occ")], axis=1).fillna(0)
        out["hhp_without_occupied"] += int(((both.hhp > 0) & (both.occ == 0)).sum())
        out["occupied_without_hhp"] += int(((both.occ > 0) & (both.hhp == 0)).sum())
        out["occupied_above_hhp"] += int((both.occ > both.hhp).sum())
    return out


def score(run_dir: Path, truth_persons: Path) -> dict:
    """Figures of one release of a single-state spec against its confidential persons."""
    from das.io import nmf

    persons = pd.read_parquet(run_dir / "mdf_persons.parquet")
    units = pd.read_parquet(run_dir / "mdf_units.parquet")
    truth = pd.read_parquet(truth_persons, columns=["TABBLKST", "TABBLKCOU", "TABTRACTCE", "TABBLK", "GQTYPE_PL"])
    out: dict[str, float] = {}
    published = np.bincount(persons["GQTYPE_PL"].to_numpy(), minlength=8)
    true = np.bincount(truth["GQTYPE_PL"].to_numpy(), minlength=8)
    state_nmf = nmf.read_level(run_dir / "nmf" / "persons" / "state.parquet")
    hhgq = state_nmf["hhgq"]
    noisy, variance = hhgq.answers, hhgq.variance
    out["hhgq_mae_state"] = float(np.abs(published - true).mean())
    out["hhgq_mae_state_noisy"] = float(np.abs(noisy[0] - true).mean())
    out["hhgq_state_sd"] = float(variance) ** 0.5
    out["households_error"] = float(published[0] - true[0])
    for g, name in enumerate(GQ_TYPES, start=1):
        out[f"gq_abs_err_{name}"] = float(abs(published[g] - true[g]))
    out["gq_abs_err_max"] = max(out[f"gq_abs_err_{n}"] for n in GQ_TYPES)
    pg, tg = _geocodes(persons), _geocodes(truth)
    for level, digits in PREFIX.items():
        both = pd.concat([_by_prefix(pg, digits).rename("p"), _by_prefix(tg, digits).rename("t")], axis=1).fillna(0)
        out[f"mae_{level}"] = float(np.abs(both.p - both.t).mean())
    out.update({k: float(v) for k, v in contradictions(persons, units).items()})
    manifest = json.loads((run_dir / "manifest.json").read_text())
    certs = [r.get("l2_certificate", {}) for r in manifest.get("levels_report", {}).get("persons", [])]
    out["l2_max_rel_gap"] = max((c.get("max_rel_gap", float("nan")) for c in certs), default=float("nan"))
    out["run_seconds"] = float(_timings(run_dir, manifest)["total"])
    return out


def _timings(run_dir: Path, manifest: dict) -> dict:
    """A run's stage times: the operator's record (RunDir.process_file), or an older das's manifest."""
    from das.frame.rundir import RunDir

    process = RunDir(run_dir).process_file
    return json.loads(process.read_text())["timings_seconds"] if process.is_file() else manifest["timings_seconds"]


def _runs(spec: Path, fixture: str, code_root: Path) -> dict:
    """Median figures over SEEDS of `das run spec` with the das found at code_root."""
    env = {**os.environ, "PYTHONPATH": str(code_root)}
    figures = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in SEEDS:
            out = Path(tmp) / f"s{seed}"
            subprocess.run([sys.executable, "-m", "das.cli", "run", str(spec), "--out", str(out), "--seed", str(seed),
                            "--workers", "2", "--no-progress"], env=env, check=True, capture_output=True, cwd=tmp)
            figures.append(score(out, ROOT / "geography_fixtures" / fixture / "persons.parquet"))
            shutil.rmtree(out)
    keys = figures[0].keys()
    result = {k: statistics.median(f[k] for f in figures) for k in keys}
    result["gq_max_of_median_abs_err"] = max(result[f"gq_abs_err_{n}"] for n in GQ_TYPES)
    result["seconds"] = result.pop("run_seconds")
    return result


def _before(spec_name: str, fixture: str) -> dict:
    with code_at(BEFORE) as tree:
        return _runs(tree / "specs" / "runs" / f"{spec_name}.toml", fixture, tree)


def vt_ours() -> dict:
    return _runs(ROOT / "specs" / "runs" / "vt_demo.toml", "vt", ROOT)


def vt_before() -> dict:
    return _before("vt_demo", "vt")


def de_ours() -> dict:
    return _runs(ROOT / "specs" / "runs" / "de.toml", "de", ROOT)


def de_before() -> dict:
    return _before("de", "de")


TARGET = ("per GQ type, median |published - true| at the state <= 2 sd of the state hhgq measurement; state hhgq "
          "MAE <= the raw state measurement's; block-group MAE <= 1.5x tract MAE; tract and block MAE within 5% "
          "of before; 0 persons/units contradictions; L2 gap <= 1e-6 relative")

BENCHES = [
    Bench("accuracy.vt_demo", "Vermont (vt_demo spec), 5 seeded runs: GQ types and hhgq at the state, total MAE by "
          "level, persons/units contradictions at every level, L2 duality gap (medians over seeds)",
          vt_ours, key="hhgq_mae_state", repeats=1, references={f"das before ({BEFORE})": vt_before}, target=TARGET),
    Bench("accuracy.de", "Delaware (de spec), 5 seeded runs: the same figures", de_ours, key="hhgq_mae_state",
          repeats=1, references={f"das before ({BEFORE})": de_before}, target=TARGET),
]
