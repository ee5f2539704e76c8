from django.core.exceptions import FieldDoesNotExist, ValidationError
from drf_spectacular.utils import inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.pagination import CursorPagination
from rest_framework.response import Response


class Cursor(CursorPagination):
    """The contract's list shape: {"results": [...], "next": url-or-null}, paged by ?cursor=."""

    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 200
    ordering = "pk"
    invalid_cursor_message = "The cursor is not valid; follow the `next` link of the previous page."

    def paginate_queryset(self, queryset, request, view=None):
        self._model = queryset.model
        return super().paginate_queryset(queryset, request, view=view)

    def decode_cursor(self, request):
        cursor = super().decode_cursor(request)
        if cursor is not None and cursor.position is not None:
            self._check_position(cursor.position)
        return cursor

    def _check_position(self, position: str) -> None:
        # A cursor is client input: its position goes into `WHERE <ordering field> > position`.
        # Check it against the field first, so that a forged cursor ("abc" for a number, or a
        # NUL that PostgreSQL text cannot hold) is a 404 rather than a database error and a 500.
        if "\x00" in position:
            raise NotFound(self.invalid_cursor_message)
        name = self.ordering[0].lstrip("-")
        try:
            field = self._model._meta.pk if name == "pk" else self._model._meta.get_field(name)
        except FieldDoesNotExist:
            return
        try:
            field.to_python(position)
        except ValidationError:
            raise NotFound(self.invalid_cursor_message) from None

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
