import hashlib
import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from access.models import ApiKey
from access.services import api_key_authenticate


def test_create_api_key_prints_the_secret_alone_on_the_last_line_and_stores_only_its_hash(db):
    out = StringIO()
    call_command("create_api_key", "--name", "ci-bot", "--role", "publisher", stdout=out)
    secret = out.getvalue().rstrip("\n").splitlines()[-1]
    assert secret.startswith("pr_") and " " not in secret and len(secret) > 40
    key = ApiKey.objects.get(name="ci-bot")
    assert key.role == "publisher"
    assert key.secret_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert all(secret not in str(getattr(key, f.attname)) for f in ApiKey._meta.fields)
    assert api_key_authenticate(secret=secret).api_key_id == key.pk
    assert api_key_authenticate(secret=secret + "x") is None


def test_create_api_key_refuses_an_unknown_role(db):
    with pytest.raises(CommandError):
        call_command("create_api_key", "--name", "x", "--role", "root", stdout=StringIO())
    assert not ApiKey.objects.exists()


def test_the_models_and_migrations_agree(db):
    call_command("makemigrations", "--check", "--dry-run", stdout=StringIO())


def test_seed_demo_is_idempotent_and_leaves_one_live_key_per_role(db, tmp_path):
    env = tmp_path / "demo.env"
    for _ in range(2):
        call_command("seed_demo", "--env-file", str(env), stdout=StringIO())
    from registry.models import Bundle, Label

    assert Bundle.objects.filter(name="support-agent").count() == 1
    assert Label.objects.get(bundle__name="support-agent", name="production").version.number == 1
    assert (
        ApiKey.objects.filter(name__startswith="demo-", revoked_at__isnull=True).count() == 5
    )  # one per role, ci included
    secrets = [line.split("=", 1)[1] for line in env.read_text().splitlines()]
    assert all(api_key_authenticate(secret=s) is not None for s in secrets)


def test_seed_demo_keeps_working_keys_and_the_password_across_runs_until_asked_for_new(db, tmp_path):
    """A restart of `make run` keeps what a reader pasted (an agent host's key, a browser's
    login); --new, or keys that no longer work, get new ones."""
    from django.contrib.auth import get_user_model

    env, password_file = tmp_path / "demo.env", tmp_path / "admin-password"
    args = ["--env-file", str(env), "--password-file", str(password_file)]
    call_command("seed_demo", *args, "--registry-url", "http://127.0.0.1:8123", stdout=StringIO())
    first, password = env.read_text(), password_file.read_text().strip()
    assert "export REGISTRY_URL=http://127.0.0.1:8123" in first
    assert oct(env.stat().st_mode & 0o777) == oct(0o600) == oct(password_file.stat().st_mode & 0o777)
    out = StringIO()
    call_command("seed_demo", *args, "--registry-url", "http://127.0.0.1:8123", stdout=out)
    assert env.read_text() == first and password_file.read_text().strip() == password
    assert "kept from the last run" in out.getvalue()
    assert get_user_model().objects.get(username="admin").check_password(password)
    assert ApiKey.objects.filter(name__startswith="demo-", revoked_at__isnull=True).count() == 5

    # One key revoked meanwhile: that one is replaced, the others kept.
    agent_secret = re.search(r"AGENT_KEY=(\S+)", first).group(1)
    ops_secret = re.search(r"OPS_KEY=(\S+)", first).group(1)
    ApiKey.objects.filter(name="demo-agent").update(revoked_at=timezone.now())
    call_command("seed_demo", *args, stdout=StringIO())
    second = env.read_text()
    assert agent_secret not in second and ops_secret in second
    assert api_key_authenticate(secret=re.search(r"AGENT_KEY=(\S+)", second).group(1)) is not None

    call_command("seed_demo", *args, "--new", stdout=StringIO())
    assert ops_secret not in env.read_text() and api_key_authenticate(secret=ops_secret) is None
    assert password_file.read_text().strip() != password
    assert not get_user_model().objects.get(username="admin").check_password(password)


def _secret_of(command: str, *args: str) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue().rstrip("\n").splitlines()[-1]


