"""GET /metrics in the Prometheus text format."""

import hmac
import ipaddress
import os

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess

from audit.context import client_ip
from metrics.collectors import DatabaseCollector

_DATABASE = CollectorRegistry()
_DATABASE.register(DatabaseCollector())


def _exposition() -> bytes:
    """This process's instruments, or with PROMETHEUS_MULTIPROC_DIR every web and worker
    process's counters, followed by what the database says now."""
    counters = REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        counters = CollectorRegistry()
        multiprocess.MultiProcessCollector(counters)
    return generate_latest(counters) + generate_latest(_DATABASE)


def _token_sent(request: HttpRequest) -> bool:
    token = settings.METRICS_TOKEN
    sent = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    return bool(token) and hmac.compare_digest(sent.encode(), token.encode())


def _from_loopback(request: HttpRequest) -> bool:
    """The client is on loopback (the address as the trusted proxies report it)."""
    try:
        return ipaddress.ip_address(client_ip(request) or "").is_loopback
    except ValueError:
        return False


def _allowed(request: HttpRequest) -> bool:
    """With METRICS_TOKEN set, a scrape must send it as a Bearer token; without it only
    clients on loopback are answered."""
    if settings.METRICS_TOKEN:
        return _token_sent(request)
    return _from_loopback(request)


def operator_request(request: HttpRequest) -> bool:
    """Whether `request` may see operational details (/readyz's checks): a loopback client, or
    one that sends the metrics token."""
    return _from_loopback(request) or _token_sent(request)


def metrics(request: HttpRequest) -> HttpResponse:
    if not _allowed(request):
        response = HttpResponse("Send the metrics token as a Bearer token.\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    return HttpResponse(_exposition(), content_type=CONTENT_TYPE_LATEST)
