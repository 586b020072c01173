# One image for every tracehound process (workers, producers, CLI); compose picks the command.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
# git: index and watch read the checkout's history (shared/index/history.py); the compose
# watcher mounts it at /src, owned by the host's user, which git refuses unless marked safe.
RUN apt-get update && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/* && git config --system --add safe.directory /src
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY workers ./workers
COPY producers ./producers
# The pgvector extra: TRACEHOUND_VECTOR_STORE=pgvector needs its client (compose's pgvector
# profile, or a PostgreSQL of your own).
RUN pip install --no-cache-dir '.[pgvector]' && useradd --create-home tracehound
USER tracehound
CMD ["tracehound", "--help"]
