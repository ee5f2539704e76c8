"""The session rules, in one place: SKILL.md next to this module. Published twice, as
`GET /api/v1/shell/SKILL.md` (the file as it is) and as the MCP server's `instructions`
(built here from the same file); tests/mcp_server/test_mcp.py fails when the two differ."""

import re
from functools import cache
from pathlib import Path

SKILL_PATH = Path(__file__).with_name("SKILL.md")


@cache
def skill_md() -> str:
    return SKILL_PATH.read_text(encoding="utf-8")


def version() -> str:
    found = re.search(r"^version:\s*(\S+)\s*$", skill_md(), re.M)
    if not found:
        raise RuntimeError(f"{SKILL_PATH} has no `version:` in its front matter")
    return found.group(1)


def rules(text: str | None = None) -> list[str]:
    """The numbered rules of a SKILL.md or of instructions text, in order."""
    return re.findall(r"^\d+\. (.+)$", text if text is not None else skill_md(), re.M)


def instructions() -> str:
    """The MCP server's `instructions`: the rules and their version, nothing else."""
    numbered = "\n".join(f"{i}. {rule}" for i, rule in enumerate(rules(), start=1))
    return f"Prompt registry session rules, version {version()} (also served at /api/v1/shell/SKILL.md).\n{numbered}\n"
