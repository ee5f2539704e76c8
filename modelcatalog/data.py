"""The model catalog as it ships: one entry per provider model, each fact with its source.

Every entry is a dict of ModelInfo's fields (modelcatalog.selectors.ModelInfo). `sources` maps a
fact's name (or "*" for every fact the entry gives without a source of its own) to
`(url, date read)`. A fact nobody could confirm from a page is None, never a guess: the
catalog's tests check that every non-None fact has a source. Ops correct or extend this with
PUT /api/v1/models/{provider}/{name}/ or `manage.py models_import` (modelcatalog.models
.ModelOverride); nothing here is fetched at run time.

Prices are USD per million tokens; `cache_write_per_mtok` is the 5-minute cache write where a
provider has two (Anthropic). `cache_floor_tokens` is the smallest prefix the provider caches
(below it a prefix is billed at the full price and nothing says so).

Dates are the provider's announced shutdown (`retires_at`) and announcement (`deprecated_at`)
dates, taken as 00:00 UTC of that day: requests naming the model fail from then on.

Provider "bedrock" entries hold Amazon Bedrock's own lifecycle for a Bedrock model id
(`anthropic.claude-...-v1:0`, with or without a region prefix): Bedrock retires Anthropic's
models on a schedule of its own, so a Bedrock id never takes the Claude API's dates
(modelcatalog.selectors.model_get). Its other facts are the Anthropic model's. docs/operations.md
("When a model retires") says how the dates below were read and what is not known."""

from typing import Any

READ = "2026-12-07"  # when the pages below were read for this table

# --- sources: the providers' own pages ----------------------------------------------------------
# Anthropic's pages as the stored copies read here give them; where a copy stops before the part
# that matters, the page's own text as of 2026-08-22, read from a public mirror of Anthropic's
# docs (github.com/thevibeworks/claude-code-docs, commit 3f1ef7c, content/en/...). That text
# predates Claude Sonnet 5.5 and Opus 5.5 (released from 2026-09-28): their facts come from their
# model pages.
ANTHROPIC_DEPRECATIONS = ("https://platform.claude.com/docs/en/about-claude/model-deprecations", READ)
ANTHROPIC_CACHING = ("https://platform.claude.com/docs/en/build-with-claude/prompt-caching", READ)
ANTHROPIC_PRICING = ("https://platform.claude.com/docs/en/about-claude/pricing", READ)
ANTHROPIC_MODELS = ("https://platform.claude.com/docs/en/about-claude/models/overview", READ)
# The model pages (their specification and availability blocks), as the stored copies read.
ANTHROPIC_SONNET_45 = ("https://platform.claude.com/docs/zh-CN/models/sonnet-4-5/overview.md", READ)
ANTHROPIC_SONNET_5 = ("https://platform.claude.com/docs/zh-CN/models/sonnet-5/overview", READ)
ANTHROPIC_SONNET_55 = ("https://platform.claude.com/docs/zh-CN/models/sonnet-5-5/overview", READ)
# Inferred: the caching page lists 1,024 for Sonnet 5 and every Sonnet since 3.7; it stops before 5.5.
ANTHROPIC_SONNET_55_FLOOR = (
    "https://platform.claude.com/docs/en/build-with-claude/prompt-caching#inferred-from-sonnet-5",
    READ,
)
ANTHROPIC_OPUS_45 = ("https://platform.claude.com/docs/zh-TW/models/opus-4-5/overview", READ)
ANTHROPIC_OPUS_5 = ("https://platform.claude.com/docs/about-claude/models/whats-new-opus-5", READ)
ANTHROPIC_OPUS_55 = ("https://platform.claude.com/docs/zh-CN/models/opus-5-5/overview", READ)
# Anthropic's Bedrock page gave Bedrock's own dates in its model table from 2026-05-14 to
# 2026-06-06 (the mirror's history of the page); it now sends readers to AWS's lifecycle page.
ANTHROPIC_BEDROCK = ("https://platform.claude.com/docs/en/build-with-claude/claude-on-amazon-bedrock-legacy", READ)
OPENAI_DEPRECATIONS = ("https://developers.openai.com/api/docs/deprecations", READ)
OPENAI_CACHING = ("https://platform.openai.com/docs/guides/prompt-caching", "2026-12-01")
GEMINI_DEPRECATIONS = ("https://ai.google.dev/gemini-api/docs/deprecations.md", READ)
GEMINI_CACHING = ("https://ai.google.dev/gemini-api/docs/caching", "2026-12-01")  # the page: updated 2026-10
BEDROCK_CACHING = ("https://docs.aws.amazon.com/bedrock/latest/userguide/prompt-caching.html", "2026-12-01")

