"""Retention: manage.py prune deletes exactly what is past its retention, in timed batches,
never an active session, keeps each version's counts right, and is the one way audit rows go."""

from datetime import timedelta
from urllib.parse import quote

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from audit.models import AuditEvent
from knowledge.models import FileRead, Pack
from metrics.models import VersionDay
from metrics.usage import flush
from retention.services import prune
from sessions_app.models import Session
from sessions_app.services import session_end, session_start
from skills.models import SessionSkill, SkillTurn
from webhooks.models import Delivery, Endpoint

DAY = timedelta(days=1)


def _ended(bundle, agent, *, days_ago: float, status: str = "ended") -> Session:
    session, _ = session_start(bundle=bundle, actor=agent.actor)
    session_end(session=session, actor=agent.actor)
    Session.objects.filter(pk=session.pk).update(status=status, ended_at=timezone.now() - days_ago * DAY)
    return session


def _children(session: Session, pack: Pack) -> None:
    at = timezone.now() - 40 * DAY
    SkillTurn.objects.create(session=session, version_id=session.version_id, number=1, latency_us=5)
    SkillTurn.objects.filter(session=session).update(created_at=at)
    SessionSkill.objects.create(session=session, name="x", summary="s", description="d", source="t", registered_turn=1)
    FileRead.objects.create(session=session, pack=pack, path="a.md", known_sha256="", read_at=at)


def _audit_at(at, action: str = "old.thing") -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO audit_auditevent (at, actor, action, target_type, target, reason, data, request_id)"
            " VALUES (%s, 'test', %s, 't', 't', '', '{}', '')",
            [at, action],
        )


@pytest.fixture
def world(bundle, production, agent, v1):
    """Old and recent rows of every kind, and an active session that started long ago."""
    pack = Pack.objects.create(name="docs")
    old = _ended(bundle, agent, days_ago=40)
    old_expired = _ended(bundle, agent, days_ago=31, status="expired")
    recent = _ended(bundle, agent, days_ago=10)
    active, _ = session_start(bundle=bundle, actor=agent.actor)
    Session.objects.filter(pk=active.pk).update(started_at=timezone.now() - 400 * DAY)
    for session in (old, old_expired, recent, active):
        _children(session, pack)
    endpoint = Endpoint.objects.create(url="https://example.com/hook", events=[], secret="s" * 32, created_by="t")
    for n, (status, days) in enumerate([("succeeded", 40), ("pending", 40), ("failed", 40), ("succeeded", 2)]):
        delivery = Delivery.objects.create(endpoint=endpoint, event="e", message_id=f"m{n}", payload={}, status=status)
        Delivery.objects.filter(pk=delivery.pk).update(created_at=timezone.now() - days * DAY)
    today = timezone.now().date()
    VersionDay.objects.create(version=v1, day=today - 400 * DAY, fetches=7)
    flush()  # today's row, from the starts above
    _audit_at(timezone.now() - 400 * DAY)
    _audit_at(timezone.now() - 100 * DAY, "recent.thing")
    return {"old": old, "old_expired": old_expired, "recent": recent, "active": active}


def test_prune_deletes_exactly_what_is_old_and_keeps_counts(world, agent):
    started = agent.get("/api/v1/bundles/refunds/versions/1/usage/").json()
    results = {r.table: r for r in prune()}
    kept = {world["recent"].pk, world["active"].pk}
    assert set(Session.objects.values_list("pk", flat=True)) == kept
    assert set(SkillTurn.objects.values_list("session_id", flat=True)) == kept
    assert set(SessionSkill.objects.values_list("session_id", flat=True)) == kept
    assert set(FileRead.objects.values_list("session_id", flat=True)) == kept
    assert sorted(Delivery.objects.values_list("message_id", flat=True)) == ["m1", "m3"]
    assert VersionDay.objects.filter(day__lt=timezone.now().date() - 300 * DAY).count() == 0
    assert VersionDay.objects.count() == 1
    assert not AuditEvent.objects.filter(action="old.thing").exists()
    assert AuditEvent.objects.filter(action="recent.thing").exists()
    assert {t: r.rows for t, r in results.items()} == {
        "skills_skillturn": 2,
        "skills_sessionskill": 2,
        "knowledge_fileread": 2,
        "sessions_app_session": 2,
        "webhooks_delivery": 2,
        "metrics_versionday": 1,
        "audit_auditevent": 1,
    }
    # Each batch is timed; how long it took is a figure (prune prints it, bench-scale measures it),
    # not an assertion: a loaded CI machine would make a bound flaky.
    assert all(r.batch_ms and all(ms >= 0 for ms in r.batch_ms) for r in results.values()), "each batch timed"
    after = agent.get("/api/v1/bundles/refunds/versions/1/usage/").json()
    assert (after["sessions_started"], after["sessions_active"]) == (started["sessions_started"], 1) == (4, 1)
    assert {r.table: r.rows for r in prune()} == dict.fromkeys(results, 0), "a second run finds nothing"


