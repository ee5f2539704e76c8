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
5. `categories` (skills.route_arrays): each category scores its best skill plus a share of its
   second best; the top category is chosen, and the second too when it is within
   `category_close` of the first, or when the top one's best candidate is below
   `category_floor` (the fallback, said in `why`).
6. `rank_order` (there): skills of the chosen categories first; the rest at a discount, so a
   wrong category guess can still recover lower in the list; a firing trigger on top.
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
from skills import route_arrays
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


@dataclass(frozen=True)
class _Lexical:
    raw: Any  # numpy, per card: BM25F
    normalised: Any  # by the turn's best
    score: Any  # normalised plus the keyword bonus
    hits: dict[int, list[str]]  # card -> its keywords found in the newest message


@dataclass(frozen=True)
class _Ranked:
    """What phases 1 to 6 made of one routed text that phase 7 reads; read, never changed, by
    each route of it. Not the turn's query, texts or vectors: kept per text, those grew with
    what a user wrote (five messages of 4,000 characters of new words: 300 kB an entry, not 6 kB)."""

    newest_lower: str  # what the newest message names (_pointed)
    triggered: frozenset[int]
    cards_in_newest: frozenset[int]
    cards_in_context: frozenset[int]
    lexical: _Lexical
    semantic: tuple[Any, float] | None  # numpy cosines per card, and the candidate floor
    chosen: list[str]
    fallback: str | None
    order: Any  # numpy: the L2 candidates (and firing triggers), best first
    final: Any  # their final scores, in that order


def _card_texts(skill: dict[str, Any], words_of: Callable[[str], list[str]], params: RouterParams) -> list[str]:
    head = f"{skill['name'].replace('_', ' ')}. {skill['summary']}"
    keywords = " ".join(skill["keywords"])
    texts = [head, _english_part(keywords, words_of(keywords), params)]
    texts += [_english_part(e, words_of(e), params) for e in (*skill["examples"], description(skill, params))]
    return [t for t in texts if t.strip()] or [head]


def _concepts(words: list[str], text: str, params: RouterParams, cjk: list[str] | None = None) -> list[str]:
    """The concept tokens of a text: of its words, and (`cjk_substrings`) of the lexicon's Chinese
    terms found inside it (`cjk`, when the caller has them), once each; none when the lexicon is off."""
    if not params.lexicon:
        return []
    tokens = concepts(words)
    if params.cjk_substrings and not text.isascii():
        tokens = list(dict.fromkeys([*tokens, *concepts(cjk_terms_in(text) if cjk is None else cjk)]))
    return tokens


def _english_part(text: str, words: list[str], params: RouterParams = DEFAULT, cjk: list[str] | None = None) -> str:
    """What the (English) semantic model reads of a text: its English words (stop words dropped
    when `semantic_drop_stop`), plus the English words of the lexicon concepts of its other words."""
    # the text's words with every non-ASCII character as a space (an ASCII text: its own words)
    ascii_words = text.split() if text.isascii() else "".join(ch if ch.isascii() else " " for ch in text).split()
    if params.semantic_drop_stop:
        ascii_words = [w for w in ascii_words if w.lower().strip(".,!?;:'\"()") not in STOP]
    if text.isascii():
        return " ".join(ascii_words)
    found = [*words, *(cjk_terms_in(text) if cjk is None else cjk)] if params.cjk_substrings else words
    crossing = english_of(found) if params.cross_lingual and params.lexicon else []
    return " ".join([*ascii_words, *crossing])


