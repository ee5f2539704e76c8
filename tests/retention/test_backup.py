"""A restore that has been tried (docs/operations.md, "Backup and restore"): a populated
registry is dumped with pg_dump (custom format), restored with pg_restore into a fresh
database, and the restored registry is checked: every version's bytes against its content
hash, every label's target and history as they were, and sessions resume: a session started
before the dump fetches the same bytes from a server on the restored database, and can end."""

import hashlib
import subprocess
import urllib.request
import uuid

import psycopg
import pytest
from django.db import connection

from devtools.pgtools import client_for
from tests.conftest import content, make_api
from tests.live import database_url, web_server

pytestmark = pytest.mark.django_db(transaction=True)


def _conninfo(database: str) -> str:
    s = connection.settings_dict
    parts = {"dbname": database, "user": s["USER"], "host": s["HOST"], "port": s["PORT"], "password": s["PASSWORD"]}
    return " ".join(f"{key}='{value}'" for key, value in parts.items() if value)


def _snapshot(conninfo: str) -> dict[str, list[tuple]]:
    """What must come back exactly: versions, labels, their history, sessions, the audit log."""
    queries = {
        "versions": "SELECT b.name, v.number, v.content_hash, v.state, v.canonical FROM registry_bundleversion v "
        "JOIN registry_bundle b ON b.id = v.bundle_id ORDER BY b.name, v.number",
        "labels": "SELECT b.name, l.name, v.number, l.targets::text, l.revision, l.protected, l.compatibility "
        "FROM registry_label l JOIN registry_bundle b ON b.id = l.bundle_id "
        "JOIN registry_bundleversion v ON v.id = l.version_id ORDER BY b.name, l.name",
        "label history": "SELECT history_id, name, version_id, previous_version_id, history_date, "
        "history_change_reason, history_type, targets::text FROM registry_historicallabel ORDER BY history_id",
        "sessions": "SELECT id, version_id, status, label, expires_at FROM sessions_app_session ORDER BY id",
        "audit": "SELECT id, action, target, reason FROM audit_auditevent ORDER BY id",
    }
    with psycopg.connect(conninfo) as conn:
        return {name: conn.execute(sql).fetchall() for name, sql in queries.items()}


def test_a_dump_restores_to_the_same_bytes_labels_history_and_sessions(ops, tmp_path):
    # A registry with some history: three versions, a label moved and rolled back, a split.
    api = ops
    assert api.post("/api/v1/bundles/", {"name": "backup", "description": "d"}).status_code == 201
    for n in range(1, 4):
        doc = {"content": content(f"Backup version {n}."), "message": f"v{n}"}
        assert api.post("/api/v1/bundles/backup/versions/", doc).status_code == 201
    for n in (1, 2, 3):
        body = {"version": n, "reason": f"to {n}", "allow_breaking": True}
        assert api.put("/api/v1/bundles/backup/labels/production/", body).status_code in (200, 201)
    rollback = {"to_version": 2, "reason": "back to 2"}
    assert api.post("/api/v1/bundles/backup/labels/production/rollback/", rollback).status_code == 200
    split = {"targets": [{"version": 2, "weight": 90}, {"version": 3, "weight": 10}], "reason": "canary"}
    assert api.put("/api/v1/bundles/backup/labels/canary/", split).status_code in (200, 201)
    agent = make_api("agent", "backup-agent")
    live = agent.post("/api/v1/sessions/", {"bundle": "backup"}).json()["id"]
    pinned = agent.post("/api/v1/sessions/", {"bundle": "backup", "version": 3}).json()["id"]
    ended = agent.post("/api/v1/sessions/", {"bundle": "backup"}).json()["id"]
    assert agent.post(f"/api/v1/sessions/{ended}/end/").status_code == 200
    before = {sid: agent.get(f"/api/v1/sessions/{sid}/bundle/").content for sid in (live, pinned)}

    source = connection.settings_dict["NAME"]
    expected = _snapshot(_conninfo(source))
    assert len(expected["versions"]) == 3 and len(expected["label history"]) >= 5

    with psycopg.connect(_conninfo(source)) as conn:
        server_major = conn.info.server_version // 10000
    dump = tmp_path / "registry.dump"
    subprocess.run(
        [
            str(client_for("pg_dump", server_major)),
            "--format=custom",
            "--no-owner",
            f"--file={dump}",
            f"--dbname={_conninfo(source)}",
        ],
        check=True,
        capture_output=True,
    )
    restored = f"restore_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_conninfo("postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{restored}"')
    try:
        out = subprocess.run(
            [
                str(client_for("pg_restore", server_major)),
                "--exit-on-error",
                "--no-owner",
                f"--dbname={_conninfo(restored)}",
                str(dump),
            ],
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr[-3000:]

        got = _snapshot(_conninfo(restored))
        assert got == expected
        for name, number, digest, _state, canonical in got["versions"]:
            assert hashlib.sha256(bytes(canonical)).hexdigest() == digest, (name, number)

        # Sessions resume on a server that only knows the restored database.
        url = database_url().rsplit("/", 1)[0] + "/" + restored
        with web_server(env={"DATABASE_URL": url}) as base:

            def call(method: str, path: str) -> tuple[int, bytes]:
                request = urllib.request.Request(base + path, method=method, data=b"" if method == "POST" else None)
                request.add_header("Authorization", f"Bearer {agent.secret}")
                try:
                    with urllib.request.urlopen(request, timeout=10) as response:
                        return response.status, response.read()
                except urllib.error.HTTPError as exc:
                    return exc.code, exc.read()

            for sid, body in before.items():
                assert call("GET", f"/api/v1/sessions/{sid}/bundle/") == (200, body)
                assert call("POST", f"/api/v1/sessions/{sid}/heartbeat/")[0] == 200
            assert call("GET", f"/api/v1/sessions/{ended}/bundle/")[0] == 410
            assert call("POST", f"/api/v1/sessions/{live}/end/")[0] == 200
    finally:
        with psycopg.connect(_conninfo("postgres"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{restored}" WITH (FORCE)')
