"""Skills in the bundle: publish checks, per-turn routing, turn reports, session (L3) skills
and per-version metrics, through the REST API on a real database."""

import copy

import pytest

from registry.skills_content import MAX_L1_TOKENS, content_errors, content_warnings
from skills.models import SessionSkill
from skills.params import RouterParams
from skills.router import History, Index
from tests.conftest import content, make_api


def card(name, summary, category, keywords, examples, level="L2", **extra):
    return {
        "name": name,
        "summary": summary,
        "description": f"{summary}. Inputs and outputs of {name}; not for anything else.",
        "keywords": keywords,
        "category": category,
        "examples": examples,
        "level": level,
        **extra,
    }


SKILLS = [
    card(
        "greet_customer",
        "Use when a conversation starts",
        "general",
        ["hello", "greeting", "start"],
        ["hi there", "good morning"],
        level="L1",
    ),
    card(
        "refund_order",
        "Use when the customer wants money back",
        "billing",
        ["refund", "money back", "退款"],
        ["I want a refund for order 42", "我要退款"],
    ),
    card(
        "update_invoice",
        "Use when an invoice needs corrections",
        "billing",
        ["invoice", "vat", "发票"],
        ["fix the VAT number on my invoice", "发票抬头写错了"],
    ),
    card(
        "track_parcel",
        "Use when the customer asks where a parcel is",
        "shipping",
        ["tracking", "parcel", "delivery", "物流"],
        ["where is my package", "我的快递到哪了"],
    ),
    card(
        "change_address",
        "Use when the delivery address must change",
        "shipping",
        ["address", "deliver to", "地址"],
        ["please ship it to my office instead", "改一下收货地址"],
    ),
    card(
        "reset_password",
        "Use when someone cannot log in",
        "account",
        ["password", "login", "locked out", "密码"],
        ["I forgot my password", "登录不了"],
        triggers=[r"\bOTP\b"],
    ),
    card(
        "close_account",
        "Use when the customer wants to delete the account",
        "account",
        ["delete account", "close account", "注销"],
        ["please delete my account", "我要注销账号"],
    ),
    card(
        "escalate_human",
        "Use when the customer asks for a person",
        "general",
        ["human", "agent", "manager"],
        ["let me talk to a real person", "转人工"],
        exclusive_group="handoff",
    ),
    card(
        "escalate_bot",
        "Use when another bot should take over",
        "general",
        ["handover", "bot", "transfer"],
        ["transfer me to the sales bot", "换一个机器人"],
        exclusive_group="handoff",
    ),
]


def skills_content(skills=None, **extra):
    return content(skills=copy.deepcopy(skills if skills is not None else SKILLS), **extra)


# Publish checks ----------------------------------------------------------------------------------


def test_a_bundle_with_skills_and_a_policy_publishes(ops):
    ops.post("/api/v1/bundles/", {"name": "support", "description": "d"})
    doc = skills_content(compaction={"keep_tool_results": 3})
    response = ops.post("/api/v1/bundles/support/versions/", {"message": "m", "content": doc})
    assert response.status_code == 201, response.json()
    assert response.json()["content"]["skills"][1]["name"] == "refund_order"


