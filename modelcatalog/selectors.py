"""Reads of the model catalog: the shipped data (modelcatalog.data) with ops' overrides
(modelcatalog.models.ModelOverride) laid over it, by model name or alias.

The catalog is read on hot paths (every pinned fetch and turn asks whether its model retired),
so the merged table is kept per process for MODEL_CATALOG_CACHE_SECONDS and rebuilt after
that; a write in this process (modelcatalog.services) drops it at once. Another process sees
an override within that many seconds."""

import re
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import Any

from django.conf import settings

from core.errors import InvalidContent
from modelcatalog import clock
from modelcatalog.data import MODELS
from modelcatalog.models import ModelOverride

# The facts a model has, in the order the API lists them.
FACTS = (
    "aliases",
    "context_window",
    "output_limit",
    "cache_floor_tokens",
    "input_per_mtok",
    "output_per_mtok",
    "cache_read_per_mtok",
    "cache_write_per_mtok",
    "deprecated_at",
    "retires_at",
    "replacement",
)
INT_FACTS = ("context_window", "output_limit", "cache_floor_tokens")
PRICE_FACTS = ("input_per_mtok", "output_per_mtok", "cache_read_per_mtok", "cache_write_per_mtok")
DATE_FACTS = ("deprecated_at", "retires_at")


@dataclass(frozen=True)
class Source:
    url: str
    read: str  # the date the page was read, YYYY-MM-DD

    def as_dict(self) -> dict[str, str]:
        return {"url": self.url, "read": self.read}


@dataclass(frozen=True)
class ModelInfo:
    """One model as the catalog knows it. Prices in USD per million tokens; None = unknown.
    `retires_at`: the day requests naming it start failing (00:00 UTC); `sources`: fact ->
    where it was read (a fact without its own source has the entry's "*" source)."""

    provider: str
    name: str
    aliases: tuple[str, ...] = ()
    context_window: int | None = None
    output_limit: int | None = None
    cache_floor_tokens: int | None = None
    input_per_mtok: float | None = None
    output_per_mtok: float | None = None
    cache_read_per_mtok: float | None = None
    cache_write_per_mtok: float | None = None
    deprecated_at: date | None = None
    retires_at: date | None = None
    replacement: str | None = None
    sources: dict[str, Source] = field(default_factory=dict)
    overridden: bool = False  # ops changed or added it (modelcatalog.models.ModelOverride)
    # The instant it retires, 00:00 UTC on `retires_at` (computed once: every pinned call asks).
    retirement: datetime | None = field(init=False, default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.retires_at is not None:
            day = self.retires_at
            object.__setattr__(self, "retirement", datetime(day.year, day.month, day.day, tzinfo=UTC))

    def retired(self, at: datetime | None = None) -> bool:
        instant = self.retirement
        return instant is not None and (at or clock.now()) >= instant

    def retiring_within(self, window: timedelta, at: datetime | None = None) -> bool:
        """Retires within `window` from `at` (or retired already)."""
        instant = self.retirement
        return instant is not None and instant <= (at or clock.now()) + window

    def source_of(self, fact: str) -> Source | None:
        return self.sources.get(fact) or self.sources.get("*")

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"provider": self.provider, "name": self.name, "aliases": list(self.aliases)}
        for fact in FACTS[1:]:
            value = getattr(self, fact)
            out[fact] = value.isoformat() if isinstance(value, date) else value
        out["retired"] = self.retired()
        out["sources"] = {
            fact: source.as_dict()
            for fact in FACTS
            if (source := self.source_of(fact)) is not None and _has(self, fact)
        }
        out["overridden"] = self.overridden
        return out


def _has(info: ModelInfo, fact: str) -> bool:
    value = getattr(info, fact)
    return bool(value) if fact == "aliases" else value is not None


