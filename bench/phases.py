"""The measurements of one benchmark run, phase by phase (bench/run.py sequences them).

Every server is started fresh for its phase and stopped at its end; each Porteiro scenario
gets a fresh store. In the servers phase every scenario's server is up at once (idle
ones cost nothing), so the maxima can be measured in turns. Request files are generated
just before each load, so signature timestamps are seconds old when sent.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import console, loadgen_py, loadgen_wrk, pgdata, report, servers
from bench import requests as presigned
from bench.report import Load

# Requests pre-signed for a closed run: enough for this many req/s without wrapping, with
# a margin over the fastest machine seen (pg1 ~9,100 Stripe and ~4,700 Pix deliveries of 5
# items per second). The hello-world server ignores ids, so its wraps are harmless and its
# file is a few thousand requests whatever the duration: building requests is part of the
# 10-minute budget (~15 us each on a slow machine).
CLOSED_REQUESTS_PER_SECOND = {
    "naive": 3_000,
    "porteiro": 12_000,
    "porteiro-pix": 7_000,
    "sketch": 16_000,  # the lean sketch: ~12,000 req/s on the fastest machine seen
}
HELLO_REQUESTS = 4_000
NAIVE_ORDERS = 200_000


@dataclass(frozen=True)
class Plan:
    closed_s: float  # closed-loop (maximum throughput) time per scenario, all rounds
    open_s: float  # each open-loop run at 50 % of the maximum
    variant_s: float  # duplicate-mix and Pix closed runs
    e2e_s: float  # end to end + memory, at 50 % of the PG maximum
    scale: tuple[int, ...]  # stored events before the scale runs (besides empty)
    closed_rounds: int = 3  # closed_s split into this many runs, taken in turns
    connections: int = 64
    open_connections: int = 256
    e2e_workers: int = 2
    generator: str = "wrk"  # closed loop: wrk, or python when wrk is missing


@dataclass
class Context:
    plan: Plan
    folder: Path
    pg_admin_url: str
    python_ceiling: float | None = None  # open-loop req/s the Python generator reached
    notes: list[str] = field(default_factory=list)
    seed: int = 1
    keep: bool = False  # keep every database for inspection (--keep)

    def next_seed(self) -> int:
        self.seed += 1
        return self.seed


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@contextmanager
def running(server: servers.Server) -> Iterator[servers.Server]:
    try:
        yield server
    finally:
        server.stop()


def family(name: str) -> str:
    return name.split("-")[0] if not name.startswith(("sqlite", "pg")) else "porteiro"


# -- loads ------------------------------------------------------------------------------


def closed(ctx: Context, server: servers.Server, kind: str, seconds: float) -> Load:
    """Maximum throughput: fixed concurrency, as fast as the server answers."""
    cpu = servers.cpu_seconds(server.pids())
    if ctx.plan.generator == "wrk":
        count = closed_requests(server.name, kind, seconds)
        batch = presigned.build(kind, count, start=time.time(), seed=ctx.next_seed())
        path = ctx.folder / "requests.bin"
        presigned.write_file(batch.requests, path)
        cpu = servers.cpu_seconds(server.pids())  # the server idled while the file was built
        load = loadgen_wrk.run(
            server.ports, path, kind=kind, connections=ctx.plan.connections, duration=seconds
        )
        path.unlink()
    else:
        load = loadgen_py.run(
            server.ports,
            kind=kind,
            duration=seconds,
            concurrency=ctx.plan.connections,
            seed=ctx.next_seed(),
        )
    load.server_cpu_s = round(servers.cpu_seconds(server.pids()) - cpu, 2)
    server.check_alive()
    say(
        f"{server.name} closed {kind}: {load.rate:,.0f} req/s, p99 {load.p99_ms} ms, "
        f"errors {load.errors}, non-2xx {load.non_2xx}, wraps {load.wraps}"
    )
    return load


def closed_requests(name: str, kind: str, seconds: float) -> int:
    """How many requests to pre-sign for a closed run of `kind` against server `name`."""
    group = family(name)
    if group == "hello":
        return HELLO_REQUESTS
    per_second = CLOSED_REQUESTS_PER_SECOND.get(
        f"{group}-{kind}", CLOSED_REQUESTS_PER_SECOND[group]
    )
    return int(per_second * seconds)


def closed_checked(ctx: Context, server: servers.Server, kind: str, seconds: float) -> Load:
    """A closed-loop run, measured once more when the first looks off (failed requests,
    or a p99 over a second: a stall on the shared machine); the note and the JSON keep
    the first attempt's figures."""
    load = closed(ctx, server, kind, seconds)
    if not (load.errors or load.non_2xx or (load.p99_ms or 0) > 1000):
        return load
    ctx.notes.append(
        f"{server.name} {kind}: closed run repeated; the first gave {load.rate:,.0f} req/s, "
        f"p99 {load.p99_ms} ms, {load.errors} errors, {load.non_2xx} non-2xx"
    )
    again = closed(ctx, server, kind, seconds)
    again.detail["first_attempt"] = asdict(load)
    return again


