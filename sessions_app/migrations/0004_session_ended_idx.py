from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY: no lock that blocks session starts, renewals or ends while it
    # builds (it cannot run in a transaction).
    atomic = False

    dependencies = [("sessions_app", "0003_session_routing_key")]

    operations = [
        AddIndexConcurrently(
            model_name="session",
            index=models.Index(
                condition=models.Q(("status", "active"), _negated=True),
                fields=["ended_at", "id"],
                name="session_ended_idx",
            ),
        ),
    ]
