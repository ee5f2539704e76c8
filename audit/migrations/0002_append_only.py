"""The audit log is append-only in the database itself: UPDATE and DELETE are refused."""

from django.db import migrations

FORWARD = r"""
CREATE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'the audit log is append-only' USING ERRCODE = 'integrity_constraint_violation';
END;
$$;
CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit_auditevent
  FOR EACH ROW EXECUTE FUNCTION audit_append_only();
"""

BACKWARD = r"""
DROP TRIGGER audit_append_only ON audit_auditevent;
DROP FUNCTION audit_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
