"""Exponential backoff with jitter (Kafka's ExponentialBackoff, KIP-580)."""

from __future__ import annotations

import random


class ExponentialBackoff:
    """``initial * 2**failures`` capped at ``maximum``, each wait scaled by 1 +/- ``jitter``."""

    def __init__(
        self,
        initial_s: float,
        maximum_s: float,
        *,
        jitter: float = 0.2,
        rng: random.Random | None = None,
    ) -> None:
        self._initial = initial_s
        self._maximum = maximum_s
        self._jitter = jitter
        self._rng = rng or random.Random()
        self._failures = 0

    def next_delay(self) -> float:
        """The wait before the next attempt; each call counts one more failure."""
        base = min(self._maximum, self._initial * (2**self._failures))
        self._failures = min(self._failures + 1, 32)
        if self._jitter:
            base *= float(self._rng.uniform(1 - self._jitter, 1 + self._jitter))
        return float(min(base, self._maximum * (1 + self._jitter)))

    def reset(self) -> None:
        """Forget the failures: the next wait is the initial one again."""
        self._failures = 0
