"""Closed-loop load with wrk at fixed concurrency, from a file of pre-signed requests."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from bench.report import Load

SCRIPT = Path(__file__).resolve().parent / "wrk" / "presigned.lua"


def available() -> bool:
    return shutil.which("wrk") is not None


def run(
    ports: Sequence[int],
    request_file: Path,
    *,
    kind: str,
    connections: int,
    duration: float,
    threads: int = 2,
    timeout: float = 5.0,
) -> Load:
    """`threads` wrk threads (a multiple of len(ports)), `connections` in total."""
    threads = max(threads, len(ports))
    command = [
        "wrk",
        f"-t{threads}",
        f"-c{max(connections, threads)}",
        f"-d{max(1, round(duration))}s",
        f"--timeout={timeout:g}s",
        "-s",
        str(SCRIPT),
        f"http://127.0.0.1:{ports[0]}",
        "--",
        str(request_file),
    ]
    env = {**os.environ, "BENCH_THREADS": str(threads), "BENCH_PORTS": ",".join(map(str, ports))}
    before = _children_cpu()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    cpu = _children_cpu() - before
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith('{"duration_us"')), None)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stdout}\n{done.stderr}")
    data = json.loads(line)
    seconds = data["duration_us"] / 1e6
    lat = {key: round(value / 1000, 2) for key, value in data["latency_us"].items()}
    errors = data["errors"]
    return Load(
        generator="wrk",
        mode="closed",
        kind=kind,
        connections=connections,
        duration_s=round(seconds, 2),
        requests=data["requests"],
        rate=round(data["requests"] / seconds, 1),
        p50_ms=lat["p50"],
        p90_ms=lat["p90"],
        p99_ms=lat["p99"],
        p999_ms=lat["p999"],
        max_ms=lat["max"],
        errors=errors["connect"] + errors["read"] + errors["write"] + errors["timeout"],
        non_2xx=errors["status"],  # wrk counts status > 399
        wraps=data["wraps"],
        generator_cpu_s=round(cpu, 2),
        detail={"errors": errors, "threads": threads},
    )


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime
