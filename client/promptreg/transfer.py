"""The directory a bundle export is written to, shared by `promptreg export` /
`promptreg import-bundles` and the server's `manage.py export_bundles` / `import_bundles`:

    DIR/bundles/<name>.json     the bundle's document (texts, versions by hash, labels as data)
    DIR/objects/<sha256>.json   a version's canonical bytes, exactly, named by their SHA-256

Content-addressed: an object is written once however many bundles hold it, an export into a
directory that has one already adds only what is new, and reading refuses any object whose
bytes are not those its name says (the whole directory, before anything is imported).

The registry's module is registry/exportdir.py; this client ships a byte-identical copy as
promptreg/transfer.py (tests/client/test_client_copies.py), so the server never imports its SDK."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

FORMAT = "promptreg.bundle/1"
_HASH = re.compile(r"^[0-9a-f]{64}$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")


class ExportDirError(Exception):
    """The directory is not a usable export: a missing or tampered object, a bad document."""


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def object_path(root: Path, digest: str) -> Path:
    return Path(root) / "objects" / f"{digest}.json"


def has_object(root: Path, digest: str) -> bool:
    path = object_path(root, digest)
    return path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == digest


def write_object(root: Path, digest: str, data: bytes) -> None:
    """Store `data` under its hash; refuses bytes that are not what `digest` names."""
    actual = hashlib.sha256(data).hexdigest()
    if actual != digest:
        raise ExportDirError(f"the bytes of {digest} have SHA-256 {actual}")
    if not has_object(root, digest):
        _write_atomic(object_path(root, digest), data)


def write_document(root: Path, document: dict[str, Any]) -> None:
    name = document.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ExportDirError(f"not a bundle name: {name!r}")
    text = json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    _write_atomic(Path(root) / "bundles" / f"{name}.json", text.encode("utf-8"))


def read_export(root: Path) -> list[tuple[dict[str, Any], dict[str, bytes]]]:
    """Every bundle document in `root` with the bytes of its versions, each checked against its
    hash. Raises ExportDirError naming the first problem; returns nothing half-read."""
    root = Path(root)
    documents = sorted((root / "bundles").glob("*.json"))
    if not documents:
        raise ExportDirError(f"{root} holds no bundles/*.json")
    found = []
    for path in documents:
        try:
            document = json.loads(path.read_bytes())
        except ValueError as exc:
            raise ExportDirError(f"{path}: not JSON ({exc})") from None
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise ExportDirError(f"{path}: not a {FORMAT} document")
        if document.get("name") != path.stem:
            raise ExportDirError(f"{path}: names bundle {document.get('name')!r}")
        objects: dict[str, bytes] = {}
        for version in document.get("versions") or []:
            digest = version.get("content_hash") if isinstance(version, dict) else None
            if not isinstance(digest, str) or not _HASH.match(digest):
                raise ExportDirError(f"{path}: a version without a valid content_hash")
            file = object_path(root, digest)
            if not file.is_file():
                raise ExportDirError(f"{path}: version {version.get('number')} needs {file}, which is missing")
            data = file.read_bytes()
            actual = hashlib.sha256(data).hexdigest()
            if actual != digest:
                raise ExportDirError(f"{file}: its bytes have SHA-256 {actual}, not {digest}")
            objects[digest] = data
        found.append((document, objects))
    return found
