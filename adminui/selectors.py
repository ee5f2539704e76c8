"""Every read of the admin's pages (adminui/views/ holds no query of its own): lists and
searches, what each label targets with its sessions per target, the drain dashboard, the home
dashboard. The counts are flat: bounded by what is live now (labels, live/draining versions,
pending deliveries, the last few events), never by history."""

import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db.models import CharField, Count, Max, Q, QuerySet, Sum, Value
from django.utils import timezone

from audit.models import AuditEvent
from modelcatalog import clock
from modelcatalog.selectors import catalog_revision, retirement_warning
from registry import selectors as registry_selectors
from registry.models import Bundle, BundleVersion, Label, ToolSignature, ToolState, VersionState, VersionTool
from registry.selectors import tools_described, versions_of
from sessions_app.models import Session, active_sessions_annotation
from webhooks.models import Delivery, DeliveryStatus, Endpoint

# How far back the dashboard looks for revoked versions, and how many recent changes it lists.
REVOKED_WINDOW = timedelta(days=30)
RECENT_CHANGES = 15
LISTED_MAX = 50
# Label targets counted per statement (a UNION ALL of that many bounded counts).
PAIRS_PER_QUERY = 100


def _target_ids(label: Label) -> list[int]:
    return [t["version_id"] for t in label.targets] or [label.version_id]


def active_by_label_target(labels: list[Label]) -> dict[tuple[int, str], int]:
    """Active sessions per (version id, label name): the sessions a label sent to each of its
    targets, not every session of the version through any label. One statement, a bounded count
    per pair (sessions_app.models.active_count), in chunks of PAIRS_PER_QUERY."""
    pairs = sorted({(vid, label.name) for label in labels for vid in _target_ids(label)})
    out: dict[tuple[int, str], int] = {}
    for start in range(0, len(pairs), PAIRS_PER_QUERY):
        queries = [
            BundleVersion.objects.filter(pk=vid)
            .annotate(label_name=Value(name, output_field=CharField()), n=active_sessions_annotation(name))
            .values_list("pk", "label_name", "n")
            for vid, name in pairs[start : start + PAIRS_PER_QUERY]
        ]
        rows = queries[0].union(*queries[1:], all=True) if len(queries) > 1 else queries[0]
        out.update({(vid, name): n for vid, name, n in rows})
    return out


def label_targets(labels: list[Label]) -> dict[int, list[dict[str, Any]]]:
    """Per label id, its targets as the pages show them: version number, weight, state and the
    active sessions the label pinned to that version (two queries for states and numbers, one per
    PAIRS_PER_QUERY targets for the counts)."""
    ids = {vid for label in labels for vid in _target_ids(label)}
    states = dict(BundleVersion.objects.filter(pk__in=ids).values_list("pk", "state"))
    numbers = dict(BundleVersion.objects.filter(pk__in=ids).values_list("pk", "number"))
    active = active_by_label_target(labels)
    out: dict[int, list[dict[str, Any]]] = {}
    for label in labels:
        pairs = [(t["version_id"], t["weight"]) for t in label.targets] or [(label.version_id, 100)]
        out[label.pk] = [
            {
                "number": numbers[vid],
                "weight": weight,
                "split": bool(label.targets),
                "state": states[vid],
                "active": active.get((vid, label.name), 0),
            }
            for vid, weight in pairs
        ]
    return out


