"""Skills and the compaction policy inside a bundle's content: field rules, limits, warnings.
In registry, beside registry/variables.py: what a content document may hold is the registry's
rule; the skills app (routing, turns, reports) sits above it and reads these.

Pure functions over the content document (no Django, no database), hooked into
`registry.canonical.normalise_content` (errors: the publish is refused) and
`registry.contracts.check_content` (warnings: returned and shown). See docs/skills.md.

A card: {"name", "summary", "description", "keywords", "category", "examples", "level",
"exclusive_group"?, "triggers"?}.
"""

import re
from typing import Any

from django.conf import settings
from django.db import transaction

from core import enqueue, patterns
from core.compaction import policy_errors
from core.text import content_words
from core.tokens import estimate_tokens

__all__ = ["COMPATIBILITY_RULES", "content_errors", "content_warnings", "diff", "l1_tokens", "render_card"]

SKILL_KEYS = {"name", "summary", "description", "keywords", "category", "examples", "level"}
OPTIONAL_SKILL_KEYS = {"exclusive_group", "triggers"}
NAME_RE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$")
MAX_NAME = 64
MAX_SUMMARY = 60
MAX_DESCRIPTION = 4000
MAX_CATEGORY = 64
MAX_KEYWORD = 60
MAX_EXAMPLE = 300
MAX_SKILLS = 500
MAX_TRIGGERS = 10
MAX_TRIGGER_CHARS = 200  # patterns.TRIGGER.max_chars
# All the triggers of a version together, in RE2 instructions: each turn runs every trigger on up
# to 4,000 characters, about 3 ns per instruction and character at worst (RE2's NFA), so the
# worst turn costs about 20,000 x 4,000 x 3 ns = 0.24 s, spent with the GIL released.
MAX_TRIGGER_PROGRAM_TOTAL = 20_000
# All the cards' text together (name, summary, description, keywords, examples, category), in
# characters. A process builds a version's routing index from it at its first route or turn,
# on the request's thread, and segmenting Chinese text costs about 25 us of CPU a character:
# 500 cards of 400 random ideographs took 5.0 s (bench/index_build.py), 500 cards of the
# evaluation set's size (about 200 characters each) are 100,000 characters. Issue 36.
MAX_CARD_TEXT_TOTAL = 200_000
MAX_L1 = 8
MAX_L1_TOKENS = 1500
LEVELS = ("L1", "L2")

# A summary says when to use the skill when it starts like "Use when/for/if/to ...", "When ...",
# "For ...", "If ...", or in Chinese "当……时", "用于", "适用于", "在……时", "如果".
WHEN_RE = re.compile(
    r"^\s*(?:use\s+(?:it\s+|this\s+)?(?:when|for|if|to|whenever|after|before)\b|when\b|whenever\b|for\b|if\b"
    r"|当|用于|适用|在.{0,30}时|如果|需要)",
    re.IGNORECASE,
)
# Two cards look alike when the overlap of their summary+keyword words is at least this (Jaccard).
NEAR_DUPLICATE = 0.5


def render_card(card: dict[str, Any]) -> str:
    """An L1 card as the model sees it while resident: name, summary, then the description.
    The L1 budget (MAX_L1_TOKENS) is measured on this text with core.tokens.estimate_tokens."""
    return f"## {card['name']}\n{card['summary']}\n{card['description']}\n"


def l1_tokens(skills: list[dict[str, Any]]) -> int:
    return sum(estimate_tokens(render_card(s)) for s in skills if s.get("level") == "L1")


def _text(card: dict[str, Any], key: str, limit: int, path: str, errors: list[tuple[str, str]]) -> None:
    value = card.get(key)
    if not isinstance(value, str) or not value.strip():
        errors.append((f"{path}.{key}", "Must be a non-empty string."))
    elif len(value) > limit:
        errors.append((f"{path}.{key}", f"Must be at most {limit} characters; it has {len(value)}."))


def _strings(
    card: dict[str, Any], key: str, low: int, high: int, limit: int, path: str, errors: list[tuple[str, str]]
) -> None:
    value = card.get(key)
    if not isinstance(value, list) or not low <= len(value) <= high:
        errors.append((f"{path}.{key}", f"Must be a list of {low} to {high} strings."))
        return
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            errors.append((f"{path}.{key}[{i}]", "Must be a non-empty string."))
        elif len(item) > limit:
            errors.append((f"{path}.{key}[{i}]", f"Must be at most {limit} characters."))


