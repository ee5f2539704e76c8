"""What every `promptreg` command shares: the failure it stops with, its output (for people, or
one JSON document with --json) and the registry from --url / --api-key or the environment."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from promptreg.sync import Registry


class Failure(Exception):
    """Stop with this message (and JSON document) and exit status."""

    def __init__(self, message: str, *, status: int = 1, doc: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.doc = doc or {"error": message}


class Output:
    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.lines: list[str] = []

    def say(self, line: str) -> None:
        if not self.as_json:
            print(line)

    def warn(self, line: str) -> None:
        if not self.as_json:
            print(line, file=sys.stderr)

    def done(self, doc: dict[str, Any]) -> None:
        if self.as_json:
            print(json.dumps(doc, indent=2, ensure_ascii=False))


def _registry(args: argparse.Namespace) -> Registry:
    url = args.url or os.environ.get("REGISTRY_URL")
    key = args.api_key or os.environ.get("REGISTRY_API_KEY")
    if not url or not key:
        raise Failure("Give the registry with --url and --api-key, or REGISTRY_URL and REGISTRY_API_KEY.", status=2)
    return Registry(url, key)
