"""The model catalog as it ships: one entry per provider model, each fact with its source.

Every entry is a dict of ModelInfo's fields (modelcatalog.selectors.ModelInfo). `sources` maps a
fact's name (or "*" for every fact the entry gives without a source of its own) to
`(url, date read)`. A fact nobody could confirm from a page is None, never a guess: the
catalog's tests check that every non-None fact has a source. Ops correct or extend this with
PUT /api/v1/models/{provider}/{name}/ or `manage.py models_import` (modelcatalog.models
.ModelOverride); nothing here is fetched at run time.

Prices are USD per million tokens; `cache_write_per_mtok` is the 5-minute cache write where a
provider has two (Anthropic). `cache_floor_tokens` is the smallest prefix the provider caches
(below it a prefix is billed at the full price and nothing says so); it was
core/providers.py's FLOORS table, whose sources are kept.

Dates are the provider's announced shutdown (`retires_at`) and announcement (`deprecated_at`)
dates, taken as 00:00 UTC of that day: requests naming the model fail from then on."""

from typing import Any

READ = "2026-12-07"  # when the pages below were read for this table, unless a source says otherwise

# --- sources ----------------------------------------------------------------------------------
# The four caching pages were read for core/providers.py's FLOORS table (commit 4998520,
# 2026-12-01), whose floors this table keeps; that commit's date stands for when.
FLOORS_READ = "2026-12-01"
ANTHROPIC_CACHING = ("https://platform.claude.com/docs/en/build-with-claude/prompt-caching", FLOORS_READ)
ANTHROPIC_PRICING = ("https://platform.claude.com/docs/en/about-claude/pricing", READ)
ANTHROPIC_DEPRECATIONS = ("https://platform.claude.com/docs/en/about-claude/model-deprecations", READ)
ANTHROPIC_SONNET_45 = ("https://platform.claude.com/docs/en/models/sonnet-4-5/overview", READ)
ANTHROPIC_SONNET_46 = ("https://platform.claude.com/docs/en/models/sonnet-4-6/overview", READ)
ANTHROPIC_SONNET_55 = ("https://platform.claude.com/docs/en/models/sonnet-5-5/overview", READ)
ANTHROPIC_OPUS_46 = ("https://platform.claude.com/docs/en/models/opus-4-6/overview", READ)
ANTHROPIC_OPUS_5 = ("https://platform.claude.com/docs/about-claude/models/whats-new-opus-5", READ)
# Anthropic's release notes of 2026-06-15, as a provider-watch record quotes them (third party).
ANTHROPIC_RELEASE_NOTES = (
    "https://raw.githubusercontent.com/ottto-ai/ai-provider-watch/main/data/events/"
    "2026-06-15-anthropic-sonnet-4-opus-4-retirement.json",
    READ,
)
# Dated Anthropic model ids, as a gateway's prompt-caching page lists them (third party).
ANTHROPIC_IDS = ("https://docs.nano-gpt.com/api-reference/miscellaneous/prompt-caching", READ)
OPENAI_DEPRECATIONS = ("https://developers.openai.com/api/docs/deprecations", READ)
# Where the official page's excerpt read here was cut off, articles quoting it (third party).
OPENAI_GPT5_QUOTED = (
    "https://dev.to/sunnatulla_dev/gpt-5-and-o3-shut-down-december-11-a-find-and-replace-would-rewrite-274-table-rows-mkk",
    READ,
)
OPENAI_4O_QUOTED = (
    "https://dev.to/importstatic/every-openai-model-shutdown-date-until-january-2027-and-what-replaces-it-1dfk",
    READ,
)
OPENAI_CACHING = ("https://platform.openai.com/docs/guides/prompt-caching", FLOORS_READ)
GEMINI_DEPRECATIONS = ("https://ai.google.dev/gemini-api/docs/deprecations.md", READ)
# Gemini 2.5 Pro and Flash's shutdown, as an article quotes the deprecations page (third party).
GEMINI_25_QUOTED = (
    "https://dev.to/aideprecations/what-to-do-before-gemini-25-pro-and-25-flash-are-retired-on-december-1-2026-5gg9",
    READ,
)
GEMINI_CACHING = ("https://ai.google.dev/gemini-api/docs/caching", FLOORS_READ)  # the page: updated 2026-10
BEDROCK_CACHING = ("https://docs.aws.amazon.com/bedrock/latest/userguide/prompt-caching.html", FLOORS_READ)

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


