"""The catalog's clock: what "now" is for every retirement rule.

`settings.MODEL_CLOCK_NOW` (an aware datetime, or an ISO 8601 string) when set, else
timezone.now(). Tests set it (override_settings or the `settings` fixture) instead of sleeping;
an operator may set it in staging to rehearse a retirement date."""

from datetime import datetime
from functools import lru_cache

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime


def now() -> datetime:
    fixed: object = getattr(settings, "MODEL_CLOCK_NOW", None)
    if fixed is None or fixed == "":
        return timezone.now()
    if isinstance(fixed, str):
        return _parsed(fixed)
    if not isinstance(fixed, datetime) or timezone.is_naive(fixed):
        raise ValueError("MODEL_CLOCK_NOW must be a timezone-aware datetime or an ISO 8601 string.")
    return fixed


@lru_cache(maxsize=16)
def _parsed(text: str) -> datetime:
    # Read on every pinned call: parsed once per value.
    parsed = parse_datetime(text)
    if parsed is None:
        raise ValueError(f"MODEL_CLOCK_NOW is not an ISO 8601 datetime: {text!r}")
    if timezone.is_naive(parsed):
        raise ValueError("MODEL_CLOCK_NOW must be timezone-aware.")
    return parsed
