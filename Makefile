# Two commands: `make run` serves Troupe on its embedded defaults, `make test` runs the tests.
# Both create .venv and install the project into it first, every dependency at the version
# constraints.txt pins: a new release of a dependency changes nothing until `make lock` takes it.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOCK := constraints.txt
PIP_VERSION := 26.3
UV_VERSION := 0.13.9
# uv installs the lock in seconds where pip took most of a minute (both read constraints.txt).
# --compile-bytecode, as pip does: without .pyc files every new process (each Ray worker, the
# sandbox's kernel, whose packages are read-only to it) compiles what it imports again, and with
# PYTHONDONTWRITEBYTECODE set nothing is ever cached (measured: the Ray tests took 1.3x as long).
PIP_INSTALL := $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -c $(LOCK)

.PHONY: install run sim test bench clean chromium bubblewrap lock upgrade

# The sandbox's packages (pyproject.toml's `sandbox` extra, at the lock's versions) go to a
# directory of their own, outside the server's environment: troupe/sandbox binds it read-only.
SANDBOX_PACKAGES := $(VENV)/sandbox-packages

$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet pip==$(PIP_VERSION) uv==$(UV_VERSION)
	$(PIP_INSTALL) -e '.[test]'
	$(BIN)/python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['sandbox'], sep='\n')" \
	    > $(VENV)/sandbox-requirements.txt
	rm -rf $(SANDBOX_PACKAGES)
	$(PIP_INSTALL) --target $(SANDBOX_PACKAGES) -r $(VENV)/sandbox-requirements.txt
	touch $(STAMP)

install: $(STAMP)

# Serve Troupe on its embedded defaults: http://127.0.0.1:8000/v1, the `sim` model,
# the example tools, history in ./troupe.duckdb. Pass a config with CONFIG=troupe.toml.
run: $(STAMP) bubblewrap
	RAY_USAGE_STATS_ENABLED=0 $(BIN)/troupe serve $(if $(CONFIG),--config $(CONFIG))

sim: $(STAMP)
	$(BIN)/troupe sim --host 127.0.0.1 --port 8001

