"""A general bilingual lexicon of customer-service and workplace concepts (skills/lexicon.txt,
about 500 concepts).

Each line is one concept: English words (stemmed like core.text does) and Chinese words that
mean roughly the same. A word found in a card or a message also yields the concept's token
(`@n`), so "money back" meets "refund" and "退款", and "ran out" meets "expired". It is a
thesaurus, not a list of skills: nothing in it names a skill or a bundle, and a bundle routes
without it (it only adds recall for paraphrases). Multi-word English entries are matched as
stemmed word pairs.
"""

from pathlib import Path

LEXICON = Path(__file__).resolve().parent / "lexicon.txt"


def concept_lines() -> list[str]:
    """The concept lines of lexicon.txt, in order (a concept's token is its position)."""
    global _LINES
    if _LINES is None:
        lines = LEXICON.read_text(encoding="utf-8").splitlines()
        _LINES = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    return _LINES


_LINES: list[str] | None = None


def _build() -> dict[str, list[str]]:
    from core.text import stem

    table: dict[str, list[str]] = {}
    for number, line in enumerate(concept_lines()):
        for term in line.split():
            key = term if not term.isascii() else " ".join(stem(p) for p in term.lower().split("-"))
            table.setdefault(key, []).append(f"@{number}")
    return table


_TABLE: dict[str, list[str]] | None = None
_ENGLISH: dict[str, str] | None = None


_CJK_TERMS: list[str] | None = None


def cjk_terms_in(text: str) -> list[str]:
    """The lexicon's non-English terms found in `text` as substrings, longest first, each once:
    a Chinese phrase meets its concept even where the segmenter cut it differently (寄回去 holds
    寄回; 原路返回 inside 钱能不能原路返回). About 300 substring tests per message."""
    global _CJK_TERMS
    if _CJK_TERMS is None:
        if _TABLE is None:
            concepts([])
        assert _TABLE is not None
        _CJK_TERMS = sorted((t for t in _TABLE if not t.isascii() and len(t) >= 2), key=len, reverse=True)
    if text.isascii():
        return []
    return [term for term in _CJK_TERMS if term in text]


def english_of(words: list[str]) -> list[str]:
    """The English words of the concepts that the non-English `words` belong to, once each
    ("退款" -> "refund reimburse ..."): what the semantic path embeds for a Chinese message,
    since its model knows English only."""
    global _ENGLISH
    if _ENGLISH is None:
        lines = concept_lines()
        _ENGLISH = {
            f"@{n}": " ".join(t.replace("-", " ") for t in line.split() if t.isascii()) for n, line in enumerate(lines)
        }
    seen: dict[str, None] = {}
    for token in concepts([w for w in words if not w.isascii()]):
        seen.setdefault(token, None)
    return [_ENGLISH[t] for t in seen if _ENGLISH.get(t)]


def concepts(words: list[str]) -> list[str]:
    """The concept tokens of a word list (single words and adjacent English pairs)."""
    global _TABLE
    if _TABLE is None:
        _TABLE = _build()
    out: list[str] = []
    for i, word in enumerate(words):
        out.extend(_TABLE.get(word.lstrip("#"), ()) if not word.startswith("#") else ())
        if i + 1 < len(words):
            out.extend(_TABLE.get(f"{word} {words[i + 1]}", ()))
    return out
