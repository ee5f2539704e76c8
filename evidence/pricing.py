"""What a model's tokens cost: every price lookup of the evidence goes through `price_of`.

# interim: replaced by modelcatalog at merge. The single model catalog
# (`modelcatalog.selectors.model_get(provider=..., name=...)`, USD per million tokens) is built
# on another branch; when it lands, `price_of` asks it and the table below goes. Until then a
# small table of list prices, USD per million tokens, from the providers' pricing pages as of
# 2026-12 (sources beside each block), overridable with settings.EVIDENCE_MODEL_PRICES
# ({"model": {"input": .., "output": .., "cache_read": .., "cache_write": ..}}).

A cost is priced when the turn reports it (evidence.services), so a later price change does not
rewrite history; a turn of a model nobody knows a price for is counted as unpriced, and the
evidence says how many turns its cost figures leave out."""

from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class Prices:
    """USD per million tokens."""

    input_per_mtok: float
    output_per_mtok: float
    cache_read_per_mtok: float
    cache_write_per_mtok: float

    def cost(self, *, input_tokens: int, output_tokens: int, cache_read: int, cache_write: int) -> tuple[float, float]:
        """(input cost, output cost) in USD; `input_tokens` counts every input token (cached too)."""
        plain = max(0, input_tokens - cache_read - cache_write)
        cost_in = (
            plain * self.input_per_mtok
            + cache_read * self.cache_read_per_mtok
            + cache_write * self.cache_write_per_mtok
        )
        return cost_in / 1e6, output_tokens * self.output_per_mtok / 1e6


# interim: replaced by modelcatalog at merge
_TABLE: dict[str, Prices] = {
    # https://www.anthropic.com/pricing (cache write: 5-minute TTL, 1.25x input; read 0.1x)
    "claude-opus-4-5": Prices(5.0, 25.0, 0.5, 6.25),
    "claude-sonnet-4-5": Prices(3.0, 15.0, 0.3, 3.75),
    "claude-haiku-4-5": Prices(1.0, 5.0, 0.1, 1.25),
    # https://openai.com/api/pricing (cached input; no cache write charge)
    "gpt-4.1": Prices(2.0, 8.0, 0.5, 2.0),
    "gpt-4.1-mini": Prices(0.4, 1.6, 0.1, 0.4),
    "gpt-4o": Prices(2.5, 10.0, 1.25, 2.5),
    "gpt-4o-mini": Prices(0.15, 0.6, 0.075, 0.15),
    "gpt-5": Prices(1.25, 10.0, 0.125, 1.25),
    "gpt-5-mini": Prices(0.25, 2.0, 0.025, 0.25),
    # https://ai.google.dev/gemini-api/docs/pricing (prompts up to 200k tokens; cache storage not counted)
    "gemini-2.5-pro": Prices(1.25, 10.0, 0.31, 1.25),
    "gemini-2.5-flash": Prices(0.3, 2.5, 0.075, 0.3),
}


def _normalised(model: str) -> str:
    """A provider's id to the table's: Bedrock's `anthropic.claude-sonnet-4-5-20250929-v1:0` and
    a dated `claude-sonnet-4-5-20250929` are the same model's prices."""
    name = model.strip().lower().split("/")[-1]
    for prefix in ("us.", "eu.", "apac.", "global.", "anthropic.", "models/"):
        name = name.removeprefix(prefix)
    return name


def price_of(model: str | None) -> Prices | None:
    """The prices of `model` (settings override first, then the table, by its longest known
    prefix so a dated id finds its family), or None when unknown."""
    if not model:
        return None
    overrides = getattr(settings, "EVIDENCE_MODEL_PRICES", {}) or {}
    if model in overrides:
        p = overrides[model]
        return Prices(
            float(p["input"]),
            float(p["output"]),
            float(p.get("cache_read", p["input"])),
            float(p.get("cache_write", p["input"])),
        )
    name = _normalised(model)
    best = max((known for known in _TABLE if name.startswith(known)), key=len, default=None)
    return _TABLE[best] if best is not None else None
