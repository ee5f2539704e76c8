"""A rolling upgrade from the previous release (deploy/previous-release), the way
docs/operations.md's runbook does it, against a scratch database of its own:

1. the previous release's code (`git archive` of that commit) creates its schema and serves
   traffic: sessions started, fetched, heartbeaten and ended, versions published, labels moved;
2. this release's `manage.py migrate` runs while that traffic goes on (expand);
3. this release's web server starts beside the old one, and sessions cross between them;
4. the old server stops.

Not one of the old or the new code's calls may fail. Also: every migration after the previous
release passes the static rule (no NOT NULL column without a database default), and `migrate`
waits only a moment for a lock that a long transaction holds."""

import http.client
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import psycopg
import pytest
import redis
from django.conf import settings
from django.db import connection, migrations, models
from django.db.migrations.loader import MigrationLoader

from devtools.stack import free_port
from tests.migration_safety import ROOT, migrations_after, previous_release, unsafe_operations

PY = sys.executable
# tarfile's "data" filter (3.11.4 and later; Debian 12's Python is 3.11.2): our own git archive.
SAFE_EXTRACT: dict = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
# The queues the previous release's web nodes send to (8478c51: Celery's default queue only).
# When deploy/previous-release moves, this moves with it (docs/operations.md, the runbook).
OLD_QUEUES = ("celery",)


# --- the static rule ------------------------------------------------------------------------


def test_no_migration_after_the_previous_release_adds_a_not_null_column_without_db_default():
    after = migrations_after(previous_release())
    problems = [problem for migration in after for problem in unsafe_operations(migration)]
    assert problems == [], "\n".join(problems)


def test_the_rule_refuses_a_python_default_and_accepts_db_default_or_null():
    def migration(*operations: Any) -> migrations.Migration:
        m = migrations.Migration("0099_x", "registry")
        m.operations = list(operations)
        return m

    unsafe = migration(migrations.AddField("label", "weight", models.PositiveIntegerField(default=1)))
    assert len(unsafe_operations(unsafe)) == 1
    safe = migration(
        migrations.AddField("label", "weight", models.PositiveIntegerField(db_default=1)),
        migrations.AddField("label", "note", models.TextField(null=True)),
    )
    assert unsafe_operations(safe) == []
    # registry 0007 (before the previous release) did just that: the rule would have refused it.
    old = MigrationLoader(None, ignore_no_migrations=True).disk_migrations[("registry", "0007_label_targets_releases")]
    assert any("label.revision" in problem for problem in unsafe_operations(old))


# --- a scratch database and the previous release's code -----------------------------------


def _server_url(database: str) -> str:
    s = connection.settings_dict
    host = s["HOST"] or ""
    host = quote(host, safe="") if host.startswith("/") else host
    port = f":{s['PORT']}" if s["PORT"] else ""
    password = f":{quote(s['PASSWORD'], safe='')}" if s["PASSWORD"] else ""
    return f"postgres://{quote(s['USER'] or '', safe='')}{password}@{host}{port}/{database}"


@pytest.fixture(scope="module")
def scratch_database() -> Iterator[str]:
    name = f"upgrade_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_server_url("postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _server_url(name)
    finally:
        with psycopg.connect(_server_url("postgres"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def previous_code() -> Iterator[Path]:
    """The previous release's tree, extracted from git (CI runs in a full clone)."""
    where = Path(tempfile.mkdtemp(prefix="registry-previous-"))
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", previous_release()], capture_output=True, check=False
    )
    if archive.returncode:
        pytest.fail(f"git archive of the previous release failed: {archive.stderr.decode()[-500:]}")
    tar_path = where / "previous.tar"
    tar_path.write_bytes(archive.stdout)
    with tarfile.open(tar_path) as tar:
        tar.extractall(where / "tree", **SAFE_EXTRACT)
    try:
        yield where / "tree"
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _environment(database_url: str, tree: Path, scratch: Path) -> dict[str, str]:
    redis = urlsplit(os.environ["REDIS_URL"])
    # Its own Redis database: the old code's enqueued drains must not reach the suite's worker,
    # which serves the test database.
    redis_url = redis._replace(path="/13").geturl()
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith(("CELERY_", "PROMETHEUS_", "PYTEST"))
    }
    environment.update(
        {
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "DJANGO_SETTINGS_MODULE": "config.test_settings",
            "API_THROTTLE_READ": "1000000/m",
            "API_THROTTLE_WRITE": "1000000/m",
            "PROMETHEUS_MULTIPROC_DIR": str(scratch),
            "WEB_CONCURRENCY": "1",
            # The old tree's own client package, ahead of this checkout's editable install.
            "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'client'}",
        }
    )
    return environment


