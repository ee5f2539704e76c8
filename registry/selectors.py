"""Reads of bundles, versions and labels."""

import json
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.db import connection
from django.db.models import Count, Exists, F, Max, OuterRef, Prefetch, QuerySet, Subquery

from access.actors import Actor
from core import limits
from core.errors import ModelRetired, NotFound
from modelcatalog import clock
from modelcatalog import selectors as catalog_selectors
from modelcatalog.selectors import ModelInfo, model_get
from registry import pins
from registry.contracts import Diff, diff_contents
from registry.models import (
    Bundle,
    BundleVersion,
    Include,
    Label,
    McpDrift,
    Release,
    ToolSignature,
    VersionApproval,
    VersionCheck,
    VersionState,
    VersionTool,
)
from registry.parsed_content import version_model_name
from registry.tool_signatures import derived_state


def bundles_visible(actor: Actor | None) -> QuerySet[Bundle]:
    """The bundles `actor` may see: all, or those its key's scope patterns match.
    None (the admin, commands) means no key scope applies."""
    bundles = Bundle.objects.all()
    pattern = actor.scope_regex() if actor is not None else None
    return bundles if pattern is None else bundles.filter(name__regex=pattern)


def bundle_get(*, name: str, actor: Actor | None = None) -> Bundle:
    """A bundle by name; 404 alike for one that does not exist and one outside the key's scope,
    so a scoped key cannot learn that other bundles exist."""
    bundle = bundles_visible(actor).filter(name=name).first()
    if bundle is None:
        raise NotFound(f"No bundle named {name!r}.")
    return bundle


def bundle_for_start(*, name: str, actor: Actor) -> Bundle:
    """bundle_get for a session start: only the id (with the name, what a start uses), read in
    raw SQL and the scope checked in Python (the ORM's query compiler cost a sixth of a
    start's CPU, measured). The same 404 for a bundle that does not exist and one outside
    the key's scope (Actor.may_see_bundle is the rule scope_regex writes as SQL)."""
    if actor.may_see_bundle(name):
        with connection.cursor() as cursor:
            cursor.execute("SELECT id FROM registry_bundle WHERE name = %s", [name])
            row = cursor.fetchone()
        if row is not None:
            return Bundle(id=row[0], name=name)
    raise NotFound(f"No bundle named {name!r}.")


def bundles_with_labels(*, actor: Actor | None = None) -> QuerySet[Bundle]:
    """Visible bundles with `latest_version` annotated and labels (with versions) prefetched."""
    return (
        bundles_visible(actor)
        .annotate(latest_version=Max("versions__number"))
        .prefetch_related(Prefetch("labels", queryset=Label.objects.select_related("version").order_by("name")))
    )


def catalog(*, actor: Actor) -> QuerySet[Bundle]:
    """What this identity can start sessions on: visible bundles that have at least one label."""
    return bundles_with_labels(actor=actor).filter(labels__isnull=False).distinct()


def catalog_entry(bundle: Bundle) -> dict[str, Any]:
    """A bundle as the capability catalog shows it (GET /api/v1/catalog/'s CatalogEntryOut,
    the MCP server's list_capabilities)."""
    return {
        "name": bundle.name,
        "description": bundle.description,
        "when_to_use": bundle.when_to_use,
        "labels": bundle_label_map(bundle),
    }


def version_ids_existing(version_ids: Iterable[int]) -> set[int]:
    """Which of `version_ids` are versions (one index probe per id)."""
    return set(BundleVersion.objects.filter(pk__in=list(version_ids)).values_list("pk", flat=True))


def bundle_label_map(bundle: Bundle) -> dict[str, int]:
    """{label: version number}; uses the prefetch from bundles_with_labels when present."""
    return {label.name: label.version.number for label in bundle.labels.all()}


def label_targets(bundle_id: int) -> dict[str, int]:
    """{label: version number} for one bundle, in one query."""
    return dict(Label.objects.filter(bundle_id=bundle_id).values_list("name", "version__number"))


def versions_of(bundle: Bundle) -> QuerySet[BundleVersion]:
    """A bundle's versions, each with `active_sessions` (a probe of the partial index of active
    sessions per row, so a version GET costs the same at any number of ended sessions)."""
    return BundleVersion.objects.filter(bundle=bundle).annotate(active_sessions=pins.active_annotation())


