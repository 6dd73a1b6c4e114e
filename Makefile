# Two commands set everything up on a fresh machine:
#   make run   - create .venv if missing, install, start the whole system with a demo workload
#   make test  - create .venv if missing, install with dev extras and the browser, run the whole suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# The suite runs in parallel (pytest-xdist), one worker per core up to four, each with its own embedded
# servers; a test file stays on one worker (its module fixtures are built once). TEST_WORKERS=0: serial.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)

.PHONY: run test install install-dev lock browser bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Dependencies come from the lock files (exact versions, tools/write_lock.py), then the project itself
# without resolving anything again (--no-deps). `make lock` moves the locks to the newest versions
# pyproject.toml allows; commit the result after `make test` passes with it.
$(VENV)/.installed: pyproject.toml requirements.lock | $(BIN)/python
	$(BIN)/python -m pip install --quiet -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml requirements-dev.lock | $(BIN)/python
	$(BIN)/python -m pip install --quiet -r requirements-dev.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@ $(VENV)/.installed

lock: | $(BIN)/python
	$(BIN)/python tools/write_lock.py

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

# The console's browser tests drive Debian's Chromium (Playwright never downloads a browser) and need
# a CJK font, or Chinese labels render as boxes. Installs both when missing (as root, like CI);
# does nothing when they are there.
BROWSER_PACKAGES := chromium fonts-noto-cjk
browser:
	@if command -v chromium >/dev/null 2>&1 && fc-list :lang=zh 2>/dev/null | grep -q .; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing $(BROWSER_PACKAGES) for the console's browser tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(BROWSER_PACKAGES) >/dev/null; \
	else echo "the browser tests need Chromium and a CJK font: apt-get install $(BROWSER_PACKAGES) (as root)" >&2; exit 1; fi

run: install
	$(BIN)/cardflow up --demo

test: install-dev browser
	$(BIN)/python -m pytest $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile) $(PYTEST_ARGS)

bench: install-dev
	$(BIN)/python bench/policies.py
	$(BIN)/python bench/scale.py
	$(BIN)/python bench/pipeline.py

chaos: install-dev
	nice -n 15 $(BIN)/python bench/chaos.py

clean:
	rm -rf $(VENV) .cardflow .pytest_cache .hypothesis
