# replog: the two commands a user needs are `make demo` and `make test`.
# Each creates .venv and installs what it needs by itself.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export SPARK_LOCAL_IP := 127.0.0.1

.PHONY: demo test lint bench sim mutation clean venv system-deps js-deps

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[spark,demo,test,bench]'
	touch $(STAMP)

venv: $(STAMP)

# Debian packages the tests use, as package:command: kcat drives the broker; chromium is
# the headless browser the console's test runs (through Playwright, pointed at it); nftables
# (nft) cuts the network in the fault campaign's namespaces; strace watches a broker's
# fsyncs (tests/test_roll_fsync.py).
SYSTEM_PACKAGES := kcat:kcat chromium:chromium nftables:nft strace:strace
system-deps:
	@missing=; for pc in $(SYSTEM_PACKAGES); do command -v $${pc#*:} >/dev/null 2>&1 || missing="$$missing $${pc%%:*}"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

# kafkajs (a pure-JavaScript client) for the tests; Node.js from Debian if missing.
JS_STAMP := tests/js/node_modules/.installed
$(JS_STAMP): tests/js/package.json tests/js/package-lock.json
	@command -v npm >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq nodejs npm >/dev/null; }
	cd tests/js && npm ci --no-audit --no-fund --loglevel=error
	touch $(JS_STAMP)

js-deps: $(JS_STAMP)

# DEMO_ARGS: e.g. "--spark standalone" (a spark:// cluster), "--duration 30"; see
# `.venv/bin/python -m replog.demo --help`.
DEMO_ARGS ?=
demo: $(STAMP)
	$(PY) -m replog.demo $(DEMO_ARGS)

# Two workers (the machine has 2 cores; most of a test's time is waiting on brokers), each
# taking whole files, so a module's shared cluster stays on one worker; files in collection
# order, where tests/conftest.py puts the longest first.
test: $(STAMP) system-deps js-deps
	$(VENV)/bin/ruff check src tests bench
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder --durations=25

# Random replication-simulation seeds for SIM_SECONDS of wall time over every profile
# (SIM_PROFILE narrows it to one); failures print
# their seed and a one-line replay command. `make test` runs only a fixed short set.
SIM_SECONDS ?= 600
SIM_PROFILE ?=
sim: $(STAMP)
	PYTHONPATH=tests $(PY) -m sim.run --seconds $(SIM_SECONDS) $(if $(SIM_PROFILE),--profile $(SIM_PROFILE))

# Mutation testing of the replication rules and controller decisions (~20 min on 2 cores);
# mutmut is installed on demand, not a dependency. Kill rate: `mutmut results --all true`.
mutation: $(STAMP)
	$(PY) -m pip install --quiet mutmut
	REPLOG_SIM_STEPS=3000 $(VENV)/bin/mutmut run --max-children 2

# A fault campaign (issue 14) on real processes in network namespaces (root, nftables):
# SEED replays one schedule, none draws a random seed and prints it; MINUTES its length.
# The run directory (history, nemesis log, report, process logs) is under bench/out/chaos/.
# CHAOS_ARGS: e.g. "--dense" (short faults close together), "--zookeepers 1",
# "--faults kill-leader,leader-zookeeper"; see `PYTHONPATH=tests .venv/bin/python -m chaos.run -h`.
.PHONY: chaos
MINUTES ?= 5
SEED ?=
CHAOS_ARGS ?=
chaos: $(STAMP) system-deps
	PYTHONPATH=tests $(PY) -m chaos.run --minutes $(MINUTES) $(if $(SEED),--seed $(SEED)) $(CHAOS_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

bench: $(STAMP)
	$(PY) bench/produce_consume.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache .hypothesis tests/js/node_modules