def version_get(*, bundle: Bundle, number: int) -> BundleVersion:
    version = versions_of(bundle).filter(number=number).first()
    if version is None:
        raise NotFound(f"Bundle {bundle.name!r} has no version {number}.")
    return version


def label_get(*, bundle: Bundle, name: str) -> Label:
    label: Label | None = Label.objects.filter(bundle=bundle, name=name).select_related("version").first()
    if label is None:
        raise NotFound(f"Bundle {bundle.name!r} has no label {name!r}.")
    return label


def label_history(label: Label) -> QuerySet[Any]:
    """Every move of a label, newest first, with the numbers of the versions it moved between."""
    history: QuerySet[Any] = label.history.select_related("version", "previous_version").order_by("-history_id")
    return history


def version_diff(*, old: BundleVersion, new: BundleVersion) -> Diff:
    """The classified changes from `old` to `new` (registry.contracts), read from stored bytes."""
    return diff_contents(json.loads(bytes(old.canonical)), json.loads(bytes(new.canonical)))


def label_targets_out(label: Label) -> list[dict[str, int]]:
    """A label's (or a history row's) targets as answers show them: [{"version", "weight"}],
    one target at 100 unless the label is split."""
    if label.targets:
        return [{"version": t["number"], "weight": t["weight"]} for t in label.targets]
    return [{"version": label.version.number, "weight": 100}]


def release_get(*, release_id: Any, actor: Actor) -> Release:
    """A release, if every bundle it touched is in the actor's scope (else 404, as for bundles)."""
    release = Release.objects.filter(pk=release_id).first()
    if release is None or not all(actor.may_see_bundle(item["bundle"]) for item in release.items):
        raise NotFound(f"No release {release_id}.")
    return release


def checks_latest(*, bundle_id: int, content_hash: str) -> QuerySet[VersionCheck]:
    """The latest report of each check name for this content of the bundle, by name."""
    return (
        VersionCheck.objects.filter(bundle_id=bundle_id, content_hash=content_hash)
        .order_by("name", "-id")
        .distinct("name")
    )


def approvals_of(*, bundle_id: int, content_hash: str) -> QuerySet[VersionApproval]:
    """The approvals of this content of the bundle, oldest first (one per approver)."""
    return VersionApproval.objects.filter(bundle_id=bundle_id, content_hash=content_hash).order_by("id")


def bundles_using_pack(pack_name: str) -> list[dict[str, Any]]:
    """The bundles with a version whose content lists the pack: [{"bundle", "versions", "labels"}],
    versions newest first, labels as {name: number} for the labels targeting one of them.

    Reads every version's stored JSON (an admin page, not a hot path)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT b.name, v.number, COALESCE(
                (SELECT json_object_agg(l.name, v.number) FROM registry_label l WHERE l.version_id = v.id), '{}')
            FROM registry_bundleversion v JOIN registry_bundle b ON b.id = v.bundle_id
            WHERE convert_from(v.canonical, 'UTF8')::jsonb -> 'knowledge' ? %s
            ORDER BY b.name, v.number DESC
            """,
            [pack_name],
        )
        rows = cursor.fetchall()
    found: dict[str, dict[str, Any]] = {}
    for bundle, number, labels in rows:
        entry = found.setdefault(bundle, {"bundle": bundle, "versions": [], "labels": {}})
        entry["versions"].append(number)
        entry["labels"].update(labels if isinstance(labels, dict) else {})
    return list(found.values())


def version_state_counts() -> list[tuple[str, int]]:
    """How many versions are in each lifecycle state (the metrics scrape)."""
    return list(BundleVersion.objects.order_by().values_list("state").annotate(n=Count("pk")).values_list("state", "n"))


# --- composition (registry.includes): what a marker names, and who includes a bundle -------------


def include_target(*, bundle_name: str, label: str | None, number: int | None) -> tuple[bool, BundleVersion | None]:
    """(whether the bundle exists, the version a marker names now or None): a label's primary
    target, or the version with that number."""
    bundle_id = Bundle.objects.filter(name=bundle_name).values_list("pk", flat=True).first()
    if bundle_id is None:
        return False, None
    if number is not None:
        return True, BundleVersion.objects.filter(bundle_id=bundle_id, number=number).first()
    found = Label.objects.filter(bundle_id=bundle_id, name=label).select_related("version").first()
    return True, found.version if found is not None else None


