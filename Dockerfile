# Production image for the prompt registry: the same image runs the web server (default CMD),
# the Celery worker, beat and the one-shot migration; docker-compose.yml sets the command.
# The base is pinned to a patch release (and Debian release), so that a rebuild gets the same
# interpreter; move it on deliberately, like a lock file entry.
FROM python:3.11.14-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# A fixed numeric uid, so that an orchestrator's runAsNonRoot can check it. The code and the
# collected static files stay owned by root: the app reads them and never writes there.
RUN useradd --system --uid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin app

# Dependencies first, so that a code change does not reinstall them: the runtime set only
# (requirements.txt; tests and tools are in requirements-dev.txt, which the image never
# sees), locked with hashes, which pip checks. On x86_64 every pinned dependency ships a
# manylinux wheel, so the image needs no compiler.
COPY requirements.txt ./
RUN pip install --require-hashes -r requirements.txt

# The application code only: .dockerignore keeps out tests, benchmarks, docs (and their
# screenshots), the development stack and local state.
COPY . .

# Settings read DATABASE_URL, REDIS_URL and DJANGO_SECRET_KEY at import and fail without them.
# collectstatic connects to neither, so dummy values are given to this one step only; they
# are not baked into the image (no ENV), and the real ones come from the environment at run time.
RUN DJANGO_SECRET_KEY=collectstatic-only-this-is-not-a-secret-but-it-is-long-enough \
    DATABASE_URL=postgres://collectstatic@localhost/collectstatic \
    REDIS_URL=redis://localhost:6379/0 \
    python manage.py collectstatic --no-input -v 0

# Prometheus counters of the web server's worker processes, added up by /metrics; a fresh
# container starts with it empty. (The worker's container has its own: see docs/releases.md.)
ENV PROMETHEUS_MULTIPROC_DIR=/tmp/prometheus
RUN mkdir -m 1777 /tmp/prometheus

USER 10001:10001

EXPOSE 8000

# granian serving the ASGI application (edge/serve.py): WEB_CONCURRENCY worker processes,
# WEB_THREADS threads each for Django and the fast lane.
CMD ["python", "-m", "edge.serve", "--host", "0.0.0.0", "--port", "8000", "--access-log"]
