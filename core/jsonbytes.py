"""JSON with orjson where it gives the bytes and values the standard library gives, and only
there (issue 42: the turn call's path). Each function says when it cannot vouch for the result
(None, or an exception), and the caller then takes the standard path, so a client sees no
difference: the same answer's bytes, the same parsed values, the same errors.

- `dumps`: the bytes of DRF's JSONRenderer (compact separators, UTF-8, U+2028 and U+2029
  escaped, floats as Python's repr writes them). orjson writes a float below 1e-4 otherwise
  (`0.00001`, `2.5e-7` where Python writes `1e-05`, `2.5e-07`): output with such a form, or
  anything orjson refuses (a type of its own, an integer past 64 bits, a lone surrogate, deep
  nesting), is None. The form test also matches such text inside a string: then the standard
  path runs, which is slower, never different.
- `loads`: orjson's parse of a body, or None where the standard parser could answer otherwise:
  a body with more brackets than the standard parser's nesting limit could follow, a run of 19
  digits or more (orjson reads an integer past 64 bits as a float, where Python keeps it exact),
  or one orjson refuses (NaN, a number past the float range, a lone surrogate escape, a BOM,
  malformed JSON)."""

from typing import Any

import orjson

_DIGITS = frozenset(b"0123456789")
# The standard parser (a C scanner on Python's recursion limit) gives up nesting a little under
# 1,000 deep: a body with fewer brackets than this cannot reach it.
_MAX_BRACKETS = 500
# A run of 19 digits, found by mapping every digit to b"0" and anything else to a space, then
# a substring search: the regular expression rb"\d{19}" took a millisecond on a 14 kB turn
# body (it retries at every digit), more than the parse it guards; this takes a tenth of that.
_DIGITS_ONLY = bytes(48 if 48 <= b <= 57 else 32 for b in range(256))
_LONG_RUN = b"0" * 19


class _Refused(Exception):
    pass


def _refuse(value: Any) -> Any:
    raise _Refused(type(value).__name__)


def _as_python_writes_floats(out: bytes) -> bool:
    """False when `out` may hold a float orjson writes otherwise than Python's repr, which it
    does for 0 < |x| < 1e-4 only: a small number in positional form (0.0000999 for 9.99e-05),
    or a negative exponent without Python's zero padding (2.5e-7 for 2.5e-07). Found by
    `find`, not a regular expression: a scan of the whole answer costs more than the encoding."""
    if b"0.0000" in out:
        return False
    at = out.find(b"e-")
    while at != -1:
        if at and out[at - 1] in _DIGITS and out[at + 2 : at + 3].isdigit() and not out[at + 3 : at + 4].isdigit():
            return False
        at = out.find(b"e-", at + 2)
    return True


def dumps(value: Any) -> bytes | None:
    """DRF JSONRenderer's bytes for `value`, or None when only the standard path can tell."""
    try:
        out = orjson.dumps(
            value, default=_refuse, option=orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
        )
    except (orjson.JSONEncodeError, _Refused, TypeError):
        return None
    if not _as_python_writes_floats(out):
        return None
    if b"\xe2\x80" in out:  # U+2028 and U+2029, escaped as DRF escapes them
        out = out.replace("\u2028".encode(), b"\\u2028").replace("\u2029".encode(), b"\\u2029")
    return out


def loads(body: bytes) -> tuple[bool, Any]:
    """(True, the value) parsed by orjson; (False, None) when the standard parser must decide."""
    if body.count(b"[") + body.count(b"{") > _MAX_BRACKETS or _LONG_RUN in body.translate(_DIGITS_ONLY):
        return False, None
    try:
        return True, orjson.loads(body)
    except orjson.JSONDecodeError:
        return False, None


def serialisable(value: Any) -> bool:
    """True when `value` is JSON the standard library would write too (orjson wrote it); False:
    ask the standard library (which may still manage it, or says why not)."""
    try:
        orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return False
    return True
