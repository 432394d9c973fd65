"""The stress harness of issue 41: draw the noise many times for the problems that fail rarely, solve each, count.

    scripts/bench stress                    # every group (hours; never part of a bare `scripts/bench`)
    scripts/bench stress.roots              # one group
    DAS_STRESS_DRAWS=roots=2,chains=2,largest=2,runs=1 scripts/bench stress   # a smoke run
    python -m benchmarks.stress run roots   # one group in this process: figures as JSON, BENCHMARKS.md untouched
    python -m benchmarks.stress list        # every case of every group and the draws it would get
    python -m benchmarks.stress replay roots/vt/six/1 17   # rebuild draw 17 of that case, solve it, print the outcome

Groups (a Bench `stress.<group>` each) and their cases, each case a name `group/...`:

- `roots`: the top of each state, as das.topdown.engine's `_solve_root` builds it: the nation's own noisy
  answers, its only state measured again (das.topdown.batch.single_child_chains), `level_bounds` from the
  inputs' invariants, the spec's passes at the nation (`specs/runs/vt_demo.toml`: hhgq and hhinstlevels
  first), solved by `solve_root`. States `vt`, `de` (shipped) and `hi` (written by `scripts/make_fixtures
  --only hi`), spines `six` (`pl94_six_level`) and `five` (`pl94_five_level`), budgets `1`, `10`, `100` (the
  strategy's rho divided by it): `roots/vt/six/1` ... `roots/hi/five/100`.
- `chains`: below the root, a parent one of whose children has a single child: that child's chain of only
  children is measured again and enters the parent's problem (`single_child_chains`, `read_single_children`).
  Per state, spine and parent level, the parent with the fewest child x cell pairs among those with two or
  more children and such a chain (a parent with one child copies its histogram: no solve).
  `chains/hi/six/state/1` is Hawaii's counties, Kalawao's one tract measured again with its chain.
- `largest`: the largest parents of `scripts/make_big_state` states (spec and strategies as written there,
  production budget only): `largest/big/county-2400` (the tract problem of the county with the most tracts
  of the default big state, 2,400), `largest/big/county-1000` (the next county), `largest/big/tract` and
  `largest/big/block-group` (the parent of that level with the most child x cell pairs),
  `largest/honolulu/county-488` and `largest/honolulu/block-group` (`--big 488 --small '' --tracts-from
  hi:003`: Honolulu's tracts twice).
- `runs`: `das run vt_demo --out TMP --workers 2` with the operating system's randomness, whole: exit code,
  validation, the manifest's uncertified optima, failsafe events and largest relative gap, wall and CPU; at the
  spec's budget (`runs/vt_demo/1`) and with `--rho` 1/10 and 1/100 of it (`runs/vt_demo/10`, `runs/vt_demo/100`);
  and seeded, `--seed N` for N = 1..20 (`runs/vt_demo/seeded`: seeds 10, 15, 17 and 20 crashed before issue 41).

Below the root the parent's counts are the true sum of its children (as benchmarks/largest_parent.py): a run's
parent is the solved one, whose difference from the truth is what makes a child's bounds infeasible; that, the
failsafe's usual cause, is only exercised by the `runs` group.

Every draw is reproducible: draw i of case c has its noise from `make_random_source(SEED).spawn(c).spawn(i)`,
each measurement from a stream below that named as the pipeline names them (`persons/<level>/<query>`), das's
exact discrete Gaussian (`das.topdown.measure.noisy_answers`) on the true answers. SEED is 41 (`DAS_STRESS_SEED`).
A crash (any exception from building or solving) is caught, counted with its type, message and where it was
raised, and the harness goes on; every crash, uncertified optimum, failsafe event and rounding fallback is listed
by (case, draw) in benchmarks/recorded/stress.md. A whole run with the operating system's randomness cannot be
redrawn: a failing run's directory is kept (`das run --resume DIR` re-solves it from its NMF).

Environment:
- `DAS_STRESS_DRAWS`: draws per case, `KEY=N,...`, a key a case name or a prefix of it by whole components
  (`roots`, `roots/vt`, `largest/big/county-2400`); the longest matching key given wins, and only a case no
  key given matches takes its default (`DEFAULT_DRAWS`). N = 0 leaves a case out.
- `DAS_STRESS_SEED`: the seed of the draws (default 41).
- `DAS_STRESS_DIR`: where inputs are written and failing runs kept (default TMPDIR/das_stress); the big states
  are read from (or written to) `DAS_BIG_STATE_DIR` (default TMPDIR/das_big_state), as `scale.big_state`'s.
- `DAS_STRESS_RECORD`: where stress.md and stress/<group>.json are written (default benchmarks/recorded).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks._harness import Bench
from das.core.options import ExactParser

ROOT = Path(__file__).resolve().parents[1]
SEED = int(os.environ.get("DAS_STRESS_SEED", "41"))
WORK = Path(os.environ.get("DAS_STRESS_DIR", Path(tempfile.gettempdir()) / "das_stress"))
BIG_STATES = Path(os.environ.get("DAS_BIG_STATE_DIR", Path(tempfile.gettempdir()) / "das_big_state"))
RECORD = Path(os.environ.get("DAS_STRESS_RECORD", ROOT / "benchmarks" / "recorded"))

GROUPS = ("roots", "chains", "largest", "runs")
# the full run: 3 states x 2 spines x 3 budgets x 120 = 2,160 roots; 7 chain shapes x 3 budgets x 100 = 2,100
# chains; every largest parent 200 times but the 2,400-tract county's (100-200 s a solve) 20; 30 whole runs at the
# production budget, 10 at 1/10 and 10 at 1/100 of it
DEFAULT_DRAWS = {"roots": 120, "chains": 100, "largest": 200, "largest/big/county-2400": 20, "runs": 30,
                 "runs/vt_demo/10": 10, "runs/vt_demo/100": 10, "runs/vt_demo/seeded": 20}
BUDGETS = (1, 10, 100)  # the strategy's rho divided by each
STATES = {"vt": ROOT / "geography_fixtures" / "vt", "de": ROOT / "geography_fixtures" / "de", "hi": None}
SPINES = {"six": ("pl94_six_level", ("nation", "state", "county", "tract", "block_group", "block")),
          "five": ("pl94_five_level", ("nation", "state", "county", "tract", "block"))}
SETTINGS_SPEC = "vt_demo"  # solver, rounding and passes of the fixture states' problems (the demo's spec)
BIG = {"big": ("--big", "2400,1000", "--small", "vt"),  # scripts/make_big_state's defaults (scale.big_state's input)
       "honolulu": ("--big", "488", "--small", "", "--tracts-from", "hi:003")}
SAFE_ROUNDINGS = ("lp", "copy", "empty")  # anything else is a fallback (the MIP, the hard rules only)


# ---------------------------------------------------------------------------------------------
# Cases and their draws


@dataclass(frozen=True)
class Case:
    """One problem shape, drawn many times: `level` is the parent's level (the root's at a root), `parent` how
    the parent is chosen at it (None: the root)."""

    name: str           # group/...: stable; the key of DAS_STRESS_DRAWS and of `replay`
    source: str         # a state of STATES, or a big state of BIG
    spine: str          # a spine of SPINES, or "spec" (a big state's own levels and strategy)
    level: str
    budget: int = 1
    parent: tuple | None = None  # ("rank", k): k-th most children; ("pairs", k): k-th most child x cell pairs;
    #                              ("index", i): the i-th geounit of `level`

    @property
    def group(self) -> str:
        return self.name.split("/")[0]


def draws_wanted(name: str, given: str | None = None) -> int:
    """The draws of case `name`: from DAS_STRESS_DRAWS (or `given`), else DEFAULT_DRAWS (see the module).

    >>> draws_wanted("largest/big/county-2400", "largest=2"), draws_wanted("roots/vt/six/1", "largest=2")
    (2, 120)
    >>> draws_wanted("roots/vt/six/1", "roots=5,roots/vt=7"), draws_wanted("roots/vtx/six/1", "roots/vt=7,roots=5")
    (7, 5)
    """
    given = os.environ.get("DAS_STRESS_DRAWS", "") if given is None else given
    wanted = {}
    for item in filter(None, (s.strip() for s in given.split(","))):
        key, _, n = item.partition("=")
        if not n.strip().isdigit():
            raise ValueError(f"DAS_STRESS_DRAWS: {item!r} is not KEY=N (N a whole number)")
        wanted[key.strip().strip("/")] = int(n)
    for table in (wanted, DEFAULT_DRAWS):
        keys = [k for k in table if name == k or name.startswith(k + "/")]
        if keys:
            return table[max(keys, key=len)]
    raise ValueError(f"no draw count for case {name!r}")


def check_draw_keys(names: list[str], group: str, given: str | None = None) -> None:
    """Refuse a key of DAS_STRESS_DRAWS that names no group, or, for `group`, none of its cases `names` (a typo
    would otherwise leave the defaults in place: hours instead of a smoke run)."""
    given = os.environ.get("DAS_STRESS_DRAWS", "") if given is None else given
    for item in filter(None, (s.strip() for s in given.split(","))):
        key = item.partition("=")[0].strip().strip("/")
        first = key.split("/")[0]
        if first not in GROUPS or first == group and not any(n == key or n.startswith(key + "/") for n in names):
            raise ValueError(f"DAS_STRESS_DRAWS: {key!r} is no group ({', '.join(GROUPS)}) nor a case of one "
                             "(`python -m benchmarks.stress list` lists them)")


def draw_source(case: str, draw: int):
    """The random source of draw `draw` of case `case`: das's seeded source, spawned by both."""
    from das.privacy.randomness import make_random_source

    return make_random_source(SEED).spawn(case).spawn(str(draw))


