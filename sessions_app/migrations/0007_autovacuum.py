from django.db import migrations

# Autovacuum by default waits until a fifth of a table is dead rows. The session table holds every
# session of the retention window (130 M at 4.3 M a day and 30 days), and each lease renewal, end
# and expiry leaves a dead row version and index entries behind: a fifth would be 26 M of them in
# the partial indexes of active sessions, which the per-turn path and the counts walk. The
# per-turn tables (skills, knowledge, webhooks: the same setting in their migrations named autovacuum) are
# pruned a thirtieth a day, so a fifth is six days of deletes. Two per cent: vacuum keeps pace
# with the churn, not with the history. ALTER TABLE ... SET (autovacuum_*) takes SHARE UPDATE
# EXCLUSIVE, which blocks no read or write (docs/operations.md, "Vacuum").


class Migration(migrations.Migration):
    dependencies = [("sessions_app", "0006_session_active_version_id_idx")]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE sessions_app_session SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02)",
            "ALTER TABLE sessions_app_session RESET (autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor)",
        )
    ]
