"""One release of a comparison in a process of its own: `python -m das.research.release_child ARGS` (ARGS: JSON of
spec, mechanism, out_dir, seed, rho, workers, allow_large_rho). It imports only what the release needs, so the
memory measured around it (das.research.resources) is the release's, not the comparison's pandas and matplotlib."""

from __future__ import annotations

import json
import sys

TOPDOWN = "topdown"  # a comparison's name for `das run`'s release (das.research.compare)


def release(args: dict) -> int | str:
    """Make the release `args` describes; 0, or why it failed (the process's exit status)."""
    if args["mechanism"] == TOPDOWN:
        from das.driver.run import run

        result = run(args["spec"], args["out_dir"], seed=args["seed"], workers=args["workers"], overwrite=True,
                     progress=False, allow_large_rho=args["allow_large_rho"])
        return 0 if result.valid else "the release failed validation"
    from fractions import Fraction

    from das.mechanisms import synthesize

    synthesize(args["spec"], args["mechanism"], args["out_dir"], seed=args["seed"],
               rho=None if args["rho"] is None else Fraction(args["rho"]), overwrite=True,
               allow_large_rho=args["allow_large_rho"])
    return 0


def command(spec: str, mechanism: str, out_dir, *, seed: int, rho: str | None, workers: int,
            allow_large_rho: bool = False) -> list[str]:
    """The command line of one release of `mechanism` into out_dir, run by this module in a new interpreter."""
    args = json.dumps({"spec": spec, "mechanism": mechanism, "out_dir": str(out_dir), "seed": seed, "rho": rho,
                       "workers": workers, "allow_large_rho": allow_large_rho})
    return [sys.executable, "-m", __name__, args]


if __name__ == "__main__":
    sys.exit(release(json.loads(sys.argv[1])))
