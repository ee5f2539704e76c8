"""Knowledge packs: the REST endpoints, path rules, scopes, audit, the cache-stable prefix
contract, change notices and the model's file tools (docs/rendering.md)."""

import hashlib
import json
import logging
import random
from datetime import UTC, datetime
from pathlib import Path

import pytest

from access.actors import SYSTEM
from access.models import Role
from access.services import api_key_create
from audit.models import AuditEvent
from knowledge import render, services, tools
from knowledge.models import MAX_FILE_BYTES, Pack
from registry.canonical import canonical_bytes
from sessions_app.models import Session
from tests.conftest import Api, content, make_api

DUTY_SRE = "# SRE duty\n\nStart with knowledge/ops/sre/runbooks/ for incidents.\n"


class World:
    def __init__(self) -> None:
        self.ops = make_api(Role.OPS, name="k-ops")
        self.agent = make_api(Role.AGENT, name="k-agent")
        assert self.ops.post("/api/v1/knowledge/", {"name": "ops", "description": "Ops notes"}).status_code == 201
        assert self.ops.post("/api/v1/knowledge/", {"name": "billing"}).status_code == 201
        self.put("ops", "sre/DUTY.md", DUTY_SRE)
        self.put("ops", "sre/runbooks/disk-full.md", "# Disk full\n\n1. Check df -h\n2. Rotate logs\n")
        self.put("ops", "sre/runbooks/oom.md", "# OOM\n\nRestart the worker.\n")
        self.put("ops", "README.md", "Top-level notes\n")
        self.put("billing", "invoices/how.md", "Invoices are sent on the 1st.\n")
        self.ops.post("/api/v1/bundles/", {"name": "helper"})
        doc = content(
            "You help on-call engineers for {{team}}.",
            knowledge=["ops", "billing"],
            variables={"team": {"type": "string", "default": "core"}},
        )
        response = self.ops.post("/api/v1/bundles/helper/versions/", {"content": doc, "message": "v1"})
        assert response.status_code == 201, response.content
        self.ops.put("/api/v1/bundles/helper/labels/production/", {"version": 1, "reason": "go"})
        self.session = self.agent.post("/api/v1/sessions/", {"bundle": "helper"}).json()["id"]

    def put(self, pack: str, path: str, text: str, api: Api | None = None):
        return (api or self.ops).put(f"/api/v1/knowledge/{pack}/files/{path}", {"content": text})

    def delete(self, pack: str, path: str):
        return self.ops.client.delete(f"/api/v1/knowledge/{pack}/files/{path}")

    def render(self, body=None, session: str | None = None):
        response = self.agent.post(f"/api/v1/sessions/{session or self.session}/render/", body)
        assert response.status_code == 200, response.content
        return response.json()

    def prefix(self, now: datetime | None = None) -> bytes:
        return render.session_render(session_id=self.session, actor=self.agent.actor, now=now).prefix.body

    def tool(self, name: str, **params):
        return self.agent.get(f"/api/v1/sessions/{self.session}/knowledge/{name}", data=params)

    def output(self, name: str, **params) -> str:
        response = self.tool(name, **params)
        assert response.status_code == 200, response.content
        return response.json()["output"]


@pytest.fixture
def world(db) -> World:
    return World()


# --- REST endpoints -----------------------------------------------------------------------------


def test_it_creates_packs_and_writes_reads_lists_and_deletes_files(world):
    ops = world.ops
    assert ops.post("/api/v1/knowledge/", {"name": "ops"}).status_code == 409
    created = world.put("ops", "arch/overview.md", "Three services.\n")
    assert created.status_code == 201
    assert world.put("ops", "arch/overview.md", "Four services.\n").status_code == 200
    file = ops.get("/api/v1/knowledge/ops/files/arch/overview.md").json()
    assert file["content"] == "Four services.\n" and file["size"] == 15
    assert file["sha256"] == hashlib.sha256(b"Four services.\n").hexdigest()
    manifest = ops.get("/api/v1/knowledge/ops/files/").json()
    assert manifest["pack"] == "ops"
    assert [f["path"] for f in manifest["files"]] == [
        "README.md",
        "arch/overview.md",
        "sre/DUTY.md",
        "sre/runbooks/disk-full.md",
        "sre/runbooks/oom.md",
    ]
    assert set(manifest["files"][0]) == {"path", "size", "sha256", "updated_at"}
    assert world.delete("ops", "arch/overview.md").status_code == 204
    assert ops.get("/api/v1/knowledge/ops/files/arch/overview.md").status_code == 404
    assert world.delete("ops", "arch/overview.md").status_code == 404
    assert [p["name"] for p in ops.get("/api/v1/knowledge/").json()["results"]] == ["billing", "ops"]
    assert ops.get("/api/v1/knowledge/ops/").json()["description"] == "Ops notes"


