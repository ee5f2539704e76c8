"""What follows a key's rotation in the apps above access.

A rotated key's active sessions move to its lineage, so that the key rotated to owns them
too; the sessions are sessions_app's rows, and access sits below sessions_app. So sessions_app
registers the move here in its AppConfig.ready() (sessions_app/apps.py), and
access.services.api_key_rotate calls it inside the rotation's transaction. Unregistered, a
rotation raises rather than leave the sessions behind."""

from collections.abc import Callable

from django.core.exceptions import ImproperlyConfigured

# fn(key_id=..., lineage_id=...): move the active sessions stored under the key to the lineage.
OnRotated = Callable[..., None]
_on_rotated: list[OnRotated] = []


def on_key_rotated(fn: OnRotated) -> None:
    """Register `fn` (once per process)."""
    if fn not in _on_rotated:
        _on_rotated.append(fn)


def key_rotated(*, key_id: int, lineage_id: int | None) -> None:
    if not _on_rotated:
        raise ImproperlyConfigured("access.hooks: nothing moves a rotated key's sessions (sessions_app not ready)")
    for fn in _on_rotated:
        fn(key_id=key_id, lineage_id=lineage_id)