def version_by_hash(*, bundle_name: str, content_hash: str) -> BundleVersion | None:
    """The version of `bundle_name` with these bytes (a pinned include), if this registry has it."""
    return BundleVersion.objects.filter(bundle__name=bundle_name, content_hash=content_hash).first()


def include_edges_of(*, version_ids: list[int]) -> list[tuple[int, int, int | None]]:
    """(version id, snippet bundle id, pinned snippet version id or None when this registry
    lacks it) for each include of these versions: one level of a walk down the includes
    (registry.composition), in one query over the edges, without reading any version's bytes."""
    pinned = BundleVersion.objects.filter(bundle_id=OuterRef("snippet_id"), content_hash=OuterRef("pinned_hash"))
    return list(
        Include.objects.filter(version_id__in=version_ids)
        .annotate(pinned_id=Subquery(pinned.values("pk")[:1]))
        .order_by("version_id", "position")
        .values_list("version_id", "snippet_id", "pinned_id")
    )


def dependents(*, bundle_name: str, actor: Actor | None = None, label: str | None = None) -> QuerySet[Include]:
    """The include edges of the bundles (visible to `actor`) whose latest version includes
    `bundle_name` (by `label` only, when given), one per marker, ordered by the including
    bundle's name (annotated `including`) and the marker's position: a total order, so a cursor
    can page it. `dependent_entry` turns each into its answer.

    On every publish answer and every label move answer (the rollback path), so it costs the
    same at any history: one query over the current include edges of the snippet (the partial
    index include_current_idx, by label for a move), each checked against its bundle's latest
    number and given what its marker names now, all by index probes (registry.models.Include).
    Nothing reads the snippet's versions other than those the markers name, or any version's
    bytes. The key's scope is a filter in the query too, so a LIMIT bounds what is read."""
    if label is not None and (label == "" or label.isdigit()):
        # `@3` is version 3 (includes.Marker.number): no marker follows a label named only with
        # digits, and "" is how an edge says it names a number.
        return Include.objects.none()
    edges = Include.objects.filter(current=True, snippet__name=bundle_name)
    if label is not None:
        edges = edges.filter(label=label)
    pattern = actor.scope_regex() if actor is not None else None
    if pattern is not None:
        edges = edges.filter(bundle__name__regex=pattern)
    # `current` is cleared by the including bundle's next publish; a version published by code
    # that writes no edges (the previous release, during an upgrade) does not clear it, so the
    # latest number decides, and `current` only keeps the edges of older versions out of the index.
    latest = BundleVersion.objects.filter(bundle_id=OuterRef("bundle_id")).order_by("-number").values("number")[:1]
    by_label = Label.objects.filter(bundle_id=OuterRef("snippet_id"), name=OuterRef("label"))
    by_number = BundleVersion.objects.filter(bundle_id=OuterRef("snippet_id"), number=OuterRef("number"))
    return (
        edges.filter(version__number=Subquery(latest))
        .annotate(
            including=F("bundle__name"),
            including_version=F("version__number"),
            label_number=Subquery(by_label.values("version__number")[:1]),
            label_hash=Subquery(by_label.values("version__content_hash")[:1]),
            number_hash=Subquery(by_number.values("content_hash")[:1]),
        )
        .order_by("including", "position")
    )


def dependent_entry(edge: Include) -> dict[str, Any]:
    """{"bundle", "version", "marker", "pinned_version", "pinned_hash", "current_version",
    "outdated"} of an edge from `dependents`. `current_version` is what the marker names now
    (null when it names nothing); `outdated` is true when publishing that bundle's source again
    would pick up other bytes."""
    e: Any = edge  # the annotations of `dependents`
    if e.number is not None:
        current, current_hash = e.number, e.number_hash
    else:
        current, current_hash = e.label_number, e.label_hash
    return {
        "bundle": e.including,
        "version": e.including_version,
        "marker": e.marker,
        "pinned_version": e.pinned_version,
        "pinned_hash": e.pinned_hash,
        "current_version": current if current_hash is not None else None,
        "outdated": current_hash != e.pinned_hash,
    }


