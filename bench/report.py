"""Benchmark figures: the result types, percentiles, the targets of issue 4, the table
printed at the end of `make bench`, and the JSON written to bench/results/."""

from __future__ import annotations

import json
import math
import platform
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


@dataclass
class Load:
    """One load run against one server. Latencies in milliseconds."""

    generator: str  # wrk | python
    mode: str  # closed | open
    kind: str  # stripe | stripe-dup | pix
    connections: int
    duration_s: float
    requests: int
    rate: float  # answered requests per second
    target_rate: float | None = None  # open loop only
    p50_ms: float | None = None
    p90_ms: float | None = None
    p99_ms: float | None = None
    p999_ms: float | None = None
    max_ms: float | None = None
    errors: int = 0  # connect/read/write errors and timeouts
    non_2xx: int = 0
    wraps: int = 0  # wrk re-sent its request file (those re-sends are duplicates)
    generator_cpu_s: float | None = None
    server_cpu_s: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def generator_cpu_percent(self) -> float | None:
        """The generator's CPU time over the run's wall time (100 = one core busy)."""
        if self.generator_cpu_s is None or not self.duration_s:
            return None
        return self.generator_cpu_s / self.duration_s * 100

    @property
    def cpu_us_per_request(self) -> float | None:
        if self.server_cpu_s is None or not self.requests:
            return None
        return self.server_cpu_s / self.requests * 1e6


def combine(loads: Sequence[Load]) -> Load:
    """Several runs of one load as one: requests, errors and CPU summed, the rate over the
    summed durations, and each latency percentile the worst of the runs' (percentiles of
    separate runs do not merge exactly; the worst never flatters). The runs are kept in
    `detail["runs"]`."""
    if len(loads) == 1:
        return loads[0]
    first = loads[0]
    duration = sum(load.duration_s for load in loads)
    requests = sum(load.requests for load in loads)

    def present(name: str) -> list[float]:
        return [value for load in loads if (value := getattr(load, name)) is not None]

    def worst(name: str) -> float | None:
        values = present(name)
        return max(values) if values else None

    def total(name: str) -> float | None:
        values = present(name)
        return round(sum(values), 2) if values else None

    return Load(
        generator=first.generator,
        mode=first.mode,
        kind=first.kind,
        connections=first.connections,
        duration_s=round(duration, 2),
        requests=requests,
        rate=round(requests / duration, 1) if duration else 0.0,
        p50_ms=worst("p50_ms"),
        p90_ms=worst("p90_ms"),
        p99_ms=worst("p99_ms"),
        p999_ms=worst("p999_ms"),
        max_ms=worst("max_ms"),
        errors=sum(load.errors for load in loads),
        non_2xx=sum(load.non_2xx for load in loads),
        wraps=sum(load.wraps for load in loads),
        generator_cpu_s=total("generator_cpu_s"),
        server_cpu_s=total("server_cpu_s"),
        detail={"runs": [asdict(load) for load in loads]},
    )


@dataclass
class Target:
    name: str
    measured: float | None
    goal: str  # e.g. ">= 0.30"
    passed: bool | None  # None: not measured in this run
    note: str = ""


def percentile(ordered: Sequence[float], share: float) -> float | None:
    """Nearest-rank percentile of an ascending sequence (share in 0..1)."""
    if not ordered:
        return None
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def with_latencies(load: Load, seconds: Iterable[float]) -> Load:
    """`load` with its percentiles taken from raw latencies in seconds."""
    ordered = sorted(seconds)

    def ms(share: float) -> float | None:
        value = percentile(ordered, share)
        return None if value is None else round(value * 1000, 2)

    load.p50_ms, load.p90_ms, load.p99_ms = ms(0.5), ms(0.9), ms(0.99)
    load.p999_ms, load.max_ms = ms(0.999), ms(1.0)
    return load


def at_most(name: str, value: float | None, limit: float, unit: str, note: str = "") -> Target:
    passed = None if value is None else value <= limit
    return Target(name, value, f"<= {limit:g} {unit}".strip(), passed, note)


def at_least(name: str, value: float | None, floor: float, note: str = "") -> Target:
    passed = None if value is None else value >= floor
    return Target(name, value, f">= {floor:g}", passed, note)


# -- output -----------------------------------------------------------------------------


def _num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def load_table(rows: Sequence[tuple[str, Load]]) -> str:
    head = ("server", "load", "gen", "conns", "req/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms",
            "errors", "non-2xx", "srv CPU us/req", "gen CPU %")  # fmt: skip
    lines = [head]
    for name, load in rows:
        what = f"{load.mode} {load.kind}"
        if load.target_rate is not None:
            what += f" @{load.target_rate:,.0f}/s"
        lines.append((
            name, what, load.generator, str(load.connections), _num(load.rate),
            _num(load.p50_ms, 2), _num(load.p99_ms, 2), _num(load.p999_ms, 2),
            _num(load.max_ms, 1), str(load.errors), str(load.non_2xx),
            _num(load.cpu_us_per_request, 0), _num(load.generator_cpu_percent, 0),
        ))  # fmt: skip
    return _grid(lines)


def target_table(targets: Sequence[Target]) -> str:
    lines = [("target", "measured", "goal", "verdict", "note")]
    for target in targets:
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}[target.passed]
        lines.append((target.name, _num(target.measured, 2), target.goal, verdict, target.note))
    return _grid(lines)


def _grid(lines: Sequence[Sequence[str]]) -> str:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    out = []
    for index, line in enumerate(lines):
        out.append("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)))
        if index == 0:
            out.append("  ".join("-" * width for width in widths))
    return "\n".join(out)


def machine() -> dict[str, Any]:
    cpus = Path("/proc/cpuinfo").read_text(errors="replace")
    model = next((ln.split(":", 1)[1].strip() for ln in cpus.splitlines()
                  if ln.startswith("model name")), platform.processor())  # fmt: skip
    mem = Path("/proc/meminfo").read_text().splitlines()[0].split()[1]
    return {
        "cpus": cpus.count("processor\t:"),
        "cpu_model": model,
        "memory_gib": round(int(mem) / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def write_json(folder: Path, document: Mapping[str, Any], started: datetime) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{started.astimezone(UTC).strftime('%Y-%m-%dT%H-%M-%SZ')}.json"
    path.write_text(json.dumps(document, indent=2, default=_jsonable) + "\n")
    return path


def _jsonable(value: Any) -> Any:
    if isinstance(value, Load):
        derived = {"cpu_us_per_request": value.cpu_us_per_request,
                   "generator_cpu_percent": value.generator_cpu_percent}  # fmt: skip
        return {**asdict(value), **derived}
    if isinstance(value, Target):
        return asdict(value)
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
