"""The sweep expires lapsed sessions in bounded batches that never wait on a busy row, and
bench/seed_scale.py builds the scale data set with set-based SQL."""

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.utils import timezone

from registry.models import BundleVersion
from sessions_app.models import Session
from sessions_app.services import session_expire_lapsed, session_start
from tests.live import database_url


def _lapse(*sessions: Session) -> None:
    Session.objects.filter(pk__in=[s.pk for s in sessions]).update(expires_at=timezone.now() - timedelta(seconds=1))


def test_the_sweep_expires_every_lapsed_session_in_batches(bundle, production, agent):
    lapsed = [session_start(bundle=bundle, actor=agent.actor)[0] for _ in range(5)]
    fresh, _ = session_start(bundle=bundle, actor=agent.actor)
    _lapse(*lapsed)
    assert session_expire_lapsed(batch=2, max_batches=1) == 2, "one batch, then it stops when told"
    assert session_expire_lapsed(batch=2) == 3
    assert set(Session.objects.filter(status="expired").values_list("pk", flat=True)) == {s.pk for s in lapsed}
    assert Session.objects.get(pk=fresh.pk).status == "active"


@pytest.mark.django_db(transaction=True)
def test_the_sweep_skips_a_session_whose_row_is_busy_instead_of_waiting(bundle, production, agent):
    busy, idle = (session_start(bundle=bundle, actor=agent.actor)[0] for _ in range(2))
    _lapse(busy, idle)
    with psycopg.connect(database_url()) as other:  # a renewal or an end in flight
        other.execute("SELECT 1 FROM sessions_app_session WHERE id = %s FOR UPDATE", [busy.pk])
        assert session_expire_lapsed() == 1
        other.rollback()
    assert Session.objects.get(pk=idle.pk).status == "expired"
    assert Session.objects.get(pk=busy.pk).status == "active"
    assert session_expire_lapsed() == 1, "the next sweep takes it"


@pytest.mark.django_db(transaction=True)
def test_seed_scale_builds_the_data_set(tmp_path):
    """As bench/scale.py runs it: a script of its own on DATABASE_URL's database, the agent
    key's secret on its last line."""
    env = {name: os.environ[name] for name in ("PATH", "HOME", "LANG") if name in os.environ}
    env |= {"STACK_RUN_DIR": str(tmp_path), "DATABASE_URL": database_url(), "REDIS_URL": settings.REDIS_URL}
    env |= {"DJANGO_SECRET_KEY": "s" * 50}
    args = ["--bundle", "scale", "--versions", "20", "--ended", "300", "--active", "50", "--lapsed", "7"]
    done = subprocess.run(
        [sys.executable, "bench/seed_scale.py", *args],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    versions = BundleVersion.objects.filter(bundle__name="scale")
    assert versions.count() == 20
    assert versions.filter(state="live").count() == 1 and versions.filter(state="draining").count() == 1
    sessions = Session.objects.filter(bundle__name="scale")
    assert sessions.filter(status="ended").count() == 300
    assert sessions.filter(status="active").count() == 57
    assert sessions.filter(status="active", version__state="draining").count() == 5
    summary, secret = done.stdout.strip().splitlines()[-2:]
    assert secret.startswith("pr_") and "20 versions, 300 ended, 50 active" in summary