def dashboard() -> dict[str, Any]:
    """Per bundle: its labels (targets, weights, sessions per target, who moved it last and
    why), its draining versions (since when, active sessions) and the versions revoked lately;
    then the latest changes anywhere and the webhooks that are failing."""
    now = timezone.now()
    labels = list(Label.objects.select_related("bundle").order_by("bundle__name", "name"))
    targets = label_targets(labels)
    draining = list(
        BundleVersion.objects.filter(state=VersionState.DRAINING)
        .select_related("bundle")
        .defer("canonical")
        .annotate(active_sessions=active_sessions_annotation())
        .order_by("bundle__name", "number")[:LISTED_MAX]
    )
    revoked = list(
        BundleVersion.objects.filter(state=VersionState.REVOKED, revoked_at__gte=now - REVOKED_WINDOW)
        .select_related("bundle")
        .defer("canonical")
        .order_by("-revoked_at")[:LISTED_MAX]
    )
    bundles: dict[str, dict[str, Any]] = {
        name: {"name": name, "labels": [], "draining": [], "revoked": []}
        for name in Bundle.objects.order_by("name").values_list("name", flat=True)[:LISTED_MAX]
    }
    for label in labels:
        if label.bundle.name in bundles:
            bundles[label.bundle.name]["labels"].append({"label": label, "targets": targets[label.pk]})
    for v in draining:
        if v.bundle.name in bundles:
            bundles[v.bundle.name]["draining"].append(v)
    for gone in revoked:
        if gone.bundle.name in bundles:
            bundles[gone.bundle.name]["revoked"].append(gone)
    # A failing endpoint: switched off, or with deliveries still pending after a failed attempt
    # (the partial index of pending deliveries serves it).
    retrying = dict(
        Delivery.objects.filter(status=DeliveryStatus.PENDING, attempts__gte=1)
        .order_by()
        .values_list("endpoint_id")
        .annotate(n=Count("id"))
    )
    endpoints = list(
        Endpoint.objects.filter(Q(pk__in=list(retrying)) | Q(disabled_at__isnull=False)).order_by("id")[:LISTED_MAX]
    )
    return {
        "retiring": retiring_line(),
        "bundles": list(bundles.values()),
        "changes": list(AuditEvent.objects.order_by("-id")[:RECENT_CHANGES]),
        "webhooks": [{"endpoint": e, "retrying": retrying.get(e.pk, 0)} for e in endpoints],
        "at": now,
    }


# "3 labels pin models that retire within 30 days" (the retiring-models dashboard has them): the
# retiring view without its session counts, kept per process, since every home page load shows
# it. Its key is what moves it: the catalog clock's day, the window, the overrides ops made
# (catalog_revision) and the labels' own revision (their count and the sum of their revisions,
# which every move, creation and deletion changes: one small aggregate). What else could move it
# (a retired model's last version drained) shows within MODEL_CATALOG_CACHE_SECONDS.
_line_lock = threading.Lock()
_line: tuple[tuple[Any, ...], float, dict[str, int]] | None = None


def retiring_line() -> dict[str, int]:
    """{"labels": label pins on a model retiring within MODEL_RETIREMENT_WARNING (or retired and
    still used), "models": how many such models, "days": the window}."""
    global _line
    warning = retirement_warning()
    labels = Label.objects.aggregate(n=Count("id"), revisions=Sum("revision"))
    key = (clock.now().date(), warning, catalog_revision(), labels["n"], labels["revisions"])
    kept = _line
    if kept is not None and kept[0] == key and time.monotonic() - kept[1] < settings.MODEL_CATALOG_CACHE_SECONDS:
        return kept[2]
    with _line_lock:
        retiring = registry_selectors.models_retiring_usage(within=warning, actor=None, sessions=False)
        pinning = {(v["bundle"], lb["label"]) for m in retiring for v in m["versions"] for lb in v["labels"]}
        value = {"labels": len(pinning), "models": len(retiring), "days": warning.days}
        _line = (key, time.monotonic(), value)
    return value


def retiring_line_forget() -> None:
    """Drop this process's kept line (tests, benchmarks)."""
    global _line
    _line = None


# --- bundles ----------------------------------------------------------------------------------


def bundle_names() -> list[str]:
    return list(Bundle.objects.order_by("name").values_list("name", flat=True))


def bundle_rows(q: str) -> list[dict[str, Any]]:
    """The bundle list: each bundle (matching `q` in its name, description or when_to_use) with
    its labels, latest version number and active sessions (three queries whatever the count)."""
    bundles_qs = Bundle.objects.annotate(latest=Max("versions__number")).order_by("name")
    if q:
        bundles_qs = bundles_qs.filter(Q(name__icontains=q) | Q(description__icontains=q) | Q(when_to_use__icontains=q))
    labels_by_bundle: dict[int, list[Label]] = defaultdict(list)
    for label in Label.objects.select_related("version").defer("version__canonical").order_by("name"):
        labels_by_bundle[label.bundle_id].append(label)
    # order_by(): the default ordering would otherwise join the GROUP BY.
    active = dict(Session.objects.active().order_by().values_list("bundle_id").annotate(n=Count("id")))
    return [
        {"bundle": b, "labels": labels_by_bundle[b.pk], "latest": b.latest, "active": active.get(b.pk, 0)}
        for b in bundles_qs
    ]


