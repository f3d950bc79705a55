"""`make bench`: the side-by-side benchmark of issue 4, in one run on one machine.

    python bench/run.py            # the full run (<= 10 minutes on 2 cores)
    python bench/run.py --quick    # a 1-2 minute smoke run (also BENCH_QUICK=1)
    BENCH_SCALE=1000000 python bench/run.py   # only the 1 M step (default: 1 M and 5 M)

Prints a table and writes bench/results/<UTC date-time>.json. What is measured and how
to read it: docs/performance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: import `bench` as a package from the root
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from bench import console, loadgen_wrk, pgdata, phases, report, servers
from bench.report import Load, Target

SCENARIOS = ("hello1", "hello2", "naive1", "naive2", "sqlite", "pg1", "pg2")
# Only when asked for: the lean sketch of issue 4 (bench/sketch.py) and the same sketch
# keeping what Porteiro must keep before the ack, in one process and in two (beside
# pg1 and pg2); reference rows. Scenario: (what it keeps, processes, note).
SKETCHES = {
    f"{name}{suffix}": (keeps, processes, f"{note}{', 2 processes' if suffix else ''}")
    for suffix, processes in (("", 1), ("2", 2))
    for name, keeps, note in (
        ("sketch", "id", "lean sketch"),
        ("sketch-headers", "headers", "sketch + headers"),
        ("sketch-events", "events", "sketch + headers + event row"),
    )
}
EXTRA_SCENARIOS = tuple(SKETCHES)
PHASES = ("generators", "servers", "e2e", "scale")
EXTRA_PHASES = ("drain",)  # only when asked for: --phases drain
DEFAULT_PG = "postgresql://postgres@127.0.0.1:5432/test"
RESULTS = Path(__file__).resolve().parent / "results"


def plan_for(args: argparse.Namespace, env: Mapping[str, str]) -> phases.Plan:
    quick = args.quick or env.get("BENCH_QUICK", "") not in ("", "0")
    scale = tuple(int(n) for n in (env.get("BENCH_SCALE") or "").replace(",", " ").split())
    if quick:
        plan = phases.Plan(
            closed_s=2, open_s=2, variant_s=2, e2e_s=15, scale=scale or (50_000,), closed_rounds=2
        )
    else:
        # 1 M then 5 M stored (the preload takes about a minute and a half in all);
        # BENCH_SCALE replaces the steps, e.g. BENCH_SCALE=1000000 for a shorter run.
        steps = tuple(sorted(set(scale))) or (1_000_000, 5_000_000)
        # Short loads: the run (5-minute end to end, 5 M preload) must fit in 10 minutes.
        # Maxima: 3 runs of 2 s per scenario, taken in turns (phases.maxima).
        plan = phases.Plan(
            closed_s=6, open_s=5, variant_s=3, e2e_s=300, scale=steps, closed_rounds=3
        )
    overrides: dict[str, Any] = {}
    if args.duration:
        overrides.update(closed_s=args.duration, open_s=args.duration, variant_s=args.duration)
    if args.e2e_seconds is not None:
        overrides["e2e_s"] = args.e2e_seconds
    generator = args.generator or ("wrk" if loadgen_wrk.available() else "python")
    overrides["generator"] = generator
    return phases.Plan(**{**plan.__dict__, **overrides})


def measure(ctx: phases.Context, scenarios: Sequence[str], wanted: Sequence[str]) -> dict[str, Any]:
    result: dict[str, Any] = {"servers": {}, "phase_s": {}}
    clock = time.monotonic()

    def lap(phase: str) -> None:  # how long each phase took: the 10-minute budget's parts
        nonlocal clock
        now = time.monotonic()
        result["phase_s"][phase] = round(now - clock, 1)
        clock = now

    if "generators" in wanted:
        result["generators"] = phases.generators(ctx)
        lap("generators")
    shared = servers.receivers_option() is not None
    starts = {
        "hello1": lambda: phases.start_hello(ctx, 1, shared),
        "hello2": lambda: phases.start_hello(ctx, 2, shared),
        "naive1": lambda: phases.start_naive(ctx, 1),
        "naive2": lambda: phases.start_naive(ctx, 2),
        "sqlite": lambda: phases.start_porteiro(ctx, "sqlite", "sqlite", 1),
        "pg1": lambda: phases.start_porteiro(ctx, "pg1", "pg", 1),
        "pg2": lambda: phases.start_porteiro(ctx, "pg2", "pg", 2),
    }
    for name, (keeps, processes, _) in SKETCHES.items():
        starts[name] = functools.partial(phases.start_sketch, ctx, name, keeps, processes)
    if "servers" in wanted:
        with contextlib.ExitStack() as up:
            started = start_all(up, [(name, starts[name]) for name in scenarios])
            tops = phases.maxima(ctx, started)
            for scenario in started:
                phases.say(f"scenario {scenario.name}: half load, then mixes")
                result["servers"][scenario.name] = phases.follow_up(
                    ctx, scenario, tops[scenario.name]
                )
        if _needs_postgres(scenarios, ["servers"]):
            phases.settle(ctx)
        lap("servers")
    if "e2e" in wanted:
        rate = _e2e_rate(result["servers"])
        result["e2e"] = phases.end_to_end(ctx, rate)
        result["memory"] = phases.memory(result["e2e"]["samples"])
        lap("e2e")
    if "scale" in wanted:
        result["scale"] = phases.scale(ctx)
        lap("scale")
    if "drain" in wanted:
        result["drain"] = phases.drain(ctx)
        lap("drain")
    return result


def start_all(
    up: contextlib.ExitStack, starts: Sequence[tuple[str, Callable[[], phases.Scenario]]]
) -> list[phases.Scenario]:
    """Start every scenario's server at once (each mostly waits: for its database, the
    naive orders, its processes' imports) and return them in the order given. `up` stops
    every one that started, even when another failed to."""
    phases.say(f"starting {', '.join(name for name, _ in starts)}")
    with ThreadPoolExecutor(max(1, len(starts))) as pool:
        futures = [pool.submit(start) for _, start in starts]
    started, failure = [], None
    for future in futures:
        try:
            scenario = future.result()
        except Exception as exc:
            failure = failure or exc
            continue
        up.callback(scenario.server.stop)
        started.append(scenario)
    if failure is not None:
        raise failure
    return started


def _needs_postgres(scenarios: Sequence[str], wanted: Sequence[str]) -> bool:
    on_pg = any(s.startswith(("naive", "pg", "sketch")) for s in scenarios) and "servers" in wanted
    return on_pg or any(phase in wanted for phase in ("e2e", "scale", "drain"))


def _e2e_rate(measured: Mapping[str, Any]) -> float:
    """Half of PG x1's maximum (a conservative default when it was not measured)."""
    pg1 = measured.get("pg1")
    return phases.half(pg1["closed"]) if pg1 else 500.0