# A pinned name as providers and clouds spell it: "models/gemini-2.5-flash" (Gemini),
# "us.anthropic.claude-sonnet-4-20250514-v1:0" (a Bedrock inference profile), "anthropic/..."
# (gateways). All are matched on the bare model id.
_ARN = r"(?:arn:aws[a-z-]*:bedrock:[^/]*/)?"
_REGION = r"(?:(?:us|eu|apac|jp|au|ca|us-gov|global)\.)?"  # a cross-region inference profile
_PREFIX = re.compile(rf"^{_ARN}(?:models/|[a-z]+/)?{_REGION}(?:anthropic\.|amazon\.|openai\.|google\.)?")
_BEDROCK_SUFFIX = re.compile(r"-v\d+(?::\d+)?$")
# A Bedrock id of an Anthropic model: "anthropic.claude-...", a region's inference profile
# ("us.anthropic..."), a gateway's "bedrock/anthropic..." or an ARN naming either.
_BEDROCK_ANTHROPIC = re.compile(rf"^{_ARN}(?:[a-z]+/)?{_REGION}anthropic\.")


@lru_cache(maxsize=4096)
def normalise(name: str) -> str:
    """The bare, lower-case model id a pinned name refers to (kept: every pinned call asks)."""
    bare = _PREFIX.sub("", name.strip().lower())
    return _BEDROCK_SUFFIX.sub("", bare)


@lru_cache(maxsize=4096)
def is_bedrock_id(name: str) -> bool:
    """Whether `name` is an Amazon Bedrock id of an Anthropic model, which Bedrock retires on a
    schedule of its own (data.py: provider "bedrock")."""
    return _BEDROCK_ANTHROPIC.match(name.strip().lower()) is not None


def _date(value: Any) -> date | None:
    if value is None or isinstance(value, date):
        return value
    return date.fromisoformat(str(value))


def _sources(raw: dict[str, Any]) -> dict[str, Source]:
    out = {}
    for fact, value in raw.items():
        if isinstance(value, tuple | list):
            out[fact] = Source(url=str(value[0]), read=str(value[1]))
        elif isinstance(value, dict):
            out[fact] = Source(url=str(value.get("url", "")), read=str(value.get("read", "")))
    return out


def _info(entry: dict[str, Any], *, overridden: bool = False) -> ModelInfo:
    return ModelInfo(
        provider=entry["provider"],
        name=entry["name"],
        aliases=tuple(entry.get("aliases") or ()),
        context_window=entry.get("context_window"),
        output_limit=entry.get("output_limit"),
        cache_floor_tokens=entry.get("cache_floor_tokens"),
        input_per_mtok=entry.get("input_per_mtok"),
        output_per_mtok=entry.get("output_per_mtok"),
        cache_read_per_mtok=entry.get("cache_read_per_mtok"),
        cache_write_per_mtok=entry.get("cache_write_per_mtok"),
        deprecated_at=_date(entry.get("deprecated_at")),
        retires_at=_date(entry.get("retires_at")),
        replacement=entry.get("replacement"),
        sources=_sources(entry.get("sources") or {}),
        overridden=overridden,
    )


def shipped() -> list[ModelInfo]:
    """The catalog as the code ships it, without overrides."""
    return [_info(entry) for entry in MODELS]


@dataclass(frozen=True)
class _Catalog:
    models: tuple[ModelInfo, ...]
    by_name: dict[str, ModelInfo]
    built: float
    ttl: float  # MODEL_CATALOG_CACHE_SECONDS when it was built
    # Bedrock ids: provider "bedrock" entries by bare id, and the views made of Anthropic's
    # entries for ids without one (made on first ask, kept with this catalog).
    bedrock: dict[str, ModelInfo] = field(default_factory=dict)
    bedrock_views: dict[str, ModelInfo] = field(default_factory=dict)
    # What ops changed (each override row's key and time): readers that keep something computed
    # from the catalog (adminui.selectors) key it by this, so an override shows at once.
    revision: str = ""


_lock = threading.Lock()
_cached: _Catalog | None = None


def catalog_invalidate() -> None:
    """Drop this process's merged catalog (a write calls it on commit)."""
    global _cached
    _cached = None


