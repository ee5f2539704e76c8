"""What every REST view of api/views/ shares, in one public module: the base view, the body's
validation, cursor pages, ETags and If-Match, and the strict serializer fields every In schema
is built from. No module of api/ reaches into another's private names; what two subjects
share lives here."""

import re
from collections.abc import Mapping
from typing import Any

from django.http import HttpResponse
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.pagination import Cursor
from core.errors import InvalidContent, NotFound
from registry import selectors as registry_selectors


class BaseApi(APIView):
    """Base of every view here: refuses path values no row can hold before any query runs."""

    def initial(self, request: Request, *args, **kwargs) -> None:
        super().initial(request, *args, **kwargs)  # authentication and permissions first
        # A NUL in a name (/bundles/a%00b/) cannot be stored in PostgreSQL text, so nothing can
        # exist at that address; comparing with it would be a database error, i.e. a 500.
        if any(isinstance(value, str) and "\x00" in value for value in kwargs.values()):
            raise NotFound("Nothing exists at this address.")


def valid(serializer_class, request: Request) -> dict:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def not_modified(content_hash: str) -> HttpResponse:
    response = HttpResponse(status=304)
    response["ETag"] = f'"{content_hash}"'
    return response


def paginate(
    view: APIView, request: Request, queryset, serializer_class, ordering: str, max_page_size: int | None = None
) -> Response:
    paginator = Cursor()
    paginator.ordering = ordering
    if max_page_size is not None:
        paginator.page_size = paginator.max_page_size = max_page_size
    page = paginator.paginate_queryset(queryset, request, view=view)
    return paginator.get_paginated_response(serializer_class(page, many=True).data)


_ETAG = re.compile(r'^(?:W/)?"rev-([1-9][0-9]{0,9})"$')


def if_match(request: Request) -> int | None:
    """If-Match as the label services take it (see etag_revision); None without the header."""
    header = request.headers.get("If-Match")
    return None if header is None else etag_revision(header)


def etag_revision(header: str) -> int:
    """0 for `*` (the label must exist), or the revision our ETag names ("rev-N"). A tag we
    never issued matches nothing: -1."""
    tags = [tag.strip() for tag in header.split(",") if tag.strip()]
    if "*" in tags:
        return 0
    for tag in tags:
        found = _ETAG.match(tag)
        if found:
            return int(found.group(1))
    return -1


def version_or_targets(bundle, data: dict) -> tuple[Any, Any]:
    """`version` alone, or `targets` as (version, weight) pairs; exactly one of them."""
    if ("version" in data) == ("targets" in data):
        raise InvalidContent("Give version or targets.", {"version": ["Give either version or targets, not both."]})
    if "version" in data:
        return registry_selectors.version_get(bundle=bundle, number=data["version"]), None
    return None, [
        (registry_selectors.version_get(bundle=bundle, number=t["version"]), t["weight"]) for t in data["targets"]
    ]


class StrictCharField(serializers.CharField):
    """A JSON string and nothing else (DRF's CharField would turn 12 into "12")."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class IdentifierField(StrictCharField):
    """A name or id, taken exactly as sent: " refunds" is not "refunds", and two external ids
    differing only in spaces must not collide on the same session."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer and nothing else (DRF's would take "5", 5.0 and true)."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """true or false and nothing else (DRF's would take "yes", 1 and "on")."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class StrictInput(serializers.Serializer):
    """Refuses unknown fields, so that a typo ("lable") is an error rather than ignored.

    Unknown fields are reported together with the known fields' errors, so that one
    round trip shows every problem of a request."""

    def to_internal_value(self, data: Any) -> Any:
        unknown: dict[str, list[str]] = {}
        if isinstance(data, Mapping):
            unknown = {name: ["Unknown field."] for name in sorted(set(data) - set(self.fields))}
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if unknown and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**exc.detail, **unknown}) from None
            raise
        if unknown:
            raise serializers.ValidationError(unknown)
        return value