# ---------------------------------------------------------------------------------------------
# Inputs


def hawaii() -> Path:
    """Hawaii's fixture (not shipped), written once by scripts/make_fixtures into WORK."""
    out = WORK / "fixtures"
    if not (out / "hi" / "persons.parquet").is_file():
        subprocess.run([sys.executable, str(ROOT / "scripts" / "make_fixtures"), "--only", "hi", "--out", str(out)],
                       check=True, capture_output=True, text=True)
    return out / "hi"


def big_state(name: str) -> Path:
    """A scripts/make_big_state state (BIG), written once into BIG_STATES (where scale.big_state keeps its own)."""
    from benchmarks.big_state import write_input

    out = BIG_STATES / name
    write_input(out, BIG[name])
    return out


@dataclass(frozen=True, eq=False)
class Setup:
    """One state's inputs read as a run reads them, with the strategy and post-processing settings of its spec."""

    name: str
    schema: object
    geography: object
    invariants: object
    histograms: object   # the persons' true block histograms
    strategy: object
    rho: object          # the release's budget (exact)
    options: object      # das.topdown.engine.EngineOptions: solver, rounding, passes (per level)

    def plan(self, budget: int):
        """The release's measurements at its rho divided by `budget` (every variance times it)."""
        from das.privacy.accounting import allocate

        return allocate(self.strategy, self.rho / budget)


