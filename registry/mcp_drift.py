"""The drift check of MCP-sourced tools: list each declared server of the live and draining
versions again and compare with what those versions pinned (registry.mcp_servers). A tool the
server no longer offers, or offers with another schema, is a drift: recorded once per (version,
tool, what the server offers now) as an McpDrift row (the alert on the version's page) and
announced as `tool.drift` naming the sessions at risk. Run by the periodic task
(registry.tasks.mcp_drift_task) and by `manage.py mcp_check`; an ops key can run it through
POST /api/v1/mcp-servers/check/ (what `promptreg mcp check` calls)."""

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from access.actors import Actor
from core import events
from registry import mcp_servers, pins
from registry.models import BundleVersion, McpDrift, VersionState, VersionTool
from registry.tool_signatures import signature_of

logger = logging.getLogger("registry.mcp")

# Sessions named in one event (the count is given in full).
SESSIONS_NAMED_MAX = 50
# Servers listed per check: each is one listing within WEBHOOK_ATTEMPT_DEADLINE.
SERVERS_PER_CHECK_MAX = 100


@dataclass
class DriftReport:
    checked: int = 0  # pinned tools compared
    servers: int = 0
    drifts: list[dict[str, Any]] = field(default_factory=list)  # open drifts found now
    new: int = 0  # of which first seen by this check (announced)
    resolved: int = 0
    unreachable: dict[str, str] = field(default_factory=dict)  # url -> why
    bundles_of: dict[str, set[str]] = field(default_factory=dict)  # url -> bundles pinning from it

    def seen_by(self, actor: Actor) -> "DriftReport":
        """What a (scoped) key may be shown: the drifts of its bundles and the servers they use."""
        drifts = [d for d in self.drifts if actor.may_see_bundle(d["bundle"])]
        urls = {u for u, names in self.bundles_of.items() if any(actor.may_see_bundle(n) for n in names)}
        return DriftReport(
            checked=self.checked,
            servers=self.servers,
            drifts=drifts,
            new=sum(1 for d in drifts if d.get("announced")),
            resolved=self.resolved,
            unreachable={u: why for u, why in self.unreachable.items() if u in urls},
            bundles_of={u: self.bundles_of[u] for u in urls},
        )


def mcp_drift_check() -> DriftReport:
    """Compare every live or draining version's MCP-sourced tools with their servers now.
    Idempotent: a drift already recorded is not announced again. Owns its transactions; the
    listings run outside any."""
    report = DriftReport()
    edges = list(
        VersionTool.objects.filter(~Q(source=""), version__state__in=[VersionState.LIVE, VersionState.DRAINING])
        .order_by("version_id", "position")
        .values("version_id", "source", "signature__name", "signature__schema_hash")
    )
    urls, report.bundles_of = _server_urls({e["version_id"] for e in edges})
    offered: dict[str, dict[str, str]] = {}
    for url in sorted({u for u in urls.values()})[:SERVERS_PER_CHECK_MAX]:
        try:
            offered[url] = {t["name"]: signature_of(t).schema_hash for t in mcp_servers.list_tools(url)}
        except mcp_servers.ServerUnavailable as exc:
            report.unreachable[url] = str(exc)
            logger.warning("MCP server %s could not be listed: %s", url, exc)
    report.servers = len(offered)
    for edge in edges:
        source_url = urls.get((edge["version_id"], edge["source"]))
        if source_url is None or source_url not in offered:
            continue
        url = source_url
        report.checked += 1
        tool, pinned = edge["signature__name"], edge["signature__schema_hash"]
        live = offered[url].get(tool)
        if live == pinned:
            report.resolved += McpDrift.objects.filter(
                version_id=edge["version_id"], tool=tool, resolved_at__isnull=True
            ).update(resolved_at=timezone.now())
            continue
        drift = _record(
            version_id=edge["version_id"], server=edge["source"], url=url, tool=tool, pinned=pinned, live=live or ""
        )
        if drift is not None:
            report.new += int(drift["announced"])
            report.drifts.append(drift)
    return report


def _server_urls(version_ids: set[int]) -> tuple[dict[tuple[int, str], str], dict[str, set[str]]]:
    """{(version id, server name): url} from the versions' own `mcp_servers` (what they pinned
    from), and {url: the bundles pinning from it}."""
    found: dict[tuple[int, str], str] = {}
    bundles: dict[str, set[str]] = {}
    rows = BundleVersion.objects.filter(pk__in=version_ids).values_list("pk", "bundle__name", "canonical")
    for pk, bundle_name, canonical in rows:
        for server in json.loads(bytes(canonical)).get(mcp_servers.FIELD) or []:
            found[(pk, server["name"])] = server["url"]
            bundles.setdefault(server["url"], set()).add(bundle_name)
    return found, bundles


def _record(*, version_id: int, server: str, url: str, tool: str, pinned: str, live: str) -> dict[str, Any] | None:
    """The drift as reported, `announced` when this call recorded it (first seen now)."""
    version = BundleVersion.objects.select_related("bundle").only("number", "state", "bundle__name").get(pk=version_id)
    active = pins.active_on(version_id)
    kind = "removed" if not live else "changed"
    at_risk = pins.active_ids(version_id, SESSIONS_NAMED_MAX)
    shown = {
        "bundle": version.bundle.name,
        "version": version.number,
        "server": server,
        "url": url,
        "tool": tool,
        "kind": kind,
        "pinned_hash": pinned,
        "live_hash": live,
        "sessions_active": active,
        "sessions": at_risk,
    }
    try:
        with transaction.atomic():
            McpDrift.objects.create(
                version_id=version_id,
                server=server,
                url=url,
                tool=tool,
                kind=kind,
                pinned_hash=pinned,
                live_hash=live,
                sessions_active=active,
                detected_at=timezone.now(),
            )
            # Under live sessions, or a label that still starts new ones on it: announce it.
            if active or version.state == VersionState.LIVE:
                events.emit("tool.drift", **shown, sessions_truncated=active > len(at_risk))
    except IntegrityError:
        # Recorded before (by an earlier check, or a concurrent one): announced once already.
        McpDrift.objects.filter(version_id=version_id, tool=tool, live_hash=live).update(resolved_at=None)
        return {**shown, "announced": False}
    return {**shown, "announced": True}
