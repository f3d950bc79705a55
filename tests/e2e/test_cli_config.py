"""The real `porteiro` command on its configuration: `--version`, no configuration at
all, a SQLite folder that does not exist, and the exit codes docs/cli.md documents for
them (1 the store did not answer, 2 fix the command or the configuration)."""

from __future__ import annotations

import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.support.processes import (
    Cli,
    porteiro_command,
    porteiro_env,
    write_config,
)
from tests.support.servers import free_port


def without_config(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`porteiro ARGS` run in `cwd` with no --config, no PORTEIRO_* variable."""
    return subprocess.run(
        [*porteiro_command(), *args],
        capture_output=True, text=True, env=porteiro_env(), cwd=cwd, timeout=60, check=False,
    )  # fmt: skip


def one_line_error(done: subprocess.CompletedProcess[str], code: int) -> str:
    """The single stderr line of a command that exited with `code`, nothing on stdout."""
    assert done.returncode == code, f"{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr and done.stdout == ""
    (line,) = done.stderr.splitlines()
    return line


def test_version_is_the_package_version(tmp_path: Path) -> None:
    done = without_config(tmp_path, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"porteiro, version {version('porteiro')}"


@pytest.mark.parametrize(
    "args",
    [("events", "list"), ("db", "upgrade"), ("serve",), ("worker",)],
)
def test_without_any_configuration_a_command_says_so_and_creates_nothing(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    line = one_line_error(without_config(tmp_path, *args), 2)
    assert line.startswith("porteiro: error: no configuration: pass --config FILE")
    assert list(tmp_path.iterdir()) == []  # no ./porteiro.db


def test_a_porteiro_toml_in_the_folder_is_the_configuration(tmp_path: Path) -> None:
    write_config(tmp_path, f"sqlite:///{tmp_path / 'here.db'}")
    done = without_config(tmp_path, "db", "upgrade")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "here.db").exists()


def test_a_sqlite_store_in_a_missing_folder_is_one_line_and_exit_2(tmp_path: Path) -> None:
    cli = Cli(write_config(tmp_path, f"sqlite:///{tmp_path / 'absent' / 'porteiro.db'}"))
    for args in (("events", "list"), ("db", "upgrade"), ("serve",)):
        line = one_line_error(cli.run(*args, expect=2), 2)
        assert (
            line
            == f"porteiro: error: the SQLite store's folder {tmp_path / 'absent'} does not exist"
        )
    assert not (tmp_path / "absent").exists()


def test_a_store_that_does_not_answer_exits_1(tmp_path: Path) -> None:
    cli = Cli(write_config(tmp_path, f"postgresql://postgres@127.0.0.1:{free_port()}/x"))
    done = cli.run("events", "list", expect=1)
    prose = [line for line in done.stderr.splitlines() if not line.startswith("{")]
    assert prose == [
        "porteiro: error: PostgreSQL unavailable: couldn't get a connection after 0.50 sec"
    ]


def test_an_unknown_option_is_a_usage_error_exit_2(tmp_path: Path) -> None:
    cli = Cli(write_config(tmp_path, f"sqlite:///{tmp_path / 'p.db'}"))
    assert "No such option '--bogus'" in cli.run("events", "list", "--bogus", expect=2).stderr
