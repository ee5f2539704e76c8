"""Importing a prompt's history from another prompt store (`promptreg import openai|langfuse|
mlflow`, client/promptreg/importers): create the bundle if needed, publish each version oldest
first, point each label at its version. Every step goes through the service the API calls for
it (bundle_create, version_publish, label_move), with the caller's actor, in one transaction:

- an import that would be refused anywhere (a protected label for a publisher key, a required
  check or approval missing, a breaking change, invalid content) writes nothing, and says which
  steps were refused, each with the error the API would have answered;
- a dry run is the same run, rolled back at the end: it checks exactly what the real run will,
  with the same key, and names the version numbers the real run would give.

A refused step does not stop the others (each runs in its own savepoint), so a dry run reports
every refusal at once; a step that needs a refused one (a label on a version refused) is skipped.
Nothing outside the database is touched before commit: events, webhooks and tasks are scheduled
with transaction.on_commit by the services, which a rollback discards."""

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from access.actors import Actor
from core.errors import DomainError
from registry import lifecycle, selectors, services
from registry.models import Bundle, Label


@dataclass(frozen=True)
class ImportVersion:
    content: object
    message: str


def _refusal(step: str, exc: DomainError) -> dict[str, Any]:
    return {"step": step, "status": exc.status, "code": exc.code, "message": exc.message, "details": exc.details}


def _single_targets(bundle: Bundle | None) -> dict[str, int]:
    """{label: version number} of the bundle's labels that point at one version (a split label
    points at none: the import points it at one)."""
    if bundle is None:
        return {}
    found: dict[str, int] = {}
    for label in Label.objects.filter(bundle=bundle).select_related("version"):
        if len(lifecycle.label_target_ids(label)) == 1:
            found[label.name] = label.version.number
    return found


def import_versions(
    *,
    name: str,
    description: str,
    versions: list[ImportVersion],
    labels: dict[str, int],
    source: str,
    actor: Actor,
    allow_breaking: bool = False,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Run the import; `labels` maps a label to the index in `versions` it should point at.
    Returns {bundle, bundle_exists, versions: [{version, content_hash, exists} | {refused}],
    labels: [{label, from, to, moved}], refused: [...], applied}; `applied` is false for a dry
    run and whenever anything was refused (then nothing was written)."""
    refused: list[dict[str, Any]] = []
    with transaction.atomic():
        bundle = Bundle.objects.filter(name=name).first()
        if bundle is not None:
            bundle = selectors.bundle_get(name=name, actor=actor)  # 404 outside the key's scope, as everywhere
        bundle_exists = bundle is not None
        before = _single_targets(bundle)
        if bundle is None:
            try:
                with transaction.atomic():
                    bundle = services.bundle_create(name=name, description=description, actor=actor)
            except DomainError as exc:
                refused.append(_refusal("bundle", exc))
        steps: list[dict[str, Any]] = []
        for index, item in enumerate(versions):
            if bundle is None:
                steps.append({"version": None, "content_hash": None, "exists": False, "refused": True})
                continue
            try:
                with transaction.atomic():
                    result = services.version_publish(
                        bundle=bundle, content=item.content, message=item.message, actor=actor
                    )
            except DomainError as exc:
                refused.append(_refusal(f"versions[{index}]", exc))
                steps.append({"version": None, "content_hash": None, "exists": False, "refused": True})
                continue
            steps.append(
                {
                    "version": result.version.number,
                    "content_hash": result.version.content_hash,
                    "exists": not result.created,
                    "refused": False,
                    "_object": result.version,
                }
            )
        moves: list[dict[str, Any]] = []
        for label_name, index in sorted(labels.items()):
            step = steps[index]
            move = {"label": label_name, "from": before.get(label_name), "to": step["version"], "moved": False}
            moves.append(move)
            if bundle is None or step["refused"]:
                continue
            move["moved"] = move["from"] != move["to"]
            if not move["moved"]:
                continue
            try:
                with transaction.atomic():
                    services.label_move(
                        bundle=bundle,
                        name=label_name,
                        version=step["_object"],
                        actor=actor,
                        reason=f"imported from {source}: {label_name}",
                        allow_breaking=allow_breaking,
                    )
            except DomainError as exc:
                refused.append(_refusal(f"labels.{label_name}", exc))
        applied = not dry_run and not refused
        if not applied:
            # The dry run's writes, and a refused run's first ones, go: what the run would do is
            # known, and nothing of it stays.
            transaction.set_rollback(True)
    for step in steps:
        step.pop("_object", None)
    return {
        "bundle": name,
        "bundle_exists": bundle_exists,
        "versions": steps,
        "labels": moves,
        "refused": refused,
        "dry_run": dry_run,
        "applied": applied,
    }
