"""Tier-1 micro-compaction: the implementation lives in the Python client, `promptreg.compaction`
(client/promptreg/compaction.py), so that the registry's endpoint and agents running it
in-process are the same code, not two copies. The service installs the client package
(`make`'s install step, the Dockerfile); this module only re-exports it for the service's imports."""

from promptreg.compaction import (
    DEFAULT_POLICY,
    CompactionError,
    CompactionResult,
    Policy,
    compact,
    policy_errors,
    policy_from_content,
)

__all__ = [
    "DEFAULT_POLICY",
    "CompactionError",
    "CompactionResult",
    "Policy",
    "compact",
    "policy_errors",
    "policy_from_content",
]
