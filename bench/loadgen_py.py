"""Runs bench/openloop.py in one or more generator processes and merges their figures.

Several processes split the arrival rate (each with its own request ids) when one Python
process could not keep up; the raw latencies are merged, so percentiles stay exact.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from array import array
from collections.abc import Sequence
from pathlib import Path

from bench.report import Load, with_latencies
from bench.servers import ROOT


def run(
    ports: Sequence[int],
    *,
    kind: str,
    duration: float,
    rate: float | None = None,
    concurrency: int = 0,
    connections: int = 256,
    processes: int = 1,
    count: int = 0,
    seed: int = 1,
    timeout: float = 10.0,
) -> Load:
    """Open loop at `rate` req/s, or closed loop with `concurrency` connections."""
    closed = concurrency > 0
    with tempfile.TemporaryDirectory(prefix="bench-lat-") as folder:
        procs = []
        for index in range(processes):
            command = [
                sys.executable,
                "-m",
                "bench.openloop",
                "--kind",
                kind,
                "--duration",
                str(duration),
                "--timeout",
                str(timeout),
                "--seed",
                str(seed * 100 + index),
                "--latencies",
                str(Path(folder) / f"{index}.bin"),
            ]
            command += [arg for port in ports for arg in ("--target", f"127.0.0.1:{port}")]
            if closed:
                per = max(1, concurrency // processes)
                command += ["--concurrency", str(per), "--count", str(count or 50_000)]
            else:
                assert rate is not None, "open loop needs a rate"
                command += ["--rate", str(rate / processes)]
                command += ["--connections", str(max(1, connections // processes))]
            procs.append(subprocess.Popen(command, stdout=subprocess.PIPE, cwd=ROOT))
        summaries = []
        for proc in procs:
            out, _ = proc.communicate(timeout=duration * 3 + 120)
            if proc.returncode != 0:
                raise RuntimeError(f"bench.openloop failed ({proc.returncode})")
            summaries.append(json.loads(out))
        latencies = array("d")
        for index in range(processes):
            with (Path(folder) / f"{index}.bin").open("rb") as handle:
                latencies.frombytes(handle.read())
    return _merge(summaries, latencies, kind, closed, rate, concurrency or connections)


def _merge(
    summaries: Sequence[dict[str, object]],
    latencies: array[float],
    kind: str,
    closed: bool,
    rate: float | None,
    connections: int,
) -> Load:
    duration = max(float(str(s["duration_s"])) for s in summaries)
    completed = sum(int(str(s["completed"])) for s in summaries)
    errors: dict[str, int] = {}
    for summary in summaries:
        for name, count in dict(summary["errors"]).items():  # type: ignore[call-overload]
            errors[name] = errors.get(name, 0) + int(count)
    load = Load(
        generator="python" + (f"x{len(summaries)}" if len(summaries) > 1 else ""),
        mode="closed" if closed else "open",
        kind=kind,
        connections=connections,
        duration_s=round(duration, 2),
        requests=completed,
        rate=round(completed / duration, 1) if duration else 0.0,
        target_rate=None if closed else rate,
        errors=sum(errors.values()),
        non_2xx=sum(int(str(s["non_2xx"])) for s in summaries),
        generator_cpu_s=round(sum(float(str(s["generator_cpu_s"])) for s in summaries), 2),
        detail={"errors": errors, "statuses": [s["statuses"] for s in summaries]},
    )
    return with_latencies(load, latencies)