def bundle_labels(bundle: Bundle) -> list[Label]:
    """The bundle's labels by name, with their primary target (without its content)."""
    return list(
        Label.objects.filter(bundle=bundle).select_related("version").defer("version__canonical").order_by("name")
    )


def bundle_versions(bundle: Bundle) -> list[BundleVersion]:
    """The bundle's versions, newest first, without their content."""
    return list(versions_of(bundle).defer("canonical").order_by("-number"))


def label_moves(bundle: Bundle) -> list[Any]:
    """Every history row of the bundle's labels, newest first (moves, rollbacks, releases,
    policy changes), with both versions."""
    return list(
        Label.history.filter(bundle_id=bundle.pk)
        .select_related("version", "previous_version")
        .defer("version__canonical", "previous_version__canonical")
        .order_by("-history_date", "-history_id")
    )


# --- versions ---------------------------------------------------------------------------------


def version_search(data: dict[str, Any] | None) -> QuerySet[BundleVersion]:
    """Every version of every bundle (with its active sessions), narrowed by the search form's
    cleaned data: bundle, state, and `q` in the bundle name, message, author, a content-hash
    prefix of at least 6 hex digits, or `bundle@n`."""
    versions = (
        BundleVersion.objects.select_related("bundle")
        .defer("canonical")
        .annotate(active_sessions=active_sessions_annotation())
        .order_by("bundle__name", "-number")
    )
    if data is None:
        return versions
    if data["bundle"]:
        versions = versions.filter(bundle__name=data["bundle"])
    if data["state"]:
        versions = versions.filter(state=data["state"])
    if q := data["q"].strip():
        versions = versions.filter(_version_match(q))
    return versions


def _version_match(q: str) -> Q:
    match = Q(bundle__name__icontains=q) | Q(message__icontains=q) | Q(author__icontains=q)
    if len(q) >= 6 and all(c in "0123456789abcdef" for c in q.lower()):
        match |= Q(content_hash__startswith=q.lower())
    name, at, number = q.rpartition("@")
    if at and number.isdigit():
        match |= Q(bundle__name=name, number=int(number))
    return match


def version_by_number(bundle: Bundle, number: int) -> BundleVersion | None:
    return versions_of(bundle).filter(number=number).first()


def version_latest(bundle: Bundle) -> BundleVersion | None:
    return BundleVersion.objects.filter(bundle=bundle).order_by("-number").first()


def version_before(bundle: Bundle, number: int) -> BundleVersion | None:
    """The version published just before `number`, or None."""
    return BundleVersion.objects.filter(bundle=bundle, number__lt=number).order_by("-number").first()


def version_with_hash(bundle: Bundle, content_hash: str) -> BundleVersion | None:
    """The bundle's version with exactly this content, if any (without its content)."""
    return BundleVersion.objects.filter(bundle=bundle, content_hash=content_hash).defer("canonical").first()


def version_full(version_id: int) -> BundleVersion:
    """A version with its content."""
    return BundleVersion.objects.get(pk=version_id)


def version_brief(version_id: int) -> BundleVersion:
    return BundleVersion.objects.defer("canonical").get(pk=version_id)


def versions_brief(bundle: Bundle, *, exclude_revoked: bool) -> list[BundleVersion]:
    """The bundle's versions, newest first, without content (the choices of a version field)."""
    versions = BundleVersion.objects.filter(bundle=bundle).defer("canonical").order_by("-number")
    if exclude_revoked:
        versions = versions.exclude(state=VersionState.REVOKED)
    return list(versions)


def versions_by_number(bundle: Bundle, numbers: Iterable[int]) -> dict[int, BundleVersion]:
    return {
        v.number: v for v in BundleVersion.objects.filter(bundle=bundle, number__in=set(numbers)).defer("canonical")
    }


def versions_by_id(ids: Iterable[int]) -> dict[int, BundleVersion]:
    return {v.pk: v for v in BundleVersion.objects.filter(pk__in=set(ids)).defer("canonical")}


