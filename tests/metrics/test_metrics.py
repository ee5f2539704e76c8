"""/metrics: the Prometheus text format, guarded by METRICS_TOKEN or loopback, with request
counts per route and state read from the database."""

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.django_db


def _scrape(client: Client, **extra) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get("/metrics", **extra)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_it_counts_requests_per_route_and_reads_active_sessions_from_the_database(agent, production):
    client = Client()
    route = "api/v1/sessions/<uuid:session_id>/bundle/"
    before = _scrape(client)
    started = agent.post("/api/v1/sessions/", {"bundle": "refunds"}).json()
    for _ in range(3):
        assert agent.get(f"/api/v1/sessions/{started['id']}/bundle/").status_code == 200
    after = _scrape(client)
    assert (
        _value(after, "registry_http_requests_total", route=route, method="GET", status="200")
        - _value(before, "registry_http_requests_total", route=route, method="GET", status="200")
        == 3
    )
    timed = "registry_http_request_duration_seconds_count"
    assert _value(after, timed, route=route, method="GET") - _value(before, timed, route=route, method="GET") == 3
    assert _value(after, "registry_sessions_active", bundle="refunds", version="1") == 1
    assert _value(after, "registry_versions", state="live") == 1
    assert (
        _value(after, "registry_session_events_total", event="started")
        - _value(before, "registry_session_events_total", event="started")
        == 1
    )
    agent.post(f"/api/v1/sessions/{started['id']}/end/")
    ended = _scrape(client)
    assert _value(ended, "registry_sessions_active", bundle="refunds", version="1") == 0
    assert (
        _value(ended, "registry_session_events_total", event="ended")
        - _value(after, "registry_session_events_total", event="ended")
        == 1
    )


def test_without_a_token_only_loopback_clients_are_answered(db, settings):
    settings.METRICS_TOKEN = ""
    assert Client(REMOTE_ADDR="127.0.0.1").get("/metrics").status_code == 200
    assert Client(REMOTE_ADDR="203.0.113.9").get("/metrics").status_code == 401


def test_with_a_token_every_scrape_must_send_it(db, settings):
    settings.METRICS_TOKEN = "s3cret-scrape-token"
    client = Client(REMOTE_ADDR="127.0.0.1")
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert (
        Client(REMOTE_ADDR="203.0.113.9").get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-scrape-token").status_code
        == 200
    )


def test_usage_counts_sessions_and_fetches_per_version(agent, production, v2, ops):
    first = agent.post("/api/v1/sessions/", {"bundle": "refunds"}).json()
    second = agent.post("/api/v1/sessions/", {"bundle": "refunds"}).json()
    etag = agent.get(f"/api/v1/sessions/{first['id']}/bundle/")["ETag"]
    assert agent.get(f"/api/v1/sessions/{first['id']}/bundle/", HTTP_IF_NONE_MATCH=etag).status_code == 304
    agent.get(f"/api/v1/sessions/{second['id']}/bundle/")
    agent.post(f"/api/v1/sessions/{second['id']}/end/")
    usage = agent.get("/api/v1/bundles/refunds/versions/1/usage/").json()
    assert usage["bundle"] == "refunds" and usage["version"] == 1
    assert (usage["sessions_started"], usage["sessions_active"], usage["fetches"]) == (2, 1, 3)
    assert usage["first_used_at"] is not None and usage["last_used_at"] >= usage["first_used_at"]
    unused = agent.get("/api/v1/bundles/refunds/versions/2/usage/").json()
    assert (unused["sessions_started"], unused["fetches"], unused["first_used_at"]) == (0, 0, None)
    assert agent.get("/api/v1/bundles/refunds/versions/9/usage/").status_code == 404


def test_usage_is_added_up_across_flushes(agent, production):
    from metrics import usage
    from metrics.models import VersionUsage

    started = agent.post("/api/v1/sessions/", {"bundle": "refunds"}).json()
    for _ in range(2):
        agent.get(f"/api/v1/sessions/{started['id']}/bundle/")
    assert usage.flush() == 1
    agent.get(f"/api/v1/sessions/{started['id']}/bundle/")
    usage.flush()
    assert usage.flush() == 0  # nothing pending
    assert VersionUsage.objects.get().fetches == 3


def test_a_count_for_a_version_that_is_not_there_is_dropped_and_the_rest_are_written(agent, production):
    from metrics import usage
    from metrics.models import VersionUsage

    started = agent.post("/api/v1/sessions/", {"bundle": "refunds"}).json()
    agent.get(f"/api/v1/sessions/{started['id']}/bundle/")
    usage.fetch_recorded(987654321)  # no such version
    usage.flush()
    assert usage.pending(987654321, "fetches") == 0  # dropped, not re-queued
    assert list(VersionUsage.objects.values_list("fetches", flat=True)) == [1]


def test_the_cache_of_labelled_children_stops_growing_at_its_ceiling_and_every_request_is_still_counted(monkeypatch):
    """A bug that let an unbounded label value through must not grow the process's cache without
    end: past the ceiling each pair is looked up again, and still counted."""
    from metrics import instruments

    monkeypatch.setattr(instruments, "_CHILDREN_MAX", len(instruments._children) + 3)
    routes = [f"test/ceiling/{i}" for i in range(10)]
    for route in routes:
        instruments.request_answered(route=route, method="GET", status=200, seconds=0.001)
    instruments.request_answered(route=routes[-1], method="GET", status=200, seconds=0.001)
    assert len(instruments._children) == instruments._CHILDREN_MAX
    assert instruments.REQUESTS.labels(route=routes[-1], method="GET", status="200")._value.get() == 2
    assert instruments.REQUESTS.labels(route=routes[0], method="GET", status="200")._value.get() == 1
