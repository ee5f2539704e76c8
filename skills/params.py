"""Every tuning switch of the router, in one frozen object (docs/skills.md, "Routing, per turn").

`RouterParams()` is what the service routes with; the evaluation (eval/routing/inprocess.py)
builds variants with `dataclasses.replace` and passes them to `skills.router.Index`, so nothing
rewrites a module constant at run time. The values were measured on the dev sets and the seen
splits (docs/skills.md, "Quality, measured"). Pure data: no Django, no numpy.
"""

from dataclasses import dataclass
from typing import Literal

__all__ = ["DEFAULT", "RouterParams"]


@dataclass(frozen=True)
class RouterParams:
    # BM25F (k1, b) and the field weights of a card.
    k1: float = 1.2
    b: float = 0.75
    field_weights: tuple[tuple[str, float], ...] = (
        ("name", 2.0),
        ("summary", 2.0),
        ("keywords", 2.5),
        ("examples", 1.0),
        ("description", 0.5),
        ("category", 0.5),
    )
    # Query weights of the newest message and of the turns before it.
    newest: float = 1.0
    context_user: tuple[float, ...] = (0.5, 0.3)  # previous user message, the one before
    context_assistant: tuple[float, ...] = (0.25, 0.15)
    # The bilingual lexicon (skills/lexicon.txt): its concept tokens in the query and the cards,
    # its Chinese terms also matched as substrings, its English words for the English-only model.
    lexicon: bool = True
    concept_weight: float = 0.8  # a lexicon concept counts less than the word itself
    cjk_substrings: bool = True
    cross_lingual: bool = True
    semantic_drop_stop: bool = False  # dropping stop words before embedding: measured worse
    keyword_bonus: float = 0.35
    keyword_bonus_context: float = 0.1
    # The category step.
    category_close: float = 0.8  # the second category is kept at this share of the first
    category_second_share: float = 0.3
    other_category_factor: float = 0.75
    category_floor: float = 3.0  # below it (fused units), the next category is tried too
    # The semantic path and the fusion: "z" sums z-scores (the semantic one weighted), "rrf"
    # sums reciprocal ranks 1/(rrf_k + rank).
    semantic: bool = True
    fusion: Literal["z", "rrf"] = "z"
    semantic_weight: float = 1.5
    rrf_k: int = 60
    # A card with no shared word is a candidate from this cosine (a configured model, or the
    # English-only model alone), or from piece_floor once the distilled e5's cosine is in.
    semantic_floor: float = 0.3
    piece_floor: float = 0.15
    # Offline, the share of the distilled e5's cosine in the semantic score (the rest: the
    # English-only WordLlama's). 1.0 never loads WordLlama; 0.0 never loads the distilled e5.
    piece_blend: float = 0.5
    # Bounds: text looked at per message, per card description, and RE2 instructions of all the
    # triggers of one index (registry.skills_content.MAX_TRIGGER_PROGRAM_TOTAL at publish).
    max_message_chars: int = 4000
    max_description_chars: int = 1000
    max_trigger_program_total: int = 20_000

    def field_weight(self, name: str) -> float:
        return dict(self.field_weights)[name]


DEFAULT = RouterParams()