@pytest.mark.parametrize(
    "mutate, path",
    [
        (lambda s: s[1].update(name="RefundOrder"), "skills[1].name"),
        (lambda s: s[2].update(name="refund_order"), "skills[2].name"),
        (lambda s: s[1].update(summary="Use when " + "x" * 60), "skills[1].summary"),
        (lambda s: s[1].update(keywords=["a", "b"]), "skills[1].keywords"),
        (lambda s: s[1].update(keywords=[str(i) for i in range(11)]), "skills[1].keywords"),
        (lambda s: s[1].update(examples=["only one"]), "skills[1].examples"),
        (lambda s: s[1].update(level="L3"), "skills[1].level"),
        (lambda s: s[1].update(triggers=["(unclosed"]), "skills[1].triggers[0]"),
        (lambda s: s[1].update(colour="red"), "skills[1].colour"),
        (lambda s: s[1].pop("category"), "skills[1].category"),
        (lambda s: s[1].update(exclusive_group=""), "skills[1].exclusive_group"),
    ],
)
def test_field_rules_refuse_the_publish(ops, mutate, path):
    skills = copy.deepcopy(SKILLS)
    mutate(skills)
    assert path in dict(content_errors({"skills": skills}))
    ops.post("/api/v1/bundles/", {"name": "support", "description": "d"})
    response = ops.post("/api/v1/bundles/support/versions/", {"message": "m", "content": skills_content(skills)})
    assert response.status_code == 400
    assert f"content.{path}" in response.json()["error"]["details"]


def test_at_most_eight_resident_skills():
    skills = [
        card(f"resident_{i}", "Use when needed", "general", ["a", "b", "c"], ["x", "y"], level="L1") for i in range(9)
    ]
    assert [p for p, _ in content_errors({"skills": skills})] == ["skills"]
    assert content_errors({"skills": skills[:8]}) == []


def test_the_resident_cards_must_fit_the_token_budget_counting_chinese():
    long = card("big", "Use when needed", "general", ["a", "b", "c"], ["x", "y"], level="L1")
    long["description"] = "退款" * 760  # 1,520 CJK characters: over 1,500 tokens on its own
    errors = content_errors({"skills": [long]})
    assert errors and "budget is 1500" in errors[0][1]
    long["description"] = "退款" * 700
    assert content_errors({"skills": [long]}) == []
    assert MAX_L1_TOKENS == 1500


def test_warnings_for_summaries_without_when_and_for_look_alikes(ops):
    skills = copy.deepcopy(SKILLS)
    skills[1]["summary"] = "Refunds an order"
    skills.append(
        card(
            "refund_order_fast",
            "Use when the customer wants money back fast",
            "billing",
            ["refund", "money back", "退款"],
            ["refund it now", "快点退款"],
        )
    )
    warnings = dict(content_warnings({"skills": skills}))
    assert "skills[1].summary" in warnings
    assert "skills[9]" in warnings and "refund_order" in warnings["skills[9]"]
    # escalate_human / escalate_bot share an exclusive group: never warned as look-alikes.
    assert not any("escalate_bot" in message for message in warnings.values())
    ops.post("/api/v1/bundles/", {"name": "support", "description": "d"})
    response = ops.post("/api/v1/bundles/support/versions/", {"message": "m", "content": skills_content(skills)})
    assert response.status_code == 201
    paths = [w["path"] for w in response.json()["warnings"]]
    assert "content.skills[1].summary" in paths and "content.skills[9]" in paths


def test_a_card_whose_examples_miss_a_language_the_bundle_speaks_is_warned():
    bilingual = card(
        "refund_order", "Use when money goes back", "billing", ["refund", "a", "b"], ["refund it", "我要退款"]
    )
    english = card("track_parcel", "Use when a parcel is late", "shipping", ["parcel", "a", "b"], ["where is it"])
    chinese = card("change_address", "Use when the address changes", "shipping", ["address", "a", "b"], ["改地址"])
    warnings = dict(content_warnings({"skills": [bilingual, english, chinese]}))
    assert "Chinese" in warnings["skills[1].examples"] and "Latin" in warnings["skills[2].examples"]
    assert "skills[0].examples" not in warnings
    # One language in the whole bundle: nothing to warn about (the test split's English-only cards).
    assert not any(k.endswith(".examples") for k in dict(content_warnings({"skills": [english, english]})))


# The router (pure) -------------------------------------------------------------------------------


def _route(text, history=None, k=5, messages=None):
    return Index(SKILLS).route(messages or [{"role": "user", "content": text}], k=k, history=history)