@functools.lru_cache(maxsize=1)
def setup(source: str, spine: str) -> Setup:
    """The inputs of `source` (a state of STATES on a spine of SPINES, or a big state of BIG on its own spec)."""
    from das.driver.runspec import load_run_spec

    if source in BIG:
        directory = big_state(source)
        spec = load_run_spec(directory / "spec.toml")
        persons, units = next((directory / "persons").glob("*.parquet")), next((directory / "units").glob("*.parquet"))
        return read_setup(source, persons, units, spec=spec, strategy=spec.persons.strategy, levels=spec.levels)
    directory = STATES[source] or hawaii()
    strategy, levels = SPINES[spine]
    return read_setup(source, directory / "persons.parquet", directory / "units.parquet",
                      spec=load_run_spec(SETTINGS_SPEC), strategy=strategy, levels=levels)


def read_setup(name: str, persons: Path, units: Path, *, spec, strategy: str, levels: tuple[str, ...]) -> Setup:
    """Inputs read and checked as a run reads them, with `spec`'s schemas, budget and post-processing settings
    and the persons strategy `strategy` over `levels`."""
    from das.driver.pipeline import release_rho
    from das.io.microdata import read_inputs
    from das.model.geography import Geography
    from das.model.rules import Invariants
    from das.model.schema import load_schema
    from das.privacy.strategy import load_strategy, validate_strategy
    from das.topdown.engine import EngineOptions

    for path in (persons, units):
        if not Path(path).is_file():
            raise FileNotFoundError(f"stress: the input {path} of {name} is missing")
    schema = load_schema(spec.persons.schema)
    persons_strategy = load_strategy(strategy)
    validate_strategy(persons_strategy, schema, levels)
    inputs = read_inputs(persons, units, schema, load_schema(spec.units.schema) if spec.units else None)
    geography = Geography.from_blocks(inputs.inventory.blocks, levels)
    invariants = Invariants.from_inputs(inputs.inventory, inputs.person_histograms, geography)
    options = EngineOptions(solver=spec.solver, rounding=spec.rounding, passes=spec.passes,
                            passes_by_level=spec.passes_by_level, progress=False)
    return Setup(name, schema, geography, invariants, inputs.person_histograms, persons_strategy,
                 release_rho(spec.persons, persons_strategy, spec.delta), options)


# ---------------------------------------------------------------------------------------------
# Problems


def chain_units(geography, level: str, lo: int, hi: int) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """das.topdown.batch.single_child_chains without its NMF: for the geounits lo..hi-1 of `level`, at each finer
    level, (that level, the geounits whose chain of only children reaches it, the row 0..hi-lo-1 each descends
    from): the engine's own walk (`only_children`)."""
    from das.topdown.batch import only_children

    return only_children(geography, level, lo=lo, hi=hi)


@dataclass(frozen=True)
class Measured:
    """Geounits measured in a problem: their level, geocodes and true answers per query; `rows`: the child each
    one is the only descendant of (None: the children themselves, in order)."""

    level: str
    geocodes: np.ndarray
    truth: dict
    rows: np.ndarray | None = None

    def noisy(self, plan, rng) -> list:
        """Their noisy answers (das.io.nmf.NoisyAnswers, in the plan's order, as the NMF holds them) of one draw."""
        from das.io.nmf import NoisyAnswers
        from das.topdown.measure import noisy_answers

        return [NoisyAnswers(m.query, self.level, self.geocodes,
                             noisy_answers(self.truth[m.query], m.sigma2, rng.spawn(f"persons/{self.level}/{m.query}")),
                             m.sigma2)
                for m in plan.level(self.level)]


def _measured(s: Setup, level: str, units: np.ndarray, rows: np.ndarray | None = None) -> Measured:
    from das.topdown.measure import true_answers

    histograms = s.geography.aggregate(s.histograms, level)[units]
    queries = {m.query for m in s.plan(1).items}
    return Measured(level, s.geography.units(level)[units], {q: true_answers(histograms, s.schema, q) for q in queries},
                    rows)


@dataclass(frozen=True, eq=False)
class Prepared:
    """A problem without its noise: what it measures, its bounds and its parent; `shape` and `variables` say what
    it is."""

    setup: Setup
    plan: dict
    own: Measured
    chains: tuple
    bounds: list
    parent: tuple | None   # (geocode, true counts over the schema's cells); None at the root
    shape: str = ""
    variables: int = 0


def _parent_index(s: Setup, case: Case) -> int:
    """The geounit of `case.level` that `case.parent` picks (see Case)."""
    how, k = case.parent
    if how == "index":
        return int(k)
    children = np.diff(s.geography.child_ranges(case.level))
    if how == "rank":
        return int(np.argsort(-children, kind="stable")[k])
    cells = np.diff(s.geography.aggregate(s.histograms, case.level).tocsr().indptr)
    return int(np.argsort(-(children * cells), kind="stable")[k])


