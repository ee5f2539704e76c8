import binascii
from base64 import b64decode
from urllib import parse

from django.core.exceptions import FieldDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import Cursor as DrfCursor
from rest_framework.pagination import CursorPagination
from rest_framework.response import Response

from core import limits


class Cursor(CursorPagination):
    """The contract's list shape: {"results": [...], "next": url-or-null}, paged by ?cursor=."""

    page_size = limits.PAGE_SIZE
    page_size_query_param = "limit"
    max_page_size = limits.PAGE_SIZE_MAX
    ordering = "pk"
    invalid_cursor_message = "The cursor is not valid; follow the `next` link of the previous page."

    def paginate_queryset(self, queryset, request, view=None):
        self._model = queryset.model
        return super().paginate_queryset(queryset, request, view=view)

    def _invalid(self) -> ValidationError:
        return ValidationError({self.cursor_query_param: [self.invalid_cursor_message]})

    def decode_cursor(self, request):
        """Only a cursor this server wrote is accepted; anything else is a 400 naming `cursor`.

        DRF's own decoder is lenient: base64 ignores characters outside its alphabet, so a NUL,
        "AAAA" or other garbage decodes to no tokens at all, which DRF reads as page 1 (a
        client would silently loop over the first page). Our `next` links always carry a
        position `p`, optionally an offset `o`; nothing else is a cursor."""
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is None:
            return None
        try:
            querystring = b64decode(encoded.encode("ascii"), validate=True).decode("ascii")
            tokens = parse.parse_qs(querystring, keep_blank_values=True, strict_parsing=True)
            if not tokens.keys() <= {"o", "r", "p"} or "p" not in tokens or any(len(v) != 1 for v in tokens.values()):
                raise ValueError("not one of our cursors")
            offset = int(tokens.get("o", ["0"])[0])
            reverse = tokens.get("r", ["0"])[0]
            if not 0 <= offset <= self.offset_cutoff or reverse not in ("0", "1"):
                raise ValueError("out of range")
        except (UnicodeError, ValueError, binascii.Error):
            raise self._invalid() from None
        position = tokens["p"][0]
        self._check_position(position)
        return DrfCursor(offset=offset, reverse=reverse == "1", position=position)

    def _check_position(self, position: str) -> None:
        # A cursor is client input: its position goes into `WHERE <ordering field> > position`.
        # Check it against the field first, so that a forged cursor ("abc" for a number, or a
        # NUL that PostgreSQL text cannot hold) is a 400 rather than a database error and a 500.
        if "\x00" in position:
            raise self._invalid()
        name = self.ordering[0].lstrip("-")
        try:
            field = self._model._meta.pk if name == "pk" else self._model._meta.get_field(name)
        except FieldDoesNotExist:
            return
        try:
            field.to_python(position)
        except DjangoValidationError:
            raise self._invalid() from None

    def get_paginated_response(self, data):
        return Response({"results": data, "next": self.get_next_link()})

    def get_paginated_response_schema(self, schema):
        return {
            "type": "object",
            "required": ["results", "next"],
            "properties": {"results": schema, "next": {"type": "string", "format": "uri", "nullable": True}},
        }


def paginated(serializer_class: type[serializers.Serializer]) -> serializers.Serializer:
    """The documented shape of a list answer (for @extend_schema on APIViews)."""
    return inline_serializer(
        name=f"Paginated{serializer_class.__name__.removesuffix('Out')}List",
        fields={"results": serializer_class(many=True), "next": serializers.URLField(allow_null=True)},
    )
