"""Writes to the model catalog: ops' corrections (audited), imports of a provider's model list,
and the retirement notices (webhooks `model.retiring`, `model.retired`)."""

import math
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction

from access.actors import Actor
from access.models import Role
from access.permissions import require_role
from audit.services import audit_record
from core import events
from core.errors import InvalidContent
from modelcatalog import clock
from modelcatalog.models import ModelOverride, RetirementNotice
from modelcatalog.selectors import (
    BEDROCK,
    DATE_FACTS,
    FACTS,
    INT_FACTS,
    PRICE_FACTS,
    ModelInfo,
    catalog_invalidate,
    is_bedrock_id,
    model_exact,
    model_list,
    normalise,
    retirement_warning,
)

NAME_MAX = 200
PROVIDER_MAX = 50
URL_MAX = 2000
ALIASES_MAX = 50


def _check_name(field: str, value: Any, limit: int) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= limit or not value.isprintable() or "/" in value:
        raise InvalidContent(f"The {field} is not valid.", {field: [f"1 to {limit} printable characters, no '/'."]})
    return value


def _check_fact(fact: str, value: Any) -> Any:
    """One fact as PUT gives it, checked; None clears it back to unknown."""
    if value is None:
        return [] if fact == "aliases" else None
    if fact in INT_FACTS:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 100_000_000:
            raise InvalidContent(f"{fact} is not valid.", {fact: ["A whole number of tokens, 1 to 100000000."]})
        return value
    if fact in PRICE_FACTS:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise InvalidContent(f"{fact} is not valid.", {fact: ["USD per million tokens, a number >= 0."]})
        if not 0 <= value <= 100_000:
            raise InvalidContent(f"{fact} is not valid.", {fact: ["USD per million tokens, 0 to 100000."]})
        return float(value)
    if fact in DATE_FACTS:
        return _check_date(fact, value)
    if fact == "replacement":
        return _check_name(fact, value, NAME_MAX)
    if fact == "aliases":
        if not isinstance(value, list) or len(value) > ALIASES_MAX:
            raise InvalidContent("aliases is not valid.", {fact: [f"A list of at most {ALIASES_MAX} names."]})
        return [_check_name(fact, alias, NAME_MAX) for alias in value]
    raise AssertionError(fact)


def _check_date(fact: str, value: Any) -> str:
    try:
        if isinstance(value, str) and len(value) == 10:
            return date.fromisoformat(value).isoformat()
    except ValueError:
        pass
    raise InvalidContent(f"{fact} is not a date.", {fact: ["YYYY-MM-DD, or null."]})


