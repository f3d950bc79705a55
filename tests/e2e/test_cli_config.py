"""The real `porteiro` command on its configuration: `config check [--reach]`, `--version`,
no configuration at all, a SQLite folder that does not exist, and the exit codes
docs/cli.md documents for them (0 fine, 1 could not reach, 2 fix the configuration)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
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
from tests.support.services import AMQP_URL, fresh_database, require_rabbitmq
from tests.support.signing import SECRET

DB_PASSWORD = "pg-secret-in-the-url"
DESTINATION_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


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


def with_destinations(config: Path, *tables: str) -> Path:
    config.write_text(config.read_text() + "".join(tables))
    return config


def http_destination(name: str, url: str) -> str:
    return f'\n[destinations.{name}]\nurl = "{url}"\nsecret = "{DESTINATION_SECRET}"\n'


def rabbitmq_destination(name: str, url: str) -> str:
    return f'\n[destinations.{name}]\nrabbitmq_url = "{url}"\n'


@pytest.fixture
def listening_port() -> Iterator[int]:
    """A loopback TCP port something listens on (the kernel accepts the connection)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


def test_version_is_the_package_version(tmp_path: Path) -> None:
    done = without_config(tmp_path, "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"porteiro, version {version('porteiro')}"


@pytest.mark.parametrize(
    "args",
    [("events", "list"), ("db", "upgrade"), ("serve",), ("worker",), ("config", "check")],
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
    for args in (("events", "list"), ("db", "upgrade"), ("serve",), ("config", "check")):
        line = one_line_error(cli.run(*args, expect=2), 2)
        assert (
            line
            == f"porteiro: error: the SQLite store's folder {tmp_path / 'absent'} does not exist"
        )
    assert not (tmp_path / "absent").exists()


def test_check_prints_what_would_run_and_no_secret(tmp_path: Path) -> None:
    store_url = f"postgresql://porteiro:{DB_PASSWORD}@127.0.0.1:{free_port()}/porteiro"
    config = with_destinations(
        write_config(tmp_path, store_url),
        http_destination("shop", "https://shop.example/hooks?token=abc123"),
        rabbitmq_destination("bus", "amqp://app:amqp-secret@broker.example:5672/"),
    )
    out = Cli(config).run("config", "check").stdout
    assert out.splitlines() == [
        f"file: {config}",
        f"store: postgresql://porteiro:***@127.0.0.1:{store_url.rsplit(':', 1)[1]} (PostgreSQL)",
        "server: http://127.0.0.1:8000, 1 receiver(s), admin API on (tokens: admin)",
        "sources: 1",
        "  std: standard, no gateway API",
        "worker: concurrency 4, batch 20, lease 30 s, up to 10 attempts",
        "destinations: 2 (each relayed by one serve, worker or relay process)",
        "  shop: http https://shop.example/hooks?token=*** (every kind but other)",
        "  bus: rabbitmq amqp://app:***@broker.example:5672/ exchange porteiro.events"
        " (every kind but other)",
        "reconcile: every 60 s, 100 per source",
        "handlers: none",
        "configuration is valid (not reached: add --reach)",
    ]
    for secret in (DB_PASSWORD, "abc123", "amqp-secret", SECRET, DESTINATION_SECRET):
        assert secret not in out


def test_check_refuses_an_invalid_configuration_with_exit_2(tmp_path: Path) -> None:
    config = write_config(tmp_path, f"sqlite:///{tmp_path / 'p.db'}")
    config.write_text(config.read_text().replace("batch_size", "batch_sise"))
    line = one_line_error(Cli(config).run("config", "check", expect=2), 2)
    assert line == "porteiro: error: [worker] batch_sise: unknown key, did you mean `batch_size`?"


def test_check_builds_each_source_adapter(tmp_path: Path) -> None:
    """A key file that does not exist is found by the check, not by the first webhook."""
    config = write_config(tmp_path, f"sqlite:///{tmp_path / 'p.db'}")
    config.write_text(
        config.read_text()
        + '\n[sources.pm]\nprovider = "pagarme"\njwks_file = "absent-jwks.json"\n'
        + 'secrets = ["hub"]\n'
    )
    done = Cli(config).run("config", "check", expect=2)
    assert "absent-jwks.json" in one_line_error(done, 2)


def test_reach_a_fresh_sqlite_store_reports_it_and_creates_nothing(tmp_path: Path) -> None:
    database = tmp_path / "porteiro.db"
    done = Cli(write_config(tmp_path, f"sqlite:///{database}")).run("config", "check", "--reach")
    assert f"store: ok, {database} does not exist yet; serve creates it" in done.stdout
    assert done.stdout.splitlines()[-1] == "configuration is valid; everything reached"
    assert not database.exists()


def test_reach_a_migrated_store_and_live_destinations_exits_0(
    tmp_path: Path, listening_port: int
) -> None:
    require_rabbitmq()
    with fresh_database() as store_url:
        config = with_destinations(
            write_config(tmp_path, store_url),
            http_destination("shop", f"http://127.0.0.1:{listening_port}/hooks"),
            rabbitmq_destination("bus", AMQP_URL),
        )
        cli = Cli(config)
        cli.run("db", "upgrade")
        out = cli.run("config", "check", "--reach").stdout.splitlines()
    assert out[-4:] == [
        f"store: ok, schema at version {_newest_migration()}",
        f"destination shop: ok, TCP connection to 127.0.0.1:{listening_port}",
        "destination bus: ok, AMQP connection to 127.0.0.1:5672",
        "configuration is valid; everything reached",
    ]


def test_reach_what_cannot_be_reached_is_said_and_exits_1(tmp_path: Path) -> None:
    closed = free_port()
    store_url = f"postgresql://porteiro:{DB_PASSWORD}@127.0.0.1:{closed}/porteiro"
    config = with_destinations(
        write_config(tmp_path, store_url),
        http_destination("shop", f"http://127.0.0.1:{closed}/hooks"),
        rabbitmq_destination("bus", f"amqp://guest:guest@127.0.0.1:{closed}/"),
    )
    done = Cli(config).run("config", "check", "--reach", expect=1)
    reached = [line for line in done.stdout.splitlines() if "FAILED" in line]
    assert [line.split(":")[0] for line in reached] == [
        "store", "destination shop", "destination bus",
    ]  # fmt: skip
    assert done.stderr.splitlines()[-1] == "configuration is valid; 3 could not be reached or used"
    assert DB_PASSWORD not in done.stdout + done.stderr


def test_reach_a_schema_behind_this_release_exits_1(tmp_path: Path) -> None:
    with fresh_database() as store_url:
        done = Cli(write_config(tmp_path, store_url)).run("config", "check", "--reach", expect=1)
    assert "store: FAILED, the database schema is at version 0" in done.stdout
    assert "run `porteiro db upgrade`" in done.stdout


def test_a_store_that_does_not_answer_exits_1(tmp_path: Path) -> None:
    cli = Cli(write_config(tmp_path, f"postgresql://postgres@127.0.0.1:{free_port()}/x"))
    done = cli.run("events", "list", expect=1)
    prose = [line for line in done.stderr.splitlines() if not line.startswith("{")]
    (line,) = prose  # one line besides the JSON log lines, whatever the pool's wording
    assert line.startswith("porteiro: error: PostgreSQL unavailable: ")


def test_an_unknown_option_is_a_usage_error_exit_2(tmp_path: Path) -> None:
    cli = Cli(write_config(tmp_path, f"sqlite:///{tmp_path / 'p.db'}"))
    assert "No such option '--bogus'" in cli.run("events", "list", "--bogus", expect=2).stderr


def _newest_migration() -> int:
    from porteiro.store.migrations import known_versions

    return int(known_versions("postgres")[-1])
