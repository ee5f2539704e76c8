"""Published content is immutable in the database itself, whatever path writes to it.

* A CHECK ties content_hash to the stored bytes, so no insert can carry a wrong hash.
* A trigger refuses any UPDATE that changes bundle, number, canonical bytes or hash, and
  any DELETE of a version (so raw SQL, the ORM's update() and the admin all meet it).
Lifecycle columns (state, drained_at, ...) stay writable."""

from django.db import migrations

FORWARD = r"""
ALTER TABLE registry_bundleversion
  ADD CONSTRAINT version_hash_matches_bytes
  CHECK (content_hash = encode(sha256(canonical), 'hex'));

CREATE FUNCTION registry_version_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    RAISE EXCEPTION 'bundle version % is immutable and cannot be deleted', OLD.id
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF NEW.canonical IS DISTINCT FROM OLD.canonical
     OR NEW.content_hash IS DISTINCT FROM OLD.content_hash
     OR NEW.number IS DISTINCT FROM OLD.number
     OR NEW.bundle_id IS DISTINCT FROM OLD.bundle_id
     OR NEW.created_at IS DISTINCT FROM OLD.created_at
     OR NEW.author IS DISTINCT FROM OLD.author
     OR NEW.message IS DISTINCT FROM OLD.message THEN
    RAISE EXCEPTION 'bundle version % is immutable: its content, hash, number and authorship cannot change', OLD.id
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END;
$$;

CREATE TRIGGER registry_version_immutable
  BEFORE UPDATE OR DELETE ON registry_bundleversion
  FOR EACH ROW EXECUTE FUNCTION registry_version_immutable();
"""

BACKWARD = r"""
DROP TRIGGER registry_version_immutable ON registry_bundleversion;
DROP FUNCTION registry_version_immutable();
ALTER TABLE registry_bundleversion DROP CONSTRAINT version_hash_matches_bytes;
"""


class Migration(migrations.Migration):
    dependencies = [("registry", "0001_initial")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
