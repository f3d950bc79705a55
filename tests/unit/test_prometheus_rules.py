"""The alert rules (deploy/prometheus/alerts.yml): valid, each tested by promtool firing
and quiet, and each pointing at its paragraph of the runbook (docs/operations.md). The
Grafana dashboard's (deploy/grafana/porteiro.json) expressions: valid PromQL too.
(tests/e2e/test_monitoring_reads_exported_metrics.py checks both read what Porteiro
exports.)

promtool comes with the Debian package prometheus (scripts/ensure-services.sh installs
it): locally its absence skips the promtool tests, under CI=true it fails them.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.services import require_promtool

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
RUNBOOK = ROOT / "docs" / "operations.md"
DASHBOARD = ROOT / "deploy" / "grafana" / "porteiro.json"
# What Grafana puts in place of the dashboard's variables before it queries.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$source": ".*", "$destination": ".*"}
SEVERITIES = {"warning", "critical"}


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def alerts() -> list[dict[str, Any]]:
    groups = load(RULES)["groups"]
    return [rule for group in groups for rule in group["rules"]]


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_promtool(), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_promtool_finds_the_rules_valid() -> None:
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in checked.stdout


def test_the_rules_pass_their_promtool_tests() -> None:
    tested = promtool("test", "rules", str(RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_promtool_parses_every_dashboard_expression(tmp_path: Path) -> None:
    """As recording rules, which `promtool check rules` parses."""
    panels = json.loads(DASHBOARD.read_text(encoding="utf-8"))["panels"]
    expressions = [target["expr"] for panel in panels for target in panel.get("targets", [])]
    assert expressions
    rules = []
    for number, expression in enumerate(expressions):
        for variable, value in GRAFANA_VARIABLES.items():
            expression = expression.replace(variable, value)
        assert "$" not in expression, expression
        rules.append({"record": f"dashboard:expression_{number}", "expr": expression})
    as_rules = tmp_path / "dashboard_rules.yml"
    as_rules.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = promtool("check", "rules", str(as_rules))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_dashboard_panels_have_distinct_ids_and_one_data_source() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        for target in panel.get("targets", []):
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_every_alert_is_tested_firing_and_quiet() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in load(RULE_TESTS)["tests"]:
        for check in case["alert_rule_test"]:
            (firing if check["exp_alerts"] else quiet).add(check["alertname"])
    names = {rule["alert"] for rule in alerts()}
    assert firing == names
    assert quiet == names


def test_every_alert_waits_has_a_severity_and_its_runbook_paragraph() -> None:
    anchors = {github_anchor(line) for line in RUNBOOK.read_text().splitlines() if line[:1] == "#"}
    rules = alerts()
    assert rules, "no alert rules"
    for rule in rules:
        name = rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule.get("for", "")), name
        assert rule["labels"]["severity"] in SEVERITIES, name
        annotations = rule["annotations"]
        assert {"summary", "description", "runbook_url"} <= set(annotations), name
        page, _, anchor = annotations["runbook_url"].partition("#")
        assert (page, anchor) == ("docs/operations.md", name.lower())
        assert anchor in anchors, f"docs/operations.md has no heading for {name}"


def github_anchor(heading: str) -> str:
    """The fragment GitHub gives a Markdown heading: lower case, punctuation dropped,
    spaces as hyphens."""
    text = heading.lstrip("#").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("### PorteiroDeadLetters", "porteirodeadletters"),
        ("## Metrics and alerts", "metrics-and-alerts"),
        ("## After an upgrade: replay", "after-an-upgrade-replay"),
    ],
)
def test_github_anchor(heading: str, anchor: str) -> None:
    assert github_anchor(heading) == anchor