def test_a_file_put_honours_if_match_and_if_none_match(world):
    # Issue 36 (carried over): two editors who read the same file both replaced it; no precondition.
    path = "/api/v1/knowledge/ops/files/arch/plan.md"
    put = world.ops.put
    assert put(path, {"content": "one\n"}, HTTP_IF_NONE_MATCH="*").status_code == 201
    again = put(path, {"content": "other\n"}, HTTP_IF_NONE_MATCH="*")
    assert again.status_code == 412 and again.json()["error"]["code"] == "precondition_failed"
    read = world.ops.get(path)
    etag = read["ETag"]
    assert etag == '"' + hashlib.sha256(b"one\n").hexdigest() + '"'
    first = put(path, {"content": "two\n"}, HTTP_IF_MATCH=etag)
    assert first.status_code == 200 and first["ETag"] != etag
    stale = put(path, {"content": "three\n"}, HTTP_IF_MATCH=etag)  # the second editor read "one" too
    assert stale.status_code == 412, stale.content
    assert stale.json()["error"]["details"]["current"]["sha256"] == first.json()["sha256"]
    assert world.ops.get(path).json()["content"] == "two\n"
    assert put(path, {"content": "four\n"}, HTTP_IF_MATCH=f'W/"x", {first["ETag"]}').status_code == 200
    assert put(path, {"content": "five\n"}, HTTP_IF_MATCH="*").status_code == 200
    assert put("/api/v1/knowledge/ops/files/new.md", {"content": "x"}, HTTP_IF_MATCH="*").status_code == 412
    assert world.ops.get("/api/v1/knowledge/ops/files/new.md").status_code == 404


@pytest.mark.parametrize(
    "path",
    ["a/../b.md", "../b.md", "/etc/passwd", "a//b.md", "./a.md", "a/", "a\\b.md", "x" * 510 + ".md", "é" * 257],
)
def test_it_refuses_invalid_paths_with_400(world, path):
    response = world.put("ops", path, "x")
    assert response.status_code == 400, (path, response.content)
    assert response.json()["error"]["details"]["path"]


def test_a_path_of_512_bytes_is_allowed(world):
    assert world.put("ops", "x" * 509 + ".md", "x").status_code == 201


def test_a_file_over_1_mib_is_413_and_1_mib_is_fine(world):
    assert world.put("ops", "big.txt", "a" * MAX_FILE_BYTES).status_code == 201
    response = world.put("ops", "bigger.txt", "a" * (MAX_FILE_BYTES + 1))
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


def test_file_content_must_be_text(world):
    assert world.put("ops", "a.md", 12).status_code == 400  # type: ignore[arg-type]
    assert world.put("ops", "a.md", "nul \x00").status_code == 400
    assert world.ops.put("/api/v1/knowledge/ops/files/a.md", {"content": "x", "mode": 1}).status_code == 400


@pytest.mark.parametrize(
    ("role", "expected"), [(Role.AGENT, 403), (Role.PUBLISHER, 201), (Role.OPS, 201), (Role.ADMIN, 201)]
)
def test_writing_needs_the_publisher_role(world, role, expected):
    api = make_api(role, name=f"w-{role}")
    assert world.put("ops", f"by-{role}.md", "x", api=api).status_code == expected
    assert api.post("/api/v1/knowledge/", {"name": f"new-{role}"}).status_code == expected
    assert api.get("/api/v1/knowledge/ops/files/").status_code == 200
    assert api.get("/api/v1/knowledge/ops/files/README.md").status_code == 200