@functools.lru_cache(maxsize=1)
def prepare(case: Case) -> Prepared:
    """The case's geounits, true answers, bounds and parent: everything but the noise (built once per case)."""
    s = setup(case.source, case.spine)
    return prepared(s, case.level, None if case.parent is None else _parent_index(s, case), case.budget)


def prepared(s: Setup, level: str, parent: int | None, budget) -> Prepared:
    """The problem of geounit `parent` of `level` (None: the root, `level` its level) at the release's rho divided
    by `budget`, but its noise."""
    from das.model.rules import level_bounds
    from das.topdown.problem import parent_problem, root_problem

    g = s.geography
    if parent is None:
        child, lo, hi, top = level, 0, 1, None
    else:
        child = g.child_level(level)
        lo, hi = (int(x) for x in g.child_ranges(level)[parent:parent + 2])
        top = (str(g.units(level)[parent]),
               np.asarray(g.aggregate(s.histograms, level)[parent].todense()).ravel().astype(np.int64))
    chains = tuple(_measured(s, finer, units, rows) for finer, units, rows in chain_units(g, child, lo, hi))
    bounds = level_bounds(s.schema, s.invariants, g, level=child, lo=lo, hi=hi)
    if top is None:
        size = root_problem(s.schema, [], bounds)
        shape = f"{level} (root)" + "".join(f" + its only {c.level}" for c in chains)
    else:
        size = parent_problem(s.schema, top[0], g.units(child)[lo:hi], top[1], answers=[], bounds=bounds)
        shape = f"{level} {top[0]}: {hi - lo} {_plural(child)}" + (
            "; only children measured again: " + ", ".join(f"{len(c.rows)} {_plural(c.level)}" for c in chains)
            if chains else "")
    return Prepared(s, s.plan(budget), _measured(s, child, np.arange(lo, hi)), chains, bounds, top, shape,
                    int(size.allowed.sum()))


def _plural(level: str) -> str:
    """A level's name in the plural, in words: "block groups", "counties"."""
    words = level.replace("_", " ")
    return words[:-1] + "ies" if words.endswith("y") else words + "s"


@dataclass
class Built:
    """One draw of a problem, ready to solve, as the engine would hand it to the solver: at the root the arguments
    of `solve_root`, below it the ParentProblem of `solve_parent`."""

    prepared: Prepared
    own: list             # the children's own noisy answers (das.io.nmf.NoisyAnswers)
    finer: list           # their only descendants' (das.topdown.problem.ChildAnswers)
    settings: object      # das.topdown.solve.SolveSettings
    problem: object       # the ParentProblem (None at the root)
    build_seconds: float = 0.0

    def solve(self):
        """das's ParentSolution of this draw."""
        from das.topdown.solve import solve_parent, solve_root

        if self.problem is None:
            return solve_root(self.prepared.setup.schema, self.own, self.prepared.bounds, settings=self.settings,
                              descendants=self.finer)
        return solve_parent(self.problem, solver=self.settings.solver, rounding=self.settings.rounding)


def built(p: Prepared, rng) -> Built:
    """A draw of `p` from `rng`: its noisy answers (das's sampler), and the problem as the engine builds it."""
    from das.topdown.problem import ChildAnswers, measured, parent_problem

    t0 = time.perf_counter()
    own = p.own.noisy(p.plan, rng)
    finer = [ChildAnswers(a, c.rows) for c in p.chains for a in c.noisy(p.plan, rng)]
    settings = p.setup.options.settings(p.own.level)
    problem = None
    if p.parent is not None:
        problem = parent_problem(p.setup.schema, p.parent[0], p.own.geocodes, p.parent[1],
                                 answers=measured(own, finer), bounds=p.bounds, passes=settings.passes)
    return Built(p, own, finer, settings, problem, time.perf_counter() - t0)


def build(case: Case, draw: int) -> Built:
    """Draw `draw` of `case` (see the module)."""
    return built(prepare(case), draw_source(case.name, draw))


