"""What a model's tokens cost: every price lookup of the evidence goes through `price_of`, which
reads the one model catalog (modelcatalog.selectors.model_get: the shipped table with its
sources, and ops' corrections through PUT /api/v1/models/{provider}/{name}/), the table the turn
call's cache floors and the retirement checks read too.

A cost is priced when the turn reports it (evidence.services), so a later price change does not
rewrite history; a turn of a model the catalog has no price for is counted as unpriced, and the
evidence says how many turns its cost figures leave out."""

from dataclasses import dataclass

from modelcatalog.selectors import model_get


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


def price_of(model: str | None) -> Prices | None:
    """The catalog's prices of `model` (aliases and provider spellings such as Bedrock's
    `anthropic.claude-...-v1:0` resolved by the catalog), or None when it has no input or output
    price for it. A cache price the catalog lacks counts as the input price (no discount assumed)."""
    if not model:
        return None
    info = model_get(provider=None, name=model)
    if info is None or info.input_per_mtok is None or info.output_per_mtok is None:
        return None
    return Prices(
        info.input_per_mtok,
        info.output_per_mtok,
        info.cache_read_per_mtok if info.cache_read_per_mtok is not None else info.input_per_mtok,
        info.cache_write_per_mtok if info.cache_write_per_mtok is not None else info.input_per_mtok,
    )


def input_output(model: str) -> tuple[float, float] | None:
    """price_of's input and output prices per million tokens: what an evaluation job budgets
    with (evals.jobs.Prices), for the worker, the API and the admin alike."""
    found = price_of(model)
    return (found.input_per_mtok, found.output_per_mtok) if found else None
