"""The validator's unit of work: a shard of a state, its records of a run of whole consecutive counties
holding at most SHARD_PERSONS persons MDF records (a county larger than that is a shard of its own), so
that memory follows the shard, not the state, and a large state's checks run on every worker.

The shards come from the release's own persons MDF: its records per county (TABBLKST, TABBLKCOU; a row
group of one county is counted from its statistics). A state's shards cover all of its county codes,
in order: the first from the state's first county, the last to its last (a county of the units MDF or
of a table without persons falls in the shard whose range holds it).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from das.validate.reading import ANY, Counties, unreadable

SHARD_PERSONS = 2_000_000  # persons MDF records of a shard at most (unless one county holds more)


@dataclass(frozen=True)
class Shard:
    """A state's records of the counties [low, high) (TABBLKCOU; None: unbounded), the `index`th of its
    shards in geocode order, holding `persons` persons MDF records (0: not counted)."""

    state: str
    counties: Counties = ANY
    index: int = 0
    persons: int = 0

    @property
    def whole(self) -> bool:
        """Whether it is the whole state."""
        return self.counties == ANY

    @property
    def geocodes(self) -> tuple[str, str]:
        """[low, high) of the geocodes below the state that it holds (a table's rows, a published geounit)."""
        low, high = self.counties
        return self.state + (low or ""), self.state + (high or "\x7f")

    def holds(self, geocodes) -> np.ndarray:
        """Which of the geocodes of levels below the state (county and finer) are of its counties."""
        codes = np.asarray(geocodes, dtype=str)
        low, high = self.geocodes
        if not len(codes):
            return np.zeros(0, bool)
        return np.char.startswith(codes, self.state) & (codes >= low) & (codes < high)


def county_records(path: Path) -> Counter:
    """The persons MDF's records per (TABBLKST, TABBLKCOU): from a row group's statistics where it holds
    one county, else from its two columns."""
    found: Counter = Counter()
    try:
        parquet = pq.ParquetFile(path)
        meta, schema = parquet.metadata, parquet.schema_arrow
        st, cou = schema.get_field_index("TABBLKST"), schema.get_field_index("TABBLKCOU")
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            a, b = group.column(st).statistics, group.column(cou).statistics
            if all(s is not None and s.has_min_max and s.min == s.max and not s.null_count for s in (a, b)):
                found[(str(a.min), str(b.min))] += group.num_rows
                continue
            table = parquet.read_row_group(g, columns=["TABBLKST", "TABBLKCOU"])
            table = pa.table({c: pc.cast(table.column(c), pa.string()) for c in ("TABBLKST", "TABBLKCOU")})
            for row in table.group_by(["TABBLKST", "TABBLKCOU"]).aggregate([([], "count_all")]).to_pylist():
                found[(row["TABBLKST"], row["TABBLKCOU"])] += row["count_all"]
    except Exception as e:
        raise unreadable(path, e) from None
    return found


def runs(counts: list[tuple[str, int]], limit: int) -> list[list[tuple[str, int]]]:
    """Consecutive counties (in code order) in runs of at most `limit` records (a larger county alone)."""
    out: list[list[tuple[str, int]]] = []
    total = 0
    for county, n in counts:
        if not out or total + n > limit:
            out.append([])
            total = 0
        out[-1].append((county, n))
        total += n
    return out


def plan(path: Path, states: list[str], limit: int | None = SHARD_PERSONS) -> dict[str, list[Shard]]:
    """Each state's shards: the whole state when the persons MDF holds at most `limit` records (None: no
    limit), else runs of its counties of at most `limit` records each."""
    whole = {s: [Shard(s)] for s in states}
    if limit is None or not path.is_file():
        return whole
    try:
        rows = pq.ParquetFile(path).metadata.num_rows
    except Exception as e:
        raise unreadable(path, e) from None
    if rows <= limit:
        return whole
    counts = county_records(path)
    for state in states:
        mine = sorted((c, n) for (s, c), n in counts.items() if s == state and c is not None)
        if sum(n for _, n in mine) <= limit:
            continue
        parts = runs(mine, limit)
        bounds = [None, *(part[0][0] for part in parts[1:]), None]
        whole[state] = [Shard(state, (bounds[i], bounds[i + 1]), i, sum(n for _, n in part))
                        for i, part in enumerate(parts)]
    return whole