def _manage(tree: Path, env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([PY, "manage.py", *args], cwd=tree, env=env, capture_output=True, text=True, timeout=180)
    if check and out.returncode:
        pytest.fail(f"manage.py {' '.join(args)} in {tree} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return out


class Server:
    def __init__(self, tree: Path, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.log = log
        # Each tree with its own server command: the previous release serves from config.serve,
        # this one from edge.serve.
        module = "edge.serve" if (tree / "edge" / "serve.py").exists() else "config.serve"
        self.proc = subprocess.Popen(
            [PY, "-m", module, "--port", str(self.port), "--workers", "1"],
            cwd=tree,
            env=env,
            stdout=open(log, "ab"),  # noqa: SIM115 (the child's for its life)
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"the server in {tree} exited:\n{log.read_text(errors='replace')[-3000:]}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/healthz", headers={"Host": "127.0.0.1"})
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the server in {tree} did not start:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)  # a graceful stop, as a rolling deploy does
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()


class Client:
    """One keep-alive connection to one server, never retrying (a failure is a failure)."""

    def __init__(self, port: int, key: str) -> None:
        self.port, self.key = port, key
        self.conn: http.client.HTTPConnection | None = None

    def call(self, method: str, path: str, doc: Any = None) -> tuple[int, Any]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        headers = {"Authorization": f"Bearer {self.key}", "Host": "127.0.0.1", "Content-Type": "application/json"}
        try:
            self.conn.request(method, path, body=None if doc is None else json.dumps(doc), headers=headers)
            response = self.conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            self.conn.close()
            self.conn = None
            return 0, repr(exc)
        try:
            return response.status, json.loads(data) if data else None
        except ValueError:
            return response.status, data[:200]


class Traffic:
    """Agents and publishers on whichever servers are up: each session is started on one
    server and fetched, heartbeaten and ended on the next (so, in step 3, across versions)."""

    def __init__(self, key: str, bundle: str) -> None:
        self.key, self.bundle = key, bundle
        self.ports: list[int] = []
        self.failures: list[str] = []
        self.done: Counter[str] = Counter()
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()

    def _expect(self, what: str, answer: tuple[int, Any], *statuses: int) -> Any:
        status, body = answer
        with self.lock:
            if status in statuses:
                self.done[what] += 1
            else:
                self.failures.append(f"{what}: {status} {str(body)[:300]}")
        return body if status in statuses else None

    def _loop(self, worker: int) -> None:
        clients: dict[int, Client] = {}
        turn = 0
        while not self.stopping.is_set():
            ports = list(self.ports)
            first, second = ports[turn % len(ports)], ports[(turn + 1) % len(ports)]
            a = clients.setdefault(first, Client(first, self.key))
            b = clients.setdefault(second, Client(second, self.key))
            turn += 1
            session = self._expect("start", a.call("POST", "/api/v1/sessions/", {"bundle": self.bundle}), 201)
            if session:
                sid = session["id"]
                self._expect("fetch", b.call("GET", f"/api/v1/sessions/{sid}/bundle/"), 200)
                self._expect("heartbeat", a.call("POST", f"/api/v1/sessions/{sid}/heartbeat/"), 200)
                self._expect("fetch", a.call("GET", f"/api/v1/sessions/{sid}/bundle/"), 200)
                self._expect("end", b.call("POST", f"/api/v1/sessions/{sid}/end/"), 200)
            if worker == 0 and turn % 5 == 0:  # the release path: publish, move the label, read
                path = f"/api/v1/bundles/{self.bundle}"
                doc = {"content": _content(f"turn {turn}"), "message": f"turn {turn}"}
                version = self._expect("publish", a.call("POST", f"{path}/versions/", doc), 201)
                if version:
                    move = {"version": version["number"], "reason": "rolling upgrade"}
                    self._expect("label move", b.call("PUT", f"{path}/labels/production/", move), 200)
                self._expect("reads", a.call("GET", f"{path}/"), 200)
                self._expect("reads", b.call("GET", f"{path}/labels/production/history/"), 200)
                self._expect("reads", a.call("GET", f"{path}/versions/1/"), 200)

    def start(self, threads: int = 2) -> None:
        for n in range(threads):
            thread = threading.Thread(target=self._loop, args=(n,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(60)

    def total(self) -> int:
        with self.lock:
            return sum(self.done.values())


def _content(tag: str) -> dict[str, Any]:
    return {
        "system_prompt": f"Upgrade bundle, {tag}: refund orders with `process_refund`.",
        "tools": [
            {
                "name": "process_refund",
                "description": "Refund an order.",
                "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}},
            }
        ],
    }


def _wait_for_more(traffic: Traffic, calls: int, seconds: float = 20) -> None:
    target = traffic.total() + calls
    deadline = time.monotonic() + seconds
    while traffic.total() < target and time.monotonic() < deadline and not traffic.failures:
        time.sleep(0.05)


def test_a_rolling_upgrade_from_the_previous_release_fails_no_call(scratch_database, previous_code, tmp_path):
    old_env = _environment(scratch_database, previous_code, tmp_path)
    new_env = {**old_env, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'client'}"}
    redis.Redis.from_url(old_env["REDIS_URL"]).flushdb()  # ours alone: no task left by an earlier run
    # The previous release's schema, made by its own migrations.
    _manage(previous_code, old_env, "migrate", "--no-input", "-v", "0")
    key = _manage(previous_code, old_env, "create_api_key", "--name", "upgrade-ops", "--role", "ops")
    secret = key.stdout.strip().splitlines()[-1]
    old = Server(previous_code, old_env, tmp_path / "old.log")
    servers = [old]
    try:
        setup = Client(old.port, secret)
        assert setup.call("POST", "/api/v1/bundles/", {"name": "upgrade", "description": "rolling"})[0] == 201
        doc = {"content": _content("v1"), "message": "v1"}
        assert setup.call("POST", "/api/v1/bundles/upgrade/versions/", doc)[0] == 201
        move = {"version": 1, "reason": "first"}
        assert setup.call("PUT", "/api/v1/bundles/upgrade/labels/production/", move)[0] in (200, 201)
        traffic = Traffic(secret, "upgrade")
        traffic.ports = [old.port]
        traffic.start()
        _wait_for_more(traffic, 30)

        # 1. Expand: this release's migrations while the old code serves.
        before = traffic.total()
        began = time.monotonic()
        migrate = subprocess.Popen(
            [PY, "manage.py", "migrate", "--no-input"],
            cwd=ROOT,
            env=new_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        output, _ = migrate.communicate(timeout=180)
        migrate_seconds = time.monotonic() - began
        assert migrate.returncode == 0, output[-3000:]
        _wait_for_more(traffic, 30)
        during = traffic.total() - before

        # 2. Roll the web servers: the new one joins, sessions cross between the two.
        new = Server(ROOT, new_env, tmp_path / "new.log")
        servers.append(new)
        traffic.ports = [old.port, new.port]
        _wait_for_more(traffic, 60)
        traffic.ports = [new.port]
        time.sleep(0.5)  # calls already on their way to the old server finish there
        old.stop()
        _wait_for_more(traffic, 30)
        traffic.stop()
    finally:
        for server in servers:
            server.stop()
    print(f"migrate took {migrate_seconds:.1f} s; calls {dict(traffic.done)}")
    assert traffic.failures == [], traffic.failures[:20]
    assert during >= 30, f"only {during} calls while migrating and after: the old code was not exercised"
    assert traffic.done["end"] >= 20 and traffic.done["label move"] >= 2, traffic.done

    # 3. Roll the workers: this release's worker, consuming the previous release's queue too
    # (the runbook's transition), runs every task either release enqueued: the old code's
    # messages must be ones the new tasks accept.
    broker = redis.Redis.from_url(old_env["REDIS_URL"])
    queues = sorted({*OLD_QUEUES, settings.LIFECYCLE_QUEUE})
    assert broker.llen("celery") > 0, "the previous release enqueued nothing: the check below would prove nothing"
    log = tmp_path / "worker.log"
    worker = subprocess.Popen(
        [
            PY,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "-Q",
            ",".join(queues),
            "-c",
            "1",
            "-l",
            "info",
            "--without-mingle",
            "--without-gossip",
            "-n",
            f"upgrade-{uuid.uuid4().hex[:6]}@%h",
        ],
        cwd=ROOT,
        env=new_env,
        stdout=open(log, "ab"),  # noqa: SIM115 (the child's for its life)
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while sum(broker.llen(queue) for queue in queues) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1)  # the last task finishes (acks late)
    finally:
        os.killpg(worker.pid, 15)
        worker.wait(30)
    text = log.read_text(errors="replace")
    assert sum(broker.llen(queue) for queue in queues) == 0, text[-3000:]
    assert "Traceback" not in text and "ERROR" not in text, text[-3000:]
    with psycopg.connect(scratch_database) as conn:
        [(stuck,)] = conn.execute(
            "SELECT count(*) FROM registry_bundleversion v WHERE v.state = 'draining' AND NOT EXISTS "
            "(SELECT 1 FROM sessions_app_session s WHERE s.version_id = v.id AND s.status = 'active')"
        ).fetchall()
    assert stuck == 0, f"{stuck} versions still draining with no session: their drain tasks did not run"


# --- lock_timeout ---------------------------------------------------------------------------


LOCKTEST_SETTINGS = """
from config.test_settings import *  # noqa: F403
INSTALLED_APPS = [*INSTALLED_APPS, "locktest"]  # noqa: F405
"""

LOCKTEST_0001 = """
from django.db import migrations, models
class Migration(migrations.Migration):
    operations = [migrations.CreateModel("Thing", [("id", models.BigAutoField(primary_key=True))])]
"""

LOCKTEST_0002 = """
from django.db import migrations, models
class Migration(migrations.Migration):
    dependencies = [("locktest", "0001_initial")]
    operations = [migrations.AddField("thing", "note", models.TextField(null=True))]
"""


def test_migrate_waits_only_a_moment_for_a_lock_and_tries_again(scratch_database, tmp_path):
    """A long transaction holds a table that a migration must ALTER. Unbounded, the ALTER waits
    for it, and every session's query on that table queues behind the ALTER; bounded, the
    migration gives up after MIGRATION_LOCK_TIMEOUT_MS, the queue moves, and the next attempt
    succeeds once the transaction is gone."""
    app = tmp_path / "locktest"
    (app / "migrations").mkdir(parents=True)
    (app / "__init__.py").write_text("")
    (app / "migrations" / "__init__.py").write_text("")
    (app / "migrations" / "0001_initial.py").write_text(textwrap.dedent(LOCKTEST_0001))
    (app / "migrations" / "0002_note.py").write_text(textwrap.dedent(LOCKTEST_0002))
    (tmp_path / "locktest_settings.py").write_text(textwrap.dedent(LOCKTEST_SETTINGS))
    env = {
        **_environment(scratch_database, ROOT, tmp_path),
        "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}{os.pathsep}{ROOT / 'client'}",
        "DJANGO_SETTINGS_MODULE": "locktest_settings",
        "MIGRATION_LOCK_TIMEOUT_MS": "300",
    }
    _manage(ROOT, env, "migrate", "locktest", "0001", "--no-input", "-v", "0")

    with psycopg.connect(scratch_database) as holder, psycopg.connect(scratch_database, autocommit=True) as other:
        holder.execute("SELECT * FROM locktest_thing")  # an open transaction: ACCESS SHARE, held
        waits: list[float] = []
        stop = threading.Event()

        def sessions() -> None:  # a session's query on the same table, over and over
            while not stop.is_set():
                began = time.monotonic()
                other.execute("SELECT count(*) FROM locktest_thing")
                waits.append(time.monotonic() - began)
                time.sleep(0.02)

        reader = threading.Thread(target=sessions, daemon=True)
        reader.start()
        errors = tmp_path / "migrate.err"
        retrying = subprocess.Popen(
            [PY, "manage.py", "migrate", "locktest", "--no-input"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(errors, "wb"),  # noqa: SIM115 (the child's for its life)
        )
        try:
            # Two attempts give up while the transaction holds the table; sessions never wait long.
            deadline = time.monotonic() + 90
            while errors.read_text().count("waited too long for a lock") < 2:
                assert retrying.poll() is None, errors.read_text()[-2000:]
                assert time.monotonic() < deadline, "the migration did not give up on the lock"
                time.sleep(0.05)
            stop.set()
            reader.join(10)
            assert "lock timeout" in errors.read_text(), errors.read_text()[-2000:]
            assert waits and max(waits) < 1.0, f"a session waited {max(waits):.2f} s behind the migration"
            # Released while the command pauses between attempts: the next attempt applies it.
            holder.rollback()
            assert retrying.wait(60) == 0, errors.read_text()[-2000:]
        finally:
            if retrying.poll() is None:
                retrying.kill()
    with psycopg.connect(scratch_database) as check:
        columns = check.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'locktest_thing'"
        ).fetchall()
    assert ("note",) in columns
