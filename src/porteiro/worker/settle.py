"""Settling a claimed event the ledger did not apply: retry it later, dead-letter it,
ignore it (nothing to apply), or note that its claim was lost to another worker.

Each returns the outcome the worker counts (`retry`, `dead`, `ignored`, `claim_lost`).
Every write is fenced by the claim's token, so a late write of a worker that lost its
claim is refused (and counted as `claim_lost`), never applied twice.
"""

from __future__ import annotations

import random
from datetime import datetime

import structlog

from porteiro.errors import NonRetryable, error_text
from porteiro.model import ParsedEvent
from porteiro.runtime import Runtime
from porteiro.store.base import Claim


class Settler:
    """A worker's settling writes; `log` is the worker's (bound to its id), `rng` the
    jitter of its retry schedule."""

    def __init__(
        self, runtime: Runtime, log: structlog.stdlib.BoundLogger, rng: random.Random
    ) -> None:
        self.runtime = runtime
        self._log = log
        self._rng = rng

    async def ignore(self, claim: Claim, event: ParsedEvent) -> str:
        reason = "no payment object" if event.object_id is None else f"kind other ({event.type})"
        if not await self.runtime.store.ignore(claim, reason, self.runtime.clock()):
            return self.claim_lost(claim)
        self._log.info(
            "event ignored", action="event.ignored", event_id=claim.event.id, reason=reason
        )
        return "ignored"

    async def fail(self, claim: Claim, exc: Exception) -> str:
        """Retry later, on the retry policy's schedule; dead-letter a NonRetryable or an
        event out of attempts."""
        stored = claim.event
        text = error_text(exc)
        now = self.runtime.clock()
        retry_at = (
            None
            if isinstance(exc, NonRetryable)
            else self.runtime.config.worker.retry.decide(stored.attempts, now, self._rng)
        )
        try:
            if retry_at is None:
                return await self.dead(claim, text, now)
            if not await self.runtime.store.retry_later(claim, text, retry_at, now):
                return self.claim_lost(claim)
        except Exception as write_error:
            # The store is down too: the lease expires and the event is claimed again.
            self._log.error(
                "could not record failure",
                action="event.failure_unrecorded",
                event_id=stored.id,
                error=text,
                write_error=error_text(write_error),
            )
            return "retry"
        self._log.warning(
            "event failed, retry scheduled",
            action="event.retry_scheduled",
            event_id=stored.id,
            attempts=stored.attempts,
            next_attempt_at=retry_at.isoformat(),
            error=text,
        )
        return "retry"

    async def dead(self, claim: Claim, reason: str, now: datetime) -> str:
        if not await self.runtime.store.dead_letter(claim, reason, now):
            return self.claim_lost(claim)
        self._log.error(
            "event dead-lettered",
            action="event.dead_lettered",
            event_id=claim.event.id,
            attempts=claim.event.attempts,
            error=reason,
        )
        return "dead"

    def claim_lost(self, claim: Claim) -> str:
        self._log.warning(
            "claim lost: another worker owns this event now",
            action="event.claim_lost",
            event_id=claim.event.id,
        )
        return "claim_lost"
