"""Regular expressions written outside the registry (agents' grep patterns and globs, publishers'
skill triggers), bounded before they are compiled and run on RE2 (`google-re2`).

Why RE2: Python's `re` backtracks (`(a+)+$` on 25 characters takes seconds and holds the GIL,
freezing the whole worker), and the `regex` package's timeout starts only after its compile,
which a counted repeat such as `(?:a{60000}){60000}` turns into gigabytes. RE2 matches in time
linear in the text, compiles under a memory cap (`max_mem`), releases the GIL while it matches,
and refuses what it cannot do in linear time (backreferences, lookaround).

Linear is not free: a search costs about (program size x text length) when RE2's DFA runs out
of memory and it falls back to its NFA (a few ns per instruction and byte, measured). So each
kind of pattern has `Limits`: its length, its group nesting, its number of counted repeats
(`{n,m}`, each at most 1000, RE2's own bound) and the size of the compiled program. The first
three are checked on the text before RE2 sees it, so every refusal says which bound it broke.

Syntax: RE2's, which is Python's without backreferences (`\\1`, `(?P=name)`), lookaround
(`(?=`, `(?!`, `(?<=`, `(?<!`), atomic groups, possessive repeats and verbose mode (`(?x)`).
Python's `\\Z` (end of text) is accepted and means RE2's `\\z`.
"""

from dataclasses import dataclass
from typing import Any

import re2

__all__ = ["GLOB", "GREP", "TRIGGER", "Limits", "PatternRefused", "compile_bounded", "problem", "program_size"]

MAX_REPEAT = 1000  # RE2's bound on one counted repeat, and on nested ones multiplied


@dataclass(frozen=True)
class Limits:
    what: str  # "pattern", "trigger": how errors name it
    max_chars: int
    max_depth: int  # nested groups
    max_counted: int  # counted repeats {n}, {n,}, {n,m}
    max_program: int  # RE2 program size (instructions), forward and reverse
    max_mem: int  # RE2's memory budget: the program plus its DFA cache


# grep: a search of up to 1 MiB per block costs at most about 3,000 x 64 KB x 3 ns = 0.6 s when
# RE2 falls back to its NFA (knowledge.tools searches in blocks and checks its deadline between).
GREP = Limits("pattern", max_chars=1000, max_depth=16, max_counted=20, max_program=3000, max_mem=8 << 20)
# glob: the regex made from a glob pattern (knowledge.tools.glob_regex), over paths of at most 700 bytes.
GLOB = Limits("pattern", max_chars=2000, max_depth=8, max_counted=0, max_program=4000, max_mem=2 << 20)
# Skill triggers: at most 4,000 characters of a user message each turn, up to 10 per skill and
# 500 skills, so a small program each (the worst case is about 500 x 4,000 x 3 ns = 6 ms).
TRIGGER = Limits("trigger", max_chars=200, max_depth=8, max_counted=10, max_program=500, max_mem=1 << 20)

# What RE2 says, and what we tell the writer instead.
_UNSUPPORTED = [
    ("invalid perl operator: (?=", "lookahead (?=...) is not supported (RE2 syntax)"),
    ("invalid perl operator: (?!", "negative lookahead (?!...) is not supported (RE2 syntax)"),
    ("invalid perl operator: (?<", "lookbehind (?<=...) / (?<!...) is not supported (RE2 syntax)"),
    ("invalid perl operator: (?P=", "backreferences (?P=name) are not supported (RE2 syntax)"),
    ("invalid perl operator: (?P", "backreferences (?P=name) are not supported (RE2 syntax)"),
    ("invalid perl operator: (?>", "atomic groups (?>...) are not supported (RE2 syntax)"),
    ("invalid perl operator: (?x", "verbose mode (?x) is not supported (RE2 syntax)"),
    ("invalid perl operator: (?#", "comments (?#...) are not supported (RE2 syntax)"),
    ("bad repetition operator: *+", "possessive repeats (*+, ++, ?+) are not supported (RE2 syntax)"),
    ("bad repetition operator: ++", "possessive repeats (*+, ++, ?+) are not supported (RE2 syntax)"),
    ("bad repetition operator: ?+", "possessive repeats (*+, ++, ?+) are not supported (RE2 syntax)"),
    ("pattern too large", "the pattern is too large to run: repeat less"),
    ("invalid repetition size", f"counted repeats, multiplied when nested, may be at most {MAX_REPEAT}"),
]


class PatternRefused(ValueError):
    """The pattern breaks a bound or is not RE2 syntax; str() is one sentence for the writer."""


