"""core.jsonbytes: orjson on the turn call's path gives DRF JSONRenderer's bytes and the standard
parser's values, or says it cannot (and the caller takes the standard path)."""

import io
import json
import random
import struct

import pytest
from rest_framework.renderers import JSONRenderer

from api.parsers import SafeJSONParser
from core import jsonbytes


def _floats(n: int) -> list[float]:
    rng = random.Random(42)
    out = [1e-05, 9.99e-05, 1e-4, 2.5e-07, 1e16, 1.5e300, 5e-324, -0.0, 0.1 + 0.2, 123456789.123]
    while len(out) < n:
        if len(out) % 2:
            v = float(f"{rng.randint(1, 10 ** rng.randint(1, 17))}e{rng.randint(-330, 300)}")
        else:
            v = struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]
        if v == v and abs(v) != float("inf"):
            out.append(v)
    return out


def test_dumps_is_jsonrenderers_bytes_or_nothing():
    renderer = JSONRenderer()
    answered = 0
    for v in _floats(20000):
        value = {"score": v, "text": "line\u2028sep\u2029 é e-mail", "n": [1, True, None]}
        out = jsonbytes.dumps(value)
        if out is not None:
            answered += 1
            assert out == renderer.render(value), v
    assert answered > 15000  # the fast path is the common one
    assert jsonbytes.dumps({"text": "3e-1"}) is None  # a string that looks like one: the standard path


@pytest.mark.parametrize(
    "value",
    [{"big": 2**70}, {"lone": "\ud800"}, {"deep": json.loads("[" * 300 + "]" * 300)}, {1: "non-str key"}],
)
def test_dumps_leaves_what_it_cannot_write_as_drf_does(value):
    assert jsonbytes.dumps(value) is None


def _standard(body: bytes):
    return SafeJSONParser().parse(io.BytesIO(body), "application/json", {})


@pytest.mark.parametrize(
    "body",
    [
        b'{"a":1,"a":2}',
        b'{"messages":[{"role":"user","content":"h\\u00e9 \\ud83d\\ude00"}],"k":5}',
        b"[-0.0, 1e-400, 1E5, 1.000000000000001]",
        b'{"a":"\\u0000"}',
        b" {} ",
    ],
)
def test_loads_gives_the_standard_parsers_value(body):
    done, value = jsonbytes.loads(body)
    assert done
    assert value == _standard(body)
    assert json.dumps(value) == json.dumps(_standard(body))


@pytest.mark.parametrize(
    "body",
    [
        b"-9223372036854775809",  # orjson would read a float
        b"123456789012345678901234567890",
        b"[1.0000000000000000000001]",  # a long number: the standard parser reads it
        b"1e400",
        b'"\\ud800"',
        b"\xef\xbb\xbf{}",
        b"[" * 600 + b"]" * 600,
        b"NaN",
        b"{",
    ],
)
def test_loads_leaves_the_rest_to_the_standard_parser(body):
    assert jsonbytes.loads(body) == (False, None)


def test_serialisable_is_never_yes_where_the_standard_library_says_no():
    assert jsonbytes.serialisable([{"role": "user", "content": "x"}])
    assert not jsonbytes.serialisable([{"content": "\ud800"}])
    assert not jsonbytes.serialisable([2**70])  # the standard library writes it: it is asked
