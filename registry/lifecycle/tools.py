"""Tool signatures through the lifecycle: the index a publish writes, and the state of each
signature, which follows the states of the versions that carry it.

A signature is `live` while a label targets a version carrying it, `draining` while none does
but such a version is still draining (sessions pinned to it can call the tool), `drained` once
every such version is drained or revoked, and `unreleased` before any of them left
`unreleased`. The state is derived from the version rows; the ToolSignature row stores the last
state settled so that each transition is announced once: `tool.draining` when it leaves `live`,
`tool.drained` when it reaches `drained` (from `live` or `draining`).

Why settle after the version's transaction commits, in a transaction of its own, and not inside
it: a label move or a release can release versions of several bundles that share signatures, in
whatever order its labels come; locking signature rows inside those transactions would add a
second set of locks taken in a data-dependent order (two releases, two signatures, a cycle).
Here the settle takes only signature rows, in ascending id, and reads the version states in a
statement after it holds them: under READ COMMITTED that statement sees every version
transition committed before the lock was granted. Of two settles racing on a signature (two
versions sharing it drained by two workers, two beat processes' sweeps) the second waits for
the first, then reads both versions' committed states; the state it compares with is the one
the first wrote, so one of them, never both, announces the transition. A settle lost to a crash
between the commit and the callback is picked up by the periodic sweep (settle_open)."""

import json
import logging
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from django.db import DatabaseError, transaction
from django.utils import timezone

from core import events
from registry import mcp_servers
from registry.models import BundleVersion, ToolSignature, ToolState, VersionState, VersionTool
from registry.tool_signatures import derived_state, signatures_of

logger = logging.getLogger("registry.tools")

# Signatures settled per transaction: bounds how long one settle holds rows.
SETTLE_BATCH = 200
# Versions named in an event's payload (the API lists them all).
EVENT_VERSIONS_MAX = 20


def tool_edges_write(*, version: BundleVersion, doc: dict[str, Any]) -> None:
    """Index the tools of a version being published (in version_publish's transaction): a
    signature row per new (name, schema hash), an edge per tool. The signature rows are
    inserted with ON CONFLICT DO NOTHING and never updated here. Two publishes (of different
    bundles) inserting the same new signature wait for each other on its unique entry, so they
    insert in one order, by (name, hash): in the tools' order, two documents listing two new
    tools in opposite orders would each wait for the other's second row (a deadlock)."""
    signatures = signatures_of(doc)
    if not signatures:
        return
    ToolSignature.objects.bulk_create(
        [
            ToolSignature(name=s.name, schema_hash=s.schema_hash, schema=s.schema)
            for s in sorted(signatures, key=lambda s: (s.name, s.schema_hash))
        ],
        ignore_conflicts=True,
    )
    ids = {
        (name, digest): pk
        for pk, name, digest in ToolSignature.objects.filter(
            name__in=[s.name for s in signatures], schema_hash__in=[s.schema_hash for s in signatures]
        ).values_list("pk", "name", "schema_hash")
    }
    sources = mcp_servers.sources_of(doc)
    VersionTool.objects.bulk_create(
        VersionTool(
            version=version,
            signature_id=ids[(s.name, s.schema_hash)],
            position=position,
            source=sources.get(s.name, ""),
        )
        for position, s in enumerate(signatures)
    )


def tool_signatures_settle(*, signature_ids: Iterable[int]) -> int:
    """Bring the stored state of these signatures to what their versions' states say, emitting
    `tool.draining` / `tool.drained` on the transitions; returns how many changed. Idempotent
    and safe to run concurrently (module docstring). Owns its transactions."""
    ids = sorted(set(signature_ids))
    changed = 0
    for start in range(0, len(ids), SETTLE_BATCH):
        with transaction.atomic():
            changed += _settle_batch(ids[start : start + SETTLE_BATCH])
    return changed


def _settle_batch(ids: list[int]) -> int:
    # Lock first (ascending id), then read the versions in a separate statement: its snapshot
    # is taken after the locks were granted (see the module docstring).
    signatures = list(ToolSignature.objects.select_for_update().filter(pk__in=ids).order_by("pk"))
    states: dict[int, set[str]] = defaultdict(set)
    for signature_id, state in VersionTool.objects.filter(signature_id__in=ids).values_list(
        "signature_id", "version__state"
    ):
        states[signature_id].add(state)
    changed = 0
    for signature in signatures:
        new = derived_state(states[signature.pk])
        if new != signature.state:
            _transition(signature, new)
            changed += 1
    return changed


