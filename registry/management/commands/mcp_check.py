"""manage.py mcp_check: the MCP drift check now (registry.mcp_drift), as the periodic task runs it."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from registry import mcp_drift


class Command(BaseCommand):
    help = "List the MCP servers of live and draining versions again and compare with their pinned tools."

    def handle(self, *args: Any, **options: Any) -> None:
        report = mcp_drift.mcp_drift_check()
        for d in report.drifts:
            self.stdout.write(
                f"{d['bundle']}@{d['version']}: {d['tool']} from {d['server']} {d['kind']}"
                f" ({d['sessions_active']} active session(s) at risk)"
            )
        for url, why in report.unreachable.items():
            self.stderr.write(f"{url}: {why}")
        self.stdout.write(f"{report.checked} pinned tool(s) compared, {len(report.drifts)} drift(s), {report.new} new")
        if report.drifts or report.unreachable:
            raise CommandError("drift found" if report.drifts else "a server could not be listed")
