"""The Prometheus instruments, defined once; services and middleware call the small record
functions below. Counters live in each process; with PROMETHEUS_MULTIPROC_DIR set (make run,
the image) every web and Celery process writes its own file there and /metrics adds them up,
so counts survive worker restarts and include the Celery worker's expiries and drains.
State that the database knows (active sessions per version) is read at scrape time instead
(metrics.collectors), so it is never stale and costs the request path nothing."""

from typing import Any

from prometheus_client import Counter, Histogram

from metrics import usage

REQUESTS = Counter(
    "registry_http_requests_total",
    "HTTP requests answered, by route, method and status.",
    ["route", "method", "status"],
)
REQUEST_SECONDS = Histogram(
    "registry_http_request_duration_seconds",
    "Time to answer, by route and method.",
    ["route", "method"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
SESSION_EVENTS = Counter("registry_session_events_total", "Session starts, ends and expiries.", ["event"])
DRAINS = Counter("registry_version_drains_total", "Versions marked drained, by bundle.", ["bundle"])
DRAIN_SECONDS = Histogram(
    "registry_version_drain_seconds",
    "From the moment a version started draining to the moment it was drained.",
    buckets=(0.1, 1, 5, 30, 60, 300, 1800, 3600, 6 * 3600, 24 * 3600, 7 * 24 * 3600),
)
WEBHOOK_DELIVERIES = Counter(
    "registry_webhook_attempts_total", "Webhook delivery attempts, by event and outcome.", ["event", "outcome"]
)
CACHE = Counter("registry_bundle_cache_total", "Pinned-bundle byte lookups, by result.", ["result"])
THROTTLED = Counter("registry_throttled_total", "Requests refused by a rate limit, by group.", ["group"])


def session_event(*, event: str, count: int = 1) -> None:
    SESSION_EVENTS.labels(event=event).inc(count)


def version_drained(*, bundle: str, seconds: float | None) -> None:
    DRAINS.labels(bundle=bundle).inc()
    if seconds is not None:
        DRAIN_SECONDS.observe(max(seconds, 0.0))


# Every label value is one of a bounded set: never a client's text as it came. The method is a
# client's token (any 1 to 200 characters the server passes on), so it is one of RFC 9110's
# methods or "other"; routes are URL templates (Django's resolver_match.route, the fast lane's
# table) or "unmatched", never paths; statuses are the ones the app answers with; bundle names
# only ever come from rows that exist.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"})
# A ceiling on the cached children, should a bug ever let an unbounded value through: past it the
# pair is looked up each time rather than kept (prometheus_client keeps its own children anyway).
_CHILDREN_MAX = 4096


def method_label(method: str) -> str:
    """The `method` label of a request: the standard method, or "other"."""
    return method if method in METHODS else "other"


_children: dict[tuple[str, str, int], tuple[Any, Any]] = {}  # (route, method, status) -> labelled pair


def request_answered(*, route: str, method: str, status: int, seconds: float) -> None:
    method = method_label(method)
    # .labels() looks the child up under a lock each time: keep the pair (bounded by routes).
    pair = _children.get((route, method, status))
    if pair is None:
        pair = (
            REQUESTS.labels(route=route, method=method, status=str(status)),
            REQUEST_SECONDS.labels(route=route, method=method),
        )
        if len(_children) < _CHILDREN_MAX:
            _children[(route, method, status)] = pair
    pair[0].inc()
    pair[1].observe(seconds)


class Instruments:
    """core.instruments' implementation: the Prometheus instruments above and the usage
    counts of metrics.usage. metrics/apps.py registers one at ready()."""

    def session_event(self, *, event: str, count: int) -> None:
        session_event(event=event, count=count)

    def version_drained(self, *, bundle: str, seconds: float | None) -> None:
        version_drained(bundle=bundle, seconds=seconds)

    def cache_lookup(self, *, result: str) -> None:
        CACHE.labels(result=result).inc()

    def throttled(self, *, group: str) -> None:
        THROTTLED.labels(group=group).inc()

    def webhook_attempt(self, *, event: str, ok: bool) -> None:
        WEBHOOK_DELIVERIES.labels(event=event, outcome="delivered" if ok else "failed").inc()

    def sessions_started(self, version_ids: list[int]) -> None:
        usage.sessions_started(version_ids)

    def version_used(self, version_ids: list[int]) -> None:
        usage.version_used(version_ids)

    def turn_routed(self, version_id: int, *, number: int, latency_us: int) -> None:
        usage.turn_routed(version_id, number=number, latency_us=latency_us)

    def turn_reported(
        self,
        version_id: int,
        *,
        loaded: set[str],
        routed: list[str],
        before: list[str] | None,
        after: list[str],
        expected_before: list[str] | None = None,
        expected: list[str] | None = None,
    ) -> None:
        usage.turn_reported(
            version_id,
            loaded=loaded,
            routed=routed,
            before=before,
            after=after,
            expected_before=expected_before,
            expected=expected,
        )