def _build() -> _Catalog:
    merged: dict[tuple[str, str], ModelInfo] = {(m.provider, m.name): m for m in shipped()}
    rows = list(ModelOverride.objects.order_by("provider", "name"))
    revision = ";".join(f"{r.provider}/{r.name}@{r.updated_at.isoformat()}" for r in rows)
    for row in rows:
        key = (row.provider, row.name)
        base = merged.get(key) or ModelInfo(provider=row.provider, name=row.name)
        changes: dict[str, Any] = {}
        for fact, value in (row.facts or {}).items():
            if fact not in FACTS:
                continue
            if fact == "aliases":
                value = tuple(value or ())
            elif fact in DATE_FACTS:
                value = _date(value)
            changes[fact] = value
        sources = {**base.sources, **_sources(row.sources or {})}
        merged[key] = replace(base, **changes, sources=sources, overridden=True)
    by_name: dict[str, ModelInfo] = {}
    own = [m for m in merged.values() if m.provider != BEDROCK]
    for info in own:  # names win over aliases: an alias never hides a model of that name
        for alias in info.aliases:
            by_name.setdefault(normalise(alias), info)
    for info in own:
        by_name[normalise(info.name)] = info
    bedrock: dict[str, ModelInfo] = {}
    for key, info in list(merged.items()):
        if info.provider == BEDROCK:
            merged[key] = info = _on_bedrock(by_name.get(normalise(info.name)), info)
            for name in (*info.aliases, info.name):
                bedrock.setdefault(normalise(name), info)
    models = tuple(sorted(merged.values(), key=lambda m: (m.provider, m.name)))
    return _Catalog(
        models=models,
        by_name=by_name,
        built=time.monotonic(),
        ttl=settings.MODEL_CATALOG_CACHE_SECONDS,
        bedrock=bedrock,
        revision=revision,
    )


BEDROCK = "bedrock"
_LIFECYCLE = ("deprecated_at", "retires_at", "replacement")


def _bedrock_view(base: ModelInfo) -> ModelInfo:
    """The Anthropic model `base` as a Bedrock id names it: its facts without the Claude API's
    dates (Bedrock keeps a schedule of its own)."""
    sources = {f: s for f in FACTS[1:] if f not in _LIFECYCLE and (s := base.source_of(f)) and _has(base, f)}
    return replace(
        base,
        provider=BEDROCK,
        aliases=(),
        deprecated_at=None,
        retires_at=None,
        replacement=None,
        sources=sources,
        overridden=False,
    )


def _on_bedrock(base: ModelInfo | None, own: ModelInfo) -> ModelInfo:
    """A Bedrock entry (`own`: its dates, where known) laid over its Anthropic model's view."""
    if base is None:
        return own
    view = _bedrock_view(base)
    changes = {f: getattr(own, f) for f in FACTS if _has(own, f)}
    mine = {f: s for f in FACTS if (s := own.source_of(f)) and _has(own, f)}
    return replace(view, name=own.name, **changes, sources={**view.sources, **mine}, overridden=own.overridden)


def _catalog() -> _Catalog:
    global _cached
    current = _cached
    if current is not None and time.monotonic() - current.built < current.ttl:
        return current
    with _lock:
        current = _cached
        if current is None or time.monotonic() - current.built >= current.ttl:
            current = _build()
            _cached = current
    return current


def model_list() -> list[ModelInfo]:
    """Every model the catalog knows, by provider and name."""
    return list(_catalog().models)


def model_get(*, provider: str | None, name: str) -> ModelInfo | None:
    """The model `name` (an alias or a provider's spelling resolved), or None. With
    `provider`, only that provider's model."""
    if not isinstance(name, str) or not name:
        return None
    catalog = _catalog()
    key = normalise(name)
    info = _bedrock(catalog, key) if is_bedrock_id(name) else catalog.by_name.get(key)
    if info is None or (provider is not None and info.provider != provider):
        return None
    return info


