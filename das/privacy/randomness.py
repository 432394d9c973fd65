"""Sources of randomness, passed explicitly: the OS CSPRNG in production, a seeded generator
for tests and replication (whose outputs are labelled not private).

Both give exact uniform integers from 64-bit words by rejection (no modulo bias).
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

WORD = 1 << 64


class RandomSource:
    """Uniform random 64-bit words; `private` says whether outputs may be released."""

    private: bool

    def uint64(self, n: int) -> np.ndarray:
        raise NotImplementedError

    def spawn(self, key: str) -> RandomSource:
        raise NotImplementedError

    def uniform_below(self, q: int, n: int) -> np.ndarray:
        """n exact uniform draws from {0, ..., q-1}, for 1 <= q <= 2**63, as int64."""
        q = int(q)
        if not 1 <= q <= 1 << 63:
            raise ValueError(f"uniform_below needs 1 <= q <= 2**63, got {q}")
        limit = np.uint64((WORD // q) * q - 1)  # accept words <= limit: a whole number of copies of [0, q)
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
        bits = max(1, (q - 1).bit_length())
        n_words = (bits + 63) // 64
        while True:
            words = self.uint64(n_words)
            value = 0
            for w in words:
                value = (value << 64) | int(w)
            value >>= n_words * 64 - bits
            if value < q:
                return value


class SystemRandomSource(RandomSource):
    """Production: bulk bytes from the operating system's CSPRNG (os.urandom)."""

    private = True

    def __init__(self, **kwargs):
        if kwargs:
            raise ValueError("the production random source takes no seed: it reads the OS CSPRNG")

    def uint64(self, n: int) -> np.ndarray:
        return np.frombuffer(os.urandom(8 * n), dtype=np.uint64).copy() if n else np.empty(0, np.uint64)

    def spawn(self, key: str) -> RandomSource:
        return SystemRandomSource()


class SeededRandomSource(RandomSource):
    """Replication mode: numpy PCG64 from a seed; streams spawned by key are reproducible."""

    private = False

    def __init__(self, seed: int, key: str = ""):
        self.seed = int(seed)
        self.key = key
        digest = hashlib.sha256(f"{self.seed}/{key}".encode()).digest()
        self._bits = np.random.PCG64(int.from_bytes(digest[:16], "little"))
        self._gen = np.random.Generator(self._bits)

    def uint64(self, n: int) -> np.ndarray:
        return self._bits.random_raw(n).astype(np.uint64) if n else np.empty(0, np.uint64)

    def spawn(self, key: str) -> RandomSource:
        return SeededRandomSource(self.seed, f"{self.key}/{key}")


def make_random_source(seed: int | None) -> RandomSource:
    """The OS CSPRNG when seed is None, else the seeded replication source."""
    return SystemRandomSource() if seed is None else SeededRandomSource(seed)
