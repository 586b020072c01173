"""structlog rendering JSON lines, with ``format_exc_info`` turning exc_info into ``exception``.

Run by ``../generate.py`` in a subprocess; writes to stdout, a separator line before each record.
"""

import sys

import structlog


def separator(stem: str) -> None:
    print(f"=== tracehound-record {stem} ===", file=sys.stdout, flush=True)


def cents(raw: str) -> int:
    return int(raw) * 100


def main() -> None:
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        logger_factory=structlog.PrintLoggerFactory(file=sys.stdout),
        cache_logger_on_first_use=False,
    )
    log = structlog.get_logger()

    separator("structlog--info")
    log.info("ok")

    separator("structlog--exception")
    try:
        cents("12.50")
    except ValueError:
        log.exception("charge failed", order_id=42)

    separator("structlog--error-no-trace")
    log.error("quota exceeded", user=7)


if __name__ == "__main__":
    main()
