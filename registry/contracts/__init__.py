"""Publish-time contract checks and breaking-change classification for bundle content.

Two pure functions over normalised content documents (`registry.canonical.normalise_content`):

- `check_content(doc, previous)`: what is wrong with a document (errors, which block a publish)
  and what looks wrong against the bundle's previous version (warnings, returned and shown).
- `diff_contents(old, new)`: every change from `old` to `new`, each classified `patch`, `minor`
  or `major` by `COMPATIBILITY_RULES`, the one table the README prints.

Finding paths point into the content document with list indexes (`tools[2].input_schema.
properties.amount.type`, `guardrails.rules[1].effect`); change paths address tools by name
(`tools[process_refund].input_schema.properties.amount.type`), because indexes shift between
versions. A key that contains `.`, `[`, `]`, quotes or whitespace is written `["a.b"]`.

How a system prompt references tools
    - Explicitly, `{{tool:NAME}}` (whitespace inside the braces allowed), anywhere in the prompt.
      NAME must be a tool of the bundle: anything else is an error.
    - Implicitly, an inline code span (single backticks) whose whole text is an identifier,
      optionally written as a call (`issue_refund`, `issue_refund(order_id)`), when the
      identifier looks like a tool: it has an underscore between two letters or digits
      (snake_case), or it is a camelCase call (`issueRefund()`), or it names a tool of the
      previous version. It is not a reference when it is in capitals (`ORDER_ID`, a constant),
      a property name, `$defs` name or string enum/const value in any schema of the bundle
      (`order_id`, `in_progress`), or listed in `metadata.not_tools` (a list of strings, the
      allow-list for ordinary code such as `snake_case`). Fenced code blocks are skipped.
      A reference to a tool the bundle lacks is an error.
    - A prompt that still mentions, anywhere and in any form, a tool the previous version had
      and this one removed or renamed gets a warning (unless that mention is already an error).

Guardrails structure (`{}` means no guardrails: every tool is allowed)
    {"default": "allow" | "confirm" | "deny",            optional, "allow" when absent
     "rules": [{"tool": NAME, "effect": "allow" | "confirm" | "deny", "reason": str?}]}
    One rule per tool, naming only tools of the bundle; unknown keys are errors. A tool's
    effective effect is its rule's effect, else the default; effects order allow < confirm < deny.

Compatibility model
    Like a schema registry's BACKWARD mode: a version is compatible when everything valid under
    the old one stays valid under the new one. For a tool's input_schema that is the agent's
    point of view (a call planned against the old version must still be accepted); for the
    output_schema, output valid under the old schema must still validate, and every property a
    consumer reads must still be there. Anything the comparison cannot prove compatible is
    major. `$ref`s into the same schema (`#/$defs/...`, any JSON pointer, `$anchor`) are
    followed, with sibling keywords laid over the target, so a change shows where the target is
    used (once, at its first place of use, when several places share it); other `$ref`s are
    compared as text. `oneOf` is judged like `anyOf`. A guardrail default that moves is judged
    on its own, even if every tool has a rule. Comparison work is capped (see _WORK_LIMIT):
    a schema too large or too self-referential to compare in full is reported as major.
"""

from registry.contracts.base import (
    COMPATIBILITY_RULES,
    EFFECTS,
    LEVELS,
    Change,
    CheckResult,
    Diff,
    Finding,
    tool_renames,
)
from registry.contracts.checks import check_content
from registry.contracts.diff import by_severity, diff_contents

__all__ = [
    "COMPATIBILITY_RULES",
    "EFFECTS",
    "LEVELS",
    "Change",
    "CheckResult",
    "Diff",
    "Finding",
    "by_severity",
    "check_content",
    "diff_contents",
    "tool_renames",
]
