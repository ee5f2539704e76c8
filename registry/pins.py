"""Who holds a version: the active sessions pinned to it.

A session pins a version, so sessions_app sits above registry and imports it; the registry's
own rules still need the count (a drain waits for the last pinned session, previews show how
many a move or a revoke cuts off, version lists annotate it). It asks through this interface,
which sessions_app registers at AppConfig.ready() (sessions_app/apps.py), instead of importing
sessions_app. Unlike core.instruments there is no do-nothing default: a drain that saw "no
sessions" because nobody registered would drain a version still in use, so an unregistered
call raises."""

from typing import Protocol

from django.core.exceptions import ImproperlyConfigured
from django.db.models import Expression


class Pins(Protocol):
    def active_on(self, version_id: int) -> int:
        """Active sessions pinned to the version (a range of the partial index, O(its sessions))."""
        ...

    def any_active(self, version_id: int) -> bool:
        """Whether any active session is pinned to the version (the drain's check)."""
        ...

    def active_annotation(self, label: str | None = None) -> Expression:
        """What a version row annotates as `active_sessions` (0 for a revoked version); with
        `label`, only the sessions started through that label."""
        ...

    def active_ids(self, version_id: int, limit: int) -> list[str]:
        """The ids of at most `limit` active sessions pinned to the version (oldest first)."""
        ...


_pins: Pins | None = None


def register(pins: Pins) -> None:
    global _pins
    _pins = pins


def _current() -> Pins:
    if _pins is None:
        raise ImproperlyConfigured("registry.pins: nothing registered (sessions_app must be in INSTALLED_APPS)")
    return _pins


def active_on(version_id: int) -> int:
    return _current().active_on(version_id)


def any_active(version_id: int) -> bool:
    return _current().any_active(version_id)


def active_annotation(label: str | None = None) -> Expression:
    return _current().active_annotation(label)


def active_ids(version_id: int, limit: int) -> list[str]:
    return _current().active_ids(version_id, limit)
