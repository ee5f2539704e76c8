"""`promptreg import`: OpenAI prompt copies, Langfuse exports and a live MLflow prompt registry
become bundles (docs/importing.md). The mappings are pure and tested on files shaped like the
documented exports; the imports run through the CLI against a real registry server, and the
MLflow one against a real `mlflow server` the test starts from its own virtualenv."""

import json
import time
from pathlib import Path

import pytest
from promptreg import Registry
from promptreg.cli import main
from promptreg.importers import SourceError, langfuse, mlflow, openai

from access.models import Role
from registry.models import Bundle, BundleVersion, Label
from registry.services import label_move, label_policy_set
from tests.conftest import make_api
from tests.live import registry_server  # noqa: F401 (fixture)

ROOT = Path(__file__).resolve().parents[2]
OPENAI_COPY = ROOT / "docs" / "examples" / "openai-prompt.json"
LANGFUSE_EXPORT = ROOT / "tests" / "fixtures" / "langfuse_export.json"


def _read(path: Path):
    return json.loads(path.read_text())


# --- the mappings (pure) -----------------------------------------------------------------------


def test_it_maps_an_openai_copy_version_by_version():
    prompt = openai.from_copy(_read(OPENAI_COPY))
    assert (prompt.source, prompt.bundle) == ("openai", "refunds-agent")
    assert [v.ref for v in prompt.versions] == [
        f"openai pmpt_68b0c29740048196bd3a6e4b1b5d1d0b version {n}" for n in "123"
    ]
    first, second, third = (v.content for v in prompt.versions)
    assert first["system_prompt"] == "You handle refund requests for {{shop_name}}. Be brief."
    assert first["model"] == {"name": "gpt-6-luna", "temperature": 0.2}
    assert first["variables"] == {"shop_name": {"type": "string"}}
    assert second["tools"] == [
        {
            "name": "lookup_order",
            "description": "Find an order by its id.",
            "input_schema": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
                "additionalProperties": False,
            },
        }
    ]
    assert second["model"] == {"name": "gpt-6-luna", "temperature": 0.2, "max_tokens": 1024}
    assert third["output_schema"]["required"] == ["approved", "reply"]
    assert third["model"]["reasoning"] == {"effort": "low"}
    assert set(third["variables"]) == {"shop_name", "region", "tier"}
    origin = third["metadata"]["imported_from"]
    assert origin["tools"] == [{"type": "web_search_preview"}]  # no registry equivalent: kept
    assert origin["messages"] == [{"role": "user", "content": "Customer tier: {{tier}}"}]
    assert [v.labels for v in prompt.versions] == [(), ("production",), ("staging",)]
    assert prompt.versions[0].message == (
        "first draft\n\nimported from openai pmpt_68b0c29740048196bd3a6e4b1b5d1d0b version 1, by ada@example.com"
    )


def test_it_orders_openai_versions_by_number_not_by_place_in_the_file():
    doc = _read(OPENAI_COPY)
    doc["versions"].reverse()
    doc["versions"][0]["version"] = 10  # numbers may be written as numbers
    doc["labels"] = {"production": 10}
    prompt = openai.from_copy(doc, bundle="refunds")
    assert [v.content["metadata"]["imported_from"]["version"] for v in prompt.versions] == ["1", "2", "10"]
    assert prompt.bundle == "refunds" and prompt.versions[-1].labels == ("production",)


def test_it_maps_a_langfuse_export_text_and_chat_with_labels_but_not_latest():
    greeter, triage = langfuse.from_export(_read(LANGFUSE_EXPORT))
    assert (greeter.bundle, triage.bundle) == ("greeter", "support-triage")
    assert [v.ref for v in triage.versions] == [
        "langfuse support/triage version 1",
        "langfuse support/triage version 2",
    ]
    text, chat = (v.content for v in triage.versions)
    assert text["system_prompt"] == "Triage this support ticket for {{product}}: {{ticket}}"
    assert text["model"] == {"name": "gpt-6-luna", "temperature": 0.3}
    assert chat["system_prompt"] == "You triage support tickets for {{product}}."
    assert chat["model"] == {"name": "gpt-6-luna", "temperature": 0, "max_tokens": 300}
    assert chat["metadata"]["imported_from"]["messages"] == [
        {"role": "user", "content": "Ticket: {{ticket}}"},
        {"type": "placeholder", "name": "history"},
    ]
    assert set(chat["variables"]) == {"product", "ticket"}  # the user message's too: a session may give it
    assert [v.labels for v in triage.versions] == [("staging-eu",), ("production",)]
    assert greeter.versions[0].labels == ("production",)
    assert triage.versions[0].message == "imported from langfuse support/triage version 1"
    assert triage.versions[1].message == (
        "chat format with the ticket as the user turn\n\n"
        "imported from langfuse support/triage version 2, by grace@example.com"
    )