def test_key_scopes_apply_to_packs_as_to_bundles(world):
    key, secret = api_key_create(name="scoped", role=Role.PUBLISHER, scopes=["bill*"], actor=SYSTEM)
    scoped = Api(secret, key.as_actor())
    assert world.put("billing", "a.md", "x", api=scoped).status_code == 201
    for method, path in [
        ("get", "/api/v1/knowledge/{p}/"),
        ("get", "/api/v1/knowledge/{p}/files/"),
        ("get", "/api/v1/knowledge/{p}/files/README.md"),
    ]:
        outside = getattr(scoped, method)(path.format(p="ops"))
        missing = getattr(scoped, method)(path.format(p="no-such-pack"))
        assert outside.status_code == missing.status_code == 404
        assert outside.json()["error"] == {**missing.json()["error"], "message": outside.json()["error"]["message"]}
    assert world.put("ops", "b.md", "x", api=scoped).status_code == 404
    assert scoped.post("/api/v1/knowledge/", {"name": "ops-2"}).status_code == 403
    assert [p["name"] for p in scoped.get("/api/v1/knowledge/").json()["results"]] == ["billing"]


MARKER = "ZEBRA-MARKER-kn0w"


def test_changes_are_audited_without_the_file_content(world, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    world.put("ops", "secret.md", f"the content {MARKER}\n")
    world.put("ops", "secret.md", f"new content {MARKER}\n")
    world.put("ops", "too-big.md", MARKER * (MAX_FILE_BYTES // len(MARKER) + 1))  # 413
    world.output("read", path="knowledge/ops/secret.md")
    world.output("grep", pattern="ZEBRA")
    world.render()
    world.delete("ops", "secret.md")
    rows = list(AuditEvent.objects.filter(target_type="pack").values())
    actions = [row["action"] for row in rows]
    assert actions.count("pack.file_written") >= 2 and "pack.file_deleted" in actions
    written = [r for r in rows if r["action"] == "pack.file_written" and r["data"]["path"] == "secret.md"]
    assert {r["data"]["sha256"] for r in written} == {
        hashlib.sha256(f"{w} content {MARKER}\n".encode()).hexdigest() for w in ("the", "new")
    }
    captured = capfd.readouterr()
    logged = "\n".join([r.getMessage() for r in caplog.records] + [captured.out, captured.err])
    assert MARKER not in logged
    assert MARKER not in "\n".join(str(row) for row in AuditEvent.objects.values())


# --- the prefix contract --------------------------------------------------------------------------


def test_the_prefix_is_byte_identical_unless_a_duty_or_the_domains_change(world):
    """The contract test: adding, deleting or editing any non-DUTY file in any pack, and the passage
    of time across midnight, leave the rendered prefix byte-identical; editing a DUTY.md or adding
    a domain changes it; turn variables never reach the prefix."""
    base = world.prefix(now=datetime(2026, 11, 30, 23, 59, tzinfo=UTC))
    assert world.prefix(now=datetime(2026, 12, 1, 0, 1, tzinfo=UTC)) == base  # midnight passed

    same = [
        lambda: world.put("ops", "sre/runbooks/new.md", "A new runbook.\n"),  # add, in a domain
        lambda: world.put("ops", "sre/runbooks/oom.md", "# OOM\n\nRestart twice.\n"),  # edit
        lambda: world.delete("ops", "sre/runbooks/disk-full.md"),  # delete
        lambda: world.put("ops", "NOTES.md", "top level\n"),  # a top-level file is in no domain
        lambda: world.put("billing", "invoices/2026/nov.md", "November.\n"),  # another pack
        lambda: world.put("billing", "invoices/how.md", "Invoices go out on the 2nd.\n"),
        lambda: world.put("ops", "sre/runbooks/DUTY.md", "not a domain's DUTY (too deep)\n"),
        lambda: world.put("ops", "sre/DUTY.md", DUTY_SRE),  # the same bytes again
    ]
    for change in same:
        assert change().status_code in (200, 201, 204)
        assert world.prefix() == base
    turn = world.render({"variables": {}})
    assert canonical_bytes(turn["prefix"]) == base

    assert world.put("ops", "sre/DUTY.md", DUTY_SRE + "Also: pager rotation.\n").status_code == 200
    after_duty = world.prefix()
    assert after_duty != base and b"pager rotation" in after_duty

    assert world.put("billing", "tax/rates.md", "VAT 20%\n").status_code == 201  # a new domain
    after_domain = world.prefix()
    assert after_domain != after_duty and b"knowledge/billing/tax/" in after_domain
    assert world.delete("billing", "tax/rates.md").status_code == 204  # the domain goes away again
    assert world.prefix() == after_duty


def test_turn_variables_never_reach_the_prefix(db):
    ops, agent = make_api(Role.OPS), make_api(Role.AGENT)
    ops.post("/api/v1/knowledge/", {"name": "kb"})
    ops.put("/api/v1/knowledge/kb/files/d/DUTY.md", {"content": "duty"})
    ops.post("/api/v1/bundles/", {"name": "t"})
    doc = content("Hi.", knowledge=["kb"], variables={"ticket": {"type": "string", "scope": "turn"}})
    ops.post("/api/v1/bundles/t/versions/", {"content": doc, "message": "m"})
    ops.put("/api/v1/bundles/t/labels/production/", {"version": 1, "reason": "r"})
    session = agent.post("/api/v1/sessions/", {"bundle": "t"}).json()["id"]
    seen = set()
    for value in ("TURN-VALUE-ONE", "TURN-VALUE-TWO"):
        body = agent.post(f"/api/v1/sessions/{session}/render/", {"variables": {"ticket": value}}).json()
        assert value not in json.dumps(body["prefix"]) and value in body["tail"]
        seen.add(body["prefix_sha256"])
    assert len(seen) == 1


def test_the_prefix_has_the_prompt_guidance_domains_and_duties_and_the_file_tools(world):
    body = world.render()
    system = body["prefix"]["system"]
    assert system.startswith("You help on-call engineers for core.\n\n# Knowledge files\n")
    assert "curated entry point, not a complete list" in system
    assert "never guessed or shortened" in system
    assert "- knowledge/ops/sre/\n" in system and "- knowledge/billing/invoices/" in system
    assert f"## knowledge/ops/sre/DUTY.md\n\n{DUTY_SRE}" in system
    assert "disk-full" not in system and "README" not in system  # no file list
    names = [t["name"] for t in body["prefix"]["tools"]]
    assert names == ["process_refund", "ls", "glob", "grep", "read"]
    assert body["prefix"]["tools"][1:] == render.KNOWLEDGE_TOOLS
    assert body["prefix_sha256"] == hashlib.sha256(canonical_bytes(body["prefix"])).hexdigest()


def test_a_long_duty_is_cut_at_32_kib_on_a_character_boundary(world):
    text = "é" * 20_000  # 40,000 bytes
    world.put("ops", "sre/DUTY.md", text)
    system = world.render()["prefix"]["system"]
    kept = system.split("## knowledge/ops/sre/DUTY.md\n\n", 1)[1]
    body, cut_line = kept.rsplit("\n", 1)
    assert body == "é" * (32 * 1024 // 2)
    assert cut_line == "[DUTY.md cut here at 32 KiB: read knowledge/ops/sre/DUTY.md for the rest]"


# --- notices --------------------------------------------------------------------------------------


def test_notices_tell_each_change_to_a_read_file_once_and_never_a_new_file(world):
    world.output("read", path="knowledge/ops/sre/runbooks/oom.md")
    world.output("read", path="knowledge/ops/sre/runbooks/disk-full.md")
    assert world.render()["notices"] == []

    world.put("ops", "sre/runbooks/brand-new.md", "new\n")  # new files never notify
    world.put("ops", "sre/runbooks/never-read.md", "x\n")
    world.put("ops", "README.md", "changed, but never read\n")
    assert world.render()["notices"] == []

    world.put("ops", "sre/runbooks/oom.md", "# OOM\n\nRestart twice.\n")
    world.delete("ops", "sre/runbooks/disk-full.md")
    first = world.render()
    assert first["notices"] == [
        {"path": "knowledge/ops/sre/runbooks/disk-full.md", "change": "deleted"},
        {"path": "knowledge/ops/sre/runbooks/oom.md", "change": "modified"},
    ]
    assert render.NOTICE_HEADER in first["tail"]
    assert "- knowledge/ops/sre/runbooks/oom.md (modified)" in first["tail"]
    second = world.render()
    assert second["notices"] == [] and render.NOTICE_HEADER not in second["tail"]  # once

    world.put("ops", "sre/runbooks/oom.md", "# OOM\n\nRestart three times.\n")  # a further change
    assert world.render()["notices"] == [{"path": "knowledge/ops/sre/runbooks/oom.md", "change": "modified"}]
    assert world.render()["notices"] == []

    world.output("read", path="knowledge/ops/sre/runbooks/oom.md")  # read again: up to date
    world.put("ops", "sre/runbooks/oom.md", "# OOM\n\nRestart three times.\n")  # same bytes: no change
    assert world.render()["notices"] == []


def test_notices_are_per_session(world):
    other = world.agent.post("/api/v1/sessions/", {"bundle": "helper"}).json()["id"]
    world.output("read", path="knowledge/ops/README.md")
    world.put("ops", "README.md", "changed\n")
    assert world.render(session=other)["notices"] == []
    assert len(world.render()["notices"]) == 1


# --- the file tools -------------------------------------------------------------------------------


def test_ls_lists_packs_folders_and_files(world):
    assert world.output("ls", path="knowledge/") == "knowledge/billing/\nknowledge/ops/"
    assert world.output("ls") == "knowledge/billing/\nknowledge/ops/"
    assert world.output("ls", path="knowledge/ops/") == "knowledge/ops/README.md\nknowledge/ops/sre/"
    assert world.output("ls", path="knowledge/ops/sre") == "knowledge/ops/sre/DUTY.md\nknowledge/ops/sre/runbooks/"
    assert world.output("ls", path="knowledge/ops/sre/runbooks/") == (
        "knowledge/ops/sre/runbooks/disk-full.md\nknowledge/ops/sre/runbooks/oom.md"
    )
    assert world.tool("ls", path="knowledge/ops/nothing/").status_code == 404


def test_glob_matches_across_folders(world):
    assert world.output("glob", pattern="knowledge/**/*.md").splitlines() == [
        "knowledge/billing/invoices/how.md",
        "knowledge/ops/README.md",
        "knowledge/ops/sre/DUTY.md",
        "knowledge/ops/sre/runbooks/disk-full.md",
        "knowledge/ops/sre/runbooks/oom.md",
    ]
    assert world.output("glob", pattern="knowledge/ops/*.md") == "knowledge/ops/README.md"
    assert world.output("glob", pattern="**/{oom,how}.md") == (
        "knowledge/billing/invoices/how.md\nknowledge/ops/sre/runbooks/oom.md"
    )
    assert (
        world.output("glob", pattern="knowledge/ops/sre/runbooks/d?sk-*") == "knowledge/ops/sre/runbooks/disk-full.md"
    )
    assert world.output("glob", pattern="knowledge/**/*.pdf") == "(no files match)"
    assert world.tool("glob", pattern="knowledge/other/**").status_code == 400
    assert world.tool("glob", pattern="/etc/*").status_code == 400
    assert world.tool("glob", pattern="knowledge/../x").status_code == 400


def test_grep_returns_line_numbered_matches(world):
    assert world.output("grep", pattern="(?i)restart|rotate") == (
        "knowledge/ops/sre/runbooks/disk-full.md:4:2. Rotate logs\n"
        "knowledge/ops/sre/runbooks/oom.md:3:Restart the worker."
    )
    assert world.output("grep", pattern="Invoices", path="knowledge/billing/") == (
        "knowledge/billing/invoices/how.md:1:Invoices are sent on the 1st."
    )
    assert world.output("grep", pattern="^#", path="knowledge/ops/sre/runbooks/oom.md") == (
        "knowledge/ops/sre/runbooks/oom.md:1:# OOM"
    )
    assert world.output("grep", pattern="zzz") == "(no matches)"
    assert world.tool("grep", pattern="(unclosed").status_code == 400
    assert world.tool("grep", pattern="x", path="knowledge/ops/missing/").status_code == 404


def test_grep_stops_at_its_time_limit_between_blocks(world, monkeypatch):
    monkeypatch.setattr(tools, "GREP_TIME_LIMIT_SECONDS", 0.05)
    rng = random.Random(7)
    world.put("ops", "big.txt", "".join(rng.choice("abcdefgh ") for _ in range(800_000)))  # one line, 800 KB
    # About 2,900 RE2 instructions: on this text RE2's DFA runs out of memory and its NFA takes
    # about 0.1 s per 64 KB block, so the deadline is seen after the first block.
    output = world.output("grep", pattern="(?s)a.{0,90}b.{0,90}c.{0,90}d.{0,90}x", path="knowledge/ops/big.txt")
    assert "stopped after 0.05 s" in output


def test_read_numbers_lines_and_pages_with_offset_and_limit(world):
    world.put("ops", "long.txt", "".join(f"line {i}\n" for i in range(1, 3001)))
    first = world.output("read", path="knowledge/ops/long.txt")
    lines = first.splitlines()
    assert lines[0] == "     1\tline 1" and lines[1999] == "  2000\tline 2000"
    assert lines[-1] == "[lines 1-2000 of 3000 shown; read on with offset=2001]"
    page = world.output("read", path="knowledge/ops/long.txt", offset=2999, limit=5)
    assert page == "  2999\tline 2999\n  3000\tline 3000"
    assert "past the end" in world.output("read", path="knowledge/ops/long.txt", offset=4000)
    assert world.tool("read", path="knowledge/ops/long.txt", offset=0).status_code == 400
    assert world.tool("read", path="knowledge/ops/long.txt", limit="x").status_code == 400


def test_every_answer_is_capped_at_100_kb_with_a_line_saying_how_to_page(world):
    world.put("ops", "wide.txt", "".join(f"{i:05d} " + "x" * 200 + "\n" for i in range(1, 1001)))
    response = world.tool("read", path="knowledge/ops/wide.txt")
    answer = response.json()
    assert answer["truncated"] is True
    assert len(answer["output"].encode()) <= 100_000
    last = answer["output"].splitlines()[-1]
    assert last.startswith("[cut at 100 KB: lines 1-") and "read again with offset=" in last
    next_offset = int(last.rsplit("offset=", 1)[1].rstrip("]"))
    following = world.output("read", path="knowledge/ops/wide.txt", offset=next_offset)
    assert following.startswith(f"{next_offset:6}\t{next_offset:05d} ")

    grep = world.tool("grep", pattern="x+", path="knowledge/ops/wide.txt").json()
    assert grep["truncated"] is True and len(grep["output"].encode()) <= 100_000
    assert "call again with offset=" in grep["output"].splitlines()[-1]
    pack = Pack.objects.get(name="ops")
    for i in range(600):  # through the service: the API's per-key rate limit would refuse 600 PUTs
        services.file_put(pack=pack, path=f"many/{'n' * 200}-{i:04d}.md", content="x", actor=SYSTEM)
    listing = world.tool("ls", path="knowledge/ops/many/").json()
    assert listing["truncated"] is True and len(listing["output"].encode()) <= 100_000
    globbed = world.tool("glob", pattern="knowledge/ops/many/*.md").json()
    assert globbed["truncated"] is True and len(globbed["output"].encode()) <= 100_000
    offset = int(globbed["output"].rsplit("offset=", 1)[1].split(" ")[0])
    rest = world.tool("glob", pattern="knowledge/ops/many/*.md", offset=offset).json()
    assert rest["truncated"] is False
    assert len(globbed["output"].splitlines()) - 1 + len(rest["output"].splitlines()) == 600


@pytest.mark.parametrize(
    ("tool", "params", "status"),
    [
        ("read", {"path": "knowledge/ops/../billing/invoices/how.md"}, 400),
        ("read", {"path": "/knowledge/ops/README.md"}, 400),
        ("read", {"path": "knowledge/other-pack/x.md"}, 400),  # outside the session's packs
        ("read", {"path": "ops/README.md"}, 400),  # not under knowledge/
        ("read", {"path": "knowledge/ops/" + "x" * 600}, 400),
        ("read", {"path": "knowledge/ops/missing.md"}, 404),
        ("read", {"path": "knowledge/ops/sre/"}, 400),  # a folder
        ("ls", {"path": "knowledge/../"}, 400),
        ("ls", {"path": "/etc/"}, 400),
        ("grep", {"pattern": "x", "path": "knowledge/other/"}, 400),
        ("read", {"path": "knowledge/ops/README.md", "colour": "red"}, 400),
    ],
)
def test_file_tool_paths_are_checked(world, tool, params, status):
    response = world.tool(tool, **params)
    assert response.status_code == status, response.content
    assert "error" in response.json()


def test_file_tools_see_only_the_sessions_packs_and_only_its_own_key(world):
    world.ops.post("/api/v1/knowledge/", {"name": "secret"})
    world.put("secret", "hidden/x.md", "hidden\n")
    assert "secret" not in world.output("glob", pattern="**/*.md")
    assert "hidden" not in world.output("grep", pattern="hidden")
    assert world.tool("read", path="knowledge/secret/hidden/x.md").status_code == 400
    stranger = make_api(Role.AGENT, name="stranger")
    assert stranger.get(f"/api/v1/sessions/{world.session}/knowledge/ls").status_code == 404


def test_a_version_without_packs_has_no_file_tools_and_no_guidance(db, agent, production):
    session = agent.post("/api/v1/sessions/", {"bundle": "refunds"}).json()["id"]
    body = agent.post(f"/api/v1/sessions/{session}/render/").json()
    assert [t["name"] for t in body["prefix"]["tools"]] == ["process_refund"]
    assert "knowledge" not in body["prefix"]["system"]
    assert agent.get(f"/api/v1/sessions/{session}/knowledge/ls").json()["output"] == "(no knowledge files)"


# --- end to end -----------------------------------------------------------------------------------


def test_an_agent_starts_renders_explores_and_gets_notices_over_the_api(db):
    """The issue's "done when", over HTTP: start with variables, render each turn, follow the
    guidance with the file tools, get a notice once after a file it read changes."""
    ops, agent = make_api(Role.OPS, name="e2e-ops"), make_api(Role.AGENT, name="e2e-agent")
    assert ops.post("/api/v1/knowledge/", {"name": "team", "description": "Team knowledge"}).status_code == 201
    for path, text in {
        "sre/DUTY.md": "Incidents: see knowledge/team/sre/incidents/.\n",
        "sre/incidents/2026-11-db.md": "Postmortem: the database ran out of connections.\nFix: pool size 50.\n",
        "billing/DUTY.md": "Refund rules live here.\n",
    }.items():
        assert ops.put(f"/api/v1/knowledge/team/files/{path}", {"content": text}).status_code == 201
    assert ops.post("/api/v1/bundles/", {"name": "oncall"}).status_code == 201
    doc = content(
        "You are the on-call assistant for {{customer}} (tier {{tier}}).",
        knowledge=["team"],
        variables={
            "customer": {"type": "string", "required": True},
            "tier": {"type": "enum", "values": ["free", "pro"], "default": "free"},
            "timezone": {"type": "string", "default": "UTC"},
            "ticket": {"type": "string", "scope": "turn"},
        },
    )
    published = ops.post("/api/v1/bundles/oncall/versions/", {"content": doc, "message": "v1"})
    assert published.status_code == 201, published.content
    ops.put("/api/v1/bundles/oncall/labels/production/", {"version": 1, "reason": "ship"})

    bad = agent.post("/api/v1/sessions/", {"bundle": "oncall", "variables": {"tier": "gold"}})
    assert bad.status_code == 400 and {"variables.customer", "variables.tier"} <= set(bad.json()["error"]["details"])
    session = agent.post(
        "/api/v1/sessions/",
        {"bundle": "oncall", "variables": {"customer": "Acme", "tier": "pro", "timezone": "Asia/Tokyo"}},
    )
    assert session.status_code == 201
    sid = session.json()["id"]

    turn1 = agent.post(f"/api/v1/sessions/{sid}/render/", {"variables": {"ticket": "INC-1"}}).json()
    assert turn1["prefix"]["system"].startswith("You are the on-call assistant for Acme (tier pro).")
    assert "Incidents: see knowledge/team/sre/incidents/." in turn1["prefix"]["system"]
    assert "(Asia/Tokyo)" in turn1["tail"] and "- ticket: INC-1" in turn1["tail"]

    listing = agent.get(f"/api/v1/sessions/{sid}/knowledge/ls", data={"path": "knowledge/team/sre/incidents/"})
    path = listing.json()["output"].splitlines()[0]
    assert path == "knowledge/team/sre/incidents/2026-11-db.md"
    hits = agent.get(f"/api/v1/sessions/{sid}/knowledge/grep", data={"pattern": "pool size"}).json()["output"]
    assert hits == f"{path}:2:Fix: pool size 50."
    read = agent.get(f"/api/v1/sessions/{sid}/knowledge/read", data={"path": path}).json()["output"]
    assert read.splitlines()[1] == "     2\tFix: pool size 50."

    ops.put("/api/v1/knowledge/team/files/sre/incidents/2026-11-db.md", {"content": "Fix: pool size 80.\n"})
    ops.put("/api/v1/knowledge/team/files/sre/incidents/2026-12-dns.md", {"content": "DNS.\n"})  # new: no notice
    turn2 = agent.post(f"/api/v1/sessions/{sid}/render/", {"variables": {"ticket": "INC-1"}}).json()
    assert turn2["prefix_sha256"] == turn1["prefix_sha256"]
    assert turn2["notices"] == [{"path": path, "change": "modified"}]
    assert "read them again" in turn2["tail"]
    turn3 = agent.post(f"/api/v1/sessions/{sid}/render/", {"variables": {"ticket": "INC-2"}}).json()
    assert turn3["notices"] == [] and turn3["prefix_sha256"] == turn1["prefix_sha256"]


def test_docs_show_the_exact_tool_definitions_and_guidance():
    page = (Path(__file__).resolve().parents[2] / "docs" / "rendering.md").read_text()
    block = page.split("### The tool definitions", 1)[1].split("```json\n", 1)[1].split("\n```", 1)[0]
    assert json.loads(block) == render.KNOWLEDGE_TOOLS
    assert f"```\n{render.GUIDANCE}\n```" in page


def test_a_malformed_session_id_is_a_404_not_a_database_error(world):
    assert world.agent.get("/api/v1/sessions/" + "0" * 36 + "/knowledge/ls").status_code == 404
    assert world.agent.post("/api/v1/sessions/" + "0" * 36 + "/render/").status_code == 404


def test_two_renders_racing_on_one_session_tell_a_change_once(world):
    world.output("read", path="knowledge/ops/README.md")
    world.put("ops", "README.md", "changed\n")
    session = Session.objects.get(pk=world.session)
    packs = ["ops", "billing"]
    (_, first), (_, second) = render.turn_reads(session, packs), render.turn_reads(session, packs)  # both see it
    assert len(first) == len(second) == 1
    told = render.claim_notices(first) + render.claim_notices(second)
    assert told == [{"path": "knowledge/ops/README.md", "change": "modified"}]
    assert world.render()["notices"] == []


def test_the_prefix_cache_is_bounded_in_entries_and_bytes():
    def prefix(size: int) -> render.Prefix:
        return render.Prefix(system="", tools=[], body=b"x" * size, sha256="")

    cache = render._LRU(3, 100)
    for i in range(5):
        cache.put(i, prefix(10))
    assert list(cache.items) == [2, 3, 4] and cache.bytes == 30
    cache.put(5, prefix(85))  # over 100 bytes: the oldest go first
    assert list(cache.items) == [4, 5] and cache.bytes == 95
    cache.put(6, prefix(500))  # larger than the bound alone: kept, everything else evicted
    assert list(cache.items) == [6] and cache.bytes == 500


@pytest.mark.parametrize("name", ["ops\n", "Ops", "-ops", "ops/notes"])
def test_a_pack_name_follows_the_bundle_name_rule_to_the_last_character(ops, name):
    response = ops.post("/api/v1/knowledge/", {"name": name})
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["code"] == "validation_error"


def test_a_description_with_a_lone_surrogate_is_a_400(ops):
    response = ops.post("/api/v1/knowledge/", '{"name": "notes", "description": "bad \\ud800 text"}')
    assert response.status_code == 400, response.content
    assert "description" in response.json()["error"]["details"]
