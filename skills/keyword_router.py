"""Routing by keywords alone: what a version is routed with while its full index
(skills.router.Index) is being built by the worker (skills.index_store). Built from the cards in
about a millisecond per 100 cards (no segmenter, no embedding): a card scores for each of its
keywords found verbatim in the newest user message, for its name there, and most for a firing
trigger (RE2, as the full index runs them). Resident (L1) skills and exclusive groups are as
in the full index (its ghost-loop rule cannot fire here: see route); each routed skill's `why` says "keywords only"."""

import threading
from typing import Any

from cachetools import LRUCache

from skills.params import DEFAULT
from skills.router import History, RouteResult, _Phrase, _triggers
from skills.turn_text import split

__all__ = ["KeywordIndex", "keyword_index"]


class _Card:
    __slots__ = ("name", "spaced", "category", "level", "group", "keywords", "triggers")

    def __init__(self, skill: dict[str, Any], budget: list[int]) -> None:
        self.name = str(skill["name"])
        self.spaced = self.name.replace("_", " ")
        self.category = str(skill["category"])
        self.level = skill["level"]
        self.group = skill.get("exclusive_group")
        self.keywords = [_Phrase(k.lower().strip()) for k in skill.get("keywords") or [] if k.strip()]
        self.triggers = _triggers(skill, budget)[0]


class KeywordIndex:
    def __init__(self, skills: list[dict[str, Any]]) -> None:
        budget = [DEFAULT.max_trigger_program_total]
        self.cards = [_Card(skill, budget) for skill in skills]
        self.resident = [c.name for c in self.cards if c.level == "L1"]

    def _score(self, card: _Card, lower: str, utf8: bytes) -> tuple[float, list[str]]:
        hits = [kw.text for kw in card.keywords if kw.found_in(lower)]
        why = ["keywords only"]
        score = float(min(len(hits), 3))
        if hits:
            why.append("keywords " + ", ".join(hits[:3]))
        if card.name in lower or card.spaced in lower:
            score += 2.0
            why.append("named")
        if any(t.search(utf8) is not None for t in card.triggers):
            score += 10.0
            why.append("trigger")
        return score, why

    def route(self, messages: list[dict[str, Any]], k: int = 5, history: History | None = None) -> RouteResult:
        newest, _context = split(messages, DEFAULT)
        lower, utf8 = newest.lower(), newest.encode(errors="replace")
        ranked: list[tuple[float, _Card, list[str]]] = []
        for card in self.cards:
            if card.level != "L2":
                continue
            score, why = self._score(card, lower, utf8)
            if score > 0:
                ranked.append((score, card, why))
        ranked.sort(key=lambda item: (-item[0], item[1].name))
        # The ghost-loop rule demotes a ghost the message does not point at again; every card
        # ranked here is one it points at (a keyword, its name or a trigger), so none is demoted
        # and `history` is taken only for the full index's signature.
        taken = {c.group for c in self.cards if c.level == "L1" and c.group}
        routed: list[dict[str, Any]] = []
        for score, card, why in ranked:
            if not (card.group and card.group in taken) and len(routed) < k:
                if card.group:
                    taken.add(card.group)
                routed.append({"name": card.name, "score": score, "category": card.category, "why": "; ".join(why)})
        categories = list(dict.fromkeys(r["category"] for r in routed))
        return RouteResult(resident=list(self.resident), routed=routed, categories=categories, demoted=[])


_KEYWORD_INDEXES: "LRUCache[str, KeywordIndex]" = LRUCache(maxsize=64)
_lock = threading.Lock()


def keyword_index(content_hash: str, skills: list[dict[str, Any]]) -> KeywordIndex:
    """The keyword index of a version, kept per content hash (64 of them: each is small)."""
    with _lock:
        index = _KEYWORD_INDEXES.get(content_hash)
    if index is None:
        index = KeywordIndex(skills)
        with _lock:
            _KEYWORD_INDEXES[content_hash] = index
    return index
