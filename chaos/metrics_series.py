"""Metrics series added by hostile input: 0.

Every Prometheus series costs memory in each web process and a file entry in
PROMETHEUS_MULTIPROC_DIR that outlives the process, so no label value may come from a client
unchecked (metrics.instruments). This scenario sends a few requests of every hostile kind
(random HTTP method tokens up to 200 characters on Django's, the fast lane's and MCP's paths,
random paths, random bundle names, random session ids, keys that are not keys: past the
failed-auth budget too, so its 429s are among them), scrapes /metrics, sends many more of the
same kinds with other random values, and counts the series that appeared. Series that the
database or the worker own (active sessions, versions, session events, drains, webhook
attempts) are left out: they move with the other scenarios, not with requests."""

import random
import string
import uuid

from prometheus_client.parser import text_string_to_metric_families

from chaos.client import Api, Row
from chaos.stack import Stack

NOT_REQUEST_DRIVEN = (
    "registry_sessions_active",
    "registry_versions",
    "registry_session_events",
    "registry_version_drain",
    "registry_webhook_attempts",
)
TCHAR = string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~"
# RFC 9110's methods (metrics.instruments.METHODS). Django upper-cases a request's method, so a
# random token such as "pUt" arrives as PUT: a standard method, one of the bounded label values,
# not hostile input. Such tokens are drawn again (one did, once in many runs: PUT /healthz).
STANDARD_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"})


def _series(api: Api) -> set[tuple[str, frozenset[tuple[str, str]]]]:
    status, body, _ = api.raw("GET", "/metrics")
    if status != 200:
        raise RuntimeError(f"/metrics answered {status}")
    return {
        (sample.name, frozenset(sample.labels.items()))
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
        if not sample.name.startswith(NOT_REQUEST_DRIVEN)
    }


def _name(rng: random.Random) -> str:
    return rng.choice(string.ascii_lowercase) + "".join(
        rng.choices(string.ascii_lowercase + string.digits + "-", k=rng.randint(0, 40))
    )


def _method(rng: random.Random) -> str:
    """A random method token that is not a standard method in any case."""
    while True:
        token = "".join(rng.choices(TCHAR, k=rng.choice([3, 7, 12, 40, 200])))
        if token.upper() not in STANDARD_METHODS:
            return token


def _requests(rng: random.Random, session: str, *, methods: int, each: int) -> list[tuple[str, str, str | None]]:
    """(method, path, key or None for the suite's own) of hostile requests."""
    lanes = [
        "/api/v1/bundles/",
        "/healthz",
        "/admin/login/",
        "/api/v1/sessions/",
        f"/api/v1/sessions/{session}/bundle/",
        f"/api/v1/sessions/{session}/heartbeat/",
        "/mcp",
    ]
    out: list[tuple[str, str, str | None]] = [(_method(rng), lanes[n % len(lanes)], None) for n in range(methods)]
    for _ in range(each):
        segments = "/".join(_name(rng) for _ in range(rng.randint(1, 4)))
        out.append(("GET", rng.choice(["/", "/api/v2/", "/api/v1/sessions/", "/static/", "/x/"]) + segments, None))
        # A random name that no scenario can have created (the hostile scenario creates bundles
        # with names of its own): a 200 for an existing bundle is a bounded series, not hostile.
        out.append(("GET", f"/api/v1/bundles/no-such-{_name(rng)}/", None))
        out.append(("GET", f"/api/v1/sessions/{uuid.UUID(int=rng.getrandbits(128))}/bundle/", None))
        fake = "pr_" + "".join(rng.choices(string.ascii_letters + string.digits, k=43))
        out.append(("GET", f"/api/v1/sessions/{session}/bundle/", fake))
        out.append(("GET", "/api/v1/bundles/", fake))
    return out


def metrics_series(stack: Stack, api: Api, *, methods: int, each: int) -> list[Row]:
    session = api.ok("POST", "/api/v1/sessions/", {"bundle": "load"})["id"]
    rng = random.Random()
    statuses: dict[int, int] = {}

    def send(batch: list[tuple[str, str, str | None]]) -> None:
        for method, path, key in batch:
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            status, _, _ = api.raw(method, path, None, headers)
            statuses[status] = statuses.get(status, 0) + 1

    # Every kind a few times; the fake keys 130 times, so that one minute's window sees more
    # than the failed-auth budget (60/m) and its 429s are among the series already there.
    send(_requests(rng, session, methods=70, each=65))
    _series(api)  # the scrape's own series
    before = _series(api)
    statuses.clear()
    send(_requests(rng, session, methods=methods, each=each))
    added = _series(api) - before
    sent = sum(statuses.values())
    bad = sum(n for status, n in statuses.items() if status >= 500 or status == 0)
    # Whole labels, sorted, so the row names the series (route first) and can be chased.
    shown = "; ".join(sorted(f"{name}{{{', '.join(f'{k}={v}' for k, v in sorted(labels))}}}" for name, labels in added))
    return [
        ("metrics series", "hostile requests; 5xx or no answer", f"{sent}; {bad}", bad == 0),
        (
            "metrics series",
            "metrics series added by hostile input",
            str(len(added)) + (f" ({shown})" if added else ""),
            not added,
        ),
    ]