def _skill_errors(card: Any, path: str, errors: list[tuple[str, str]]) -> None:
    if not isinstance(card, dict):
        errors.append((path, "Each skill must be an object (name, summary, description, keywords, ...)."))
        return
    for key in sorted(set(card) - SKILL_KEYS - OPTIONAL_SKILL_KEYS):
        errors.append((f"{path}.{key}", "Unknown field."))
    for key in sorted(SKILL_KEYS - set(card)):
        errors.append((f"{path}.{key}", "This field is required."))
    _field_errors(card, path, errors)
    if "triggers" in card:
        _trigger_errors(card["triggers"], path, errors)


def _field_errors(card: dict[str, Any], path: str, errors: list[tuple[str, str]]) -> None:
    """The card's own fields: name, texts, keyword and example lists, level, exclusive group."""
    name = card.get("name")
    if "name" in card and (not isinstance(name, str) or len(name) > MAX_NAME or not NAME_RE.fullmatch(name)):
        errors.append((f"{path}.name", f"Must be snake_case (^[a-z][a-z0-9]*(_[a-z0-9]+)*$), at most {MAX_NAME}."))
    for key, limit in (("summary", MAX_SUMMARY), ("description", MAX_DESCRIPTION), ("category", MAX_CATEGORY)):
        if key in card:
            _text(card, key, limit, path, errors)
    for key, low, high, limit in (("keywords", 3, 10, MAX_KEYWORD), ("examples", 2, 3, MAX_EXAMPLE)):
        if key in card:
            _strings(card, key, low, high, limit, path, errors)
    if "level" in card and card["level"] not in LEVELS:
        errors.append((f"{path}.level", 'Must be "L1" (resident) or "L2" (routed).'))
    group = card.get("exclusive_group")
    if group is not None and (not isinstance(group, str) or not group.strip() or len(group) > MAX_NAME):
        errors.append((f"{path}.exclusive_group", f"Must be a non-empty string of at most {MAX_NAME} characters."))


def _trigger_errors(triggers: Any, path: str, errors: list[tuple[str, str]]) -> None:
    if not isinstance(triggers, list) or len(triggers) > MAX_TRIGGERS:
        errors.append((f"{path}.triggers", f"Must be a list of at most {MAX_TRIGGERS} regular expressions."))
        return
    for i, pattern in enumerate(triggers):
        if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_TRIGGER_CHARS:
            errors.append((f"{path}.triggers[{i}]", f"Must be a regular expression of 1 to {MAX_TRIGGER_CHARS}."))
            continue
        problem = trigger_problem(pattern)
        if problem:
            errors.append((f"{path}.triggers[{i}]", problem))


def trigger_problem(pattern: str) -> str | None:
    """Why a trigger cannot be routed on (RE2: not its syntax, or past core.patterns.TRIGGER)."""
    try:
        patterns.compile_bounded(pattern, patterns.TRIGGER, flags="(?i)")
    except patterns.PatternRefused as exc:
        return str(exc)
    return None


def trigger_program_size(pattern: str) -> int:
    """The RE2 program size of a trigger that compiles (0 for one that does not)."""
    try:
        return patterns.program_size(patterns.compile_bounded(pattern, patterns.TRIGGER, flags="(?i)"))
    except patterns.PatternRefused:
        return 0


def content_errors(content: dict[str, Any]) -> list[tuple[str, str]]:
    """Errors in `skills` and `compaction` of a content document, as (path, message) with paths
    relative to the content (`skills[2].name`)."""
    errors: list[tuple[str, str]] = []
    if "compaction" in content:
        errors.extend(policy_errors(content["compaction"]))
    if "skills" not in content:
        return errors
    skills = content["skills"]
    if not isinstance(skills, list):
        return [*errors, ("skills", "Must be a list of skill cards.")]
    if len(skills) > MAX_SKILLS:
        return [*errors, ("skills", f"At most {MAX_SKILLS} skills.")]
    _cards_errors(skills, errors)
    if errors:
        return errors
    return _text_total_errors(skills) or _budget_errors(skills)


