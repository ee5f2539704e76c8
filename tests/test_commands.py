import hashlib
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

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
    assert ApiKey.objects.filter(name__startswith="demo-", revoked_at__isnull=True).count() == 4
    secrets = [line.split("=", 1)[1] for line in env.read_text().splitlines()]
    assert all(api_key_authenticate(secret=s) is not None for s in secrets)
