"""Per-turn skill routing: pure, no Django, no database. See docs/skills.md for the method.

`index_for(content_hash, skills, embedder)` builds the index of a version's cards (with their
vectors) once per content hash and embedding model per process (content is immutable, so it
never goes stale); `Index.route(...)` ranks the routed (L2) skills for one turn, one method per
phase:

1. `_turn`: the query, the newest user message plus the last two turns before it at lower
   weights, so a follow-up such as "and the other one?" inherits the words of the turn it
   follows; the triggers that fire.
2. `_lexical`: BM25F over name, summary, keywords, examples (and the description at a low
   weight), normalised by the best score of the turn, plus a bonus for each of the skill's
   keywords found verbatim in the newest message (and a smaller one in the context).
3. `_semantic`: the cosine of the turn's vector with each card's (skills.semantic).
4. `_fuse`: z-scored lexical and semantic scores summed (`fusion`).
5. `_categories`: each category scores its best skill plus a share of its second best; the top
   category is chosen, and the second too when it is within `category_close` of the first, or
   when the top one's best candidate is below `category_floor` (the fallback, said in `why`).
6. `_rank`: skills of the chosen categories first; the rest follow at a discount, so a wrong
   category guess can still recover lower in the list; a firing trigger on top.
7. `_select`: a skill loaded in each of the last two reported turns and invoked in neither is
   dropped (the "ghost loop") unless the newest message points at it (names it, matches a
   trigger or one of its keywords); members of one exclusive group never appear together (nor
   with a resident member of their group).

Triggers are publisher-written regular expressions run on every turn's end-user text, so they
run on RE2 (core.patterns: linear time, the GIL released while it matches), never on Python's
backtracking `re`. Publishing refuses a trigger RE2 cannot run (registry.skills_content); a version
published before that rule with such a trigger still routes: the trigger is treated as never
matching, logged once when the index is built, and named in that skill's `why`.

Every tuning switch is a field of `skills.params.RouterParams`, which the index takes (the
service the defaults, the evaluation its variants); no module constant is rewritten at run time.
"""

import ctypes
import ctypes.util
import functools
import hashlib
import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from threading import Lock
from typing import Any

import numpy as np
from cachetools import LRUCache
from django.conf import settings

from core import patterns
from core.text import STOP, content_words, warm_up
from skills.embedding import Embedder
from skills.lexicon import cjk_terms_in, concepts, english_of
from skills.params import DEFAULT, RouterParams
from skills.semantic import SemanticIndex, description
from skills.turn_text import split as _split