def card_text_chars(card: dict[str, Any]) -> int:
    """The characters of a (valid) card's text, as MAX_CARD_TEXT_TOTAL counts them."""
    texts = [card["name"], card["summary"], card["description"], card["category"], *card["keywords"]]
    return sum(len(t) for t in [*texts, *card["examples"]])


def _text_total_errors(skills: list[dict[str, Any]]) -> list[tuple[str, str]]:
    total = sum(card_text_chars(card) for card in skills)
    if total <= MAX_CARD_TEXT_TOTAL:
        return []
    return [
        (
            "skills",
            f"The cards' text is {total} characters in all: at most {MAX_CARD_TEXT_TOTAL} (name, summary, "
            "description, keywords, examples and category of every card; shorten the descriptions or split the "
            "skills over bundles).",
        )
    ]


def _cards_errors(skills: list[Any], errors: list[tuple[str, str]]) -> None:
    """Each card, unique names, and the triggers' RE2 program size over all cards."""
    seen: dict[str, int] = {}
    total = 0
    for i, card in enumerate(skills):
        _skill_errors(card, f"skills[{i}]", errors)
        if not isinstance(card, dict):
            continue
        triggers = card.get("triggers")
        if isinstance(triggers, list) and len(triggers) <= MAX_TRIGGERS:
            total += sum(trigger_program_size(t) for t in triggers if isinstance(t, str) and t)
        name = card.get("name")
        if isinstance(name, str):
            if name in seen:
                errors.append((f"skills[{i}].name", f"Another skill is already named {name!r} (skills[{seen[name]}])."))
            seen.setdefault(name, i)
    if total > MAX_TRIGGER_PROGRAM_TOTAL:
        errors.append(
            (
                "skills",
                f"The triggers together compile to {total} RE2 instructions: at most {MAX_TRIGGER_PROGRAM_TOTAL} "
                "(each turn runs every trigger; use fewer or simpler ones).",
            )
        )


