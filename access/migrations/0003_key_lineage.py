"""ApiKey.lineage_id: the first key of a key's rotation chain, which owns the sessions of every
key in it (access.actors.Actor.owns). Nullable: the previous release's INSERTs still work (a
key it rotates during a rolling upgrade starts a lineage of its own)."""

from django.db import migrations, models


def backfill(apps, schema_editor):
    """Existing rotation chains get their lineage. Their sessions stay where they are: the
    previous release, still serving during a rolling upgrade, finds a session by the key that
    started it, and Actor.owns accepts that key as well as the lineage; the next rotation of a
    key moves its sessions to the lineage (access.services.api_key_rotate)."""
    ApiKey = apps.get_model("access", "ApiKey")
    parents = dict(ApiKey.objects.filter(rotated_from__isnull=False).values_list("pk", "rotated_from_id"))
    for pk in parents:
        root, seen = pk, set()
        while root in parents and root not in seen:
            seen.add(root)
            root = parents[root]
        ApiKey.objects.filter(pk=pk).update(lineage_id=root)


class Migration(migrations.Migration):
    dependencies = [
        ("access", "0002_key_expiry_scopes_last_use"),
        ("sessions_app", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="apikey",
            name="lineage_id",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
