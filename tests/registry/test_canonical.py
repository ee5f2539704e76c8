import hashlib
import json

import pytest

from core.errors import InvalidContent
from registry.canonical import canonical_bytes, canonicalise
from tests.conftest import content


def test_it_fills_defaults_sorts_keys_and_uses_compact_separators():
    _, data, digest = canonicalise({"system_prompt": 'Hé, "you"', "model": {"b": 1, "a": [2, {"z": 0, "y": 1}]}})
    assert (
        data
        == (
            '{"guardrails":{},"metadata":{},"model":{"a":[2,{"y":1,"z":0}],"b":1},'
            '"output_schema":null,"system_prompt":"Hé, \\"you\\"","tools":[]}'
        ).encode()
    )
    assert digest == hashlib.sha256(data).hexdigest()


def test_it_gives_the_same_bytes_for_the_same_document_written_differently():
    doc = content()
    shuffled = json.loads(json.dumps(dict(reversed(list(doc.items())))))
    shuffled["guardrails"] = {}  # an explicit default equals an omitted one
    assert canonicalise(doc) == canonicalise(shuffled)


def test_it_keeps_non_ascii_unescaped():
    _, data, _ = canonicalise({"system_prompt": "日本語 ✓"})
    assert "日本語 ✓".encode() in data


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ({}, "content.system_prompt"),
        ({"system_prompt": ""}, "content.system_prompt"),
        ({"system_prompt": 5}, "content.system_prompt"),
        ({"system_prompt": "x" * 200_001}, "content.system_prompt"),
        ({"system_prompt": "x", "extra": 1}, "content.extra"),
        ({"system_prompt": "x", "tools": {}}, "content.tools"),
        ({"system_prompt": "x", "tools": ["t"]}, "content.tools[0]"),
        (
            {"system_prompt": "x", "tools": [{"name": "9bad", "description": "", "input_schema": {}}]},
            "content.tools[0].name",
        ),
        ({"system_prompt": "x", "tools": [{"name": "a", "input_schema": {}}]}, "content.tools[0].description"),
        (
            {"system_prompt": "x", "tools": [{"name": "a", "description": "", "input_schema": []}]},
            "content.tools[0].input_schema",
        ),
        (
            {"system_prompt": "x", "tools": [{"name": "a", "description": "", "input_schema": {}}] * 2},
            "content.tools[1].name",
        ),
        ({"system_prompt": "x", "guardrails": []}, "content.guardrails"),
        ({"system_prompt": "x", "output_schema": "s"}, "content.output_schema"),
        ({"system_prompt": "x", "model": None}, "content.model"),
        ({"system_prompt": "x", "metadata": 1}, "content.metadata"),
        ({"system_prompt": "\ud800"}, "content"),
        ({"system_prompt": "x", "metadata": {"n": float("nan")}}, "content"),
        ({"system_prompt": "x", "metadata": {"big": "y" * (1024 * 1024)}}, "content"),
        ("not an object", "content"),
    ],
)
def test_it_refuses_invalid_documents_naming_the_field(doc, path):
    with pytest.raises(InvalidContent) as caught:
        canonicalise(doc)
    assert path in caught.value.details


def test_canonical_bytes_of_a_string_is_its_json_form():
    assert canonical_bytes('a"b') == b'"a\\"b"'
