"""Metrics read from PostgreSQL at scrape time: the truth, whichever process changed it."""

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from registry.selectors import version_state_counts
from sessions_app.selectors import active_sessions_by_version


class DatabaseCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily]:
        active = GaugeMetricFamily(
            "registry_sessions_active", "Active sessions, by bundle and pinned version.", labels=["bundle", "version"]
        )
        states = GaugeMetricFamily("registry_versions", "Versions by lifecycle state.", labels=["state"])
        # The owning apps' selectors: the sessions' (over the partial index of active
        # sessions) and the registry's.
        for bundle, number, n in active_sessions_by_version():
            active.add_metric([bundle, str(number)], n)
        for state, n in version_state_counts():
            states.add_metric([state], n)
        yield active
        yield states
