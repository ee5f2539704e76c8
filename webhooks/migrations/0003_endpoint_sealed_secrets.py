"""Webhook secrets encrypted at rest: new columns with database defaults, then every plaintext secret sealed
into `secret_sealed` and blanked. Reversible: going back unseals them into `secret`, which is
what the previous release reads.

During a rolling upgrade, a worker of the previous release that picks up a delivery for an
endpoint sealed here finds an empty `secret` and fails that attempt before sending anything;
its claim runs out and a worker of this release sends it (about a minute later). Rows the
previous release inserts meanwhile (plaintext, `secret_sealed` empty) are sealed on their next
attempt (webhooks.services)."""

from django.db import migrations, models


def seal_secrets(apps, schema_editor):
    from webhooks.sealing import seal

    Endpoint = apps.get_model("webhooks", "Endpoint")
    for endpoint in Endpoint.objects.filter(secret_sealed="").exclude(secret="").iterator():
        Endpoint.objects.filter(pk=endpoint.pk).update(secret_sealed=seal(endpoint.secret), secret="")


def unseal_secrets(apps, schema_editor):
    from webhooks.sealing import unseal

    Endpoint = apps.get_model("webhooks", "Endpoint")
    for endpoint in Endpoint.objects.exclude(secret_sealed="").iterator():
        Endpoint.objects.filter(pk=endpoint.pk).update(secret=unseal(endpoint.secret_sealed))


class Migration(migrations.Migration):
    dependencies = [
        ("webhooks", "0002_delivery_queue_markers"),
    ]

    operations = [
        migrations.AddField(
            model_name="endpoint",
            name="previous_secret_expires_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="endpoint",
            name="previous_secret_sealed",
            field=models.TextField(blank=True, default="", db_default=""),
        ),
        migrations.AddField(
            model_name="endpoint",
            name="secret_sealed",
            field=models.TextField(blank=True, default="", db_default=""),
        ),
        migrations.AlterField(
            model_name="endpoint",
            name="secret",
            field=models.CharField(blank=True, default="", max_length=100),
        ),
        migrations.RunPython(seal_secrets, unseal_secrets),
    ]
