"""Content-addressed export and import of bundles: `manage.py export_bundles` / `import_bundles`,
the REST endpoints, and `promptreg export` / `promptreg import-bundles`. A round trip into a
second, freshly migrated database gives the same hashes, labels and splits; a tampered object
is refused before anything is written; importing twice changes nothing the second time."""

import hashlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from django.db import connection
from promptreg.cli import main

from access.models import Role
from registry.canonical import canonicalise
from registry.models import Bundle, BundleVersion, Label
from tests.conftest import content, make_api
from tests.live import WebServer, registry_server  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]


def _url(database: str) -> str:
    s = connection.settings_dict
    host = quote(s["HOST"], safe="") if (s["HOST"] or "").startswith("/") else s["HOST"]
    port = f":{s['PORT']}" if s["PORT"] else ""
    password = f":{quote(s['PASSWORD'], safe='')}" if s["PASSWORD"] else ""
    return f"postgres://{quote(s['USER'] or '', safe='')}{password}@{host}{port}/{database}"


def _manage(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "config.test_settings"}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def second_registry(django_db_setup, django_db_blocker) -> Iterator[str]:
    """Another registry's database, migrated from nothing."""
    name = f"second_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_url("postgres"), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        out = _manage(_url(name), "migrate", "--no-input", "-v", "0")
        assert out.returncode == 0, out.stderr[-3000:]
        yield _url(name)
    finally:
        with psycopg.connect(_url("postgres"), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _populate(ops, prefix: str = "") -> None:
    """Two bundles: three versions, production moved and a canary split; a revoked version."""
    refunds, search = f"/api/v1/bundles/{prefix}refunds", f"/api/v1/bundles/{prefix}search"
    for name in ("refunds", "search"):
        body = {"name": prefix + name, "description": f"{name} agent"}
        assert ops.post("/api/v1/bundles/", body).status_code == 201
    for n in range(1, 4):
        doc = {"content": content(f"Refunds {n}, naïve café ✓."), "message": f"v{n}"}
        assert ops.post(f"{refunds}/versions/", doc).status_code == 201
    assert ops.post(f"{search}/versions/", {"content": content("Search."), "message": "s1"}).status_code == 201
    assert ops.put(f"{refunds}/labels/production/", {"version": 2, "reason": "r"}).status_code == 201
    split = {"targets": [{"version": 2, "weight": 80}, {"version": 3, "weight": 20}], "reason": "canary"}
    assert ops.put(f"{refunds}/labels/canary/", split).status_code == 201
    assert ops.post(f"{refunds}/versions/1/revoke/", {"reason": "bad"}).status_code == 200
    assert ops.put(f"{search}/labels/staging/", {"version": 1, "reason": "r"}).status_code == 201


def _state(database_url: str) -> dict[str, list[tuple]]:
    with psycopg.connect(database_url) as conn:
        return {
            "versions": conn.execute(
                "SELECT b.name, v.number, v.content_hash, v.canonical, v.state = 'revoked' "
                "FROM registry_bundleversion v JOIN registry_bundle b ON b.id = v.bundle_id ORDER BY 1, 2"
            ).fetchall(),
            "labels": conn.execute(
                "SELECT b.name, l.name, v.content_hash, l.compatibility, "
                "(SELECT array_agg((t->>'number') || ':' || (t->>'weight') ORDER BY t->>'number') "
                " FROM jsonb_array_elements(l.targets) t) "
                "FROM registry_label l JOIN registry_bundle b ON b.id = l.bundle_id "
                "JOIN registry_bundleversion v ON v.id = l.version_id ORDER BY 1, 2"
            ).fetchall(),
            "bundles": conn.execute("SELECT name, description, when_to_use FROM registry_bundle ORDER BY 1").fetchall(),
        }


def _counts(database_url: str) -> tuple[int, ...]:
    with psycopg.connect(database_url) as conn:
        return tuple(
            conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # type: ignore[index]
            for table in ("registry_bundleversion", "registry_historicallabel", "audit_auditevent")
        )


def test_manage_py_round_trip_into_a_second_database_idempotent_and_refusing_tampering(ops, second_registry, tmp_path):
    _populate(ops)
    here = _url(connection.settings_dict["NAME"])
    out = _manage(here, "export_bundles", str(tmp_path / "export"))
    assert out.returncode == 0, out.stderr
    objects = sorted((tmp_path / "export" / "objects").iterdir())
    assert len(objects) == 4
    for path in objects:  # each file is its canonical bytes, named by their hash
        assert hashlib.sha256(path.read_bytes()).hexdigest() == path.stem
    document = json.loads((tmp_path / "export" / "bundles" / "refunds.json").read_text())
    assert [v["number"] for v in document["versions"]] == [1, 2, 3]

    # A tampered copy first: refused, and the second registry is left as it was (empty).
    tampered = tmp_path / "tampered"
    subprocess.run(["cp", "-r", str(tmp_path / "export"), str(tampered)], check=True)
    victim = tampered / "objects" / f"{document['versions'][2]['content_hash']}.json"
    victim.write_bytes(victim.read_bytes().replace(b"Refunds 3", b"Refunds 4"))
    out = _manage(second_registry, "import_bundles", str(tampered))
    assert out.returncode != 0 and "SHA-256" in out.stderr, out.stderr
    assert _counts(second_registry)[0] == 0

    out = _manage(second_registry, "import_bundles", str(tmp_path / "export"))
    assert out.returncode == 0, out.stderr
    assert _state(second_registry) == _state(here)
    after_first = _counts(second_registry)
    out = _manage(second_registry, "import_bundles", str(tmp_path / "export"))
    assert out.returncode == 0, out.stderr
    assert "0 versions published" in out.stdout and "labels moved: -" in out.stdout
    assert _counts(second_registry) == after_first  # no version, history row or audit event added


def test_an_import_with_a_bad_object_writes_nothing_and_answers_400(ops):
    _populate(ops)
    document = ops.get("/api/v1/bundles/refunds/export/").json()
    document["name"] = "copy"
    raw = {
        v["content_hash"]: ops.get(f"/api/v1/bundles/refunds/versions/{v['number']}/canonical/")
        for v in document["versions"]
    }
    objects = {digest: response.content.decode() for digest, response in raw.items()}
    assert all(hashlib.sha256(r.content).hexdigest() == d and r["ETag"] == f'"{d}"' for d, r in raw.items())
    last = document["versions"][-1]["content_hash"]

    bad = {**objects, last: objects[last].replace("Refunds 3", "Refunds 4")}
    response = ops.post("/api/v1/bundles/copy/import/", {"bundle": document, "objects": bad})
    assert response.status_code == 400 and response.json()["error"]["details"]["content_hash"] == [last]
    # Right hash, but not canonical (this registry would store other bytes under another hash).
    spaced = json.dumps(json.loads(objects[last]), indent=1)
    digest = hashlib.sha256(spaced.encode()).hexdigest()
    doc2 = {**document, "versions": [{**document["versions"][-1], "content_hash": digest}], "labels": []}
    response = ops.post("/api/v1/bundles/copy/import/", {"bundle": doc2, "objects": {digest: spaced}})
    assert response.status_code == 400 and "canonical" in response.json()["error"]["message"]
    assert not Bundle.objects.filter(name="copy").exists()

    response = ops.post("/api/v1/bundles/copy/import/", {"bundle": document, "objects": objects})
    assert response.status_code == 200, response.json()
    first = response.json()
    assert first["bundle_created"] and first["versions_created"] == [1, 2, 3] and first["revoked"] == [1]
    copied = {v.number: v.content_hash for v in BundleVersion.objects.filter(bundle__name="copy")}
    assert copied == {v["number"]: v["content_hash"] for v in document["versions"]}
    assert Label.objects.get(bundle__name="copy", name="canary").targets[1]["weight"] == 20
    again = ops.post("/api/v1/bundles/copy/import/", {"bundle": document, "objects": {}}).json()
    assert again["versions_created"] == [] and again["versions_present"] == [1, 2, 3]
    assert sorted(again["labels_unchanged"]) == ["canary", "production"] and again["revoked"] == []


def _history(count: int) -> tuple[dict, dict[str, str]]:
    """A document of `count` versions with their canonical bytes (as an export gives them)."""
    versions, objects = [], {}
    for n in range(1, count + 1):
        _, data, digest = canonicalise(content(f"Long history {n}."))
        versions.append({"number": n, "content_hash": digest, "message": f"v{n}"})
        objects[digest] = data.decode()
    return {"format": "promptreg.bundle/1", "name": "long", "versions": versions, "labels": []}, objects


def test_one_import_call_publishes_at_most_100_new_versions(ops):
    # Issue 36: one call published up to 1,000 versions in one transaction (about 20 s).
    document, objects = _history(101)
    response = ops.post("/api/v1/bundles/long/import/", {"bundle": document, "objects": objects})
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "validation_error" and "at most 100" in error["details"]["bundle.versions"][0]
    assert not Bundle.objects.filter(name="long").exists()
    # In parts, as promptreg import-bundles sends them: 100, then the rest with the whole document.
    part = {**document, "versions": document["versions"][:100]}
    assert ops.post("/api/v1/bundles/long/import/", {"bundle": part, "objects": objects}).status_code == 200
    last = ops.post("/api/v1/bundles/long/import/", {"bundle": document, "objects": objects}).json()
    assert (last["versions_created"], len(last["versions_present"])) == ([101], 100)


MALFORMED = [
    {"bundle": "x"},
    {"bundle": {"format": "promptreg.bundle/1", "name": "copy", "versions": [{"content_hash": "zz"}]}},
    {"bundle": {"format": "promptreg.bundle/1", "name": "copy", "versions": "many"}},
    {"bundle": {"format": "promptreg.bundle/1", "name": "other"}},
    {"bundle": {"format": "promptreg.bundle/1", "name": "copy", "labels": [{"name": "p", "targets": [1]}]}},
    {
        "bundle": {
            "format": "promptreg.bundle/1",
            "name": "copy",
            "versions": [{"content_hash": "a" * 64, "number": 1, "message": "m"}],
        }
    },
    {"bundle": {"format": "promptreg.bundle/2", "name": "copy"}},
    {"bundle": {"format": "promptreg.bundle/1", "name": "copy"}, "objects": {"a": 5}},
    {"bundle": {"format": "promptreg.bundle/1", "name": "copy"}, "objects": {"not-a-hash": "{}"}},
    {
        "bundle": {
            "format": "promptreg.bundle/1",
            "name": "copy",
            "versions": [{"content_hash": "a" * 64, "number": True, "message": "m"}],
        }
    },
    {
        "bundle": {
            "format": "promptreg.bundle/1",
            "name": "copy",
            "versions": [{"content_hash": "a" * 64, "number": 1, "message": "m"}],
        },
        "objects": {"a" * 64: "{}"},
    },
    {
        "bundle": {
            "format": "promptreg.bundle/1",
            "name": "copy",
            "labels": [{"name": "production", "targets": [{"content_hash": "b" * 64, "weight": 100}]}],
        }
    },
    {"bundle": {"format": "promptreg.bundle/1", "name": "copy", "labels": [{"name": "Bad Name!", "targets": []}]}},
    {"bundle": {"format": "promptreg.bundle/1", "name": "copy", "description": 7}},
    {"bundle": {"format": "promptreg.bundle/1", "name": "copy"}, "surprise": 1},
]


def test_a_malformed_import_is_a_400_in_the_error_shape(ops):
    for body in MALFORMED:
        response = ops.post("/api/v1/bundles/copy/import/", body)
        assert response.status_code == 400, (body, response.content)
        assert set(response.json()["error"]) == {"code", "message", "details"}
    assert not Bundle.objects.filter(name="copy").exists()


def test_an_agent_may_export_but_not_import(ops, agent):
    _populate(ops)
    assert agent.get("/api/v1/bundles/refunds/export/").status_code == 200
    document = agent.get("/api/v1/bundles/refunds/export/").json()
    assert agent.post("/api/v1/bundles/refunds/import/", {"bundle": document}).status_code == 403


def test_the_cli_round_trip_into_a_second_registry(registry_server, second_registry, tmp_path, capsys):  # noqa: F811
    ops = make_api(Role.OPS, name="transfer-ops")
    _populate(ops, prefix="cli-")
    url = registry_server.url

    def cli(server: str, key: str, *argv: str) -> tuple[int, str, str]:
        status = main(["--url", server, "--api-key", key, *argv])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    status, out, err = cli(url, ops.secret, "export", str(tmp_path / "out"))
    assert status == 0, err
    assert "cli-refunds: 3 versions (3 fetched)" in out
    status, out, _ = cli(url, ops.secret, "export", str(tmp_path / "out"))  # content-addressed: nothing new
    assert "cli-refunds: 3 versions (0 fetched)" in out

    key = _manage(second_registry, "create_api_key", "--name", "second-ops", "--role", "ops")
    secret = key.stdout.strip().splitlines()[-1]
    second = WebServer(env={"DATABASE_URL": second_registry})
    second.start()
    try:
        tampered = tmp_path / "tampered"
        subprocess.run(["cp", "-r", str(tmp_path / "out"), str(tampered)], check=True)
        victim = next((tampered / "objects").iterdir())
        victim.write_bytes(victim.read_bytes() + b" ")
        before = _counts(second_registry)
        status, _, err = cli(second.url, secret, "import-bundles", str(tampered))
        assert status == 1 and "nothing was imported" in err

        assert _counts(second_registry) == before
        status, out, err = cli(second.url, secret, "import-bundles", str(tmp_path / "out"))
        assert status == 0, err
        assert "cli-refunds: 3 versions published" in out
        here = _url(connection.settings_dict["NAME"])
        mine, theirs = _state(here), _state(second_registry)
        for kind in ("versions", "labels", "bundles"):  # the second may hold the other test's bundles too
            assert [row for row in theirs[kind] if row[0].startswith("cli-")] == mine[kind]
        status, out, _ = cli(second.url, secret, "--json", "import-bundles", str(tmp_path / "out"))
        assert status == 0 and all(r["versions_published"] == 0 for r in json.loads(out)["bundles"])
        assert all(r["labels_moved"] == [] for r in json.loads(out)["bundles"])
    finally:
        second.stop()
