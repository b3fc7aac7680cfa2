"""Counts of public-key operations by kind, reported by every role (benchmarks, demo output)."""

from __future__ import annotations

from collections import Counter


class OpCounter(Counter):
    """A Counter of operation names, e.g. ``paillier_encrypt``, ``dgk_zero_test``."""

    def tick(self, kind: str, n: int = 1) -> None:
        self[kind] += n
