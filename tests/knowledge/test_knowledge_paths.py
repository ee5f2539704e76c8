"""Knowledge paths that look the same are one path (issue 18): every path written or looked up
is NFC, and bidi controls and other invisible characters are refused, over REST, in the
admin's service and in the model's file tools; paths stored before are renamed by a migration."""

import importlib
import unicodedata

import pytest
from django.apps import apps
from django.utils import timezone

from access.models import Role
from core.limits import invisible_characters
from knowledge.models import FileRead, Pack, PackFile
from sessions_app.models import Session
from tests.conftest import content, make_api

NFC = unicodedata.normalize("NFC", "café/menü.md")
NFD = unicodedata.normalize("NFD", "café/menü.md")
assert NFC != NFD


@pytest.fixture
def ops(db):
    api = make_api(Role.OPS, name="paths-ops")
    assert api.post("/api/v1/knowledge/", {"name": "menu"}).status_code == 201
    return api


def put(api, path: str, text: str):
    return api.put(f"/api/v1/knowledge/menu/files/{path}", {"content": text})


def manifest(api) -> list[str]:
    return [f["path"] for f in api.get("/api/v1/knowledge/menu/files/").json()["files"]]


def test_nfd_and_nfc_spellings_are_one_file(ops):
    assert put(ops, NFD, "first\n").status_code == 201
    again = put(ops, NFC, "second\n")
    assert again.status_code == 200, again.content  # replaced: the same path
    assert manifest(ops) == [NFC]
    for spelling in (NFC, NFD):
        got = ops.get(f"/api/v1/knowledge/menu/files/{spelling}")
        assert got.status_code == 200 and got.json()["content"] == "second\n" and got.json()["path"] == NFC
    assert ops.client.delete(f"/api/v1/knowledge/menu/files/{NFD}").status_code == 204
    assert manifest(ops) == []


@pytest.mark.parametrize(
    "char",
    ["\u202e", "\u202a", "\u2066", "\u2069", "\u200e", "\u200f", "\u061c", "\u200b", "\u2060", "\ufeff", "\u0085"],
)
def test_bidi_and_invisible_characters_are_refused_in_the_contracts_shape(ops, char):
    response = put(ops, f"evil{char}dm.txt", "x")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "validation_error" and set(error) == {"code", "message", "details"}
    assert f"U+{ord(char):04X}" in " ".join(error["details"]["path"]) or "control" in " ".join(error["details"]["path"])
    assert manifest(ops) == []


def test_the_model_paths_are_normalised_and_refuse_bidi_too(ops):
    agent = make_api(Role.AGENT, name="paths-agent")
    assert put(ops, NFC, "Schnitzel\n").status_code == 201
    ops.post("/api/v1/bundles/", {"name": "menu-bot"})
    doc = content("Menu.", knowledge=["menu"])
    assert ops.post("/api/v1/bundles/menu-bot/versions/", {"content": doc, "message": "v1"}).status_code == 201
    session = agent.post("/api/v1/sessions/", {"bundle": "menu-bot", "version": 1}).json()["id"]
    base = f"/api/v1/sessions/{session}/knowledge"
    read = agent.get(f"{base}/read", data={"path": f"knowledge/menu/{NFD}"})
    assert read.status_code == 200 and "Schnitzel" in read.json()["output"], read.content
    listed = agent.get(f"{base}/ls", data={"path": "knowledge/menu/" + unicodedata.normalize("NFD", "café/")})
    assert listed.json()["output"] == f"knowledge/menu/{NFC}"
    grep = agent.get(f"{base}/grep", data={"pattern": "Schnitzel", "path": f"knowledge/menu/{NFD}"})
    assert grep.status_code == 200 and "Schnitzel" in grep.json()["output"]
    glob = agent.get(f"{base}/glob", data={"pattern": "knowledge/menu/" + unicodedata.normalize("NFD", "café/*.md")})
    assert glob.json()["output"] == f"knowledge/menu/{NFC}"
    bidi = agent.get(f"{base}/read", data={"path": "knowledge/menu/caf\u202eé/menü.md"})
    assert bidi.status_code == 400 and "U+202E" in " ".join(bidi.json()["error"]["details"]["path"])


def test_the_rule_lives_in_core_limits():
    assert invisible_characters("a\u202eb\u202ec\u200b") == ["U+202E", "U+200B"]
    assert invisible_characters("plain é, 漢字 and emoji 🙂") == []


def test_the_migration_renames_stored_paths_to_nfc_unless_the_nfc_one_exists(ops):
    migration = importlib.import_module("knowledge.migrations.0002_nfc_paths")
    pack = Pack.objects.get(name="menu")
    now = timezone.now()

    def stored(path: str) -> PackFile:  # written as the previous release wrote it: as given
        head, sep, _ = path.partition("/")
        return PackFile.objects.create(
            pack=pack,
            path=path,
            domain=head if sep else "",
            content=path,
            size=1,
            sha256="0" * 64,
            updated_at=now,
            updated_by="old",
        )

    lone = stored(unicodedata.normalize("NFD", "über/a.md"))
    twin_nfd, twin_nfc = stored(unicodedata.normalize("NFD", "é.md")), stored(unicodedata.normalize("NFC", "é.md"))
    ops.post("/api/v1/bundles/", {"name": "menu-bot"})
    ops.post("/api/v1/bundles/menu-bot/versions/", {"content": content("M.", knowledge=["menu"]), "message": "v1"})
    session = Session.objects.get(pk=ops.post("/api/v1/sessions/", {"bundle": "menu-bot", "version": 1}).json()["id"])
    FileRead.objects.create(session=session, pack=pack, path=lone.path, known_sha256="0" * 64, read_at=now)

    migration.to_nfc(apps, None)

    lone.refresh_from_db()
    assert lone.path == unicodedata.normalize("NFC", "über/a.md") and lone.domain == unicodedata.normalize(
        "NFC", "über"
    )
    assert FileRead.objects.get(session=session).path == lone.path
    twin_nfd.refresh_from_db()
    twin_nfc.refresh_from_db()
    assert twin_nfd.path != twin_nfc.path  # both kept, for a person to resolve
    assert ops.get(f"/api/v1/knowledge/menu/files/{unicodedata.normalize('NFD', 'über/a.md')}").status_code == 200
