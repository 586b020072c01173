"""Library telemetry stays off in tracehound's processes, whatever their environment says."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import os
from shared.core.telemetry import switch_off_telemetry
if os.environ.get("SWITCH") == "1":
    switch_off_telemetry(os.environ)
from chromadb.config import Settings
from langchain_core.tracers.context import _tracing_v2_is_enabled
print(bool(_tracing_v2_is_enabled()), Settings().anonymized_telemetry)
"""


@pytest.mark.parametrize("switch", ["1", "0"], ids=["switched-off", "as-the-env-says"])
def test_telemetry_stays_off_whatever_the_environment_says(switch: str) -> None:
    hostile = {
        "LANGCHAIN_TRACING_V2": "true",
        "LANGSMITH_TRACING": "true",
        "LANGSMITH_API_KEY": "lsv2_pt_not_a_real_key",
        "ANONYMIZED_TELEMETRY": "True",
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**os.environ, **hostile, "SWITCH": switch},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    # Without the switch the same environment turns both on: the probe can tell.
    assert done.stdout.split() == (["False", "False"] if switch == "1" else ["True", "True"])