def test_it_routes_english_chinese_and_mixed_messages():
    assert _route("I'd like my money back for order 7").routed[0]["name"] == "refund_order"
    assert _route("我的快递到哪了？三天了还没到").routed[0]["name"] == "track_parcel"
    assert _route("帮我 reset 一下 password").routed[0]["name"] == "reset_password"
    result = _route("I'd like my money back for order 7")
    assert result.resident == ["greet_customer"] and result.categories[0] == "billing"


def test_a_follow_up_routes_from_the_last_two_turns():
    messages = [
        {"role": "user", "content": "Where is my parcel? The tracking page is blank."},
        {"role": "assistant", "content": "It left the depot this morning."},
        {"role": "user", "content": "and the other one?"},
    ]
    assert _route("", messages=messages).routed[0]["name"] == "track_parcel"


def test_a_trigger_puts_its_skill_among_the_routed():
    result = _route("my OTP never arrives and my refund is late", k=2)
    assert "reset_password" in [r["name"] for r in result.routed]
    assert "trigger" in next(r["why"] for r in result.routed if r["name"] == "reset_password")


def test_members_of_an_exclusive_group_never_appear_together():
    result = _route("transfer me to a human agent or another bot, a manager, anyone", k=5)
    names = [r["name"] for r in result.routed]
    assert len({"escalate_human", "escalate_bot"} & set(names)) == 1


def test_a_skill_loaded_twice_and_never_invoked_is_demoted_unless_pointed_at():
    loaded = frozenset({"track_parcel", "change_address"})
    history = History(loaded=[loaded, loaded], invoked=[frozenset(), frozenset({"change_address"})])
    messages = [
        {"role": "user", "content": "where is my parcel"},
        {"role": "assistant", "content": "On its way."},
        {"role": "user", "content": "ok, when will it come?"},
    ]
    result = _route("", messages=messages, history=history)
    assert "track_parcel" not in [r["name"] for r in result.routed] and result.demoted == ["track_parcel"]
    messages[-1]["content"] = "ok, and the tracking number?"
    assert "track_parcel" in [r["name"] for r in _route("", messages=messages, history=history).routed]
    # An unreported turn is no evidence: nothing is demoted.
    unreported = History(loaded=[loaded, loaded], invoked=[None, frozenset()])
    assert _route("", messages=messages[:2] + [{"role": "user", "content": "when?"}], history=unreported).demoted == []


def test_keywords_are_matched_once_per_turn_for_every_card_that_carries_them():
    # Two cards share "parcel" (the index keeps the keyword once, with both cards); one has
    # "tracking", which the context holds and the newest message does not.
    skills = [
        card("track_parcel", "Use when asking where a parcel is", "shipping", ["parcel", "tracking"], ["where is it"]),
        card("insure_parcel", "Use when a parcel needs cover", "shipping", ["parcel", "insurance"], ["cover it"]),
        card("change_address", "Use when the address changes", "shipping", ["address"], ["new address"]),
    ]
    index = Index(skills)
    messages = [
        {"role": "user", "content": "the tracking page is blank"},
        {"role": "assistant", "content": "Let me look."},
        {"role": "user", "content": "it is a big parcel, not a parcels-only box"},
    ]
    why = {r["name"]: r["why"] for r in index.route(messages, k=5).routed}
    assert "keywords parcel" in why["track_parcel"] and "keywords parcel" in why["insure_parcel"]
    assert "keywords in context" not in why["track_parcel"]  # a hit in the newest message wins
    messages[-1]["content"] = "and the new flat?"
    why = {r["name"]: r["why"] for r in index.route(messages, k=5).routed}
    assert "keywords in context" in why["track_parcel"] and "keywords" not in why.get("insure_parcel", "")


