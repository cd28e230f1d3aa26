# stormlab: `make demo` runs the lab (no Docker), `make test` runs the tests.
# Both create the virtualenv in .venv and install what they need first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-run
TOOLS  := $(VENV)/.installed-tools

# docker compose: `make up` / `make down` / `make blip` / `make logs` / `make e2e`.
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
PROMETHEUS_PORT ?= 9090
GRAFANA_PORT ?= 3000
ALERTMANAGER_PORT ?= 9093

.PHONY: install test test-lab test-storm test-all test-unit check constraints demo gameday soak soak-compose fuzz bench sizing k8s-config sweep mitigations profile local-up local-status local-down clean cli-table \
        up down blip logs token grafana-password e2e

# What running the lab needs (the lab and its charts), and what testing it needs on top (the test
# and lint tools): `make demo` installs the first, `make test` and `make check` both.
# constraints.txt pins every package at the version CI tested: a fresh machine gets the same.
install: $(STAMP)

# --no-compile: Python compiles what is imported when it is first imported; compiling every file
# of every package up front took 19 of the 36 s of the test tools' install (measured here).
PIP_INSTALL = $(BIN)/pip install --quiet --no-compile

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || { echo "make: python3 -m venv failed: install python3-venv (Debian, Ubuntu) and run again" >&2; rm -rf $(VENV); exit 1; }
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): pyproject.toml constraints.txt | $(BIN)/python
	$(PIP_INSTALL) -c constraints.txt -e '.[charts]'
	touch $(STAMP)

$(TOOLS): $(STAMP)
	$(PIP_INSTALL) -c constraints.txt -e '.[test,check,charts]'
	touch $(TOOLS)

# Lint, format check and types (ruff, mypy; configured in pyproject.toml).
check: $(TOOLS)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# After a deliberate upgrade: pin what the virtualenv now holds (run `make test check` first).
constraints: $(TOOLS)
	$(PIP_INSTALL) -c constraints.txt -e '.[test,check,charts,docker]'
	$(BIN)/pip freeze --exclude-editable | grep -v '^stormlab' > constraints.txt

# The tests in tiers (pytest markers; the slowest 20 are printed at the end of each):
#   test        the fast tier: unit tests, in-process tests and a few small live labs, on both cores
#               (~2.5 min)
#   test-lab    every other small live lab: the cascade, game days, soaks, the fuzzer; two at once, then
#               the soaks that compare the whole host's rules alone (~4.5 min)
#   test-storm  storm-sized runs (400 nodes), the fidelity guard, the bench, the room in a browser (~11 min)
#   test-all    all three
PYTEST = $(BIN)/pytest --durations=20
test: $(TOOLS)
	$(PYTEST) -n 2 tests/unit tests/integration

test-lab: $(TOOLS)
	$(PYTEST) -n 2 -m "lab and not alone" tests/integration
	$(PYTEST) -m "lab and alone" tests/integration

test-storm: $(TOOLS)
	$(PYTEST) -m storm tests/integration

test-all: $(TOOLS)
	$(PYTEST) -m "" tests/unit tests/integration

test-unit: $(TOOLS)
	$(PYTEST) -n 2 tests/unit

# The whole 2015 story, about 5 minutes: 1,000 nodes, a 5 s blip of 3 racks, the storm, a summary
# and a PNG. Exit 3 if the run was INVALID (the host shaped it).
demo: $(STAMP)
	$(BIN)/stormlab demo $(ARGS)

# The 2015 game day, played by the autopilot (about 6 minutes): storm, failed capacity, pause, capacity, staged
# resume, the Monday tail; a report in reports/gamedays. Players drop --autopilot (ARGS is passed on).
gameday: $(STAMP)
	$(BIN)/stormlab scenario run scenarios/dynamodb-2015.yaml --autopilot $(ARGS)

# The map of where a blip leaves the lab stuck; the documented run is at 1,000 nodes, once per link:
# `make sweep ARGS="--watch-periods 6 --live-phases 0 --link-cut kernel"` (as root), then `--link-cut proxy` (about
# 11 minutes of model on both cores once, then 30 live points per link, 100-240 s each: about 65
# minutes); --quick: 400 nodes. Updates docs/sweep/ and docs/sweep.md's table. It resumes if stopped.
sweep: $(STAMP)
	$(BIN)/stormlab sweep --out docs/sweep --page docs/sweep.md $(ARGS)

# The 2015 trigger against every policy and fix, live, one 1,000-node lab each (about 42 minutes);
# updates docs/mitigations/ and docs/fixes.md's table. It resumes if stopped.
mitigations: $(STAMP)
	$(BIN)/stormlab mitigations --out docs/mitigations --page docs/fixes.md $(ARGS)

# The fault soak on a lab of its own (1,000 random leases, holders killed at random; ~3 min):
# every lease reverted, nothing stopped or missing, the host's rules untouched. LEASES=… to change.
LEASES ?= 1000
soak: $(STAMP)
	STORMLAB_STATE_DIR=$$(mktemp -d)/stormlab sh -c '$(BIN)/stormlab up --base-port 0 && { $(BIN)/stormlab soak --leases $(LEASES) $(ARGS); rc=$$?; $(BIN)/stormlab down; exit $$rc; }'

# The same soak on the compose stack (`make up` first): fault shells in the containers, some of
# them SIGKILLed (their orphans reverted by `chaos list`), a few services killed and restarted.
soak-compose: $(STAMP)
	$(PIP_INSTALL) -c constraints.txt -e '.[test,charts,docker]'
	STORMLAB_COMPOSE_PROJECT=$${COMPOSE_PROJECT_NAME:-stormlab} $(BIN)/stormlab soak --backend docker --leases $(LEASES) --holder-kills 0.05 $(ARGS)

