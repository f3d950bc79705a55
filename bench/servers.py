"""Start, wait for and stop the compared servers, all on 127.0.0.1; read their /proc.

Each server is one or more processes (a process group each, so a stop takes the worker
children of uvicorn/gunicorn with it). Logs go to files in the run's scratch folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from bench import console
from bench import requests as presigned

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Server:
    """Processes serving one scenario; `ports` are what the load generator targets."""

    name: str
    ports: list[int]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def logged(self, action: str) -> list[dict[str, Any]]:
        """The JSON log lines of its processes with this `action` (e.g. Porteiro's
        `store.commit_probe`: what `batch_concurrency = auto` measured and chose)."""
        found = []
        for log in self.logs:
            for line in log.read_text(errors="replace").splitlines():
                if f'"{action}"' in line and line.startswith("{"):
                    with contextlib.suppress(ValueError):
                        found.append(json.loads(line))
        return found

    def pids(self) -> list[int]:
        """Every live process of the server, children included."""
        found: list[int] = []
        for proc in self.procs:
            found += [proc.pid, *descendants(proc.pid)]
        return [pid for pid in found if Path(f"/proc/{pid}").exists()]

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=STOP_TIMEOUT)

    def check_alive(self) -> None:
        for proc, log in zip(self.procs, self.logs, strict=True):
            if proc.poll() is not None:
                tail = log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{self.name}: a process exited ({proc.returncode}):\n{tail}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn(
    command: Sequence[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PORTEIRO_")}
    with log.open("ab") as handle:
        return subprocess.Popen(
            list(command),
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**base, **(env or {})},
            cwd=ROOT,
            start_new_session=True,  # its own process group: stop() reaches the children
        )


def wait_ready(server: Server, path: str = "/healthz") -> None:
    """Until every port answers HTTP (any status) on `path`."""
    deadline = time.monotonic() + START_TIMEOUT
    for port in server.ports:
        while True:
            server.check_alive()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1):
                    break
            except urllib.error.HTTPError:
                break  # it answered
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{server.name}: port {port} not ready") from None
                time.sleep(0.1)


def start(
    name: str,
    commands: Sequence[Sequence[str]],
    ports: list[int],
    folder: Path,
    env: dict[str, str] | None = None,
    health: str = "/healthz",
) -> Server:
    server = Server(name, ports)
    try:
        for index, command in enumerate(commands):
            log = folder / f"{name}-{index}.log"
            server.procs.append(spawn(command, log, env))
            server.logs.append(log)
        wait_ready(server, health)
    except BaseException:
        server.stop()
        raise
    return server


# -- the compared servers ---------------------------------------------------------------


def _uvicorn(app: str) -> list[str]:
    """uvicorn with uvloop + httptools when installed and no proxy-headers middleware,
    as `porteiro serve` runs it."""
    base = [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1"]
    base += ["--log-level", "warning", "--no-access-log", "--loop", "auto", "--http", "auto"]
    return [*base, "--no-proxy-headers"]


def sketch(url: str, folder: Path, keeps: str = "id", processes: int = 1) -> Server:
    """A lean sketch (bench/sketch.py, keeping `keeps`), served as hello-world is: one
    process, or `processes` sharing one port (each with its own group commit)."""
    port = free_port()
    command = [*_uvicorn("bench.sketch:app"), "--port", str(port)]
    if processes > 1:
        command += ["--workers", str(processes)]
    kept = "" if keeps == "id" else f"-{keeps}"
    env = {"BENCH_SKETCH_URL": url, "BENCH_SKETCH_KEEPS": keeps}
    return start(f"sketch{kept}-x{processes}", [command], [port], folder, env)


def hello(processes: int, shared_port: bool, folder: Path) -> Server:
    """(a) bench/hello.py on uvicorn, served as Porteiro is."""
    base = _uvicorn("bench.hello:app")
    if shared_port or processes == 1:
        port = free_port()
        workers = ["--workers", str(processes)] if processes > 1 else []
        return start(
            f"hello-x{processes}", [[*base, "--port", str(port), *workers]], [port], folder
        )
    ports = [free_port() for _ in range(processes)]
    commands = [[*base, "--port", str(port)] for port in ports]
    return start(f"hello-x{processes}", commands, ports, folder)


def naive(processes: int, dsn: str, folder: Path) -> Server:
    """(b) Flask under gunicorn sync workers, a new psycopg connection per request."""
    port = free_port()
    command = [sys.executable, "-m", "gunicorn", "--workers", str(processes), "--worker-class"]
    command += ["sync", "--bind", f"127.0.0.1:{port}", "--log-level", "warning"]
    command += ["bench.naive.app:app"]
    env = {"BENCH_NAIVE_DSN": dsn, "BENCH_NAIVE_SECRET": presigned.STRIPE_SECRET}
    return start(f"naive-x{processes}", [command], [port], folder, env)


def write_config(folder: Path, name: str, store_url: str, worker_concurrency: int = 4) -> Path:
    """A Porteiro config with the bench's Stripe and Pix sources."""
    stripe, pix = presigned.stripe_source(), presigned.pix_source()
    path = folder / f"porteiro-{name}.toml"
    path.write_text(
        f"""
[store]
url = "{store_url}"

[admin]
token = "{console.ADMIN_TOKEN}"

[worker]
concurrency = {worker_concurrency}
poll_interval_seconds = 0.5

[sources.stripe]
provider = "stripe"
secrets = ["{stripe.secrets[0]}"]

[sources.pix]
provider = "pix"
hmac_token = "{pix.options["hmac_token"]}"
allow_ips = ["127.0.0.1"]
keys = ["{presigned.PIX_CHAVE}"]
confirm = false
"""
    )
    return path


@cache
def receivers_option() -> str | None:
    """`porteiro serve`'s option for several receiver processes on one port, if it has one."""
    help_text = subprocess.run(
        [sys.executable, "-m", "porteiro", "serve", "--help"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    ).stdout
    for option in ("--receivers", "--workers", "--processes"):
        if option in help_text:
            return option
    return None


def porteiro(name: str, config: Path, processes: int, folder: Path) -> Server:
    """(c)/(d) `porteiro serve --no-worker`: one port shared by `processes` receivers when
    serve supports it, else one process per port (the generator splits its load)."""
    base = [sys.executable, "-m", "porteiro", "--config", str(config), "serve", "--no-worker"]
    option = receivers_option()
    if processes == 1 or option is not None:
        port = free_port()
        extra = [option, str(processes)] if processes > 1 and option else []
        return start(name, [[*base, "--port", str(port), *extra]], [port], folder)
    ports = [free_port() for _ in range(processes)]
    return start(name, [[*base, "--port", str(port)] for port in ports], ports, folder)


def workers(config: Path, processes: int, folder: Path) -> Server:
    """`porteiro worker` processes (no port)."""
    command = [sys.executable, "-m", "porteiro", "--config", str(config), "worker"]
    server = Server(f"worker-x{processes}", [])
    for index in range(processes):
        log = folder / f"worker-{index}.log"
        server.procs.append(spawn(command, log))
        server.logs.append(log)
    return server


def porteiro_command(config: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "porteiro", "--config", str(config), *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("PORTEIRO_")},
    )
    if done.returncode != 0:
        raise RuntimeError(f"porteiro {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


# -- /proc ------------------------------------------------------------------------------


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU time of live processes."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / _CLOCK_TICKS


def rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None
