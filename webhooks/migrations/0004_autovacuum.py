from django.db import migrations

# Vacuum at two per cent of dead rows instead of a fifth: why in sessions_app/migrations/0007_autovacuum.py.


class Migration(migrations.Migration):
    dependencies = [("webhooks", "0003_endpoint_sealed_secrets")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE webhooks_delivery SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02)",
            "ALTER TABLE webhooks_delivery RESET (autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor)",
        )
    ]
