# stormlab: `make demo` runs the lab (no Docker), `make test` runs the tests.
# Both create the virtualenv in .venv and install what they need first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: install test test-unit test-integration demo up status down clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/pytest tests/unit tests/integration

test-unit: $(STAMP)
	$(BIN)/pytest tests/unit

test-integration: $(STAMP)
	$(BIN)/pytest tests/integration

# The whole 2015 story: 1,000 nodes, a 5 s blip of 3 racks, the storm, a summary and a PNG.
demo: $(STAMP)
	$(BIN)/stormlab demo $(ARGS)

up: $(STAMP)
	$(BIN)/stormlab up $(ARGS)

status: $(STAMP)
	$(BIN)/stormlab status

down: $(STAMP)
	$(BIN)/stormlab down

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
