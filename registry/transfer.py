"""Content-addressed export and import of bundles (docs/operations.md, "Moving bundles between
registries"): how a team moves bundles from staging to production, or into a new registry.

A bundle's export is a document (its name, texts, versions as number, hash and message, labels
as their targets by content hash) plus the canonical bytes of each version, named by their
SHA-256. Import checks every object against its hash and against the canonical form before it
writes anything, then, in one transaction, creates the bundle if needed, publishes each version
that the bundle does not have yet (by hash: publishing is idempotent), points the labels at the
versions with those hashes and revokes what the source had revoked. The same hashes come out,
and importing twice changes nothing the second time."""

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from access.actors import Actor
from access.models import Role
from access.permissions import require_bundle_scope, require_role
from core.errors import Conflict, InvalidContent
from core.limits import LABEL_NAME_RE, MAX_SPLIT_TARGETS, TEXT_MAX_CHARS, is_bundle_name
from registry import lifecycle
from registry.canonical import canonicalise
from registry.models import Bundle, BundleVersion, Label, VersionState
from registry.services import bundle_create, bundle_update, label_move, version_publish

FORMAT = "promptreg.bundle/1"
# Versions one import call may carry: a client splits a longer history into several calls.
MAX_IMPORT_VERSIONS = 1000
MAX_IMPORT_LABELS = 200
# New versions one import call through the API may publish. Each publish runs the contract
# checks and writes its version, edges and audit row inside the call's one transaction: 1,000
# of them held one request (and the bundle's row lock) for about 20 s. 100 keep a call to a
# couple of seconds; `promptreg import-bundles` sends a longer history in calls of at most this
# many (each its own transaction, idempotent), then the labels. `manage.py import_bundles`, an
# operator's command outside any request, passes max_publishes=None.
MAX_IMPORT_PUBLISHES = 100
HASH_RE = re.compile(r"^[0-9a-f]{64}$")


def bundle_export(*, bundle: Bundle, actor: Actor) -> tuple[dict[str, Any], dict[str, bytes]]:
    """(document, {content hash: canonical bytes}) for one bundle the actor may see."""
    require_bundle_scope(actor, bundle.name)
    versions = list(BundleVersion.objects.filter(bundle=bundle).order_by("number"))
    by_id = {v.pk: v for v in versions}
    labels = []
    for label in Label.objects.filter(bundle=bundle).order_by("name"):
        split = label.targets or [{"version_id": label.version_id, "weight": 100}]
        labels.append(
            {
                "name": label.name,
                "targets": [
                    {
                        "content_hash": by_id[t["version_id"]].content_hash,
                        "number": by_id[t["version_id"]].number,
                        "weight": t["weight"],
                    }
                    for t in split
                ],
                "protected": label.protected,
                "compatibility": label.compatibility,
            }
        )
    document = {
        "format": FORMAT,
        "name": bundle.name,
        "description": bundle.description,
        "when_to_use": bundle.when_to_use,
        "versions": [
            {
                "number": v.number,
                "content_hash": v.content_hash,
                "message": v.message,
                "author": v.author,
                "created_at": v.created_at.isoformat(),
                "revoked": v.state == VersionState.REVOKED,
            }
            for v in versions
        ],
        "labels": labels,
    }
    return document, {v.content_hash: bytes(v.canonical) for v in versions}


@dataclass
class ImportResult:
    bundle: str
    bundle_created: bool = False
    versions_created: list[int] = field(default_factory=list)  # numbers in this registry
    versions_present: list[int] = field(default_factory=list)
    labels_moved: list[str] = field(default_factory=list)
    labels_unchanged: list[str] = field(default_factory=list)
    revoked: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "bundle": self.bundle,
            "bundle_created": self.bundle_created,
            "versions_created": self.versions_created,
            "versions_present": self.versions_present,
            "labels_moved": self.labels_moved,
            "labels_unchanged": self.labels_unchanged,
            "revoked": self.revoked,
        }


def _bad(field_name: str, message: str) -> InvalidContent:
    return InvalidContent(f"The bundle document is not valid: {field_name}.", {field_name: [message]})


def _text(doc: dict[str, Any], key: str, where: str, *, required: bool = False) -> str:
    value = doc.get(key, "")
    if required and not value:
        raise _bad(f"{where}.{key}", "Required.")
    if not isinstance(value, str) or len(value) > TEXT_MAX_CHARS:
        raise _bad(f"{where}.{key}", f"Must be a string of at most {TEXT_MAX_CHARS} characters.")
    return value


