"""The validator's checks, registered: each proves a claim a release makes (its manifest's `holds`), so a
new claim is one `register` call (an output's `checks()` in das.io.outputs name the claims that prove it).

A check has a per-state function, run on one shard of a state's rows (das.validate.release.StateRows, on
a worker: the state's records of a run of counties, das.validate.shards), returning a small picklable
part, and a `merge` function folding a state's shards' parts, in geocode order, into the state's part (a
check without one needs the whole state: its function gets the whole state's rows); and a combining
function, run on the driver, which merges the states' parts, in state order, with its own whole-release
reading into report lines. A check that is whole-release only (checksums, metadata, the certificate) has
no per-state part. A check may also start a whole-release reading `alongside` the states (a thread on the
driver), whose result its combining function gets. `das validate` runs the checks a release claims, and
those that every release is held to (`always`), in registration order, which is the order of the report:

    register(Check("my_claim", combine=my_combine, state=my_state, merge=my_merge))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from das.core.registry import add_named

# das's own claims, in the order a release's claims are listed (a new check's claim is listed after them)
HOLDS = ("mdf_codes", "tables_match_mdf", "nmf_matches_certificate", "units_mdf", "invariants", "schema_constraints",
         "block_invariants", "charges_sum_to_rho")
TOPDOWN_HOLDS = tuple(h for h in HOLDS if h != "charges_sum_to_rho")  # a TopDown release is always held to these
SYNTHETIC_HOLDS = ("mdf_codes", "tables_match_mdf", "charges_sum_to_rho")  # what das synth's releases claim
NMF_HOLDS = ("nmf_matches_certificate",)  # what an NMF release (das measure) claims: its noisy measurements alone
NEEDS = ("units", "inputs")  # what a check may read besides the release's persons MDF, tables, NMF and manifest


@dataclass(frozen=True)
class Check:
    """One check of a release.

    name      unique; the claim it proves, unless `claim` says otherwise (a claim may take several
              checks when its report lines are not consecutive)
    combine   (release, parts, report, alongside) -> None, on the driver: `parts` maps each state to its
              part (state order; a state whose checks stopped earlier has none), `alongside` is the result
              of the check's `alongside` work (None without); it adds report lines, and may raise
              das.validate.report.Stop to end the report there
    state     (rows) -> part, on a worker: one shard's part (small, picklable); it may raise Stop(part)
              to end that shard's checks
    merge     (release, shard parts) -> the state's part: its shards' parts (those that ran it, in geocode order)
              folded into what one pass over the state gives (counts summed, the first problems of each
              kind kept in order); None: the check needs the whole state (its `state` gets the state's rows,
              one part a state: keep that for cheap checks)
    alongside (release) -> work: called on the driver before the states run (what it reads there may
              raise ValidationError), returns a function run in a thread while the states run
    needs     what it reads besides the persons MDF: "units" (the units MDF), "inputs" (the operator's
              confidential inputs)
    always    run for every release, claimed or not
    nmf       it reads no MDF or table: an NMF release (das measure) is checked by it too (an NMF release
              is checked only by those)
    """

    name: str
    combine: Callable
    state: Callable | None = None
    merge: Callable | None = None
    alongside: Callable | None = None
    claim: str | None = ""
    needs: tuple[str, ...] = ()
    always: bool = False
    nmf: bool = False

    def __post_init__(self):
        if self.claim == "":
            object.__setattr__(self, "claim", self.name)
        unknown = [n for n in self.needs if n not in NEEDS]
        if unknown:
            raise ValueError(f"check {self.name!r} needs {unknown[0]!r}, not one of {', '.join(NEEDS)}")


CHECKS: dict[str, Check] = {}


def register(check: Check) -> Check:
    """Add a check: every release that claims what it proves (or every release: `always`) is checked by it
    from now on, after the checks registered before it."""
    return add_named(CHECKS, check, "a check")


def unregister(name: str) -> None:
    CHECKS.pop(name, None)


def claims() -> tuple[str, ...]:
    """Every claim a registered check proves: das's own in HOLDS order, then the others as registered."""
    proved = [c.claim for c in CHECKS.values() if c.claim]
    return tuple(h for h in HOLDS if h in proved) + tuple(dict.fromkeys(c for c in proved if c not in HOLDS))


def select(claimed: Iterable[str], *, nmf_release: bool = False) -> tuple[Check, ...]:
    """The checks of a release that claims `claimed`, in registration order (of an NMF release: those that
    read no MDF or table, `Check.nmf`)."""
    claimed = set(claimed)
    return tuple(c for c in CHECKS.values() if (c.always or c.claim in claimed) and (c.nmf or not nmf_release))


def needs(checks: Iterable[Check]) -> frozenset[str]:
    """What the checks read besides the persons MDF (NEEDS)."""
    return frozenset(n for c in checks for n in c.needs)
