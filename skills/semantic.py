"""The router's semantic path: card vectors (built once per index) and each turn's cosines with
them, from the two offline models blended, or from a configured endpoint while it answers
(docs/skills.md, "The semantic path"). Pure, like skills.router: no Django, no database.

Its switches are fields of skills.params.RouterParams: `piece_blend` (the share of the distilled
e5's cosine offline; 0.5 and 0.7 measured alike on the seen sets, 1.0, without WordLlama,
worse), `piece_floor` (the candidate floor once the distilled model's cosine is in: its rows are
centred and have no language axis, so unrelated texts meet near 0 and a reworded message its
card at about 0.22; 0.15 routed the same seen turns as 0.10 and 0.12 and the least junk),
`semantic_floor` (the floor of WordLlama alone or an endpoint) and `max_description_chars` (of
a card's description, the part routing reads: it bounds the index build, which jieba's cut
dominates on Chinese text; 500 cards of 4,000-ideograph descriptions took 48 s of CPU, 11 s at
1,000 characters; no evaluation card's description is longer than 331)."""

from typing import Any

import numpy as np

from skills.embedding import Embedder, Endpoint, local_model, piece_model
from skills.params import DEFAULT, RouterParams


class SemanticIndex:
    """Card vectors, computed once per index (so once per content hash per process): each card's
    vector is the mean of the vectors of its name and summary, its keywords, each example and its
    description.
    The offline models' vectors always (those `piece_blend` gives a share); a configured
    endpoint's too when it answered.

    Offline, a card's semantic score is the blend of two cosines (`piece_blend`): WordLlama's, which
    reads English only and so gets the English part of each text (with the lexicon's English
    words for Chinese ones), and the distilled e5's (skills.embedding.PieceModel), which reads
    every language and gets the texts as written. A configured model is there for a team's own,
    perhaps multilingual, model; it gets the texts as written and, while it answers, its cosine
    alone is the score."""

    def __init__(
        self,
        skills: list[dict[str, Any]],
        english_per_card: list[list[str]],
        embedder: Embedder | None,
        params: RouterParams = DEFAULT,
    ) -> None:
        # english_per_card: what WordLlama reads of each card (skills.router)
        self.params = params
        self.blend = min(max(params.piece_blend, 0.0), 1.0)
        self.local: Any = None
        self.pieces: Any = None
        if self.blend < 1.0:  # WordLlama has a share: loaded (once per process)
            self.local = pool(local_model().embed(flat(english_per_card)), english_per_card)
        self.raw_per_card = [card_raw_texts(skill, params) for skill in skills]
        if self.blend > 0.0:
            self.pieces = pool(piece_model().embed(flat(self.raw_per_card)), self.raw_per_card)
        self.remote = embedder if isinstance(embedder, Endpoint) else None
        self.remote_matrix: Any = None
        self._remote_cards()

    def _remote_cards(self) -> None:
        # Card vectors from the configured model, at build, or at the first turn after an
        # endpoint recovers.
        if self.remote is not None and self.remote_matrix is None and self.remote.available():
            vectors = self.remote.embed_cards(flat(self.raw_per_card))
            if vectors is not None:
                self.remote_matrix = pool(vectors, self.raw_per_card)

    def scores(
        self, english: list[tuple[str, float]], raw: list[tuple[str, float]]
    ) -> tuple[list[float], float] | None:
        """Each card's cosine with the turn, and the cosine that makes a card a candidate with no
        shared word (`semantic_floor`, or `piece_floor` once the distilled model's cosine is in)."""
        found = self.score_array(english, raw)
        return None if found is None else (found[0].tolist(), found[1])

    def score_array(self, english: list[tuple[str, float]], raw: list[tuple[str, float]]) -> tuple[Any, float] | None:
        """`scores` as a numpy array (float64: each float32 cosine widened, then blended)."""
        params = self.params
        self._remote_cards()
        if self.remote is not None and self.remote_matrix is not None:
            found = cosines(self.remote_matrix, weighted(raw, self.remote.embed_turn))
            if found is not None:
                return found, params.semantic_floor
        words = cosines(self.local, weighted(english, local_model().embed)) if self.local is not None else None
        pieces = cosines(self.pieces, weighted(raw, piece_model().embed)) if self.pieces is not None else None
        if pieces is None:
            return (words, params.semantic_floor) if words is not None else None
        if words is None:
            return pieces, params.piece_floor
        blend = self.blend
        return (1 - blend) * words + blend * pieces, params.piece_floor


def flat(texts_per_card: list[list[str]]) -> list[str]:
    return [t for texts in texts_per_card for t in texts]


def weighted(parts: list[tuple[str, float]], embed: Any) -> Any:
    """The weighted mean vector of the non-empty texts (None: no text, or `embed` gave none)."""
    parts = [(t, w) for t, w in parts if t.strip()]
    if not parts:
        return None
    vectors = embed([t for t, _ in parts])
    if vectors is None:
        return None
    query = np.array([w for _, w in parts], dtype=np.float32) @ vectors
    norm = float(np.linalg.norm(query))
    return query / norm if norm else None


def cosines(matrix: Any, query: Any) -> Any:
    """Each card's cosine (float32) widened to float64, or None without a query vector."""
    return None if query is None else (matrix @ query).astype(np.float64)


def card_raw_texts(skill: dict[str, Any], params: RouterParams = DEFAULT) -> list[str]:
    """A card's texts as written, for the distilled model and a configured one (every language
    its keywords and examples use): the name and summary, the keywords, each example, and the
    description, which names the situations the skill is for (measured: +0.4 points of hit@5 on
    the seen splits; docs/skills.md)."""
    head = f"{skill['name'].replace('_', ' ')}. {skill['summary']}"
    texts = [head, " ".join(skill["keywords"]), *skill["examples"], description(skill, params)]
    return [t for t in texts if t.strip()]


def description(skill: dict[str, Any], params: RouterParams = DEFAULT) -> str:
    return str(skill["description"])[: params.max_description_chars]


def pool(vectors: Any, texts_per_card: list[list[str]]) -> Any:
    rows = []
    start = 0
    for texts in texts_per_card:
        row = vectors[start : start + len(texts)].mean(axis=0)
        norm = float(np.linalg.norm(row))
        rows.append(row / norm if norm else row)
        start += len(texts)
    return np.stack(rows) if rows else np.zeros((0, 1), dtype=np.float32)
