"""Metrics read from PostgreSQL at scrape time: the truth, whichever process changed it."""

from collections.abc import Iterator

from django.db import connection
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


class DatabaseCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        active = GaugeMetricFamily(
            "registry_sessions_active", "Active sessions, by bundle and pinned version.", labels=["bundle", "version"]
        )
        states = GaugeMetricFamily("registry_versions", "Versions by lifecycle state.", labels=["state"])
        with connection.cursor() as cursor:
            # The partial index on active sessions (session_active_version_idx) serves this.
            cursor.execute(
                """SELECT b.name, v.number, s.n
                   FROM (SELECT version_id, count(*) AS n FROM sessions_app_session
                         WHERE status = 'active' GROUP BY version_id) s
                   JOIN registry_bundleversion v ON v.id = s.version_id
                   JOIN registry_bundle b ON b.id = v.bundle_id"""
            )
            for bundle, number, n in cursor.fetchall():
                active.add_metric([bundle, str(number)], n)
            cursor.execute("SELECT state, count(*) FROM registry_bundleversion GROUP BY state")
            for state, n in cursor.fetchall():
                states.add_metric([state], n)
        yield active
        yield states
