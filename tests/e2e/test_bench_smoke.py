"""The benchmark harness (bench/, `make bench`) must not rot: its smallest piece runs.

The quick mode's hello-world and Porteiro-on-SQLite scenarios, 2 s per load, with wrk
when it is installed and the Python closed-loop generator otherwise; then the JSON
result must hold every field, of the right type, with counts that agree with each other
and with the SQLite store. How fast anything ran is not checked here: a shared machine's
speed is no property of the code, and `make bench` is where speed is measured.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest
from bench import requests as presigned
from bench import run as bench_run
from bench.report import Load
from bench.sketch import _signed

from porteiro.providers.stripe.samples import signature_header
from tests.support.services import PG_ADMIN_URL, require_postgres

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# A load in the JSON: every field of bench.report.Load, plus the two it derives.
LOAD_FIELDS = {f.name for f in dataclasses.fields(Load)} | {
    "cpu_us_per_request",
    "generator_cpu_percent",
}
COUNTS = ("connections", "requests", "errors", "non_2xx", "wraps")
LATENCIES = ("p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms")


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def assert_is_load(load: Mapping[str, Any], mode: str, kind: str, generator: str) -> None:
    """A load as the harness writes it: every field typed, its figures consistent, and no
    request that failed or was refused (a correctness property of the run, not a speed)."""
    assert set(load) == LOAD_FIELDS
    assert (load["mode"], load["kind"], load["generator"]) == (mode, kind, generator)
    for name in COUNTS:
        assert isinstance(load[name], int) and load[name] >= 0, name
    assert load["requests"] > 0
    assert load["errors"] == 0 and load["non_2xx"] == 0
    assert is_number(load["duration_s"]) and load["duration_s"] > 0
    assert load["rate"] == pytest.approx(load["requests"] / load["duration_s"], rel=0.01)
    latencies = [load[name] for name in LATENCIES]
    assert all(is_number(value) for value in latencies)
    assert latencies[0] > 0 and latencies == sorted(latencies)  # p50 <= ... <= max
    assert (load["target_rate"] is None) == (mode == "closed")
    for name in ("server_cpu_s", "generator_cpu_s"):
        assert is_number(load[name]) and load[name] >= 0, name
    per_request = load["server_cpu_s"] / load["requests"] * 1e6
    assert load["cpu_us_per_request"] == pytest.approx(per_request)
    assert is_number(load["generator_cpu_percent"])
    assert isinstance(load["detail"], dict)


def assert_is_target(target: Mapping[str, Any]) -> None:
    assert set(target) == {"name", "measured", "goal", "passed", "note"}
    assert isinstance(target["name"], str) and isinstance(target["goal"], str)
    assert isinstance(target["note"], str)
    if target["measured"] is None:  # not measured in this run: no verdict
        assert target["passed"] is None
    else:
        assert is_number(target["measured"])
        assert isinstance(target["passed"], bool) or target["goal"] == "reference"


def test_quick_bench_measures_hello_and_sqlite(tmp_path: Path) -> None:
    generator = "wrk" if shutil.which("wrk") else "python"
    results, scratch = tmp_path / "results", tmp_path / "scratch"
    command = [sys.executable, "bench/run.py", "--quick", "--scenarios", "hello1,sqlite",
               "--phases", "servers", "--duration", "2", "--generator", generator,
               "--results", str(results), "--scratch", str(scratch), "--keep"]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr

    (path,) = results.glob("*.json")
    document = json.loads(path.read_text())
    assert {"started_at", "elapsed_s", "plan", "machine", "git", "python_generator_ceiling",
            "notes", "servers", "phase_s", "targets"} <= set(document)  # fmt: skip
    assert path.name.startswith(document["started_at"][:10])
    assert is_number(document["elapsed_s"]) and document["elapsed_s"] > 0
    assert document["plan"]["closed_s"] == document["plan"]["open_s"] == 2
    assert document["plan"]["generator"] == generator
    assert isinstance(document["machine"]["cpus"], int) and document["machine"]["cpus"] >= 1
    assert isinstance(document["git"]["commit"], str)  # empty outside a git checkout
    assert isinstance(document["git"]["dirty_src"], bool)
    assert document["python_generator_ceiling"] is None  # no generators phase in this run
    assert isinstance(document["notes"], list)
    assert list(document["phase_s"]) == ["servers"] and document["phase_s"]["servers"] > 0
    assert "phases: servers" in done.stdout

    hello, sqlite = document["servers"]["hello1"], document["servers"]["sqlite"]
    assert set(hello) == {"closed", "open", "processes", "ports"}
    assert set(sqlite) == {"closed", "open", "processes", "ports", "topology", "stripe-dup", "pix"}
    for figures in (hello, sqlite):
        assert figures["processes"] == figures["ports"] == 1
        closed, opened = figures["closed"], figures["open"]
        assert_is_load(closed, "closed", "stripe", generator)
        # The maximum is the harness's rounds in turns, combined: their counts add up.
        runs = closed["detail"]["runs"]
        assert len(runs) == document["plan"]["closed_rounds"]
        assert sum(run["requests"] for run in runs) == closed["requests"]
        assert max(run["p99_ms"] for run in runs) == closed["p99_ms"]  # the worst run's
        # The open loop runs at half of the maximum, and every request it planned at that
        # rate was answered.
        assert_is_load(opened, "open", "stripe", "python")
        assert opened["target_rate"] == max(10, int(closed["rate"] / 2))
        assert opened["requests"] == max(1, int(opened["target_rate"] * 2))
    assert_is_load(sqlite["stripe-dup"], "closed", "stripe-dup", generator)
    assert_is_load(sqlite["pix"], "closed", "pix", generator)

    for target in document["targets"]:
        assert_is_target(target)
    targets = {target["name"]: target for target in document["targets"]}
    ratio = targets["sqlite / hello1 req/s"]
    assert ratio["measured"] == pytest.approx(sqlite["closed"]["rate"] / hello["closed"]["rate"])
    assert targets["sqlite ack p99 @50%"]["measured"] == sqlite["open"]["p99_ms"]
    assert targets["sqlite ack p99 @max"]["measured"] == sqlite["closed"]["p99_ms"]
    assert targets["pg1 / hello1 req/s"]["measured"] is None  # pg1 did not run
    assert not any("e2e" in name or "stored" in name for name in targets)
    assert "sqlite / hello1 req/s" in done.stdout

    # Every acknowledged unique Stripe event is stored; no request failed authentication.
    with sqlite3.connect(scratch / "sqlite.db") as conn:
        events = conn.execute("SELECT count(*) FROM events").fetchone()[0]
        refused = conn.execute("SELECT count(*) FROM quarantine").fetchone()[0]
    assert refused == 0
    assert sqlite["closed"]["wraps"] == 0
    assert events >= sqlite["closed"]["requests"] + sqlite["open"]["requests"]


def run_on_postgres(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> tuple[dict[str, Any], str]:
    """`bench/run.py --quick ARGS` against the test server: its JSON and its output."""
    require_postgres()
    generator = "wrk" if shutil.which("wrk") else "python"
    results = tmp_path / "results"
    command = [sys.executable, "bench/run.py", "--quick", *args, "--generator", generator,
               "--results", str(results), "--scratch", str(tmp_path / "scratch")]  # fmt: skip
    environment = {**os.environ, "BENCH_PG_URL": PG_ADMIN_URL, **(env or {})}
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=environment
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = results.glob("*.json")
    return json.loads(path.read_text()), done.stdout


def drop(*names: str) -> None:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.postgres
def test_drain_phase_measures_the_workers_alone(tmp_path: Path) -> None:
    """`--phases drain`: a load stored with no worker, then workers until nothing is
    left; every stored event is done and the figures agree with each other."""
    document, stdout = run_on_postgres(
        tmp_path, "--scenarios", "pg1", "--phases", "drain", "--duration", "1", timeout=180
    )
    drained = document["drain"]
    assert drained["drained"] is True
    assert isinstance(drained["events"], int) and drained["events"] > 0
    assert drained["workers"] == 2
    assert is_number(drained["seconds"]) and drained["seconds"] > 0
    assert drained["events_per_s"] == pytest.approx(drained["events"] / drained["seconds"], 0.01)
    assert is_number(drained["worker_cpu_us_per_event"])
    assert drained["worker_cpu_us_per_event"] > 0
    assert (
        drained["wal_bytes_per_event"] > 100
    )  # bytes, not speed: each event is updated at least twice
    assert "drain: " in stdout


SKETCHES = {  # scenario: (its database, the table with a row per acknowledged request)
    "sketch": ("porteiro_bench_sketch", "sketch_events"),
    "sketch-headers": ("porteiro_bench_sketch_headers", "sketch_deliveries"),
    "sketch-events": ("porteiro_bench_sketch_events", "sketch_parsed"),
    "sketch-events2": ("porteiro_bench_sketch_events2", "sketch_parsed"),  # 2 processes
}


@pytest.mark.postgres
def test_the_lean_sketches_run_beside_porteiro_and_store_what_they_acked(tmp_path: Path) -> None:
    """`--scenarios sketch,...` (bench/sketch.py, the issue's lean reference, and the same
    keeping headers, then also the parsed event; in one process and in two): each
    answers signed requests only, stores every acknowledged event, and gets its
    reference row against the hello-world of its process count."""
    try:
        scenarios = ",".join(["hello1", "hello2", *SKETCHES])
        args = ["--scenarios", scenarios, "--phases", "servers", "--duration", "1"]
        document, _ = run_on_postgres(tmp_path, *args, "--keep")
        reference = {t["name"]: t for t in document["targets"] if t["goal"] == "reference"}
        for name, (database, table) in SKETCHES.items():
            sketch = document["servers"][name]
            _, processes, _ = bench_run.SKETCHES[name]
            hello = document["servers"][f"hello{processes}"]
            assert sketch["processes"] == hello["processes"]  # the same process tree
            assert_is_load(sketch["closed"], "closed", "stripe", document["plan"]["generator"])
            assert_is_load(sketch["open"], "open", "stripe", "python")
            measured = reference[f"{name} / hello{processes} req/s"]["measured"]
            assert measured == pytest.approx(sketch["closed"]["rate"] / hello["closed"]["rate"])
            url = PG_ADMIN_URL.rpartition("/")[0] + "/" + database
            with psycopg.connect(url) as conn:
                row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            assert row is not None
            # wrk re-sends its request file when a run outlasts it (`wraps`): a re-send is a
            # duplicate the sketch keeps once, so the closed load's distinct requests are at
            # least requests / (wraps + 1).
            closed = sketch["closed"]
            distinct = closed["requests"] // (closed["wraps"] + 1)
            assert row[0] >= distinct + sketch["open"]["requests"]
        assert "pg1 / sketch req/s" not in reference  # no pg1 in this run: no such row
        assert "pg2 / sketch-events2 req/s" not in reference
    finally:
        drop(*(database for database, _ in SKETCHES.values()))


@pytest.mark.postgres
def test_scale_phase_measures_each_step_in_turns_with_an_empty_store(tmp_path: Path) -> None:
    """`--phases scale`: events preloaded, then the stored and a fresh empty store's
    servers in turns; the ratio target is the stored store's rate over the empty one's."""
    try:
        document, _ = run_on_postgres(
            tmp_path, "--phases", "scale", "--keep", env={"BENCH_SCALE": "30000"}
        )
        (step,) = document["scale"]["steps"]
        assert step["stored"] == 30_000
        for load in (step["load"], step["empty"]):
            assert_is_load(load, "closed", "stripe", document["plan"]["generator"])
            assert len(load["detail"]["runs"]) == 2  # two rounds, in turns
        (target,) = [t for t in document["targets"] if "stored / empty" in t["name"]]
        assert target["measured"] == pytest.approx(step["load"]["rate"] / step["empty"]["rate"])
        # The console's pages on the preloaded store: each answered, each timed.
        pages = step["console"]
        assert {"overview", "payments, by order number", "payment timeline"} <= set(pages)
        for page, figures in pages.items():
            assert figures["statuses"] == [200], page
            assert 0 < figures["median_ms"] <= figures["max_ms"], page
        (slowest,) = [t for t in document["targets"] if t["name"].startswith("console page")]
        assert slowest["measured"] == max(p["median_ms"] for p in pages.values())
        url = PG_ADMIN_URL.rpartition("/")[0] + "/porteiro_bench_scale"
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT count(*) FROM events").fetchone()
        assert row is not None and row[0] >= 30_000 + step["load"]["requests"]
    finally:
        drop("porteiro_bench_scale", "porteiro_bench_scale-empty")


def _stripe_request(start: float) -> tuple[bytes, bytes]:
    """A benchmark Stripe body and its Stripe-Signature header, as the adapter signs."""
    body = presigned.build("stripe", 1, start=start).requests[0].split(b"\r\n\r\n", 1)[1]
    key = presigned.STRIPE_SECRET.encode()
    return body, signature_header(key, body, int(start)).encode()


def test_the_sketch_accepts_only_stripe_signatures_it_can_check() -> None:
    body, header = _stripe_request(time.time())
    assert _signed(body, header)
    assert not _signed(body + b" ", header)
    assert not _signed(body, None)
    assert not _signed(body, header.replace(b"v1=", b"v0="))
    assert not _signed(*_stripe_request(time.time() - 600))  # past the 5-minute tolerance