def open_loop(ctx: Context, server: servers.Server, rate: float, seconds: float) -> Load:
    """Latency at a fixed arrival rate, from each request's scheduled send time.

    The rate is capped at half of the Python generator's measured ceiling (so that the
    generator is never the bottleneck), with a note when that lowers it."""
    ceiling = ctx.python_ceiling
    if ceiling is not None and rate > ceiling / 2:
        ctx.notes.append(
            f"{server.name}: open loop lowered from {rate:,.0f}/s to {ceiling / 2:,.0f}/s, "
            f"half of the Python generator's ceiling ({ceiling:,.0f}/s)"
        )
        rate = math.floor(ceiling / 2)
    cpu = servers.cpu_seconds(server.pids())
    load = loadgen_py.run(
        server.ports,
        kind="stripe",
        duration=seconds,
        rate=rate,
        connections=ctx.plan.open_connections,
        seed=ctx.next_seed(),
    )
    load.server_cpu_s = round(servers.cpu_seconds(server.pids()) - cpu, 2)
    server.check_alive()
    say(
        f"{server.name} open @{rate:,.0f}/s: {load.rate:,.0f} req/s, p50 {load.p50_ms} ms, "
        f"p99 {load.p99_ms} ms, p99.9 {load.p999_ms} ms, errors {load.errors}"
    )
    return load


def half(load: Load) -> float:
    return max(10.0, math.floor(load.rate / 2))


# -- phases -----------------------------------------------------------------------------


def generators(ctx: Context) -> dict[str, Any]:
    """The Python generator's open-loop ceiling against the hello-world server (wrk's is
    the hello-x1 closed-loop row itself)."""
    with running(servers.hello(1, False, ctx.folder)) as server:
        load = loadgen_py.run(
            server.ports,
            kind="stripe",
            # 40,000 requests: ~3 s at the ceiling seen on the slowest machines (the run
            # lasts until all are answered, and building them counts against the budget).
            duration=min(ctx.plan.open_s, 1),
            rate=40_000,
            connections=ctx.plan.open_connections,
            seed=ctx.next_seed(),
        )
    ctx.python_ceiling = load.rate
    say(f"python open-loop ceiling (asked 40,000/s): {load.rate:,.0f} req/s")
    return {"python_open": load}


@dataclass
class Scenario:
    """A compared server, up for the whole servers phase."""

    name: str
    server: servers.Server
    info: dict[str, Any]  # processes, ports, topology: copied into the results
    mixes: bool = False  # Porteiro: also the duplicate and Pix mixes


def start_hello(ctx: Context, processes: int, shared_port: bool) -> Scenario:
    server = servers.hello(processes, shared_port, ctx.folder)
    return Scenario(f"hello{processes}", server, _shape(server))


def start_naive(ctx: Context, processes: int) -> Scenario:
    url = pgdata.fresh_database(ctx.pg_admin_url, f"naive{processes}")
    pgdata.naive_schema(url, NAIVE_ORDERS)
    server = servers.naive(processes, url, ctx.folder)
    return Scenario(f"naive{processes}", server, _shape(server))


def start_sketch(ctx: Context, name: str, keeps: str = "id", processes: int = 1) -> Scenario:
    url = pgdata.fresh_database(ctx.pg_admin_url, name.replace("-", "_"))
    pgdata.sketch_schema(url)
    server = servers.sketch(url, ctx.folder, keeps, processes)
    return Scenario(name, server, _shape(server))


