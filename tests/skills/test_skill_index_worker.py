"""The routing index of a big version is built by the worker, off the request path (issue 36,
Medium): the first turn answers at once by keywords and says so, the worker's index (shared
through Redis with an HMAC) is used once stored and the answer says so, a tampered entry is
refused and built again, and the stored index routes exactly as the one built in process."""

import json
import time
from pathlib import Path

import pytest

from skills import index_store, router
from skills.keyword_router import KeywordIndex
from skills.router import Index
from tests.live import QUEUES, celery_workers, purge_queues, worker_command
from tests.skills.test_skills import SKILLS, skills_content

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = [
    [{"role": "user", "content": "I want a refund for order 42"}],
    [{"role": "user", "content": "where is my parcel?"}],
    [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "and the invoice?"},
    ],
    [{"role": "user", "content": "我要退款"}],
]


def _eval_skills() -> list[dict]:
    return json.loads((ROOT / "eval" / "routing" / "skills.json").read_text())


def test_the_stored_index_routes_as_the_one_built_in_process():
    for skills in (SKILLS, _eval_skills()):
        built = Index(skills)
        restored = index_store.restore(skills, index_store.dump(built))
        for messages in MESSAGES:
            assert restored.route(messages, k=5) == built.route(messages, k=5)


def test_bytes_that_do_not_fit_the_cards_are_refused():
    body = index_store.dump(Index(SKILLS))
    with pytest.raises(ValueError):
        index_store.restore(SKILLS[:-1], body)
    with pytest.raises(ValueError):
        index_store.restore(SKILLS, body[:-4])


def test_keyword_routing_finds_keywords_names_and_says_so():
    result = KeywordIndex(SKILLS).route(MESSAGES[0], k=3)
    assert result.routed and result.routed[0]["name"] == "refund_order"
    assert all(r["why"].startswith("keywords only") for r in result.routed)
    assert result.resident == Index(SKILLS).route(MESSAGES[0]).resident


@pytest.fixture
def redis_entries():
    client = index_store._client()
    for key in client.scan_iter("registry:skillindex:*"):
        client.delete(key)
    router._INDEXES = None
    yield client
    for key in client.scan_iter("registry:skillindex:*"):
        client.delete(key)
    router._INDEXES = None


def test_a_tampered_entry_is_refused_and_deleted(db, redis_entries):
    assert index_store.store("h-tamper", Index(SKILLS))
    name = index_store.redis_key("h-tamper")
    assert index_store.load("h-tamper", SKILLS) is not None
    payload = bytearray(redis_entries.get(name))
    payload[-1] ^= 1  # one bit of a card vector
    redis_entries.set(name, bytes(payload))
    assert index_store.load("h-tamper", SKILLS) is None
    assert redis_entries.get(name) is None  # deleted: the next miss asks for a build


def test_a_second_build_task_stops_while_one_builds_and_runs_once_it_is_done(db, redis_entries):
    # The publish's task and a turn's request_build both reach the worker: one builds, one stops.
    lock = "registry:skillindex:lock:h-twice"
    redis_entries.set(lock, b"1", ex=60)  # a build of this content under way elsewhere
    assert index_store.build_and_share(SKILLS, "h-twice") == "building elsewhere"
    assert redis_entries.get(index_store.redis_key("h-twice")) is None  # nothing built here
    redis_entries.delete(lock)
    assert index_store.build_and_share(SKILLS, "h-twice") == "stored"
    assert redis_entries.get(lock) is None  # released after the build
    assert index_store.build_and_share(SKILLS, "h-twice") == "present"


def test_a_build_that_outlives_its_lock_leaves_the_next_builder_s_lock_alone(db, redis_entries, monkeypatch):
    # The lock expires (CLAIM_SECONDS) while a long build runs and another worker takes it: the
    # first, when done, must not release the second's, or a third build would start alongside.
    lock = "registry:skillindex:lock:h-long"
    monkeypatch.setattr(index_store, "CLAIM_SECONDS", 1)

    class SlowIndex(Index):
        def __init__(self, *args, **kwargs):
            deadline = time.monotonic() + 5
            while redis_entries.get(lock) is not None and time.monotonic() < deadline:
                time.sleep(0.05)  # the build outlives its lock
            assert redis_entries.set(lock, b"another worker", nx=True, ex=60)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(index_store, "Index", SlowIndex)
    assert index_store.build_and_share(SKILLS, "h-long") == "stored"
    assert redis_entries.get(lock) == b"another worker"


@pytest.fixture
def worker():
    purge_queues()
    with celery_workers(*(worker_command(queue) for queue in QUEUES)) as lines:
        yield lines