def active_by_version(version_ids: set[int]) -> dict[int, int]:
    """Active sessions per version id. The partial index of active sessions serves it; revoked
    versions count 0 (their sessions only get 410)."""
    # order_by(): the default ordering would otherwise join the GROUP BY.
    rows = (
        Session.objects.active()
        .filter(version_id__in=version_ids)
        .exclude(version__state=VersionState.REVOKED)
        .order_by()
        .values_list("version_id")
    )
    return dict(rows.annotate(n=Count("id")))


def active_on(version: BundleVersion) -> int:
    """Active sessions pinned to `version` (0 for a revoked one: its sessions only get 410)."""
    return 0 if version.state == VersionState.REVOKED else Session.objects.active_on(version.pk)


# --- labels -----------------------------------------------------------------------------------


def labels_by_version(labels: QuerySet[Label] | None = None) -> dict[int, list[str]]:
    """Label names per version id, a split label under each of its targets (weight 0 too)."""
    labels = Label.objects.all() if labels is None else labels
    out: dict[int, list[str]] = defaultdict(list)
    for version_id, name, targets in labels.order_by("name").values_list("version_id", "name", "targets"):
        for vid in sorted({t["version_id"] for t in targets} | {version_id}):
            out[vid].append(name)
    return out


def labels_on_versions(version_ids: list[int]) -> dict[int, list[str]]:
    """labels_by_version for a page of versions: the labels targeting them, and every split."""
    return labels_by_version(Label.objects.filter(Q(version_id__in=version_ids) | ~Q(targets=[])))


def label_search(q: str) -> list[Label]:
    labels = (
        Label.objects.select_related("bundle", "version").defer("version__canonical").order_by("bundle__name", "name")
    )
    if q:
        labels = labels.filter(Q(bundle__name__icontains=q) | Q(name__icontains=q))
    return list(labels)


def label_now(bundle: Bundle, name: str) -> Label | None:
    """The label as it is now (with its primary target), or None."""
    return Label.objects.select_related("version").defer("version__canonical").filter(bundle=bundle, name=name).first()


def labels_targeting(version: BundleVersion) -> list[Label]:
    """Labels that target `version` alone or as one target of a split (weight 0 included)."""
    return list(Label.objects.targeting(version.pk).order_by("name"))


def protected_label_names(bundle: Bundle) -> list[str]:
    return list(Label.objects.filter(bundle=bundle, protected=True).values_list("name", flat=True))


def rollback_choices(label: Label) -> list[BundleVersion]:
    """The versions `label` targeted before, newest move first, never its current single
    target (the versions label_rollback accepts without judging them as a new move)."""
    seen: list[int] = []
    for version_id in label.history.order_by("-history_id").values_list("version_id", flat=True):
        if (version_id != label.version_id or label.targets) and version_id not in seen:
            seen.append(version_id)
    by_id = versions_by_id(seen)
    return [by_id[i] for i in seen if i in by_id]


# --- sessions and the drain dashboard ---------------------------------------------------------

# How long a drained or revoked version stays on the drain dashboard. The page polls every 3 s:
# it must read what is in motion (live, draining, just finished), not every version ever released.
DRAIN_DASHBOARD_RECENT = timedelta(days=7)


def versions_in_motion(bundle_name: str | None) -> QuerySet[BundleVersion]:
    """Live, draining, and drained or revoked within DRAIN_DASHBOARD_RECENT, with their active
    sessions: each branch an index (registry migration 0014), never a scan of every version."""
    since = timezone.now() - DRAIN_DASHBOARD_RECENT
    versions = (
        BundleVersion.objects.filter(
            Q(state__in=[VersionState.LIVE, VersionState.DRAINING])
            | Q(state=VersionState.DRAINED, drained_at__gte=since)
            | Q(state=VersionState.REVOKED, revoked_at__gte=since)
        )
        .select_related("bundle")
        .defer("canonical")
        .annotate(active_sessions=active_sessions_annotation())
        .order_by("bundle__name", "-number")
    )
    return versions.filter(bundle__name=bundle_name) if bundle_name else versions