def start_porteiro(ctx: Context, name: str, store: str, processes: int) -> Scenario:
    config = porteiro_config(ctx, name, store)
    server = servers.porteiro(name, config, processes, ctx.folder)
    info = {**_shape(server), "topology": topology(processes)}
    return Scenario(name, server, info, mixes=True)


def _shape(server: servers.Server) -> dict[str, Any]:
    return {"processes": len(server.pids()), "ports": len(server.ports)}


def maxima(ctx: Context, scenarios: list[Scenario]) -> dict[str, Load]:
    """Each scenario's closed-loop maximum (unique Stripe), as `closed_rounds` shorter runs
    taken in turns across all scenarios (A B C, C B A, A B C) and combined.

    These shared 2-core machines speed up and slow down by a third within minutes: one
    run per scenario, minutes apart, put that swing into every ratio. In turns, each
    scenario sees the same mix of good and bad moments, so the ratios between them hold.
    """
    rounds = max(1, ctx.plan.closed_rounds)
    seconds = max(1.0, ctx.plan.closed_s / rounds)
    runs: dict[str, list[Load]] = {scenario.name: [] for scenario in scenarios}
    for number in range(rounds):
        for scenario in scenarios if number % 2 == 0 else scenarios[::-1]:
            runs[scenario.name].append(closed_checked(ctx, scenario.server, "stripe", seconds))
    combined = {name: report.combine(loads) for name, loads in runs.items()}
    for name, load in combined.items():
        rates = ", ".join(f"{run.rate:,.0f}" for run in runs[name])
        say(f"{name} maximum: {load.rate:,.0f} req/s over {rounds} runs ({rates})")
    return combined


def follow_up(ctx: Context, scenario: Scenario, top: Load) -> dict[str, Any]:
    """After the maxima: the open loop at half of the scenario's maximum, then (Porteiro)
    the duplicate and Pix mixes."""
    result: dict[str, Any] = {
        "closed": top,
        "open": open_loop(ctx, scenario.server, half(top), ctx.plan.open_s),
        **scenario.info,
    }
    if scenario.mixes and ctx.plan.variant_s > 0:
        for kind in ("stripe-dup", "pix"):
            result[kind] = closed_checked(ctx, scenario.server, kind, ctx.plan.variant_s)
    if probes := commit_probes(scenario.server):
        result["commit_probe"] = probes
    return result


def commit_probes(server: servers.Server) -> list[dict[str, Any]]:
    """Per receiver process, what `batch_concurrency = auto` measured and chose."""
    probes = [
        {"commit_ms": line.get("commit_ms"), "batches_in_flight": line.get("batches_in_flight")}
        for line in server.logged("store.commit_probe")
    ]
    for probe in probes:
        say(
            f"{server.name}: commit probe {probe['commit_ms']} ms, "
            f"{probe['batches_in_flight']} batch(es) in flight"
        )
    return probes


def porteiro_config(ctx: Context, name: str, store: str, worker_concurrency: int = 4) -> Path:
    if store == "sqlite":
        path = ctx.folder / f"{name}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        url = f"sqlite:///{path}"
    else:
        url = pgdata.fresh_database(ctx.pg_admin_url, name)
    config = servers.write_config(ctx.folder, name, url, worker_concurrency)
    servers.porteiro_command(config, "db", "upgrade")
    return config


def topology(processes: int) -> str:
    if processes == 1:
        return "1 process"
    option = servers.receivers_option()
    if option:
        return f"{processes} processes sharing one port (serve {option} {processes})"
    return f"{processes} processes on {processes} ports, load split evenly (no shared port yet)"


def store_url(config: Path) -> str:
    for line in config.read_text().splitlines():
        if line.startswith("url = "):
            return line.split('"')[1]
    raise RuntimeError(f"no store url in {config}")


# -- end to end and memory --------------------------------------------------------------


def settle(ctx: Context) -> None:
    """After the servers phase: drop its databases (unless --keep) and checkpoint, so the
    phases that follow measure their own work. Left in place, the Porteiro scenarios'
    hundreds of thousands of events drew autovacuum (every index of `events` scanned)
    and the write-back of their dirty pages into the end-to-end run's first minutes."""
    if not ctx.keep:
        pgdata.drop_databases(ctx.pg_admin_url)
    pgdata.checkpoint(ctx.pg_admin_url)


