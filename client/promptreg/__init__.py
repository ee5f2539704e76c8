"""Client for the prompt registry with session pinning.

from promptreg import Registry

registry = Registry("http://127.0.0.1:8000", api_key)
with registry.start_session("refunds", label="production") as session:
    prompt = session.bundle.system_prompt   # fetched once: a pinned bundle never changes
"""

from promptreg._core import Bundle, OfflineWarning, Retry
from promptreg.aio import AsyncPinnedSession, AsyncRegistry
from promptreg.errors import (
    Conflict,
    IntegrityError,
    InvalidRequest,
    ModelRetired,
    NotAuthenticated,
    NotFound,
    PermissionDenied,
    RegistryError,
    SessionEnded,
    Throttled,
    Unavailable,
    VersionRevoked,
)
from promptreg.step import Step, ToolCall
from promptreg.sync import PinnedSession, Registry

__version__ = "0.1.0"

__all__ = [
    "AsyncPinnedSession",
    "AsyncRegistry",
    "Bundle",
    "Conflict",
    "IntegrityError",
    "InvalidRequest",
    "ModelRetired",
    "NotAuthenticated",
    "NotFound",
    "OfflineWarning",
    "PermissionDenied",
    "PinnedSession",
    "Registry",
    "RegistryError",
    "Retry",
    "SessionEnded",
    "Step",
    "Throttled",
    "ToolCall",
    "Unavailable",
    "VersionRevoked",
]
