# Two targets do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench-pipeline install system-deps

demo: install
	$(BIN)/tracehound demo

# Test files run in five processes (pytest-xdist): most of the suite waits on real servers,
# so on two cores five take 5:43 where four took 6:16 (whole suite, this machine). The
# slowest tests are listed at the end: CI has ten minutes, and they are where it goes. Files
# are handed out longest first (tests/conftest.py, LONGEST_FIRST), not by their test count.
test: install
	$(BIN)/python -m pytest -n 5 --dist loadfile --no-loadscope-reorder --durations=25

lint: install
	$(BIN)/ruff check shared workers producers tests benchmarks
	$(BIN)/ruff format --check shared workers producers tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/mkdocs build --strict --site-dir $(or $(TMPDIR),/tmp)/tracehound-site

bench-pipeline: install
	$(BIN)/python benchmarks/pipeline.py

install: system-deps $(VENV)/.installed

# redis-server runs privately inside the demo and the tests, and the tailer's tests rotate
# logs with the real logrotate; both must be on PATH.
system-deps:
	@{ command -v redis-server && { command -v logrotate || test -x /usr/sbin/logrotate; }; } \
	  >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1; then \
	    SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	    $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq redis-server logrotate; \
	  elif command -v brew >/dev/null 2>&1; then brew install redis logrotate; \
	  else echo "install redis-server and logrotate, then retry" >&2; exit 1; fi; }

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "tracehound needs Python >= 3.11"'
	$(PYTHON) -m venv $(VENV)
	# uv installs the same releases pip resolves (checked with `pip freeze` on both) in ~15 s
	# where pip takes ~65 s: a minute of every CI run's ten. --compile-bytecode as pip does:
	# where PYTHONDONTWRITEBYTECODE is set (it is on the CI machines), a venv without .pyc
	# files compiles every module again in every process, and the tests took 540 s, not 400.
	$(BIN)/pip install -q uv
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -e '.[dev]'
	touch $@