def _parse(document: object) -> dict[str, Any]:
    """The document's shape, bounded; anything else is a 400 naming the field."""
    if not isinstance(document, dict):
        raise _bad("bundle", "Must be a bundle document (an object).")
    if document.get("format") != FORMAT:
        raise _bad("bundle.format", f"Must be {FORMAT!r}.")
    if not is_bundle_name(document.get("name")):
        raise _bad("bundle.name", "Must be a bundle name.")
    versions, labels = document.get("versions", []), document.get("labels", [])
    if not isinstance(versions, list) or len(versions) > MAX_IMPORT_VERSIONS:
        raise _bad("bundle.versions", f"Must be a list of at most {MAX_IMPORT_VERSIONS} versions.")
    if not isinstance(labels, list) or len(labels) > MAX_IMPORT_LABELS:
        raise _bad("bundle.labels", f"Must be a list of at most {MAX_IMPORT_LABELS} labels.")
    for i, v in enumerate(versions):
        _parse_version(v, f"bundle.versions[{i}]")
    for i, label in enumerate(labels):
        _parse_label(label, f"bundle.labels[{i}]")
    return {
        "name": document["name"],
        "description": _text(document, "description", "bundle"),
        "when_to_use": _text(document, "when_to_use", "bundle"),
        "versions": sorted(versions, key=lambda v: v["number"]),
        "labels": labels,
    }


def _parse_version(v: Any, where: str) -> None:
    if not isinstance(v, dict) or not isinstance(v.get("content_hash"), str) or not HASH_RE.match(v["content_hash"]):
        raise _bad(f"{where}.content_hash", "Must be a SHA-256 in lower-case hex.")
    if not isinstance(v.get("number"), int) or isinstance(v["number"], bool) or not 0 < v["number"] < 2**31:
        raise _bad(f"{where}.number", "Must be a positive integer.")
    _text(v, "message", where, required=True)
    if not isinstance(v.get("revoked", False), bool):
        raise _bad(f"{where}.revoked", "Must be true or false.")


def _parse_label(label: Any, where: str) -> None:
    if not isinstance(label, dict) or not isinstance(label.get("name"), str):
        raise _bad(f"{where}.name", "Must be a label name.")
    if not re.fullmatch(LABEL_NAME_RE, label["name"]):
        raise _bad(f"{where}.name", f"Must match {LABEL_NAME_RE}.")
    targets = label.get("targets")
    if not isinstance(targets, list) or not 0 < len(targets) <= MAX_SPLIT_TARGETS:
        raise _bad(f"{where}.targets", f"Must list 1 to {MAX_SPLIT_TARGETS} targets.")
    for t in targets:
        if (
            not isinstance(t, dict)
            or not isinstance(t.get("content_hash"), str)
            or not isinstance(t.get("weight"), int)
            or isinstance(t["weight"], bool)
        ):
            raise _bad(f"{where}.targets", "Each target needs a content_hash and a weight.")
    if label.get("compatibility") is not None and not isinstance(label["compatibility"], str):
        raise _bad(f"{where}.compatibility", "Must be a string.")


def _verified_content(digest: str, data: bytes) -> dict[str, Any]:
    """The content document of `data`, if its bytes are those its hash names and the canonical
    form of themselves (else this registry would store other bytes under another hash)."""
    if hashlib.sha256(data).hexdigest() != digest:
        raise InvalidContent(
            f"The bytes given for {digest} do not have that SHA-256.",
            {"content_hash": [digest], "actual": [hashlib.sha256(data).hexdigest()]},
        )
    try:
        content: dict[str, Any] = json.loads(data)
    except ValueError:
        raise InvalidContent(f"The bytes of {digest} are not JSON.", {"content_hash": [digest]}) from None
    _, canonical, again = canonicalise(content)
    if canonical != data:
        raise InvalidContent(
            f"The bytes of {digest} are not in canonical form: this registry would store {again}.",
            {"content_hash": [digest]},
        )
    return content


