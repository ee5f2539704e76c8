"""Line endings as the registry stores them: `\\n`, wherever text enters (the admin's forms, the
API, the importers, the CLI's push). Browsers submit a textarea with CRLF (the HTML standard
says so) and Windows editors write it; without this, text typed twice is two byte strings: a
re-save of an unchanged version in the admin made a new version, and the model received `\\r\\n`.

Only CR LF and a lone CR are rewritten; every other character, whitespace included, is kept."""

from typing import Any

__all__ = ["lf", "lf_all"]


def lf(text: str) -> str:
    """`text` with CR LF and a lone CR as LF."""
    if "\r" not in text:
        return text  # the common case: no copy
    return text.replace("\r\n", "\n").replace("\r", "\n")


def lf_all(value: Any) -> Any:
    """`value` (a JSON value: strings, lists, objects) with every string, keys included, through
    lf(); anything else as it is. Unchanged parts are returned as they are, not copied."""
    if isinstance(value, str):
        return lf(value)
    if isinstance(value, list):
        items = [lf_all(item) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if isinstance(value, dict):
        pairs = [(lf_all(k) if isinstance(k, str) else k, lf_all(v)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(pairs, value.items(), strict=True)):
            return value
        return dict(pairs)
    return value