__all__ = ["History", "Index", "RouteResult", "index_for"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class History:
    """What the database knows of the previous turns, newest first: names loaded (routed) per
    turn, and names invoked per turn (None when the turn was never reported)."""

    loaded: Sequence[frozenset[str]] = ()
    invoked: Sequence[frozenset[str] | None] = ()


@dataclass
class RouteResult:
    resident: list[str]
    routed: list[dict[str, Any]]
    categories: list[str]
    demoted: list[str] = field(default_factory=list)


@dataclass
class _Card:
    name: str
    category: str
    level: str
    group: str | None
    keywords: list["_Phrase"]  # lower-cased phrases, for exact matches
    triggers: list[Any]  # compiled RE2 patterns (core.patterns)
    skipped_triggers: int  # triggers RE2 cannot run (published before the rule): never match
    tf: dict[str, float]  # weighted term frequencies over the fields
    length: float


@dataclass
class _Turn:
    newest_lower: str
    context_lower: str
    query: dict[str, float]  # word -> weight
    english: list[tuple[str, float]]  # (text the offline model reads, weight), newest first
    raw: list[tuple[str, float]]  # (the text as written, weight): what an endpoint reads
    triggered: set[int]
    in_newest: set[str]  # the index's keywords found in the newest message
    cards_in_newest: set[int]  # the cards with one of those
    cards_in_context: set[int]  # the cards with a keyword found in the context


# A reason in a card's `why`: text, or (format, value) formatted only for the cards the route
# returns (of 100 cards, k are routed: formatting every card's scores was a tenth of the route).
Reason = str | tuple[str, float]


def _why(reasons: list[Reason]) -> str:
    return "; ".join(r if isinstance(r, str) else r[0] % r[1] for r in reasons)


@dataclass
class _Scored:
    score: float
    why: list[Reason]
    candidate: bool  # shares a word with the turn, or is semantically close enough


def _card_texts(skill: dict[str, Any], words_of: Callable[[str], list[str]], params: RouterParams) -> list[str]:
    head = f"{skill['name'].replace('_', ' ')}. {skill['summary']}"
    keywords = " ".join(skill["keywords"])
    texts = [head, _english_part(keywords, words_of(keywords), params)]
    texts += [_english_part(e, words_of(e), params) for e in (*skill["examples"], description(skill, params))]
    return [t for t in texts if t.strip()] or [head]


def _concepts(words: list[str], text: str, params: RouterParams) -> list[str]:
    """The concept tokens of a text: of its words, and (`cjk_substrings`) of the lexicon's Chinese
    terms found inside it, once each; none when the lexicon is off."""
    if not params.lexicon:
        return []
    tokens = concepts(words)
    if params.cjk_substrings and not text.isascii():
        tokens = list(dict.fromkeys([*tokens, *concepts(cjk_terms_in(text))]))
    return tokens


def _english_part(text: str, words: list[str], params: RouterParams = DEFAULT) -> str:
    """What the (English) semantic model reads of a text: its English words (stop words dropped
    when `semantic_drop_stop`), plus the English words of the lexicon concepts of its other words."""
    # the text's words with every non-ASCII character as a space (an ASCII text: its own words)
    ascii_words = text.split() if text.isascii() else "".join(ch if ch.isascii() else " " for ch in text).split()
    if params.semantic_drop_stop:
        ascii_words = [w for w in ascii_words if w.lower().strip(".,!?;:'\"()") not in STOP]
    if text.isascii():
        return " ".join(ascii_words)
    found = [*words, *cjk_terms_in(text)] if params.cjk_substrings else words
    crossing = english_of(found) if params.cross_lingual and params.lexicon else []
    return " ".join([*ascii_words, *crossing])


def _zsum(lexical: list[float], semantic: list[float], params: RouterParams) -> list[float]:
    def z(values: list[float]) -> Any:
        array = np.asarray(values, dtype=np.float64)
        std = float(array.std()) or 1.0
        return np.maximum(0.0, (array - array.mean()) / std)

    fused: list[float] = (z(lexical) + params.semantic_weight * z(semantic)).tolist()
    return fused


def _rrf(lexical: list[float], semantic: list[float], params: RouterParams) -> list[float]:
    k = params.rrf_k
    out = [0.0] * len(lexical)
    by_lex = sorted((i for i in range(len(lexical)) if lexical[i] > 0), key=lambda i: -lexical[i])
    for rank, i in enumerate(by_lex):
        out[i] += 1.0 / (k + rank + 1)
    for rank, i in enumerate(sorted(range(len(semantic)), key=lambda i: -semantic[i])):
        out[i] += params.semantic_weight / (k + rank + 1)
    return [v * k for v in out]


class _Phrase:
    """A keyword matched verbatim: on word boundaries when ASCII, as a substring otherwise.
    Compiled once per index (re's own cache holds 512 patterns: 100 skills would thrash it)."""

    __slots__ = ("text", "pattern")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pattern = re.compile(rf"(?<![a-z0-9]){re.escape(text)}(?![a-z0-9])") if text.isascii() else None

    def found_in(self, text: str) -> bool:
        if self.text not in text:  # cheap test first: most keywords are absent
            return False
        return self.pattern is None or self.pattern.search(text) is not None


def _keyword_table(cards: list[_Card]) -> tuple[dict[str, _Phrase], dict[str, list[int]]]:
    """Every keyword once (cards share many), and the cards that carry it: a turn looks each up
    once, not once per card and phase (docs/skills.md, the latency)."""
    phrases: dict[str, _Phrase] = {}
    cards_of: dict[str, list[int]] = {}
    for i, card in enumerate(cards):
        for kw in card.keywords:
            phrases[kw.text] = kw
            cards_of.setdefault(kw.text, []).append(i)
    return phrases, cards_of


class Index:
    def __init__(
        self, skills: list[dict[str, Any]], embedder: Embedder | None = None, params: RouterParams = DEFAULT
    ) -> None:
        self.params = params
        self.cards: list[_Card] = []
        self.resident: list[str] = []
        df: dict[str, int] = {}
        budget = [params.max_trigger_program_total]
        field_weights = dict(params.field_weights)
        words_of = functools.lru_cache(maxsize=None)(content_words)  # a text's words, once per build
        for skill in skills:
            if skill["level"] == "L1":
                self.resident.append(skill["name"])
            fields = {
                "name": skill["name"].replace("_", " "),
                "summary": skill["summary"],
                "keywords": " ".join(skill["keywords"]),
                "examples": " ".join(skill["examples"]),
                "description": description(skill, params),
                "category": skill["category"].replace("_", " "),
            }
            triggers, skipped = _triggers(skill, budget)
            tf: dict[str, float] = {}
            for key, text in fields.items():
                words = words_of(text)
                for word in words + _concepts(words, text, params):
                    tf[word] = tf.get(word, 0.0) + field_weights[key]
            for word in tf:
                df[word] = df.get(word, 0) + 1
            self.cards.append(
                _Card(
                    name=skill["name"],
                    category=skill["category"],
                    level=skill["level"],
                    group=skill.get("exclusive_group"),
                    keywords=[_Phrase(k.lower().strip()) for k in skill["keywords"] if k.strip()],
                    triggers=triggers,
                    skipped_triggers=skipped,
                    tf=tf,
                    length=sum(tf.values()),
                )
            )
        n = len(self.cards) or 1
        self.avg_length = sum(c.length for c in self.cards) / n or 1.0
        self.idf = {w: math.log(1 + (n - d + 0.5) / (d + 0.5)) for w, d in df.items()}
        self.by_name = {c.name: c for c in self.cards}
        self.phrases, self.phrase_cards = _keyword_table(self.cards)
        self.spaced_names = [(c.name, c.name.replace("_", " ")) for c in self.cards]
        self.semantic = (
            SemanticIndex(skills, [_card_texts(skill, words_of, params) for skill in skills], embedder, params)
            if params.semantic and skills
            else None
        )
        # Postings: word -> [(card index, weighted tf)], so a query touches only the cards sharing a word.
        self.postings: dict[str, list[tuple[int, float]]] = {}
        for i, card in enumerate(self.cards):
            for word, weight in card.tf.items():
                self.postings.setdefault(word, []).append((i, weight))

    def _bm25(self, query: dict[str, float]) -> list[float]:
        scores = [0.0] * len(self.cards)
        k1, b = self.params.k1, self.params.b
        for word, q_weight in query.items():
            postings = self.postings.get(word)
            if not postings:
                continue
            idf = self.idf[word]
            for i, tf in postings:
                norm = k1 * (1 - b + b * self.cards[i].length / self.avg_length)
                scores[i] += q_weight * idf * tf * (k1 + 1) / (tf + norm)
        return scores

    def route(self, messages: list[dict[str, str]], k: int = 5, history: History | None = None) -> RouteResult:
        """Rank the L2 skills for the conversation `messages` (role/content, oldest first; the
        newest user message is the one routed). Each phase is one method, in this order."""
        turn = self._turn(messages)
        lexical = self._lexical(turn)
        semantic = self._semantic(turn)
        fused = self._fuse(lexical, semantic)
        chosen, fallback = self._categories(fused)
        ranked = self._rank(turn, fused, chosen, fallback)
        demoted = self._ghosts(history or History()) - self._pointed(turn)
        routed, dropped = self._select(ranked, demoted, k)
        return RouteResult(resident=list(self.resident), routed=routed, categories=chosen, demoted=dropped)

    def _turn(self, messages: list[dict[str, Any]]) -> "_Turn":
        """Phase 1: the query (newest message and context, weighted) and the triggers that fire."""
        params = self.params
        newest, context = _split(messages, params)
        query: dict[str, float] = {}
        english: list[tuple[str, float]] = []
        raw: list[tuple[str, float]] = []
        for text, weight in [(newest, params.newest), *context]:
            words = content_words(text)
            for word in words:
                query[word] = max(query.get(word, 0.0), weight)
            for word in _concepts(words, text, params):
                query[word] = max(query.get(word, 0.0), weight * params.concept_weight)
            english.append((_english_part(text, words, params), weight))
            raw.append((text, weight))
        newest_utf8 = newest.encode(errors="replace")  # once (RE2 would encode a str per trigger); lone surrogates too
        triggered = {
            i for i, card in enumerate(self.cards) if any(t.search(newest_utf8) is not None for t in card.triggers)
        }
        newest_lower = newest.lower()
        context_lower = " ".join(t for t, _ in context).lower()
        in_newest = self._phrases_in(newest_lower)
        return _Turn(
            newest_lower=newest_lower,
            context_lower=context_lower,
            query=query,
            english=english,
            raw=raw,
            triggered=triggered,
            in_newest=in_newest,
            cards_in_newest={i for t in in_newest for i in self.phrase_cards[t]},
            cards_in_context={i for t in self._phrases_in(context_lower) for i in self.phrase_cards[t]},
        )

    def _phrases_in(self, text: str) -> set[str]:
        # `t in text` first: most keywords are absent, and it spares each of them a method call.
        return {t for t, phrase in self.phrases.items() if t in text and phrase.found_in(text)} if text else set()

    def _lexical(self, turn: "_Turn") -> list[tuple[float, list[Reason]]]:
        """Phase 2: BM25F normalised by the turn's best, plus the exact keyword bonus."""
        raw = self._bm25(turn.query)
        best = max(raw, default=0.0) or 1.0
        out: list[tuple[float, list[Reason]]] = []
        for i, card in enumerate(self.cards):
            score = raw[i] / best
            why: list[Reason] = [("bm25 %.2f", score)] if raw[i] else []
            hits = [kw.text for kw in card.keywords if kw.text in turn.in_newest] if i in turn.cards_in_newest else []
            if hits:
                score += self.params.keyword_bonus * min(len(hits), 3)
                why.append("keywords " + ", ".join(hits[:3]))
            elif i in turn.cards_in_context:
                score += self.params.keyword_bonus_context
                why.append("keywords in context")
            if i in turn.triggered:
                why.append("trigger")
            if card.skipped_triggers:
                why.append(f"{card.skipped_triggers} trigger(s) not run: RE2 cannot run them")
            out.append((score, why))
        return out

    def _semantic(self, turn: "_Turn") -> tuple[list[float], float] | None:
        """Phase 3: cosine of the turn's vector (newest message and context, weighted) with each
        card's, and the candidate floor; None when the semantic path is off or the turn has no
        text to embed."""
        if self.semantic is None:
            return None
        return self.semantic.scores(turn.english, turn.raw)

    def _fuse(
        self, lexical: list[tuple[float, list[Reason]]], cosines: tuple[list[float], float] | None
    ) -> list["_Scored"]:
        """Phase 4: one score per card from the lexical and semantic scores (`fusion`)."""
        if cosines is None:
            return [_Scored(score, why, score > 0) for score, why in lexical]
        semantic, floor = cosines
        lex = [score for score, _ in lexical]
        fuse = _zsum if self.params.fusion == "z" else _rrf
        fused = fuse(lex, semantic, self.params)
        out = []
        for i, (score, why) in enumerate(lexical):
            candidate = score > 0 or semantic[i] >= floor
            why.append(("semantic %.2f", semantic[i]))  # each card's own list, made by _lexical
            out.append(_Scored(fused[i], why, candidate))
        return out

    def _categories(self, fused: list["_Scored"]) -> tuple[list[str], str | None]:
        """Phase 5: the chosen categories (best skill plus a share of the second best; the second
        category too when close), and the category step's fallback: when the top category's best
        candidate scores below `category_floor`, the next category is tried too.
        Returns (chosen, the reason of a fallback or None)."""
        per_category: dict[str, list[float]] = {}
        for card, scored in zip(self.cards, fused, strict=True):
            if card.level == "L2" and scored.candidate:
                per_category.setdefault(card.category, []).append(scored.score)
        if not per_category:
            return [], None
        params = self.params
        category_scores = {}
        for category, values in per_category.items():
            top = sorted(values, reverse=True)[:2]
            category_scores[category] = top[0] + params.category_second_share * (top[1] if len(top) > 1 else 0.0)
        ranked = sorted(category_scores, key=lambda c: (-category_scores[c], c))
        first = ranked[0]
        if category_scores[first] <= 0:
            return [], None
        chosen = [first]
        if len(ranked) > 1 and category_scores[ranked[1]] >= params.category_close * category_scores[first]:
            chosen.append(ranked[1])
        best_first = max(per_category[first])
        if len(chosen) == 1 and len(ranked) > 1 and best_first < params.category_floor:
            chosen.append(ranked[1])
            return chosen, f"category {first} weak ({best_first:.2f}), also tried {ranked[1]}"
        return chosen, None

    def _rank(
        self, turn: "_Turn", fused: list["_Scored"], chosen: list[str], fallback: str | None
    ) -> list[tuple[float, int, list[Reason]]]:
        """Phase 6: the ranking of the L2 candidates: chosen categories first, others discounted,
        a firing trigger on top."""
        final: list[tuple[float, int, list[Reason]]] = []
        for i, card in enumerate(self.cards):
            scored = fused[i]
            if card.level != "L2" or (not scored.candidate and i not in turn.triggered):
                continue
            why = scored.why
            score = scored.score
            if card.category not in chosen:
                score *= self.params.other_category_factor
            elif fallback and card.category == chosen[-1]:
                why = [*why, fallback]
            if i in turn.triggered:
                score += 10.0  # a trigger puts the skill among this turn's routed skills
            final.append((score, i, why))
        final.sort(key=lambda item: (-item[0], self.cards[item[1]].name))
        return final

    def _select(
        self, ranked: list[tuple[float, int, list[Reason]]], demoted: set[str], k: int
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """Phase 7: the top k, without ghosts and without a second member of an exclusive group."""
        taken_groups = {c.group for c in self.cards if c.level == "L1" and c.group}
        routed: list[dict[str, Any]] = []
        dropped: list[str] = []
        for score, i, why in ranked:
            card = self.cards[i]
            if card.name in demoted:
                dropped.append(card.name)
                continue
            if card.group and card.group in taken_groups:
                continue
            if len(routed) >= k:
                break
            if card.group:
                taken_groups.add(card.group)
            routed.append(
                {
                    "name": card.name,
                    "score": round(score, 4),
                    "category": card.category,
                    "why": _why(why) or "context",
                }
            )
        return routed, dropped

    def _pointed(self, turn: "_Turn") -> set[str]:
        """Names the newest message points at: by name, by a trigger or by one of its keywords."""
        names = {self.cards[i].name for i in turn.triggered}
        names |= {self.cards[i].name for i in turn.cards_in_newest}
        for name, spaced in self.spaced_names:
            if name in turn.newest_lower or spaced in turn.newest_lower:
                names.add(name)
        return names

    @staticmethod
    def _ghosts(history: History) -> set[str]:
        """Loaded in each of the last two turns and invoked in neither, both turns reported."""
        if len(history.loaded) < 2 or len(history.invoked) < 2:
            return set()
        last, before = history.invoked[0], history.invoked[1]
        if last is None or before is None:
            return set()  # an unreported turn is no evidence either way
        return set((history.loaded[0] & history.loaded[1]) - last - before)


def _triggers(skill: dict[str, Any], budget: list[int]) -> tuple[list[Any], int]:
    """A card's triggers on RE2, case-insensitive, and how many were skipped: refused by
    core.patterns (published before triggers were checked at publish) or past the index's
    budget of instructions (`budget`, shared by the cards of one index). Logged once per index."""
    compiled: list[Any] = []
    skipped = 0
    for pattern in skill.get("triggers") or []:
        try:
            regexp = patterns.compile_bounded(pattern, patterns.TRIGGER, flags="(?i)")
        except patterns.PatternRefused as exc:
            logger.warning("skill %s: trigger %r never matches: %s", skill.get("name"), str(pattern)[:200], exc)
            skipped += 1
            continue
        size = patterns.program_size(regexp)
        if size > budget[0]:
            logger.warning("skill %s: trigger %r never matches: past the triggers' budget", skill.get("name"), pattern)
            skipped += 1
            continue
        budget[0] -= size
        compiled.append(regexp)
    return compiled, skipped


def index_bytes(index: Index) -> int:
    """About the memory an index holds, for the cache's byte budget (SKILL_INDEX_CACHE_BYTES):
    the card vectors as they are (numpy), and per posting, vocabulary word, card and card text
    what CPython spends on such an entry (measured with tracemalloc on the evaluation cards,
    rounded up). An estimate: it need not be exact, only grow with what an index holds."""
    postings = sum(len(entries) for entries in index.postings.values())
    size = 150 * postings + 250 * len(index.idf) + 6000 * len(index.cards)
    semantic = index.semantic
    if semantic is not None:
        for matrix in (semantic.local, semantic.pieces, semantic.remote_matrix):
            size += int(getattr(matrix, "nbytes", 0))
        size += sum(100 + 4 * len(text) for texts in semantic.raw_per_card for text in texts)
    return size


def _index_cache() -> "LRUCache[str, Index]":
    # Sized by bytes, not by count: 64 small indexes and 64 of 500 long cards differ a hundredfold.
    return LRUCache(maxsize=settings.SKILL_INDEX_CACHE_BYTES, getsizeof=index_bytes)


_INDEXES: "LRUCache[str, Index] | None" = None
_lock = Lock()


def _cache_key(content_hash: str, embedder: Embedder | None, params: RouterParams) -> str:
    key = f"{content_hash}:{getattr(embedder, 'name', 'local')}"
    return key if params == DEFAULT else key + ":" + hashlib.sha256(repr(params).encode()).hexdigest()[:32]


def _cached(key: str) -> Index | None:
    global _INDEXES
    with _lock:
        if _INDEXES is None or _INDEXES.maxsize != settings.SKILL_INDEX_CACHE_BYTES:
            _INDEXES = _index_cache()
        return _INDEXES.get(key)  # marks it recently used


def _keep(key: str, index: Index) -> None:
    with _lock:
        try:
            if _INDEXES is not None:
                _INDEXES[key] = index  # evicts the least recently used until the bytes fit
        except ValueError:
            pass  # larger than the whole budget alone: used for this call, not kept


def index_for(
    content_hash: str, skills: list[dict[str, Any]], embedder: Embedder | None = None, params: RouterParams = DEFAULT
) -> Index:
    """The index of a version's skills (card vectors included), built once per content hash,
    embedding model and parameters per process."""
    key = _cache_key(content_hash, embedder, params)
    index = _cached(key)
    if index is not None:
        return index
    # Building an index is the once-per-process moment: load the segmenter here too, so that
    # neither its dictionary nor the index build lands inside a turn's routing time.
    warm_up()
    index = Index(skills, embedder, params)
    _keep(key, index)
    _return_freed_heap()
    return index


def index_loaded(content_hash: str, embedder: Embedder | None, load: Callable[[], Index | None]) -> Index | None:
    """The index of the default parameters from this process's cache, or `load()`'s (one the
    worker built, skills.index_store), kept; None when neither has it. Never builds."""
    key = _cache_key(content_hash, embedder, DEFAULT)
    index = _cached(key)
    if index is None:
        index = load()
        if index is not None:
            _keep(key, index)
    return index


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    path = ctypes.util.find_library("c")
    try:
        trim: Callable[[int], int] | None = getattr(ctypes.CDLL(path), "malloc_trim", None) if path else None
    except OSError:
        return None
    return trim  # glibc only


def _return_freed_heap() -> None:
    """Give back to the system the heap an index build freed. Loading the models and building an
    index allocate and free some hundred thousand small objects, and glibc keeps those pages
    mapped: about 30 MB of a web worker's resident memory after its first route call
    (eval/routing/memory.py: 335 -> 305 MB). A few milliseconds, once per index build; nothing
    where the C library has no malloc_trim."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def indexes_cached() -> tuple[int, int]:
    """(indexes, bytes) in this process's cache."""
    with _lock:
        return (len(_INDEXES), int(_INDEXES.currsize)) if _INDEXES is not None else (0, 0)
