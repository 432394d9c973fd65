"""The terminal summary of a release (`das run`, `das synth`, `Release.summary`): what its manifest says, and
the run times of the operator's record."""

from __future__ import annotations

from fractions import Fraction

from das.frame import bundle
from das.frame.lifecycle import NOT_PRIVATE, ReleaseFrame
from das.privacy.accounting import protects
from das.privacy.certificate import delta_text, fraction_text


def render_summary(frame: ReleaseFrame) -> str:
    """The terminal summary of a completed run: its manifest, and the run times of the operator's record."""
    manifest = frame.manifest
    process = bundle.read_process(frame.run_dir.path)
    cert = manifest.certificate("persons")
    mechanism = manifest.mechanism  # a synthetic release (das synth) is named as itself, not as a TopDown run
    rho = (f"rho = {fraction_text(cert.rho)} ({float(Fraction(cert.rho)):.4f})" if cert.rho is not None else
           f"(eps, delta)-DP directly, no rho spent (budget rho = {fraction_text(cert.budget)})")
    lines = [
        (f"das synth --mechanism {mechanism.name} {manifest.spec_name}" if mechanism else f"das run {manifest.spec_name}")
        + f": {manifest.counts.persons:,} persons in {manifest.counts.blocks:,} blocks, levels {' > '.join(manifest.levels)}",
        f"privacy (persons): {rho}, eps = {cert.eps} at delta = {delta_text(cert.delta)}; randomness: {manifest.randomness}",
    ]
    if "units" in manifest.privacy:
        u = manifest.privacy["units"]
        lines.append(f"privacy (units): rho = {fraction_text(u.rho)}, eps = {u.eps} at delta = {delta_text(u.delta)}")
    lines += total_lines(manifest.guarantee)
    lines.append("protects: " + "; ".join(f"{protects(name)} ({name})" for name in manifest.privacy)
                 + ", changed, the invariants kept")
    lines.append("time: " + ", ".join(f"{k} {v:.1f}s" for k, v in (process.get("timings_seconds") or {}).items()))
    events = manifest.failsafe_events or ()
    if mechanism is None:  # TopDown's failsafe; a mechanism has none
        lines.append(f"failsafe: {len(events)} event(s)" + (
            " at " + ", ".join(sorted({f"{e.release}/{e.level}/{e.parent}" for e in events})[:10]) if events else ""))
    lines += least_squares_lines(manifest.levels_report or {})
    v = manifest.validation
    lines.append(f"validation: {'PASSED' if v and v.valid else 'FAILED'} ({len(v.checks) if v else 0} checks)")
    lines += _against_lines(process.get("validation_against_inputs"), mechanism)
    lines.append("outputs: " + ", ".join(sorted(manifest.outputs or {})) + (", nmf/" if manifest.nmf else "")
                 + ", manifest.json")
    if not manifest.private:
        lines.append("NOTE: " + NOT_PRIVATE)
    return "\n".join(lines)


def total_lines(guarantee) -> list[str]:
    """The summary's line on the run's total guarantee (das.privacy.guarantee), when it has several releases."""
    if guarantee is None or len(guarantee.releases) < 2:
        return []
    rho = "" if guarantee.rho is None else f"rho = {fraction_text(guarantee.rho)} ({float(guarantee.rho):.4f}), "
    return [f"privacy (total): {rho}eps = {guarantee.eps} at delta = {delta_text(guarantee.delta)}: "
            f"{' and '.join(guarantee.releases)} together, by {guarantee.composition.split(':')[0]}"]


def _against_lines(against: dict | None, mechanism) -> list[str]:
    """The summary's line on the operator's checks against the confidential inputs: PASSED or FAILED with the
    number of checks, and when none ran, that nothing was checked and why (never "PASSED (0 checks)")."""
    if not against:
        return []
    checks = against.get("checks", [])
    if not checks:
        why = (f"{mechanism.name} publishes no invariant of the inputs to check them against" if mechanism else
               "the release holds nothing to check against them")
        return [f"against the inputs (operator only): nothing checked ({why})"]
    return [f"against the inputs (operator only): {'PASSED' if against.get('valid') else 'FAILED'} ({len(checks)} checks)",
            *(f"  {x}" for x in against.get("violations", [])[:5])]


def least_squares_lines(levels_report: dict, *, listed: int = 5) -> list[str]:
    """The summary's lines on the least-squares certificates: the totals, then the uncertified optima by release,
    level and parent (the first `listed`), so an optimum above the tolerance is never passed over."""
    certs = [r.l2_certificate for reports in levels_report.values() for r in reports]
    if not certs:
        return []
    worst = max(c.get("max_rel_gap", 0.0) for c in certs)
    found = [f"{name}/{r.level} parent {u.parent or '(root)'} pass {u.pass_index}: relative gap {u.relative_gap:.1e}"
             for name, reports in levels_report.items() for r in reports for u in r.uncertified]
    lines = [f"least squares: {sum(c.get('problems', 0) for c in certs):,} problems, largest relative "
             f"duality gap {worst:.1e}, {sum(c.get('retried', 0) for c in certs)} retried, "
             f"{sum(c.get('uncertified', 0) for c in certs)} above tolerance"]
    lines += [f"  NOT CERTIFIED OPTIMAL: {line}" for line in found[:listed]]
    if len(found) > listed:
        lines.append(f"  ... and {len(found) - listed} more (manifest.json: levels_report)")
    return lines


