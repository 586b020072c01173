"""Zero egress, proven: ``tracehound demo`` (private Redis, Chroma server, celery workers, the
Ollama simulator; Slack's simulator as its Slack) runs in a network namespace with only
loopback, under strace, and every connection attempt of its whole process tree is checked
against the hosts ``tracehound config --egress`` and the demo's own stack list name."""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from shared.stack.children import free_port
from shared.stack.localstack import tracehound_executable
from tests.conftest import DATA, SAMPLE_SERVICE

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

# The demo's Slack: the simulator, in the traced tree and inside the namespace with it.
DRIVER = """
import subprocess, sys
from shared.devtools.simulators.slack import SlackSimulator
with SlackSimulator(port=int(sys.argv[1])) as slack:
    code = subprocess.call(sys.argv[2:])
    print(f"slack simulator received {len(slack.messages)} message(s)")
sys.exit(code)
"""

# Variables that would turn library telemetry on: the run must stay silent regardless.
HOSTILE_ENV = {
    "ANONYMIZED_TELEMETRY": "True",
    "LANGCHAIN_TRACING_V2": "true",
    "LANGSMITH_TRACING": "true",
    "LANGSMITH_API_KEY": "lsv2_pt_00000000000000000000000000000000_0000000000",
}

# strace's sockaddrs: {sa_family=AF_INET, sin_port=htons(6379), sin_addr=inet_addr("127.0.0.1")}
# and {sa_family=AF_INET6, sin6_port=htons(53), ..., inet_pton(AF_INET6, "::1", &sin6_addr), ..}
_SOCKADDR = re.compile(
    r"sa_family=AF_INET6?, sin6?_port=htons\((?P<port>\d+)\)[^}]*?"
    r'(?:inet_addr\("(?P<v4>[^"]+)"\)|inet_pton\(AF_INET6, "(?P<v6>[^"]+)")'
)
# A line of the egress list: role, scheme://host[:port], the setting, why.
_EGRESS_LINE = re.compile(
    r"^\s*(?:#\s*)?\S+\s+\w+://(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^\s:/]+))(?::(?P<port>\d+))?"
    r"\s+TRACEHOUND_\w+",
    re.MULTILINE,
)


@dataclass(frozen=True)
class Attempt:
    host: str
    port: int
    line: str  # as strace wrote it


def attempts(trace: str) -> list[Attempt]:
    """Every IPv4/IPv6 destination of a connect, sendto, sendmsg or sendmmsg in ``trace``
    (AF_UNIX, netlink and connected sends carry none)."""
    return [
        Attempt(m["v4"] or m["v6"], int(m["port"]), line)
        for line in trace.splitlines()
        for m in _SOCKADDR.finditer(line)
    ]


def listed_ports(text: str) -> set[int]:
    """The ports of the egress lines in ``text`` (``config --egress``, the demo's list)."""
    return {int(m["port"]) for m in _EGRESS_LINE.finditer(text) if m["port"]}


def is_loopback(host: str) -> bool:
    address = ipaddress.ip_address(host)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return address.is_loopback


def test_strace_lines_are_read_as_destinations() -> None:
    trace = "\n".join(
        [
            '7 connect(5, {sa_family=AF_INET, sin_port=htons(6379), sin_addr=inet_addr("127.0.0.1")'
            "}, 16) = 0",
            "7 connect(6, {sa_family=AF_INET6, sin6_port=htons(53), sin6_flowinfo=htonl(0), "
            'inet_pton(AF_INET6, "2001:4860::8888", &sin6_addr), sin6_scope_id=0}, 28) = -1',
            '8 sendto(3, ""..., 40, MSG_NOSIGNAL, {sa_family=AF_INET, sin_port=htons(53), '
            'sin_addr=inet_addr("10.0.0.2")}, 16) = 40',
            '9 connect(4, {sa_family=AF_UNIX, sun_path="/run/nscd/socket"}, 110) = -1',
            '9 sendto(4, ""..., 12, 0, NULL, 0) = 12',
        ]
    )
    assert [(a.host, a.port) for a in attempts(trace)] == [
        ("127.0.0.1", 6379),
        ("2001:4860::8888", 53),
        ("10.0.0.2", 53),
    ]
    assert listed_ports("redis   redis://127.0.0.1:6379   TRACEHOUND_REDIS_URL  x\n") == {6379}
    assert is_loopback("::ffff:127.0.0.1") and not is_loopback("1.1.1.1")


def recorder_missing() -> str | None:
    for tool in ("unshare", "strace", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install util-linux strace iproute2)"
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"unshare -n is refused here: {probe.stderr.strip()}"
    return None


def test_the_demo_pipeline_connects_only_to_the_loopback_services_its_config_lists(
    tmp_path: Path,
) -> None:
    why = recorder_missing()
    if why is not None:
        if os.environ.get("TRACEHOUND_REQUIRE_ALL_RECORDS"):  # CI: a missing recorder fails
            pytest.fail(f"cannot record the demo's connections: {why}")
        pytest.skip(f"cannot record the demo's connections: {why}")
    # Nothing listens on these inside the fresh namespace: the demo finds no Ollama and
    # starts its simulator; Slack's simulator takes the other.
    ollama_port, slack_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEHOUND_")}
    env |= HOSTILE_ENV | {
        "TRACEHOUND_DATA_DIR": str(tmp_path / "data"),
        "TRACEHOUND_OLLAMA_URL": f"http://127.0.0.1:{ollama_port}",
        "TRACEHOUND_SLACK_BOT_TOKEN": "xoxb-egress-test",
        "TRACEHOUND_SLACK_CHANNEL": "C0EGRESS",
        "TRACEHOUND_SLACK_BASE_URL": f"http://127.0.0.1:{slack_port}/api/",
    }
    config = subprocess.run(
        [tracehound_executable(), "config", "--egress"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    trace_path = tmp_path / "connections.trace"
    demo = [
        tracehound_executable(),
        "demo",
        "--repo-path",
        str(SAMPLE_SERVICE),
        "--error",
        str(DATA / "sample-error.txt"),
    ]
    strace = ["strace", "-f", "-qq", "--seccomp-bpf", "-s", "0", "-e", "signal=none"]
    strace += ["-e", "trace=connect,sendto,sendmsg,sendmmsg", "-o", str(trace_path)]
    inner = shlex.join([*strace, "--", sys.executable, "-c", DRIVER, str(slack_port), *demo])
    run = subprocess.Popen(
        ["unshare", "-n", "sh", "-c", f"ip link set lo up && exec {inner}"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = run.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        out, err = run.communicate()
        pytest.fail(f"the demo did not finish in 240 s:\n{err[-3000:]}")
    assert run.returncode == 0, f"{out[-2000:]}\n{err[-3000:]}"
    assert "delivered to: slack" in out and "received 1 message(s)" in out, out[-2000:]

    allowed = listed_ports(config.stdout) | listed_ports(err)
    seen = attempts(trace_path.read_text(errors="replace"))
    outside = [
        a.line
        for a in seen
        if a.port == 53 or not is_loopback(a.host) or a.port not in allowed  # 53: DNS
    ]
    assert not outside, (
        f"{len(outside)} connection attempt(s) to what the egress list does not name "
        f"(allowed loopback ports {sorted(allowed)}):\n" + "\n".join(outside[:20])
    )
    # The recorder saw the pipeline's own traffic: the stack's Redis and Slack's simulator.
    stack_ports = listed_ports(err)
    assert slack_port in {a.port for a in seen}
    assert stack_ports and stack_ports <= {a.port for a in seen}, (stack_ports, err[-2000:])
