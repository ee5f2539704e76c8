"""A published version's content and hash cannot change by any path: API, admin, ORM, SQL."""

import hashlib

import pytest
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction

from registry.models import BundleVersion


def _unchanged(version: BundleVersion) -> None:
    fresh = BundleVersion.objects.get(pk=version.pk)
    assert bytes(fresh.canonical) == bytes(version.canonical)
    assert fresh.content_hash == version.content_hash == hashlib.sha256(bytes(fresh.canonical)).hexdigest()


def test_it_refuses_save_of_changed_bytes(v1):
    v1.canonical = b'{"system_prompt":"evil"}'
    with pytest.raises(IntegrityError), transaction.atomic():
        v1.save()
    v1.refresh_from_db()
    _unchanged(v1)


def test_it_refuses_save_of_changed_bytes_even_with_a_matching_hash(v1):
    original = BundleVersion.objects.get(pk=v1.pk)
    forged = b'{"guardrails":{},"metadata":{},"model":{},"output_schema":null,"system_prompt":"evil","tools":[]}'
    v1.canonical, v1.content_hash = forged, hashlib.sha256(forged).hexdigest()
    with pytest.raises(IntegrityError), transaction.atomic():
        v1.save()
    _unchanged(original)


@pytest.mark.parametrize(
    "change",
    [
        {"content_hash": "0" * 64},
        {"canonical": b"{}"},
        {"number": 99},
        {"message": "rewritten history"},
        {"author": "someone else"},
    ],
)
def test_it_refuses_queryset_update(v1, change):
    with pytest.raises(IntegrityError), transaction.atomic():
        BundleVersion.objects.filter(pk=v1.pk).update(**change)
    _unchanged(v1)


def test_it_refuses_raw_sql_update_and_delete(v1):
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "UPDATE registry_bundleversion SET canonical = convert_to('{}', 'UTF8'),"
            " content_hash = encode(sha256(convert_to('{}', 'UTF8')), 'hex') WHERE id = %s",
            [v1.pk],
        )
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DELETE FROM registry_bundleversion WHERE id = %s", [v1.pk])
    _unchanged(v1)


def test_it_refuses_inserting_a_hash_that_does_not_match_the_bytes(bundle):
    with pytest.raises(IntegrityError), transaction.atomic():
        BundleVersion.objects.create(
            bundle=bundle, number=1, canonical=b"{}", content_hash="0" * 64, message="m", author="a"
        )
    assert not BundleVersion.objects.filter(bundle=bundle).exists()


def test_it_still_allows_lifecycle_changes(v1):
    BundleVersion.objects.filter(pk=v1.pk).update(state="revoked", revoke_reason="test")
    assert BundleVersion.objects.get(pk=v1.pk).state == "revoked"
    _unchanged(v1)


def test_the_api_has_no_way_to_change_a_version(v1, ops):
    path = f"/api/v1/bundles/{v1.bundle.name}/versions/1/"
    for method in ("put", "patch", "delete"):
        response = getattr(ops.client, method)(path, data="{}", content_type="application/json")
        assert response.status_code == 405
        assert response.json()["error"]["code"] == "method_not_allowed"
    _unchanged(v1)


def test_the_admin_refuses_forged_change_and_delete_posts(client, v1):
    admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(admin)
    base = f"/admin/registry/bundleversion/{v1.pk}"
    assert client.get(f"{base}/change/", follow=True).status_code == 200  # readable
    forged = client.post(f"{base}/change/", {"message": "forged", "content_hash": "0" * 64, "number": 7})
    assert forged.status_code == 403
    assert client.post(f"{base}/delete/", {"post": "yes"}).status_code == 403
    _unchanged(v1)
    assert BundleVersion.objects.get(pk=v1.pk).message == "v1"


@pytest.mark.django_db(transaction=True)
def test_truncate_is_refused_on_versions_and_the_audit_log(v1):
    import psycopg

    s = connection.settings_dict
    # A plain connection, without the test runner's registry.allow_truncate.
    with psycopg.connect(
        dbname=s["NAME"],
        user=s["USER"],
        password=s["PASSWORD"] or None,
        host=s["HOST"],
        port=s["PORT"] or None,
        autocommit=True,
    ) as conn:
        for table in ("registry_bundleversion", "audit_auditevent", "registry_bundle"):
            with pytest.raises(psycopg.errors.IntegrityConstraintViolation):
                conn.execute(f"TRUNCATE {table} CASCADE")
    _unchanged(v1)
