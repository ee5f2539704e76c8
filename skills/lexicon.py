"""A general bilingual lexicon of customer-service and workplace concepts (skills/lexicon.txt,
about 500 concepts).

Each line is one concept: English words (stemmed like core.text does) and Chinese words that
mean roughly the same. A word found in a card or a message also yields the concept's token
(`@n`), so "money back" meets "refund" and "退款", and "ran out" meets "expired". It is a
thesaurus, not a list of skills: nothing in it names a skill or a bundle, and a bundle routes
without it (it only adds recall for paraphrases). Multi-word English entries are matched as
stemmed word pairs.
"""

import functools
from pathlib import Path

LEXICON = Path(__file__).resolve().parent / "lexicon.txt"

# Each table below is built once per process and source file, at its first use (functools.cache).
# The router reads LEXICON; a test gives another file as `source`.


@functools.cache
def concept_lines(source: Path = LEXICON) -> list[str]:
    """The concept lines of lexicon.txt, in order (a concept's token is its position)."""
    lines = source.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


@functools.cache
def _table(source: Path = LEXICON) -> dict[str, list[str]]:
    """Term (English stemmed, pairs joined by a space) -> the tokens of the concepts holding it."""
    from core.text import stem

    table: dict[str, list[str]] = {}
    for number, line in enumerate(concept_lines(source)):
        for term in line.split():
            key = term if not term.isascii() else " ".join(stem(p) for p in term.lower().split("-"))
            table.setdefault(key, []).append(f"@{number}")
    return table


@functools.cache
def _cjk_terms(source: Path = LEXICON) -> list[str]:
    return sorted((t for t in _table(source) if not t.isascii() and len(t) >= 2), key=len, reverse=True)


@functools.cache
def _english(source: Path = LEXICON) -> dict[str, str]:
    lines = concept_lines(source)
    return {f"@{n}": " ".join(t.replace("-", " ") for t in line.split() if t.isascii()) for n, line in enumerate(lines)}


@functools.cache
def _cjk_by_pair(source: Path = LEXICON) -> dict[str, list[tuple[int, str]]]:
    """The terms of _cjk_terms by their first two characters, each with its position there."""
    by_pair: dict[str, list[tuple[int, str]]] = {}
    for position, term in enumerate(_cjk_terms(source)):
        by_pair.setdefault(term[:2], []).append((position, term))
    return by_pair


def cjk_terms_in(text: str, source: Path = LEXICON) -> list[str]:
    """The lexicon's non-English terms found in `text` as substrings, longest first, each once:
    a Chinese phrase meets its concept even where the segmenter cut it differently (寄回去 holds
    寄回; 原路返回 inside 钱能不能原路返回). Only the terms whose first two characters are two
    adjacent characters of the text are tested (of some 2,000), then put back in their order."""
    if text.isascii():
        return []
    by_pair = _cjk_by_pair(source)
    pairs = {text[i : i + 2] for i in range(len(text) - 1)} & by_pair.keys()
    found = [entry for pair in pairs for entry in by_pair[pair] if entry[1] in text]
    return [term for _, term in sorted(found)]


def english_of(words: list[str], source: Path = LEXICON) -> list[str]:
    """The English words of the concepts that the non-English `words` belong to, once each
    ("退款" -> "refund reimburse ..."): what the semantic path embeds for a Chinese message,
    since its model knows English only."""
    english = _english(source)
    tokens = dict.fromkeys(concepts([w for w in words if not w.isascii()], source))
    return [english[t] for t in tokens if english.get(t)]


def concepts(words: list[str], source: Path = LEXICON) -> list[str]:
    """The concept tokens of a word list (single words and adjacent English pairs)."""
    table = _table(source)
    out: list[str] = []
    for i, word in enumerate(words):
        out.extend(table.get(word.lstrip("#"), ()) if not word.startswith("#") else ())
        if i + 1 < len(words):
            out.extend(table.get(f"{word} {words[i + 1]}", ()))
    return out
