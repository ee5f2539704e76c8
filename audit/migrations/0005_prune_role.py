"""Issue 36: the prune's exception is held by a database role, not by whoever can set a
setting. Until now anyone with the application's credentials could set
registry.audit_prune_before and delete audit rows older than the retention. The trigger now
also requires the deleting role to be a member of `registry_audit_pruner`: the prune connects
as such a role (AUDIT_PRUNE_DATABASE_URL), the web and the workers connect as one that is not.
A superuser is a member of every role, which is why the application's role must not be one
(docs/operations.md, "Database roles").

The role is created here when the migrating role may create roles; otherwise the migration
says so and the operator creates it (CREATE ROLE registry_audit_pruner NOLOGIN)."""

from django.db import migrations

ROLE = r"""
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'registry_audit_pruner') THEN
    BEGIN
      CREATE ROLE registry_audit_pruner NOLOGIN;
    EXCEPTION WHEN insufficient_privilege THEN
      RAISE NOTICE 'create the role registry_audit_pruner (NOLOGIN) as a role administrator: docs/operations.md';
    END;
  END IF;
END
$$;
"""

FORWARD = r"""
CREATE OR REPLACE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  cutoff timestamptz;
BEGIN
  IF TG_OP = 'DELETE' THEN
    cutoff := nullif(current_setting('registry.audit_prune_before', true), '')::timestamptz;
    IF cutoff IS NOT NULL AND cutoff <= now() - interval '30 days' AND OLD.at < cutoff
       AND EXISTS (SELECT FROM pg_roles WHERE rolname = 'registry_audit_pruner')
       AND pg_has_role(current_user, 'registry_audit_pruner', 'MEMBER') THEN
      RETURN OLD;
    END IF;
  END IF;
  RAISE EXCEPTION 'the audit log is append-only' USING ERRCODE = 'integrity_constraint_violation';
END;
$$;
"""

BACKWARD = r"""
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


class Migration(migrations.Migration):
    dependencies = [("audit", "0004_prune_exception")]
    operations = [migrations.RunSQL(ROLE, migrations.RunSQL.noop), migrations.RunSQL(FORWARD, BACKWARD)]
