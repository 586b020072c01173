"""loguru: its default text format, once with the default ``backtrace``/``diagnose`` (loguru's own
annotated traceback) and once with both off, then ``serialize=True`` (JSON lines).

Run by ``../generate.py`` in a subprocess; writes to stderr, a separator line before each record.
"""

import sys

from loguru import logger


def separator(stem: str) -> None:
    print(f"=== tracehound-record {stem} ===", file=sys.stderr, flush=True)


def average(total: int, count: int) -> float:
    return total / count


def basket_average(prices: list[int]) -> float:
    return average(sum(prices), len(prices))


def report(prices: list[int]) -> None:
    try:
        basket_average(prices)
    except ZeroDivisionError:
        logger.exception("could not compute the basket average")


def main() -> None:
    logger.remove()
    # The default sink's settings (format, backtrace=True, diagnose=True); colorize pinned off,
    # as it would be detected off on a pipe or a file anyway.
    sink = logger.add(sys.stderr, colorize=False)
    separator("loguru--info")
    logger.info("worker started")
    separator("loguru--exception")
    report([])
    separator("loguru--error-no-trace")
    logger.error("quota exceeded for user 7")
    logger.remove(sink)

    sink = logger.add(sys.stderr, colorize=False, backtrace=False, diagnose=False)
    separator("loguru--exception-plain")
    report([])
    logger.remove(sink)

    sink = logger.add(sys.stderr, colorize=False, serialize=True)
    separator("loguru--json-info")
    logger.info("worker started")
    separator("loguru--json-exception")
    report([])
    separator("loguru--json-error-no-trace")
    logger.error("quota exceeded for user 7")
    logger.remove(sink)


if __name__ == "__main__":
    main()
