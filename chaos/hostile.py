"""The hostile-input corpus: about 600 requests that a careless or malicious client sends.
Lone surrogates, NUL, huge keys and values, broken or deep JSON, wrong types and content types,
forged cursors, odd paths. Each must get a non-5xx answer in the contract's error shape."""

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from chaos.client import content

LONE = "\ud800"
KEYS = [LONE, "\udfff", "\x00", "a\x00b", "k" * 100_000, "\ud83d\ude00\ud800", "", " ", "__proto__", "$where"]
VALUES: list[Any] = [
    LONE,
    "a\x00b",
    "x" * 20_000,
    "\udc80tail",
    None,
    True,
    -1,
    2**70,
    1e308,
    [],
    {},
    [[[[]]]],
    "lookup\n",
]
RAW_BODIES = [
    b"",
    b"\xff\xfe\xfd",
    b'{"name": "x"',
    b"[]",
    b"null",
    b"1e999999",
    b"[" * 5000 + b"]" * 5000,
    b'{"a":' * 3000 + b"1" + b"}" * 3000,
    b"\xef\xbb\xbf{}",
    b'{"name": "\\ud800"}',
    b'{"name": "\\u0000"}',
    b'{"name": "x", "name": "y"}',
    b"{\x00}",
]
CONTENT_TYPES = [
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/json; charset=latin-1",
]


def _body(doc: Any) -> bytes:
    return json.dumps(doc).encode("ascii")  # lone surrogates become \udXXX escapes, as a client sends them


def corpus(session_id: str) -> Iterator[tuple[str, str, bytes | None, dict[str, str]]]:
    """(method, path, body, headers) of every hostile request."""
    writes: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", "/api/v1/bundles/", {"name": "hostile", "description": "d"}),
        ("POST", "/api/v1/bundles/load/versions/", {"content": content("hostile"), "message": "m"}),
        ("PUT", "/api/v1/bundles/load/labels/staging/", {"version": 1, "reason": "r"}),
        ("POST", "/api/v1/bundles/load/labels/production/rollback/", {"to_version": 1, "reason": "r"}),
        ("POST", "/api/v1/bundles/load/versions/9/revoke/", {"reason": "r"}),
        ("POST", "/api/v1/sessions/", {"bundle": "load", "external_id": "e"}),
        ("POST", f"/api/v1/sessions/{session_id}/heartbeat/", {}),
        ("POST", f"/api/v1/sessions/{session_id}/render/", {}),
    ]
    for method, path, valid in writes:
        for key in KEYS:
            yield method, path, _body({**valid, key: 1}), {}
        for field in [f for f, v in valid.items() if isinstance(v, (str, int))]:
            for value in VALUES:
                yield method, path, _body({**valid, field: value}), {}
        for raw in RAW_BODIES:
            yield method, path, raw, {}
        for content_type in CONTENT_TYPES:
            yield method, path, _body(valid), {"Content-Type": content_type}
        yield method, path, _body(valid), {"Content-Length": "-1"}
        yield method, path, _body(valid), {"Content-Length": "99999999999999999999"}
        yield method, path, _body(valid), {"Accept": "text/html"}
    doc = content("hostile")
    tool = doc["tools"][0]
    for value in VALUES + KEYS:
        yield (
            "POST",
            "/api/v1/bundles/load/versions/",
            _body({"content": {**doc, "system_prompt": value}, "message": "m"}),
            {},
        )
        yield (
            "POST",
            "/api/v1/bundles/load/versions/",
            _body({"content": {**doc, "tools": [{**tool, "name": value}]}, "message": "m"}),
            {},
        )
    for key in KEYS:
        yield "POST", "/api/v1/bundles/load/versions/", _body({"content": {**doc, key: 1}, "message": "m"}), {}
    reads = [
        "/api/v1/bundles/",
        "/api/v1/bundles/load/versions/",
        "/api/v1/bundles/load/labels/production/history/",
        "/api/v1/audit/",
        "/api/v1/sessions/",
        "/api/v1/catalog/",
    ]
    queries = [
        "cursor=%00",
        "cursor=AAAA",
        "cursor=garbage!",
        "cursor=" + "A" * 10_000,
        "limit=-1",
        "limit=99999999999999999999999",
        "limit=%00",
        "since=not-a-date",
        "since=9999-99-99",
        "actor=%ED%A0%80",
        "target=%00",
        "against=abc",
    ]
    for path in reads:
        for query in queries:
            yield "GET", f"{path}?{query}", None, {}
    for query in ["against=abc", "against=-1", "against=99999999999999999999", "against=%00"]:
        yield "GET", f"/api/v1/bundles/load/versions/2/diff/?{query}", None, {}
    odd_paths = [
        "/api/v1/bundles/%00/",
        "/api/v1/bundles/%ED%A0%80/",
        "/api/v1/bundles/" + "a" * 10_000 + "/",
        "/api/v1/bundles/load/versions/99999999999999999999999/",
        "/api/v1/bundles/load/versions/-1/",
        "/api/v1/bundles/load/labels/%00/",
        "/api/v1/bundles/load/labels/" + "l" * 5000 + "/",
        "/api/v1/sessions/not-a-uuid/bundle/",
        "/api/v1/sessions/00000000-0000-0000-0000-000000000000/bundle/",
        f"/api/v1/sessions/{session_id}%00/bundle/",
        "/api/v1/knowledge/%00/files/",
        "/api/v1/knowledge/x/files/../../etc/passwd",
        "/api/v1/bundles/load/versions/1/../../../",
        "/api/v1/../../admin/",
        "/api/v1/bundles/load/versions/1/?%00=1",
    ]
    # The model's file tools (issue 18): compile bombs, backtracking and unsupported patterns,
    # glob bombs and out-of-range offsets; the session's version lists no packs, so the bounds on
    # the text are what answers (400), and nothing is compiled.
    tool = f"/api/v1/sessions/{session_id}/knowledge"
    for pattern in [
        "(?:a{60000}){60000}",
        "((a{100}){100}){100}",
        "(a+)+$",
        "(\\w)\\1",
        "(?<=x)y",
        "x" * 5000,
        "(" * 40 + "a" + ")" * 40,
        "%00",
        "%ED%A0%80",
    ]:
        yield "GET", f"{tool}/grep?pattern={quote(pattern, safe='%')}", None, {}
    for pattern in ["knowledge/" + "*a" * 40, "**/" * 20 + "*", "knowledge/{" + "a," * 300 + "}", "k" * 5000]:
        yield "GET", f"{tool}/glob?pattern={quote(pattern)}", None, {}
    for query in ["offset=99999999999999999999", "offset=-1", "offset=1e9", "path=knowledge/" + "d/" * 400]:
        yield "GET", f"{tool}/ls?{query}", None, {}
    for path in odd_paths:
        for method in ("GET", "POST", "PUT", "DELETE"):
            yield method, path, b"{}" if method != "GET" else None, {}