def test_a_langfuse_chat_prompt_without_a_system_message_starts_with_its_first_message():
    item = {"name": "p", "version": 1, "type": "chat", "prompt": [{"role": "user", "content": "Hi {{who}}"}]}
    (prompt,) = langfuse.from_export({"data": [item]})
    version = prompt.versions[0]
    assert version.content["system_prompt"] == "Hi {{who}}"
    assert "messages" not in version.content["metadata"]["imported_from"]
    assert version.notes == ("no system message: the first (user) message is the system prompt",)


def test_it_maps_mlflow_rest_shapes():
    model = {
        "name": "Summarizer",
        "aliases": [{"alias": "production", "version": "2"}, {"alias": "champion", "version": "2"}],
    }
    versions = [
        {
            "version": "2",
            "description": "chat",
            "user_id": "ada",
            "tags": [
                {"key": "mlflow.prompt.text", "value": json.dumps([{"role": "system", "content": "Be {{ tone }}."}])},
                {"key": "_mlflow_prompt_type", "value": "chat"},
                {"key": "_mlflow_prompt_model_config", "value": '{"model_name": "gpt-4o", "temperature": 0.5}'},
            ],
        },
        {"version": "1", "description": "", "tags": [{"key": "mlflow.prompt.text", "value": "Be {{tone}}."}]},
    ]
    prompt = mlflow.from_registered(model, versions)
    assert prompt.bundle == "summarizer"
    first, second = prompt.versions
    assert (first.content["system_prompt"], first.labels, first.message) == (
        "Be {{tone}}.",
        (),
        "imported from mlflow Summarizer version 1",
    )
    assert second.content["system_prompt"] == "Be {{ tone }}."
    assert second.content["model"] == {"name": "gpt-4o", "temperature": 0.5}
    assert second.content["variables"] == {"tone": {"type": "string"}}
    assert second.labels == ("champion", "production")
    assert second.message == "chat\n\nimported from mlflow Summarizer version 2, by ada"


def _endless_mlflow(*, repeat_token: bool = False, per_page: int = 1):
    """A tracking server whose searches never run out of pages (issue 36); it counts its calls."""
    import httpx

    calls = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request.url)
        token = "same" if repeat_token else f"t{len(calls)}"
        items = [{"name": f"p{len(calls)}-{i}"} for i in range(per_page)]
        return httpx.Response(200, json={"registered_models": items, "next_page_token": token})

    return mlflow.TrackingServer("http://mlflow.invalid", transport=httpx.MockTransport(answer)), calls


@pytest.mark.parametrize(
    ("shape", "error", "most_calls"),
    [
        ({}, "more than 100 pages", 100),
        ({"repeat_token": True}, "already given", 2),
        ({"per_page": 5_000}, "more than 10000 items", 3),
    ],
)
def test_mlflow_pagination_is_bounded(shape, error, most_calls):
    server, calls = _endless_mlflow(**shape)
    with server, pytest.raises(SourceError, match=error):
        server.prompt_names()
    assert len(calls) <= most_calls