# Opus 4.5 to 5: the pricing page's row (5-minute cache write, cache hit).
_OPUS_45_PRICES = {
    "input_per_mtok": 5.0,
    "output_per_mtok": 25.0,
    "cache_write_per_mtok": 6.25,
    "cache_read_per_mtok": 0.5,
}

MODELS: list[dict[str, Any]] = [
    # --- Anthropic ------------------------------------------------------------------------------
    # Sonnet 4.5: deprecated, retired on 2026-11-30; replacement Sonnet 5.5 (its model page).
    _m(
        "anthropic",
        "claude-sonnet-4-5",
        {"*": ANTHROPIC_SONNET_45, "cache_floor_tokens": ANTHROPIC_CACHING},
        aliases=["claude-sonnet-4-5-20250929"],
        context_window=200_000,
        output_limit=64_000,
        cache_floor_tokens=1024,
        input_per_mtok=3.0,
        output_per_mtok=15.0,
        retires_at="2026-11-30",
        replacement="claude-sonnet-5-5",
    ),
    # Sonnet 5.5: the current Sonnet. Its prompt-caching floor is not on any page read for this
    # table (the caching page read lists floors up to the 4.6 models): None until ops set it.
    # The cache-read price was $0.20 on the model page, and tools' changelogs report a cut to
    # $0.10 on 2026-10-07: unconfirmed, so None.
    _m(
        "anthropic",
        "claude-sonnet-5-5",
        {"*": ANTHROPIC_SONNET_55},
        context_window=1_000_000,
        output_limit=128_000,
        input_per_mtok=2.0,
        output_per_mtok=10.0,
        cache_write_per_mtok=2.5,
    ),
    _m(
        "anthropic",
        "claude-sonnet-4-6",
        {"*": ANTHROPIC_SONNET_46, "cache_floor_tokens": ANTHROPIC_CACHING},
        context_window=1_000_000,
        output_limit=128_000,
        cache_floor_tokens=1024,
        input_per_mtok=3.0,
        output_per_mtok=15.0,
    ),
    # Sonnet 4 and Opus 4: retired 2026-06-15 (release notes), upgrades Sonnet 4.6 and Opus 4.8.
    _m(
        "anthropic",
        "claude-sonnet-4",
        {"*": ANTHROPIC_RELEASE_NOTES, "cache_floor_tokens": ANTHROPIC_CACHING, "aliases": ANTHROPIC_IDS},
        aliases=["claude-sonnet-4-20250514"],
        cache_floor_tokens=1024,
        retires_at="2026-06-15",
        replacement="claude-sonnet-4-6",
    ),
    _m(
        "anthropic",
        "claude-opus-4",
        {"*": ANTHROPIC_RELEASE_NOTES, "cache_floor_tokens": ANTHROPIC_CACHING, "aliases": ANTHROPIC_IDS},
        aliases=["claude-opus-4-20250514"],
        cache_floor_tokens=1024,
        retires_at="2026-06-15",
        replacement="claude-opus-4-8",
    ),
    _m(
        "anthropic",
        "claude-opus-4-1",
        {"cache_floor_tokens": ANTHROPIC_CACHING, "aliases": ANTHROPIC_IDS},
        aliases=["claude-opus-4-1-20250805"],
        cache_floor_tokens=1024,
    ),
    _m(
        "anthropic",
        "claude-opus-4-5",
        {"*": ANTHROPIC_PRICING, "cache_floor_tokens": ANTHROPIC_CACHING, "aliases": ANTHROPIC_IDS},
        aliases=["claude-opus-4-5-20251101"],
        cache_floor_tokens=4096,
        **_OPUS_45_PRICES,
    ),
    _m(
        "anthropic",
        "claude-opus-4-6",
        {"*": ANTHROPIC_OPUS_46, "cache_floor_tokens": ANTHROPIC_CACHING, "cache_read_per_mtok": ANTHROPIC_PRICING},
        context_window=1_000_000,
        output_limit=128_000,
        cache_floor_tokens=4096,
        **_OPUS_45_PRICES,
    ),
    _m("anthropic", "claude-opus-4-8", {"*": ANTHROPIC_PRICING}, **_OPUS_45_PRICES),
    _m(
        "anthropic",
        "claude-opus-5",
        {"*": ANTHROPIC_OPUS_5},
        context_window=1_000_000,
        output_limit=128_000,
        **_OPUS_45_PRICES,
    ),
    _m(
        "anthropic",
        "claude-opus-5-5",
        {"*": ANTHROPIC_OPUS_5},
        context_window=1_000_000,
        output_limit=128_000,
        input_per_mtok=4.0,
        output_per_mtok=20.0,
    ),
    _m(
        "anthropic",
        "claude-haiku-4-5",
        {"*": ANTHROPIC_SONNET_55, "cache_floor_tokens": ANTHROPIC_CACHING, "aliases": ANTHROPIC_IDS},
        aliases=["claude-haiku-4-5-20251001"],
        context_window=200_000,
        output_limit=64_000,
        cache_floor_tokens=4096,
        input_per_mtok=1.0,
        output_per_mtok=5.0,
    ),
    _m(
        "anthropic",
        "claude-3-5-haiku",
        {"cache_floor_tokens": ANTHROPIC_CACHING, "aliases": ANTHROPIC_IDS},
        aliases=["claude-3-5-haiku-20241022"],
        cache_floor_tokens=2048,
    ),
    _m(
        "anthropic",
        "claude-3-haiku",
        {"cache_floor_tokens": ANTHROPIC_CACHING},
        cache_floor_tokens=2048,
    ),
    # --- OpenAI ---------------------------------------------------------------------------------
    # The gpt-5 family and o3: deprecated 2026-06-11, shut down 2026-12-11. Prompt caching from
    # 1,024 tokens for every model that caches (the caching guide).
    *[
        _m(
            "openai",
            name,
            {"*": source, "cache_floor_tokens": OPENAI_CACHING},
            aliases=aliases,
            cache_floor_tokens=1024,
            deprecated_at="2026-06-11",
            retires_at="2026-12-11",
            replacement=replacement,
        )
        for name, aliases, replacement, source in [
            ("gpt-5", ["gpt-5-2025-08-07"], "gpt-6.1-sol", OPENAI_DEPRECATIONS),
            ("gpt-5-mini", ["gpt-5-mini-2025-08-07"], "gpt-6.1-terra", OPENAI_DEPRECATIONS),
            # the page's replacement cell was cut off in what was read; articles disagree
            ("gpt-5-nano", ["gpt-5-nano-2025-08-07"], None, OPENAI_DEPRECATIONS),
            ("gpt-5-pro", ["gpt-5-pro-2025-10-06"], "gpt-6.1-sol", OPENAI_GPT5_QUOTED),  # with reasoning.mode: pro
            ("o3", ["o3-2025-04-16"], "gpt-6.1-sol", OPENAI_GPT5_QUOTED),
            ("o3-pro", ["o3-pro-2025-06-10"], "gpt-6.1-sol", OPENAI_GPT5_QUOTED),  # with reasoning.mode: pro
        ]
    ],
    # GPT-4o, 4o mini, 4.1 and 4.1 mini: deprecated 2026-10-14, shut down 2027-01-14.
    *[
        _m(
            "openai",
            name,
            {"*": OPENAI_4O_QUOTED, "cache_floor_tokens": OPENAI_CACHING},
            cache_floor_tokens=1024,
            deprecated_at="2026-10-14",
            retires_at="2027-01-14",
            replacement="gpt-6-luna",
        )
        # Their dated snapshot ids were not on the pages read: ops add them as aliases (PUT).
        for name in ("gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini")
    ],
    # The replacements the deprecations page names; nothing else about them was read.
    _m("openai", "gpt-6.1-sol", {}),
    _m("openai", "gpt-6.1-terra", {}),
    _m("openai", "gpt-6-luna", {}),
    # --- Google Gemini --------------------------------------------------------------------------
    # 2.5 Pro and 2.5 Flash: shut down 2026-12-01 (the deprecations page as read 2026-11-10 by
    # the article quoting it).
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
