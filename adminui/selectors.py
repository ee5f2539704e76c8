"""Reads of the admin's pages that are more than one query: what each label targets with its
sessions per target, and the home dashboard. Flat: each read is bounded by what is live now
(labels, live/draining versions, pending deliveries, the last few events), never by history."""

from datetime import timedelta
from typing import Any

from django.db.models import Count, Q
from django.utils import timezone

from audit.models import AuditEvent
from registry.models import Bundle, BundleVersion, Label, VersionState
from sessions_app.models import Session, active_sessions_annotation
from webhooks.models import Delivery, DeliveryStatus, Endpoint

# How far back the dashboard looks for revoked versions, and how many recent changes it lists.
REVOKED_WINDOW = timedelta(days=30)
RECENT_CHANGES = 15
LISTED_MAX = 50


def active_by_label_target(labels: list[Label], version_ids: set[int]) -> dict[tuple[int, str], int]:
    """Active sessions per (version id, label name): the sessions a label sent to each of its
    targets, not every session of the version through any label."""
    rows = (
        Session.objects.active()
        .filter(version_id__in=version_ids, label__in={label.name for label in labels})
        .exclude(version__state=VersionState.REVOKED)
        .order_by()
        .values_list("version_id", "label")
    )
    return {(vid, name): n for vid, name, n in rows.annotate(n=Count("id"))}


def label_targets(labels: list[Label]) -> dict[int, list[dict[str, Any]]]:
    """Per label id, its targets as the pages show them: version number, weight, state and the
    active sessions the label pinned to that version (one query for the states, one for the
    counts)."""
    ids = {t["version_id"] for label in labels for t in label.targets} | {label.version_id for label in labels}
    states = dict(BundleVersion.objects.filter(pk__in=ids).values_list("pk", "state"))
    numbers = dict(BundleVersion.objects.filter(pk__in=ids).values_list("pk", "number"))
    active = active_by_label_target(labels, ids)
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
        "bundles": list(bundles.values()),
        "changes": list(AuditEvent.objects.order_by("-id")[:RECENT_CHANGES]),
        "webhooks": [{"endpoint": e, "retrying": retrying.get(e.pk, 0)} for e in endpoints],
        "at": now,
    }
