"""The retry schedule: about 10 attempts over about a day, growing, bounded jitter."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta

from porteiro.retry import RetryPolicy

NOW = datetime(2024, 11, 28, 12, 0, tzinfo=UTC)


def _delays(policy: RetryPolicy) -> list[timedelta]:
    """Delays without jitter after each failed try that is followed by another."""
    rng = random.Random(0)
    return [policy.delay(n, rng) for n in range(1, policy.max_attempts)]


def test_default_policy_spreads_ten_attempts_over_about_a_day() -> None:
    policy = RetryPolicy(jitter=0.0)
    assert policy.max_attempts == 10
    total = sum(_delays(policy), timedelta())
    assert timedelta(hours=16) <= total <= timedelta(hours=30)


def test_delays_grow_and_respect_the_cap() -> None:
    delays = _delays(RetryPolicy(jitter=0.0))
    assert delays[0] == timedelta(seconds=30)
    assert all(later >= earlier for earlier, later in itertools.pairwise(delays))
    assert delays[-1] == timedelta(hours=12)  # capped
    assert delays[1] > delays[0]


def test_jitter_stays_within_its_bounds() -> None:
    policy = RetryPolicy(jitter=0.2)
    rng = random.Random(42)
    for attempts in range(1, 10):
        base = RetryPolicy(jitter=0.0).delay(attempts, rng).total_seconds()
        seen = [policy.delay(attempts, rng).total_seconds() for _ in range(200)]
        assert all(base * 0.8 <= s <= base * 1.2 for s in seen)
        assert len(set(seen)) > 1  # it does spread retries out


def test_decide_schedules_until_max_attempts_then_gives_up() -> None:
    policy = RetryPolicy(max_attempts=3, base_delay_seconds=10, multiplier=2, jitter=0.0)
    rng = random.Random(1)
    assert policy.decide(1, NOW, rng) == NOW + timedelta(seconds=10)
    assert policy.decide(2, NOW, rng) == NOW + timedelta(seconds=20)
    assert policy.decide(3, NOW, rng) is None
    assert policy.decide(4, NOW, rng) is None
