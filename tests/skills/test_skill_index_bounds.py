"""What one version's skills may cost the web processes (issue 36, Medium): the cards' text
together is bounded at publish (a 400 naming the bound), and each process keeps its routing
indexes by their size in bytes (SKILL_INDEX_CACHE_BYTES), not 64 of them whatever their size."""

import copy

import pytest
from django.test import override_settings

from registry.skills_content import MAX_CARD_TEXT_TOTAL, MAX_DESCRIPTION, card_text_chars
from skills import router
from tests.skills.test_skills import SKILLS, card, skills_content


def long_cards(total: int) -> list[dict]:
    """Cards of MAX_DESCRIPTION-character descriptions whose text adds up to `total` characters."""
    cards, size = [], 0
    while size < total:
        made = card(f"skill_{len(cards)}", "Use when it fits", "misc", ["one", "two", "three"], ["an example", "two"])
        made["description"] = "x" * min(
            MAX_DESCRIPTION, total - size - card_text_chars(made) + len(made["description"])
        )
        assert made["description"], "make the fixed fields shorter"
        cards.append(made)
        size += card_text_chars(made)
    assert size == total
    return cards


@pytest.fixture
def bundle_named_big(ops):
    assert ops.post("/api/v1/bundles/", {"name": "big"}).status_code == 201


def test_a_version_whose_cards_carry_too_much_text_is_refused_at_publish(ops, bundle_named_big):
    doc = skills_content(long_cards(MAX_CARD_TEXT_TOTAL + 1))
    response = ops.post("/api/v1/bundles/big/versions/", {"message": "m", "content": doc})
    assert response.status_code == 400, response.content[:300]
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    (message,) = error["details"]["content.skills"]
    assert f"{MAX_CARD_TEXT_TOTAL + 1} characters in all: at most {MAX_CARD_TEXT_TOTAL}" in message


def test_cards_at_the_bound_publish(ops, bundle_named_big):
    doc = skills_content(long_cards(MAX_CARD_TEXT_TOTAL))
    response = ops.post("/api/v1/bundles/big/versions/", {"message": "m", "content": doc})
    assert response.status_code == 201, response.content[:300]


@pytest.fixture
def fresh_cache():
    router._INDEXES = None  # the next index_for starts an empty cache of the configured size
    yield
    router._INDEXES = None


def _hashes(n: int) -> list[str]:
    return [f"{i:064x}" for i in range(n)]


def test_sixty_five_small_indexes_stay_cached_and_are_not_rebuilt(fresh_cache):
    """Cycling through 65 versions rebuilt the index on every call when the cache held 64."""
    skills = copy.deepcopy(SKILLS[:2])
    first = {h: router.index_for(h, skills) for h in _hashes(65)}
    assert all(router.index_for(h, skills) is index for h, index in first.items())
    count, size = router.indexes_cached()
    assert count == 65 and size <= 256 * 1024 * 1024


def test_the_cache_keeps_indexes_by_bytes_least_recently_used_out_first(fresh_cache):
    skills = copy.deepcopy(SKILLS)
    one = router.index_bytes(router.Index(skills))
    a, b, c = _hashes(3)
    with override_settings(SKILL_INDEX_CACHE_BYTES=int(one * 2.5)):
        kept_a = router.index_for(a, skills)
        router.index_for(b, skills)
        assert router.index_for(a, skills) is kept_a  # a is now the most recently used
        router.index_for(c, skills)  # over the budget: b goes, not a
        count, size = router.indexes_cached()
        assert count == 2 and size <= one * 2.5
        assert router.index_for(a, skills) is kept_a
    with override_settings(SKILL_INDEX_CACHE_BYTES=one // 2):
        assert router.index_for(a, skills) is not kept_a  # a new, smaller cache
        assert router.indexes_cached() == (0, 0)  # larger than the whole budget: built, not kept