def _where(error: BaseException) -> str:
    """file:line function where an exception was raised (the innermost frame)."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return ""
    f = frames[-1]
    return f"{Path(f.filename).name}:{f.lineno} {f.name}"


def solve_draw(case: Case, draw: int) -> dict:
    """Build and solve draw `draw` of `case`; the outcome as a record. Any exception is caught and recorded."""
    record = {"case": case.name, "draw": draw}
    c0, t0 = time.process_time(), time.perf_counter()
    try:
        built = build(case, draw)
        record["build_s"] = built.build_seconds
        c0, t0 = time.process_time(), time.perf_counter()
        solution = built.solve()
    except Exception as error:  # noqa: BLE001 - every crash is counted, none stops the harness
        record.update(cpu_s=time.process_time() - c0, wall_s=time.perf_counter() - t0, crash=type(error).__name__,
                      message=str(error)[:300], where=_where(error))
        return record
    certificate = solution.certificate or {}
    record.update(cpu_s=time.process_time() - c0, wall_s=time.perf_counter() - t0,
                  uncertified=int(certificate.get("uncertified", 0)), retried=int(certificate.get("retried", 0)),
                  max_rel_gap=float(certificate.get("max_rel_gap", 0.0)), failsafe=len(solution.events),
                  events=[f"{e.parent or '(root)'} {e.stage}: {e.relaxed} (slack {e.slack:.3g})" for e in solution.events],
                  rounding=solution.rounding_method)
    extra = {k: v for k, v in certificate.items() if v and k not in ("problems", "objective", "gap", "max_rel_gap",
                                                                     "retried", "uncertified")}
    if extra:  # what the certificate says beyond the counts (e.g. where an uncertified optimum was)
        record["certificate"] = json.loads(json.dumps(extra, default=str))
    return record


# ---------------------------------------------------------------------------------------------
# The groups' cases


def root_cases() -> list[Case]:
    return [Case(f"roots/{state}/{spine}/{budget}", state, spine, "nation", budget)
            for state in STATES for spine in SPINES for budget in BUDGETS]


def chain_parents(geography, histograms) -> dict[str, int]:
    """level -> the parent at it (below the root) with the fewest child x cell pairs among those with two or more
    children one of which has a single child (ties: the first); levels without one are left out."""
    found = {}
    for level in geography.levels[1:-2]:
        child = geography.child_level(level)
        offsets, below = geography.child_ranges(level), np.diff(geography.child_ranges(child))
        single = np.r_[0, np.cumsum(below == 1)]
        chained = single[offsets[1:]] - single[offsets[:-1]]
        children = np.diff(offsets)
        cells = np.diff(geography.aggregate(histograms, level).tocsr().indptr)
        ok = np.flatnonzero((children >= 2) & (chained >= 1))
        if len(ok):
            found[level] = int(ok[np.argmin((children * cells)[ok])])
    return found


def chain_cases() -> list[Case]:
    cases = []
    for state in STATES:
        for spine in SPINES:
            s = setup(state, spine)
            for level, index in chain_parents(s.geography, s.histograms).items():
                cases += [Case(f"chains/{state}/{spine}/{level}/{budget}", state, spine, level, budget, ("index", index))
                          for budget in BUDGETS]
    return cases


def largest_cases() -> list[Case]:
    return [Case("largest/big/county-2400", "big", "spec", "county", 1, ("rank", 0)),
            Case("largest/big/county-1000", "big", "spec", "county", 1, ("rank", 1)),
            Case("largest/big/tract", "big", "spec", "tract", 1, ("pairs", 0)),
            Case("largest/big/block-group", "big", "spec", "block_group", 1, ("pairs", 0)),
            Case("largest/honolulu/county-488", "honolulu", "spec", "county", 1, ("rank", 0)),
            Case("largest/honolulu/block-group", "honolulu", "spec", "block_group", 1, ("pairs", 0))]


CASES = {"roots": root_cases, "chains": chain_cases, "largest": largest_cases}


def find_case(name: str) -> Case:
    group = name.split("/")[0]
    if group not in CASES:
        raise SystemExit(f"no case {name!r}: cases are of the groups {', '.join(CASES)} (runs cannot be replayed: "
                         "resume a kept run directory with `das run --resume DIR`)")
    for case in CASES[group]():
        if case.name == name.strip("/"):
            return case
    raise SystemExit(f"no case {name!r}; `python -m benchmarks.stress list` lists them")


# ---------------------------------------------------------------------------------------------
# Counting


@dataclass
class Tally:
    """The records of one case, summed."""

    case: str
    level: str = ""
    shape: str = ""
    variables: int = 0
    records: list = field(default_factory=list)

    def row(self) -> dict:
        r = self.records
        cpu = [x["cpu_s"] for x in r if "crash" not in x]
        return {"case": self.case, "level": self.level, "shape": self.shape, "variables": self.variables,
                "draws": len(r), "crashes": sum("crash" in x for x in r),
                "uncertified": sum(x.get("uncertified", 0) for x in r), "failsafe": sum(x.get("failsafe", 0) for x in r),
                "fallbacks": sum(x.get("rounding", "lp") not in SAFE_ROUNDINGS for x in r),
                "retried": sum(x.get("retried", 0) for x in r),
                "max_rel_gap": max((x.get("max_rel_gap", 0.0) for x in r), default=0.0),
                "cpu_median_s": statistics.median(cpu) if cpu else float("nan"),
                "cpu_max_s": max(cpu, default=float("nan")),
                "build_median_s": statistics.median(x.get("build_s", float("nan")) for x in r) if r else float("nan")}


def failures(records: list[dict]) -> list[dict]:
    """The draws to look at: crashed, uncertified, failsafe or a rounding fallback (each with what happened)."""
    found = []
    for x in records:
        kinds = [k for k, bad in (("crash", "crash" in x), ("uncertified", x.get("uncertified", 0) > 0),
                                  ("failsafe", x.get("failsafe", 0) > 0),
                                  ("fallback", x.get("rounding", "lp") not in SAFE_ROUNDINGS)) if bad]
        if kinds:
            found.append({**x, "kinds": kinds})
    return found


def figures_of(rows: list[dict]) -> dict:
    """A group's figures for BENCHMARKS.md: counts over every draw, the largest gap, CPU per problem."""
    draws = sum(r["draws"] for r in rows)
    out = {"cases": float(len(rows)), "draws": float(draws)}
    for key in ("crashes", "uncertified", "failsafe", "fallbacks", "retried"):
        out[key] = float(sum(r[key] for r in rows))
    out["max_rel_gap"] = max((r["max_rel_gap"] for r in rows), default=0.0)
    return out