def test_routing_reads_a_card_description_up_to_its_bound():
    # The worst description (4,000 characters, the publishing limit) is read up to
    # max_description_chars: a word just inside it routes, a word just past it does not.
    MAX_DESCRIPTION_CHARS = RouterParams().max_description_chars  # noqa: N806

    filler = "padding " * (MAX_DESCRIPTION_CHARS // 8)
    inside = filler[: MAX_DESCRIPTION_CHARS - len(" zorblax")] + " zorblax"
    past = (inside + " quuxify " + filler * 3)[:4000]
    skills = [
        dict(card("bulk_export", "Use when exporting data", "data", ["export"], ["export it"]), description=past),
        card("change_address", "Use when the address changes", "shipping", ["address"], ["new address"]),
    ]
    index = Index(skills, params=RouterParams(semantic=False))
    assert len(skills[0]["description"]) == 4000 and past.index("quuxify") > MAX_DESCRIPTION_CHARS
    assert [r["name"] for r in index.route([{"role": "user", "content": "zorblax"}]).routed] == ["bulk_export"]
    assert index.route([{"role": "user", "content": "quuxify"}]).routed == []


# The REST API ------------------------------------------------------------------------------------


@pytest.fixture
def session_id(ops, agent):
    ops.post("/api/v1/bundles/", {"name": "support", "description": "d"})
    published = ops.post("/api/v1/bundles/support/versions/", {"message": "m", "content": skills_content()})
    assert published.status_code == 201, published.json()
    started = agent.post("/api/v1/sessions/", {"bundle": "support", "version": 1})
    return started.json()["id"]


def test_route_answers_resident_routed_session_categories_and_turn(agent, session_id):
    url = f"/api/v1/sessions/{session_id}/route/"
    first = agent.post(url, {"messages": [{"role": "user", "content": "I want a refund"}], "k": 3})
    assert first.status_code == 200, first.json()
    body = first.json()
    assert body["resident"] == ["greet_customer"] and body["turn"] == 1 and body["session"] == []
    assert body["routed"][0]["name"] == "refund_order" and len(body["routed"]) <= 3
    assert set(body["routed"][0]) == {"name", "score", "category", "why"}
    assert body["categories"][0] == "billing"
    second = agent.post(url, {"messages": [{"role": "user", "content": "where is my parcel"}]})
    assert second.json()["turn"] == 2


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"messages": []},
        {"messages": [{"role": "assistant", "content": "hi"}]},
        {"messages": "x"},
        {"messages": [{"role": "user", "content": "x"}], "k": 0},
        {"messages": [{"role": "user", "content": 5}]},
    ],
)
def test_route_refuses_bad_requests(agent, session_id, body):
    response = agent.post(f"/api/v1/sessions/{session_id}/route/", body)
    assert response.status_code == 400 and response.json()["error"]["code"] == "validation_error"


def test_turn_reports_feed_the_metrics(agent, session_id):
    url = f"/api/v1/sessions/{session_id}/"
    one = agent.post(url + "route/", {"messages": [{"role": "user", "content": "I want a refund"}], "k": 2}).json()
    two = agent.post(url + "route/", {"messages": [{"role": "user", "content": "where is my parcel"}]}).json()
    loads = len(one["routed"]) + len(two["routed"])
    assert "refund_order" in [r["name"] for r in one["routed"]]
    assert agent.post(url + "turns/", {"turn": 1, "invoked": ["refund_order"]}).status_code == 200
    # a skill the second turn did not load (the semantic path may fill k with near neighbours)
    unloaded = next(
        c["name"] for c in SKILLS if c["level"] == "L2" and c["name"] not in {r["name"] for r in two["routed"]}
    )
    assert agent.post(url + "turns/", {"turn": 2, "invoked": [unloaded]}).status_code == 200
    assert agent.post(url + "turns/", {"turn": 9, "invoked": []}).status_code == 404
    assert agent.post(url + "turns/", {"turn": 1, "invoked": "refund_order"}).status_code == 400
    metrics = agent.get("/api/v1/bundles/support/versions/1/metrics/").json()
    assert metrics["turns"] == 2 and metrics["reported_turns"] == 2 and metrics["invocations"] == 2
    assert metrics["load_hit_rate"] == 0.5  # refund_order was loaded; the other was not
    # of the routed skills loaded, only refund_order was invoked
    assert metrics["routed_loads"] == loads and metrics["invalid_load_rate"] == round((loads - 1) / loads, 4)
    assert 0 < metrics["routing_latency_ms"]["p50"] <= metrics["routing_latency_ms"]["p99"]
    # turn 1 invoked a loaded skill, turn 2 one outside the loaded ones: one decision error of two
    assert metrics["decided_turns"] == 2 and metrics["decision_error_rate"] == 0.5
    empty = agent.get("/api/v1/bundles/refunds/versions/1/metrics/")
    assert empty.status_code == 404


