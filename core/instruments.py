"""What the domain counts, without importing the app that keeps the counts.

Services call the functions below (`instruments.session_event(event="started")`); the metrics
app registers its implementation (`Instruments`, metrics/apps.py) in `AppConfig.ready()`, so
registry, sessions_app, skills, access and webhooks import core and never metrics. Until one is
registered (a script that does not set Django up) every call does nothing. The indirection costs
one extra function call per count."""

from collections.abc import Callable
from typing import Protocol, cast


class Instruments(Protocol):
    def session_event(self, *, event: str, count: int) -> None: ...
    def version_drained(self, *, bundle: str, seconds: float | None) -> None: ...
    def cache_lookup(self, *, result: str) -> None: ...
    def throttled(self, *, group: str) -> None: ...
    def webhook_attempt(self, *, event: str, ok: bool) -> None: ...
    def sessions_started(self, version_ids: list[int]) -> None: ...
    def version_used(self, version_ids: list[int]) -> None: ...
    def turn_routed(self, version_id: int, *, number: int, latency_us: int) -> None: ...
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
    ) -> None: ...


def _nothing(*args: object, **kwargs: object) -> None:
    return None


class _Nothing:
    """Until an implementation is registered: every count is a no-op."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return _nothing


_current: Instruments = cast(Instruments, _Nothing())


def register(instruments: Instruments) -> None:
    """Install the implementation (metrics/apps.py, once per process)."""
    global _current
    _current = instruments


def session_event(*, event: str, count: int = 1) -> None:
    """Sessions started, ended or expired."""
    _current.session_event(event=event, count=count)


def version_drained(*, bundle: str, seconds: float | None) -> None:
    """A version marked drained, `seconds` after it started draining (None: unknown)."""
    _current.version_drained(bundle=bundle, seconds=seconds)


def cache_lookup(*, result: str) -> None:
    """A pinned-bundle byte lookup answered from `result` (local, redis or database)."""
    _current.cache_lookup(result=result)


def throttled(*, group: str) -> None:
    """A request refused by the rate limit of `group`."""
    _current.throttled(group=group)


def webhook_attempt(*, event: str, ok: bool) -> None:
    """One webhook delivery attempt and whether it was delivered."""
    _current.webhook_attempt(event=event, ok=ok)


def sessions_started(version_ids: list[int]) -> None:
    """Usage: one session start per entry, each also a use of its version."""
    _current.sessions_started(version_ids)


def version_used(version_ids: list[int]) -> None:
    """Usage: a renewal or an end moves the versions' last use."""
    _current.version_used(version_ids)


def turn_routed(version_id: int, *, number: int, latency_us: int) -> None:
    """Usage: a routed turn (number 1 is the first of its session) and its latency."""
    _current.turn_routed(version_id, number=number, latency_us=latency_us)


def turn_reported(
    version_id: int,
    *,
    loaded: set[str],
    routed: list[str],
    before: list[str] | None,
    after: list[str],
    expected_before: list[str] | None = None,
    expected: list[str] | None = None,
) -> None:
    """Usage: a turn report, replacing an earlier one of the same turn (`before`, with the
    label it carried, `expected_before`). `expected`: the skills the turn needed, when a label
    says so (the decision error rate counts an invocation outside them)."""
    _current.turn_reported(
        version_id,
        loaded=loaded,
        routed=routed,
        before=before,
        after=after,
        expected_before=expected_before,
        expected=expected,
    )
