"""The CLI's operator commands are audited (token name `cli`), and `porteiro audit list`
shows every row, API's and CLI's alike: the real console script, real stores."""

from __future__ import annotations

from pathlib import Path

from tests.support.processes import Cli, write_config


def test_cli_actions_are_audited_and_listed(tmp_path: Path, store_url: str) -> None:
    config = write_config(tmp_path, store_url)
    with config.open("a") as file:
        file.write(
            '\n[destinations.erp]\nurl = "http://127.0.0.1:9/hooks"\n'
            'secret = "whsec_ZXhhbXBsZS1zZWNyZXQ="\n'
        )
    cli = Cli(config)
    cli.run("db", "upgrade")
    cli.run("destinations", "pause", "erp")
    cli.run("destinations", "resume", "erp")
    cli.run("destinations", "redrive", "erp")
    cli.run("dlq", "replay", "--all")
    cli.run("replay", "--source", "std", "--no-reparse")

    rows = cli.json_lines("audit", "list")
    assert [(row["action"], row["affected"]) for row in rows] == [
        ("replay", 0),
        ("dlq.replay", 0),
        ("destination.redrive", 0),
        ("destination.resume", 1),
        ("destination.pause", 1),
    ]
    assert {row["token_name"] for row in rows} == {"cli"}
    assert {row["outcome"] for row in rows} == {"ok"}
    assert rows[0]["parameters"] == {"source": "std", "reparse": False, "dry_run": False}
    assert rows[1]["parameters"] == {"all": True}
    assert rows[4]["parameters"] == {"name": "erp"}

    table = cli.run("audit", "list", "--limit", "2").stdout
    assert "dlq.replay" in table and "destination.pause" not in table
    assert "--cursor" in cli.run("audit", "list", "--limit", "2").stderr