@pytest.mark.parametrize(
    ("doc", "error"),
    [
        ([], "must hold one JSON object"),
        ({"versions": []}, "id: must be the prompt's id, pmpt_..."),
        ({"id": "pmpt_1", "versions": []}, "versions: must be a non-empty list"),
        ({"id": "pmpt_1", "versions": [{"version": "1"}]}, "versions[0].instructions"),
        ({"id": "pmpt_1", "versions": [{"version": "1", "instructions": "x", "tools": {}}]}, "versions[0].tools"),
        ({"id": "pmpt_1", "versions": [{"version": "1", "instructions": "x"}] * 2}, "appears twice"),
        ({"id": "pmpt_1", "labels": {"prod": "9"}, "versions": [{"version": "1", "instructions": "x"}]}, "version 9"),
        (
            {
                "id": "pmpt_1",
                "versions": [{"version": "1", "instructions": "{{ bad-name }} {{1x}}", "variables": ["1x"]}],
            },
            "variable name '1x'",
        ),
    ],
)
def test_a_malformed_openai_copy_is_refused_naming_the_place(doc, error):
    with pytest.raises(SourceError, match=None) as caught:
        openai.from_copy(doc)
    assert error in str(caught.value)


@pytest.mark.parametrize(
    ("doc", "error"),
    [
        ("prompts", "must hold Langfuse prompt objects"),
        ({}, "[0].name: must be the prompt's name"),
        ([{"name": "p", "version": "1", "prompt": "x"}], "[0].version: must be the version number"),
        ([{"name": "p", "version": 1, "type": "chat", "prompt": "x"}], "p version 1: prompt: a chat prompt"),
        ([{"name": "p", "version": 1, "type": "image", "prompt": "x"}], "type: must be text or chat"),
        ([{"name": "p", "version": 1, "prompt": "x", "config": []}], "config: must be an object"),
        ([{"name": "p", "version": 1, "prompt": "x", "labels": ["???"]}], "the label '???'"),
    ],
)
def test_a_malformed_langfuse_export_is_refused_naming_the_place(doc, error):
    with pytest.raises(SourceError) as caught:
        langfuse.from_export(doc)
    assert error in str(caught.value)


# --- the imports, through the CLI, against a real registry -------------------------------------


@pytest.fixture
def cli(registry_server, capsys, transactional_db):  # noqa: F811
    """Run `promptreg` in-process as ops; returns (status, out, err)."""
    ops = make_api(Role.OPS, name="import-ops")

    def run(*argv: str) -> tuple[int, str, str]:
        status = main(["--url", registry_server.url, "--api-key", ops.secret, *argv])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    run.secret = ops.secret  # type: ignore[attr-defined]
    return run


def _state(bundle: str) -> tuple[list[tuple[int, str]], dict[str, int]]:
    """(versions as (number, message), labels as {name: number}) in the database."""
    versions = list(
        BundleVersion.objects.filter(bundle__name=bundle).order_by("number").values_list("number", "message")
    )
    labels = {label.name: label.version.number for label in Label.objects.filter(bundle__name=bundle)}
    return versions, labels


def test_an_openai_import_publishes_in_order_points_labels_and_adds_nothing_the_second_time(cli):
    status, out, _ = cli("import", "openai", str(OPENAI_COPY), "--dry-run")
    assert status == 0, out
    assert out.splitlines() == [
        "openai pmpt_68b0c29740048196bd3a6e4b1b5d1d0b -> bundle refunds-agent (would create)",
        "  openai pmpt_68b0c29740048196bd3a6e4b1b5d1d0b version 1 -> version 1 (would publish)",
        "  openai pmpt_68b0c29740048196bd3a6e4b1b5d1d0b version 2 -> version 2 (would publish)",
        "  openai pmpt_68b0c29740048196bd3a6e4b1b5d1d0b version 3 -> version 3 (would publish)",
        "      note: 1 prompt message(s) kept in metadata.imported_from.messages",
        "      note: 1 built-in tool(s) kept in metadata.imported_from.tools",
        "  label production: (new) -> version 2 (would move)",
        "  label staging: (new) -> version 3 (would move)",
    ]
    assert not Bundle.objects.filter(name="refunds-agent").exists()  # a dry run writes nothing

    status, out, err = cli("import", "openai", str(OPENAI_COPY))
    assert status == 0, err
    assert out.splitlines()[0].endswith("-> bundle refunds-agent (created)")
    assert "  openai pmpt_68b0c29740048196bd3a6e4b1b5d1d0b version 1 -> version 1 (published)" in out
    versions, labels = _state("refunds-agent")
    assert [n for n, _ in versions] == [1, 2, 3]
    assert versions[1][1].startswith("look orders up before answering\n\nimported from openai pmpt_")
    assert labels == {"production": 2, "staging": 3}

    status, out, _ = cli("import", "openai", str(OPENAI_COPY))
    assert status == 0 and "nothing to import: every version and label is already there" in out
    assert "version 3 -> version 3 (already there)" in out and "label production: already at version 2" in out
    assert _state("refunds-agent") == (versions, labels)
    status, out, _ = cli("--json", "import", "openai", str(OPENAI_COPY), "--dry-run")
    plan = json.loads(out)["bundles"][0]
    assert all(step["exists"] for step in plan["versions"]) and not any(m["moved"] for m in plan["labels"])


