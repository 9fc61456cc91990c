# Two commands: `make run` serves Troupe on its embedded defaults, `make test` runs the tests.
# Both create .venv and install the project into it first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run sim test bench clean chromium

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Serve Troupe on its embedded defaults: http://127.0.0.1:8000/v1, the `sim` model,
# the example tools, history in ./troupe.duckdb. Pass a config with CONFIG=troupe.toml.
run: $(STAMP)
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

test: $(STAMP) chromium
	$(BIN)/ruff check troupe tests benchmarks
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The latency benchmarks (about six minutes; results in benchmarks/results/).
bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m benchmarks.run

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
