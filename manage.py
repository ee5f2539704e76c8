#!/usr/bin/env python
import os
import shlex
import sys
from pathlib import Path


def load_run_env() -> None:
    """In a checkout where `make run` has run, take the database, Redis and secret key it wrote to
    .run/services.env, so that `manage.py prune`, `export_bundles` and the other commands the docs
    show work without sourcing it first. Only variables that are unset are taken: an environment
    that sets them (production, CI, a sourced file) wins. No file (the image, a fresh clone): nothing."""
    run_dir = Path(os.environ.get("STACK_RUN_DIR") or Path(__file__).resolve().parent / ".run")
    try:
        text = (run_dir / "services.env").read_text()
    except OSError:
        return
    for line in text.splitlines():
        # devtools/stack.py writes one `export NAME='value'` per line.
        words = shlex.split(line, comments=True)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, value = words[1].split("=", 1)
            os.environ.setdefault(name, value)


if __name__ == "__main__":
    load_run_env()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