def _budget_errors(skills: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The resident (L1) cards' count and rendered size, for cards that are valid one by one."""
    errors = []
    resident = [s for s in skills if s["level"] == "L1"]
    if len(resident) > MAX_L1:
        errors.append(("skills", f"At most {MAX_L1} L1 (resident) skills; there are {len(resident)}."))
    tokens = l1_tokens(skills)
    if tokens > MAX_L1_TOKENS:
        errors.append(("skills", f"The L1 cards as rendered are about {tokens} tokens; the budget is {MAX_L1_TOKENS}."))
    return errors


def _words(card: dict[str, Any]) -> set[str]:
    return set(content_words(" ".join([card["summary"], *card["keywords"]])))


def content_warnings(content: dict[str, Any]) -> list[tuple[str, str]]:
    """Warnings for a valid content document: summaries that do not say when to use the skill,
    and look-alike pairs (summary + keywords near-duplicates) outside a shared exclusive group."""
    skills = content.get("skills") or []
    warnings: list[tuple[str, str]] = []
    for i, card in enumerate(skills):
        if not WHEN_RE.match(card["summary"]):
            warnings.append(
                (f"skills[{i}].summary", 'Say when to use the skill, e.g. "Use when the customer asks for ...".')
            )
    words = [_words(card) for card in skills]
    for i in range(len(skills)):
        for j in range(i + 1, len(skills)):
            union = words[i] | words[j]
            if not union:
                continue
            overlap = len(words[i] & words[j]) / len(union)
            group = skills[i].get("exclusive_group")
            if overlap >= NEAR_DUPLICATE and not (group and group == skills[j].get("exclusive_group")):
                warnings.append(
                    (
                        f"skills[{j}]",
                        f"`{skills[j]['name']}` looks like `{skills[i]['name']}` (summary and keywords "
                        f"{overlap:.0%} alike): sharpen one, or put both in one exclusive_group.",
                    )
                )
    warnings.extend(_language_warnings(skills))
    return warnings


_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_LATIN = re.compile(r"[A-Za-z]{2,}")


def _scripts(texts: list[str]) -> set[str]:
    """The scripts examples are written in: "cjk" (Chinese, Japanese, Korean) or "latin"."""
    return {"cjk" if _CJK.search(t) else "latin" for t in texts if _CJK.search(t) or _LATIN.search(t)}


def _language_warnings(skills: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """When the bundle's examples are written in two scripts, each card whose examples cover
    one of them only: the router has no translation model, so a message in the other reaches
    that card only through the lexicon's bilingual concepts (docs/skills.md)."""
    per_card = [_scripts(card.get("examples") or []) for card in skills]
    bundle = set().union(*per_card) if per_card else set()
    if len(bundle) < 2:
        return []
    names = {"cjk": "Chinese, Japanese or Korean", "latin": "a Latin-script language"}
    out = []
    for i, scripts in enumerate(per_card):
        missing = bundle - scripts
        if scripts and missing:
            (lacking,) = missing
            out.append(
                (
                    f"skills[{i}].examples",
                    f"Other cards of this bundle have examples in {names[lacking]}; these have none: add one "
                    "in the language your users write, or such messages reach this card only through "
                    "the router's small bilingual lexicon.",
                )
            )
    return out


# How a change of skills or of the compaction policy is classified (registry.contracts takes these
# rows into its COMPATIBILITY_RULES table and diff_contents calls `diff`).
COMPATIBILITY_RULES: list[tuple[str, str, str]] = [
    (
        "skill_changed",
        "patch",
        "A skill card's wording, keywords, examples, category, level, triggers or group changed.",
    ),
    ("skills_reordered", "patch", "The same skill cards are listed in another order."),
    (
        "compaction_changed",
        "patch",
        "The compaction policy changed: how long sessions are summarised, not the contract.",
    ),
    ("skill_added", "minor", "A new skill card: every card an agent could load before is still there."),
    (
        "skill_removed",
        "major",
        "A skill card was removed: routing no longer offers it and loading it by name fails.",
    ),
]


def _cards(value: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(value, list):
        return {}
    return {c["name"]: c for c in value if isinstance(c, dict) and isinstance(c.get("name"), str)}


def diff(old: dict[str, Any], new: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(kind, path, message) for each change of skill cards (matched by name) and of the
    compaction policy from old to new."""
    changes: list[tuple[str, str, str]] = []
    before, after = _cards(old.get("skills")), _cards(new.get("skills"))
    for name in before:
        if name not in after:
            changes.append(("skill_removed", f"skills[{name}]", f"Skill `{name}` was removed."))
    for name, card in after.items():
        if name not in before:
            changes.append(("skill_added", f"skills[{name}]", f"Skill `{name}` was added."))
        elif before[name] != card:
            keys = sorted(k for k in set(before[name]) | set(card) if before[name].get(k) != card.get(k))
            changes.append(("skill_changed", f"skills[{name}]", f"Skill `{name}` changed: {', '.join(keys)}."))
    common = [n for n in before if n in after]
    if common != [n for n in after if n in before]:
        changes.append(("skills_reordered", "skills", "The skill cards are listed in another order."))
    if old.get("compaction") != new.get("compaction"):
        changes.append(("compaction_changed", "compaction", "The compaction policy changed."))
    return changes


SKILL_INDEX_TASK = "skills.tasks.skill_index_task"  # the one name; skills.index_store sends it too


def index_build_cost(skills: list[dict[str, Any]]) -> int:
    """What building the routing index of these cards costs, in characters of Chinese: the
    cards' text as card_text_chars counts it, each ASCII character a twentieth (segmenting costs
    about 25 us a Chinese character and 1.3 us an English one: bench/index_build.py)."""
    total = 0
    for card in skills:
        texts = [card.get(f) for f in ("name", "summary", "description", "category")]
        for text in [*texts, *(card.get("keywords") or []), *(card.get("examples") or [])]:
            if isinstance(text, str):
                ascii_chars = len(text.encode("ascii", "ignore"))
                total += 20 * (len(text) - ascii_chars) + ascii_chars
    return total // 20


def index_after_commit(doc: dict[str, Any], content_hash: str) -> None:
    """A version whose index costs more than SKILL_INDEX_INLINE_COST to build: once its publish
    commits, the worker builds it (skills.index_store), not the web thread of its first turn."""
    if index_build_cost(doc.get("skills") or []) > settings.SKILL_INDEX_INLINE_COST:
        transaction.on_commit(
            lambda: enqueue.send(SKILL_INDEX_TASK, what="a version's skill index", content_hash=content_hash)
        )
