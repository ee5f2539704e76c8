"""The catalog's clock: what "now" is for every retirement rule.

`settings.MODEL_CLOCK_NOW` (an aware datetime, or an ISO 8601 string) when set, else
timezone.now(). Tests set it (override_settings or the `settings` fixture) instead of sleeping;
an operator may set it in staging to rehearse a retirement date."""

from datetime import datetime

from django.conf import settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime


def now() -> datetime:
    fixed = getattr(settings, "MODEL_CLOCK_NOW", None)
    if fixed is None or fixed == "":
        return timezone.now()
    if isinstance(fixed, str):
        parsed = parse_datetime(fixed)
        if parsed is None:
            raise ValueError(f"MODEL_CLOCK_NOW is not an ISO 8601 datetime: {fixed!r}")
        fixed = parsed
    if timezone.is_naive(fixed):
        raise ValueError("MODEL_CLOCK_NOW must be timezone-aware.")
    return fixed
