"""Independent validation of a run directory: `das validate RUN_DIR`.

Its own code path, sharing nothing with the engine but the spec files (schemas as data). From the
release bundle alone (what is published) it proves what the release claims (its manifest's `holds`),
each claim by the checks registered for it (das.validate.registry), in this order:

    signature       with the operator's public key (--public-key): manifest.sig is its signature of
                    manifest.json's exact bytes, so the digests below prove every file is theirs; without
                    one, the report says it proves internal consistency only (every release)
    files           every output and NMF file has the SHA-256 the manifest lists (and nothing unlisted is
                    there), and carries the run's privacy mode, certificate and spec digest in its own
                    Parquet metadata (every release)
    manifest        every field of the manifest is declared in das/frame/published.py, of its declared type; its
                    counts (persons, blocks, parents per level) are the files' (every release)
    certificate     charges_sum_to_rho: the certificate's charges sum exactly to its rho;
                    the privacy claim (every release): a TopDown certificate adds up exactly and is what
                    its spec's strategy and budget give, recomputed; a synthetic one's charges have the
                    rho their parameters give; eps re-derived from rho and delta
    optimality      the least-squares optima (a TopDown release): the manifest's count of uncertified optima is
                    its list's, every gap finite; each uncertified one named in the notes (every release)
    records         units_mdf: housing units vs facilities, the persons in the units' blocks;
                    mdf_codes: valid codes, derived columns agree with the schema, EPNUM 1..N without
                    repeats (every release)
    nmf             nmf_matches_certificate: every query of the certificate at every geounit of its
                    level, each cell once, with the certified exact variance
    tables          tables_match_mdf: every table equals its recount from the MDF, child rows sum to parents
    invariants      invariants: the published total population (nation, state...)
    rules           schema_constraints: every rule of each schema (das.model.rules gives the bounds from the
                    facts counted in the MDFs), at every level
    spine           spine: a release measured on a spine other than the standard one (das.model.spine) publishes
                    it, one nesting hierarchy over exactly its blocks; the NMF check reads its geounits
    block_invariants  a TopDown release's invariants per block (invariants.parquet, from which das postprocess
                    post-processes its NMF again) are its units MDF's: housing units and GQ facilities by type
    inputs          invariants, with the run's operator files (the confidential inputs): population,
                    housing units and GQ facilities per block equal the inputs'

A TopDown release (`das run`: no mechanism, or anything only TopDown has, das.validate.release.is_topdown)
is held to every TopDown claim (TOPDOWN_HOLDS), a synthetic release (das synth) to SYNTHETIC_HOLDS,
whatever its manifest's `holds` say (they can add claims, not drop one). An NMF release (`das measure`:
status "measured", the noisy measurements alone) is checked by the checks that read no MDF or table
(signature, files, manifest, certificate, nmf), and held to NMF_HOLDS. A claim no registered check
proves is a violation. It goes shard by shard (das.validate.driver: runs of whole counties of a state,
das.validate.shards), so memory follows the largest shard.
Exit code 0 valid, 1 violations, 2 a file missing or unreadable.
"""

from das.validate import (
    block_invariants,
    certificate,
    files,
    invariants,
    manifest,
    nmf,
    optimality,
    records,
    rules,
    signature,
    spine,
    tables,
)
from das.validate import inputs as confidential
from das.validate.driver import main, release_claims, validate_run, validate_state
from das.validate.reading import GEO
from das.validate.registry import HOLDS, NMF_HOLDS, SYNTHETIC_HOLDS, TOPDOWN_HOLDS, Check, register, unregister
from das.validate.report import MAX_LISTED, Findings, Report, Stop

for _check in (signature.SIGNATURE, files.CHECKSUMS, manifest.MANIFEST, files.METADATA, certificate.CHARGES,
               certificate.CERTIFICATE, optimality.LEAST_SQUARES, records.UNITS_CHECK, nmf.NMF, records.UNIVERSE_CHECK,
               records.CODES_CHECK, tables.TABLES, invariants.POPULATION_CHECK, rules.RULES, spine.SPINE,
               block_invariants.BLOCK_INVARIANTS, confidential.INPUTS):
    register(_check)

__all__ = ["GEO", "HOLDS", "MAX_LISTED", "NMF_HOLDS", "SYNTHETIC_HOLDS", "TOPDOWN_HOLDS", "Check", "Findings", "Report", "Stop",
           "main", "register", "release_claims", "unregister", "validate_run", "validate_state"]