def run_cases(group: str) -> dict:
    """Every case of `group`, each drawn `draws_wanted` times; writes the record and returns the figures."""
    every = CASES[group]()
    check_draw_keys([c.name for c in every], group)
    cases = [c for c in every if draws_wanted(c.name) > 0]
    if not cases:
        raise RuntimeError(f"stress.{group}: no case has a draw (DAS_STRESS_DRAWS)")
    tallies, cpu = [], []
    for case in cases:
        p = prepare(case)  # a missing input stops the group here, loudly
        tally = Tally(case.name, case.level, p.shape, p.variables)
        for draw in range(draws_wanted(case.name)):
            record = solve_draw(case, draw)
            tally.records.append(record)
            if "crash" not in record:
                cpu.append(record["cpu_s"])
            if failures([record]):
                print(f"[stress] {case.name} draw {draw}: {', '.join(failures([record])[0]['kinds'])}: {_said(record)}",
                  file=sys.stderr, flush=True)
        tallies.append(tally)
        row = tally.row()
        print(f"[stress] {case.name}: {row['draws']} draws, {row['crashes']} crashes, {row['uncertified']} uncertified, "
              f"{row['failsafe']} failsafe, max gap {row['max_rel_gap']:.2g}, CPU median {row['cpu_median_s']:.3g} s",
              file=sys.stderr, flush=True)
    rows = [t.row() for t in tallies]
    figures = figures_of(rows)
    figures.update(cpu_median_s=statistics.median(cpu) if cpu else float("nan"), cpu_max_s=max(cpu, default=float("nan")))
    write_record(group, rows, failures([x for t in tallies for x in t.records]), figures)
    return figures


def _said(record: dict) -> str:
    if "crash" in record:
        return f"{record['crash']}: {record['message']}" + (f" ({record['where']})" if record.get("where") else "")
    where = (record.get("certificate") or {}).get("uncertified_at") or record.get("uncertified_at")
    return (f"uncertified {record.get('uncertified', 0)}, gap {record.get('max_rel_gap', 0):.3g}, failsafe "
            f"{record.get('failsafe', 0)}, rounding {record.get('rounding', '-')}"
            + (f"; uncertified at {json.dumps(where[:3], default=str)}" if where else ""))


# ---------------------------------------------------------------------------------------------
# Whole runs


RUN_SPEC = "vt_demo"
KEEP_FAILSAFE = 3  # run directories kept per case for failsafe events alone (expected at 1/100 of the budget)


SEEDED = f"runs/{RUN_SPEC}/seeded"  # `--seed N` for draw N - 1: the seeds 1..20 of issue 41 (10, 15, 17, 20 crashed)


def run_cases_of() -> list[str]:
    return [f"runs/{RUN_SPEC}/{budget}" for budget in BUDGETS] + [SEEDED]


def _run_arguments(case: str, index: int) -> list[str]:
    """`das run`'s arguments past the spec for run `index` of a case: --rho below the spec's budget, or --seed."""
    if case == SEEDED:
        return ["--seed", str(index + 1)]
    rho = run_rho(int(case.rsplit("/", 1)[1]))
    return ["--rho", rho] if rho else []


def run_rho(budget: int) -> str | None:
    """`--rho` of a whole run at the persons budget divided by `budget` (None: the spec's own)."""
    if budget == 1:
        return None
    from das.driver.pipeline import release_rho
    from das.driver.runspec import load_run_spec
    from das.privacy.strategy import load_strategy

    spec = load_run_spec(RUN_SPEC)
    return str(release_rho(spec.persons, load_strategy(spec.persons.strategy), spec.delta) / budget)


