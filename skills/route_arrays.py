"""The router's per-card arithmetic over numpy arrays (skills.router): what an index knows of its
cards as arrays, built once per index (so once per content hash per process), and the phases
that used to loop over the cards in Python.

Every float is computed with the same operations in the same order as the loops they replace
(elementwise numpy is IEEE-exact like Python's float; `np.bincount` adds a card's postings in
their order, from 0.0), so scores, and therefore every ranking, are bit-identical:
eval/routing/same_routes.py compares every routed list of every evaluation set with the
loops'. Pure, like skills.router: no Django, no database.
"""

import hashlib
import marshal
import re
import sys
from threading import Lock
from typing import Any

import numpy as np
from cachetools import LRUCache

from skills.params import RouterParams

__all__ = ["CardArrays", "KeptTexts", "PhraseFinder", "bm25", "categories", "kept_bytes", "rank_order"]

_RUN = re.compile(r"[a-z0-9]+")

# Routed texts (a newest message and its context) whose phases 1 to 6 an index keeps (a memory
# bound, not a tuning: a kept text routes as it did): an agent routes the same text once per
# model call until its user writes again.
TURNS_KEPT = 128


def kept_bytes(cards: int) -> int:
    """The bytes an index of `cards` cards may spend on the routed texts it keeps (a share of
    skills.router.index_bytes): TURNS_KEPT entries of the usual size."""
    return TURNS_KEPT * (2500 + 48 * cards)


class KeptTexts:
    """What an index keeps of the texts it routed (skills.router._Ranked, phases 1 to 6 of each),
    least recently used out first, bounded by bytes (`kept_bytes`), not by count: an entry's
    size grows with its newest message and its keyword hits. Keyed by a digest, so an entry does
    not hold the texts (up to five messages of 4,000 characters). Web workers run threads: every
    read and write of the cache under the lock; an entry is never changed once kept."""

    __slots__ = ("cards", "_entries", "_lock")

    def __init__(self, cards: int) -> None:
        self.cards = cards
        self._entries: LRUCache[bytes, Any] = LRUCache(maxsize=kept_bytes(cards), getsizeof=self.size)
        self._lock = Lock()

    @staticmethod
    def key(newest: str, context: list[tuple[str, float]]) -> bytes:
        # marshal: one C call, any str (lone surrogates too), and its version 2 writes equal
        # values as equal bytes whatever objects they share (3 us, a tuple's hash 0.6 us).
        return hashlib.blake2b(marshal.dumps((newest, context), 2), digest_size=16).digest()

    def size(self, ranked: Any) -> int:
        """About the bytes an entry holds (tracemalloc on the evaluation cards, rounded up): its
        arrays per card, its sets and keyword hits, its newest message lower-cased."""
        sets = len(ranked.triggered) + len(ranked.cards_in_newest) + len(ranked.cards_in_context)
        hits = sum(100 + 8 * len(found) for found in ranked.lexical.hits.values())
        return 2000 + 48 * self.cards + 64 * sets + hits + sys.getsizeof(ranked.newest_lower)

    def get(self, key: bytes) -> Any:
        with self._lock:
            return self._entries.get(key)  # marks it recently used

    def put(self, key: bytes, ranked: Any) -> None:
        with self._lock:
            try:
                self._entries[key] = ranked  # evicts the least recently used until the bytes fit
            except ValueError:
                pass  # larger than the whole share alone: used for its call, not kept

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


class PhraseFinder:
    """The index's keywords found verbatim in a text (`Index._phrases_in`), without testing each
    of some hundreds of keywords: an ASCII keyword matches on word boundaries, so where it
    starts with a letter or digit, the text has that keyword's first run of letters and digits
    as one of its own runs; only the keywords of the text's runs are tested, plus the others
    (non-ASCII, or starting with a sign), each as before."""

    __slots__ = ("by_run", "others")

    def __init__(self, phrases: dict[str, Any]) -> None:
        self.by_run: dict[str, list[tuple[str, Any]]] = {}
        self.others: list[tuple[str, Any]] = []
        for text, phrase in phrases.items():
            run = _RUN.match(text) if phrase.pattern is not None else None
            if run is None:
                self.others.append((text, phrase))
            else:
                self.by_run.setdefault(run.group(), []).append((text, phrase))

    def found_in(self, text: str) -> set[str]:
        if not text:
            return set()
        found = {t for t, phrase in self.others if t in text and phrase.found_in(text)}
        for run in set(_RUN.findall(text)):
            for t, phrase in self.by_run.get(run, ()):
                if phrase.found_in(text):
                    found.add(t)
        return found


