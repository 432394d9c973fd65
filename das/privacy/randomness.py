"""Sources of randomness, passed explicitly (never global state).

`SystemRandomSource` reads the operating system's CSPRNG and is the only source whose outputs
may be released (`private = True`); it refuses a seed. `SeededRandomSource(seed)` is the
replication/test mode (numpy PCG64, `private = False`): same seed, same words. Both derive
independent child streams with `spawn(key)` (deterministic from seed and key in seeded mode).

Every draw is made of uniform random bits; uniform integers below q come from 64-bit words by
rejection (no modulo bias).
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

WORD = 1 << 64


class RandomSource:
    """Uniform random words; `private` says whether outputs made from them may be released."""

    private: bool

    def uint64(self, n: int) -> np.ndarray:
        """n independent uniform 64-bit words."""
        raise NotImplementedError

    def uint16(self, n: int) -> np.ndarray:
        """n independent uniform 16-bit words (a quarter of the bytes of `uint64`)."""
        return self.uint64((n + 3) // 4).view(np.uint16)[:n]

    def spawn(self, key: str) -> RandomSource:
        """An independent stream for a worker or a query, named by key."""
        raise NotImplementedError

    def uniform_below(self, q: int, n: int) -> np.ndarray:
        """n exact uniform draws from {0, ..., q-1}, for 1 <= q <= 2**63, as int64.

        A word w is accepted when w < floor(2^64 / q) * q, a whole number of copies of [0, q),
        so w mod q is exactly uniform; rejected words are redrawn.
        """
        q = int(q)
        if not 1 <= q <= 1 << 63:
            raise ValueError(f"uniform_below needs 1 <= q <= 2**63, got {q}")
        n = int(n)
        if n < 0:
            raise ValueError(f"number of draws must be >= 0, got {n}")
        limit = np.uint64((WORD // q) * q - 1)  # accept words <= limit
        out = np.empty(n, dtype=np.int64)
        pending = np.arange(n)
        while pending.size:
            words = self.uint64(pending.size)
            ok = words <= limit
            out[pending[ok]] = (words[ok] % np.uint64(q)).astype(np.int64)
            pending = pending[~ok]
        return out

    def uniform_below_big(self, q: int) -> int:
        """One exact uniform draw from {0, ..., q-1} for any positive Python int q."""
        q = int(q)
        if q < 1:
            raise ValueError(f"uniform_below_big needs q >= 1, got {q}")
        bits = max(1, (q - 1).bit_length())
        n_words = (bits + 63) // 64
        while True:
            value = 0
            for w in self.uint64(n_words):
                value = (value << 64) | int(w)
            value >>= n_words * 64 - bits
            if value < q:
                return value


class SystemRandomSource(RandomSource):
    """Production: bulk bytes from the operating system's CSPRNG (os.urandom). Takes no seed."""

    private = True

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise ValueError("the production random source takes no seed: it reads the OS CSPRNG "
                             "(use SeededRandomSource for replication)")

    def uint64(self, n: int) -> np.ndarray:
        return np.frombuffer(os.urandom(8 * n), dtype=np.uint64).copy() if n else np.empty(0, np.uint64)

    def uint16(self, n: int) -> np.ndarray:
        return np.frombuffer(os.urandom(2 * n), dtype=np.uint16).copy() if n else np.empty(0, np.uint16)

    def spawn(self, key: str) -> RandomSource:
        return SystemRandomSource()

    def __repr__(self) -> str:
        return "SystemRandomSource()"


class SeededRandomSource(RandomSource):
    """Replication mode, not private: numpy PCG64 seeded from sha256(seed/key)."""

    private = False

    def __init__(self, seed: int, key: str = ""):
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int, got {seed!r}")
        self.seed = int(seed)
        self.key = key
        digest = hashlib.sha256(f"{self.seed}/{key}".encode()).digest()
        self._bits = np.random.PCG64(int.from_bytes(digest[:16], "little"))

    def uint64(self, n: int) -> np.ndarray:
        return self._bits.random_raw(n).astype(np.uint64) if n else np.empty(0, np.uint64)

    def spawn(self, key: str) -> RandomSource:
        return SeededRandomSource(self.seed, f"{self.key}/{key}")

    def __repr__(self) -> str:
        return f"SeededRandomSource({self.seed}, key={self.key!r})"


def make_random_source(seed: int | None) -> RandomSource:
    """The OS CSPRNG when seed is None, else the seeded (not private) replication source."""
    return SystemRandomSource() if seed is None else SeededRandomSource(seed)