def _zsum(lexical: Any, semantic: Any, params: RouterParams) -> Any:
    def z(values: Any) -> Any:
        # numpy's mean and std, the same operations in the same order (a sum over the array, /n;
        # the deviations squared, summed, /n, square root), the deviations computed once.
        array = np.asarray(values, dtype=np.float64)
        deviations = array - np.add.reduce(array) / len(array)
        std = math.sqrt(np.add.reduce(deviations * deviations) / len(array)) or 1.0
        return np.maximum(0.0, deviations / std)

    return z(lexical) + params.semantic_weight * z(semantic)


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
        self.prepare()

    def prepare(self) -> None:
        """What routing derives from the cards and postings, once per index (here and after
        skills.index_store.restore): the arrays, and the routed texts kept (`_scored`)."""
        self.arrays = route_arrays.CardArrays(self)
        self.phrase_finder = route_arrays.PhraseFinder(self.phrases)
        self.resident_groups = frozenset(c.group for c in self.cards if c.level == "L1" and c.group)
        self._turns = route_arrays.KeptTexts(len(self.cards))

    def route(self, messages: list[dict[str, str]], k: int = 5, history: History | None = None) -> RouteResult:
        """Rank the L2 skills for the conversation `messages` (role/content, oldest first; the
        newest user message is the one routed). Phases 1 to 6 (`_scored`) depend on the routed
        text alone; phase 7 (`_select`) on the history and k."""
        newest, context = _split(messages, self.params)
        scored = self._scored(newest, context)
        demoted = self._ghosts(history or History())
        if demoted:
            demoted -= self._pointed(scored)
        routed, dropped = self._select(scored, demoted, k)
        return RouteResult(resident=list(self.resident), routed=routed, categories=list(scored.chosen), demoted=dropped)

    def _scored(self, newest: str, context: list[tuple[str, float]]) -> "_Ranked":
        """Phases 1 to 6, kept per routed text (the newest message and its context) when the
        offline models score (a configured endpoint's answer may change between calls): an
        agent's every model call within one user message routes the same text again."""
        key = route_arrays.KeptTexts.key(newest, context)
        keep = self.semantic is None or self.semantic.remote is None
        if keep:
            hit: _Ranked | None = self._turns.get(key)
            if hit is not None:
                return hit
        turn = self._turn(newest, context)
        lexical = self._lexical(turn)
        semantic = self._semantic(turn)
        fused, candidate = self._fuse(lexical, semantic)
        chosen, fallback = route_arrays.categories(self.arrays, fused, candidate, self.params)
        triggered = np.zeros(self.arrays.n, dtype=bool)
        triggered[list(turn.triggered)] = True
        order, final = route_arrays.rank_order(self.arrays, fused, candidate, triggered, chosen, self.params)
        sets = (frozenset(turn.triggered), frozenset(turn.cards_in_newest), frozenset(turn.cards_in_context))
        ranked = _Ranked(turn.newest_lower, *sets, lexical, semantic, chosen, fallback, order, final)
        if keep:
            self._turns.put(key, ranked)
        return ranked

    def forget_turns(self) -> None:
        """Drop the routed texts kept (bench/route.py: each timed turn a new message)."""
        self._turns.clear()

    def _turn(self, newest: str, context: list[tuple[str, float]]) -> "_Turn":
        """Phase 1: the query (newest message and context, weighted) and the triggers that fire."""
        params = self.params
        query: dict[str, float] = {}
        english: list[tuple[str, float]] = []
        raw: list[tuple[str, float]] = []
        for text, weight in [(newest, params.newest), *context]:
            words = content_words(text)
            # the lexicon's terms in a non-ASCII text: some 2,000 substring tests, once, not twice
            cjk = cjk_terms_in(text) if params.cjk_substrings and not text.isascii() else None
            for word in words:
                query[word] = max(query.get(word, 0.0), weight)
            for word in _concepts(words, text, params, cjk):
                query[word] = max(query.get(word, 0.0), weight * params.concept_weight)
            english.append((_english_part(text, words, params, cjk), weight))
            raw.append((text, weight))
        newest_utf8 = newest.encode(errors="replace")  # once (RE2 would encode a str per trigger); lone surrogates too
        triggered = {i for i, trigger in self.arrays.triggers if trigger.search(newest_utf8) is not None}
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
        return self.phrase_finder.found_in(text)

    def _lexical(self, turn: "_Turn") -> "_Lexical":
        """Phase 2: BM25F normalised by the turn's best, plus the exact keyword bonus."""
        raw = route_arrays.bm25(self.arrays, turn.query, self.idf, self.params)
        best = float(raw.max(initial=0.0)) or 1.0
        normalised = raw / best
        bonus = np.zeros(self.arrays.n, dtype=np.float64)
        hits: dict[int, list[str]] = {}
        for i in turn.cards_in_newest:
            found = [kw.text for kw in self.cards[i].keywords if kw.text in turn.in_newest]
            if found:
                hits[i] = found
                bonus[i] = self.params.keyword_bonus * min(len(found), 3)
        for i in turn.cards_in_context - hits.keys():
            bonus[i] = self.params.keyword_bonus_context
        return _Lexical(raw, normalised, normalised + bonus, hits)

    def _semantic(self, turn: "_Turn") -> tuple[Any, float] | None:
        """Phase 3: cosine of the turn's vector (newest message and context, weighted) with each
        card's, and the candidate floor; None when the semantic path is off or the turn has no
        text to embed."""
        if self.semantic is None:
            return None
        return self.semantic.score_array(turn.english, turn.raw)

    def _fuse(self, lexical: "_Lexical", cosines: tuple[Any, float] | None) -> tuple[Any, Any]:
        """Phase 4: one score per card from the lexical and semantic scores (`fusion`), and
        which cards are candidates (a shared word, or semantically close enough)."""
        if cosines is None:
            return lexical.score, lexical.score > 0
        semantic, floor = cosines
        if self.params.fusion == "z":
            fused = _zsum(lexical.score, semantic, self.params)
        else:
            fused = np.asarray(_rrf(lexical.score.tolist(), semantic.tolist(), self.params), dtype=np.float64)
        return fused, (lexical.score > 0) | (semantic >= floor)

    def _reasons(self, ranked: "_Ranked", i: int) -> list[Reason]:
        """A routed card's `why`, in the order the phases give their reasons."""
        card, lexical = self.cards[i], ranked.lexical
        why: list[Reason] = [("bm25 %.2f", float(lexical.normalised[i]))] if lexical.raw[i] else []
        hits = lexical.hits.get(i)
        if hits:
            why.append("keywords " + ", ".join(hits[:3]))
        elif i in ranked.cards_in_context:
            why.append("keywords in context")
        if i in ranked.triggered:
            why.append("trigger")
        if card.skipped_triggers:
            why.append(f"{card.skipped_triggers} trigger(s) not run: RE2 cannot run them")
        if ranked.semantic is not None:
            why.append(("semantic %.2f", float(ranked.semantic[0][i])))
        if ranked.fallback and card.category == ranked.chosen[-1]:
            why.append(ranked.fallback)
        return why

    def _select(self, ranked: "_Ranked", demoted: set[str], k: int) -> tuple[list[dict[str, Any]], list[str]]:
        """Phase 7: the top k, without ghosts and without a second member of an exclusive group."""
        taken_groups = set(self.resident_groups)
        routed: list[dict[str, Any]] = []
        dropped: list[str] = []
        for i, score in zip(ranked.order.tolist(), ranked.final.tolist(), strict=True):
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
                    "why": _why(self._reasons(ranked, i)) or "context",
                }
            )
        return routed, dropped

    def _pointed(self, ranked: "_Ranked") -> set[str]:
        """Names the newest message points at: by name, by a trigger or by one of its keywords."""
        names = {self.cards[i].name for i in ranked.triggered}
        names |= {self.cards[i].name for i in ranked.cards_in_newest}
        for name, spaced in self.spaced_names:
            if name in ranked.newest_lower or spaced in ranked.newest_lower:
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
    size = 150 * postings + 250 * len(index.idf) + 6000 * len(index.cards) + index.arrays.nbytes()
    size += route_arrays.kept_bytes(len(index.cards))  # the routed texts kept, when full
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