def whole_run(case: str, index: int, out: Path, *, keep: bool = True) -> dict:
    """`das run vt_demo --out OUT --workers 2` (operating-system randomness, `--rho` at a budget below the spec's;
    or seeded: `SEEDED`) in a new process; its outcome. A failing run's directory is kept under WORK/kept (its NMF
    resumes it; one with failsafe events alone only if `keep`); a passing one is deleted."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", "import sys; from das.cli import main; sys.exit(main())", "run",
                           RUN_SPEC, "--out", str(out), "--workers", "2", *_run_arguments(case, index)], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    record = {"case": case, "draw": index, "rc": proc.returncode, "wall_s": time.perf_counter() - t0,
              "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}
    record.update(manifest_figures(out / "manifest.json"))
    if record.get("valid") is False:
        record["invalid"] = True
    elif proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        record.update(crash=f"exit {proc.returncode}", message=lines[-1][:300] if lines else "")
    if proc.returncode != 0 or record.get("invalid") or record.get("uncertified") or record.get("failsafe") and keep:
        kept = WORK / "kept" / f"{case.replace('/', '-')}-{dt.datetime.now():%Y%m%d-%H%M%S}-{index}"
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(out), kept)
        (kept / "stress-stderr.txt").write_text(proc.stderr)
        record["kept"] = str(kept)
    else:
        shutil.rmtree(out, ignore_errors=True)
    return record


def manifest_figures(path: Path) -> dict:
    """Validation, uncertified optima, failsafe events and the largest relative gap from a run's manifest.json
    (read as JSON: what a run that stopped part-way wrote is read too)."""
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    levels = [lv for release in (manifest.get("levels_report") or {}).values() for lv in release]
    certificates = [lv.get("l2_certificate") or {} for lv in levels]
    where = [u for lv in levels if isinstance(lv.get("uncertified"), list) for u in lv["uncertified"]]
    figures = {"status": manifest.get("status"), "failsafe": len(manifest.get("failsafe_events") or []),
               "uncertified": sum(int(c.get("uncertified", 0)) for c in certificates),
               "retried": sum(int(c.get("retried", 0)) for c in certificates),
               "max_rel_gap": max((float(c.get("max_rel_gap", 0.0)) for c in certificates), default=0.0)}
    if where:  # each uncertified pass with its parent and level (recorded since issue 41)
        figures["uncertified_at"] = where
    validation = manifest.get("validation")
    if isinstance(validation, dict) and "valid" in validation:
        figures["valid"] = bool(validation["valid"])
    return figures


def run_runs() -> dict:
    """Whole runs of each case of run_cases_of(), drawn `draws_wanted` times; writes the record, returns the
    figures (totals over every run)."""
    cases = run_cases_of()
    check_draw_keys(cases, "runs")
    if not sum(draws_wanted(c) for c in cases):
        raise RuntimeError("stress.runs: no run asked for (DAS_STRESS_DRAWS)")
    records, rows = [], []
    WORK.mkdir(parents=True, exist_ok=True)
    for case in cases:
        mine = []
        with tempfile.TemporaryDirectory(dir=WORK) as tmp:
            for i in range(draws_wanted(case)):
                kept = sum("kept" in r and not (r.get("crash") or r.get("invalid") or r.get("uncertified")) for r in mine)
                mine.append(whole_run(case, i, Path(tmp) / f"run{i}", keep=kept < KEEP_FAILSAFE))
                r = mine[-1]
                print(f"[stress] {case} run {i}: rc {r['rc']}, valid {r.get('valid')}, uncertified {r.get('uncertified')}, "
                      f"failsafe {r.get('failsafe')}, {r['wall_s']:.0f} s"
                      + (f", {r['crash']}: {r['message']}" if "crash" in r else ""), file=sys.stderr, flush=True)
        if mine:
            rows.append(runs_row(case, mine))
        records += mine
    figures = {k: float(sum(row[k] for row in rows)) for k in ("runs", "crashes", "invalid", "uncertified", "failsafe")}
    figures["validation_failures"] = figures.pop("invalid")
    wall, cpu = [r["wall_s"] for r in records], [r["cpu_s"] for r in records]
    figures.update(max_rel_gap=max(row["max_rel_gap"] for row in rows), wall_median_s=statistics.median(wall),
                   wall_max_s=max(wall), cpu_median_s=statistics.median(cpu), cpu_max_s=max(cpu))
    bad = [{**r, "kinds": [k for k in ("crash", "invalid", "uncertified", "failsafe") if r.get(k)]} for r in records
           if "crash" in r or r.get("invalid") or r.get("uncertified") or r.get("failsafe")]
    write_record("runs", rows, bad, figures)
    return figures


def runs_row(case: str, records: list[dict]) -> dict:
    """One case's whole runs, summed (a row of the record's table)."""
    arguments = " ".join(_run_arguments(case, 0))
    shape = (f"das run {RUN_SPEC} --workers 2 --seed N, N = 1..{len(records)}" if case == SEEDED else
             f"das run {RUN_SPEC} --workers 2" + (f" {arguments}" if arguments else "") + ", OS randomness")
    wall, cpu = [r["wall_s"] for r in records], [r["cpu_s"] for r in records]
    return {"case": case, "shape": shape,
            "runs": len(records), "crashes": sum("crash" in r for r in records),
            "invalid": sum(bool(r.get("invalid")) for r in records),
            "uncertified": sum(r.get("uncertified", 0) for r in records),
            "failsafe": sum(r.get("failsafe", 0) for r in records), "retried": sum(r.get("retried", 0) for r in records),
            "max_rel_gap": max(r.get("max_rel_gap", 0.0) for r in records),
            "wall_median_s": statistics.median(wall), "wall_max_s": max(wall),
            "cpu_median_s": statistics.median(cpu), "cpu_max_s": max(cpu)}


# ---------------------------------------------------------------------------------------------
# The record: benchmarks/recorded/stress/<group>.json, rendered into stress.md


def write_record(group: str, rows: list[dict], bad: list[dict], figures: dict) -> None:
    (RECORD / "stress").mkdir(parents=True, exist_ok=True)
    record = {"group": group, "when": dt.datetime.now().strftime("%Y-%m-%d %H:%M"), "seed": SEED,
              "draws_setting": os.environ.get("DAS_STRESS_DRAWS", ""), "load": f"{os.getloadavg()[0]:.2f}",
              "code": _commit(), "figures": figures, "rows": rows, "failures": bad}
    (RECORD / "stress" / f"{group}.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    (RECORD / "stress.md").write_text(render())


def _commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def _g(x) -> str:
    if isinstance(x, float):
        return "-" if x != x else f"{x:.3g}"
    return str(x)


TABLE = ("case", "level", "shape", "variables", "draws", "crashes", "uncertified", "failsafe", "fallbacks", "retried",
         "max_rel_gap", "cpu_median_s", "cpu_max_s")
RUNS_TABLE = ("case", "shape", "runs", "crashes", "invalid", "uncertified", "failsafe", "retried", "max_rel_gap",
              "wall_median_s", "wall_max_s", "cpu_median_s", "cpu_max_s")
SHOWN_FAILURES = 60  # per group in stress.md; the JSON beside it has every one


def render() -> str:
    """stress.md from every group's record."""
    lines = ["## Stress: draws of the noise that fail rarely (issue 41)", "",
             "Written by `scripts/bench stress` (benchmarks/stress.py). Each case is one problem shape solved once per draw",
             "of the noise; draw i of case c is rebuilt and solved alone by `python -m benchmarks.stress replay c i`.",
             "crashes: any exception building or solving; uncertified: L2 optima above the 1e-6 relative gap after",
             "every retry; failsafe: events; fallbacks: roundings other than the LP; CPU: seconds per solve.", ""]
    for group in GROUPS:
        path = RECORD / "stress" / f"{group}.json"
        if not path.is_file():
            continue
        r = json.loads(path.read_text())
        table = RUNS_TABLE if group == "runs" else TABLE
        lines += [f"### stress.{group}", "",
                  f"- when: {r['when']} (code {r['code']}, 1-min load at the end {r['load']}); "
                  + ("operating-system randomness; " if group == "runs" else f"seed {r['seed']}; ") +
                  f"DAS_STRESS_DRAWS={r['draws_setting'] or '(defaults)'}",
                  "- totals: " + ", ".join(f"{k} {_g(v)}" for k, v in r["figures"].items()), "",
                  "| " + " | ".join(table) + " |", "|" + "---|" * len(table)]
        lines += ["| " + " | ".join(_g(row.get(k, "")) for k in table) + " |" for row in r["rows"]]
        lines.append("")
        if r["failures"]:
            again = ("each kept run directory resumes with `das run --resume DIR`" if group == "runs"
                     else "replay: `python -m benchmarks.stress replay CASE DRAW`")
            lines.append(f"Draws to look at ({len(r['failures'])}; {again}):")
            lines.append("")
            for x in r["failures"][:SHOWN_FAILURES]:
                where = f"; kept {x['kept']}" if "kept" in x else ""
                lines.append(f"- {x['case']} {x['draw']}: {', '.join(x['kinds'])}: {_said(x)}{where}")
            if len(r["failures"]) > SHOWN_FAILURES:
                lines.append(f"- ... {len(r['failures']) - SHOWN_FAILURES} more in benchmarks/recorded/stress/{group}.json")
            lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Benches and the command line


