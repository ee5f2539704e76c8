"""The audit log stays append-only, with one exception: the prune (retention.services) may
delete rows older than its cutoff. It names the cutoff in a transaction-local setting
(registry.audit_prune_before), and the trigger itself checks the row's age against it and
refuses a cutoff less than 30 days old, so neither a stray setting nor a bug in the caller can
delete recent history. UPDATE is refused as before; so is every other DELETE."""

from django.db import migrations

FORWARD = r"""
CREATE OR REPLACE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  cutoff timestamptz;
BEGIN
  IF TG_OP = 'DELETE' THEN
    cutoff := nullif(current_setting('registry.audit_prune_before', true), '')::timestamptz;
    IF cutoff IS NOT NULL AND cutoff <= now() - interval '30 days' AND OLD.at < cutoff THEN
      RETURN OLD;
    END IF;
  END IF;
  RAISE EXCEPTION 'the audit log is append-only' USING ERRCODE = 'integrity_constraint_violation';
END;
$$;
"""

BACKWARD = r"""
CREATE OR REPLACE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'the audit log is append-only' USING ERRCODE = 'integrity_constraint_violation';
END;
$$;
"""


class Migration(migrations.Migration):
    dependencies = [("audit", "0003_refuse_truncate")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
