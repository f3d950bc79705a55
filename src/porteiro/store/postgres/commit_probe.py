"""How long a PostgreSQL commit waits, measured once per process: it decides how many
ingest batches a receiver keeps in flight (`batch_concurrency = auto`, the default).

A second batch in flight fills a wait: while one batch's commit waits for its WAL flush
(a disk that honours flushes) or for the network (a distant server, a synchronous
standby), the next one is already being written. Where a commit costs almost nothing (a
write-back cache) it only splits the same requests into smaller batches, which cost more
CPU per delivery. Measured on pg1 (docs/performance.md, "on a disk that flushes"): with
a 2 ms flush, 2 in flight +17 %; with a 0.1 ms flush, -9 %.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from porteiro.errors import StoreUnavailable
from porteiro.observability import logger

# A transactional WAL record (an empty logical message: no table, any role may emit it)
# makes this one-statement transaction commit as an ingest does, waiting for its WAL
# flush. `txid_current()` would not: a transaction that wrote no WAL commits without
# waiting, and a plain SELECT writes none.
PROBE = "SELECT pg_logical_emit_message(true, 'porteiro.commit_probe', '')"
PROBES = 10
# Spread over half a second, so that a busy moment (other processes starting at once
# measured 1.4-1.8 ms for the shortest of five commits 20 ms apart) does not colour all.
PROBE_SPACING_SECONDS = 0.05
# A second batch paid off with commits of 3 ms (a 2 ms flush) and more; a write cache's
# commits measured 0.4-1.8 ms here (the shortest of five, other processes starting).
SLOW_COMMIT_SECONDS = 0.002
RETRY_SECONDS = 5.0  # the store may open during an outage: try again until it is back
MOST_IN_FLIGHT = 2  # 4 measured no better than 1 on the slow disk


async def commit_wait(conn: Any) -> float:
    """The shortest wall time of PROBES one-statement transactions that each flush WAL:
    the floor is what the disk and the network cost; the rest is whatever else the
    machine did meanwhile (by the median, a 0.4 ms commit measured 1 ms while three
    servers started)."""
    times = []
    for number in range(PROBES):
        if number:
            await asyncio.sleep(PROBE_SPACING_SECONDS)
        started = time.perf_counter()
        await conn.execute(PROBE)
        times.append(time.perf_counter() - started)
    return min(times)


def batches_in_flight(commit_seconds: float) -> int:
    return MOST_IN_FLIGHT if commit_seconds >= SLOW_COMMIT_SECONDS else 1


async def tune(
    connection: Callable[[], AbstractAsyncContextManager[Any]],
    activate: Callable[[int], None],
) -> float | None:
    """Measure once the store answers, `activate` the batches in flight that suit it and
    return the commit wait measured (seconds). Runs as a background task of the store:
    an outage only delays it; any other failure leaves one batch in flight."""
    while True:
        try:
            async with connection() as conn:
                seconds = await commit_wait(conn)
            break
        except StoreUnavailable:
            await asyncio.sleep(RETRY_SECONDS)
        except Exception as exc:
            logger().warning(
                "commit probe failed: one ingest batch in flight",
                action="store.commit_probe_failed",
                error=str(exc),
            )
            return None
    in_flight = batches_in_flight(seconds)
    activate(in_flight)
    logger().info(
        "ingest batches in flight chosen",
        action="store.commit_probe",
        commit_ms=round(seconds * 1000, 3),
        batches_in_flight=in_flight,
    )
    return seconds
