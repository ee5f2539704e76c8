"""The model providers the registry itself may call (`EVAL_PROVIDERS`, docs/operations.md): for
runs made by the worker and for the admin's playground. None by default: the registry calls no
model unless an operator names one.

    EVAL_PROVIDERS='[{"name": "anthropic", "format": "anthropic", "key_env": "ANTHROPIC_API_KEY"},
                     {"name": "gateway", "format": "openai-chat", "base_url": "https://llm.example/v1",
                      "key_env": "GATEWAY_KEY", "model": "gpt-6-luna"}]'

`key_env` names the environment variable that holds the key: the key is read from the process's
environment when a call is made, and is never stored in the database, a job, a log line or an
answer. Read by config/settings.py (`from_environment`, which refuses a bad value at start-up),
so it imports nothing of Django's settings or models.

EVAL_DAILY_BUDGET_USD (default 5): what those calls may spend per UTC day, all providers
together, by the model catalog's prices (evals.jobs). EVAL_CALL_TIMEOUT (default 60): seconds
one call may take (then that reply is an `error`)."""

import importlib.util
import json
import os
import re
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from evals.provider_calls import FORMATS

NAME_RE = r"^[a-z0-9][a-z0-9._-]{0,39}$"
ENV_RE = r"^[A-Z_][A-Z0-9_]{0,127}$"
KEYS = {"name", "format", "base_url", "key_env", "model"}
# The SDK each format is sent with (requirements.in installs all four; an environment installed
# some other way may lack one, and start-up then says which).
SDKS = {
    "anthropic": "anthropic",
    "openai-chat": "openai",
    "openai-responses": "openai",
    "bedrock-converse": "boto3",
    "gemini": "google.genai",
}


@dataclass(frozen=True)
class Provider:
    name: str
    format: str  # the turn call's format, which also picks the SDK (evals.provider_calls)
    base_url: str | None  # None: the SDK's own endpoint
    key_env: str | None  # the environment variable holding the key; None: the SDK's own variable
    model: str | None  # instead of the version's model; None: the version's

    def api_key(self) -> str | None:
        """The key, read from the environment now (never kept anywhere else)."""
        return os.environ.get(self.key_env) if self.key_env else None

    def key_missing(self) -> bool:
        return bool(self.key_env) and not os.environ.get(self.key_env or "")

    def public(self) -> dict[str, Any]:
        """What may be shown: everything but the key (the variable's name is not secret)."""
        return {"name": self.name, "format": self.format, "model": self.model, "key_env": self.key_env}


def _one(index: int, entry: Any) -> Provider:
    where = f"EVAL_PROVIDERS[{index}]"
    if not isinstance(entry, dict) or set(entry) - KEYS:
        raise ValueError(f"{where}: an object with {', '.join(sorted(KEYS))}.")
    name, fmt = entry.get("name"), entry.get("format")
    if not isinstance(name, str) or not re.fullmatch(NAME_RE, name):
        raise ValueError(f"{where}.name: must match {NAME_RE}.")
    if fmt not in FORMATS:
        raise ValueError(f"{where}.format: one of {', '.join(FORMATS)}.")
    base_url, key_env, model = entry.get("base_url"), entry.get("key_env"), entry.get("model")
    if base_url is not None and (not isinstance(base_url, str) or not re.match(r"^https?://[^\s]+$", base_url)):
        raise ValueError(f"{where}.base_url: an http(s) URL.")
    if key_env is not None and (not isinstance(key_env, str) or not re.fullmatch(ENV_RE, key_env)):
        raise ValueError(f"{where}.key_env: the name of an environment variable (A-Z, 0-9, _).")
    if model is not None and (not isinstance(model, str) or not 0 < len(model) <= 200):
        raise ValueError(f"{where}.model: a model name of 1 to 200 characters.")
    if not _installed(SDKS[fmt]):
        raise ValueError(f"{where}.format: {fmt} is sent with the {SDKS[fmt]} SDK, which is not installed.")
    return Provider(name, fmt, base_url, key_env, model)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package (google) missing
        return False


def parse(raw: str) -> dict[str, Provider]:
    """EVAL_PROVIDERS' value (a JSON list; empty: none) by name, or ValueError saying what is wrong."""
    if not raw.strip():
        return {}
    try:
        entries = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"EVAL_PROVIDERS is not JSON: {exc}") from None
    if not isinstance(entries, list) or len(entries) > 20:
        raise ValueError("EVAL_PROVIDERS: a JSON list of at most 20 providers.")
    providers = [_one(i, e) for i, e in enumerate(entries)]
    names = [p.name for p in providers]
    if len(set(names)) != len(names):
        raise ValueError("EVAL_PROVIDERS: each name once.")
    return {p.name: p for p in providers}


def from_environment(environ: Any) -> tuple[dict[str, Provider], float, int]:
    """(EVAL_PROVIDERS, EVAL_DAILY_BUDGET_USD, EVAL_CALL_TIMEOUT) from the environment, or
    ImproperlyConfigured saying which value is wrong."""
    try:
        providers = parse(environ.get("EVAL_PROVIDERS", ""))
    except ValueError as exc:
        raise ImproperlyConfigured(str(exc)) from None
    try:
        budget = float(environ.get("EVAL_DAILY_BUDGET_USD") or "5")
        timeout = int(environ.get("EVAL_CALL_TIMEOUT") or "60")
    except ValueError:
        raise ImproperlyConfigured("EVAL_DAILY_BUDGET_USD must be a number, EVAL_CALL_TIMEOUT an integer.") from None
    if not 0 <= budget <= 1_000_000:
        raise ImproperlyConfigured("EVAL_DAILY_BUDGET_USD must be between 0 and 1000000.")
    if not 1 <= timeout <= 600:
        raise ImproperlyConfigured("EVAL_CALL_TIMEOUT must be between 1 and 600 seconds.")
    return providers, budget, timeout
