"""`das validate RUN_DIR`: the registered checks a release claims, run state by state and combined in order.

The driver reads the manifest, selects the checks the release holds (das.validate.registry), and runs
those that are whole-release only; before the first check with a per-state part it reads what every
state's checks share (schemas, the MDFs' columns, the states), starts each check's `alongside` reading,
and runs every check's per-state part state by state (`validate_state`: in turn, or as tasks on an
executor, largest first), so memory follows the largest state. Then it combines each check's parts in
registration order: the report lists every check once, in the same order either way.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from das.executors import largest_first
from das.progress import bar
from das.rundir import Manifest, RunDir, RunDirError
from das.signing import SigningError, read_public_key
from das.validate.inputs import by_state, operator_inputs
from das.validate.manifest import FIELDS_CHECK, read_problems
from das.validate.registry import NMF_HOLDS, SYNTHETIC_HOLDS, TOPDOWN_HOLDS, Check, claims, needs, select
from das.validate.release import Release, StateRows, is_nmf_release, is_topdown, open_release
from das.validate.report import Report, Stop, ValidationError, first

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


def validate_state(release: Release, state: str, checks: tuple[Check, ...]) -> dict[str, object]:
    """One state's part of each check (its `state` function, in order) by name, reading only the state's
    rows of the release; a check that stops the state's checks ends the parts with its own."""
    rows = StateRows(release, state)
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


def _run_states(release: Release, checks: tuple[Check, ...], *, inputs, executor, persons_limit):
    """What the per-state checks need read first, each check's `alongside` reading started, and every
    state's parts: (the release as the states saw it, parts by check and state, alongside results by check)."""
    release = open_release(release)
    works = [(check.name, check.alongside(release)) for check in checks if check.alongside is not None]
    if "inputs" in release.needs:
        release = release.but(inputs=by_state(inputs) if inputs is not None else None)
    states = list(release.states)
    task = partial(validate_state, release, checks=checks)
    with ThreadPoolExecutor(1) as thread:  # e.g. the NMF levels stored whole: a pass over their every noisy answer
        futures = {name: thread.submit(work) for name, work in works}
        try:
            if executor is None:
                found = list(map(task, states))
            else:  # the largest states first (published population), so the last task to finish is a small one
                sizes = [int(release.published.get("state", {}).get(s, 0)) for s in states]
                found = largest_first(executor, task, states, sizes=sizes, limit=persons_limit)
        except BaseException:
            for future in futures.values():
                future.result()  # the check that comes first in order fails first
            raise
        alongside = {name: future.result() for name, future in futures.items()}
    parts = {check.name: {s: f[check.name] for s, f in zip(states, found) if check.name in f} for check in checks}
    return release, parts, alongside


def read_key(public_key: Path | None) -> bytes | None:
    """The operator's public key given to prove origin (PEM), or ValidationError naming the file."""
    if public_key is None:
        return None
    try:
        return read_public_key(public_key)
    except SigningError as e:
        raise ValidationError(str(e)) from None


def validate_run(run_dir: Path, *, inputs: tuple[Path, Path] | None = None, use_operator: bool = True,
                 executor=None, persons_limit: float | None = None, public_key: Path | None = None) -> Report:
    """Every check of a run directory that its release claims (`holds`); `inputs` (or the run's operator
    files) add the comparison with the confidential inputs; `public_key` (the operator's, published) the
    proof of origin: the signature of the manifest, whose digests the checksums check. Raises
    ValidationError when a file is missing or unreadable. The states' parts run one after the other
    here, or as tasks on `executor` (largest first; with `persons_limit`, only while the states in flight
    hold at most that many persons: a memory budget), each reading only its state's rows."""
    run = RunDir(run_dir)
    report = Report()
    key = read_key(public_key)
    try:
        manifest = load_manifest(run)
    except ValidationError:
        found = read_problems(run)  # a field of another type than das/published.py declares: a violation
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
    release = Release(run, manifest, frozenset(claimed), needs(checks), public_key=key)
    if not inputs:
        inputs = operator_inputs(run) if use_operator and "inputs" in release.needs else None
    parts: dict | None = None
    alongside: dict = {}
    try:
        for i, check in enumerate(bar(checks, desc="validating", unit="check", leave=False)):
            if parts is None and (check.state is not None or check.alongside is not None):
                release, parts, alongside = _run_states(release, checks[i:], inputs=inputs, executor=executor,
                                                        persons_limit=persons_limit)
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
