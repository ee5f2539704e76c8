"""Reads of knowledge packs. Key scopes name packs as they name bundles: a pack outside the
key's scope answers exactly like one that does not exist."""

from django.db.models import Count, QuerySet, Sum

from access.actors import Actor
from core.errors import NotFound
from knowledge import paths
from knowledge.models import Pack, PackFile


def packs_visible(actor: Actor | None) -> QuerySet[Pack]:
    packs = Pack.objects.all()
    pattern = actor.scope_regex() if actor is not None else None
    return packs if pattern is None else packs.filter(name__regex=pattern)


def packs_reachable(listed: list[str], actor: Actor | None) -> list[str]:
    """The packs of a version's `knowledge` list that this caller reaches: the listed ones its
    key may see, in listed order. The file tools, the render (DUTY.md, domains, notices) and
    MCP's protocol read only these; a listed pack outside the key's scope answers like a listed
    pack that does not exist. `actor` None: an unscoped reader (the admin's preview)."""
    if actor is None or not actor.scopes:
        return list(listed)
    return [name for name in listed if actor.may_see_bundle(name)]


def pack_get(*, name: str, actor: Actor | None = None) -> Pack:
    pack = packs_visible(actor).filter(name=name).first()
    if pack is None:
        raise NotFound(f"No knowledge pack named {name!r}.")
    return pack


def packs_with_sizes() -> QuerySet[Pack]:
    """Every pack by name, with `file_count` and `total_size` (bytes) annotated."""
    return Pack.objects.annotate(file_count=Count("files"), total_size=Sum("files__size")).order_by("name")


def pack_listing(pack: Pack) -> list[PackFile]:
    """The pack's files by path, with what a listing shows (no content)."""
    return list(
        PackFile.objects.filter(pack=pack)
        .only("path", "domain", "size", "sha256", "updated_at", "updated_by")
        .order_by("path")
    )


def manifest(pack: Pack) -> QuerySet[PackFile]:
    """Every file's path, size, sha256 and updated_at (no content), by path."""
    return PackFile.objects.filter(pack=pack).only("path", "size", "sha256", "updated_at").order_by("path")


def file_get(*, pack: Pack, path: str) -> PackFile:
    file = PackFile.objects.filter(pack=pack, path=paths.lookup_path(path)).first()
    if file is None:
        raise NotFound(f"Pack {pack.name!r} has no file {path!r}.")
    return file
