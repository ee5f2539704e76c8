"""Reads of bundles, versions and labels."""

import json
from collections.abc import Iterable
from typing import Any

from django.db import connection
from django.db.models import Count, Max, Prefetch, QuerySet

from access.actors import Actor
from core.errors import NotFound
from registry import includes, pins
from registry.contracts import Diff, diff_contents
from registry.models import Bundle, BundleVersion, Label, Release, VersionApproval, VersionCheck


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


def bundles_including(
    *, bundle_name: str, actor: Actor | None = None, label: str | None = None
) -> list[dict[str, Any]]:
    """The bundles (visible to `actor`) whose latest version includes `bundle_name` (by `label`
    only, when given), one entry per marker: {"bundle", "version", "marker", "pinned_version",
    "pinned_hash", "current_version", "outdated"}. `current_version` is what the marker names now (null when it
    names nothing); `outdated` is true when publishing that bundle's source again would pick up
    other bytes.

    The includes live in each version's canonical bytes, so this reads the latest version of
    every bundle; a byte search for the entry's `"bundle":"<name>",` (canonical JSON: sorted keys,
    no whitespace) skips, without decoding, every version that cannot include it."""
    needle = json.dumps({"bundle": bundle_name}, separators=(",", ":"), ensure_ascii=False)[1:-1] + ","
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT b.name, v.number, (convert_from(v.canonical, 'UTF8')::jsonb -> 'includes')::text
            FROM registry_bundle b
            JOIN LATERAL (
                SELECT number, canonical FROM registry_bundleversion
                WHERE bundle_id = b.id ORDER BY number DESC LIMIT 1
            ) v ON true
            WHERE position(%s::bytea IN v.canonical) > 0
            ORDER BY b.name
            """,
            [needle.encode()],
        )
        rows = cursor.fetchall()
    labels = {
        name: (number, digest)
        for name, number, digest in Label.objects.filter(bundle__name=bundle_name).values_list(
            "name", "version__number", "version__content_hash"
        )
    }
    numbers = dict(BundleVersion.objects.filter(bundle__name=bundle_name).values_list("number", "content_hash"))
    found: list[dict[str, Any]] = []
    for name, number, text in rows:
        if actor is not None and not actor.may_see_bundle(name):
            continue
        entries = json.loads(text) if text else None  # as text: Django's psycopg loads jsonb as a string anyway
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict) or entry.get("bundle") != bundle_name:
                continue
            marker = includes.MARKER_RE.fullmatch(str(entry.get("marker")))
            ref = marker.group(2) if marker else ""
            if label is not None and ref != label:
                continue
            current = (int(ref), numbers.get(int(ref))) if ref.isdigit() else labels.get(ref, (None, None))
            found.append(
                {
                    "bundle": name,
                    "version": number,
                    "marker": entry.get("marker"),
                    "pinned_version": entry.get("version"),
                    "pinned_hash": entry.get("content_hash"),
                    "current_version": current[0] if current[1] is not None else None,
                    "outdated": current[1] != entry.get("content_hash"),
                }
            )
    return found