def bundles_including(
    *, bundle_name: str, actor: Actor | None = None, label: str | None = None
) -> list[dict[str, Any]]:
    """Every entry of `dependents`, unbounded: for callers that need them all. An API answer takes
    `dependents_first` or pages `dependents`."""
    return [dependent_entry(edge) for edge in dependents(bundle_name=bundle_name, actor=actor, label=label)]


def dependents_first(
    *, bundle_name: str, actor: Actor | None = None, label: str | None = None, limit: int = limits.DEPENDENTS_MAX
) -> tuple[list[dict[str, Any]], int]:
    """(the first `limit` entries of `dependents`, how many there are in all): what a publish or
    a label move answers. One query with a LIMIT; a count only when there are more."""
    edges = dependents(bundle_name=bundle_name, actor=actor, label=label)
    first = list(edges[: limit + 1])
    total = len(first) if len(first) <= limit else edges.order_by().count()
    return [dependent_entry(edge) for edge in first[:limit]], total


# --- tool signatures -----------------------------------------------------------------------------

# Versions listed per signature (the live and draining ones first); the rest are counted.
TOOL_VERSIONS_MAX = 50
# Signatures of one tool name that GET /tools/{name}/ compares side by side.
TOOL_SIGNATURES_MAX = 20
_OPEN_STATES = (VersionState.LIVE, VersionState.DRAINING)
_STATE_ORDER = {VersionState.LIVE: 0, VersionState.DRAINING: 1}


def tools_visible(*, actor: Actor | None) -> QuerySet[ToolSignature]:
    """The tool signatures carried by a version of a bundle `actor` may see (GET /tools/, scoped
    as the catalog is), ordered by name."""
    edges = VersionTool.objects.filter(signature=OuterRef("pk"), version__bundle__in=bundles_visible(actor))
    return ToolSignature.objects.filter(Exists(edges)).order_by("name", "pk")


def tools_described(*, signatures: Iterable[ToolSignature], actor: Actor | None) -> list[dict[str, Any]]:
    """Each signature as GET /tools/ shows it, from the versions `actor` may see only: the bundles
    and versions carrying it (each with its state, labels and active sessions), the active
    sessions that can call it, first and last seen (the first and latest publish carrying it) and
    its state (registry.tool_signatures.derived_state over those versions). Sessions are counted
    on live and draining versions only, each count bounded as every `active_sessions` is; a
    drained or revoked version has none that can call. A fixed number of queries per page."""
    signatures = list(signatures)
    ids = [s.pk for s in signatures]
    edges: list[dict[str, Any]] = [
        dict(edge)
        for edge in VersionTool.objects.filter(signature_id__in=ids, version__bundle__in=bundles_visible(actor))
        .order_by("signature_id", "version__bundle__name", "-version__number")
        .values(
            "signature_id",
            "version_id",
            "version__number",
            "version__state",
            "version__created_at",
            "version__bundle_id",
            "version__bundle__name",
        )
    ]
    open_ids = {e["version_id"] for e in edges if e["version__state"] in _OPEN_STATES}
    active = dict(
        BundleVersion.objects.filter(pk__in=open_ids)
        .annotate(active_sessions=pins.active_annotation())
        .values_list("pk", "active_sessions")
    )
    labels = _label_names_by_version(open_ids, {e["version__bundle_id"] for e in edges if e["version_id"] in open_ids})
    by_signature: dict[int, list[dict[str, Any]]] = {}
    for edge in edges:
        by_signature.setdefault(edge["signature_id"], []).append(edge)
    return [_tool_row(s, by_signature.get(s.pk, []), active, labels) for s in signatures]


def _label_names_by_version(version_ids: set[int], bundle_ids: set[int]) -> dict[int, list[str]]:
    """{version id: names of the labels that target it}, for the given versions."""
    found: dict[int, list[str]] = {}
    for name, version_id, targets in Label.objects.filter(bundle_id__in=bundle_ids).values_list(
        "name", "version_id", "targets"
    ):
        targeted = {t["version_id"] for t in targets} if targets else {version_id}
        for vid in targeted & version_ids:
            found.setdefault(vid, []).append(name)
    return {vid: sorted(names) for vid, names in found.items()}


