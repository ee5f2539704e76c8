"""Include edges for the versions published with includes before registry 0011, from their
canonical bytes: one row per entry of `includes`, `current` for the latest version of its bundle.

The previous release (deploy/previous-release) cannot publish includes, so in an upgrade from it
this finds nothing, and every version with includes published from now on gets its edges from
version_publish; this is for a database that ran a build of composition before its edges existed.
Nothing else writes these rows until this release's code runs, so a version it misses cannot
appear meanwhile.

Rolling-upgrade safe, as metrics 0003: not atomic (each statement commits on its own), versions
read in chunks by id, each one statement well under MIGRATION_STATEMENT_TIMEOUT_MS, taking no lock
that blocks a publish, a label move or a session start. ON CONFLICT (the version and position of
an entry are unique) makes a retry after a failure add nothing twice. The marker's reference is
read as registry.includes.MARKER_RE has it: the text after the `@` (a bundle or label name has
none), all digits for a version number."""

from django.db import migrations

VERSION_CHUNK = 1_000

EDGES = r"""
INSERT INTO registry_include (version_id, bundle_id, position, marker, snippet_id, label, number, pinned_version,
    pinned_hash, current)
SELECT v.id, v.bundle_id, e.ord - 1, e.entry ->> 'marker', s.id,
    CASE WHEN r.ref ~ '^[0-9]+$' THEN '' ELSE r.ref END,
    CASE WHEN r.ref ~ '^[0-9]+$' THEN (e.entry ->> 'version')::integer END,
    (e.entry ->> 'version')::integer, e.entry ->> 'content_hash',
    v.number = (SELECT max(w.number) FROM registry_bundleversion w WHERE w.bundle_id = v.bundle_id)
FROM registry_bundleversion v
CROSS JOIN LATERAL jsonb_array_elements(convert_from(v.canonical, 'UTF8')::jsonb -> 'includes')
    WITH ORDINALITY AS e(entry, ord)
CROSS JOIN LATERAL (SELECT substring(e.entry ->> 'marker' FROM '@([a-z0-9_-]+)') AS ref) r
JOIN registry_bundle s ON s.name = e.entry ->> 'bundle'
WHERE v.id > %(after)s AND v.id <= %(upto)s
    -- Canonical JSON (sorted keys, no whitespace): only a document with includes has this key at
    -- its top level, and the byte search skips every other version without decoding it.
    AND position('"includes":['::bytea IN v.canonical) > 0
    AND jsonb_typeof(convert_from(v.canonical, 'UTF8')::jsonb -> 'includes') = 'array'
ON CONFLICT (version_id, position) DO NOTHING
"""


def backfill(apps, schema_editor) -> None:  # noqa: ANN001 (migration signature)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(max(id), 0) FROM registry_bundleversion")
        last = cursor.fetchone()[0]
        for low in range(0, last, VERSION_CHUNK):
            cursor.execute(EDGES, {"after": low, "upto": low + VERSION_CHUNK})


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("registry", "0011_includes")]
    operations = [migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True)]