def test_a_label_of_the_needed_skill_makes_a_loaded_but_wrong_invocation_a_decision_error(agent, session_id):
    url = f"/api/v1/sessions/{session_id}/"
    agent.post(url + "route/", {"messages": [{"role": "user", "content": "I want a refund"}], "k": 3})
    metrics_url = "/api/v1/bundles/support/versions/1/metrics/"
    ok = agent.post(url + "turns/", {"turn": 1, "invoked": ["refund_order"], "expected": ["refund_order"]})
    assert ok.status_code == 200 and ok.json()["expected"] == ["refund_order"]
    assert agent.get(metrics_url).json()["decision_error_rate"] == 0.0
    # The same turn reported again with another label replaces the first report's contribution.
    wrong = agent.post(url + "turns/", {"turn": 1, "invoked": ["refund_order"], "expected": ["update_invoice"]})
    assert wrong.status_code == 200
    metrics = agent.get(metrics_url).json()
    assert metrics["decided_turns"] == 1 and metrics["decision_error_rate"] == 1.0
    # Nothing invoked: no decision, so no error either.
    agent.post(url + "turns/", {"turn": 1, "invoked": [], "expected": ["update_invoice"]})
    metrics = agent.get(metrics_url).json()
    assert metrics["decided_turns"] == 0 and metrics["decision_error_rate"] is None
    for bad in ("refund_order", [f"s{i}" for i in range(101)], [""], [5]):
        refused = agent.post(url + "turns/", {"turn": 1, "invoked": [], "expected": bad})
        assert refused.status_code == 400 and "expected" in refused.json()["error"]["details"], bad


def test_session_skills_are_private_lapse_after_ten_idle_turns_and_go_with_the_session(agent, session_id):
    url = f"/api/v1/sessions/{session_id}/"
    new = {"name": "summarise_pdf", "summary": "Use when a PDF was uploaded", "description": "d", "source": "tool"}
    assert agent.post(url + "skills/", new).status_code == 201
    assert agent.post(url + "skills/", new).status_code == 200  # replaced by name
    assert agent.post(url + "skills/", {**new, "name": "refund_order"}).status_code == 409
    assert agent.post(url + "skills/", {**new, "name": "Bad Name"}).status_code == 400
    assert [c["name"] for c in agent.get(url + "skills/").json()["results"]] == ["summarise_pdf"]
    # Another session of the same key does not see it.
    other = agent.post("/api/v1/sessions/", {"bundle": "support", "version": 1}).json()["id"]
    assert agent.get(f"/api/v1/sessions/{other}/skills/").json()["results"] == []
    message = {"messages": [{"role": "user", "content": "hello"}]}
    for turn in range(1, 11):
        assert agent.post(url + "route/", message).json()["session"] == ["summarise_pdf"], turn
    agent.post(url + "turns/", {"turn": 10, "invoked": ["summarise_pdf"]})
    for turn in range(11, 21):
        assert agent.post(url + "route/", message).json()["session"] == ["summarise_pdf"], turn
    assert agent.post(url + "route/", message).json()["session"] == []  # turn 21: ten idle turns since 10
    assert agent.get(url + "skills/").json()["results"] == []
    agent.post(url + "skills/", new)
    assert agent.client.delete(url + "skills/summarise_pdf/").status_code == 204
    assert agent.client.delete(url + "skills/summarise_pdf/").status_code == 404
    agent.post(url + "skills/", new)
    agent.post(url + "end/")
    assert not SessionSkill.objects.filter(session_id=session_id).exists()
    assert agent.get(url + "skills/").status_code == 410
    assert agent.post(url + "route/", message).status_code == 410
    stranger = make_api("agent", name="stranger")
    assert stranger.get(f"/api/v1/sessions/{other}/skills/").status_code == 404