def test_revoke_by_name_after_a_rotation_with_grace_revokes_the_old_key_and_the_new_one(db):
    """The docs' sequence: rotate with a grace period, then revoke the name (a leak): every
    working key of that name stops, not "2 live keys are named ..."."""
    old = _secret_of("create_api_key", "--name", "support-bot", "--role", "agent")
    new = _secret_of("rotate_api_key", "support-bot", "--grace-minutes", "30")
    assert api_key_authenticate(secret=old) is not None and api_key_authenticate(secret=new) is not None
    out = StringIO()
    call_command("revoke_api_key", "support-bot", "--reason", "leaked in a log", stdout=out)
    assert out.getvalue().count("Revoked 'support-bot'") == 2
    assert api_key_authenticate(secret=old) is None and api_key_authenticate(secret=new) is None
    from audit.models import AuditEvent

    assert list(AuditEvent.objects.filter(action="key.revoked").values_list("reason", flat=True)) == [
        "leaked in a log",
        "leaked in a log",
    ]


def test_revoke_rotated_out_ends_the_grace_period_and_keeps_the_new_key(db):
    old = _secret_of("create_api_key", "--name", "support-bot", "--role", "agent")
    new = _secret_of("rotate_api_key", "support-bot", "--grace-minutes", "30")
    out = StringIO()
    call_command("revoke_api_key", "support-bot", "--rotated-out", "--reason", "all clients switched", stdout=out)
    assert out.getvalue().count("Revoked") == 1
    assert api_key_authenticate(secret=old) is None and api_key_authenticate(secret=new) is not None
    with pytest.raises(CommandError, match="grace period"):
        call_command("revoke_api_key", "support-bot", "--rotated-out", stdout=StringIO())


def test_rotate_by_name_during_a_grace_period_rotates_the_newest_key(db):
    first = _secret_of("create_api_key", "--name", "support-bot", "--role", "agent")
    second = _secret_of("rotate_api_key", "support-bot", "--grace-minutes", "30")
    third = _secret_of("rotate_api_key", "support-bot")  # no grace: `second` stops now
    assert api_key_authenticate(secret=first) is not None  # still in its own grace period
    assert api_key_authenticate(secret=second) is None and api_key_authenticate(secret=third) is not None
    assert ApiKey.objects.get(secret_hash=hashlib.sha256(third.encode()).hexdigest()).rotated_from.secret_hash == (
        hashlib.sha256(second.encode()).hexdigest()
    )


def test_two_unrelated_keys_of_one_name_are_revoked_together_but_not_rotated_by_name(db):
    one = _secret_of("create_api_key", "--name", "twin", "--role", "agent")
    _secret_of("create_api_key", "--name", "twin", "--role", "agent")
    with pytest.raises(CommandError, match="give the prefix"):
        call_command("rotate_api_key", "twin", stdout=StringIO())
    call_command("rotate_api_key", ApiKey.objects.filter(name="twin").first().prefix, stdout=StringIO())
    assert api_key_authenticate(secret=one) is None
    call_command("revoke_api_key", "twin", stdout=StringIO())
    assert not ApiKey.objects.filter(name="twin", revoked_at__isnull=True).exists()


def test_bootstrap_creates_the_first_admin_and_a_key_per_role_once(db):
    """`docker compose exec web python manage.py bootstrap` on a fresh deployment: an admin who
    can log in and four working keys, printed once; a second run creates nothing."""
    from django.contrib.auth import get_user_model

    out = StringIO()
    call_command("bootstrap", stdout=out)
    text = out.getvalue()
    password = re.search(r"Admin login: user 'admin', password (\S+)", text).group(1)
    admin = get_user_model().objects.get(username="admin")
    assert admin.is_superuser and admin.is_staff and admin.check_password(password)
    keys = dict(re.findall(r"^([A-Z]+)_KEY=(\S+)$", text, re.M))
    assert set(keys) == {"AGENT", "PUBLISHER", "OPS", "ADMIN", "CI"}
    for role, secret in keys.items():
        assert api_key_authenticate(secret=secret).role == role.lower()

    again = StringIO()
    call_command("bootstrap", stdout=again)
    assert "Already bootstrapped" in again.getvalue() and "_KEY=" not in again.getvalue()
    assert ApiKey.objects.count() == 5 and get_user_model().objects.get(username="admin").check_password(password)

    # A key revoked and deleted meanwhile is made again; the admin is left alone.
    ApiKey.objects.filter(name="bootstrap-agent").delete()
    third = StringIO()
    call_command("bootstrap", stdout=third)
    assert re.findall(r"^([A-Z]+)_KEY=", third.getvalue(), re.M) == ["AGENT"]
    assert "Admin login" not in third.getvalue()
