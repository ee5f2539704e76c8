"""What ends with a session in the apps above sessions_app.

An app that keeps rows per session that must go when the session ends or expires (skills: the
session's L3 cards) registers a function here in its AppConfig.ready() (skills/apps.py), so
sessions_app never names another app's table. `sessions_ended` runs every function in the
caller's transaction, after the statement that ended the sessions and while it holds their
rows FOR UPDATE: the lock order is session row, then the app's rows (registry.lifecycle.locks),
and a registration that locks the session first and commits meanwhile is visible to it."""

from collections.abc import Callable

OnEnd = Callable[[list[str]], None]
_on_end: list[OnEnd] = []


def on_sessions_ended(fn: OnEnd) -> None:
    """Register `fn(session_ids)` (once per process)."""
    if fn not in _on_end:
        _on_end.append(fn)


def sessions_ended(session_ids: list[str]) -> None:
    if session_ids:
        for fn in _on_end:
            fn(session_ids)