def _tool_row(
    signature: ToolSignature,
    edges: list[dict[str, Any]],
    active: dict[int, int],
    labels: dict[int, list[str]],
) -> dict[str, Any]:
    ordered = sorted(edges, key=lambda e: _STATE_ORDER.get(e["version__state"], 2))
    shown = ordered[:TOOL_VERSIONS_MAX]
    bundles: dict[str, list[dict[str, Any]]] = {}
    for edge in sorted(shown, key=lambda e: (e["version__bundle__name"], -e["version__number"])):
        bundles.setdefault(edge["version__bundle__name"], []).append(
            {
                "version": edge["version__number"],
                "state": edge["version__state"],
                "labels": labels.get(edge["version_id"], []),
                "sessions_active": active.get(edge["version_id"], 0),
            }
        )
    created = [e["version__created_at"] for e in edges]
    return {
        "name": signature.name,
        "schema_hash": signature.schema_hash,
        "state": derived_state(e["version__state"] for e in edges),
        "sessions_active": sum(active.get(e["version_id"], 0) for e in edges),
        "first_seen_at": min(created, default=None),
        "last_seen_at": max(created, default=None),
        "bundles": [{"name": name, "versions": versions} for name, versions in bundles.items()],
        "versions_total": len(edges),
        "versions_truncated": len(edges) > len(shown),
        "schema": signature.schema,
    }


def tool_get(*, name: str, actor: Actor | None) -> dict[str, Any]:
    """GET /tools/{name}/: the visible signatures of one tool name, oldest first (by first
    seen), side by side, and the classified schema diff (registry.contracts) from each to the
    next. 404 alike for a name nobody carries and one carried only outside the key's scope."""
    signatures = list(tools_visible(actor=actor).filter(name=name)[: TOOL_SIGNATURES_MAX + 1])
    if not signatures:
        raise NotFound(f"No tool named {name!r}.")
    rows = tools_described(signatures=signatures[:TOOL_SIGNATURES_MAX], actor=actor)
    rows.sort(key=lambda r: (r["first_seen_at"] is None, r["first_seen_at"], r["schema_hash"]))
    diffs = []
    for old, new in zip(rows, rows[1:], strict=False):
        diff = tool_schema_diff(name=name, old=old["schema"], new=new["schema"])
        diffs.append(
            {
                "from_hash": old["schema_hash"],
                "to_hash": new["schema_hash"],
                "level": diff.level,
                "changes": diff.changes,
            }
        )
    return {
        "name": name,
        "signatures": rows,
        "signatures_truncated": len(signatures) > TOOL_SIGNATURES_MAX,
        "diffs": diffs,
    }


def tool_schema_diff(*, name: str, old: dict[str, Any], new: dict[str, Any]) -> Diff:
    """The classified changes between two schemas of one tool, by the contract diff of two
    one-tool documents (so a tool's schemas are judged exactly as a version diff judges them);
    the output schema, where either gives one, as the document's output schema."""

    def doc(schema: dict[str, Any]) -> dict[str, Any]:
        tool = {"name": name, "description": "", "input_schema": schema.get("input_schema")}
        return {"tools": [tool], "output_schema": schema.get("output_schema")}

    return diff_contents(doc(old), doc(new))


def mcp_drifts_open(version_id: int) -> list[McpDrift]:
    """A version's unresolved MCP drifts (registry.mcp_drift): the alert on its page."""
    return list(McpDrift.objects.filter(version_id=version_id, resolved_at__isnull=True).order_by("tool"))


# --- the model a version names (modelcatalog) ---------------------------------------------------


def version_model_info(version: BundleVersion) -> tuple[str | None, ModelInfo | None]:
    """(the model name a version's content gives, its model-catalog entry or None)."""
    # A row read whole (a locked version) carries its bytes: no read for them then. A stand-in
    # built from a few columns (BundleVersion(id=..., content_hash=...)) has the field's
    # default, b"", which no version's content is.
    canonical = version.__dict__.get("canonical")
    name = version_model_name(
        version_id=version.pk,
        content_hash=version.content_hash,
        canonical=bytes(canonical) if canonical else None,
    )
    return name, (model_get(provider=None, name=name) if name else None)


def retired_model(version: BundleVersion) -> ModelInfo | None:
    """The catalog entry of the version's model when that model has retired (by the catalog's
    clock), else None."""
    _, info = version_model_info(version)
    return info if info is not None and info.retired() else None