def _check_source(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or set(value) - {"url", "read"}:
        raise InvalidContent("source is not valid.", {"source": ['{"url": ..., "read": "YYYY-MM-DD"}.']})
    url, read = value.get("url"), value.get("read")
    if (
        not isinstance(url, str)
        or not 1 <= len(url) <= URL_MAX
        or not url.isprintable()
        or not url.startswith(("https://", "http://", "file:"))
    ):
        raise InvalidContent(
            "source.url is not valid.",
            {"source": [f"url: an http(s) address or file:NAME, at most {URL_MAX} printable characters."]},
        )
    try:
        read = date.fromisoformat(read).isoformat() if isinstance(read, str) and len(read) == 10 else None
    except ValueError:
        read = None
    if read is None:
        raise InvalidContent("source.read is not a date.", {"source": ["read: YYYY-MM-DD, when the page was read."]})
    return {"url": url, "read": read}


def model_put(
    *, provider: Any, name: Any, facts: Any, source: Any, actor: Actor, reason: Any, partial: bool = True
) -> ModelInfo:
    """Set some facts of a model (or add a model the catalog lacks), with the `source` they
    were read from: ops only, audited with the reason and the facts before and after. Facts not
    given keep their value; a fact given as null becomes unknown."""
    require_role(actor, Role.OPS, "Changing the model catalog")
    provider = _check_name("provider", provider, PROVIDER_MAX)
    name = _check_name("name", name, NAME_MAX)
    if not isinstance(reason, str) or not reason.strip() or len(reason) > 2000:
        raise InvalidContent("A reason is required.", {"reason": ["1 to 2000 characters."]})
    if not isinstance(facts, dict) or not facts:
        raise InvalidContent("Give at least one fact.", {"facts": [f"Any of {', '.join(FACTS)}."]})
    unknown = sorted(set(facts) - set(FACTS))
    if unknown:
        raise InvalidContent("Unknown facts.", {fact: ["Unknown field."] for fact in unknown[:20]})
    checked = {fact: _check_fact(fact, value) for fact, value in facts.items()}
    if checked.get("replacement") == name:
        raise InvalidContent("A model cannot replace itself.", {"replacement": ["Name another model."]})
    src = _check_source(source)
    with transaction.atomic():
        before = model_exact(provider=provider, name=name)
        row, _ = ModelOverride.objects.select_for_update().get_or_create(
            provider=provider, name=name, defaults={"updated_by": actor.name}
        )
        row.facts = {**row.facts, **checked}
        row.sources = {**row.sources, **{fact: src for fact in checked}}
        row.updated_by = actor.name
        row.save(update_fields=["facts", "sources", "updated_by", "updated_at"])
        audit_record(
            actor=actor,
            action="model.updated",
            target_type="model",
            target=f"{provider}/{name}",
            reason=reason.strip(),
            data={
                "facts": checked,
                "before": {fact: (before.as_dict().get(fact) if before else None) for fact in checked},
                "source": src,
            },
        )
        transaction.on_commit(catalog_invalidate)
    catalog_invalidate()
    found = model_exact(provider=provider, name=name)
    assert found is not None
    return found


# --- imports ------------------------------------------------------------------------------------


def import_entries(data: Any, *, provider: str | None) -> list[dict[str, Any]]:
    """A provider's model list as {"provider", "name", "facts"} entries:

    * OpenAI's `GET /v1/models` ({"object": "list", "data": [{"id", "owned_by", "shutdown_date"}]}):
      provider "openai", `shutdown_date` -> retires_at;
    * Anthropic's `GET /v1/models` ({"data": [{"type": "model", "id", ...}]}): provider
      "anthropic"; a `retires_at`/`deprecated_at` an entry carries is taken;
    * Amazon Bedrock's `ListFoundationModels` ({"modelSummaries": [{"modelId", "modelLifecycle":
      {"status", "legacyTime", "endOfLifeTime"}}]}, as `aws bedrock list-foundation-models`
      prints it): Bedrock's own dates, endOfLifeTime -> retires_at, legacyTime -> deprecated_at,
      for `anthropic.` ids as provider "bedrock" entries (never the Claude API's model) and for
      `amazon.` ids as provider "amazon"; rows without a date are skipped;
    * a team's file ({"models": [{"provider", "name", <facts>}]}).
    400 for anything else."""
    if not isinstance(data, dict):
        raise InvalidContent("Not a model list.", {"file": ["A JSON object."]})
    if isinstance(data.get("models"), list):
        return _team_entries(data["models"], provider=provider)
    if isinstance(data.get("modelSummaries"), list):
        return _bedrock_entries(data["modelSummaries"])
    rows = data.get("data")
    if not isinstance(rows, list):
        raise InvalidContent("Not a model list.", {"file": ['{"data": [...]} or {"models": [...]}.']})
    return _provider_entries(data, rows, provider=provider)


def _team_entries(rows: list[Any], *, provider: str | None) -> list[dict[str, Any]]:
    entries = []
    for row in rows:
        if not isinstance(row, dict):
            raise InvalidContent("Not a model list.", {"models": ["Each entry is an object."]})
        given = {k: v for k, v in row.items() if k in FACTS}
        entries.append({"provider": row.get("provider") or provider, "name": row.get("name"), "facts": given})
    return entries


def _aws_date(value: Any) -> str | None:
    """An AWS timestamp as the CLI prints it (ISO 8601) or as epoch seconds, as YYYY-MM-DD (UTC)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, tz=UTC).date().isoformat()
    if isinstance(value, str) and len(value) >= 10:
        return value[:10]
    return None


def _bedrock_entries(rows: list[Any]) -> list[dict[str, Any]]:
    entries = []
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("modelId"), str):
            raise InvalidContent("Not a model list.", {"modelSummaries": ["Each entry is an object with a modelId."]})
        model_id = row["modelId"]
        given = row.get("modelLifecycle")
        lifecycle: dict[str, Any] = given if isinstance(given, dict) else {}
        facts = {
            fact: day
            for fact, key in (("retires_at", "endOfLifeTime"), ("deprecated_at", "legacyTime"))
            if (day := _aws_date(lifecycle.get(key)))
        }
        if not facts:
            continue
        if is_bedrock_id(model_id):
            entries.append({"provider": BEDROCK, "name": model_id, "facts": facts})
        elif model_id.startswith("amazon."):
            entries.append({"provider": "amazon", "name": normalise(model_id), "facts": facts})
    return entries


def _provider_entries(data: dict[str, Any], rows: list[Any], *, provider: str | None) -> list[dict[str, Any]]:
    is_openai = data.get("object") == "list" or any(isinstance(r, dict) and "owned_by" in r for r in rows)
    entries = []
    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("id"), str):
            raise InvalidContent("Not a model list.", {"data": ["Each entry is an object with an id."]})
        facts: dict[str, Any] = {}
        if is_openai and row.get("shutdown_date"):
            facts["retires_at"] = row["shutdown_date"]
        for fact in ("retires_at", "deprecated_at", "replacement"):
            if row.get(fact):
                facts[fact] = row[fact]
        name = provider or ("openai" if is_openai else "anthropic")
        entries.append({"provider": name, "name": row["id"], "facts": facts})
    return entries


def models_import(
    *, data: Any, source_url: str, actor: Actor, reason: str, provider: str | None = None, dry_run: bool = False
) -> list[dict[str, Any]]:
    """Apply a provider's model list (import_entries): every model whose facts differ from the
    catalog's is set with model_put, the file as its source (read today). Models the list names
    with no fact are added only when the catalog lacks them. Returns the changes, applied
    unless `dry_run`."""
    entries = import_entries(data, provider=provider)
    changes = []
    today = clock.now().date().isoformat()
    known = {(m.provider, m.name): m for m in model_list()}
    for entry in entries:
        provider_name, name = entry["provider"], entry["name"]
        current = known.get((provider_name, name))
        facts = {
            fact: _check_fact(fact, value)
            for fact, value in entry["facts"].items()
            if current is None or (current.as_dict().get(fact) != value)
        }
        if current is not None and not facts:
            continue
        if current is None and not facts:
            facts = {"aliases": []}
        changes.append({"provider": provider_name, "name": name, "facts": facts, "new": current is None})
    if not dry_run:
        with transaction.atomic():
            for change in changes:
                model_put(
                    provider=change["provider"],
                    name=change["name"],
                    facts=change["facts"],
                    source={"url": source_url, "read": today},
                    actor=actor,
                    reason=reason,
                )
    return changes


# --- retirement notices -------------------------------------------------------------------------

# The thresholds a retiring model passes, least urgent first: entering the warning window, a
# week left, a day left, and the date itself.
THRESHOLDS = ("window", "7d", "1d", "retired")


def _passed(info: ModelInfo, warning: timedelta) -> list[str]:
    instant = info.retirement
    if instant is None:
        return []
    left = instant - clock.now()
    passed = []
    if left <= warning:
        passed.append("window")
    if left <= timedelta(days=7):
        passed.append("7d")
    if left <= timedelta(days=1):
        passed.append("1d")
    if left <= timedelta(0):
        passed.append("retired")
    return passed


def retirement_notices_send() -> list[tuple[str, str]]:
    """Emit `model.retiring` (entering MODEL_RETIREMENT_WARNING, then 7 days and 1 day before)
    and `model.retired` (on the date) once per model, date and threshold; returns (model,
    threshold) for each event emitted. Idempotent and safe to run from two beat processes at
    once: each threshold is claimed by inserting its RetirementNotice row in the transaction
    that emits its event, and the unique constraint lets one insert commit; the other waits
    for it, fails, and emits nothing. Thresholds passed together (a date learnt late) are all
    recorded and announced by one event, the most urgent. Models retired longer ago than the
    warning window when first seen are recorded without an event (no news)."""
    warning = retirement_warning()
    sent = []
    for info in model_list():
        passed = _passed(info, warning)
        if not passed:
            continue
        assert info.retires_at is not None
        done = set(
            RetirementNotice.objects.filter(
                provider=info.provider, name=info.name, retires_at=info.retires_at
            ).values_list("threshold", flat=True)
        )
        new = [t for t in passed if t not in done]
        if not new:
            continue
        try:
            with transaction.atomic():
                for threshold in new:
                    RetirementNotice.objects.create(
                        provider=info.provider, name=info.name, retires_at=info.retires_at, threshold=threshold
                    )
                stale = info.retirement is not None and clock.now() - info.retirement > warning
                if stale:
                    continue
                threshold = new[-1]
                left = (info.retirement - clock.now()) if info.retirement else timedelta(0)
                events.emit(
                    "model.retired" if threshold == "retired" else "model.retiring",
                    provider=info.provider,
                    model=info.name,
                    retires_at=info.retires_at.isoformat(),
                    replacement=info.replacement,
                    threshold=threshold,
                    days_left=max(0, math.ceil(left.total_seconds() / 86400)),
                )
                sent.append((info.name, threshold))
        except IntegrityError:
            continue  # another sweep claimed it first and emitted the event
    return sent
