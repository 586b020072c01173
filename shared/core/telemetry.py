"""Library telemetry off: the switches of the libraries tracehound runs that would phone home.

Set in every process tracehound starts, before any client is built (``tracehound`` itself, a
celery worker's start), and inherited by the processes those start (the workers' pool, the
Chroma server): tracehound contacts the hosts ``tracehound config --egress`` lists and nothing
else, whatever the environment says (docs/reliability-and-security.md, *Zero egress*).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

TELEMETRY_OFF: Mapping[str, str] = {
    # chromadb's anonymized product telemetry (posthog), read by its client and by the
    # `chroma run` server; the client is also built with anonymized_telemetry=False.
    "ANONYMIZED_TELEMETRY": "False",
    # LangSmith tracing of every ChatOllama call (langchain-core asks langsmith, which reads
    # LANGSMITH_* before LANGCHAIN_* and TRACING_V2 before TRACING): all four, or a user's
    # LANGCHAIN_TRACING_V2=true would still send prompts to api.smith.langchain.com.
    "LANGSMITH_TRACING_V2": "false",
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
    "LANGCHAIN_TRACING": "false",
    # huggingface_hub's usage pings (sentence-transformers in `tracehound eval`, which also
    # loads its model offline: shared/devtools/st_embedder.py).
    "HF_HUB_DISABLE_TELEMETRY": "1",
    # The common opt-out that huggingface_hub and others honour.
    "DO_NOT_TRACK": "1",
}


def switch_off_telemetry(environ: MutableMapping[str, str]) -> None:
    """Every switch in ``TELEMETRY_OFF`` set in ``environ`` (the process's ``os.environ``, at
    its start): overriding, not defaulting, so no variable turns one back on."""
    environ.update(TELEMETRY_OFF)
