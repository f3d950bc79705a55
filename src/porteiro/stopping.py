"""Waiting that a stop request cuts short: the worker's and the relays' idle waits."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable


async def until_stopped(work: Awaitable[object], stop: asyncio.Event) -> None:
    """Await `work` unless `stop` is set first (then `work` is cancelled); an error of
    `work` propagates. Both are finished before this returns, so nothing is left pending."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, stopper):
            pending.cancel()
        await asyncio.gather(task, stopper, return_exceptions=True)
    error = task.exception() if task.done() and not task.cancelled() else None
    if error is not None:
        raise error