@dataclass
class Samples:
    t: list[float] = field(default_factory=list)
    backlog: list[int] = field(default_factory=list)
    rss_kib: dict[str, list[int | None]] = field(default_factory=dict)


def end_to_end(ctx: Context, rate: float) -> dict[str, Any]:
    """Receivers + `porteiro worker`s on PostgreSQL at a steady `rate` for e2e_s seconds:
    ack latency, receipt-to-done latency, backlog every second, RSS of every process."""
    config = porteiro_config(ctx, "e2e", "pg")
    url = store_url(config)
    with (
        running(servers.porteiro("e2e-receiver", config, 1, ctx.folder)) as receiver,
        running(servers.workers(config, ctx.plan.e2e_workers, ctx.folder)) as workers,
    ):
        roles = {"receiver": receiver.procs[0].pid}
        roles.update({f"worker{i}": proc.pid for i, proc in enumerate(workers.procs)})
        samples, stop = Samples(rss_kib={role: [] for role in roles}), threading.Event()
        sampler = threading.Thread(target=_sample, args=(url, roles, samples, stop), daemon=True)
        since = datetime.now(UTC)
        sampler.start()
        try:
            load = open_loop(ctx, receiver, rate, ctx.plan.e2e_s)
            drained = _drain(url, timeout=20)
            workers.check_alive()
        finally:
            stop.set()
            sampler.join(timeout=5)
        latency = pgdata.e2e_latency(url, since)
    if not ctx.keep:
        # A million events updated twice each: autovacuum would work through them for
        # minutes, next to the scale phase's measurements.
        pgdata.drop_database(ctx.pg_admin_url, url)
    say(
        f"e2e @{rate:,.0f}/s: receipt->done p50 {_s(latency['p50_s'])} p99 {_s(latency['p99_s'])}"
        f", backlog max {max(samples.backlog, default=0)}, drained in {drained}"
    )
    return {
        "rate": rate,
        "ack": load,
        "commit_probe": commit_probes(receiver),
        "latency": latency,
        "drain_s": drained,
        "workers": ctx.plan.e2e_workers,
        "samples": samples.__dict__,
    }


def drain(ctx: Context) -> dict[str, Any]:
    """Worker capacity, apart from ingest: a closed-loop Stripe load stored with no worker
    running, then `e2e_workers` workers until nothing is left; events/s, their CPU and
    PostgreSQL's WAL per event. Not in the default run (it would push `make bench` past
    its budget): `--phases drain`."""
    config = porteiro_config(ctx, "drain", "pg")
    url = store_url(config)
    with running(servers.porteiro("pg-drain", config, 1, ctx.folder)) as receiver:
        closed(ctx, receiver, "stripe", 2 * ctx.plan.closed_s)  # some 10 s of work
    events = pgdata.event_count(url)
    if not events:
        raise RuntimeError("drain: the load stored no event")
    pgdata.checkpoint(url)  # the drain does not pay for the ingest's write-back
    wal_before = pgdata.wal_position(url)
    with running(servers.workers(config, ctx.plan.e2e_workers, ctx.folder)) as workers:
        # CPU from the first batch done on: the processes' start-up is not per event.
        while (waiting := pgdata.backlog(url)) == events:
            workers.check_alive()
            time.sleep(0.05)
        cpu = servers.cpu_seconds(workers.pids())
        left = _drain(url, timeout=120)
        cpu = servers.cpu_seconds(workers.pids()) - cpu
        workers.check_alive()
    wal = pgdata.wal_since(url, wal_before)
    # From the first done mark to the last, as the workers stamped them.
    seconds = pgdata.done_span(url)
    if not ctx.keep:
        pgdata.drop_database(ctx.pg_admin_url, url)
    result = {
        "events": events,
        "workers": ctx.plan.e2e_workers,
        "seconds": round(seconds, 2),
        "drained": left is not None,
        "events_per_s": round(events / max(seconds, 0.001), 1),
        "worker_cpu_us_per_event": round(cpu / max(waiting, 1) * 1e6, 1),
        "wal_bytes_per_event": round(wal / events),
    }
    say(
        f"drain: {events:,} events by {result['workers']} workers in {seconds:.1f} s = "
        f"{result['events_per_s']:,.0f}/s; worker CPU {result['worker_cpu_us_per_event']} "
        f"us/event; WAL {result['wal_bytes_per_event']:,} B/event"
    )
    return result


