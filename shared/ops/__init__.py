"""Watching tracehound: the Prometheus scrape config and alert rules, and the Grafana
dashboard with its provisioning (docker-compose.yml's ``ops`` profile mounts them; see
docs/monitoring.md). Data files only."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
PROMETHEUS_CONFIG = HERE / "prometheus.yml"
ALERT_RULES = HERE / "alerts.yml"
DASHBOARD = HERE / "grafana" / "dashboards" / "tracehound.json"