def run_roots() -> dict:
    return run_cases("roots")


def run_chains() -> dict:
    return run_cases("chains")


def run_largest() -> dict:
    return run_cases("largest")


RUNNERS = {"roots": run_roots, "chains": run_chains, "largest": run_largest, "runs": run_runs}
_TARGET = "0 crashes, 0 uncertified at 1e-6 (issue 41)"
BENCHES = [
    Bench("stress.roots", "the roots of VT, DE and HI, six and five levels, at the production budget, 1/10 and 1/100 of "
          "it, drawn DAS_STRESS_DRAWS times each (default 120: 2,160 problems); counts of crashes, uncertified optima, "
          "failsafe events, rounding fallbacks; detail in benchmarks/recorded/stress.md",
          run_roots, key="crashes", repeats=1, default=False, target=_TARGET),
    Bench("stress.chains", "parents whose problem holds a one-child chain measured again (VT, DE, HI; three budgets)",
          run_chains, key="crashes", repeats=1, default=False, target=_TARGET),
    Bench("stress.largest", "the largest parents of scripts/make_big_state (the 2,400- and 1,000-tract counties, a "
          "Honolulu-like 488-tract county, the largest tract and block groups), production budget",
          run_largest, key="crashes", repeats=1, default=False, target=_TARGET),
    Bench("stress.runs", "whole `das run vt_demo --workers 2` with OS randomness at the spec's persons budget (30), "
          "1/10 and 1/100 of it (10 each): crashes, validation failures, uncertified optima, failsafe events",
          run_runs, key="crashes", repeats=1, default=False,
          target="0 crashes, 0 validation failures, 0 uncertified"),
]


def replay(name: str, draw: int) -> int:
    """Rebuild draw `draw` of case `name`, solve it, print what happened (the traceback of a crash)."""
    case = find_case(name)
    p = prepare(case)
    print(f"{case.name} draw {draw}: {p.shape}, {p.variables} variables, seed {SEED}", flush=True)
    built = build(case, draw)
    c0 = time.process_time()
    try:
        solution = built.solve()
    except Exception:  # noqa: BLE001 - shown whole
        traceback.print_exc()
        return 1
    print(json.dumps({"cpu_s": time.process_time() - c0, "rounding": solution.rounding_method,
                      "events": [e.record() for e in solution.events], "certificate": solution.certificate},
                     indent=1, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = ExactParser(prog="python -m benchmarks.stress", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run groups here (figures as JSON; the record written, BENCHMARKS.md untouched)")
    run.add_argument("groups", nargs="+", choices=GROUPS)
    sub.add_parser("list", help="every case and its draws")
    again = sub.add_parser("replay", help="rebuild one draw of a case and solve it")
    again.add_argument("case")
    again.add_argument("draw", type=int)
    args = parser.parse_args(argv)
    if args.command == "replay":
        return replay(args.case, args.draw)
    if args.command == "list":
        for group in GROUPS:
            for name in [c.name for c in CASES[group]()] if group in CASES else run_cases_of():
                print(f"{name:40s} {draws_wanted(name)}")
        return 0
    for group in args.groups:
        print(json.dumps({group: RUNNERS[group]()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