# The API fuzzer on a lab of its own (cheap membership costs: it tests the API, not the storm), with
# every incident's services (the lease manager among them): REQUESTS generated requests per
# operation of every process, the game's consoles (the join and debrief pages among them) and the
# rootless lab's door (raw bytes, slow and half-open connections), judged by each one's
# /openapi.json (~16 min at 1,000); exit 1 on any finding.
REQUESTS ?= 1000
fuzz: $(TOOLS)
	STORMLAB_STATE_DIR=$$(mktemp -d)/stormlab sh -c '$(BIN)/stormlab up --base-port 0 --racks 2 --nodes-per-rack 20 --renewal-period 1s --cascade every \
	  --set cost_base_s=0.0001 --set cost_per_entry_s=0.00001 --set admin_cost_s=0.001 && \
	  { $(BIN)/stormlab fuzz --requests $(REQUESTS) $(ARGS); rc=$$?; $(BIN)/stormlab down; exit $$rc; }'

# The lab's costs on this machine into docs/benchmarks.md (~1 min at the default fleet; run it
# alone): membership path against a bare aiohttp handler, fault apply and revert, fleets.
# E.g. ARGS="--fleets 1000,10000 --demos reports/demo-*.json" for start-up at 10,000 nodes and
# the storm table from demo runs.
bench: $(STAMP)
	$(BIN)/stormlab bench --page docs/benchmarks.md $(ARGS)

# CPU, memory and Prometheus series per process at 1,000 and 10,000 nodes, and what 100,000
# need on a cluster: docs/sizing.md (~5 min).
sizing: $(STAMP)
	$(BIN)/stormlab sizing --page docs/sizing.md $(ARGS)

# The Kubernetes base's ConfigMaps from prometheus/, alertmanager/ and grafana/ (a test fails
# when they drift).
k8s-config: $(STAMP)
	$(BIN)/python -m stormlab.artefacts.k8s_config

# docs/cli.md's table of every flag and what it means, from the parser (a test keeps it the same)
cli-table: $(STAMP)
	$(BIN)/python -c 'from pathlib import Path; from stormlab.cli import build_parser; from stormlab.artefacts import cli_page, blocks; \
		blocks.replace_block(Path("docs/cli.md"), "flags", cli_page.markdown(build_parser()))'

# py-spy profiles of rack-00, the link proxy, the metadata service and loadgen at a fleet size
# (default 10,000 nodes at speed 0.25); their top lines go into docs/benchmarks.md.
profile: $(STAMP)
	$(PIP_INSTALL) -c constraints.txt -e '.[profile]'
	$(BIN)/python benchmarks/profile_lab.py $(ARGS)

# The local lab without the demo: processes on loopback, left running.
local-up: $(STAMP)
	$(BIN)/stormlab up $(ARGS)

local-status: $(STAMP)
	$(BIN)/stormlab status

local-down: $(STAMP)
	$(BIN)/stormlab down

# The whole lab on docker compose, with Prometheus and Grafana.
# SERVICES limits what starts (e.g. SERVICES="loadgen prometheus" where Grafana cannot be pulled).
# CELLS=4: the metadata service in four cells (STORMLAB_CELLS, and STORMLAB_MORE_CELLS replicas of
# metadata-cell: compose cannot count); put both in .env for `docker compose run` to see them too.
up:
	$(if $(CELLS),STORMLAB_CELLS=$(CELLS) STORMLAB_MORE_CELLS=$$(($(CELLS) - 1))) $(COMPOSE) up -d --build $(SERVICES)
	@echo
	@echo "stormlab is up. Give it a minute to settle, then:"
	@echo "  storm dashboard   http://localhost:$(GRAFANA_PORT)/d/stormlab-storm"
	@echo "  tables            http://localhost:$(GRAFANA_PORT)/d/stormlab-tables"
	@echo "  metadata margin   http://localhost:$(GRAFANA_PORT)/d/stormlab-margin"
	@echo "  the cascade       http://localhost:$(GRAFANA_PORT)/d/stormlab-cascade"
	@echo "  lab token         make token   (generated at the first start; Grafana's admin password: make grafana-password)"
	@echo "  Prometheus        http://localhost:$(PROMETHEUS_PORT)/alerts"
	@echo "  Alertmanager      http://localhost:$(ALERTMANAGER_PORT)   (its pages go to the runner of 'stormlab scenario run --backend docker')"
	@echo "  start the storm   make blip   ($(COMPOSE) run --rm chaos blip --rack-set 3 --duration 5s)"
	@echo "  stop everything   make down"

down:
	$(COMPOSE) down -v --remove-orphans

blip:
	$(COMPOSE) run --rm chaos blip --rack-set 3 --duration 5s

logs:
	$(COMPOSE) logs -f --tail=100

# The secrets the stack generated at its first start (in its `secrets` volume).
token:
	@$(COMPOSE) exec -T metadata cat /run/stormlab/token

grafana-password:
	@$(COMPOSE) exec -T metadata cat /run/stormlab/grafana-password

# End to end (needs Docker, and root for the swarm's engines): compose (stack up, blip, storm in
# Prometheus, panels, down -v), a training room on compose, a swarm of three engines.
e2e: $(TOOLS)
	$(PIP_INSTALL) -c constraints.txt -e '.[test,charts,docker]'
	$(BIN)/pytest -p no:cacheprovider --tb=long --durations=10 tests/e2e -s

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