def _s(value: Any) -> str:
    return "-" if value is None else f"{float(value) * 1000:.0f} ms"


def _sample(url: str, roles: dict[str, int], samples: Samples, stop: threading.Event) -> None:
    started = time.monotonic()
    while not stop.is_set():
        samples.t.append(round(time.monotonic() - started, 1))
        try:
            samples.backlog.append(pgdata.backlog(url))
        except Exception:
            samples.backlog.append(-1)
        for role, pid in roles.items():
            samples.rss_kib[role].append(servers.rss_kib(pid))
        stop.wait(1.0)


def _drain(url: str, timeout: float) -> float | None:
    """Seconds until the backlog is empty after the load (None: not within `timeout`)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if pgdata.backlog(url) == 0:
            return round(time.monotonic() - started, 1)
        time.sleep(0.5)
    return None


def memory(samples: dict[str, Any], warmup_share: float = 0.1) -> dict[str, Any]:
    """Per process: RSS after warm-up (the first 10 % of the run), at the end, the max."""
    result = {}
    for role, series in samples["rss_kib"].items():
        values = [v for v in series if v is not None]
        if len(values) < 2:
            continue
        start = values[min(len(values) - 1, int(len(values) * warmup_share))]
        end = values[-1]
        result[role] = {
            "first_mib": round(values[0] / 1024, 1),
            "start_mib": round(start / 1024, 1),
            "end_mib": round(end / 1024, 1),
            "max_mib": round(max(values) / 1024, 1),
            "growth_pct": round((end - start) / start * 100, 1),
        }
    return result


# -- scale ------------------------------------------------------------------------------


def scale(ctx: Context) -> dict[str, Any]:
    """PG x1 ingest with N events already stored (preloaded), each step measured in turns
    with a server on a fresh, empty store in the same minutes. A baseline taken once,
    minutes before, put the machine's swings into the ratio (one run read 0.78 for 1 M
    stored and 1.01 for 5 M against the same empty-store figure)."""
    config = porteiro_config(ctx, "scale", "pg")
    url = store_url(config)
    template = presigned.build("stripe", 1, start=time.time()).requests[0]
    body = template.split(b"\r\n\r\n", 1)[1]
    event_id = body[body.index(b'"evt_') + 1 : body.index(b'"', body.index(b'"evt_') + 1)]
    steps: list[dict[str, Any]] = []
    stored = 0
    for target in ctx.plan.scale:
        say(f"preloading {target - stored:,} events (to {target:,} stored)")
        seconds = pgdata.preload(url, target - stored, body, event_id)
        stored = target
        size = pgdata.table_size(url)
        say(f"preloaded in {seconds:.0f} s; {pgdata.event_count(url):,} events, {size}")
        load, empty, pages = scale_step(ctx, config, target)
        steps.append(
            {
                "stored": target,
                "preload_s": round(seconds, 1),
                "database_size": size,
                "load": load,
                "empty": empty,
                "console": pages,
            }
        )
    return {"steps": steps}


def scale_step(ctx: Context, config: Path, stored: int) -> tuple[Load, Load, dict[str, Any]]:
    """The store with `stored` events and a fresh empty one, in turns (as `maxima`);
    then the console's pages on the full one, the empty one idle (bench/console.py)."""
    empty_config = porteiro_config(ctx, "scale-empty", "pg")
    for path in (config, empty_config):  # every step starts from a clean checkpoint
        pgdata.checkpoint(store_url(path))
    with (
        running(servers.porteiro(f"pg-scale-{stored}", config, 1, ctx.folder)) as full,
        running(servers.porteiro("pg-scale-empty", empty_config, 1, ctx.folder)) as empty,
    ):
        named = f"{stored:,} stored"
        tops = maxima(ctx, [Scenario(named, full, {}), Scenario("empty store", empty, {})])
        url = store_url(config)
        object_id, reference = pgdata.sample_payment(url) or (None, None)
        paths = console.pages(object_id, reference, pgdata.latest_event_id(url))
        say(f"console pages with {stored:,} stored")
        pages = console.time_pages(f"http://127.0.0.1:{full.ports[0]}", paths)
    return tops[named], tops["empty store"], pages
