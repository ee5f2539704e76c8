"""The lock names every extra its packages ask for.

`uv pip compile` writes `google-auth==2.63.0` even when `google-genai` asks for
`google-auth[requests]`. pip's resolver then meets an unpinned `google-auth[requests]>=...` in
hash mode, and some pips (23.2, the one `python3.11 -m venv` bundles) refuse it once a newer
release of the package exists upstream: the lock broke by itself on 2026-12-07
(docs/development.md, "When the lock breaks"). Written as `google-auth[requests]==2.63.0`,
every installer reads the requirement as pinned.

Which extras are asked for comes from the metadata of the packages installed from the lock
(`make lock` installs them first), so this needs no index:

    python -m devtools.lock_extras --check requirements.txt requirements-dev.txt   # exit 1 if one is missing
    python -m devtools.lock_extras --write requirements.txt requirements-dev.txt   # add them

A requirement whose marker names no extra counts on every platform (the lock is universal); one
that belongs to an extra counts when the package is itself locked with that extra."""

import argparse
import re
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:\[(?P<extras>[^\]]*)\])?==(?P<version>[^\s;\\]+)")


def locked(paths: list[Path]) -> dict[str, tuple[str, set[str]]]:
    """Every pinned package of the lock files: name -> (version, extras already written)."""
    found: dict[str, tuple[str, set[str]]] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            match = PIN.match(line)
            if match:
                extras = {e.strip() for e in (match["extras"] or "").split(",") if e.strip()}
                name = canonicalize_name(match["name"])
                old = found.get(name, (match["version"], set()))[1]
                found[name] = (match["version"], old | extras)
    return found


def _applies(requirement: Requirement, own_extras: set[str]) -> bool:
    marker = requirement.marker
    if marker is None or "extra" not in str(marker):
        return True
    return any(marker.evaluate({"extra": extra}) for extra in own_extras or {""})


def wanted(lock: dict[str, tuple[str, set[str]]]) -> dict[str, set[str]]:
    """The extras each locked package is asked for by the other locked packages, as installed."""
    asked: dict[str, set[str]] = {}
    for dist in metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        if name not in lock or lock[name][0] != dist.version:
            continue
        for line in dist.requires or []:
            requirement = Requirement(line)
            target = canonicalize_name(requirement.name)
            if requirement.extras and target in lock and _applies(requirement, lock[name][1]):
                asked.setdefault(target, set()).update(requirement.extras)
    return asked


def missing(paths: list[Path]) -> dict[str, set[str]]:
    lock = locked(paths)
    return {name: extras - lock[name][1] for name, extras in wanted(lock).items() if extras - lock[name][1]}


def write(paths: list[Path]) -> dict[str, set[str]]:
    lock = locked(paths)
    asked = wanted(lock)
    for path in paths:
        lines = path.read_text().splitlines(keepends=True)
        for index, line in enumerate(lines):
            match = PIN.match(line)
            if not match:
                continue
            name = canonicalize_name(match["name"])
            extras = sorted(asked.get(name, set()) | lock[name][1])
            if extras:
                spelled = f"{match['name']}[{','.join(extras)}]=={match['version']}"
                lines[index] = spelled + line[match.end() :]
        path.write_text("".join(lines))
    return asked


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="add the missing extras to the files")
    parser.add_argument("--check", action="store_true", help="exit 1 when an extra is missing")
    parser.add_argument("files", nargs="+", type=Path)
    ns = parser.parse_args()
    if ns.write:
        write(ns.files)
    gaps = missing(ns.files)
    for name, extras in sorted(gaps.items()):
        print(f"{name}: asked for with [{','.join(sorted(extras))}], locked without", file=sys.stderr)
    return 1 if gaps else 0


if __name__ == "__main__":
    sys.exit(main())