def test_an_openai_prompt_call_maps_to_a_session_pinned_at_that_version(cli, registry_server):  # noqa: F811
    """`prompt={"id": "pmpt_...", "version": "2", "variables": {"shop_name": "Acme"}}` is a
    session on the bundle pinned at the version imported from "2", with those variables."""
    assert cli("import", "openai", str(OPENAI_COPY))[0] == 0
    with Registry(registry_server.url, cli.secret) as registry:
        with registry.start_session("refunds-agent", version=2, variables={"shop_name": "Acme"}) as session:
            assert session.bundle.content_hash
            rendered = session.render()
    assert rendered["prefix"]["system"].startswith("You handle refund requests for Acme. Look the order up")


def test_a_langfuse_import_makes_one_bundle_per_prompt_and_reimports_nothing(cli):
    status, out, err = cli("import", "langfuse", str(LANGFUSE_EXPORT))
    assert status == 0, err
    assert _state("support-triage")[1] == {"production": 2, "staging-eu": 1}
    assert [n for n, _ in _state("support-triage")[0]] == [1, 2]
    assert _state("greeter") == ([(1, "hello\n\nimported from langfuse greeter version 1")], {"production": 1})
    assert "latest" not in out

    status, out, _ = cli("import", "langfuse", str(LANGFUSE_EXPORT))
    assert status == 0 and out.count("nothing to import") == 2
    assert BundleVersion.objects.filter(bundle__name__in=["greeter", "support-triage"]).count() == 3


def test_a_new_source_version_adds_one_version_and_moves_its_label(cli, tmp_path):
    export = _read(LANGFUSE_EXPORT)
    assert cli("import", "langfuse", str(LANGFUSE_EXPORT))[0] == 0
    for item in export:
        if item["name"] == "greeter":
            item["labels"] = []
    export.append(
        {"name": "greeter", "version": 2, "type": "text", "prompt": "Greet {{name}}.", "labels": ["production"]}
    )
    changed = tmp_path / "export.json"
    changed.write_text(json.dumps(export))
    status, out, _ = cli("import", "langfuse", str(changed), "--dry-run")
    assert "  langfuse greeter version 2 -> version 2 (would publish)" in out
    assert "  label production: version 1 -> version 2 (would move)" in out
    assert cli("import", "langfuse", str(changed))[0] == 0
    assert _state("greeter")[1] == {"production": 2}


def test_a_malformed_file_is_refused_with_its_place_and_nothing_is_imported(cli, tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"id": "pmpt_1",\n "versions": [}')
    status, _, err = cli("import", "openai", str(broken))
    assert status == 1 and f"{broken}:2:15: Expecting value" in err and "nothing was imported" in err
    status, _, err = cli("import", "langfuse", str(tmp_path / "missing.json"))
    assert status == 1 and "No such file or directory" in err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"name": "p", "version": 1, "type": "chat", "prompt": []}]))
    status, _, err = cli("import", "langfuse", str(bad))
    assert status == 1 and "p version 1: prompt: a chat prompt must be a non-empty list" in err
    assert not Bundle.objects.exists()


def test_a_version_the_registry_refuses_names_the_source_version(cli, tmp_path):
    doc = {"id": "pmpt_1", "name": "bad", "versions": [{"version": "1", "instructions": "x", "text": {}}]}
    doc["versions"][0]["tools"] = [{"type": "function", "name": "t", "parameters": {"type": 12}}]
    path = tmp_path / "copy.json"
    path.write_text(json.dumps(doc))
    status, _, err = cli("import", "openai", str(path))
    assert status == 1 and "openai pmpt_1 version 1: the registry refused it" in err


