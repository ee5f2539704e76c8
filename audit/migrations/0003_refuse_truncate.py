from django.db import migrations

FORWARD = r"""
CREATE TRIGGER audit_refuse_truncate BEFORE TRUNCATE ON audit_auditevent
  FOR EACH STATEMENT EXECUTE FUNCTION registry_refuse_truncate();
"""
BACKWARD = "DROP TRIGGER audit_refuse_truncate ON audit_auditevent;"


class Migration(migrations.Migration):
    dependencies = [("audit", "0002_append_only"), ("registry", "0006_refuse_truncate")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
