import django.db.models.deletion
from django.db import migrations, models

# Each turn writes one skills_skillturn row, and every index is one more write on it: the
# session's own index repeats skill_turn_unique_number's first column, and the version's FK
# index repeats skill_turn_version_idx (the same for skills_sessionskill's session and
# session_skill_unique_name). Only the indexes go: Django's AlterField would also drop and
# re-add the foreign keys, which re-checks every row under a lock, so the database side is
# the DROP INDEX alone, CONCURRENTLY (turns keep being written while it runs). The reverse
# builds them as sessions_app/migrations/0004 builds its index: CONCURRENTLY, exempt from
# MIGRATION_STATEMENT_TIMEOUT_MS, after dropping what a failed build left (an invalid index
# that IF NOT EXISTS would keep).

_INDEXES = [
    ("skills_sessionskill", "skills_sessionskill_session_id_6e1f7d17", "session_id"),
    ("skills_skillturn", "skills_skillturn_session_id_5dd17955", "session_id"),
    ("skills_skillturn", "skills_skillturn_version_id_28f09959", "version_id"),
]


def drop(apps, schema_editor) -> None:  # noqa: ANN001 (migration signature)
    with schema_editor.connection.cursor() as cursor:
        for _table, name, _column in _INDEXES:
            cursor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')


def build(apps, schema_editor) -> None:  # noqa: ANN001 (migration signature)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('statement_timeout')")
        previous = cursor.fetchone()[0]
        cursor.execute("SET statement_timeout = 0")
        try:
            for table, name, column in _INDEXES:
                cursor.execute(f'DROP INDEX CONCURRENTLY IF EXISTS "{name}"')
                cursor.execute(f'CREATE INDEX CONCURRENTLY "{name}" ON "{table}" ("{column}")')
        finally:
            cursor.execute("SELECT set_config('statement_timeout', %s, false)", [previous])


class Migration(migrations.Migration):
    atomic = False  # CONCURRENTLY runs outside a transaction

    dependencies = [
        ("registry", "0020_bundle_strict_conversation"),
        ("sessions_app", "0009_sweep_lease"),
        ("skills", "0003_autovacuum"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="sessionskill",
                    name="session",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="session_skills",
                        to="sessions_app.session",
                    ),
                ),
                migrations.AlterField(
                    model_name="skillturn",
                    name="session",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="skill_turns",
                        to="sessions_app.session",
                    ),
                ),
                migrations.AlterField(
                    model_name="skillturn",
                    name="version",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="registry.bundleversion",
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(drop, build)],
        )
    ]
