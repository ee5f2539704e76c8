from django.db import migrations, models

# CREATE INDEX CONCURRENTLY takes no lock that blocks session starts, renewals or ends (SHARE
# UPDATE EXCLUSIVE), so the build may take as long as the table needs: it alone is exempt from
# MIGRATION_STATEMENT_TIMEOUT_MS (lock_timeout still bounds its wait for the lock). A build that
# failed leaves an invalid index behind; the DROP makes a retry start clean.


def build(apps, schema_editor) -> None:  # noqa: ANN001 (migration signature)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('statement_timeout')")
        previous = cursor.fetchone()[0]
        cursor.execute("DROP INDEX CONCURRENTLY IF EXISTS session_ended_idx")
        cursor.execute("SET statement_timeout = 0")
        try:
            cursor.execute(
                "CREATE INDEX CONCURRENTLY session_ended_idx ON sessions_app_session (ended_at, id)"
                " WHERE NOT (status = 'active')"
            )
        finally:
            cursor.execute("SELECT set_config('statement_timeout', %s, false)", [previous])


def drop(apps, schema_editor) -> None:  # noqa: ANN001 (migration signature)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("DROP INDEX CONCURRENTLY IF EXISTS session_ended_idx")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("sessions_app", "0003_session_routing_key")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunPython(build, drop),
            ],
            state_operations=[
                migrations.AddIndex(
                    model_name="session",
                    index=models.Index(
                        condition=models.Q(("status", "active"), _negated=True),
                        fields=["ended_at", "id"],
                        name="session_ended_idx",
                    ),
                ),
            ],
        ),
    ]