# -- targets ----------------------------------------------------------------------------


def targets(result: Mapping[str, Any]) -> list[Target]:
    found: list[Target] = []
    srv = result.get("servers", {})

    def rate(name: str) -> float | None:
        return srv[name]["closed"].rate if name in srv else None

    def ratio(top: str, bottom: str) -> float | None:
        a, b = rate(top), rate(bottom)
        return None if a is None or not b else a / b

    for pg, hello, naive in (("pg1", "hello1", "naive1"), ("pg2", "hello2", "naive2")):
        share = ratio(pg, hello)
        found.append(report.at_least(f"{pg} / {hello} req/s", share, 0.30, "stretch 0.40"))
        found.append(report.at_least(f"{pg} / {hello} req/s (stretch)", share, 0.40))
        found.append(report.at_least(f"{pg} / {naive} req/s", ratio(pg, naive), 50))
    found.append(report.at_least("sqlite / hello1 req/s", ratio("sqlite", "hello1"), 0.20))
    # Reference rows (bench/sketch.py), no targets of the issue's.
    for sketch, (_, processes, note) in SKETCHES.items():
        for top, bottom in ((sketch, f"hello{processes}"), (f"pg{processes}", sketch)):
            if top in srv and bottom in srv:
                name = f"{top} / {bottom} req/s"
                found.append(Target(name, ratio(top, bottom), "reference", None, note))
    for name in ("sqlite", "pg1", "pg2"):
        if name in srv:
            found.append(report.at_most(f"{name} ack p99 @50%", srv[name]["open"].p99_ms, 25, "ms"))
            top = srv[name]["closed"].p99_ms
            found.append(report.at_most(f"{name} ack p99 @max", top, 100, "ms"))
    found += _e2e_targets(result)
    found += _scale_targets(result)
    return found