def _wait_for(predicate, seconds: float) -> None:
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {seconds}s")


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_big_version_routes_by_keywords_until_the_worker_built_its_index(ops, agent, settings, redis_entries, worker):
    settings.SKILL_INDEX_INLINE_COST = 10  # the test cards count as a big version
    assert ops.post("/api/v1/bundles/", {"name": "big"}).status_code == 201
    published = ops.post("/api/v1/bundles/big/versions/", {"message": "m", "content": skills_content()})
    assert published.status_code == 201, published.json()
    content_hash = published.json()["content_hash"]
    name = index_store.redis_key(content_hash)
    redis_entries.delete(name)  # whatever the publish's task did: the first turn finds nothing
    session = agent.post("/api/v1/sessions/", {"bundle": "big", "version": 1}).json()["id"]
    url = f"/api/v1/sessions/{session}/"

    first = agent.post(url + "turn/", {"messages": MESSAGES[0]})
    assert first.status_code == 200, first.json()
    assert first.json()["skills"]["routing"] == "keywords"
    assert first.json()["skills"]["routed"][0]["name"] == "refund_order"
    _wait_for(lambda: redis_entries.get(name) is not None, 60)  # the miss asked the worker

    full = agent.post(url + "route/", {"messages": MESSAGES[0]}).json()
    assert full["routing"] == "full"
    assert full["routed"] == Index(SKILLS).route(MESSAGES[0]).routed
    turn = agent.post(url + "turn/", {"messages": MESSAGES[1]}).json()
    assert "routing" not in turn["skills"]  # the full index: the answer as it always was

    payload = bytearray(redis_entries.get(name))
    payload[40] ^= 1
    redis_entries.set(name, bytes(payload))
    router._INDEXES = None  # another web process: nothing cached
    refused = agent.post(url + "route/", {"messages": MESSAGES[0]}).json()
    assert refused["routing"] == "keywords"
    _wait_for(lambda: (entry := redis_entries.get(name)) is not None and entry != bytes(payload), 60)
    assert agent.post(url + "route/", {"messages": MESSAGES[0]}).json()["routing"] == "full"


def _big_labelled_versions(ops, count: int) -> list[str]:
    """`count` versions of bundle `swept`, each the target of a label; their content hashes."""
    assert ops.post("/api/v1/bundles/", {"name": "swept"}).status_code == 201
    hashes = []
    for n in range(count):
        doc = skills_content(system_prompt=f"Version {n}.")
        published = ops.post("/api/v1/bundles/swept/versions/", {"message": "m", "content": doc})
        assert published.status_code == 201, published.json()
        hashes.append(published.json()["content_hash"])
        labelled = ops.put(f"/api/v1/bundles/swept/labels/l{n}/", {"version": n + 1, "reason": "r"})
        assert labelled.status_code in (200, 201), labelled.json()
    return hashes


def test_the_sweep_asks_for_missing_big_labelled_indexes_a_bounded_number_per_run(ops, settings, redis_entries):
    settings.SKILL_INDEX_INLINE_COST = 10  # the test cards count as a big version
    purge_queues()
    hashes = _big_labelled_versions(ops, 3)
    unlabelled = ops.post(
        "/api/v1/bundles/swept/versions/", {"message": "m", "content": skills_content(system_prompt="x")}
    )
    assert unlabelled.status_code == 201
    for key in redis_entries.scan_iter("registry:skillindex:*"):
        redis_entries.delete(key)  # the publishes' tasks lost, and their claims expired
    assert index_store.store(hashes[0], Index(SKILLS))  # this one is there: not asked for
    try:
        assert index_store.sweep(1) == {"labelled": 3, "missing": 1, "sent": 1}
        assert index_store.sweep(1)["sent"] == 1  # the next one: the first is claimed
        assert index_store.sweep(1)["sent"] == 0  # every missing one asked for once per claim
        claims = {h for h in hashes if redis_entries.get(f"registry:skillindex:building:{h}")}
        assert claims == set(hashes[1:])  # not the unlabelled fourth version, nor the stored one
        settings.SKILL_INDEX_INLINE_COST = 10**9  # small versions: built where used, never asked for
        for h in hashes:
            redis_entries.delete(f"registry:skillindex:building:{h}")
        assert index_store.sweep(5)["sent"] == 0
    finally:
        purge_queues()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_the_beat_task_recovers_a_lost_build_without_a_request(ops, redis_entries):
    from django.conf import settings as django_settings

    from config.celery import app as celery_app

    assert django_settings.CELERY_BEAT_SCHEDULE["skill-index-sweep"]["task"] == "skills.tasks.skill_index_sweep_task"
    (content_hash,) = _big_labelled_versions(ops, 1)
    purge_queues()  # the publish's build task lost
    for key in redis_entries.scan_iter("registry:skillindex:*"):
        redis_entries.delete(key)
    name = index_store.redis_key(content_hash)
    with celery_workers(*(worker_command(q) for q in QUEUES), env={"SKILL_INDEX_INLINE_COST": "10"}):
        celery_app.send_task("skills.tasks.skill_index_sweep_task")  # what the beat sends
        _wait_for(lambda: redis_entries.get(name) is not None, 60)
    assert index_store.load(content_hash, SKILLS) is not None  # the worker's index, valid
