"""Metrics of several processes on one machine, summed on every scrape.

prometheus_client's multiprocess mode: every process started with
`PROMETHEUS_MULTIPROC_DIR` set writes its counters, histograms and gauges to its own
files there, and the process answering /metrics reads them all (`MultiProcessCollector`).
`serve --receivers N` sets it up for its receivers (a fresh temporary directory, removed
on exit, unless the operator set the variable); `worker` and `relay` processes started
with the same directory appear in that scrape too (docs/operations.md, "Metrics").

The variable must be set before prometheus_client is first imported (it picks the value
class then): `serve` sets it before it starts the receiver processes.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

ENV = "PROMETHEUS_MULTIPROC_DIR"


def directory() -> str | None:
    """The multiprocess directory this process writes to, if any."""
    return os.environ.get(ENV) or None


def scrape_registry(path: str, *collectors: Collector) -> CollectorRegistry:
    """What /metrics exposes in multiprocess mode: every process's series from `path`,
    and `collectors` of this process only (the store readings)."""
    registry = CollectorRegistry()
    registry.register(_LiveProcesses(path))
    for collector in collectors:
        registry.register(collector)
    return registry


class _LiveProcesses(Collector):
    """MultiProcessCollector's sums, after dropping the live gauges of processes that
    died without saying so (SIGKILL, OOM): every process sharing the directory runs on
    this machine, so one whose pid is gone is dead."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._files = MultiProcessCollector(None, path=path)  # type: ignore[no-untyped-call]

    def collect(self) -> Iterator[Metric]:
        for pid in _live_gauge_pids(self._path):
            if not _alive(pid):
                mark_process_dead(pid, self._path)  # type: ignore[no-untyped-call]
        metrics: Iterable[Metric] = self._files.collect()  # type: ignore[no-untyped-call]
        yield from metrics


def _live_gauge_pids(path: str) -> set[int]:
    pids = set()
    for name in glob.glob(os.path.join(path, "gauge_live*_*.db")):
        pid = os.path.basename(name)[: -len(".db")].rsplit("_", 1)[-1]
        if pid.isdigit():
            pids.add(int(pid))
    return pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def process_exited(pid: int | None = None) -> None:
    """Drop the process's live gauges (`multiprocess_mode="livesum"`) from the sums;
    its counters stay, so totals do not drop when a process is restarted."""
    path = directory()
    if path is not None:
        mark_process_dead(os.getpid() if pid is None else pid, path)  # type: ignore[no-untyped-call]


@contextlib.contextmanager
def for_receivers() -> Iterator[str]:
    """The directory `serve --receivers N` and its receiver processes share.

    The operator's (`PROMETHEUS_MULTIPROC_DIR`, shared with workers and relays of the
    machine: emptied by the service manager at boot, never here, since their live files
    are in it) or a fresh temporary one, removed when serve exits."""
    given = directory()
    if given is not None:
        os.makedirs(given, exist_ok=True)
        yield given
        return
    made = tempfile.mkdtemp(prefix="porteiro-metrics-")
    os.environ[ENV] = made
    try:
        yield made
    finally:
        os.environ.pop(ENV, None)
        shutil.rmtree(made, ignore_errors=True)