def _e2e_targets(result: Mapping[str, Any]) -> list[Target]:
    e2e = result.get("e2e")
    if not e2e:
        return []
    p99 = e2e["latency"]["p99_s"]
    backlog = e2e["samples"]["backlog"]
    left = _not_done(e2e["latency"])
    note = f"{left:,} events not done: excluded" if left else ""
    found = [report.at_most("e2e receipt->done p99 @50%", p99, 1.0, "s", note)]
    # Steady means the receiver answered at the asked rate all along (receipt->done alone
    # would not show a receiver that fell behind: its queue sits in the generator).
    ack: Load = e2e["ack"]
    kept = ack.rate / e2e["rate"] if e2e["rate"] else None
    note = f"{ack.errors:,} requests unsent or failed" if ack.errors else ""
    found.append(report.at_least("e2e answered / asked rate", kept, 0.99, note))
    # Bounded: the backlog of the last third of the run stays under 2 s of arrivals.
    tail = backlog[len(backlog) * 2 // 3 :] or [0]
    limit = e2e["rate"] * 2
    note = f"max {max(backlog, default=0)}, drained in {e2e['drain_s']} s"
    found.append(report.at_most("e2e backlog (last third, max)", max(tail), limit, "events", note))
    for role, figures in result.get("memory", {}).items():
        found.append(report.at_most(f"RSS growth {role}", figures["growth_pct"], 10, "%"))
    return found


def _scale_targets(result: Mapping[str, Any]) -> list[Target]:
    found = []
    for step in result.get("scale", {}).get("steps", []):
        load: Load = step["load"]
        empty: Load = step["empty"]  # measured in turns with it (phases.scale_step)
        ratio = load.rate / empty.rate if empty.rate else None
        name = f"{step['stored'] / 1e6:g} M stored / empty req/s"
        found.append(report.at_least(name, ratio, 0.80))
        pages = step.get("console", {})
        if pages:
            # The slowest console page's median, each page fetched as an operator does.
            slowest = max(pages, key=lambda page: pages[page]["median_ms"])
            worst = pages[slowest]["median_ms"]
            name = f"console page @{step['stored'] / 1e6:g} M stored (slowest median)"
            note = slowest + ("" if all(p["statuses"] == [200] for p in pages.values()) else
                              "; a page did not answer 200")  # fmt: skip
            found.append(report.at_most(name, worst, console.TARGET_MS, "ms", note))
    return found


# -- output -----------------------------------------------------------------------------


def rows(result: Mapping[str, Any]) -> list[tuple[str, Load]]:
    table: list[tuple[str, Load]] = []
    for name, load in result.get("generators", {}).items():
        table.append((f"generator {name} vs hello-x1", load))
    for name, figures in result.get("servers", {}).items():
        for key in ("closed", "open", "stripe-dup", "pix"):
            if key in figures:
                table.append((name, figures[key]))
    if "e2e" in result:
        table.append(("e2e pg1 + workers", result["e2e"]["ack"]))
    for step in result.get("scale", {}).get("steps", []):
        table.append((f"scale pg1 empty, beside {step['stored']:,}", step["empty"]))
        table.append((f"scale pg1 {step['stored']:,} stored", step["load"]))
    return table


def summary_lines(result: Mapping[str, Any]) -> list[str]:
    lines = []
    if "e2e" in result:
        lat = result["e2e"]["latency"]
        lines.append(
            f"end to end at {result['e2e']['rate']:,.0f}/s with {result['e2e']['workers']} "
            f"workers: receipt->done p50 {_ms(lat['p50_s'])}, p99 {_ms(lat['p99_s'])}, "
            f"p99.9 {_ms(lat['p999_s'])} over {lat['done']:,} done events; backlog max "
            f"{max(result['e2e']['samples']['backlog'], default=0)}"
        )
        left = _not_done(lat)
        if left:
            lines.append(
                f"  {left:,} events were still not done 20 s after the load stopped: the "
                "receipt->done percentiles above leave them out (they would only be higher)"
            )
    for role, mem in result.get("memory", {}).items():
        lines.append(
            f"RSS {role}: {mem['first_mib']} MiB at start, {mem['start_mib']} after warm-up, "
            f"{mem['end_mib']} at end, max {mem['max_mib']} ({mem['growth_pct']:+.1f} %)"
        )
    if "drain" in result:
        drained = result["drain"]
        lines.append(
            f"drain: {drained['events']:,} stored events by {drained['workers']} workers: "
            f"{drained['events_per_s']:,.0f}/s, worker CPU "
            f"{drained['worker_cpu_us_per_event']} us/event, WAL "
            f"{drained['wal_bytes_per_event']:,} B/event"
            + ("" if drained["drained"] else " (NOT drained within 120 s)")
        )
    for step in result.get("scale", {}).get("steps", []):
        lines.append(
            f"scale: preloaded to {step['stored']:,} events in {step['preload_s']} s "
            f"({step['database_size']})"
        )
        for page, figures in step.get("console", {}).items():
            lines.append(
                f"  console @{step['stored']:,}: {page:<28} median {figures['median_ms']:>6} ms,"
                f" max {figures['max_ms']:>6} ms  {figures['path']}"
            )
    if result.get("phase_s"):
        laps = ", ".join(f"{name} {seconds:g} s" for name, seconds in result["phase_s"].items())
        lines.append(f"phases: {laps}")
    return lines


def _not_done(latency: Mapping[str, Any]) -> int:
    states = ("status_pending", "status_retrying", "status_processing")
    return sum(int(latency.get(key, 0)) for key in states)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


def git_state() -> dict[str, Any]:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, check=False,
                              cwd=servers.ROOT)  # fmt: skip
        return done.stdout.strip()

    return {
        "commit": git("rev-parse", "HEAD"),
        "dirty_src": bool(git("status", "--porcelain", "src")),
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the 1-2 minute smoke version")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated")
    parser.add_argument("--phases", default=",".join(PHASES), help="comma-separated")
    parser.add_argument(
        "--duration", type=float, help="seconds of every load (the rounds of a maximum share them)"
    )
    parser.add_argument("--e2e-seconds", type=float, help="end-to-end + memory run length")
    parser.add_argument("--generator", choices=("wrk", "python"), help="closed loop (default wrk)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder for the JSON")
    parser.add_argument("--keep", action="store_true", help="keep scratch files and databases")
    parser.add_argument("--scratch", type=Path, help="scratch folder (default: a new temp one)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> Path:
    args = parse_args(argv)
    plan = plan_for(args, os.environ)
    scenarios = [s for s in args.scenarios.split(",") if s]
    wanted = [p for p in args.phases.split(",") if p]
    known = set(SCENARIOS) | set(EXTRA_SCENARIOS)
    unknown = set(scenarios) - known | set(wanted) - set(PHASES) - set(EXTRA_PHASES)
    if unknown:
        raise SystemExit(f"unknown scenario or phase: {', '.join(sorted(unknown))}")
    started = datetime.now(UTC)
    clock = time.monotonic()
    folder = args.scratch or Path(tempfile.mkdtemp(prefix="porteiro-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    ctx = phases.Context(plan, folder, os.environ.get("BENCH_PG_URL", DEFAULT_PG), keep=args.keep)
    phases.say(f"plan {plan}; scratch {folder}")
    try:
        with contextlib.ExitStack() as stack:
            if _needs_postgres(scenarios, wanted):
                note = stack.enter_context(pgdata.stock_autovacuum(ctx.pg_admin_url))
                if note:
                    ctx.notes.append(note)
            result = measure(ctx, scenarios, wanted)
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
            if _needs_postgres(scenarios, wanted):
                pgdata.drop_databases(ctx.pg_admin_url)
    checks = targets(result)
    document = {
        "started_at": started,
        "elapsed_s": round(time.monotonic() - clock, 1),
        "plan": plan.__dict__,
        "machine": report.machine(),
        "git": git_state(),
        "python_generator_ceiling": ctx.python_ceiling,
        "notes": ctx.notes,
        **result,
        "targets": checks,
    }
    path = report.write_json(args.results, document, started)
    print()
    print(report.load_table(rows(result)))
    for line in summary_lines(result):
        print(line)
    print()
    print(report.target_table(checks))
    for note in ctx.notes:
        print(f"note: {note}")
    print(f"\n{document['elapsed_s']} s; results in {path}")
    return path


def _exit_on_sigterm(signum: int, frame: object) -> None:
    # A plain SIGTERM would end the process without its `finally` blocks: servers left
    # running, databases left behind, and autovacuum left on when the run turned it on.
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    main()
