"""PostgreSQL's client programs (pg_dump, pg_restore, psql) for a given server: the backup
runbook and its test need a pg_dump at least as new as the server, and a pg_restore that
writes SQL the target server understands, so the same major release is preferred."""

import re
import shutil
import subprocess
from pathlib import Path


def _candidates(tool: str) -> list[Path]:
    found: list[Path] = []
    try:  # pgserver ships a whole PostgreSQL in its package
        from pgserver._commands import POSTGRES_BIN_PATH

        found.append(Path(POSTGRES_BIN_PATH) / tool)
    except Exception:  # not installed (the image): the machine's own binaries only
        pass
    found += sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{tool}"))
    on_path = shutil.which(tool)
    if on_path:
        found.append(Path(on_path))
    return [path for path in found if path.is_file()]


def major_of(program: Path) -> int:
    out = subprocess.run([str(program), "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"\) (\d+)", out)
    if not match:
        raise RuntimeError(f"cannot read the version of {program}: {out!r}")
    return int(match.group(1))


def client_for(tool: str, server_major: int) -> Path:
    """`tool` of the server's major release if there is one, else the oldest newer one."""
    usable = sorted(
        ((major_of(path), path) for path in _candidates(tool) if major_of(path) >= server_major),
        key=lambda pair: (pair[0] != server_major, pair[0]),
    )
    if not usable:
        raise RuntimeError(f"no {tool} of PostgreSQL {server_major} or newer on this machine")
    return usable[0][1]
