"""Moved to core.errors (the errors are project-wide). This alias keeps code written against
the old path importing while it is updated; it goes away once nothing imports it."""

from core.errors import (  # noqa: F401
    Conflict,
    DomainError,
    Forbidden,
    InvalidContent,
    NotFound,
    SessionEnded,
    VersionRevoked,
)