class CardArrays:
    """Per index: each word's postings as arrays (card numbers, weighted tf, tf + the card's
    length norm), the L2 mask, each card's category number and name rank, and the triggers
    (card number, pattern) of the cards that have any."""

    __slots__ = (
        "n",
        "postings",
        "l2",
        "l2_list",
        "categories",
        "category_of",
        "category_names",
        "name_rank",
        "triggers",
    )

    def __init__(self, index: Any) -> None:
        cards, params = index.cards, index.params
        self.n = len(cards)
        k1, b = params.k1, params.b
        # The norm exactly as the loop computed it per posting: k1 * (1 - b + b * length / avg).
        norms = [k1 * (1 - b + b * card.length / index.avg_length) for card in cards]
        self.postings: dict[str, tuple[Any, Any, Any]] = {}
        for word, entries in index.postings.items():
            numbers = [i for i, _ in entries]
            tfs = [tf for _, tf in entries]
            self.postings[word] = (
                np.array(numbers, dtype=np.intp),
                np.array(tfs, dtype=np.float64),
                np.array([tf + norms[i] for i, tf in entries], dtype=np.float64),
            )
        self.l2_list = [card.level == "L2" for card in cards]
        self.l2 = np.array(self.l2_list, dtype=bool)
        self.categories = [card.category for card in cards]
        self.category_names = sorted({card.category for card in cards})
        number = {name: i for i, name in enumerate(self.category_names)}
        self.category_of = np.array([number[card.category] for card in cards], dtype=np.intp)
        names = sorted({card.name for card in cards})  # ties (one name twice) keep card order
        rank = {name: i for i, name in enumerate(names)}
        self.name_rank = np.array([rank[card.name] for card in cards], dtype=np.intp)
        self.triggers = [(i, t) for i, card in enumerate(cards) for t in card.triggers]

    def nbytes(self) -> int:
        arrays = sum(int(a.nbytes + b.nbytes + c.nbytes) + 300 for a, b, c in self.postings.values())
        return arrays + 40 * self.n


def bm25(arrays: CardArrays, query: dict[str, float], idf: dict[str, float], params: RouterParams) -> Any:
    """BM25F of every card: per posting q * idf * tf * (k1 + 1) / (tf + norm), summed per card in
    the query's word order (what `Index._bm25` summed in a loop)."""
    numbers, tfs, dens, scales, counts = [], [], [], [], []
    for word, q_weight in query.items():
        found = arrays.postings.get(word)
        if found is None:
            continue
        numbers.append(found[0])
        tfs.append(found[1])
        dens.append(found[2])
        scales.append(q_weight * idf[word])
        counts.append(len(found[0]))
    if not numbers:
        return np.zeros(arrays.n, dtype=np.float64)
    parts = np.repeat(scales, counts) * np.concatenate(tfs) * (params.k1 + 1) / np.concatenate(dens)
    return np.bincount(np.concatenate(numbers), weights=parts, minlength=arrays.n)


def categories(arrays: CardArrays, fused: Any, candidate: Any, params: RouterParams) -> tuple[list[str], str | None]:
    """The category step (`Index._categories`): each category of L2 candidates scores its best
    plus a share of its second best; the first, the second when close, the fallback."""
    # a loop over plain lists: for some hundred cards, cheaper than numpy's calls
    per_category: dict[str, list[float]] = {}
    for category, is_l2, is_candidate, value in zip(
        arrays.categories, arrays.l2_list, candidate.tolist(), fused.tolist(), strict=True
    ):
        if is_l2 and is_candidate:
            per_category.setdefault(category, []).append(value)
    if not per_category:
        return [], None
    scores = {}
    for category, values in per_category.items():
        top = sorted(values, reverse=True)[:2]
        scores[category] = top[0] + params.category_second_share * (top[1] if len(top) > 1 else 0.0)
    ranked = sorted(scores, key=lambda c: (-scores[c], c))
    first = ranked[0]
    if scores[first] <= 0:
        return [], None
    chosen = [first]
    if len(ranked) > 1 and scores[ranked[1]] >= params.category_close * scores[first]:
        chosen.append(ranked[1])
    best_first = max(per_category[first])
    if len(chosen) == 1 and len(ranked) > 1 and best_first < params.category_floor:
        chosen.append(ranked[1])
        return chosen, f"category {first} weak ({best_first:.2f}), also tried {ranked[1]}"
    return chosen, None


def rank_order(
    arrays: CardArrays, fused: Any, candidate: Any, triggered: Any, chosen: list[str], params: RouterParams
) -> tuple[Any, Any]:
    """The L2 candidates (and firing triggers) by final score, best first, ties by name then card
    order (`Index._rank`'s stable sort): other categories discounted, a trigger plus 10."""
    final = fused.copy()
    other = np.ones(arrays.n, dtype=bool)
    for name in chosen:
        other &= arrays.category_of != arrays.category_names.index(name)
    final[other] *= params.other_category_factor
    final[triggered] += 10.0  # a trigger puts the skill among this turn's routed skills
    kept = np.flatnonzero(arrays.l2 & (candidate | triggered))
    order = kept[np.lexsort((arrays.name_rank[kept], -final[kept]))]
    return order, final[order]
