"""docker-compose.yml cannot run here (no Docker engine), so its topology is checked by reading."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.core.queues import ALL_QUEUES, MODEL_QUEUES
from shared.stack.localstack import WORKER_GROUPS

COMPOSE = Path(__file__).parents[2] / "docker-compose.yml"
WORKER_COMMAND = ["tracehound", "worker"]


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def option(command: list[str], name: str) -> str | None:
    return command[command.index(name) + 1] if name in command else None


def consumers(services: dict[str, Any]) -> dict[str, list[tuple[str, str | None]]]:
    found: dict[str, list[tuple[str, str | None]]] = {}
    for name, svc in services.items():
        cmd = svc.get("command") or []
        if cmd[:2] == ["tracehound", "worker"]:
            for queue in (option(cmd, "--queues") or "").split(","):
                found.setdefault(queue, []).append((name, option(cmd, "--concurrency")))
    return found


def test_every_queue_has_a_consumer(services: dict[str, Any]) -> None:
    assert set(consumers(services)) == set(ALL_QUEUES)


def test_each_model_queue_has_one_worker_service(services: dict[str, Any]) -> None:
    """One worker per model: its slots share the host's lease for that model."""
    found = consumers(services)
    for queue in MODEL_QUEUES:
        [(service, _)] = found[queue]
        assert services[service].get("deploy", {}).get("replicas", 1) == 1


def test_the_worker_services_are_the_local_stacks(services: dict[str, Any]) -> None:
    """Compose and ``tracehound up`` (the tests' and benchmarks' topology) run the same
    workers: what is measured here is what compose deploys."""
    for name, (queues, concurrency) in WORKER_GROUPS.items():
        cmd = services[f"worker-{name}"]["command"]
        assert option(cmd, "--queues") == ",".join(queues), name
        assert option(cmd, "--concurrency") == str(concurrency), name


def test_workers_reach_redis_chroma_and_the_hosts_ollama(services: dict[str, Any]) -> None:
    env = services["worker-llm"]["environment"]
    assert env["TRACEHOUND_REDIS_URL"] == "redis://redis:6379/0"
    assert env["TRACEHOUND_CHROMA_URL"] == "http://chroma:8000"
    assert env["TRACEHOUND_OLLAMA_URL"].endswith(":-http://host.docker.internal:11434}")
    assert "host.docker.internal:host-gateway" in services["worker-llm"]["extra_hosts"]


def test_redis_is_append_only_and_chroma_keeps_a_volume(services: dict[str, Any]) -> None:
    redis_cmd = services["redis"]["command"]
    assert option(redis_cmd, "--appendonly") == "yes"
    assert any(v.endswith(":/data") for v in services["redis"]["volumes"])
    assert any(v.startswith("chroma-data:") for v in services["chroma"]["volumes"])


def test_producers_run_under_an_opt_in_profile_with_checkpoints_on_a_volume(
    services: dict[str, Any],
) -> None:
    for name in ("ingest", "watcher", "tailer"):
        assert services[name]["profiles"] == ["producers"]
    assert option(services["ingest"]["command"], "--host") == "0.0.0.0"
    assert "tracehound-data:/var/lib/tracehound" in services["tailer"]["volumes"]  # checkpoints


def test_the_chroma_server_runs_from_the_workers_own_chromadb(services: dict[str, Any]) -> None:
    """A pinned chromadb/chroma image drifted from the chromadb pyproject admits (1.0.15 vs
    1.5.9): the server now runs `chroma run` from the tracehound image, the same install."""
    chroma, worker = services["chroma"], services["worker-llm"]
    assert chroma["image"] == worker["image"] and chroma["build"] == worker["build"]
    assert chroma["command"][:2] == ["chroma", "run"]
    assert option(chroma["command"], "--path") == "/data"
    assert any(v == "chroma-data:/data" for v in chroma["volumes"])


