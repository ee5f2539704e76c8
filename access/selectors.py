"""Reads of API keys: what "a working key" means in SQL, and how a key row is read.

A key is looked up by its prefix (not secret on its own), then its stored hash compared in
constant time (key_row), so response timing says nothing about how close a guess was.
access.services.api_key_authenticate reads the key alone; the per-turn reads
(sessions_app.selectors.key_session_rows and the rest) read the same KEY_COLUMNS under the
same KEY_WORKING condition joined with what the call is about, in one statement."""

import hmac
import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from access.actors import Actor

# last_used_at is written at most this often per key, not on every request.
LAST_USED_RESOLUTION = timedelta(seconds=60)

KEY_COLUMNS = "k.id, k.name, k.role, k.scopes, k.last_used_at, k.secret_hash, k.lineage_id"
KEY_N = KEY_COLUMNS.count(",") + 1  # the key's columns come first in every such row
KEY_WORKING = "k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())"
KEY_WHERE = f"k.prefix = %s AND {KEY_WORKING}"


def key_row(rows: Sequence[Sequence[Any]], digest: str) -> Sequence[Any] | None:
    """The row (KEY_COLUMNS first) whose stored hash is `digest`, compared in constant time."""
    return next((row for row in rows if row[0] is not None and hmac.compare_digest(row[5], digest)), None)


def key_use_due(row: Sequence[Any], now: datetime) -> bool:
    """Whether this use of the key (a KEY_COLUMNS row) must write last_used_at."""
    return row[4] is None or now - row[4] >= LAST_USED_RESOLUTION


def key_actor(row: Sequence[Any]) -> Actor:
    key_id, name, role, scopes = row[:4]
    if isinstance(scopes, str):
        scopes = json.loads(scopes)
    return Actor.for_key(key_id=key_id, name=name, role=role, scopes=scopes, lineage_id=row[6])
