"""Issue 15's figures: every mechanism on Perry County AL and Grand Isle County VT, 20 seeds at the
production budget; MAE and bias at block, tract and county, release time and whole-tree memory,
and RAP-Rank match rates on the releases of the first ATTACK_SEEDS seeds (10 blocks each).

The comparison lives in runs/bench_compare/<county>/: a rerun resumes it (runs only the parts
missing, e.g. a mechanism added to the registry since) and the wall time reported is the sum
over the invocations that built it (DAS_COMPARE_FRESH=1 starts over). The table, report and plots
go to benchmarks/recorded/compare_<county>/, and the section BENCHMARKS.md shows to
benchmarks/recorded/compare_<county>.md.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import shutil
import time
from pathlib import Path

from benchmarks._harness import Bench

ROOT = Path(__file__).resolve().parents[1]
RECORDED = ROOT / "benchmarks" / "recorded"
SEEDS = 20
# mwem, mst and aim fit their models to convergence (tens of seconds a Perry County release here,
# docs/mechanisms.md): they run after the others and may be given fewer seeds (DAS_COMPARE_SLOW_SEEDS),
# stated in the recorded section
SLOW = ("mwem", "mst", "aim")
SLOW_SEEDS = int(os.environ.get("DAS_COMPARE_SLOW_SEEDS", "20"))
ATTACK_SEEDS = int(os.environ.get("DAS_COMPARE_ATTACK_SEEDS", "3"))
ATTACK = {"attack_blocks": 10, "attack_runs": 20, "attack_relaxed": 300, "attack_steps": 300}
WORKERS = 2


def _compare(spec: str, title: str) -> dict:
    import pandas as pd

    from das.research.compare import Comparison, mechanism_names, render_table, run_comparison, unavailable_mechanisms

    out = ROOT / "runs" / "bench_compare" / spec
    if os.environ.get("DAS_COMPARE_FRESH") == "1":
        shutil.rmtree(out, ignore_errors=True)
    mechanisms, missing = mechanism_names(), unavailable_mechanisms()
    fast = tuple(m for m in mechanisms if m not in SLOW)
    slow = tuple(m for m in mechanisms if m in SLOW)
    t0 = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)  # beside the output, never in it: das compare owns that directory
    progress = logging.FileHandler(out.parent / f"{spec}.progress.log")  # the harness keeps the child's stdout: follow this
    progress.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    logging.getLogger("das").addHandler(progress)
    logging.getLogger("das").setLevel(logging.INFO)
    meta = run_comparison(Comparison(spec, mechanisms=fast, seeds=SEEDS, attack_seeds=ATTACK_SEEDS, **ATTACK), out,
                          workers=WORKERS)
    if slow:
        meta = run_comparison(Comparison(spec, mechanisms=slow, seeds=SLOW_SEEDS, attack_seeds=ATTACK_SEEDS, **ATTACK),
                              out, workers=WORKERS)
    history_path = out.parent / f"{spec}.invocations.json"
    history = json.loads(history_path.read_text()) if history_path.exists() else []
    history.append({"when": f"{dt.datetime.now():%Y-%m-%d %H:%M}", "seconds": time.perf_counter() - t0,
                    "mechanisms": list(mechanisms)})
    history_path.write_text(json.dumps(history, indent=1))
    seconds = sum(h["seconds"] for h in history)
    table = pd.read_parquet(out / "comparison.parquet")
    kept = RECORDED / f"compare_{spec}"
    shutil.rmtree(kept, ignore_errors=True)
    shutil.copytree(out / "report", kept, ignore=shutil.ignore_patterns("index.html"))  # its PNGs are here
    shutil.copy(out / "comparison.parquet", kept / "comparison.parquet")
    load = os.getloadavg()[0]
    options = (f"--attack-seeds {ATTACK_SEEDS} --attack-blocks {ATTACK['attack_blocks']} --attack-runs "
               f"{ATTACK['attack_runs']} --attack-relaxed {ATTACK['attack_relaxed']} --attack-steps "
               f"{ATTACK['attack_steps']} --workers {WORKERS}")
    lines = [f"## Mechanism comparison: {title} (issues 15, 25)", "",
             f"- command: `scripts/bench compare.{spec}` (benchmarks/compare.py: `das compare {spec} --mechanisms "
             f"{','.join(fast)} --seeds {SEEDS} {options}`"
             + (f", then the same with `--mechanisms {','.join(slow)} --seeds {SLOW_SEEDS}` into the same directory"
                if slow else "") + ")",
             f"- when: {dt.datetime.now().strftime('%Y-%m-%d %H:%M')}; {seconds / 60:.0f} min wall on 2 cores shared "
             f"with other jobs (1-min load average at the end {load:.1f})"
             + (f", over {len(history)} invocations (a resumed comparison: "
                + "; ".join(f"{h['when']} {h['seconds'] / 60:.0f} min, {','.join(h['mechanisms'])}" for h in history)
                + ")" if len(history) > 1 else ""),
             f"- input: `specs/runs/{spec}.toml` ({meta['n_blocks']:,} blocks, schema `{meta['schema']}`), the "
             "spec's production budget; seeded noise (NOT private), the same seeds for every mechanism",
             f"- MAE and bias over all {SEEDS} seeds"
             + (f" ({', '.join(slow)}: seeds 0..{SLOW_SEEDS - 1}, see the `seeds` column)" if slow else "") + "; "
             f"the attack (RAP-Rank with the `{meta['schema']}` tables, ties "
             f"averaged) on the releases of seeds 0..{ATTACK_SEEDS - 1} only, on the same "
             f"{len(meta['attack_blocks'])} blocks, to fit the shared cores",
             f"- TopDown's release is a whole `das run` (persons and units, tables, validation) with {WORKERS} "
             "workers; the other mechanisms' `synthesize` makes the persons release in one process",
             *([f"- not run: {', '.join(f'{m} (needs the extra das[{e}], not installed here)' for m, e in missing.items())}"]
               if missing else []),
             *(["- failed releases (not in the table): "
                + "; ".join(f"{f['mechanism']} seed {f['seed']}" for f in meta["failures"])] if meta["failures"] else []),
             f"- report with plots: `benchmarks/recorded/compare_{spec}/report.md`", "",
             render_table(table).split("\n\n", 1)[1], "",
             f"![accuracy](benchmarks/recorded/compare_{spec}/accuracy.png)",
             f"![attack](benchmarks/recorded/compare_{spec}/attack.png)", ""]
    (RECORDED / f"compare_{spec}.md").write_text("\n".join(lines))
    figures = {"seconds": seconds, "seeds": float(SEEDS), "attack_seeds": float(ATTACK_SEEDS)}
    for row in table.itertuples():
        for column in ("mae_block", "rap_rank_at_u"):  # the rest is in the recorded table
            value = getattr(row, column)
            if value == value:  # not NaN
                figures[f"{column}_{row.estimator}"] = float(value)
    return figures


def perry() -> dict:
    return _compare("al_perry", "Perry County AL")


def grand_isle() -> dict:
    return _compare("vt_grand_isle", "Grand Isle County VT")


BENCHES = [
    Bench("compare.al_perry", "das compare on Perry County AL (10,588 persons, 511 blocks): TopDown (+ its WLS and "
          "noisy estimates) and every registered mechanism, 20 seeds, production budget, attack on 10 blocks of the "
          "first seeds; table and report in benchmarks/recorded/compare_al_perry*",
          perry, key="seconds", repeats=1),
    Bench("compare.vt_grand_isle", "das compare on Grand Isle County VT (6,970 persons, 219 blocks), as compare.al_perry",
          grand_isle, key="seconds", repeats=1),
]
