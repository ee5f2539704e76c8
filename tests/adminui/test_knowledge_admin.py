"""Knowledge packs in the admin, and the version page's rendered prefix, through the test client."""

import json
from html import unescape
from urllib.parse import urlencode

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from access.actors import SYSTEM
from adminui.groups import PROMPT_ENGINEERS
from audit.models import AuditEvent
from core.tokens import estimate_tokens
from knowledge import services
from knowledge.models import Pack, PackFile
from knowledge.render import GUIDANCE, version_prefix
from registry.models import BundleVersion
from registry.services import bundle_create, label_move, version_publish
from tests.adminui.test_adminui_views import client_for, make_user
from tests.conftest import content


def text(response) -> str:
    return unescape(response.content.decode())


@pytest.fixture
def engineer(db):
    return client_for(make_user("pat", PROMPT_ENGINEERS))


@pytest.fixture
def reader(db):
    return client_for(make_user("rita"))  # staff in no group: reads only


@pytest.fixture
def pack(db) -> Pack:
    pack = services.pack_create(name="ops", description="Ops notes", actor=SYSTEM)
    services.file_put(pack=pack, path="sre/DUTY.md", content="Start with the runbooks.\n", actor=SYSTEM)
    services.file_put(pack=pack, path="sre/runbooks/oom.md", content="Restart.\n", actor=SYSTEM)
    services.file_put(pack=pack, path="billing/how.md", content="Invoices.\n", actor=SYSTEM)
    return pack


def test_the_pack_list_offers_creation_to_engineers_and_creates_through_the_service(engineer, reader, pack):
    url = reverse("admin:knowledge_pack_changelist")
    page = text(engineer.get(url))
    assert "ops" in page and "Create pack" in page
    assert "Create pack" not in text(reader.get(url))
    response = engineer.post(url, {"name": "team-kb", "description": "Team"})
    assert response.status_code == 302 and response["Location"] == reverse("admin:knowledge_pack", args=["team-kb"])
    assert Pack.objects.get(name="team-kb").created_by == "user:pat"
    bad = engineer.post(url, {"name": "Bad Name"})
    assert bad.status_code == 400 and "Must match" in text(bad)
    refused = reader.post(url, {"name": "sneaky"})
    assert refused.status_code == 403 and not Pack.objects.filter(name="sneaky").exists()


def test_the_pack_page_shows_domains_manifest_and_the_bundles_that_use_it(engineer, pack):
    bundle = bundle_create(name="helper", actor=SYSTEM)
    v1 = version_publish(bundle=bundle, content=content("a", knowledge=["ops"]), message="m", actor=SYSTEM).version
    version_publish(bundle=bundle, content=content("b"), message="m", actor=SYSTEM)
    label_move(bundle=bundle, name="production", version=v1, actor=SYSTEM, reason="r")
    page = text(engineer.get(reverse("admin:knowledge_pack", args=["ops"])))
    for expected in ("billing/", "sre/", "sre/runbooks/oom.md", "sre/DUTY.md", "helper", "v1", "production"):
        assert expected in page
    used_by = page.split('id="used-by"', 1)[1].split("</table>", 1)[0]
    assert ">v1<" in used_by and ">v2<" not in used_by  # v2 does not list the pack
    oom = PackFile.objects.get(path="sre/runbooks/oom.md")
    assert oom.sha256[:12] in page