def model_retired_error(*, info: ModelInfo, message: str, status: int, labels: Any = None) -> ModelRetired:
    """The one shape of `model_retired` (publish 400, start 409, pinned 410)."""
    details: dict[str, Any] = {
        "model": info.name,
        "retires_at": info.retires_at.isoformat() if info.retires_at else None,
        "replacement": info.replacement,
    }
    if labels is not None:
        details["labels"] = labels
    return ModelRetired(message, details, status=status)


def models_retiring_usage(*, within: timedelta, actor: Actor | None, sessions: bool = True) -> list[dict[str, Any]]:
    """GET /api/v1/models/retiring/: each model that retires within `within` (or has retired
    and is still pinned by a label or a live session), soonest first, with every version of a
    bundle `actor` may see that names it and is live or draining (the only versions sessions
    can be on): the labels targeting it (with the target's weight) and its active sessions
    (bounded as every count here: exact up to SESSION_COUNT_EXACT_LIMIT, then the sweep's tally).
    One query for the versions with their counts, one for the labels; each version's model is
    read from its content, kept per process by content hash (registry.parsed_content).
    `sessions=False` leaves the session counts out (0): the home page's line needs only labels."""
    now = clock.now()
    wanted = {(m.provider, m.name): m for m in catalog_selectors.model_list() if m.retiring_within(within, now)}
    if not wanted:
        return []
    bundles = bundles_visible(actor)
    by_model = _versions_by_model(bundles, set(wanted), sessions=sessions)
    labels_of = _labels_by_version(bundles, {v.pk for found in by_model.values() for v in found})
    out: list[dict[str, Any]] = []
    for key, info in wanted.items():
        found = by_model.get(key, [])
        if info.retired(now) and not found:
            continue  # retired long ago and nothing uses it: not news
        rows: list[dict[str, Any]] = [
            {
                "bundle": v.bundle.name,
                "version": v.number,
                "state": v.state,
                "labels": labels_of.get(v.pk, []),
                "active_sessions": getattr(v, "active_sessions", 0),
            }
            for v in found
        ]
        out.append(
            {
                "model": info.as_dict(),
                "retired": info.retired(now),
                "days_left": max(0, (info.retirement - now).days) if info.retirement else None,
                "versions": rows,
                "labels": sum(len(r["labels"]) for r in rows),
                "active_sessions": sum(r["active_sessions"] for r in rows),
            }
        )
    out.sort(key=lambda m: (m["model"]["retires_at"] or "", m["model"]["provider"], m["model"]["name"]))
    return out


def _versions_by_model(
    bundles: QuerySet[Bundle], wanted: set[tuple[str, str]], *, sessions: bool = True
) -> dict[tuple[str, str], list[Any]]:
    """The live and draining versions of `bundles` naming a model in `wanted`, by model, each
    with `active_sessions` (when `sessions`)."""
    versions = (
        BundleVersion.objects.filter(state__in=[VersionState.LIVE, VersionState.DRAINING], bundle__in=bundles)
        .select_related("bundle")
        .only("id", "number", "content_hash", "state", "bundle__name")
        .order_by("bundle__name", "number")
    )
    if sessions:
        versions = versions.annotate(active_sessions=pins.active_annotation())
    by_model: dict[tuple[str, str], list[Any]] = {}
    for version in versions:
        _, info = version_model_info(version)
        if info is not None and (info.provider, info.name) in wanted:
            by_model.setdefault((info.provider, info.name), []).append(version)
    return by_model


def _labels_by_version(bundles: QuerySet[Bundle], version_ids: set[int]) -> dict[int, list[dict[str, Any]]]:
    """{version id: [{label, weight}]} for the labels of `bundles` that target those versions."""
    labels_of: dict[int, list[dict[str, Any]]] = {}
    for label in Label.objects.filter(bundle__in=bundles).select_related("bundle").order_by("bundle__name", "name"):
        weights = {t["version_id"]: t["weight"] for t in label.targets} if label.targets else {label.version_id: 100}
        for version_id, weight in weights.items():
            if version_id in version_ids:
                labels_of.setdefault(version_id, []).append({"label": label.name, "weight": weight})
    return labels_of
