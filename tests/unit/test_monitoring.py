"""The dashboard and the alert rules in the box (shared/ops): Prometheus's own promtool checks
the rules and the scrape config and runs the rules' unit tests (tests/data/ops/alerts-test.yml);
the dashboard reads from the datasource Grafana is given; the files ship with the package."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.core.metrics import OTHER, LabelCap
from shared.ops import ALERT_RULES, DASHBOARD, HERE, PROMETHEUS_CONFIG
from tests.conftest import DATA

ROOT = Path(__file__).parents[2]
RULE_TESTS = DATA / "ops" / "alerts-test.yml"


@pytest.fixture(scope="module")
def promtool() -> str:
    """Debian's `prometheus` package has it (.ci/run installs it); CI fails without it."""
    found = shutil.which("promtool")
    if found is None:
        why = "promtool is not installed (apt-get install prometheus)"
        if os.environ.get("TRACEHOUND_REQUIRE_PROMTOOL"):
            pytest.fail(why)
        pytest.skip(why)
    return found


def run(promtool: str, *args: str | Path) -> str:
    done = subprocess.run(
        [promtool, *map(str, args)], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_promtool_accepts_the_alert_rules(promtool: str) -> None:
    out = run(promtool, "check", "rules", ALERT_RULES)
    assert "SUCCESS: 4 rules found" in out


def test_promtool_accepts_the_scrape_config_and_finds_its_rules(promtool: str) -> None:
    out = run(promtool, "check", "config", PROMETHEUS_CONFIG)
    assert "SUCCESS: 1 rule files found" in out


def test_each_alert_fires_on_its_scripted_series_and_not_on_a_near_miss(promtool: str) -> None:
    run(promtool, "test", "rules", RULE_TESTS)


def test_every_alert_has_a_unit_test_that_expects_it_to_fire() -> None:
    rules = yaml.safe_load(ALERT_RULES.read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    cases = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {
        t["alertname"] for c in cases for t in c.get("alert_rule_test", []) if t.get("exp_alerts")
    }
    quiet = {
        t["alertname"]
        for c in cases
        for t in c.get("alert_rule_test", [])
        if not t.get("exp_alerts")
    }
    assert alerts == fired == quiet
    assert {"TracehoundModelHostDown", "TracehoundSlackFailing"} <= alerts
    assert {"TracehoundAnalysisBacklogStalled", "TracehoundIntakeRefusing"} <= alerts


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for p in dashboard["panels"]:
        found.append(p)
        found.extend(p.get("panels", []))
    return found


def test_the_dashboard_reads_from_the_datasource_grafana_is_provisioned_with() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    [source] = yaml.safe_load(
        (HERE / "grafana/provisioning/datasources/prometheus.yml").read_text()
    )["datasources"]
    graphs = [p for p in panels(dashboard) if p["type"] != "row"]
    assert len(graphs) >= 10
    for panel in graphs:
        assert panel["datasource"]["uid"] == source["uid"], panel["title"]
        assert panel["targets"] and all(t["expr"] for t in panel["targets"]), panel["title"]
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))
    assert source["url"] == "http://prometheus:9090"  # the compose service


def test_the_ops_files_ship_as_package_data() -> None:
    """A wheel of tracehound carries the dashboard and rules: every file under shared/ops
    matches the package-data patterns."""
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["shared.ops"]
    files = [
        p.relative_to(HERE)
        for p in HERE.rglob("*")
        if p.is_file() and p.suffix != ".py" and "__pycache__" not in p.parts
    ]
    assert len(files) >= 5
    for f in files:
        assert any(f.match(pattern) and len(f.parts) == len(Path(pattern).parts)
                   for pattern in patterns), f  # fmt: skip


def test_service_labels_are_reduced_and_capped() -> None:
    """Senders choose service names: a name per event must not become a series per event."""
    cap = LabelCap(3)
    assert cap("Shop-API") == "shop-api"
    assert cap('evil"} 1\nx{a="') == "evil_1_x_a"
    assert cap("x" * 500) == "x" * 64
    assert cap("fourth") == OTHER
    assert cap("shop-api") == "shop-api"  # those seen stay themselves
    assert cap("") == OTHER and LabelCap(5)("!!!") == "unknown"
