import io
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from core import jsonbytes


class SafeJSONParser(JSONParser):
    """DRF's JSON parser, but a body nested deeper than Python's decoder can follow (a few
    KB of brackets) is a 400 malformed_json rather than a RecursionError and a 500."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply.") from None


def parse_body(body: bytes) -> Any:
    """A JSON body as SafeJSONParser reads it (ParseError when malformed): with orjson where it
    reads the same values (core.jsonbytes), else with SafeJSONParser."""
    done, value = jsonbytes.loads(body)
    if done:
        return value
    return SafeJSONParser().parse(io.BytesIO(body), "application/json", {})