def _transition(signature: ToolSignature, new: str) -> None:
    now = timezone.now()
    old = signature.state
    announce = []
    if new == ToolState.LIVE:
        signature.draining_since = signature.drained_at = None
    elif new == ToolState.DRAINING:
        signature.drained_at = None
        if old == ToolState.LIVE:
            signature.draining_since = now
            announce.append("tool.draining")
        elif signature.draining_since is None:
            signature.draining_since = now
    elif new == ToolState.DRAINED:
        if old == ToolState.LIVE:
            # Straight from live (nothing was pinned): both, in order, as version drains do.
            signature.draining_since = now
            announce.append("tool.draining")
        signature.drained_at = now
        if old in (ToolState.LIVE, ToolState.DRAINING):
            # From `unreleased` (a version revoked before anything pinned it) nothing could
            # ever call it, so there is nothing to announce.
            announce.append("tool.drained")
    signature.state = new
    signature.state_changed_at = now
    signature.save(update_fields=["state", "state_changed_at", "draining_since", "drained_at"])
    if announce:
        payload = _event_payload(signature)
        for event in announce:
            events.emit(event, **payload)


def _event_payload(signature: ToolSignature) -> dict[str, object]:
    carriers = list(
        VersionTool.objects.filter(signature=signature)
        .order_by("version__bundle__name", "version__number")
        .values_list("version__bundle__name", "version__number")[: EVENT_VERSIONS_MAX + 1]
    )
    return {
        "tool": signature.name,
        "schema_hash": signature.schema_hash,
        "state": signature.state,
        "versions": [{"bundle": b, "version": n} for b, n in carriers[:EVENT_VERSIONS_MAX]],
        "versions_truncated": len(carriers) > EVENT_VERSIONS_MAX,
    }


def tools_settle_after_commit(version_ids: Iterable[int]) -> None:
    """After the caller's transaction commits, settle the signatures of these versions (whose
    states it changed). Never raises into the committed caller: on a database error the
    periodic sweep settles them later."""
    ids = list(version_ids)

    def settle() -> None:
        try:
            signature_ids = VersionTool.objects.filter(version_id__in=ids).values_list("signature_id", flat=True)
            tool_signatures_settle(signature_ids=list(signature_ids))
        except DatabaseError:
            logger.exception("settling the tools of versions %s failed; the sweep will retry", ids)

    transaction.on_commit(settle)


def tool_signatures_settle_open() -> int:
    """The sweep's backstop: settle every signature whose stored state is not what its versions'
    states say (a settle lost to a crash). Reads without locks first, over the signatures that
    are not drained and the drained ones a live or draining version carries again, and locks
    only those that differ (tool_signatures_settle checks again under the lock)."""
    open_ids = set(ToolSignature.objects.exclude(state=ToolState.DRAINED).values_list("pk", flat=True))
    reopened = VersionTool.objects.filter(
        signature__state=ToolState.DRAINED, version__state__in=[VersionState.LIVE, VersionState.DRAINING]
    ).values_list("signature_id", flat=True)
    candidates = sorted(open_ids | set(reopened))
    stale: list[int] = []
    for start in range(0, len(candidates), SETTLE_BATCH):
        batch = candidates[start : start + SETTLE_BATCH]
        stored = dict(ToolSignature.objects.filter(pk__in=batch).values_list("pk", "state"))
        states: dict[int, set[str]] = defaultdict(set)
        for signature_id, state in VersionTool.objects.filter(signature_id__in=batch).values_list(
            "signature_id", "version__state"
        ):
            states[signature_id].add(state)
        stale += [pk for pk, state in stored.items() if derived_state(states[pk]) != state]
    return tool_signatures_settle(signature_ids=stale)


def tool_edges_backfill(*, chunk: int = 500) -> int:
    """Index the tools of versions that have none indexed (published by the previous release
    during a rolling upgrade, after migration 0016 ran), then settle their signatures; returns
    how many versions it indexed. Idempotent: each version in its own transaction, skipped
    once it has edges."""
    indexed, after = 0, 0
    while True:
        ids = list(
            BundleVersion.objects.filter(pk__gt=after, tool_edges__isnull=True)
            .order_by("pk")
            .values_list("pk", flat=True)[:chunk]
        )
        if not ids:
            return indexed
        for version_id in ids:
            with transaction.atomic():
                version = BundleVersion.objects.get(pk=version_id)
                if VersionTool.objects.filter(version_id=version_id).exists():
                    continue
                doc = json.loads(bytes(version.canonical))
                if signatures_of(doc):
                    tool_edges_write(version=version, doc=doc)
                    indexed += 1
            if VersionTool.objects.filter(version_id=version_id).exists():
                tool_signatures_settle(
                    signature_ids=VersionTool.objects.filter(version_id=version_id).values_list(
                        "signature_id", flat=True
                    )
                )
        after = ids[-1]
