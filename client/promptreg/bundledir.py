"""A bundle as a directory of files (prompts as code), and back.

    prompt.md              the system prompt, byte for byte (no newline is added or removed),
                           but CR LF and a lone CR are read as LF, as the registry stores them
    tools/<name>.json      one tool each ({"name", "description", "input_schema"})
    skills/<name>.json     one skill card each
    guardrails.json, output_schema.json, model.json, metadata.json, variables.json, and
    <field>.json for any other top-level field of the content (compaction, knowledge, ...)
    tools/ORDER, skills/ORDER   the order of the list, one name a line, when it is not by name

Order matters: a content hash covers the order of tools and skills, so `pull` writes an ORDER
file whenever the version's order is not alphabetical, and `push` follows it. Fields left at
their defaults are not written, and reading a directory leaves them out, which the registry
fills back with the same defaults: so pulling a version and pushing it back is a no-op.
Other files (README.md, .git, ...) are ignored."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

PROMPT = "prompt.md"
LISTS = ("tools", "skills")  # directories holding one JSON file per list item
ORDER = "ORDER"
# What the registry fills in when a field is absent: such fields are not written on pull.
DEFAULTS: dict[str, Any] = {"tools": [], "guardrails": {}, "output_schema": None, "model": {}, "metadata": {}}


class BundleDirError(Exception):
    """A directory that cannot be read as a bundle; `place` is file[:line:column]."""

    def __init__(self, place: str, message: str) -> None:
        super().__init__(f"{place}: {message}")
        self.place = place
        self.message = message


def _read_json(path: Path, root: Path) -> Any:
    place = path.relative_to(root).as_posix()
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise BundleDirError(place, f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BundleDirError(f"{place}:{exc.lineno}:{exc.colno}", exc.msg) from None


def _read_list(folder: Path, root: Path) -> tuple[list[Any], list[str]]:
    """The items of tools/ or skills/ in their order, and the file of each."""
    files = {p.stem: p for p in folder.glob("*.json")}
    order_file = folder / ORDER
    names = sorted(files)
    if order_file.exists():
        listed = [line.strip() for line in order_file.read_text(encoding="utf-8").splitlines() if line.strip()]
        missing = [name for name in listed if name not in files]
        if missing:
            rel = order_file.relative_to(root).as_posix()
            raise BundleDirError(rel, f"lists {', '.join(missing)} but there is no such .json file")
        names = listed + [name for name in names if name not in listed]
    items, places = [], []
    for name in names:
        item = _read_json(files[name], root)
        place = files[name].relative_to(root).as_posix()
        if not isinstance(item, dict):
            raise BundleDirError(place, "must hold one JSON object")
        if "name" not in item:
            item = {"name": name, **item}  # the file name says it
        elif item["name"] != name:
            raise BundleDirError(place, f"its name is {item['name']!r}: rename the file to {item['name']}.json")
        items.append(item)
        places.append(place)
    return items, places


class BundleDir:
    """A bundle directory read into a content document, remembering which file each part
    came from so that the registry's error paths can be shown as places in files."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.files: dict[str, list[str]] = {}

    def read(self) -> dict[str, Any]:
        if not self.root.is_dir():
            raise BundleDirError(str(self.root), "not a directory")
        content: dict[str, Any] = {}
        prompt = self.root / PROMPT
        if prompt.exists():
            # newline="" and our own translation: every newline, also a final one, stays as it
            # is but for CR LF and a lone CR, which become LF, as the registry stores every text
            # (a prompt saved by a Windows editor is the same prompt as the one it pulled).
            with prompt.open(encoding="utf-8", newline="") as handle:
                content["system_prompt"] = handle.read().replace("\r\n", "\n").replace("\r", "\n")
        for path in sorted(self.root.glob("*.json")):
            content[path.stem] = _read_json(path, self.root)
        for key in LISTS:
            folder = self.root / key
            if folder.is_dir():
                if key in content:
                    raise BundleDirError(f"{key}.json", f"give {key} either as {key}.json or as {key}/, not both")
                content[key], self.files[key] = _read_list(folder, self.root)
        if "system_prompt" not in content:
            raise BundleDirError(PROMPT, "missing: every bundle has a system prompt")
        return content

    def place(self, path: str) -> str:
        """The registry's path inside the content (`content.tools[0].name`, `tools["x"]`,
        `guardrails.max_refund`) as a place in this directory (`tools/x.json: name`)."""
        path = re.sub(r"^content\.?", "", path)
        match = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)(.*)$", path)
        if not match:
            return path or "(the whole bundle)"
        field, rest = match.groups()
        if field == "system_prompt":
            return PROMPT + (f" {rest}" if rest else "")
        if field in LISTS:
            item = re.match(r"^\[(\d+)\](.*)$", rest) or re.match(r'^\["((?:[^"\\]|\\.)*)"\](.*)$', rest)
            if item:
                which, inner = item.groups()
                files = self.files.get(field, [])
                if which.isdigit() and int(which) < len(files):
                    where = files[int(which)]
                elif which.isdigit():
                    where = f"{field}/ (item {which})"
                else:
                    where = f"{field}/{which}.json"
                inner = inner.lstrip(".")
                return f"{where}: {inner}" if inner else where
            return f"{field}/"
        rest = rest.lstrip(".")
        return f"{field}.json: {rest}" if rest else f"{field}.json"


def _dump(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def _managed(root: Path) -> set[Path]:
    """The files a bundle directory consists of (what pull may replace or remove)."""
    found = set(root.glob("*.json"))
    if (root / PROMPT).exists():
        found.add(root / PROMPT)
    for key in LISTS:
        found.update((root / key).glob("*.json"))
        if (root / key / ORDER).exists():
            found.add(root / key / ORDER)
    return found


def write(content: dict[str, Any], root: str | Path) -> list[str]:
    """Write `content` as a bundle directory, removing the bundle files it no longer has;
    returns the files written, relative to `root`."""
    base = Path(root)
    base.mkdir(parents=True, exist_ok=True)
    wanted: dict[Path, str] = {base / PROMPT: content["system_prompt"]}
    for key, value in content.items():
        if key == "system_prompt" or (key in DEFAULTS and value == DEFAULTS[key]):
            continue
        named = isinstance(value, list) and value and all(isinstance(i, dict) and "name" in i for i in value)
        if key in LISTS and named and len({i["name"] for i in value}) == len(value):
            names = [item["name"] for item in value]
            for item in value:
                wanted[base / key / f"{item['name']}.json"] = _dump(item)
            if names != sorted(names):
                wanted[base / key / ORDER] = "".join(f"{name}\n" for name in names)
            continue
        wanted[base / f"{key}.json"] = _dump(value)
    for stale in _managed(base) - set(wanted):
        stale.unlink()
    for path, text in wanted.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8", newline="") as handle:
            handle.write(text)
    return sorted(p.relative_to(base).as_posix() for p in wanted)
