# Two commands: `make run` serves the registry, `make test` runs the suite.
# Both start embedded PostgreSQL and Redis unless DATABASE_URL / REDIS_URL are set.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: run test fuzz lint format bench clean

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

run: $(VENV)/.installed
	$(PY) -m devtools.stack run

test: $(VENV)/.installed
	$(PY) -m devtools.stack test $(ARGS)

# schemathesis against the OpenAPI document, as every role; FUZZ_EXAMPLES per operation.
fuzz: $(VENV)/.installed
	FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-50} $(PY) -m devtools.stack test -m fuzz tests/fuzz $(ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(VENV)/.installed
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(VENV)/.installed
	$(PY) bench/pinned_fetch.py $(ARGS)

clean:
	rm -rf .run
