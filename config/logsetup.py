"""settings.LOGGING, built apart from settings.py (which stays a list of environment reads) and
from config.logformat (whose imports need Django's apps, which settings cannot)."""

from typing import Any


def logging_config(log_format: str, *, level: str) -> dict[str, Any]:
    """settings.LOGGING: one console handler in `log_format` ("json": JsonFormatter above)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "default": {"()": "config.logformat.JsonFormatter"}
            if log_format == "json"
            else {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}
        },
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "default"}},
        "root": {"handlers": ["console"], "level": level},
        # Parts of the MCP SDK log whole messages at DEBUG (its SSE transport; a protocol is such a
        # message): whatever LOG_LEVEL says, its loggers stay at WARNING so no protocol text is logged.
        "loggers": {"django.db.backends": {"level": "WARNING"}, "mcp": {"level": "WARNING"}},
    }