def test_the_prune_is_audited(world):
    prune()
    pruned = AuditEvent.objects.get(action="audit.pruned")
    assert pruned.data["retention_days"] == settings.RETENTION_AUDIT_DAYS
    summary = AuditEvent.objects.get(action="retention.pruned")
    assert summary.data["sessions_app_session"]["rows"] == 2 and summary.data["audit_auditevent"]["rows"] == 1


def test_a_dry_run_counts_and_deletes_nothing(world, capsys):
    sessions, audits = Session.objects.count(), AuditEvent.objects.count()
    call_command("prune", "--dry-run")
    out = capsys.readouterr().out
    assert "would delete (dry run):" in out
    assert "sessions_app_session" in out and "skills_skillturn" in out and "audit_auditevent" in out
    assert (Session.objects.count(), AuditEvent.objects.count()) == (sessions, audits)


def test_older_than_shortens_every_retention_but_the_audit_logs(world, capsys):
    call_command("prune", "--older-than", "5d")
    out = capsys.readouterr().out
    assert "deleted:" in out and "batches; per batch median" in out
    assert set(Session.objects.values_list("pk", flat=True)) == {world["active"].pk}, "the active one stays"
    assert AuditEvent.objects.filter(action="recent.thing").exists(), "audit keeps RETENTION_AUDIT_DAYS"
    with pytest.raises(CommandError):
        call_command("prune", "--older-than", "soon")


def test_the_audit_log_refuses_every_other_delete(world):
    old = AuditEvent.objects.get(action="old.thing")
    for setting in (None, (timezone.now() - 10 * DAY).isoformat()):  # no cutoff; a cutoff too recent
        with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
            if setting:
                cursor.execute("SELECT set_config('registry.audit_prune_before', %s, true)", [setting])
            cursor.execute("DELETE FROM audit_auditevent WHERE id = %s", [old.pk])
    recent = AuditEvent.objects.get(action="recent.thing")
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        # A valid cutoff, but the row is younger than it.
        cutoff = (timezone.now() - 200 * DAY).isoformat()
        cursor.execute("SELECT set_config('registry.audit_prune_before', %s, true)", [cutoff])
        cursor.execute("DELETE FROM audit_auditevent WHERE id = %s", [recent.pk])
    with pytest.raises(IntegrityError), transaction.atomic():
        AuditEvent.objects.filter(pk=old.pk).update(reason="rewritten")
    assert AuditEvent.objects.filter(pk__in=[old.pk, recent.pk]).count() == 2


def test_the_prune_runs_daily_as_a_beat_task():
    entry = settings.CELERY_BEAT_SCHEDULE["retention-prune"]
    assert entry["task"] == "retention.tasks.prune_task" and entry["schedule"] == 86400.0
    from config.celery import app

    assert app.amqp.router.route({}, "retention.tasks.prune_task")["queue"].name == "lifecycle"


# --- issue 36: the prune's exception is held by a database role -------------------------------

APP_ROLE, PRUNER_ROLE = "registry_test_app", "registry_test_pruner"