# --- sources: third parties, where no provider page read gives the fact -------------------------
# pydantic-ai's deprecation table, "compiled from the providers' deprecation pages as fetched on
# 2026-11-19, Anthropic's again on 2026-11-24, and Google's on 2026-11-26" (its docstring), in
# pydantic_ai/providers/_model_deprecations.py of the release below.
PYDANTIC_AI_TABLE = ("https://pypi.org/project/pydantic-ai-slim/2.78.0/", READ)
# The GPT-4 series notice of 2026-10-14, as an article quoting OpenAI's page gives it.
OPENAI_4O_QUOTED = (
    "https://dev.to/importstatic/every-openai-model-shutdown-date-until-january-2027-and-what-replaces-it-1dfk",
    READ,
)
# The bare GPT-4o / 4.1 aliases: dated by their snapshots (every one shuts down 2027-01-14).
OPENAI_4O_ALIASES = (OPENAI_4O_QUOTED[0] + "#inferred-from-the-snapshots", READ)
# Gemini 2.5 Pro and Flash's shutdown, as an article quoting Google's page (read 2026-11-10) gives it.
GEMINI_25_QUOTED = (
    "https://dev.to/aideprecations/what-to-do-before-gemini-25-pro-and-25-flash-are-retired-on-december-1-2026-5gg9",
    READ,
)

_NONE: dict[str, Any] = {
    "aliases": [],
    "context_window": None,
    "output_limit": None,
    "cache_floor_tokens": None,
    "input_per_mtok": None,
    "output_per_mtok": None,
    "cache_read_per_mtok": None,
    "cache_write_per_mtok": None,
    "deprecated_at": None,
    "retires_at": None,
    "replacement": None,
}


def _m(provider: str, name: str, sources: dict[str, tuple[str, str]], **facts: Any) -> dict[str, Any]:
    return {**_NONE, "provider": provider, "name": name, **facts, "sources": sources}


def _prices(inp: float, out: float, write: float, read: float) -> dict[str, float]:
    """A pricing-page row: base input, output, 5-minute cache write, cache hit."""
    return {"input_per_mtok": inp, "output_per_mtok": out, "cache_write_per_mtok": write, "cache_read_per_mtok": read}


_PRICED = ("input_per_mtok", "output_per_mtok", "cache_write_per_mtok", "cache_read_per_mtok")


def _from(source: tuple[str, str], *facts: str) -> dict[str, tuple[str, str]]:
    return dict.fromkeys(facts, source)


# The Claude API's retired models: (name, dated id, deprecated, retired, replacement, floor,
# prices). Dates from the deprecations page's status table and history; floors from the
# caching page (Haiku 3's from the older copy core/providers.py read); prices from the pricing
# page. Sonnet 4's and Sonnet 3.7's replacement is the one the page names now (pydantic-ai's
# table, 2026-11-24); the page as of 2026-08 named claude-sonnet-4-6 for Sonnet 4.
_RETIRED_CLAUDE = [
    (
        "claude-sonnet-4",
        "claude-sonnet-4-20250514",
        "2026-04-14",
        "2026-06-15",
        "claude-sonnet-5-5",
        1024,
        _prices(3.0, 15.0, 3.75, 0.30),
    ),
    (
        "claude-opus-4",
        "claude-opus-4-20250514",
        "2026-04-14",
        "2026-06-15",
        "claude-opus-4-8",
        1024,
        _prices(15.0, 75.0, 18.75, 1.50),
    ),
    (
        "claude-opus-4-1",
        "claude-opus-4-1-20250805",
        "2026-06-05",
        "2026-08-05",
        "claude-opus-4-8",
        1024,
        _prices(15.0, 75.0, 18.75, 1.50),
    ),
    ("claude-3-7-sonnet", "claude-3-7-sonnet-20250219", "2025-10-28", "2026-02-19", "claude-sonnet-5-5", None, {}),
    (
        "claude-3-5-haiku",
        "claude-3-5-haiku-20241022",
        "2025-12-19",
        "2026-02-19",
        "claude-haiku-4-5",
        2048,
        _prices(0.80, 4.0, 1.0, 0.08),
    ),
    ("claude-3-haiku", "claude-3-haiku-20240307", "2026-02-19", "2026-04-20", "claude-haiku-4-5", 2048, {}),
]