def _as(registry_server, capsys, role: str, *argv: str) -> tuple[int, str, str]:  # noqa: F811
    key = make_api(role, name=f"import-{role}-{time.monotonic_ns()}")
    status = main(["--url", registry_server.url, "--api-key", key.secret, *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _protected_production(ops_cli) -> None:
    """refunds-agent with versions 1 and 2 of the copy, and a protected production on v1."""
    assert ops_cli("import", "openai", str(OPENAI_COPY))[0] == 0
    bundle = Bundle.objects.get(name="refunds-agent")
    ops = make_api(Role.OPS, name="policy-ops")
    label_move(
        bundle=bundle,
        name="production",
        version=bundle.versions.get(number=1),
        actor=ops.actor,
        reason="back to v1",
        allow_breaking=True,
    )
    label_policy_set(bundle=bundle, name="production", changes={"protected": True}, actor=ops.actor, reason="ops only")


def _copy_with_a_new_version(tmp_path: Path) -> Path:
    """The copy with a fourth version that production should point at."""
    doc = _read(OPENAI_COPY)
    latest = json.loads(json.dumps(doc["versions"][-1]))
    latest["version"] = "4"
    latest["instructions"] = latest["instructions"] + " Be brief."
    doc["versions"].append(latest)
    doc["labels"] = {"production": "4", "staging": "3"}
    path = tmp_path / "copy.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_publisher_dry_run_reports_the_protected_label_it_may_not_move(cli, registry_server, capsys, tmp_path):  # noqa: F811
    _protected_production(cli)
    copy = _copy_with_a_new_version(tmp_path)
    before = _state("refunds-agent")
    status, out, err = _as(registry_server, capsys, Role.PUBLISHER, "import", "openai", str(copy), "--dry-run")
    assert status == 1, out + err
    assert "version 4 -> version 4 (would publish)" in out  # the number the real run would give
    assert "refused: label production: The label 'production' is protected: only ops may move it." in out
    assert "a label was not moved: label production" in err and "nothing was imported" in err
    assert _state("refunds-agent") == before  # the dry run wrote nothing


def test_a_real_run_that_would_be_refused_anywhere_writes_nothing(cli, registry_server, capsys, tmp_path):  # noqa: F811
    _protected_production(cli)
    copy = _copy_with_a_new_version(tmp_path)
    before = _state("refunds-agent")
    status, out, err = _as(registry_server, capsys, Role.PUBLISHER, "import", "openai", str(copy))
    assert status == 1
    assert "a label was not moved: label production" in err and "nothing was imported" in err
    assert _state("refunds-agent") == before  # no version 4: it stopped before its first write
    # With an ops key (and the breaking change from v1 allowed) the same import goes through, all of it.
    status, out, err = cli("import", "openai", str(copy), "--allow-breaking")
    assert status == 0, err
    assert _state("refunds-agent")[1]["production"] == 4


def test_the_api_applies_an_import_all_or_nothing_and_reports_every_refusal(cli, registry_server):  # noqa: F811
    _protected_production(cli)
    publisher = make_api(Role.PUBLISHER, name="api-publisher")
    version = BundleVersion.objects.get(bundle__name="refunds-agent", number=3)
    good = json.loads(bytes(version.canonical))
    body = {
        "source": "test",
        "versions": [
            {"content": {**good, "system_prompt": good["system_prompt"] + " New."}, "message": "new"},
            {"content": {"system_prompt": ""}, "message": "empty"},
        ],
        "labels": {"production": 0, "staging": 1},
    }
    answer = publisher.post("/api/v1/bundles/refunds-agent/import-versions/", body)
    # The first refusal's status and code; every refusal in details.
    assert answer.status_code == 400, answer.json()
    error = answer.json()["error"]
    assert error["code"] == "validation_error" and "nothing was written" in error["message"]
    refused = error["details"]["refused"]
    assert [(r["step"], r["status"], r["code"]) for r in refused] == [
        ("versions[1]", 400, "validation_error"),
        ("labels.production", 403, "permission_denied"),
    ]
    assert BundleVersion.objects.filter(bundle__name="refunds-agent").count() == 3
    plan = publisher.post("/api/v1/bundles/refunds-agent/import-versions/", {**body, "dry_run": True}).json()
    assert plan["applied"] is False and plan["versions"][0]["version"] == 4 and plan["versions"][1]["refused"]
    assert plan["labels"] == [
        {"label": "production", "from": 1, "to": 4, "moved": True},
        {"label": "staging", "from": 3, "to": None, "moved": False},
    ]
    # Bounded, clear 400s for a malformed request.
    for bad in ({**body, "labels": {"production": 9}}, {**body, "versions": []}, {**body, "dry_run": "yes"}):
        refused = publisher.post("/api/v1/bundles/refunds-agent/import-versions/", bad)
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "validation_error"


# --- MLflow: a real tracking server --------------------------------------------------------------


@pytest.mark.mlflow  # not in `make test`: a first run downloads 850 MB (make test-mlflow; CI runs it)
@pytest.mark.timeout(1800)  # a cold virtualenv downloads MLflow; the server starts in a minute or two
def test_an_mlflow_import_reads_every_version_and_alias_from_a_live_server(cli, tmp_path):
    from tests.mlflow_server import MlflowServer, mlflow_python

    began = time.monotonic()
    python = mlflow_python()
    server = MlflowServer(python, tmp_path)
    try:
        server.wait()
        server.write_prompts("first")
        uri = ["--tracking-uri", server.url]

        status, out, _ = cli("import", "mlflow", *uri, "--prompt", "summarizer", "--dry-run")
        assert status == 0
        assert "  mlflow summarizer version 3 -> version 3 (would publish)" in out
        assert "  label production: (new) -> version 2 (would move)" in out
        assert not Bundle.objects.exists()

        status, out, err = cli("import", "mlflow", *uri)  # every prompt on the server
        assert status == 0, err
        versions, labels = _state("summarizer")
        assert [number for number, _ in versions] == [1, 2, 3]
        assert [message.split("\n\n")[0] for _, message in versions] == [
            "first cut",
            "chat, with a system message",
            "structured output",
        ]
        assert labels == {"production": 2, "staging": 3}
        assert [n for n, _ in _state("greeter")[0]] == [1]
        chat = json.loads(bytes(BundleVersion.objects.get(bundle__name="summarizer", number=2).canonical))
        assert chat["system_prompt"] == "You summarize {{ topic }} articles."
        assert chat["model"] == {"name": "gpt-6-luna", "temperature": 0.1, "max_tokens": 200}
        assert chat["metadata"]["imported_from"]["messages"] == [{"role": "user", "content": "{{ text }}"}]
        structured = json.loads(bytes(BundleVersion.objects.get(bundle__name="summarizer", number=3).canonical))
        assert structured["output_schema"]["required"] == ["summary"]

        status, out, _ = cli("import", "mlflow", *uri)
        assert status == 0 and out.count("nothing to import") == 2
        assert _state("summarizer") == (versions, labels)

        # v4 drops v2's variable `topic`: a breaking change for production's sessions, so the
        # label stays until the import is told that is meant.
        server.write_prompts("second")
        status, out, err = cli("import", "mlflow", *uri, "--prompt", "summarizer")
        assert status == 1 and "summarizer: a label was not moved" in err and "--allow-breaking" in err
        # A refused import writes nothing (issue 35): not even the version the label would move to.
        assert _state("summarizer") == (versions, labels)
        status, out, err = cli("import", "mlflow", *uri, "--prompt", "summarizer", "--allow-breaking")
        assert status == 0, err
        assert "  mlflow summarizer version 4 -> version 4 (published)" in out
        assert "  label production: version 2 -> version 4" in out
        assert [n for n, _ in _state("summarizer")[0]] == [1, 2, 3, 4]
        assert _state("summarizer")[1] == {"production": 4, "staging": 3}
    finally:
        server.stop()
    print(f"MLflow import test: {time.monotonic() - began:.0f}s including the server's start")


def test_an_unreachable_mlflow_server_is_a_clear_error(cli):
    status, _, err = cli("import", "mlflow", "--tracking-uri", "http://127.0.0.1:9")
    assert status == 1 and "did not answer" in err and "nothing was imported" in err
