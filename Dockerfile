# One image for every tracehound process (workers, producers, CLI); compose picks the command.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY workers ./workers
COPY producers ./producers
RUN pip install --no-cache-dir . && useradd --create-home tracehound
USER tracehound
CMD ["tracehound", "--help"]
