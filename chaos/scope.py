"""Cross-scope reads under load (issue 18): keys scoped to `scope-bot` and `scope-open` try
every path that could reach the pack `scope-secret` while an unscoped key uses it too and ops
keep rewriting its DUTY.md (so the render's prefix cache turns over and holds entries that
do show it).

The version `scope-bot` v1, published by the unscoped ops key, lists both packs. The scoped
keys try: publishing a version that lists `scope-secret`; the REST pack endpoints; sessions
started by label and by version number; the file tools (ls, glob, grep, read on and around
the pack); the render, one by one and batched (the fast lane); MCP's get_capability_protocol
(new and continued) and the bundle resource. Any answer that carries the secret marker, and
any publish that is accepted, is a cross-scope read: the invariant is 0. A control checks that
the unscoped key does read the marker, so a zero means something."""

import json
import threading
import time
from collections import Counter
from typing import Any

from chaos.client import Api, Row, content

SECRET = "CHAOS-SCOPE-SECRET"  # in every scope-secret file and DUTY.md; never in a scoped answer
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def _setup(api: Api) -> None:
    for pack in ("scope-open", "scope-secret"):
        api.ok("POST", "/api/v1/knowledge/", {"name": pack})
    files = {
        "scope-open": {"faq/DUTY.md": "# FAQ\n\nOpen answers.\n", "faq/a.md": "open text\n"},
        "scope-secret": {"pay/DUTY.md": f"# Pay\n\n{SECRET}-0\n", "pay/bands.md": f"{SECRET} bands\n"},
    }
    for pack, entries in files.items():
        for path, text in entries.items():
            api.ok("PUT", f"/api/v1/knowledge/{pack}/files/{path}", {"content": text})
    api.ok("POST", "/api/v1/bundles/", {"name": "scope-bot"})
    doc = {**content("scope-bot v1"), "knowledge": ["scope-open", "scope-secret"]}
    api.ok("POST", "/api/v1/bundles/scope-bot/versions/", {"content": doc, "message": "v1"})
    api.ok("PUT", "/api/v1/bundles/scope-bot/labels/production/", {"version": 1, "reason": "chaos"})


def _mcp(api: Api, tool: str, n: int, **arguments: Any) -> tuple[int, bytes]:
    body = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    status, data, _ = api.raw("POST", "/mcp", json.dumps(body).encode(), MCP_HEADERS)
    return status, data


def _attempts(api: Api, n: int) -> list[tuple[str, int, bytes]]:
    """One round of every cross-scope path for a scoped key: (path kind, status, body)."""
    out: list[tuple[str, int, bytes]] = []

    def get(kind: str, method: str, path: str, doc: Any = None) -> Any:
        status, data, _ = api.raw(method, path, json.dumps(doc).encode() if doc is not None else None)
        out.append((kind, status, data))
        try:
            return json.loads(data)
        except ValueError:
            return None

    doc = {**content(f"scope-bot leak {n}"), "knowledge": ["scope-open", "scope-secret"]}
    get("publish", "POST", "/api/v1/bundles/scope-bot/versions/", {"content": doc, "message": "leak"})
    get("pack api", "GET", "/api/v1/knowledge/scope-secret/files/")
    get("pack api", "GET", "/api/v1/knowledge/scope-secret/files/pay/bands.md")
    get("pack api", "GET", "/api/v1/knowledge/")
    sessions = []
    for body in ({"bundle": "scope-bot"}, {"bundle": "scope-bot", "version": 1}):
        started = get("session start", "POST", "/api/v1/sessions/", body)
        if isinstance(started, dict) and "id" in started:
            sessions.append(started["id"])
    for session in sessions:
        base = f"/api/v1/sessions/{session}"
        for query in (
            "ls?path=knowledge/",
            "ls?path=knowledge/scope-secret/",
            "ls?path=knowledge/scope-secret/pay/",
            "read?path=knowledge/scope-secret/pay/bands.md",
            "read?path=knowledge/scope-secret/pay/DUTY.md",
            f"grep?pattern={SECRET}",
            "grep?pattern=.&path=knowledge/scope-secret/",
            "glob?pattern=knowledge/**",
            "glob?pattern=**/*.md",
        ):
            get("file tools", "GET", f"{base}/knowledge/{query}")
        get("render", "POST", f"{base}/render/")
        get("pinned bundle", "GET", f"{base}/bundle/")
        status, data = _mcp(api, "get_capability_protocol", n, capability="scope-bot", session_id=session)
        out.append(("mcp protocol", status, data))
    status, data = _mcp(api, "get_capability_protocol", n, capability="scope-bot")
    out.append(("mcp protocol", status, data))
    try:
        pinned = json.loads(json.loads(data)["result"]["content"][0]["text"])
        resource = {"jsonrpc": "2.0", "id": n, "method": "resources/read", "params": {"uri": pinned["resource"]}}
        status, data, _ = api.raw("POST", "/mcp", json.dumps(resource).encode(), MCP_HEADERS)
        out.append(("mcp resource", status, data))
        _mcp(api, "end_session", n, session_id=pinned["session_id"])
    except (ValueError, KeyError, TypeError, IndexError):
        out.append(("mcp protocol", status, b"unreadable answer"))
    for session in sessions:
        api.raw("POST", f"/api/v1/sessions/{session}/end/")
    return out


