"""edge.http decides what Django's middleware decides, for the lanes that answer without it
(the fast lane, /mcp): the same settings give the same headers, hosts and redirects."""

import pytest
from django.core.exceptions import DisallowedHost
from django.http import HttpResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.security import SecurityMiddleware
from django.test import RequestFactory, override_settings

from edge.http import headers_of, host_allowed, https_redirect, request_is_secure, security_headers

SECURITY_SETTINGS = [
    {},
    {"SECURE_HSTS_SECONDS": 3600},
    {"SECURE_HSTS_SECONDS": 3600, "SECURE_HSTS_INCLUDE_SUBDOMAINS": True, "SECURE_HSTS_PRELOAD": True},
    {"SECURE_REFERRER_POLICY": None, "SECURE_CROSS_ORIGIN_OPENER_POLICY": None, "X_FRAME_OPTIONS": "SAMEORIGIN"},
    {"SECURE_CONTENT_TYPE_NOSNIFF": False, "SECURE_REFERRER_POLICY": "no-referrer"},
]


def _scope(path: str, headers: dict[str, str], scheme: str = "http") -> dict:
    return {
        "type": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "scheme": scheme,
        "headers": [(name.lower().encode(), value.encode()) for name, value in headers.items()],
    }


@pytest.mark.parametrize("secure", [False, True])
@pytest.mark.parametrize("overrides", SECURITY_SETTINGS)
def test_it_adds_the_headers_the_security_and_frame_middleware_add(overrides, secure):
    with override_settings(**overrides):
        request = RequestFactory().get("/api/v1/", secure=secure)
        django = XFrameOptionsMiddleware(SecurityMiddleware(lambda request: HttpResponse()))(request)
        expected = {name.lower(): value for name, value in django.items() if name.lower() != "content-type"}
        assert {name.decode(): value.decode() for name, value in security_headers(secure)} == expected


@pytest.mark.parametrize(
    "host",
    ["localhost", "localhost:8000", "127.0.0.1", "evil.example", "localhost.evil.example", "[::1]", "a b", "x.example"],
)
@pytest.mark.parametrize("allowed", [["localhost", "127.0.0.1"], [".example"], ["*"]])
def test_it_allows_the_hosts_django_allows(host, allowed):
    with override_settings(ALLOWED_HOSTS=allowed):
        request = RequestFactory().get("/", HTTP_HOST=host)
        try:
            request.get_host()
            django_allows = True
        except DisallowedHost:
            django_allows = False
        assert host_allowed(headers_of(_scope("/", {"Host": host}))) is django_allows


@pytest.mark.parametrize(
    "path, headers, scheme",
    [
        ("/api/v1/sessions/", {"Host": "api.example"}, "http"),
        ("/api/v1/sessions/", {"Host": "api.example"}, "https"),
        ("/healthz", {"Host": "api.example"}, "http"),  # exempt below
        ("/api/v1/sessions/", {"Host": "api.example", "X-Forwarded-Proto": "https"}, "http"),
        ("/api/v1/sessions/", {"Host": "api.example", "X-Forwarded-Proto": "http"}, "http"),
    ],
)
def test_it_redirects_to_https_where_the_security_middleware_does(path, headers, scheme):
    with override_settings(
        SECURE_SSL_REDIRECT=True,
        SECURE_REDIRECT_EXEMPT=[r"^healthz$"],
        SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https"),
        ALLOWED_HOSTS=["api.example"],
    ):
        meta = {f"HTTP_{name.upper().replace('-', '_')}": value for name, value in headers.items()}
        request = RequestFactory().get(path, secure=scheme == "https", **meta)
        answer = SecurityMiddleware(lambda request: HttpResponse()).process_request(request)
        scope = _scope(path, headers, scheme)
        assert request_is_secure(scope, headers_of(scope)) is request.is_secure()
        assert https_redirect(scope, headers_of(scope)) == (answer["Location"] if answer is not None else None)


def test_it_joins_repeated_headers_as_the_wsgi_environ_does():
    scope = _scope("/", {})
    scope["headers"] = [(b"x-forwarded-for", b"10.0.0.1"), (b"x-forwarded-for", b"10.0.0.2"), (b"host", b"a")]
    assert headers_of(scope) == {b"x-forwarded-for": b"10.0.0.1,10.0.0.2", b"host": b"a"}
