"""`das validate RUN_DIR`: the registered checks a release claims, run shard by shard and combined in order.

The driver reads the manifest, selects the checks the release holds (das.validate.registry), and runs
those that are whole-release only; before the first check with a per-state part it reads what every
state's checks share (schemas, the MDFs' columns, the states), starts each check's `alongside` reading,
and runs every check's per-state part shard by shard (`validate_shard`: a state's records of a run of
counties, das.validate.shards; in turn, or as tasks on an executor, largest first), so memory follows the
largest shard; each check's shard parts are folded into its state's part (`Check.merge`). Then it combines each check's parts in
registration order: the report lists every check once, in the same order either way.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from das.core.errors import ValidationError
from das.core.executors import largest_first
from das.core.progress import bar
from das.frame.manifest import Manifest
from das.frame.records import RunDirError
from das.frame.rundir import RunDir
from das.frame.signing import SigningError, read_public_key
from das.model.levels import STATE
from das.validate.inputs import by_state, operator_inputs
from das.validate.manifest import FIELDS_CHECK, read_problems
from das.validate.registry import NMF_HOLDS, SYNTHETIC_HOLDS, TOPDOWN_HOLDS, Check, claims, needs, select
from das.validate.release import OpenRelease, StateRows, is_nmf_release, is_topdown, open_release
from das.validate.report import Report, Stop, first
from das.validate.shards import SHARD_PERSONS, Shard, plan

NMF_RELEASE = ("an NMF release (das measure): the noisy measurements and their certificate, published on their own; "
               "it has no MDF or tables, and is checked for what it holds")


def load_manifest(run: RunDir) -> Manifest:
    """The run's manifest, or ValidationError naming the file and what is wrong with it."""
    try:
        return run.read()
    except RunDirError as e:
        raise ValidationError(str(e)) from None


def release_claims(manifest: Manifest, report: Report, *, topdown: bool, nmf: bool = False) -> tuple[str, ...]:
    """What the release claims to hold, reported: its manifest's `holds`, and every claim of its kind
    whatever its manifest says (a TopDown release's, das.validate.release.is_topdown, a synthetic one's, or an
    NMF release's): an edited `holds` can add claims, never drop one. An NMF release claiming what only an MDF or
    a table shows is a violation (it has neither)."""
    held = () if manifest.holds is None else manifest.holds
    kind = NMF_HOLDS if nmf else TOPDOWN_HOLDS if topdown else SYNTHETIC_HOLDS
    held = tuple(dict.fromkeys([*held, *kind]))
    known = claims()
    held = sorted(held, key=lambda h: known.index(h) if h in known else len(known))  # in the order they are listed
    provable = {c.claim for c in select(held, nmf_release=nmf)}
    report.check(f"the release claims {', '.join(held) or 'nothing'}; those are checked",
                 [f"claims {h!r}, which das validate does not know (known: {', '.join(known)})"
                  for h in held if h not in known]
                 + [f"claims {h!r}, which an NMF release (no MDF, no tables) cannot hold"
                    for h in held if nmf and h in known and h not in provable])
    return tuple(h for h in held if h in provable or not nmf)


def validate_shard(release: OpenRelease, shard: Shard, checks: tuple[Check, ...]) -> dict[str, object]:
    """One shard's part of each check (its `state` function, in order) by name, reading only the shard's
    rows of the release; a check that stops the shard's checks ends the parts with its own."""
    rows = StateRows(release, shard)
    parts: dict[str, object] = {}
    for check in checks:
        if check.state is None:
            continue
        try:
            parts[check.name] = check.state(rows)
        except Stop as stop:
            parts[check.name] = stop.part
            break
    return parts


def fold(release: OpenRelease, checks: tuple[Check, ...], shards: list[dict[str, object]]) -> dict[str, object]:
    """A state's part of each check from its shards' (in geocode order): `Check.merge` of those that ran it
    (a check without one ran on the whole state: its one part)."""
    parts = {}
    for check in checks:
        found = [shard[check.name] for shard in shards if check.name in shard]
        if found:
            parts[check.name] = check.merge(release, found) if check.merge is not None else found[0]
    return parts


def validate_state(release: OpenRelease, state: str, checks: tuple[Check, ...]) -> dict[str, object]:
    """One state's part of each check by name, in one pass over the whole state's rows."""
    return fold(release, checks, [validate_shard(release, Shard(state), checks)])


def _tasks(release: OpenRelease, checks: tuple[Check, ...], *, shard_persons):
    """The states' tasks (state, shard, its checks, size): a state of one shard is one task of every check; a
    state of several, a task per shard of the checks that fold their shards (`merge`), and one of the whole
    state for the others, if any (sizes: persons records, for largest first)."""
    shards = plan(release.run.mdf("persons"), list(release.states), None if release.nmf_only else shard_persons)
    sharded = tuple(c for c in checks if c.merge is not None)
    whole = tuple(c for c in checks if c.merge is None and c.state is not None)
    tasks = []
    for state in release.states:
        mine = shards[state]
        if len(mine) == 1:
            tasks.append((state, mine[0], checks, int(release.published.get(STATE, {}).get(state, 0))))
            continue
        tasks += [(state, shard, sharded, shard.persons) for shard in mine]
        if whole:
            tasks.append((state, Shard(state), whole, max(shard.persons for shard in mine)))
    return tasks


