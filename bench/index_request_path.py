"""Another key's pinned fetch while a big version is routed for the first time in the same web
process (issue 36): before, the first route call built the version's index in the web thread
(`inline`: SKILL_INDEX_INLINE_COST above the version's cost); now it routes by keywords
and asks the worker (`keywords`), or loads the index the worker stored (`loaded`). Run through
pytest on the real PostgreSQL and Redis (no worker is started: the build it asks for waits in
the queue, purged after); `-k inline` and so on for one way alone, in a process of its own:

    python -m devtools.stack test bench/index_request_path.py -s -p no:cacheprovider

Prints, for each way, the first route call's wall time and how it routed, and the pinned
fetches (GET /sessions/{id}/bundle/ of another key, one after the other from a second thread
of the same process, as a threaded web worker serves them) while it ran: p50, p90, max.
BENCH_CARDS and BENCH_CHARS set the version (default 440 cards of 400 random ideographs:
the most text MAX_CARD_TEXT_TOTAL lets a version carry)."""

import gc
import os
import random
import statistics
import threading
import time

import pytest

from access.models import Role
from registry.models import BundleVersion
from registry.parsed_content import content_document
from skills import index_store, keyword_router, router
from skills.router import Index
from tests.conftest import make_api
from tests.live import purge_queues
from tests.skills.test_skills import card, content, skills_content

WAYS = {
    "inline": "before (built in the web thread)",
    "keywords": "after, the worker building (keywords)",
    "loaded": "after, the worker's index in Redis (loaded)",
}
CARDS = int(os.environ.get("BENCH_CARDS", "440"))
CHARS = int(os.environ.get("BENCH_CHARS", "400"))


def big_cards() -> list[dict]:
    rng = random.Random(1)
    out = []
    for i in range(CARDS):
        made = card(f"skill_{i}", "Use when it fits", "misc", ["one", "two", "three"], ["an example", "two"])
        made["description"] = "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(CHARS))
        out.append(made)
    return out


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("way", ["inline", "keywords", "loaded"])
def test_pinned_fetch_while_a_big_version_is_first_routed(settings, way):
    settings.SKILL_INDEX_INLINE_COST = 10**9 if way == "inline" else 12_000
    router._INDEXES = None
    keyword_router._KEYWORD_INDEXES.clear()
    index_store._client().delete(*index_store._client().keys("registry:skillindex:*") or ["none"])
    ops, publisher_key, other_key = make_api(Role.OPS), make_api(Role.AGENT, "big"), make_api(Role.AGENT, "other")
    for name, doc in (("big", skills_content(big_cards())), ("small", content("You help."))):
        assert ops.post("/api/v1/bundles/", {"name": name}).status_code == 201
        published = ops.post(f"/api/v1/bundles/{name}/versions/", {"message": "m", "content": doc})
        assert published.status_code == 201, published.content[:500]
    if way == "loaded":  # the worker's entry is there: this process loads it (built here, before timing)
        version = BundleVersion.objects.get(bundle__name="big")
        skills = content_document(version_id=version.pk, content_hash=version.content_hash)["skills"]
        assert index_store.store(version.content_hash, Index(skills))
    big = publisher_key.post("/api/v1/sessions/", {"bundle": "big", "version": 1}).json()["id"]
    small = other_key.post("/api/v1/sessions/", {"bundle": "small", "version": 1}).json()["id"]
    fetch = f"/api/v1/sessions/{small}/bundle/"
    for _ in range(20):  # warm
        assert other_key.get(fetch).status_code == 200
    alone = []
    for _ in range(200):
        began = time.perf_counter()
        other_key.get(fetch)
        alone.append(time.perf_counter() - began)

    gc.collect()  # the set-up's garbage (the `loaded` way's build) is not the route's
    during: list[float] = []
    done = threading.Event()

    def fetcher() -> None:
        from django.db import connection

        try:
            while not done.is_set():
                began = time.perf_counter()
                assert other_key.get(fetch).status_code == 200
                during.append(time.perf_counter() - began)
        finally:
            connection.close()

    thread = threading.Thread(target=fetcher)
    thread.start()
    time.sleep(0.3)
    began = time.perf_counter()
    answer = publisher_key.post(f"/api/v1/sessions/{big}/route/", {"messages": [{"role": "user", "content": "两"}]})
    route_s = time.perf_counter() - began
    time.sleep(0.3)
    done.set()
    thread.join()
    purge_queues()
    assert answer.status_code == 200, answer.content[:300]
    ms = [1000 * v for v in during]
    print(
        f"\n{WAYS[way]}: "
        f"{CARDS} cards of {CHARS} ideographs; first route {route_s:.2f} s, routing {answer.json()['routing']}; "
        f"pinned fetch alone p50 {1000 * statistics.median(alone):.1f} ms; during the route ({len(ms)} fetches) "
        f"p50 {statistics.median(ms):.1f} ms, p90 {_percentile(ms, 0.9):.1f} ms, max {max(ms):.1f} ms"
    )
