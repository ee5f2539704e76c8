"""A tool's signature: its name and the hash of its canonical schema. Pure functions: the publish
(registry.services), the backfill (migration 0015) and the MCP pinning all compute it here.

What the hash covers is what a caller plans against: the input schema and, where the tool
gives one, its output schema. The description is wording (a patch, registry.contracts), so two
versions that only reword a tool share its signature."""

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from registry.canonical import canonical_bytes
from registry.models import ToolState, VersionState


@dataclass(frozen=True)
class Signature:
    name: str
    schema: dict[str, Any]  # {"input_schema": ..., "output_schema": ...?}
    schema_hash: str


def signature_of(tool: dict[str, Any]) -> Signature:
    """The signature of one tool of a normalised content document."""
    schema: dict[str, Any] = {"input_schema": tool.get("input_schema")}
    if tool.get("output_schema") is not None:
        schema["output_schema"] = tool["output_schema"]
    return Signature(
        name=str(tool["name"]), schema=schema, schema_hash=hashlib.sha256(canonical_bytes(schema)).hexdigest()
    )


def signatures_of(doc: dict[str, Any]) -> list[Signature]:
    """Every tool's signature, in the document's order (names are unique within a document)."""
    tools = doc.get("tools") or []
    return [signature_of(tool) for tool in tools if isinstance(tool, dict) and isinstance(tool.get("name"), str)]


def derived_state(version_states: Iterable[str]) -> str:
    """A signature's state from the states of the versions carrying it (docs/api.md, GET /tools/):
    live while one is live, draining while one drains, drained once one was drained or revoked
    and none is live or draining, unreleased before any left `unreleased`."""
    states = set(version_states)
    if VersionState.LIVE in states:
        return ToolState.LIVE
    if VersionState.DRAINING in states:
        return ToolState.DRAINING
    if states & {VersionState.DRAINED, VersionState.REVOKED}:
        return ToolState.DRAINED
    return ToolState.UNRELEASED
