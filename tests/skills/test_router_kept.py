"""What the router keeps and looks up faster routes as what it computes afresh: a routed text
kept by an index answers as a new index does, whatever the history and k; the keywords found by
the text's runs and the lexicon's CJK terms found by character pairs are the ones a scan of
every keyword and term finds."""

import gc
import json
import random
import string
import tracemalloc
from pathlib import Path

from skills import lexicon, route_arrays
from skills.params import RouterParams
from skills.route_arrays import PhraseFinder
from skills.router import History, Index, _Phrase

ROOT = Path(__file__).resolve().parents[2]
CARDS = json.loads((ROOT / "eval" / "routing" / "skills.json").read_text())
CONVERSATIONS = json.loads((ROOT / "eval" / "routing" / "conversations.json").read_text())


def test_a_kept_text_routes_as_a_new_index_whatever_the_history_and_k():
    kept = Index(CARDS)
    messages = [
        {"role": "user", "content": CONVERSATIONS[0]["turns"][0]["user"]},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": CONVERSATIONS[1]["turns"][0]["user"]},
    ]
    first = kept.route(messages, k=5)
    first.categories.append("changed by a caller")
    names = frozenset(r["name"] for r in first.routed)
    ghosts = History(loaded=[names, names], invoked=[frozenset(), frozenset()])
    for k, history in ((5, ghosts), (3, None), (1000, ghosts)):
        again = kept.route(messages, k=k, history=history)
        fresh = Index(CARDS).route(messages, k=k, history=history)
        assert again == fresh
    assert Index(CARDS).route(messages, k=5, history=ghosts).demoted  # the history mattered
    kept.forget_turns()
    assert kept.route(messages, k=5) == Index(CARDS).route(messages, k=5)


def test_the_keywords_found_by_runs_are_the_ones_a_scan_finds():
    keywords = ["e-mail", "wi-fi", "c++", ".net", "re", "refund", "refund order", "退款", "3d", "order 3d", "-x"]
    phrases = {k: _Phrase(k) for k in keywords}
    finder = PhraseFinder(phrases)
    texts = [
        "my e-mail and wi-fi are down",
        "c++ and .net jobs; refund order 3d now",
        "re: refund-order, prefund, refunds",
        "我要退款 refund",
        "order 3d-x",
        "",
        "-x marks",
    ]
    texts += [t["user"].lower() for c in CONVERSATIONS for t in c["turns"]]
    for text in texts:
        assert finder.found_in(text) == {k for k, p in phrases.items() if p.found_in(text)}, text
    index = Index(CARDS, params=RouterParams(semantic=False))
    for text in texts:
        scan = {t for t, p in index.phrases.items() if t in text and p.found_in(text)} if text else set()
        assert index.phrase_finder.found_in(text) == scan, text


def test_the_cjk_terms_found_by_pairs_are_the_ones_a_scan_finds_in_its_order():
    texts = [t["user"] for c in CONVERSATIONS for t in c["turns"] if not t["user"].isascii()]
    texts += ["钱能不能原路返回", "寄回去", "a退款b退款", "退"]
    assert len(texts) > 50
    for text in texts:
        assert lexicon.cjk_terms_in(text) == [t for t in lexicon._cjk_terms() if t in text], text


def test_what_an_index_keeps_of_routed_texts_stays_within_what_index_bytes_counts():
    # Each routed text is a new one (a user writing 4,000 characters of distinct words per
    # message, the context full too): what the index keeps must stay within the share of
    # index_bytes (SKILL_INDEX_CACHE_BYTES' estimate), whatever the texts.
    index = Index(CARDS, params=RouterParams(semantic=False))
    rnd = random.Random(3)

    def text() -> str:
        return " ".join("".join(rnd.choices(string.ascii_lowercase, k=5)) for _ in range(700))[:4000]

    tracemalloc.start()
    try:
        for _ in range(route_arrays.TURNS_KEPT + 8):
            roles = ["user", "assistant", "user", "assistant", "user"]
            index.route([{"role": role, "content": text()} for role in roles], k=5)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
        index.forget_turns()
        gc.collect()
        kept = held - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert kept > 0  # something was kept: the measure measures
    assert kept <= route_arrays.kept_bytes(len(CARDS)), kept
