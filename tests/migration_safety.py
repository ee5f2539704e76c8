"""What an expand migration may not do, read from the migration files themselves: shared by the
check over every migration after the previous release (tests/registry/test_upgrade.py) and its own test."""

import subprocess
from pathlib import Path

from django.db import migrations
from django.db.migrations.loader import MigrationLoader
from django.db.models import NOT_PROVIDED

ROOT = Path(__file__).resolve().parent.parent
PREVIOUS_RELEASE_FILE = ROOT / "deploy" / "previous-release"


def previous_release() -> str:
    """The commit recorded in deploy/previous-release."""
    lines = [line.strip() for line in PREVIOUS_RELEASE_FILE.read_text().splitlines()]
    [commit] = [line for line in lines if line and not line.startswith("#")]
    return commit


def files_at(commit: str) -> set[str]:
    """Every path of the repository at `commit` (needs a git clone with that commit in it)."""
    out = subprocess.run(
        ["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", commit],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode:
        raise RuntimeError(f"git cannot read the previous release {commit}: {out.stderr.strip()}")
    return set(out.stdout.split())


def migrations_after(commit: str) -> list[migrations.Migration]:
    """This checkout's migrations (ours, not Django's or a library's) whose file the previous
    release did not have."""
    before = files_at(commit)
    loader = MigrationLoader(None, ignore_no_migrations=True)
    found = []
    for migration in loader.disk_migrations.values():
        module = __import__(migration.__module__, fromlist=["_"])
        path = Path(module.__file__ or "").resolve()
        if ROOT not in path.parents:
            continue
        if str(path.relative_to(ROOT)) not in before:
            found.append(migration)
    return sorted(found, key=lambda m: (m.app_label, m.name))


def unsafe_operations(migration: migrations.Migration) -> list[str]:
    """Operations the previous release's code cannot live with while both run: a NOT NULL column
    without a database default (the old code's INSERTs do not name it and fail). A Python
    `default=` is not enough: Django fills existing rows with it and then drops it."""
    found = []
    for operation in migration.operations:
        if isinstance(operation, migrations.AddField):
            field = operation.field
            if field.many_to_many or field.null or field.db_default is not NOT_PROVIDED:
                continue
            found.append(
                f"{migration.app_label}.{migration.name}: AddField {operation.model_name}.{operation.name} "
                "is NOT NULL without db_default (make it null=True or give it db_default=)"
            )
    return found