@pytest.fixture
def roles(transactional_db):
    """A non-superuser application role (what web and workers connect as) and a login role in
    registry_audit_pruner (what the prune connects as), on the real test database."""
    name = connection.settings_dict["NAME"]
    with connection.cursor() as cursor:
        for role in (APP_ROLE, PRUNER_ROLE):
            cursor.execute(f"DROP OWNED BY {role}" if _exists(cursor, role) else "SELECT 1")
            cursor.execute(f"DROP ROLE IF EXISTS {role}")
        cursor.execute(f"CREATE ROLE {APP_ROLE} LOGIN NOSUPERUSER")
        cursor.execute(f"CREATE ROLE {PRUNER_ROLE} LOGIN NOSUPERUSER IN ROLE registry_audit_pruner")
        for role in (APP_ROLE, PRUNER_ROLE):
            cursor.execute(f"GRANT SELECT, INSERT, DELETE ON audit_auditevent TO {role}")
            cursor.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}")
    host = connection.settings_dict["HOST"] or "127.0.0.1"
    host = quote(host, safe="") if host.startswith("/") else host  # the embedded server's socket directory
    port = connection.settings_dict["PORT"] or 5432
    yield {role: f"postgresql://{role}@{host}:{port}/{name}" for role in (APP_ROLE, PRUNER_ROLE)}
    with connection.cursor() as cursor:
        for role in (APP_ROLE, PRUNER_ROLE):
            cursor.execute(f"DROP OWNED BY {role}")
            cursor.execute(f"DROP ROLE {role}")


def _exists(cursor, role: str) -> bool:
    cursor.execute("SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = %s)", [role])
    return cursor.fetchone()[0]


def test_the_application_role_cannot_delete_audit_rows_even_with_the_cutoff_set(roles):
    import psycopg

    _audit_at(timezone.now() - 400 * DAY)
    cutoff = (timezone.now() - 200 * DAY).isoformat()
    # Before issue 36, the application's role with the setting deleted anything past the cutoff.
    with psycopg.connect(roles[APP_ROLE]) as app, app.cursor() as cursor:
        cursor.execute("SELECT set_config('registry.audit_prune_before', %s, true)", [cutoff])
        with pytest.raises(psycopg.errors.IntegrityConstraintViolation):
            cursor.execute("DELETE FROM audit_auditevent WHERE action = 'old.thing'")
    assert AuditEvent.objects.filter(action="old.thing").exists()
    # The pruner's role may, and only past the cutoff, as before.
    with psycopg.connect(roles[PRUNER_ROLE]) as pruner, pruner.cursor() as cursor:
        cursor.execute("SELECT set_config('registry.audit_prune_before', %s, true)", [cutoff])
        cursor.execute("DELETE FROM audit_auditevent WHERE action = 'old.thing'")
        assert cursor.rowcount == 1
    assert not AuditEvent.objects.filter(action="old.thing").exists()


def test_the_application_role_cannot_insert_a_back_dated_audit_row(roles):
    import psycopg

    with psycopg.connect(roles[APP_ROLE]) as app:
        app.execute(
            "INSERT INTO audit_auditevent (at, actor, action, target_type, target, reason, data, request_id)"
            " VALUES (%s, 'forger', 'backdated.thing', 't', 't', '', '{}', '')",
            [timezone.now() - 400 * DAY],
        )
    stored = AuditEvent.objects.get(action="backdated.thing")
    assert abs(stored.at - timezone.now()) < timedelta(minutes=5), "stamped with the database's now()"


def test_the_prune_deletes_audit_rows_through_the_pruners_connection(roles, settings):
    _audit_at(timezone.now() - 400 * DAY)
    _audit_at(timezone.now() - 100 * DAY, "recent.thing")
    settings.AUDIT_PRUNE_DATABASE_URL = roles[PRUNER_ROLE]
    results = {r.table: r.rows for r in prune()}
    assert results["audit_auditevent"] == 1
    assert not AuditEvent.objects.filter(action="old.thing").exists()
    assert AuditEvent.objects.filter(action="recent.thing").exists()
    assert AuditEvent.objects.filter(action="audit.pruned").exists()
