"""ApiKey.lineage_id: the first key of a key's rotation chain, which owns the sessions of every
key in it (access.actors.Actor.owns). Nullable: the previous release's INSERTs still work (a
key it rotates during a rolling upgrade starts a lineage of its own)."""

from django.db import migrations, models


def backfill(apps, schema_editor):
    """Existing rotation chains get their lineage, and the active sessions their rotated keys
    started move to the first key of the chain (the owner the new code compares with), unless
    that owner already holds a session with the same external_id."""
    ApiKey = apps.get_model("access", "ApiKey")
    parents = dict(ApiKey.objects.filter(rotated_from__isnull=False).values_list("pk", "rotated_from_id"))
    for pk in parents:
        root, seen = pk, set()
        while root in parents and root not in seen:
            seen.add(root)
            root = parents[root]
        ApiKey.objects.filter(pk=pk).update(lineage_id=root)
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(
                "UPDATE sessions_app_session s SET api_key_id = %s WHERE s.api_key_id = %s AND s.status = 'active'"
                " AND (s.external_id IS NULL OR NOT EXISTS (SELECT 1 FROM sessions_app_session o"
                " WHERE o.api_key_id = %s AND o.external_id = s.external_id))",
                [root, pk, root],
            )


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