def _run_states(release: OpenRelease, checks: tuple[Check, ...], *, inputs, executor, persons_limit, shard_persons):
    """What the per-state checks need read first, each check's `alongside` reading started, and every
    state's parts (from its shards'): (the release as the states saw it, parts by check and state,
    alongside results by check)."""
    release = open_release(release)
    works = [(check.name, check.alongside(release)) for check in checks if check.alongside is not None]
    if "inputs" in release.needs:
        release = release.but(inputs=by_state(inputs) if inputs is not None else None)
    tasks = _tasks(release, checks, shard_persons=shard_persons)
    task = partial(_shard_task, release)
    with ThreadPoolExecutor(1) as thread:  # e.g. the NMF levels stored whole: a pass over their every noisy answer
        futures = {name: thread.submit(work) for name, work in works}
        try:
            if executor is None:
                found = list(map(task, tasks))
            else:  # the largest shards first (persons records), so the last task to finish is a small one
                found = largest_first(executor, task, tasks, sizes=[t[3] for t in tasks], limit=persons_limit)
        except BaseException:
            for future in futures.values():
                future.result()  # the check that comes first in order fails first
            raise
        alongside = {name: future.result() for name, future in futures.items()}
    states = {s: fold(release, checks, [f for t, f in zip(tasks, found) if t[0] == s]) for s in release.states}
    parts = {check.name: {s: f[check.name] for s, f in states.items() if check.name in f} for check in checks}
    return release, parts, alongside


def _shard_task(release: OpenRelease, task: tuple) -> dict[str, object]:
    _, shard, checks, _ = task
    return validate_shard(release, shard, checks)


def read_key(public_key: Path | None) -> bytes | None:
    """The operator's public key given to prove origin (PEM), or ValidationError naming the file."""
    if public_key is None:
        return None
    try:
        return read_public_key(public_key)
    except SigningError as e:
        raise ValidationError(str(e)) from None


def validate_run(run_dir: Path, *, inputs: tuple[Path, Path] | None = None, use_operator: bool = True,
                 executor=None, persons_limit: float | None = None, public_key: Path | None = None,
                 shard_persons: int | None = SHARD_PERSONS) -> Report:
    """Every check of a run directory that its release claims (`holds`); `inputs` (or the run's operator
    files) add the comparison with the confidential inputs; `public_key` (the operator's, published) the
    proof of origin: the signature of the manifest, whose digests the checksums check. Raises
    ValidationError when a file is missing or unreadable. The states' parts run shard by shard (a state's
    records of a run of counties holding at most `shard_persons` persons records, das.validate.shards; None:
    whole states), one after the other here, or as tasks on `executor` (largest first; with
    `persons_limit`, only while the shards in flight hold at most that many persons: a memory budget),
    each reading only its shard's rows; the report is the same however a state is cut."""
    run = RunDir(run_dir)
    report = Report()
    key = read_key(public_key)
    try:
        manifest = load_manifest(run)
    except ValidationError:
        found = read_problems(run)  # a field of another type than das/frame/published.py declares: a violation
        if not found:
            raise
        report.check(FIELDS_CHECK, first(found))
        return report
    nmf = is_nmf_release(manifest)
    if not manifest.complete and not nmf:
        report.check("run complete", [f"manifest status is {manifest.status!r}, not 'complete' (a release) or "
                                      "'measured' (an NMF release, das measure)"])
        return report
    if nmf:
        report.note(NMF_RELEASE)
    claimed = release_claims(manifest, report, topdown=is_topdown(run, manifest), nmf=nmf)
    checks = select(claimed, nmf_release=nmf)
    release = OpenRelease(run, manifest, frozenset(claimed), needs(checks), public_key=key)
    if not inputs:
        inputs = operator_inputs(run) if use_operator and "inputs" in release.needs else None
    parts: dict | None = None
    alongside: dict = {}
    try:
        for i, check in enumerate(bar(checks, desc="validating", unit="check", leave=False)):
            if parts is None and (check.state is not None or check.alongside is not None):
                release, parts, alongside = _run_states(release, checks[i:], inputs=inputs, executor=executor,
                                                        persons_limit=persons_limit, shard_persons=shard_persons)
            check.combine(release, (parts or {}).get(check.name, {}), report, alongside.get(check.name))
    except Stop:
        pass  # what the checks after read is unreadable: the report ends with the check that says so
    return report


def main(run_dir: str, out=None, inputs: tuple[str, str] | None = None, public_key: str | None = None) -> int:
    """Print the checks and what they do not prove; 0 valid, 1 violations, 2 a file missing or unreadable."""
    out = out or sys.stdout
    try:
        report = validate_run(Path(run_dir), inputs=tuple(Path(p) for p in inputs) if inputs else None,
                              public_key=Path(public_key) if public_key else None)
    except ValidationError as e:
        print(f"das validate: {e}", file=sys.stderr)
        return 2
    for line in report.checks:
        print(line, file=out)
    for note in report.notes:
        print(f"NOTE {note}", file=out)
    if report.violations:
        print(f"\n{len(report.violations)} violation(s):", file=out)
        for v in report.violations[:50]:
            print(f"  - {v}", file=out)
        return 1
    proved = ("valid, and signed by the given public key" if public_key else
              "valid: internally consistent (no --public-key: its origin is not proved)")
    what = "an NMF release, " if NMF_RELEASE in report.notes else ""
    kind = "a run directory: publish its bundle (das publish), never the directory" if RunDir(run_dir).is_run_directory() \
        else "a bundle"
    print(f"\n{run_dir}: {what}{proved} ({len(report.checks)} checks; {kind})", file=out)
    return 0
