"""Benchmark runner behind scripts/bench: see benchmarks/_harness.py for the contract.

Every repetition runs in a fresh subprocess, so its peak memory (of its whole process tree) is its own. Results
are kept in benchmarks/results.json (one entry per benchmark, replaced when re-run) and
BENCHMARKS.md is regenerated from all of them.
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import os
import pkgutil
import platform
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from das.core.options import ExactParser  # noqa: E402  (after the path above)

RESULTS = ROOT / "benchmarks" / "results.json"
REPORT = ROOT / "BENCHMARKS.md"
RECORDED = ROOT / "benchmarks" / "recorded"

CHILD = """
import json, os, resource, sys, threading, time, importlib
sys.path.insert(0, {root!r})
from benchmarks._harness import tree_rss_kb


peak = [0]
done = threading.Event()


def poll():
    while not done.is_set():
        peak[0] = max(peak[0], tree_rss_kb())
        done.wait(0.05)


threading.Thread(target=poll, daemon=True).start()
fn = getattr(importlib.import_module({module!r}), {name!r})
t0 = time.perf_counter()
figures = dict(fn())
figures.setdefault("wall_seconds", time.perf_counter() - t0)
done.set()
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
figures["peak_rss_mb"] = me.ru_maxrss / 1024
figures["peak_tree_mb"] = max(peak[0], me.ru_maxrss) / 1024
figures.setdefault("cpu_seconds", me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime)
print("@@RESULT@@" + json.dumps(figures))
"""


def discover():
    import benchmarks

    benches = []
    for info in pkgutil.iter_modules(benchmarks.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"benchmarks.{info.name}")
        benches.extend(getattr(module, "BENCHES", []))
    return benches


def run_once(fn) -> dict:
    code = CHILD.format(root=str(ROOT), module=fn.__module__, name=fn.__name__)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    for line in proc.stdout.splitlines():
        if line.startswith("@@RESULT@@"):
            return json.loads(line[len("@@RESULT@@"):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    raise RuntimeError(" / ".join(tail) or f"exit code {proc.returncode}")


def measure(fn, repeats: int) -> dict:
    runs = [run_once(fn) for _ in range(repeats)]
    keys = sorted(set().union(*runs))
    return {
        "runs": repeats,
        "median": {k: statistics.median(r[k] for r in runs if k in r) for k in keys},
        "all": {k: [r.get(k) for r in runs] for k in keys},
    }


def machine() -> dict:
    cpu = platform.processor()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(open("/proc/meminfo").readline().split()[1])
        mem = f"{kb / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    import numpy

    return {"cpu": cpu, "cores": os.cpu_count(), "memory": mem,
            "python": platform.python_version(), "numpy": numpy.__version__,
            "os": platform.platform(), "load": f"{os.getloadavg()[0]:.2f}"}


def fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if x == 0 or 0.01 <= abs(x) < 1e5:
            return f"{x:,.3g}" if abs(x) < 100 else f"{x:,.0f}"
        return f"{x:.3g}"
    return str(x)


def render(results: dict) -> str:
    lines = ["# Benchmarks", "",
             "Written by `scripts/bench` (do not edit by hand). Each figure is the median of the",
             "runs shown; every run is a fresh process. `peak MB` is the peak resident memory of its whole",
             "process tree (the run and every worker or subprocess it starts, polled every 50 ms from /proc;",
             "`peak_rss_mb`, the largest single process), `cpu_seconds` the CPU time of the tree (self and",
             "waited-for children) unless the benchmark reports its own.",
             "Ratio: ours against the reference on the headline figure (> 1 means ours is better).", ""]
    for name in sorted(results):
        r = results[name]
        m = r["machine"]
        lines += [f"## {name}", "", r["description"], "",
                  f"- when: {r['when']}; machine: {m['cpu']}, {m['cores']} cores, {m['memory']}, "
                  f"Python {m['python']}, numpy {m['numpy']}"
                  + (f"; 1-min load average at start {m['load']}" if m.get("load") else ""),
                  f"- command: `{r['command']}`", f"- runs: {r['ours'].get('runs', '-')}"]
        if r.get("target"):
            lines.append(f"- target: {r['target']}")
        lines.append("")
        if "error" in r["ours"]:
            lines += [f"**failed**: {r['ours']['error']}", ""]
            continue
        lines += ["| | " + r["key"] + " | peak MB | ratio | other figures |", "|---|---|---|---|---|"]
        ours = r["ours"]["median"]
        rows = [("**das**", r["ours"])] + [(label, res) for label, res in r.get("references", {}).items()]
        for label, res in rows:
            if "error" in res:
                lines.append(f"| {label} | unavailable: {res['error']} | | | |")
                continue
            med = res["median"]
            ratio = ""
            if res is not r["ours"] and med.get(r["key"]) and ours.get(r["key"]):
                a, b = ours[r["key"]], med[r["key"]]
                ratio = fmt(a / b if r["higher_is_better"] else b / a) + "x"
            other = ", ".join(f"{k} {fmt(v)}" for k, v in med.items()
                              if k not in (r["key"], "peak_tree_mb", "wall_seconds"))
            peak = med.get("peak_tree_mb", med.get("peak_rss_mb"))
            lines.append(f"| {label} | {fmt(med.get(r['key']))} | {fmt(peak)} "
                         f"| {ratio} | {other} |")
        lines.append("")
    recorded = sorted(RECORDED.glob("*.md"))
    if recorded:
        lines += ["# Recorded studies", "",
                  "Longer studies run by their own scripts, too long to repeat with every benchmark run;",
                  f"each is kept in `{RECORDED.relative_to(ROOT)}/` with its command, date and conditions.", ""]
        lines += [p.read_text().strip() + "\n" for p in recorded]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = ExactParser(prog="scripts/bench", description=__doc__)
    p.add_argument("names", nargs="*", help="run benchmarks whose name starts with one of these (default: every "
                                            "benchmark of the default suite)")
    p.add_argument("--repeats", type=int, help="override each benchmark's number of runs")
    p.add_argument("--no-references", action="store_true", help="skip the side-by-side references")
    p.add_argument("--list", action="store_true")
    args = p.parse_args(argv)
    benches = discover()
    chosen = [b for b in benches if any(b.name.startswith(n) for n in args.names)] if args.names else \
        [b for b in benches if b.default]
    if args.list or not chosen:
        for b in benches:
            print(f"{b.name:40s} {'' if b.default else '(only when named) '}{b.description}")
        return 0 if args.list else 1
    command = "scripts/bench " + " ".join(sys.argv[1:] if argv is None else argv)
    for b in chosen:
        repeats = args.repeats or b.repeats
        print(f"[bench] {b.name}: {repeats} runs", flush=True)
        entry = {"description": b.description, "key": b.key, "higher_is_better": b.higher_is_better,
                 "target": b.target, "command": command.strip(), "machine": machine(),
                 "when": dt.datetime.now().strftime("%Y-%m-%d %H:%M"), "references": {}}
        try:
            entry["ours"] = measure(b.run, repeats)
        except RuntimeError as e:
            entry["ours"] = {"error": str(e)}
        print(f"[bench]   das: {entry['ours'].get('median', entry['ours'])}", flush=True)
        if not args.no_references:
            for label, fn in b.references.items():
                try:
                    entry["references"][label] = measure(fn, max(1, min(repeats, 3)))
                except RuntimeError as e:
                    entry["references"][label] = {"error": str(e)}
                print(f"[bench]   {label}: {entry['references'][label].get('median', entry['references'][label])}", flush=True)
        # another invocation may have written its own benchmarks since this one started (hours-long runs side by
        # side): keep theirs, replace only this one's entry
        results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
        results[b.name] = entry
        RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True))
        REPORT.write_text(render(results))
    print(f"[bench] wrote {REPORT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
