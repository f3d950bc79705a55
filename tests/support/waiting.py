"""Wait for something to become true, or fail saying what never happened."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable


def wait_until(
    condition: Callable[[], object], what: str, *, within: float = 30.0, every: float = 0.1
) -> None:
    """Poll `condition` until it is truthy; after `within` seconds, fail naming `what`."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        time.sleep(every)


async def wait_until_async(
    condition: Callable[[], object | Awaitable[object]],
    what: str,
    *,
    within: float = 30.0,
    every: float = 0.05,
) -> None:
    """`wait_until` inside an event loop; `condition` may be a coroutine function."""
    deadline = time.monotonic() + within
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(every)