def cross_scope(stack: Any, seconds: float, threads: int) -> list[Row]:
    ops = Api(stack.web_port, stack.ops_key)
    _setup(ops)

    def key(name: str, role: str, *scopes: str) -> str:
        args = ["create_api_key", "--name", name, "--role", role]
        for scope in scopes:
            args += ["--scope", scope]
        return stack.manage(*args).strip().splitlines()[-1]

    scoped = [key("chaos-scoped-agent", "agent", "scope-bot", "scope-open")]
    scoped.append(key("chaos-scoped-publisher", "publisher", "scope-bot", "scope-open"))
    unscoped = Api(stack.web_port, key("chaos-unscoped-agent", "agent"))

    leaks: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    tried: Counter[str] = Counter()
    errors: list[str] = []
    stop = time.monotonic() + seconds
    lock = threading.Lock()

    def scoped_loop(secret: str, index: int) -> None:
        api = Api(stack.web_port, secret)
        n = 0
        try:
            while time.monotonic() < stop:
                n += 1
                for kind, status, data in _attempts(api, index * 1_000_000 + n):
                    leaked = SECRET.encode() in data or (kind == "publish" and 200 <= status < 300)
                    with lock:
                        tried[kind] += 1
                        statuses[f"{status // 100}xx"] += 1
                        leaks[kind] += leaked
        except Exception as exc:  # a crash in the load is reported, not swallowed
            errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            api.close()

    control: list[bool] = []

    def unscoped_loop() -> None:
        # Warms the prefix cache with renders that do show the secret pack, while ops rewrite it.
        n = 0
        while time.monotonic() < stop:
            n += 1
            ops.raw(
                "PUT",
                "/api/v1/knowledge/scope-secret/files/pay/DUTY.md",
                json.dumps({"content": f"# Pay\n\n{SECRET}-{n}\n"}).encode(),
            )
            status, started = unscoped.call("POST", "/api/v1/sessions/", {"bundle": "scope-bot"})
            if status == 201:
                _, data, _ = unscoped.raw("POST", f"/api/v1/sessions/{started['id']}/render/")
                control.append(SECRET.encode() in data)
                unscoped.raw("POST", f"/api/v1/sessions/{started['id']}/end/")

    workers = [threading.Thread(target=unscoped_loop)]
    workers += [threading.Thread(target=scoped_loop, args=(scoped[i % 2], i)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    ops.close()
    unscoped.close()
    total = sum(leaks.values())
    five = statuses.get("5xx", 0) + statuses.get("0xx", 0)
    rows: list[Row] = [
        (
            "cross-scope reads",
            "cross-scope reads",
            f"{total}" + (f" ({', '.join(f'{k}: {v}' for k, v in sorted(leaks.items()) if v)})" if total else ""),
            total == 0 and not errors,
        ),
        (
            "cross-scope reads",
            f"scoped attempts in {seconds:g} s ({threads} threads)",
            ", ".join(f"{k}: {v}" for k, v in sorted(tried.items())),
            sum(tried.values()) > 0,
        ),
        ("cross-scope reads", "5xx or no answer to the scoped keys", str(five), five == 0),
        (
            "cross-scope reads",
            "control: the unscoped key's renders show the pack",
            f"{sum(control)} of {len(control)}",
            bool(control) and all(control),
        ),
    ]
    if errors:
        rows.append(("cross-scope reads", "load errors", errors[0][:120], False))
    return rows
