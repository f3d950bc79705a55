"""Python load generator on raw asyncio streams: open loop (fixed arrival rate) or closed.

Open loop: request i is due at t0 + i / rate whatever the server does, and its latency is
measured from that SCHEDULED time, so a server that stalls is charged for the requests
that queued behind the stall (no coordinated omission). Requests wait in one queue for
any free connection among `--connections` pre-opened keep-alive ones.

Closed loop (`--concurrency N`): N connections each send the next request as soon as the
previous answer arrived: the fallback when wrk is missing.

Every request is pre-built (bench/requests.py) before t0. Prints one JSON object; with
`--latencies FILE` also writes the raw latencies (float64 seconds) so that several
generator processes can be merged exactly.

    python -m bench.openloop --target 127.0.0.1:8001 --kind stripe --rate 1000 --duration 10
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import sys
import time
from array import array
from collections import Counter
from collections.abc import Coroutine, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import requests as presigned
from bench.report import percentile

Address = tuple[str, int]
CONNECT_TIMEOUT = 5.0
_SHARES = {"p50": 0.5, "p99": 0.99, "p999": 0.999, "max": 1.0}


@dataclass(slots=True)
class Tally:
    """What a run saw; `latencies` in seconds."""

    latencies: array[float] = field(default_factory=lambda: array("d"))
    statuses: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)

    def record(self, status: int, latency: float) -> None:
        self.statuses[status] += 1
        self.latencies.append(latency)


@dataclass(frozen=True, slots=True)
class Summary:
    mode: str
    target_rate: float | None
    concurrency: int
    duration_s: float
    sent: int
    completed: int
    rate: float  # completed / elapsed
    statuses: dict[str, int]
    errors: dict[str, int]
    non_2xx: int
    generator_cpu_s: float
    latency_ms: dict[str, float | None]  # p50, p99, p99.9 from the scheduled send time


class Connection:
    """One keep-alive HTTP/1.1 connection; reconnects when the server closes it."""

    def __init__(self, address: Address) -> None:
        self.address = address
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        async with asyncio.timeout(CONNECT_TIMEOUT):
            self.reader, self.writer = await asyncio.open_connection(*self.address)
        return self.reader, self.writer

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def exchange(self, request: bytes) -> int:
        """Send one request, read the whole answer, return its status code."""
        reader, writer = self.reader, self.writer
        if reader is None or writer is None:
            reader, writer = await self.open()
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        lower = head.lower()
        start = lower.find(b"content-length:")
        if start >= 0:
            end = lower.index(b"\r\n", start)
            await reader.readexactly(int(lower[start + 15 : end]))
        elif b"transfer-encoding: chunked" in lower:
            await _read_chunks(reader)
        if b"connection: close" in lower:
            self.close()
        return status


async def _read_chunks(reader: asyncio.StreamReader) -> None:
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        await reader.readexactly(size + 2)
        if size == 0:
            return


async def _send(
    conn: Connection, request: bytes, tally: Tally, since: float, request_timeout: float
) -> None:
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(request_timeout):
            status = await conn.exchange(request)
    except TimeoutError:
        tally.errors["timeout"] += 1
        conn.close()
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
        tally.errors[type(exc).__name__] += 1
        conn.close()
    else:
        tally.record(status, loop.time() - since)


async def _open_all(targets: Sequence[Address], count: int) -> list[Connection]:
    conns = [Connection(targets[i % len(targets)]) for i in range(count)]
    await asyncio.gather(*(conn.open() for conn in conns))
    return conns


async def open_loop(
    targets: Sequence[Address],
    requests: Sequence[bytes],
    rate: float,
    connections: int,
    request_timeout: float,
    tally: Tally,
) -> float:
    """Send request i at t0 + i / rate; returns the elapsed time until the last answer."""
    loop = asyncio.get_running_loop()
    conns = await _open_all(targets, connections)
    queue: asyncio.Queue[tuple[bytes, float]] = asyncio.Queue()

    async def work(conn: Connection) -> None:
        while True:
            request, due = await queue.get()
            await _send(conn, request, tally, due, request_timeout)
            queue.task_done()

    workers = [asyncio.create_task(work(conn)) for conn in conns]
    t0 = loop.time() + 0.05
    for index, request in enumerate(requests):
        due = t0 + index / rate
        delay = due - loop.time()
        if delay > 0.0005:  # wake about every millisecond; later requests go out at once
            await asyncio.sleep(delay)
        queue.put_nowait((request, due))
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(request_timeout):
            await queue.join()
    elapsed = loop.time() - t0
    _stop(workers, conns)
    return elapsed


async def closed_loop(
    targets: Sequence[Address],
    requests: Sequence[bytes],
    concurrency: int,
    duration: float,
    request_timeout: float,
    tally: Tally,
) -> float:
    """`concurrency` connections, each sending the next request on every answer."""
    loop = asyncio.get_running_loop()
    conns = await _open_all(targets, concurrency)
    cursor = iter(range(sys.maxsize))
    t0 = loop.time()
    deadline = t0 + duration

    async def work(conn: Connection) -> None:
        while loop.time() < deadline:
            request = requests[next(cursor) % len(requests)]
            await _send(conn, request, tally, loop.time(), request_timeout)

    await asyncio.gather(*(work(conn) for conn in conns))
    elapsed = loop.time() - t0
    _stop([], conns)
    return elapsed


def _stop(workers: Sequence[asyncio.Task[None]], conns: Sequence[Connection]) -> None:
    for worker in workers:
        worker.cancel()
    for conn in conns:
        conn.close()


def run(args: argparse.Namespace) -> tuple[Summary, Tally]:
    targets = [_address(value) for value in args.target]
    closed = args.concurrency > 0
    count = args.count or max(1, int(args.rate * args.duration))
    batch = presigned.build(args.kind, count, start=time.time(), rate=args.rate, seed=args.seed)
    tally = Tally()
    cpu_before = _cpu_seconds()
    if closed:
        work = closed_loop(
            targets, batch.requests, args.concurrency, args.duration, args.timeout, tally
        )
    else:
        work = open_loop(targets, batch.requests, args.rate, args.connections, args.timeout, tally)
    elapsed = _run_loop(work)
    completed = len(tally.latencies)
    unfinished = 0 if closed else count - completed - sum(tally.errors.values())
    if unfinished > 0:  # still queued or in flight when the drain timeout ran out
        tally.errors["unfinished"] = unfinished
    summary = Summary(
        mode="closed" if closed else "open",
        target_rate=None if closed else args.rate,
        concurrency=args.concurrency if closed else args.connections,
        duration_s=round(elapsed, 3),
        sent=completed + sum(tally.errors.values()),
        completed=completed,
        rate=round(completed / elapsed, 1) if elapsed > 0 else 0.0,
        statuses={str(code): n for code, n in sorted(tally.statuses.items())},
        errors=dict(tally.errors),
        non_2xx=sum(n for code, n in tally.statuses.items() if not 200 <= code < 300),
        generator_cpu_s=round(_cpu_seconds() - cpu_before, 2),
        latency_ms=_percentiles(tally.latencies),
    )
    return summary, tally


def _run_loop(work: Coroutine[Any, Any, float]) -> float:
    try:
        import uvloop
    except ImportError:  # the same generator, a little slower
        return asyncio.run(work)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(work)


def _percentiles(latencies: array[float]) -> dict[str, float | None]:
    ordered = sorted(latencies)
    found = {name: percentile(ordered, share) for name, share in _SHARES.items()}
    return {name: None if v is None else round(v * 1000, 2) for name, v in found.items()}


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _address(value: str) -> Address:
    host, _, port = value.rpartition(":")
    return host or "127.0.0.1", int(port)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", action="append", required=True, help="host:port, repeatable")
    parser.add_argument("--kind", default="stripe", choices=presigned.KINDS)
    parser.add_argument("--rate", type=float, default=1000.0, help="open loop: requests/s")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds")
    parser.add_argument("--connections", type=int, default=256, help="open loop: pool size")
    parser.add_argument("--concurrency", type=int, default=0, help="> 0: closed loop instead")
    parser.add_argument("--count", type=int, default=0, help="requests to pre-build")
    parser.add_argument("--timeout", type=float, default=10.0, help="per request, seconds")
    parser.add_argument("--seed", type=int, default=1, help="distinct per generator process")
    parser.add_argument("--latencies", type=Path, help="write raw latencies (float64 s) here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    summary, tally = run(args)
    if args.latencies is not None:
        with args.latencies.open("wb") as handle:
            tally.latencies.tofile(handle)
    print(json.dumps(asdict(summary)))


if __name__ == "__main__":
    main()
