"""Session ids are version 7 UUIDs: time-ordered, 74 random bits, the same from Python and SQL."""

import uuid
from datetime import UTC, datetime

from django.db import connection

from core.ids import uuid7, uuid7_sql


def _ms(value: uuid.UUID) -> int:
    return value.int >> 80


def test_it_makes_version_7_uuids_in_the_rfc_variant_that_sort_by_time():
    ids = [uuid7(ms) for ms in (1_000, 2_000, 3_000)] + [uuid7() for _ in range(200)]
    assert all(u.version == 7 and u.variant == uuid.RFC_4122 for u in ids)
    assert ids[:3] == sorted(ids[:3]) and [_ms(u) for u in ids[:3]] == [1_000, 2_000, 3_000]
    assert len(set(ids)) == len(ids), "the random bits differ within one millisecond"
    now = int(datetime.now(UTC).timestamp() * 1000)
    assert abs(_ms(ids[-1]) - now) < 60_000


def test_the_sql_form_gives_the_same_kind_of_id_for_a_timestamp(db):
    at = datetime(2026, 11, 5, 12, 0, 0, 123000, tzinfo=UTC)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {uuid7_sql('t')} FROM (SELECT %s::timestamptz AS t, generate_series(1, 50)) g", [at])
        ids = [row[0] for row in cursor.fetchall()]
    assert all(u.version == 7 and u.variant == uuid.RFC_4122 for u in ids)
    assert {_ms(u) for u in ids} == {int(at.timestamp() * 1000)}
    assert len(set(ids)) == 50


def test_sessions_get_time_ordered_ids(bundle, production, agent):
    from sessions_app.services import session_start

    first, _ = session_start(bundle=bundle, actor=agent.actor)
    second, _ = session_start(bundle=bundle, actor=agent.actor)
    assert first.pk.version == second.pk.version == 7
    assert _ms(first.pk) <= _ms(second.pk)
