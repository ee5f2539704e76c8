"""The sessions sweep behind a real PgBouncer in transaction mode (issue 36, carried over):
docs/operations.md recommends one between many web processes and PostgreSQL. PgBouncer is
started here (pgbouncer 1.18 from the distribution; skipped, saying why, when it is not
installed) in front of the test database, and the sweep runs through it on Django's connection.

The old sweep took a session-level advisory lock in one statement and released it in another:
in transaction mode the two may reach different server connections, the unlock then fails and
the lock stays held by a pooled server connection, so every later sweep that lands on another
server connection finds it taken and does nothing, for as long as that connection lives."""

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from sessions_app.sweep import sessions_sweep

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not shutil.which("pgbouncer"), reason="needs pgbouncer (apt-get install pgbouncer)"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_user() -> list[str]:
    """PgBouncer refuses to run as root; as root (a CI container), it switches to this user."""
    if os.geteuid() != 0:
        return []
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return ["-u", name]
    pytest.skip("running as root with no user for pgbouncer to switch to")


@pytest.fixture
def pgbouncer():
    # A directory the switched-to user can read and write (pytest's tmp_path is root's alone).
    tmp_path = Path(tempfile.mkdtemp(prefix="sec-low-pgbouncer-"))
    tmp_path.chmod(0o777)
    settings = connection.settings_dict
    if (settings["HOST"] or "").startswith("/") and os.geteuid() == 0:
        # The embedded server (make test without DATABASE_URL) listens on a socket in root's
        # checkout, which the user pgbouncer switches to cannot reach; CI's run against the
        # machine's PostgreSQL (127.0.0.1) runs this test.
        pytest.skip("the database is a socket in a directory pgbouncer's user cannot enter")
    port, name = _free_port(), settings["NAME"]
    user = settings["USER"] or "postgres"
    (tmp_path / "users.txt").write_text(f'"{user}" ""\n')
    (tmp_path / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"{name} = host={settings['HOST'] or '127.0.0.1'} port={settings['PORT'] or 5432} dbname={name}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {tmp_path / 'users.txt'}\n"
        "pool_mode = transaction\ndefault_pool_size = 2\nmin_pool_size = 0\n"
        "server_reset_query =\nignore_startup_parameters = extra_float_digits,options\n"
        f"logfile = {tmp_path / 'pgbouncer.log'}\n"
    )
    for written in tmp_path.iterdir():
        written.chmod(0o644)
    process = subprocess.Popen(
        ["pgbouncer", *_as_user(), str(tmp_path / "pgbouncer.ini")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    url = f"postgresql://{user}@127.0.0.1:{port}/{name}"
    deadline = time.monotonic() + 10
    while True:
        try:
            psycopg.connect(url, connect_timeout=1).close()
            break
        except psycopg.OperationalError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                pytest.fail("pgbouncer did not start: " + (tmp_path / "pgbouncer.log").read_text()[-2000:])
            time.sleep(0.1)
    saved = dict(settings), dict(settings["OPTIONS"])
    connection.close()
    settings["HOST"], settings["PORT"] = "127.0.0.1", port
    # PgBouncer 1.18 in transaction mode carries no prepared statements (DB_PREPARED_STATEMENTS=0)
    # and no startup `options` (statement_timeout is the server's then).
    settings["OPTIONS"] = {k: v for k, v in settings["OPTIONS"].items() if k not in ("options",)}
    settings["OPTIONS"]["prepare_threshold"] = None
    try:
        yield url
    finally:
        connection.close()
        settings.clear()
        settings.update(saved[0])
        settings["OPTIONS"] = saved[1]
        process.terminate()
        process.wait(10)
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_the_sweep_keeps_running_behind_pgbouncer_in_transaction_mode(pgbouncer, bundle, production, monkeypatch):
    from sessions_app import services

    other = psycopg.connect(pgbouncer)
    expire = services.session_expire_lapsed

    def meanwhile(**kwargs):
        # Mid-sweep, another client starts a transaction: it gets the idle server connection
        # the sweep's first statement used, and the sweep's next statements go to the other one.
        if other.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            other.execute("SELECT 1")
        return expire(**kwargs)

    monkeypatch.setattr(services, "session_expire_lapsed", meanwhile)
    try:
        assert sessions_sweep() == {"expired": 0, "drained": 0}
        # The other client still holds that server connection: this sweep runs on the second one.
        assert sessions_sweep() == {"expired": 0, "drained": 0}, "the sweep found its own lock still taken"
    finally:
        other.rollback()
        other.close()