def _scan(pattern: str) -> tuple[str, int, list[int]]:
    """(the pattern for RE2, deepest group nesting, the largest number of each counted repeat).
    Escapes and character classes are skipped; Python's `\\Z` becomes `\\z`."""
    out: list[str] = []
    depth = deepest = 0
    counted: list[int] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            escaped = pattern[i : i + 2]
            out.append("\\z" if escaped == "\\Z" else escaped)
            i += 2
            continue
        if c == "[":  # a class: up to the first ] that is not its first character
            j = _class_end(pattern, i)
            out.append(pattern[i : j + 1])
            i = j + 1
            continue
        if c == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif c == ")":
            depth = max(depth - 1, 0)
        elif c == "{":
            end, largest = _counted_repeat(pattern, i)
            if largest is not None:
                counted.append(largest)
                out.append(pattern[i : end + 1])
                i = end + 1
                continue
        out.append(c)
        i += 1
    return "".join(out), deepest, counted


def _class_end(pattern: str, i: int) -> int:
    """The index of the `]` that closes the character class opened at `i` (the first `]` that
    is not its first character, skipping escapes and `[:alpha:]`), or the end of the pattern."""
    n = len(pattern)
    j = i + 1
    if j < n and pattern[j] == "^":
        j += 1
    if j < n and pattern[j] == "]":
        j += 1
    while j < n and pattern[j] != "]":
        if pattern[j] == "\\":
            j += 1
        elif pattern.startswith("[:", j):  # [[:alpha:]]
            end = pattern.find(":]", j + 2)
            j = end + 1 if end != -1 else j
        j += 1
    return j


def _counted_repeat(pattern: str, i: int) -> tuple[int, int | None]:
    """For the `{` at `i`: the index of its `}` and the largest count of a counted repeat
    `{n}`, `{n,}` or `{n,m}`; None when it is a literal brace."""
    end = pattern.find("}", i)
    body = pattern[i + 1 : end] if end != -1 else ""
    low, comma, high = body.partition(",")
    if low.isdigit() and (not high or high.isdigit()) and (comma or not high):
        return end, max(int(x) for x in (low, high) if x)
    return end, None


def problem(pattern: Any, limits: Limits) -> str | None:
    """Why `pattern` is refused before it is compiled (a bound on its text), or None."""
    what = limits.what
    if not isinstance(pattern, str) or not pattern:
        return f"A {what} is required."
    if len(pattern) > limits.max_chars:
        return f"The {what} has {len(pattern)} characters: at most {limits.max_chars}."
    _, deepest, counted = _scan(pattern)
    if deepest > limits.max_depth:
        return f"The {what} nests groups {deepest} deep: at most {limits.max_depth}."
    if len(counted) > limits.max_counted:
        return f"The {what} has {len(counted)} counted repeats {{n,m}}: at most {limits.max_counted}."
    if counted and max(counted) > MAX_REPEAT:
        return f"A counted repeat in the {what} is {{{max(counted)}}}: at most {MAX_REPEAT}."
    return None


def compile_bounded(pattern: Any, limits: Limits, *, flags: str = "") -> Any:
    """The RE2 regexp of `pattern` (flags such as "(?m)" or "(?i)" put first), or PatternRefused.
    Built directly rather than through re2.compile, whose cache would keep up to 128 hostile
    patterns with their DFA memory per process."""
    refused = problem(pattern, limits)
    if refused:
        raise PatternRefused(refused)
    scanned, _, _ = _scan(pattern)
    try:
        encoded = (flags + scanned).encode()
    except UnicodeEncodeError:
        raise PatternRefused(f"The {limits.what} is not valid Unicode (a lone surrogate).") from None
    options = re2.Options()
    options.max_mem = limits.max_mem
    options.log_errors = False  # RE2 would print every refused pattern to stderr
    options.never_capture = True  # spans of the whole match only: lets RE2 use its DFA
    try:
        compiled = re2._Regexp(encoded, options)
    except re2.error as exc:
        raise PatternRefused(_explain(str(exc), limits)) from None
    size = program_size(compiled)
    if size > limits.max_program:
        raise PatternRefused(
            f"The {limits.what} is too large to run: it compiles to {size} instructions, at most "
            f"{limits.max_program} (repeat less, or split it)."
        )
    return compiled


def program_size(compiled: Any) -> int:
    """RE2 instructions of a compiled pattern (the larger of its forward and reverse programs)."""
    return int(max(compiled._regexp.ProgramSize(), compiled._regexp.ReverseProgramSize()))


def _explain(error: str, limits: Limits) -> str:
    text = error[2:-1] if error.startswith(("b'", 'b"')) else error  # RE2's message arrives as bytes' repr
    for needle, said in _UNSUPPORTED:
        if needle in text:
            return f"The {limits.what} is not supported: {said}."
    if "invalid escape sequence: \\" in text and text[-1:].isdigit():
        return f"The {limits.what} is not supported: backreferences (\\1) are not supported (RE2 syntax)."
    return f"The {limits.what} is not a valid regular expression: {text}."
