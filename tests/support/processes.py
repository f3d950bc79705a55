"""Real `porteiro` processes for end-to-end tests: config files, start, wait, stop."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from tests.support.app import ADMIN_TOKEN
from tests.support.signing import SECRET, standard_headers
from tests.support.waiting import wait_until

# The source `write_config` configures, signed with SECRET.
PROCESS_SOURCE = "std"


def write_config(
    directory: Path,
    store_url: str,
    *,
    lease_seconds: float = 30.0,
    port: int | None = None,
    secret: str = SECRET,
    name: str = "porteiro.toml",
) -> Path:
    """A config file: the store, ADMIN_TOKEN, a quick worker, one Standard Webhooks
    source `std` signed with `secret`, and `[server] port` when given."""
    server = f"\n[server]\nport = {port}\n" if port is not None else ""
    path = directory / name
    path.write_text(
        f"""
[store]
url = "{store_url}"

[admin]
token = "{ADMIN_TOKEN}"
{server}
[worker]
lease_seconds = {lease_seconds}
poll_interval_seconds = 0.2
batch_size = 20

[sources.{PROCESS_SOURCE}]
provider = "standard"
secrets = ["{secret}"]
"""
    )
    return path


def porteiro_command() -> list[str]:
    """The installed `porteiro` console script, what an operator runs; else the module."""
    script = Path(sys.executable).with_name("porteiro")
    return [str(script)] if script.exists() else [sys.executable, "-m", "porteiro"]


def porteiro_argv(config: Path, *args: str) -> list[str]:
    return [*porteiro_command(), "--config", str(config), *args]


def porteiro_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without a developer's PORTEIRO_* variables, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PORTEIRO_")}
    return {**env, **(extra or {})}


@dataclass
class Proc:
    """A process writing its output to `log`."""

    popen: subprocess.Popen[bytes]
    log: Path
    handle: IO[bytes]

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        log: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Proc:
        """`argv` started in porteiro_env(env), its output to `log`."""
        handle = log.open("ab")
        popen = subprocess.Popen(
            list(argv), stdout=handle, stderr=subprocess.STDOUT, env=porteiro_env(env), cwd=cwd
        )
        return cls(popen, log, handle)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.popen.wait(timeout=15)
            self.handle.close()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def porteiro(config: Path, *args: str, log: Path, env: Mapping[str, str] | None = None) -> Proc:
    """`porteiro --config CONFIG ARGS` started, its output to `log`."""
    return Proc.start(porteiro_argv(config, *args), log, env)


def completed_porteiro(
    config: Path, *args: str, env: Mapping[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`porteiro --config CONFIG ARGS` run to its end; the exit code is the caller's to check."""
    return subprocess.run(
        porteiro_argv(config, *args),
        capture_output=True,
        text=True,
        env=porteiro_env(env),
        timeout=timeout,
        check=False,
    )


def run_porteiro(config: Path, *args: str, timeout: float = 60) -> str:
    """The output of a `porteiro` command that must succeed."""
    done = completed_porteiro(config, *args, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"porteiro {args} failed: {done.stdout!r} {done.stderr!r}")
    return done.stdout


@dataclass
class Cli:
    """The operator's commands on one config file, each expected to exit with `expect`."""

    config: Path

    def run(self, *args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
        done = completed_porteiro(self.config, *args)
        assert done.returncode == expect, f"porteiro {args}: {done.stdout}\n{done.stderr}"
        return done

    def json_lines(self, *args: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.run(*args, "--json").stdout.splitlines()]


def wait_healthy(
    proc: Proc, url: str, *, verify: ssl.SSLContext | bool = True, within: float = 20.0
) -> None:
    """Wait until the server `proc` runs answers 200 on `url`/healthz; fail at once, with
    its output, if it exits first."""

    def healthy() -> bool:
        if proc.popen.poll() is not None:
            raise AssertionError(f"the server for {url} exited early:\n{proc.output()}")
        try:
            response = httpx.get(f"{url}/healthz", timeout=0.5, verify=verify)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    try:
        wait_until(healthy, f"{url}/healthz to answer 200", within=within)
    except AssertionError as exc:
        if proc.popen.poll() is not None:
            raise
        raise AssertionError(f"{exc}:\n{proc.output()}") from None


def local_url(port: int) -> str:
    return f"http://127.0.0.1:{port}"


@contextmanager
def serving(config: Path, port: int, log: Path, *extra: str) -> Iterator[Proc]:
    """`porteiro serve` on `port` while the block runs, healthy when it starts."""
    proc = porteiro(config, "serve", "--port", str(port), *extra, log=log)
    try:
        wait_healthy(proc, local_url(port))
        yield proc
    finally:
        proc.kill(signal.SIGTERM)


def post_all(port: int, bodies: Sequence[bytes], concurrency: int = 16) -> list[int]:
    """POST each body to the served source `std`, signed now; the status codes, in order."""

    async def send() -> list[int]:
        semaphore = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(timeout=10) as client:

            async def one(body: bytes) -> int:
                async with semaphore:
                    response = await client.post(
                        f"{local_url(port)}/webhooks/{PROCESS_SOURCE}",
                        content=body,
                        headers=standard_headers(body),
                    )
                    return response.status_code

            return list(await asyncio.gather(*(one(body) for body in bodies)))

    return asyncio.run(send())