def test_the_admin_version_page_shows_the_cards_and_the_metrics(agent, session_id, db):
    from tests.adminui.test_adminui_views import PROMPT_ENGINEERS, client_for, make_user, u, words

    url = f"/api/v1/sessions/{session_id}/"
    agent.post(url + "route/", {"messages": [{"role": "user", "content": "I want a refund"}]})
    agent.post(url + "turns/", {"turn": 1, "invoked": ["refund_order"]})
    page = words(client_for(make_user("pat", PROMPT_ENGINEERS)).get(u("adminui_version", "support", 1)))
    assert "Skills" in page and "refund_order" in page and "Use when the customer wants money back" in page
    assert "Load hit rate 1.0" in page and "Turns routed 1 in 1 session; 1 reported" in page
    assert "Decision error rate 0.0 of 1 turn that invoked a skill" in page
    assert "keep the last 5 tool results" in page and "Resident cards about" in page


def test_client_input_never_makes_a_500(agent, session_id):
    url = f"/api/v1/sessions/{session_id}/"
    agent.post(url + "route/", {"messages": [{"role": "user", "content": "refund"}]})
    assert agent.post(url + "turns/", {"turn": 2**40, "invoked": []}).status_code == 400
    assert agent.post(url + "turns/", {"turn": 1, "invoked": ["a\x00b"]}).status_code == 400
    nul = {"name": "ok_name", "summary": "Use when x\x00", "description": "d", "source": "user"}
    assert agent.post(url + "skills/", nul).status_code == 400
    assert agent.post(url + "skills/", {**nul, "summary": "fine", "source": "\x00"}).status_code == 400
    surrogate = '{"name": "ok_name", "summary": "\\ud800", "description": "d", "source": "user"}'
    assert agent.post(url + "skills/", surrogate).status_code == 400
    assert agent.post(url + "turns/", '{"turn": 1, "invoked": ["\\udfff"]}').status_code == 400
    lone = '{"messages": [{"role": "tool", "content": "\\ud800"}]}'
    assert agent.post(f"/api/v1/sessions/{session_id}/compact/", lone).status_code == 400
    assert (
        agent.post(url + "route/", '{"messages": [{"role": "user", "content": "\\ud800 refund"}]}').status_code == 200
    )
    weird = {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}, "x", {"text": "\x00 refund"}]}]}
    assert agent.post(url + "route/", weird).status_code == 200
    assert agent.post(url + "route/", {"messages": [{"role": "user", "content": "x"}], "k": 5.0}).status_code == 400


def test_a_route_call_is_a_handful_of_statements(agent, session_id, django_assert_max_num_queries):
    url = f"/api/v1/sessions/{session_id}/route/"
    body = {"messages": [{"role": "user", "content": "where is my parcel"}]}
    agent.post(url, body)  # warm: the content and the index are cached per process
    # Key, session (one joined read), the last two turns, the L3 cards, and the insert in its
    # savepoint; no per-skill or per-message query.
    with django_assert_max_num_queries(7) as captured:
        assert agent.post(url, body).status_code == 200
    assert not any("skills_skillturn" in q["sql"] and "UPDATE" in q["sql"] for q in captured.captured_queries)