def bundle_import(
    *,
    document: object,
    objects: dict[str, bytes],
    actor: Actor,
    allow_breaking: bool = False,
    max_publishes: int | None = MAX_IMPORT_PUBLISHES,
) -> ImportResult:
    """Import one bundle document; `objects` holds the canonical bytes of the versions this
    registry may not have yet (by hash). All or nothing; idempotent. A document that would
    publish more than `max_publishes` new versions is refused before anything is read or
    written (400 naming bundle.versions): send the history in parts."""
    require_role(actor, Role.PUBLISHER, "Importing bundles")
    doc = _parse(document)
    bad_keys = sorted(key for key in objects if not HASH_RE.match(key))[:5]
    if bad_keys:
        raise InvalidContent("Objects are named by their SHA-256.", {"objects": bad_keys})
    name = doc["name"]
    require_bundle_scope(actor, name)
    existing = Bundle.objects.filter(name=name).first()
    present = (
        dict(BundleVersion.objects.filter(bundle=existing).values_list("content_hash", "number")) if existing else {}
    )
    if max_publishes is not None:
        missing = {v["content_hash"] for v in doc["versions"]} - set(present)
        if len(missing) > max_publishes:
            raise _bad(
                "bundle.versions",
                f"This import would publish {len(missing)} new versions; one call publishes at most "
                f"{max_publishes}. Send the versions in parts (promptreg import-bundles does), then the labels.",
            )
    contents = _new_contents(doc, objects, present)  # every check before the first write
    result = ImportResult(bundle=name)
    with transaction.atomic():
        if existing is None:
            bundle = bundle_create(
                name=name, actor=actor, description=doc["description"], when_to_use=doc["when_to_use"]
            )
            result.bundle_created = True
        else:
            bundle = existing
            if (bundle.description, bundle.when_to_use) != (doc["description"], doc["when_to_use"]):
                bundle_update(
                    bundle=bundle, actor=actor, description=doc["description"], when_to_use=doc["when_to_use"]
                )
        _import_versions(bundle=bundle, doc=doc, contents=contents, present=present, actor=actor, result=result)
        by_hash = {v.content_hash: v for v in BundleVersion.objects.filter(bundle=bundle)}
        for label in doc["labels"]:
            _import_label(
                bundle=bundle, label=label, by_hash=by_hash, actor=actor, allow_breaking=allow_breaking, result=result
            )
        for v in doc["versions"]:
            version = by_hash[v["content_hash"]]
            if v.get("revoked") and version.state != VersionState.REVOKED:
                lifecycle.version_revoke(version=version, actor=actor, reason="revoked where it was imported from")
                result.revoked.append(version.number)
    return result


def _new_contents(doc: dict[str, Any], objects: dict[str, bytes], present: dict[str, int]) -> dict[str, dict[str, Any]]:
    """The verified content of each version this registry lacks; every label target must be
    one of those or here already."""
    contents: dict[str, dict[str, Any]] = {}
    for v in doc["versions"]:
        digest = v["content_hash"]
        if digest in present or digest in contents:
            continue
        if digest not in objects:
            raise InvalidContent(f"The bytes of version {v['number']} ({digest}) are missing.", {"objects": [digest]})
        contents[digest] = _verified_content(digest, objects[digest])
    known = set(present) | set(contents)
    for label in doc["labels"]:
        for t in label["targets"]:
            if t["content_hash"] not in known:
                raise _bad(
                    "bundle.labels", f"{label['name']} targets {t['content_hash']}, which is neither given nor here."
                )
    return contents


def _import_versions(
    *,
    bundle: Bundle,
    doc: dict[str, Any],
    contents: dict[str, dict[str, Any]],
    present: dict[str, int],
    actor: Actor,
    result: ImportResult,
) -> None:
    for v in doc["versions"]:
        digest = v["content_hash"]
        if digest in present:
            result.versions_present.append(present[digest])
            continue
        # As it is: these bytes are verified against their hash, and resolving them again could
        # refuse an old version's literal `{{>` or turn a marker into other bytes.
        published = version_publish(
            bundle=bundle, content=contents[digest], message=v["message"], actor=actor, resolve=False
        )
        if published.version.content_hash != digest:  # _verified_content makes this impossible
            raise Conflict(f"Version {v['number']} was stored as {published.version.content_hash}.")
        present[digest] = published.version.number
        (result.versions_created if published.created else result.versions_present).append(published.version.number)


def _import_label(
    *,
    bundle: Bundle,
    label: dict[str, Any],
    by_hash: dict[str, BundleVersion],
    actor: Actor,
    allow_breaking: bool,
    result: ImportResult,
) -> None:
    wanted = [(by_hash[t["content_hash"]], t["weight"]) for t in label["targets"]]
    current = Label.objects.filter(bundle=bundle, name=label["name"]).first()
    if current is not None:
        now = current.targets or [{"version_id": current.version_id, "weight": 100}]
        same = sorted((t["version_id"], t["weight"]) for t in now) == sorted((v.pk, w) for v, w in wanted)
        if same and (label.get("compatibility") in (None, current.compatibility)):
            result.labels_unchanged.append(label["name"])
            return
    reason = "imported from a bundle export"
    if len(wanted) == 1:
        label_move(
            bundle=bundle,
            name=label["name"],
            actor=actor,
            reason=reason,
            version=wanted[0][0],
            allow_breaking=allow_breaking,
            compatibility=label.get("compatibility"),
        )
    else:
        label_move(
            bundle=bundle,
            name=label["name"],
            actor=actor,
            reason=reason,
            targets=wanted,
            allow_breaking=allow_breaking,
            compatibility=label.get("compatibility"),
        )
    result.labels_moved.append(label["name"])
