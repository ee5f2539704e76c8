# Two commands: `make run` serves the registry, `make test` runs the suite.
# Both start embedded PostgreSQL and Redis unless DATABASE_URL / REDIS_URL are set.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: run test tls-selfsigned fuzz chaos chaos-short lint format bench bench-short bench-turn bench-cache bench-cache-short bench-scale bench-route lock clean eval-routing eval-routing-compare eval-routing-tune ui-assets screenshots ts-types mlflow-venv test-mlflow test-stores

# One virtualenv for every make target: the runtime set (requirements.txt, what the image
# installs) plus the development set (requirements-dev.txt: tests, tools, and the embedded
# PostgreSQL and Redis that `make run` starts too). Both are locked with hashes, and pip
# refuses anything whose hash is not in them. The installer comes first, from its own lock
# (requirements-bootstrap.txt), so the pip the interpreter bundles never reads the main lock.
$(VENV)/.installed: requirements-bootstrap.txt requirements.txt requirements-dev.txt
	@if [ -L $(VENV) ] && [ ! -e $(VENV) ]; then echo "$(VENV) points at a virtualenv that is gone: replacing it"; rm $(VENV); fi
	@test -x $(PY) || { echo "creating $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements-bootstrap.txt $(PIP_ARGS)
	@echo "installing requirements.txt and requirements-dev.txt into $(VENV)"
	@echo "(the first time downloads about 120 MB: a few minutes; later runs skip this step)"
	$(PY) -m pip install --disable-pip-version-check --require-hashes -r requirements.txt -r requirements-dev.txt $(PIP_ARGS)
	@touch $@

# The Python client and the `promptreg` command from this checkout (client/), editable, for the
# client's tests and the tools that drive a server with it (bench, chaos); the service itself
# never imports it. Not hash-locked: it is our code.
$(VENV)/.client-installed: $(VENV)/.installed client/pyproject.toml
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e ./client
	@touch $@

run: $(VENV)/.client-installed
	$(PY) -m devtools.stack run $(ARGS)

test: $(VENV)/.client-installed
	$(PY) -m devtools.stack test $(ARGS)

# The suite's tiers that speak to PostgreSQL and Redis through the services and the fast lane's
# own SQL (locks, batches, migrations, rate limits, the worker): what CI runs a second time
# against the machine's servers (DATABASE_URL/REDIS_URL set), in about 60% of the suite's time.
# The rest (clients, browser, README, the stack's supervisor, MCP, the admin) meets the same
# servers through these. The whole suite against external servers is `make test` with the URLs.
STORE_TIERS := tests/registry tests/sessions_app tests/evidence tests/access tests/reliability \
	tests/retention tests/knowledge tests/skills tests/turns tests/api tests/webhooks \
	tests/evals tests/metrics tests/modelcatalog tests/edge/test_fastlane.py
test-stores: $(VENV)/.client-installed
	$(PY) -m devtools.stack test $(STORE_TIERS) $(ARGS)

# The TypeScript client's OpenAPI document, the types generated from it and the compiled dist/
# (all committed; tests/client/test_typescript_client.py fails when any is stale).
ts-types: $(VENV)/.client-installed
	cd clients/typescript && { [ -d node_modules ] || npm ci --no-audit --no-fund; }
	DATABASE_URL=$${DATABASE_URL:-postgres://x@127.0.0.1:9/x} REDIS_URL=$${REDIS_URL:-redis://127.0.0.1:9/0} \
		DJANGO_SETTINGS_MODULE=config.test_settings $(PY) manage.py spectacular --format openapi-json --file clients/typescript/openapi.json
	cd clients/typescript && npm run --silent generate && npm run --silent build

# schemathesis against the OpenAPI document, as every role; FUZZ_EXAMPLES per operation.
fuzz: $(VENV)/.client-installed
	FUZZ_EXAMPLES=$${FUZZ_EXAMPLES:-50} $(PY) -m devtools.stack test -m fuzz tests/fuzz $(ARGS)

# Publish eval/routing as a bundle and replay it through the route endpoint (hit@1/3/5 per kind).
eval-routing: $(VENV)/.client-installed
	$(PY) -m devtools.stack test -m eval eval/routing -q $(ARGS)

# The router alone on the frozen splits, and a web worker's resident memory, before (the commit
# BEFORE, default in eval/routing/compare.py) and after (this checkout), side by side.
eval-routing-compare: $(VENV)/.installed
	$(PY) -m eval.routing.compare $(if $(BEFORE),--before $(BEFORE)) $(ARGS)

# A grid of router parameters on the tuning sets only (dev, workspace), best first; the frozen
# splits are refused (eval/routing/tune.py): ARGS="--set piece_blend=1.0 --grid semantic_weight=1.5/2.0".
eval-routing-tune: $(VENV)/.installed
	$(PY) -m eval.routing.tune $(ARGS)

# The chaos suite (chaos/): its own PostgreSQL, Redis, web server, worker and beat on loopback,
# faults injected under bounded load, one table of figures; non-zero exit when an invariant
# breaks. chaos-short (a few rounds each, about two minutes) runs in CI.
chaos: $(VENV)/.client-installed
	$(PY) -m chaos $(ARGS)

chaos-short: $(VENV)/.client-installed
	$(PY) -m chaos --short $(ARGS)

# The domain packages, which mypy checks at --strict (pyproject.toml's override names the same).
# The second mypy run checks them as `mypy --strict` does, with every module they import
# (config, reached through Django's settings and Celery's app) at --strict too.
MYPY_STRICT := access audit core evidence knowledge modelcatalog registry sessions_app skills turns
LINT_ENV := DATABASE_URL=$${DATABASE_URL:-postgres://lint@127.0.0.1:9/lint} REDIS_URL=$${REDIS_URL:-redis://127.0.0.1:9/0}

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	@# mypy's Django plugin loads the settings, which need these; nothing connects to them.
	$(LINT_ENV) $(VENV)/bin/mypy
	$(LINT_ENV) $(VENV)/bin/mypy --strict $(MYPY_STRICT)

format: $(VENV)/.installed
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(VENV)/.client-installed
	$(PY) bench/pinned_fetch.py $(ARGS)

# CI: every scenario for 2 s, so the benchmark never rots; figures are printed, not asserted.
bench-short: $(VENV)/.client-installed
	$(PY) bench/pinned_fetch.py --short $(ARGS)

# Issue 42: the turn call against the code of another tree in the same run, rounds alternated
# (BASE: a worktree of the commit to compare with, e.g. `git worktree add ../base d8ab8e5
# --detach`); turns/s, p50/p99, web CPU and the pinned fetch per tree, then CPU per turn by stage
# and SQL statements per turn in process (bench/turn_speed.py). Without BASE: this tree alone.
bench-turn: $(VENV)/.client-installed
	$(PY) bench/turn_speed.py $(if $(BASE),--base $(BASE)) $(ARGS)

# Issue 21: a reference day of agent turns (500 sessions x 20 turns, knowledge edits, a label
# move, a DUTY.md edit, midnight) priced as a provider bills cached input: our turn call (two
# breakpoints; one; none) against a naive registry. In process; 20 minutes on a quiet machine
# (ARGS="--sessions 100" for a fifth of the day).
bench-cache: $(VENV)/.client-installed
	$(PY) bench/cache_economics.py $(ARGS)

# 20 sessions x 10 turns: a smoke run. Not in CI: with the database's set-up and migrations it
# takes longer than the 30 s a CI step may spend on it here.
bench-cache-short: $(VENV)/.client-installed
	$(PY) bench/cache_economics.py --short $(ARGS)

# Issue 20: 10,000 versions, 5 M ended sessions with 20 M turns, file reads and 1 M deliveries (bench/seed_scale.py) against an almost empty database, then a simulated month with the daily prune. Long: not in CI.
bench-scale: $(VENV)/.client-installed
	$(PY) bench/scale.py $(ARGS)

# The skill router alone, 100 skills, warm: p50/p99 wall and CPU time (goal: p99 < 20 ms).
bench-route: $(VENV)/.client-installed
	$(PY) bench/route.py $(ARGS)

# Regenerate the lock files from requirements-bootstrap.in / requirements.in / requirements-dev.in
# (needs the index). Existing pins are kept; upgrade one with ARGS="--upgrade-package NAME", all
# with ARGS=--upgrade. --universal: one lock for Linux, macOS and Windows; the hashes cover every
# published file. Then the venv is brought to the new lock and devtools/lock_extras.py writes the
# extras each package asks for into it (uv leaves them out; docs/development.md says why they
# matter). Commit the .in and .txt files together.
LOCK := $(VENV)/bin/uv pip compile --quiet --universal --python-version 3.11 --generate-hashes
lock: $(VENV)/.installed
	$(LOCK) $(ARGS) requirements-bootstrap.in -o requirements-bootstrap.txt
	$(LOCK) $(ARGS) requirements.in -o requirements.txt
	$(LOCK) $(ARGS) requirements-dev.in -o requirements-dev.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements-bootstrap.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements.txt -r requirements-dev.txt
	$(PY) -m devtools.lock_extras --write requirements.txt requirements-dev.txt
	@touch $(VENV)/.installed

clean:
	rm -rf .run

# The MLflow tracking server that tests/registry/test_importers.py imports prompts from: its own
# virtualenv (about 850 MB), pinned in tests/mlflow-requirements.txt, never in .venv. The test
# creates it the same way on first use; this only does it ahead of time (CI, a warm cache).
mlflow-venv: .venv-mlflow/.installed

# The MLflow importer against that live server: kept out of `make test` (a first run downloads
# 850 MB), run once by CI.
test-mlflow: $(VENV)/.client-installed .venv-mlflow/.installed
	$(PY) -m devtools.stack test -m mlflow tests/registry/test_importers.py $(ARGS)

.venv-mlflow/.installed: tests/mlflow-requirements.txt
	rm -rf .venv-mlflow
	$(PYTHON) -m venv .venv-mlflow
	.venv-mlflow/bin/python -m pip install --quiet --disable-pip-version-check -r tests/mlflow-requirements.txt
	cp tests/mlflow-requirements.txt $@

# A self-signed certificate in deploy/tls/ for trying the compose stack on this machine
# (https://localhost/ and https://127.0.0.1/; browsers warn about it). An existing one is kept.
# In production, put your own certificate there instead (docs/operations.md).
TLS_DIR ?= deploy/tls
tls-selfsigned:
	@if [ -e $(TLS_DIR)/fullchain.pem ]; then echo "$(TLS_DIR)/fullchain.pem exists: kept (delete it for a new one)"; \
	else mkdir -p $(TLS_DIR) && openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj /CN=localhost \
		-addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
		-keyout $(TLS_DIR)/privkey.pem -out $(TLS_DIR)/fullchain.pem 2>/dev/null \
		&& echo "wrote $(TLS_DIR)/fullchain.pem and privkey.pem: self-signed for localhost and 127.0.0.1, 365 days"; fi

# Run the browser tests and copy the steps the docs show to docs/screenshots/ (needs Chromium).
screenshots: $(VENV)/.client-installed
	UPDATE_SCREENSHOTS=1 $(PY) -m devtools.stack test tests/adminui/test_adminui_browser.py $(ARGS)

# The admin's code editor (CodeMirror 6) as one committed static file; needs node and npm,
# only when adminui/frontend changes. `npm ci` installs exactly package-lock.json.
ui-assets:
	cd adminui/frontend && npm ci --no-audit --no-fund && npm run build
