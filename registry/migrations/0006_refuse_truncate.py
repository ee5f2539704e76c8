"""TRUNCATE bypasses row triggers, so it gets a statement trigger of its own: published versions
(and, in audit 0003, the audit log) cannot be wiped wholesale either. The test settings set
registry.allow_truncate=on on their connections, because the test runner flushes with TRUNCATE."""

from django.db import migrations

FORWARD = r"""
CREATE FUNCTION registry_refuse_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('registry.allow_truncate', true) IS DISTINCT FROM 'on' THEN
    RAISE EXCEPTION '% cannot be truncated: its rows are immutable', TG_TABLE_NAME
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NULL;
END;
$$;
CREATE TRIGGER registry_version_refuse_truncate BEFORE TRUNCATE ON registry_bundleversion
  FOR EACH STATEMENT EXECUTE FUNCTION registry_refuse_truncate();
"""

BACKWARD = r"""
DROP TRIGGER registry_version_refuse_truncate ON registry_bundleversion;
DROP FUNCTION registry_refuse_truncate();
"""


class Migration(migrations.Migration):
    dependencies = [("registry", "0005_label_compatibility")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