# The console's browser test (tests/e2e/test_console_browser.py) drives Debian's chromium,
# installed here when it is missing and this machine can (root, with apt-get); a failed
# install stops the run, so that CI never skips that test quietly. Elsewhere it skips.
chromium:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
	    || [ -n "$$TROUPE_CHROMIUM" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium (apt-get) for the console's browser test"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else echo "chromium is missing and cannot be installed here (not root, or no apt-get): the browser test will skip"; fi

# The sandbox of code_interpreter and shell (troupe/sandbox, docs/sandbox.md) runs code under
# bubblewrap, installed here when it is missing and this machine can (root, with apt-get, dnf
# or apk); elsewhere the message says what to install, and the sandbox refuses to start.
bubblewrap:
	@if command -v bwrap >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" != 0 ]; then \
	    echo "bubblewrap (bwrap) is missing: install it (apt-get install bubblewrap, dnf install bubblewrap, ...): code_interpreter and shell need it"; \
	elif command -v apt-get >/dev/null 2>&1; then \
	    echo "installing bubblewrap (apt-get) for the code sandbox"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
	elif command -v dnf >/dev/null 2>&1; then dnf install -y -q bubblewrap; \
	elif command -v apk >/dev/null 2>&1; then apk add -q bubblewrap; \
	else echo "bubblewrap (bwrap) is missing and cannot be installed here: install it with your package manager"; fi

# The unit tests (no Ray) run on every core with pytest-xdist. Then the Ray tests, in two halves
# at once, each in a process of its own with its own Ray session: they keep a 2-core machine
# only half busy one at a time (waiting on process starts, time-outs, servers), so the halves
# overlap almost whole. RAY_TESTS_A (the suites that start their own servers, and the
# integration suite) logs to .test-logs/ray-a.log, printed when it ends; every other e2e file
# runs in the foreground. Whatever fails, every part runs; any failing fails the target.
# PYTEST_ARGS runs just what it names, in one process. On 2 cores the target takes 8 to 10
# minutes from a fresh clone (measured on 2026-11-28: 8 min 7 s to 9 min 38 s; one half at a
# time took 11 min 55 s); on 2026-12-04, on a machine whose unit tests ran 20% slower, 12 min
# 40 s (each half about 10 min, both cores busy throughout); on 2026-12-05, 10 min 56 s and
# 12 min 15 s, then 10 min 38 s once Ray's workers stopped importing openai (22a2798), and
# 9 min 46 s with mypy and the fuzz tests moved (3753c80); later that day, with webhooks and
# web_search, 11 min 7 s; 10 min 51 s and 10 min 34 s with the test sessions' Ray started as
# `troupe serve` starts it (LOCAL_RAY_ENV, tests/conftest.py); 10 min 21 s with a Ray instance
# fewer in test_eval_cli and mypy beside the halves; 9 min 20 s once a conversation host's
# imports took half the CPU (af8032f: no DuckDB, numpy, regex or httpx until used; the run's
# processes spent about 900 core-seconds, against 1,046 at 293ea90). The halves' CPU goes to Ray's
# processes (50 MCP test servers, 38 host actors, 21 storage actors and 24 MCP connection
# actors started, each paying its imports).
# Running the unit tests beside the halves was slower (13 min 39 s: see git log). mypy (one
# core, half a minute) runs beside the halves, which leave about a fifth of the cores idle
# (process starts, time-outs), rather than beside the unit tests, which keep both busy; the
# OpenAPI fuzz tests (a minute, no Ray) run in half A.
RAY_TESTS_A := tests/integration tests/e2e/test_troupe_serve.py tests/e2e/test_eval_cli.py tests/e2e/test_stopping.py \
	tests/e2e/test_fuzz_openapi.py
test: $(STAMP) chromium bubblewrap
	$(BIN)/ruff check troupe tests benchmarks
	$(BIN)/lint-imports --no-cache
ifdef PYTEST_ARGS
	$(BIN)/mypy
	$(BIN)/python -m pytest $(PYTEST_ARGS)
else
	@mkdir -p .test-logs
	status=0; \
	$(BIN)/python -m pytest tests/unit -n auto || status=$$?; \
	$(BIN)/python -m pytest $(RAY_TESTS_A) > .test-logs/ray-a.log 2>&1 & a=$$!; \
	$(BIN)/mypy > .test-logs/mypy.log 2>&1 & m=$$!; \
	$(BIN)/python -m pytest tests/e2e $(addprefix --ignore=,$(filter tests/e2e/%,$(RAY_TESTS_A))) || status=$$?; \
	wait $$m || status=$$?; echo "== mypy (.test-logs/mypy.log) =="; cat .test-logs/mypy.log; \
	wait $$a || status=$$?; \
	echo "== $(RAY_TESTS_A) (.test-logs/ray-a.log) =="; cat .test-logs/ray-a.log; \
	exit $$status
endif

# The latency benchmarks (about six minutes; results in benchmarks/results/).
bench: $(STAMP)
	$(PIP_INSTALL) -e '.[test,bench]'
	$(BIN)/python -m benchmarks.run

# The lock: every package the project, its tests and its benchmarks install, pinned for
# Linux, macOS and Windows alike (uv's universal resolution), from pyproject.toml's ranges.
# `make lock` after changing a dependency: new pins only where pyproject.toml asks for them.
# `make upgrade` takes the newest release of everything. Both then install the new lock and
# run the tests; commit constraints.txt with the run's result.
lock upgrade: $(STAMP)
	$(BIN)/uv pip compile pyproject.toml --extra test --extra bench --extra sandbox --universal --python-version 3.11 \
	    --quiet $(if $(filter upgrade,$@),--upgrade) -o $(LOCK)
	$(MAKE) test

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
