# replog: the two commands a user needs are `make demo` and `make test`.
# Each creates .venv and installs what it needs by itself.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export SPARK_LOCAL_IP := 127.0.0.1

.PHONY: demo test lint bench sim mutation mutation-sim clean venv system-deps js-deps

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

# Mutation testing of the replication rules and the controller core (pyproject.toml's
# [tool.mutmut]); mutmut is installed on demand, not a dependency. `mutation` selects the
# unit tests and the simulator's; `mutation-sim` only the simulator's tests (the unit test
# files ignored), over the modules issue 24 names (MUTATION_SIM_MODULES; a subset with e.g.
# MUTATION_SIM_MODULES="replog.controller.core_election*"). Each starts from a fresh
# mutants/ (the two selections' test maps differ). One child, at the lowest priority: hours
# on a shared machine. Kill rate: `mutmut results --all true`; see tests/sim/MUTATION.md.
# A stratified random sample instead (the figure there): tests/sim/mutation_sample.py.
MUTATION_UNIT_TESTS := tests/test_replication_core.py tests/test_controller_decisions.py \
	tests/test_controller_election.py tests/test_replication_machine.py \
	tests/test_delete_records_rules.py
MUTATION_SIM_MODULES ?= "replog.controller.core*" "replog.controller.decisions*" \
	"replog.controller.election*" "replog.controller.state_machines*" \
	"replog.controller.reassignment*" "replog.controller.topic_deletion*" \
	"replog.controller.partition_modifications*" "replog.controller.controller_zk*" \
	"replog.replication.core*" "replog.replication.isr*" \
	"replog.replication.follower*" "replog.replication.truncation*" \
	"replog.replication.fetch_rules*" "replog.replication.fetch_decision*" \
	"replog.replication.fetch_session_handler*" "replog.replication.machine*" \
	"replog.server.fetch_session*"
MUTMUT := nice -n 19 $(VENV)/bin/mutmut
mutation: $(STAMP)
	$(PY) -m pip install --quiet mutmut
	rm -rf mutants
	REPLOG_SIM_STEPS=3000 $(MUTMUT) run --max-children 1

mutation-sim: $(STAMP)
	$(PY) -m pip install --quiet mutmut
	rm -rf mutants
	REPLOG_SIM_STEPS=3000 PYTEST_ADDOPTS="$(foreach f,$(MUTATION_UNIT_TESTS),--ignore=$(f))" \
		$(MUTMUT) run --max-children 1 $(MUTATION_SIM_MODULES)

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
