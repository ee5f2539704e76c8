from typing import Any

from django.conf import settings
from django.core.checks import Error, register

from access.ratelimit import parse_rate


@register()
def check_rates(app_configs: Any, **kwargs: Any) -> list[Error]:
    """A malformed rate must stop the process at start, not fail every request."""
    rates = {f"API_THROTTLE_RATES[{k!r}]": v for k, v in settings.API_THROTTLE_RATES.items()}
    for name in ("ADMIN_LOGIN_RATE", "ADMIN_LOGIN_ACCOUNT_RATE", "AUTH_FAILURE_RATE"):
        rates[name] = getattr(settings, name)
    errors: list[Error] = []
    for name, rate in rates.items():
        if not rate:
            continue
        try:
            limit, period = parse_rate(rate)
            if limit < 1 or period < 1:
                raise ValueError
        except (ValueError, KeyError, IndexError):
            errors.append(Error(f"{name} is {rate!r}; write it like '600/m' (per s, m, h or d).", id="access.E001"))
    return errors
