"""The systemd units in deploy/systemd: each parses, runs a `porteiro` command line the
CLI accepts (command and options), and passes `systemd-analyze verify` where systemd is
installed (with ExecStart pointed at this environment's `porteiro`)."""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from porteiro.cli import cli
from tests.support.services import IN_CI

UNITS = sorted((Path(__file__).resolve().parents[2] / "deploy" / "systemd").glob("*.service"))
INSTALLED = "/opt/porteiro/.venv/bin/porteiro"


def unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys as written
    parser.read(path, encoding="utf-8")
    return parser


def accepted(args: list[str]) -> list[str]:
    """The command path `args` names, each level's options parsed by the real CLI (a
    usage error raises)."""
    command: click.Command = cli
    ctx = command.make_context("porteiro", list(args), resilient_parsing=False)
    path = []
    while isinstance(command, click.Group):
        rest = [*ctx._protected_args, *ctx.args]
        name, found, rest = command.resolve_command(ctx, rest)
        assert name is not None and found is not None
        path.append(name)
        command, ctx = found, found.make_context(name, rest, parent=ctx)
    return path


def test_the_roles_have_units() -> None:
    assert {path.name for path in UNITS} >= {
        "porteiro-serve.service", "porteiro-worker.service", "porteiro-relay.service",
        "porteiro-migrate.service",
    }  # fmt: skip


@pytest.mark.parametrize("path", UNITS, ids=[path.name for path in UNITS])
def test_a_unit_runs_a_command_the_cli_accepts(path: Path) -> None:
    parsed = unit(path)
    assert parsed["Unit"]["Description"]
    argv = shlex.split(parsed["Service"]["ExecStart"])
    assert argv[0] == INSTALLED
    assert accepted(argv[1:])[0] in {"serve", "worker", "relay", "db"}
    if parsed["Service"].get("Type") != "oneshot":
        assert parsed["Service"]["Restart"] == "always"
        assert parsed["Install"]["WantedBy"] == "multi-user.target"


def test_a_wrong_command_line_is_refused() -> None:
    with pytest.raises(click.UsageError):
        accepted(["--config", "x.toml", "worker", "--no-such-flag"])


# Under CI=true a missing systemd-analyze fails the test, as any missing tool does.
@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None and not IN_CI, reason="systemd not installed"
)
def test_systemd_verifies_the_units(tmp_path: Path) -> None:
    porteiro = Path(sys.executable).with_name("porteiro")
    for path in UNITS:
        text = path.read_text(encoding="utf-8").replace(INSTALLED, str(porteiro))
        (tmp_path / path.name).write_text(text, encoding="utf-8")
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *sorted(str(p) for p in tmp_path.iterdir())],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


LONG_RUNNING = [path for path in UNITS if unit(path)["Service"].get("Type") != "oneshot"]
TMPFILES = UNITS[0].parent / "porteiro.tmpfiles.conf"


@pytest.mark.parametrize("path", LONG_RUNNING, ids=[path.name for path in LONG_RUNNING])
def test_every_process_shares_the_machines_metrics_directory(path: Path) -> None:
    """One PROMETHEUS_MULTIPROC_DIR per machine, writable under ProtectSystem=strict, and
    created (empty) at boot by the tmpfiles entry shipped beside the units."""
    service = unit(path)["Service"]
    environment = dict(
        item.split("=", 1) for line in service["Environment"].splitlines()
        for item in shlex.split(line)
    )  # fmt: skip
    directory = environment["PROMETHEUS_MULTIPROC_DIR"]
    assert directory in service["ReadWritePaths"].split()
    entries = [
        line.split() for line in TMPFILES.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]  # fmt: skip
    assert [entry[:2] for entry in entries] == [["d", directory]]
