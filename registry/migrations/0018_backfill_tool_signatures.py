"""Tool signatures for the versions published before registry 0015, from their canonical bytes:
a ToolSignature per (name, schema hash) and a VersionTool edge per tool, then each signature's
state as its versions' states make it (no event: these are not transitions that happen now).

The hash is registry.tool_signatures.signature_of's, written out here so that a later change
of that module cannot change what this migration computed: sha256 of the canonical JSON
(sorted keys, `,`/`:` separators, UTF-8) of {"input_schema": ..., "output_schema": ...?}.

Rolling-upgrade safe, as 0012: not atomic, versions read in chunks by id, ON CONFLICT DO NOTHING
on both unique constraints, so a retry after a failure adds nothing twice. A version the previous
release publishes while this runs has no edges until `manage.py tool_signatures_backfill` (the
same function) runs after the rollout (docs/operations.md, "Retiring a tool backend")."""

import hashlib
import json

from django.db import migrations

VERSION_CHUNK = 500


def _canonical(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def backfill(apps, schema_editor) -> None:  # noqa: ANN001 (migration signature)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(max(id), 0) FROM registry_bundleversion")
        last = cursor.fetchone()[0]
        for low in range(0, last, VERSION_CHUNK):
            cursor.execute(
                "SELECT v.id, convert_from(v.canonical, 'UTF8')::jsonb -> 'tools' FROM registry_bundleversion v"
                " WHERE v.id > %s AND v.id <= %s AND NOT EXISTS"
                " (SELECT 1 FROM registry_versiontool t WHERE t.version_id = v.id)",
                [low, low + VERSION_CHUNK],
            )
            for version_id, tools in cursor.fetchall():
                if isinstance(tools, str):
                    tools = json.loads(tools)
                for position, tool in enumerate(tools if isinstance(tools, list) else []):
                    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                        continue
                    schema = {"input_schema": tool.get("input_schema")}
                    if tool.get("output_schema") is not None:
                        schema["output_schema"] = tool["output_schema"]
                    digest = hashlib.sha256(_canonical(schema)).hexdigest()
                    cursor.execute(
                        "INSERT INTO registry_toolsignature (name, schema_hash, schema, state)"
                        " VALUES (%s, %s, %s::jsonb, 'unreleased') ON CONFLICT (name, schema_hash) DO NOTHING",
                        [tool["name"], digest, _canonical(schema).decode()],
                    )
                    cursor.execute(
                        "INSERT INTO registry_versiontool (version_id, signature_id, position)"
                        " SELECT %s, s.id, %s FROM registry_toolsignature s WHERE s.name = %s AND s.schema_hash = %s"
                        " ON CONFLICT (version_id, signature_id) DO NOTHING",
                        [version_id, position, tool["name"], digest],
                    )
        # Each signature's state from its versions' (registry.lifecycle.tools.derived_state).
        cursor.execute(
            """UPDATE registry_toolsignature s SET state = d.state, state_changed_at = now()
               FROM (SELECT t.signature_id,
                       CASE WHEN bool_or(v.state = 'live') THEN 'live'
                            WHEN bool_or(v.state = 'draining') THEN 'draining'
                            WHEN bool_or(v.state IN ('drained', 'revoked')) THEN 'drained'
                            ELSE 'unreleased' END AS state
                     FROM registry_versiontool t JOIN registry_bundleversion v ON v.id = t.version_id
                     GROUP BY t.signature_id) d
               WHERE s.id = d.signature_id AND s.state <> d.state"""
        )


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("registry", "0017_tool_signatures")]
    operations = [migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True)]