def drain_versions(bundle_name: str | None) -> list[Any]:
    """The drain dashboard's versions (versions_in_motion), listed."""
    return list(versions_in_motion(bundle_name))


def session_search(data: dict[str, Any] | None) -> QuerySet[Session]:
    """Sessions, newest first, narrowed by the search form's cleaned data: bundle, version
    number, status, and `q` in the external id (or the session's id)."""
    sessions = Session.objects.select_related("bundle", "version").defer("version__canonical").order_by("-started_at")
    if data is None:
        return sessions
    if data["bundle"]:
        sessions = sessions.filter(bundle__name=data["bundle"])
    if data["version"]:
        sessions = sessions.filter(version__number=data["version"])
    if data["status"]:
        sessions = sessions.filter(status=data["status"])
    if data["q"]:
        q = data["q"].strip()
        match = Q(external_id__icontains=q)
        try:
            match |= Q(pk=UUID(q))
        except ValueError:
            pass
        sessions = sessions.filter(match)
    return sessions


def session_brief(session_id: UUID) -> Session | None:
    return (
        Session.objects.select_related("bundle", "version", "api_key")
        .defer("version__canonical")
        .filter(pk=session_id)
        .first()
    )


# --- the drain dashboard's tools tab ------------------------------------------------------------

# Signatures listed on the tab (live and draining first, then drained lately).
TOOLS_LISTED_MAX = 200


def drain_tools() -> list[dict[str, Any]]:
    """The tools tab: each signature in motion (live, draining, or drained within
    DRAIN_DASHBOARD_RECENT) as GET /api/v1/tools/ describes it, with who still needs it (the API
    keys holding active sessions on its draining versions, and how many each) and when the last
    of those sessions' leases runs out if none renews it (the expected time left). Reads the
    active sessions of draining versions only: what is in motion, not history."""
    since = timezone.now() - DRAIN_DASHBOARD_RECENT
    signatures = list(
        ToolSignature.objects.filter(
            Q(state__in=[ToolState.LIVE, ToolState.DRAINING]) | Q(state=ToolState.DRAINED, drained_at__gte=since)
        ).order_by("name", "pk")[:TOOLS_LISTED_MAX]
    )
    rows = tools_described(signatures=signatures, actor=None)
    draining: dict[int, list[int]] = defaultdict(list)
    for version_id, signature_id in VersionTool.objects.filter(
        signature__in=signatures, version__state=VersionState.DRAINING
    ).values_list("version_id", "signature_id"):
        draining[version_id].append(signature_id)
    holders: dict[int, dict[str, dict[str, Any]]] = defaultdict(dict)
    for version_id, key_name, n, until in (
        Session.objects.filter(status="active", version_id__in=list(draining))
        .values("version_id", "api_key__name")
        .annotate(n=Count("pk"), until=Max("expires_at"))
        .values_list("version_id", "api_key__name", "n", "until")
    ):
        name = key_name or "(no key)"
        for signature_id in draining[version_id]:
            held = holders[signature_id].setdefault(name, {"key": name, "sessions": 0, "until": until})
            held["sessions"] += n
            held["until"] = max(held["until"], until)
    by_id = {s.pk: s for s in signatures}
    for row, signature in zip(rows, signatures, strict=True):
        needed = sorted(holders[signature.pk].values(), key=lambda h: (-h["sessions"], h["key"]))
        row["holders"] = needed
        # Who needs it: the versions still live or draining (an unreleased or drained one does not).
        row["bundles"] = [
            {"name": b["name"], "versions": kept}
            for b in row["bundles"]
            if (kept := [v for v in b["versions"] if v["state"] in (VersionState.LIVE, VersionState.DRAINING)])
        ]
        row["expected_end"] = max((h["until"] for h in needed), default=None)
        row["drained_at"] = by_id[signature.pk].drained_at
        row["draining_since"] = by_id[signature.pk].draining_since
    order = {ToolState.DRAINING: 0, ToolState.LIVE: 1}
    return sorted(rows, key=lambda r: (order.get(r["state"], 2), r["name"]))


def mcp_drifts_open(version_id: int) -> list[Any]:
    """The alert on a version's page: its MCP-sourced tools the server no longer offers as pinned."""
    return registry_selectors.mcp_drifts_open(version_id)