def test_the_pgvector_profile_runs_a_postgres_the_workers_url_names(
    services: dict[str, Any],
) -> None:
    """Chroma stays the default; the pgvector profile adds a PostgreSQL with the extension,
    and the workers' default TRACEHOUND_PG_URL reaches it with its own user and database."""
    from urllib.parse import urlsplit

    pg = services["pgvector"]
    assert pg["profiles"] == ["pgvector"] and pg["image"].startswith("pgvector/pgvector:pg")
    assert any(v.endswith(":/var/lib/postgresql/data") for v in pg["volumes"])
    assert all(p.startswith("127.0.0.1:") for p in pg["ports"])
    assert "pg_isready" in pg["healthcheck"]["test"]
    env = services["worker-cpu"]["environment"]
    assert env["TRACEHOUND_VECTOR_STORE"] == "${TRACEHOUND_VECTOR_STORE:-chroma}"
    default = env["TRACEHOUND_PG_URL"].removeprefix("${TRACEHOUND_PG_URL:-").removesuffix("}")
    url = urlsplit(default)
    assert (url.hostname, url.port) == ("pgvector", 5432)
    assert url.username == pg["environment"]["POSTGRES_USER"]
    assert url.password == pg["environment"]["POSTGRES_PASSWORD"]
    assert url.path == "/" + pg["environment"]["POSTGRES_DB"]
    # The image's tracehound can talk to it: the Dockerfile installs the pgvector extra.
    dockerfile = (COMPOSE.parent / "Dockerfile").read_text()
    assert "'.[pgvector]'" in dockerfile


def test_workers_wait_for_pgvector_under_its_profile_and_start_without_it(
    services: dict[str, Any],
) -> None:
    """Compose refuses a dependency on a service its active profiles leave out
    (compose-spec 15-profiles.md) unless the dependency says `required: false`; a worker that
    starts before PostgreSQL answers would begin on a degraded store."""
    for name, svc in services.items():
        deps = svc.get("depends_on") or {}
        if isinstance(deps, list):  # the short form: each started, required
            deps = {dep: {} for dep in deps}
        for dep, how in deps.items():
            gated = set(services[dep].get("profiles") or [])
            if gated and not gated <= set(svc.get("profiles") or []):
                assert how.get("required") is False, (name, dep)
    for name in ("worker-embed", "worker-cpu", "worker-llm", "worker-rerank", "ingest"):
        dep = services[name]["depends_on"]["pgvector"]
        assert dep == {"condition": "service_healthy", "required": False}


def test_the_ops_profile_runs_prometheus_with_the_rules_and_grafana_with_the_dashboard(
    services: dict[str, Any],
) -> None:
    """Every mount names a file of the repo at the path the config inside expects, and the
    scrape config reaches every worker at its metrics port and ingest at its own."""
    from shared.ops import PROMETHEUS_CONFIG

    prom, grafana = services["prometheus"], services["grafana"]
    assert prom["profiles"] == grafana["profiles"] == ["ops"]
    mounts = {}
    for svc in (prom, grafana):
        for volume in svc["volumes"]:
            source, target = volume.split(":")[:2]
            if source.startswith("./"):
                assert (COMPOSE.parent / source).exists(), source
                mounts[target] = COMPOSE.parent / source
    config_path = option(prom["command"], "--config.file") or next(
        c.split("=", 1)[1] for c in prom["command"] if c.startswith("--config.file=")
    )
    assert mounts[config_path] == COMPOSE.parent / "shared/ops/prometheus.yml"
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    for rules in config["rule_files"]:  # relative to the config, in the container too
        assert mounts[str(Path(config_path).parent / rules)].exists()
    # Grafana: provisioning where it looks, and the dashboards where the provider points.
    provisioning = mounts["/etc/grafana/provisioning"]
    provider = yaml.safe_load((provisioning / "dashboards/tracehound.yml").read_text())
    [path] = [p["options"]["path"] for p in provider["providers"]]
    assert (mounts[path] / "tracehound.json").exists()
    assert all(p.startswith("127.0.0.1:") for s in (prom, grafana) for p in s["ports"])

    targets = {
        name: sd["port"]
        for job in config["scrape_configs"]
        for sd in job["dns_sd_configs"]
        for name in sd["names"]
    }
    workers = [n for n, s in services.items() if s.get("command", [])[:2] == WORKER_COMMAND]
    metrics_port = int(services[workers[0]]["environment"]["TRACEHOUND_METRICS_PORT"])
    assert services[workers[0]]["environment"]["TRACEHOUND_METRICS_HOST"] == "0.0.0.0"
    assert {w: targets.get(w) for w in workers} == dict.fromkeys(workers, metrics_port)
    assert targets["ingest"] == int(option(services["ingest"]["command"], "--port") or 0)