MODELS: list[dict[str, Any]] = [
    # --- Anthropic ------------------------------------------------------------------------------
    # Sonnet 4.5: deprecated, retired 2026-11-30, replacement Sonnet 5.5 (its model page);
    # announced 2026-09-30 (pydantic-ai's table has the date, not the announcement).
    _m(
        "anthropic",
        "claude-sonnet-4-5",
        {
            "*": ANTHROPIC_SONNET_45,
            "cache_floor_tokens": ANTHROPIC_CACHING,
            **_from(ANTHROPIC_PRICING, "cache_write_per_mtok", "cache_read_per_mtok"),
        },
        aliases=["claude-sonnet-4-5-20250929"],
        context_window=200_000,
        output_limit=64_000,
        cache_floor_tokens=1024,
        **_prices(3.0, 15.0, 3.75, 0.30),
        retires_at="2026-11-30",
        replacement="claude-sonnet-5-5",
    ),
    # Sonnet 5.5, the current Sonnet. Its model page gives the prices, a $0.20 cache read
    # included (release notes of several tools report a cut to $0.10 on 2026-10-07 that no
    # Anthropic page read shows; the provider's page is the source, ops correct it by PUT). Its
    # cache floor is on no page read (the caching page's text, as of 2026-08-22, stops at Sonnet 5
    # and Opus 5; the model page gives none): 1,024 is inferred, marked so in its source, from
    # every Sonnet since 3.7 and Sonnet 5 itself, so the turn call warns a prefix below it rather
    # than saying nothing about the model agents are told to move to.
    _m(
        "anthropic",
        "claude-sonnet-5-5",
        {"*": ANTHROPIC_SONNET_55, "cache_floor_tokens": ANTHROPIC_SONNET_55_FLOOR},
        context_window=1_000_000,
        output_limit=128_000,
        cache_floor_tokens=1024,
        **_prices(2.0, 10.0, 2.5, 0.20),
    ),
    # Sonnet 5 (legacy since Sonnet 5.5): its page; the floor from the caching page.
    _m(
        "anthropic",
        "claude-sonnet-5",
        {"*": ANTHROPIC_SONNET_5, "cache_floor_tokens": ANTHROPIC_CACHING},
        context_window=1_000_000,
        output_limit=128_000,
        cache_floor_tokens=1024,
        **_prices(2.0, 10.0, 2.5, 0.20),
    ),
    _m(
        "anthropic",
        "claude-sonnet-4-6",
        {"*": ANTHROPIC_MODELS, "cache_floor_tokens": ANTHROPIC_CACHING, **_from(ANTHROPIC_PRICING, *_PRICED)},
        context_window=1_000_000,
        output_limit=128_000,
        cache_floor_tokens=1024,
        **_prices(3.0, 15.0, 3.75, 0.30),
    ),
    *[
        _m(
            "anthropic",
            name,
            {
                "*": ANTHROPIC_DEPRECATIONS,
                "cache_floor_tokens": ANTHROPIC_CACHING,
                **_from(ANTHROPIC_PRICING, *prices),
                **({"replacement": PYDANTIC_AI_TABLE} if replacement == "claude-sonnet-5-5" else {}),
            },
            aliases=[dated],
            cache_floor_tokens=floor,
            deprecated_at=deprecated,
            retires_at=retired,
            replacement=replacement,
            **prices,
        )
        for name, dated, deprecated, retired, replacement, floor, prices in _RETIRED_CLAUDE
    ],
    # Opus 4.5: deprecated 2026-11-23, retiring 2027-01-22 for Opus 5.5 (pydantic-ai's table and
    # another tool's notes, both read off Anthropic's page in late November; the stored copy of
    # its model page read here predates the notice: "not sooner than November 24, 2026").
    _m(
        "anthropic",
        "claude-opus-4-5",
        {
            "*": ANTHROPIC_OPUS_45,
            "cache_floor_tokens": ANTHROPIC_CACHING,
            **_from(PYDANTIC_AI_TABLE, "deprecated_at", "retires_at", "replacement"),
        },
        aliases=["claude-opus-4-5-20251101"],
        context_window=200_000,
        output_limit=64_000,
        cache_floor_tokens=4096,
        **_prices(5.0, 25.0, 6.25, 0.50),
        deprecated_at="2026-11-23",
        retires_at="2027-01-22",
        replacement="claude-opus-5-5",
    ),
    *[
        _m(
            "anthropic",
            name,
            {"*": ANTHROPIC_MODELS, "cache_floor_tokens": ANTHROPIC_CACHING, **_from(ANTHROPIC_PRICING, *_PRICED)},
            context_window=1_000_000,
            output_limit=128_000,
            cache_floor_tokens=floor,
            **_prices(5.0, 25.0, 6.25, 0.50),
        )
        for name, floor in (("claude-opus-4-6", 4096), ("claude-opus-4-7", 2048), ("claude-opus-4-8", 1024))
    ],
    _m(
        "anthropic",
        "claude-opus-5",
        {"*": ANTHROPIC_OPUS_5, "cache_floor_tokens": ANTHROPIC_CACHING},
        context_window=1_000_000,
        output_limit=128_000,
        cache_floor_tokens=512,
        **_prices(5.0, 25.0, 6.25, 0.50),
    ),
    # Opus 5.5: its page. Its cache floor, like Sonnet 5.5's, is on no page read.
    _m(
        "anthropic",
        "claude-opus-5-5",
        {"*": ANTHROPIC_OPUS_55},
        context_window=1_000_000,
        output_limit=128_000,
        **_prices(4.0, 20.0, 5.0, 0.20),
    ),
    _m(
        "anthropic",
        "claude-haiku-4-5",
        {"*": ANTHROPIC_MODELS, "cache_floor_tokens": ANTHROPIC_CACHING, **_from(ANTHROPIC_PRICING, *_PRICED)},
        aliases=["claude-haiku-4-5-20251001"],
        context_window=200_000,
        output_limit=64_000,
        cache_floor_tokens=4096,
        **_prices(1.0, 5.0, 1.25, 0.10),
    ),
    # --- Amazon Bedrock's own dates for Anthropic models ------------------------------------------
    # From Anthropic's Bedrock page while it gave them (2026-05-14 to 2026-06-06); later copies
    # of the page (to 2026-08-22) mark Opus 4 and Sonnet 3.7 retired on Bedrock and Sonnet 4 still
    # deprecated, which agrees. AWS's lifecycle page is the authority ("for Amazon Bedrock usage,
    # only the dates on this page apply"), but the stored copies read stop before its tables.
    # Any other Bedrock id has no dates here: ops add them (PUT /api/v1/models/bedrock/{id}/).
    _m(
        "bedrock",
        "anthropic.claude-sonnet-4-20250514-v1:0",
        {"*": ANTHROPIC_BEDROCK},
        deprecated_at="2026-04-14",
        retires_at="2026-10-14",
    ),
    _m(
        "bedrock",
        "anthropic.claude-opus-4-20250514-v1:0",
        {"*": ANTHROPIC_BEDROCK},
        deprecated_at="2026-04-14",
        retires_at="2026-05-31",
    ),
    _m("bedrock", "anthropic.claude-3-7-sonnet-20250219-v1:0", {"*": ANTHROPIC_BEDROCK}, retires_at="2026-04-28"),
    # --- OpenAI ---------------------------------------------------------------------------------
    # The gpt-5 family and o3: announced 2026-06-11, shut down 2026-12-11 (the deprecations
    # page; the stored copy read gives the gpt-5 and gpt-5-mini rows whole and stops in
    # gpt-5-nano's replacement cell: the other replacements from pydantic-ai's table, which also
    # agrees on the two rows read). Prompt caching from 1,024 tokens (the caching guide).
    *[
        _m(
            "openai",
            name,
            {"*": OPENAI_DEPRECATIONS, "cache_floor_tokens": OPENAI_CACHING, **extra},
            aliases=[dated],
            cache_floor_tokens=1024,
            deprecated_at="2026-06-11",
            retires_at="2026-12-11",
            replacement=replacement,
        )
        for name, dated, replacement, extra in [
            ("gpt-5", "gpt-5-2025-08-07", "gpt-6.1-sol", {}),
            ("gpt-5-mini", "gpt-5-mini-2025-08-07", "gpt-6.1-terra", {}),
            ("gpt-5-nano", "gpt-5-nano-2025-08-07", "gpt-6-luna", {"replacement": PYDANTIC_AI_TABLE}),
            ("gpt-5-pro", "gpt-5-pro-2025-10-06", "gpt-6.1-sol", {"*": PYDANTIC_AI_TABLE}),  # reasoning.mode: pro
            ("o3", "o3-2025-04-16", "gpt-6.1-sol", {"*": PYDANTIC_AI_TABLE}),
            ("o3-pro", "o3-pro-2025-06-10", "gpt-6.1-sol", {"*": PYDANTIC_AI_TABLE}),  # reasoning.mode: pro
        ]
    ],
    # The GPT-4 series notice (2026-10-14) dates the dated snapshots, shut down 2027-01-14 for
    # gpt-6-luna. The bare aliases (gpt-4o, gpt-4o-mini, gpt-4.1, gpt-4.1-mini) take the same
    # date: every snapshot an alias can resolve to shuts down that day, so a request naming it
    # fails from then on. That is an inference, not a quoted row, and the source says so; a pin
    # on the bare alias is the common case, and warning it is the point of the catalog.
    *[
        _m(
            "openai",
            snapshot,
            {"*": OPENAI_4O_QUOTED, "cache_floor_tokens": OPENAI_CACHING},
            cache_floor_tokens=1024,
            deprecated_at="2026-10-14",
            retires_at="2027-01-14",
            replacement="gpt-6-luna",
        )
        for snapshot in (
            "gpt-4o-2024-08-06",
            "gpt-4o-2024-11-20",
            "gpt-4o-mini-2024-07-18",
            "gpt-4.1-2025-04-14",
            "gpt-4.1-mini-2025-04-14",
        )
    ],
    *[
        _m(
            "openai",
            name,
            {"*": OPENAI_4O_ALIASES, "cache_floor_tokens": OPENAI_CACHING},
            cache_floor_tokens=1024,
            deprecated_at="2026-10-14",
            retires_at="2027-01-14",
            replacement="gpt-6-luna",
        )
        for name in ("gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini")
    ],
    # The replacements the deprecations page names; nothing else about them was read.
    _m("openai", "gpt-6.1-sol", {}),
    _m("openai", "gpt-6.1-terra", {}),
    _m("openai", "gpt-6-luna", {}),
    # --- Google Gemini --------------------------------------------------------------------------
    # 2.5 Pro and 2.5 Flash: shut down on the Gemini API 2026-12-01, after which the API answers
    # them with the replacement (both third-party sources say so). The stored copies of Google's
    # page read here are older (a June 2026 date) or stop before these rows. Google Cloud's
    # schedule differs (2026-10-20, pydantic-ai's table).
    _m(
        "google",
        "gemini-2.5-pro",
        {"*": GEMINI_25_QUOTED, "cache_floor_tokens": GEMINI_CACHING},
        cache_floor_tokens=2048,
        retires_at="2026-12-01",
        replacement="gemini-3.8-flash",
    ),
    _m(
        "google",
        "gemini-2.5-flash",
        {"*": GEMINI_25_QUOTED, "cache_floor_tokens": GEMINI_CACHING},
        cache_floor_tokens=2048,
        retires_at="2026-12-01",
        replacement="gemini-3.5-flash-lite",
    ),
    # "Not deprecated and remains available through the API until further notice" (the same article).
    _m("google", "gemini-2.5-flash-lite", {}),
    _m(
        "google",
        "gemini-3-pro-preview",
        {"*": GEMINI_DEPRECATIONS, "cache_floor_tokens": GEMINI_CACHING},
        cache_floor_tokens=4096,
        retires_at="2026-03-09",
        replacement="gemini-3.1-pro-preview",
    ),
    # Gemini 3.x implicit caching: 4,096 tokens (the caching page: "4,096 for 3.x").
    *[
        _m("google", name, {"cache_floor_tokens": GEMINI_CACHING}, cache_floor_tokens=4096)
        for name in (
            "gemini-3.1-pro-preview",
            "gemini-3-flash-preview",
            "gemini-3.5-flash",
            "gemini-3.5-flash-lite",
            "gemini-3.8-flash",
        )
    ],
    # --- Amazon Nova on Bedrock: 1,000 tokens per cache checkpoint ---------------------------------
    *[
        _m("amazon", f"nova-{size}", {"cache_floor_tokens": BEDROCK_CACHING}, cache_floor_tokens=1000)
        for size in ("micro", "lite", "pro", "premier")
    ],
]
