"""The least-squares optima of a TopDown release, as its manifest reports them.

Every least-squares pass of the post-processing is certified by its duality gap in original units
(das.topdown.optimality.certify); one whose gap stayed above the tolerance after every retry is counted in its
level's `l2_certificate` and listed with its parent, pass, objective and gap (`levels_report.*[].uncertified`).
This check holds the report to itself (the count is the list's length, every gap finite and non-negative,
the largest relative gap at least each listed one's) and names every uncertified optimum in the report's
notes: the release is still consistent and private (the rounding holds every rule exactly), but its
estimates there are not proven optimal, and a reader must not have to open the manifest to learn it.
"""

from __future__ import annotations

import math

from das.validate.registry import Check
from das.validate.release import OpenRelease
from das.validate.report import Report, first


def check_least_squares(release: OpenRelease, parts, report: Report, alongside=None) -> None:
    """The levels' L2 certificates agree with their lists of uncertified passes; each of those is named in a note."""
    if not release.topdown or release.nmf_only:  # nothing post-processed: no optimum to certify
        return
    levels = release.manifest.levels_report
    if levels is None:
        report.check("least squares: each level's duality-gap certificate agrees with its list of uncertified optima",
                     ["the manifest has no levels_report (a TopDown release reports its post-processing)"])
        return
    problems, found, worst = [], [], 0.0
    for name, records in levels.items():
        for r in records:
            cert, where = r.l2_certificate, f"{name}/{r.level}"
            figures = [cert.get(k, 0) for k in ("objective", "gap", "max_rel_gap")]
            if any(not math.isfinite(v) or v < 0 for v in figures):
                problems.append(f"{where}: objective, gap and largest relative gap must be finite and >= 0, not {figures}")
            if int(cert.get("uncertified", 0)) != len(r.uncertified):
                problems.append(f"{where}: {cert.get('uncertified', 0)} uncertified counted, {len(r.uncertified)} listed")
            for u in r.uncertified:
                if not (math.isfinite(u.gap) and math.isfinite(u.objective)) or u.gap < 0:
                    problems.append(f"{where}: parent {u.parent or '(root)'} pass {u.pass_index}: gap {u.gap} is not a "
                                    f"finite non-negative number")
                    continue
                if u.relative_gap > cert.get("max_rel_gap", 0.0) * (1 + 1e-12):
                    problems.append(f"{where}: parent {u.parent or '(root)'}: relative gap {u.relative_gap:.3g} above the "
                                    f"level's largest, {cert.get('max_rel_gap', 0.0):.3g}")
                found.append(f"{where} parent {u.parent or '(root)'} pass {u.pass_index}: relative duality gap "
                             f"{u.relative_gap:.2e} (objective {u.objective:.6g}, gap {u.gap:.3g})")
            worst = max(worst, cert.get("max_rel_gap", 0.0))
    report.check("least squares: each level's duality-gap certificate agrees with its list of uncertified optima",
                 first(problems))
    if found:
        report.note(f"least squares: {len(found)} optimum(s) not certified by their duality gap (the largest relative "
                    f"gap of any level {worst:.1e}); the release holds every rule, but these estimates are not proven "
                    "optimal:")
    for line in found:
        report.note(f"  {line}")


LEAST_SQUARES = Check("least_squares", check_least_squares, claim=None, always=True, nmf=True)
