"""Retry policy: pure, so the schedule is tested without clocks or workers."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff with jitter.

    The defaults spread 10 attempts over about a day (delays of 30 s, 75 s, 3 min, ...,
    capped at 12 h; about 20 h from the first attempt to the last), which outlasts a
    typical merchant outage without hammering a gateway's API.
    """

    max_attempts: int = 10
    base_delay_seconds: float = 30.0
    multiplier: float = 2.5
    max_delay_seconds: float = 12 * 3600.0
    jitter: float = 0.2  # each delay is scaled by a random factor in [1 - jitter, 1 + jitter]

    def delay(self, attempts: int, rng: random.Random) -> timedelta:
        """Delay before the next try, after `attempts` tries have failed (attempts >= 1)."""
        raw = self.base_delay_seconds * self.multiplier ** max(attempts - 1, 0)
        capped = min(raw, self.max_delay_seconds)
        factor = 1.0 + rng.uniform(-self.jitter, self.jitter)
        return timedelta(seconds=capped * factor)

    def decide(self, attempts: int, now: datetime, rng: random.Random) -> datetime | None:
        """When to try again after `attempts` failed tries, or None: dead-letter it."""
        if attempts >= self.max_attempts:
            return None
        return now + self.delay(attempts, rng)