def _bedrock(catalog: _Catalog, key: str) -> ModelInfo | None:
    """A Bedrock id's entry: its own (data.py, ops), else the Anthropic model's facts without
    the Claude API's dates (made once per catalog: every pinned call asks)."""
    found = catalog.bedrock.get(key) or catalog.bedrock_views.get(key)
    if found is not None:
        return found
    base = catalog.by_name.get(key)
    if base is None or base.provider != "anthropic":
        return None
    # Kept only for a name or alias the catalog has, so the views stay as few as its entries.
    view = catalog.bedrock_views[key] = _bedrock_view(base)
    return view


def catalog_revision() -> str:
    """What ops changed in the catalog, as this process last read it ("" when nothing)."""
    return _catalog().revision


def model_exact(*, provider: str, name: str) -> ModelInfo | None:
    """The catalog's entry (provider, name), no alias resolution: what PUT addresses."""
    for info in _catalog().models:
        if info.provider == provider and info.name == name:
            return info
    return None


def content_model_name(model: Any) -> str | None:
    """The model a content document's `model` settings name (`name`, or `model`, `id`)."""
    if not isinstance(model, dict):
        return None
    for key in ("name", "model", "id"):
        value = model.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def content_model(model: Any) -> ModelInfo | None:
    """The catalog's entry for a content document's `model` settings."""
    name = content_model_name(model)
    return model_get(provider=None, name=name) if name else None


def retirement_warning() -> timedelta:
    """MODEL_RETIREMENT_WARNING: how long before its date a model counts as retiring."""
    warning: timedelta = settings.MODEL_RETIREMENT_WARNING
    return warning


_WINDOW = re.compile(r"^(\d{1,4})([dh])$")
WINDOW_MAX = timedelta(days=3650)


def parse_window(value: Any, *, field_name: str = "within") -> timedelta:
    """ "30d" or "12h" (at most 3650 days); 400 naming `field_name` otherwise."""
    found = _WINDOW.match(value) if isinstance(value, str) else None
    if found is None:
        raise InvalidContent(f"{field_name} is not a duration.", {field_name: ["A number of days or hours: 30d, 12h."]})
    amount, unit = int(found.group(1)), found.group(2)
    window = timedelta(days=amount) if unit == "d" else timedelta(hours=amount)
    if window > WINDOW_MAX:
        raise InvalidContent(f"{field_name} is too long.", {field_name: ["At most 3650d."]})
    return window


def models_retiring(*, within: timedelta) -> list[ModelInfo]:
    """The models whose retirement date is within `within` from now, or past, soonest first."""
    now = clock.now()
    found = [m for m in _catalog().models if m.retiring_within(within, now)]
    return sorted(found, key=lambda m: (m.retires_at or date.max, m.provider, m.name))


def cache_floor(model: Any) -> tuple[int | None, str]:
    """(the smallest prefix the provider caches, in tokens; where that was read) for a content
    document's `model` settings; (None, why) when the catalog does not know it."""
    name = content_model_name(model)
    if name is None:
        return None, "The pinned version names no model (content.model.name)."
    info = model_get(provider=None, name=name)
    if info is None:
        return None, f"Model {name!r} is not in the registry's model catalog (GET /api/v1/models/)."
    if info.cache_floor_tokens is None:
        return None, f"The model catalog does not know the cache floor of {info.name!r} (GET /api/v1/models/)."
    source = info.source_of("cache_floor_tokens")
    return info.cache_floor_tokens, f"{source.url}, read {source.read}" if source else "the model catalog"


def retirement_notice(model: Any) -> dict[str, str] | None:
    """The turn call's notice for a pinned model that retires within MODEL_RETIREMENT_WARNING
    (None otherwise): {"path": "model", "change": "retiring", "model", "retires_at",
    "replacement", "message"}."""
    info = content_model(model)
    if info is None or info.retires_at is None or not info.retiring_within(retirement_warning()):
        return None
    replacement = f"; its replacement is {info.replacement}" if info.replacement else ""
    return {
        "path": "model",
        "change": "retiring",
        "model": info.name,
        "retires_at": info.retires_at.isoformat(),
        "replacement": info.replacement or "",
        "message": f"The model {info.name} retires on {info.retires_at.isoformat()}{replacement}.",
    }