def test_engineers_upload_edit_and_delete_files(engineer, reader, pack):
    url = reverse("admin:knowledge_file", args=["ops"])
    edit = text(engineer.get(url + "?" + urlencode({"path": "sre/DUTY.md"})))
    assert "Start with the runbooks." in edit and 'data-editor="text"' in edit  # the prompt editor
    saved = engineer.post(url, {"path": "sre/DUTY.md", "content": "Start with oom.md.\n"})
    assert saved.status_code == 302
    assert PackFile.objects.get(path="sre/DUTY.md").content == "Start with oom.md.\n"
    upload = SimpleUploadedFile("notes.md", "Uploaded ü\n".encode())
    assert engineer.post(url, {"path": "arch/notes.md", "content": "", "upload": upload}).status_code == 302
    assert PackFile.objects.get(path="arch/notes.md").content == "Uploaded ü\n"
    bad = engineer.post(url, {"path": "../etc/passwd", "content": "x"})
    assert bad.status_code == 400 and "'..'" in text(bad)
    not_text = SimpleUploadedFile("x.bin", b"\xff\xfe\x00")
    assert engineer.post(url, {"path": "x.bin", "upload": not_text}).status_code == 400
    assert reader.post(url, {"path": "r.md", "content": "x"}).status_code == 403
    assert "Save" not in text(reader.get(url + "?path=sre/DUTY.md"))

    delete = reverse("admin:knowledge_file_delete", args=["ops"])
    assert engineer.post(delete, {"path": "arch/notes.md"}).status_code == 302
    assert not PackFile.objects.filter(path="arch/notes.md").exists()
    assert reader.post(delete, {"path": "sre/DUTY.md"}).status_code == 403
    actions = list(AuditEvent.objects.filter(actor="user:pat").values_list("action", flat=True))
    assert actions.count("pack.file_written") == 2 and "pack.file_deleted" in actions


def test_the_version_page_shows_the_rendered_prefix_with_bytes_and_tokens(engineer, pack):
    bundle = bundle_create(name="helper", actor=SYSTEM)
    doc = content(
        "Help {{customer}}.",
        knowledge=["ops"],
        variables={"customer": {"type": "string", "required": True}, "tier": {"type": "string", "default": "free"}},
    )
    version = version_publish(bundle=bundle, content=doc, message="m", actor=SYSTEM).version
    url = reverse("admin:adminui_version", args=["helper", version.number])

    first = text(engineer.get(url))  # prefilled with the declared session variables
    assert '"customer": ""' in first and '"tier": "free"' in first

    page = text(engineer.get(url + "?" + urlencode({"variables": json.dumps({"customer": "Acme"})})))
    system = f"Help Acme.\n\n{GUIDANCE}"
    assert system in page
    assert "## knowledge/ops/sre/DUTY.md" in page
    size = int(page.split('id="prefix-bytes">', 1)[1].split(" bytes", 1)[0])
    tokens = int(page.split('id="prefix-tokens">≈ ', 1)[1].split(" ", 1)[0])
    prefix, _ = version_prefix(
        version_id=version.pk, content_hash=version.content_hash, session_variables={"customer": "Acme"}
    )
    assert size == len(prefix.body)
    assert tokens == estimate_tokens(prefix.body.decode())

    invalid = text(engineer.get(url + "?" + urlencode({"variables": json.dumps({"tier": 3})})))
    assert "variables.customer" in invalid and "variables.tier" in invalid
    assert "Not JSON" in text(engineer.get(url + "?variables=%7B"))


def test_a_new_version_from_one_with_variables_and_packs_keeps_them(engineer, pack):
    bundle = bundle_create(name="helper", actor=SYSTEM)
    declared = {"customer": {"type": "string", "default": "x"}}
    doc = content("Help {{customer}}.", knowledge=["ops"], variables=declared)
    v1 = version_publish(bundle=bundle, content=doc, message="m", actor=SYSTEM).version
    url = reverse("admin:adminui_version_new", args=["helper"])
    form = engineer.get(url + "?from=1").context["form"]
    assert json.loads(form.initial["variables"]) == declared and json.loads(form.initial["knowledge"]) == ["ops"]
    fields = {**form.initial, "message": "same again"}
    page = text(engineer.post(url, fields))
    assert "identical to" in page and BundleVersion.objects.filter(bundle=bundle).count() == 1

    without = engineer.post(url, {**fields, "system_prompt": "Help.", "variables": "", "knowledge": "", "message": "m"})
    assert without.status_code == 302
    v2 = BundleVersion.objects.get(bundle=bundle, number=2)
    assert b"variables" not in bytes(v2.canonical) and b"knowledge" not in bytes(v2.canonical)
    assert v1.content_hash != v2.content_hash
    shown = text(engineer.get(reverse("admin:adminui_version", args=["helper", 1])))
    assert 'id="field-variables"' in shown and 'id="field-knowledge"' in shown
