"""Issue 36: the application's role could insert audit rows dated in the past (and so rows the
prune would soon delete, or rows that rewrite what history appears to say). An audit row's
time is the database's now() unless the inserting role is a member of registry_audit_pruner
(the prune's role, and superusers: development, tests, a restore), whatever the application
sends: no node's clock and no caller decides when something happened."""

from django.db import migrations

FORWARD = r"""
CREATE FUNCTION audit_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NOT (EXISTS (SELECT FROM pg_roles WHERE rolname = 'registry_audit_pruner')
          AND pg_has_role(current_user, 'registry_audit_pruner', 'MEMBER')) THEN
    NEW.at := now();
  END IF;
  RETURN NEW;
END;
$$;
CREATE TRIGGER audit_stamp BEFORE INSERT ON audit_auditevent FOR EACH ROW EXECUTE FUNCTION audit_stamp();
"""

BACKWARD = r"""
DROP TRIGGER audit_stamp ON audit_auditevent;
DROP FUNCTION audit_stamp();
"""


class Migration(migrations.Migration):
    dependencies = [("audit", "0005_prune_role")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
