"""Writes to knowledge packs. Each service owns its transaction, checks role and key scope, and
audits the change with path, size and hash, never the file content."""

import hashlib
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from access.actors import Actor
from access.models import Role
from access.permissions import require_role
from audit.services import audit_record
from core.errors import Conflict, DomainError, Forbidden, InvalidContent, NotFound, PreconditionFailed
from core.limits import TEXT_MAX_CHARS, storable
from core.newlines import lf
from knowledge import paths
from knowledge.models import MAX_FILE_BYTES, Pack, PackFile
from registry.canonical import canonical_bytes
from registry.variables import PACK_NAME_RE


class FileTooLarge(DomainError):
    status = 413
    code = "payload_too_large"


def _require_publisher(actor: Actor, doing: str, pack: Pack | None = None) -> None:
    require_role(actor, Role.PUBLISHER, doing)
    if pack is not None and not actor.may_see_bundle(pack.name):
        # Key scopes name packs as they name bundles; outside them a pack does not exist.
        raise NotFound(f"No knowledge pack named {pack.name!r}.")


def pack_create(*, name: Any, actor: Actor, description: Any = "") -> Pack:
    _require_publisher(actor, "Creating a knowledge pack")
    if not isinstance(name, str) or not PACK_NAME_RE.fullmatch(name):
        raise InvalidContent("The pack name is not valid.", {"name": [f"Must match {PACK_NAME_RE.pattern}."]})
    if not actor.may_see_bundle(name):
        # Key scopes name packs like bundles; the same answer whether or not the name exists.
        raise Forbidden(f"Your key may only create packs matching {', '.join(actor.scopes)}.")
    description = _description(description)
    try:
        with transaction.atomic():
            pack = Pack.objects.create(name=name, description=description, created_by=actor.name)
            pack.prefix_state = _prefix_state(pack)
            pack.save(update_fields=["prefix_state"])
            audit_record(actor=actor, action="pack.created", target_type="pack", target=name)
            return pack
    except IntegrityError:
        raise Conflict(f"A knowledge pack named {name!r} already exists.", {"name": [name]}) from None


def _description(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > TEXT_MAX_CHARS or not storable(value):
        raise InvalidContent(
            "The description is not valid.", {"description": [f"Text of at most {TEXT_MAX_CHARS} characters."]}
        )
    return lf(value)  # `\n` line endings, as every text the registry stores (core.newlines)


def _lock(pack: Pack) -> Pack:
    # One writer per pack at a time, so prefix_state always matches the files it was computed from.
    return Pack.objects.select_for_update(no_key=True).get(pk=pack.pk)


def _prefix_state(pack: Pack) -> str:
    """What a rendered prefix shows of the pack: the sorted domains and each DUTY.md's hash."""
    domains = sorted(set(PackFile.objects.filter(pack=pack).exclude(domain="").values_list("domain", flat=True)))
    duties = {
        domain: digest
        for domain, path, digest in PackFile.objects.filter(pack=pack, path__endswith=f"/{paths.DUTY}").values_list(
            "domain", "path", "sha256"
        )
        if paths.is_duty(path)
    }
    return hashlib.sha256(canonical_bytes({"domains": domains, "duties": duties})).hexdigest()


def _refresh_prefix_state(pack: Pack) -> None:
    state = _prefix_state(pack)
    if state != pack.prefix_state:
        pack.prefix_state = state
        pack.save(update_fields=["prefix_state"])


def file_put(
    *,
    pack: Pack,
    path: Any,
    content: Any,
    actor: Actor,
    if_match: list[str] | None = None,
    if_none_match: bool = False,
) -> tuple[PackFile, bool]:
    """Create or replace the file at `path`; returns (file, created). Writing the same bytes
    again changes nothing (no notice, no audit row).

    Preconditions, judged under the pack's lock (so two writers who read the same file cannot
    both replace it): `if_match` is If-Match's tags, the sha256 of the file as the writer read
    it, or "*" (it must exist); `if_none_match` is If-None-Match: * (it must not exist).
    PreconditionFailed (412) otherwise, with the file's sha256 now."""
    _require_publisher(actor, "Writing a knowledge file", pack)
    path = paths.check_file_path(path if isinstance(path, str) else "")
    if not isinstance(content, str):
        raise InvalidContent("The file content must be a string.", {"content": ["A JSON string of text."]})
    content = lf(content)  # `\n` line endings, as every text the registry stores (core.newlines)
    if "\x00" in content:
        raise InvalidContent("The file content holds a NUL character.", {"content": ["Text files only."]})
    try:
        data = content.encode()
    except UnicodeEncodeError:
        raise InvalidContent("The file content is not valid Unicode.", {"content": ["Lone surrogate."]}) from None
    if len(data) > MAX_FILE_BYTES:
        raise FileTooLarge(
            f"The file is {len(data)} bytes; a knowledge file holds at most 1 MiB.",
            {"content": [f"At most {MAX_FILE_BYTES} bytes of UTF-8."]},
        )
    digest = hashlib.sha256(data).hexdigest()
    with transaction.atomic():
        pack = _lock(pack)
        existing = PackFile.objects.filter(pack=pack, path=path).first()
        _precondition(existing, path=path, if_match=if_match, if_none_match=if_none_match)
        if existing is not None and existing.sha256 == digest:
            return existing, False
        now = timezone.now()
        if existing is None:
            file = PackFile.objects.create(
                pack=pack,
                path=path,
                domain=paths.domain_of(path),
                content=content,
                size=len(data),
                sha256=digest,
                updated_at=now,
                updated_by=actor.name,
            )
        else:
            file = existing
            file.content, file.size, file.sha256, file.updated_at, file.updated_by = (
                content,
                len(data),
                digest,
                now,
                actor.name,
            )
            file.save(update_fields=["content", "size", "sha256", "updated_at", "updated_by"])
        _refresh_prefix_state(pack)
        audit_record(
            actor=actor,
            action="pack.file_written",
            target_type="pack",
            target=pack.name,
            data={"path": path, "size": len(data), "sha256": digest, "created": existing is None},
        )
    return file, existing is None


def _precondition(existing: PackFile | None, *, path: str, if_match: list[str] | None, if_none_match: bool) -> None:
    current = {"sha256": existing.sha256 if existing is not None else None}
    if if_none_match and existing is not None:
        raise PreconditionFailed(f"{path} exists (If-None-Match: *).", {"current": current})
    if if_match is None:
        return
    if existing is None:
        raise PreconditionFailed(f"{path} does not exist, so it cannot match.", {"current": current})
    if "*" not in if_match and existing.sha256 not in if_match:
        raise PreconditionFailed(
            f"{path} changed since you read it (now sha256 {existing.sha256}); read it again.", {"current": current}
        )


def file_delete(*, pack: Pack, path: Any, actor: Actor) -> None:
    _require_publisher(actor, "Deleting a knowledge file", pack)
    path = paths.check_file_path(path if isinstance(path, str) else "")
    with transaction.atomic():
        pack = _lock(pack)
        file = PackFile.objects.filter(pack=pack, path=path).first()
        if file is None:
            raise NotFound(f"Pack {pack.name!r} has no file {path!r}.")
        digest = file.sha256
        file.delete()
        _refresh_prefix_state(pack)
        audit_record(
            actor=actor,
            action="pack.file_deleted",
            target_type="pack",
            target=pack.name,
            data={"path": path, "sha256": digest},
        )
