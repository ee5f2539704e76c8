"""Words for routing and look-alike checks: English folded to rough stems, Chinese segmented.

Chinese (and any CJK run inside mixed text) is segmented with jieba in search mode, which
also yields the shorter words inside long ones (退款申请 -> 退款, 申请, 退款申请). jieba ships
its dictionary; it is initialised once per process, lazily, with its log quiet and its cache
file in the system temporary directory (never in the repository). Pure ASCII text never
touches jieba.
"""

import logging
import os
import re
import tempfile
import threading
from functools import lru_cache
from typing import Any

__all__ = ["content_words", "stem", "warm_up"]

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_lock = threading.Lock()
_jieba: Any = None

STOP = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her here
    hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now of
    off on once only or other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up very was we were what
    when where which while who whom why will with would you your yours yourself yourselves i'm i've i'd it's
    don't can't won't please pls hi hello hey thanks thank ok okay yes yeah want need like get got also would
    could maybe one let let's us use using used just really something anything thing things know tell help
    able way lot much many still again""".split()
)
CJK_STOP = frozenset(
    "的 了 是 我 你 他 她 它 们 我们 你们 吗 呢 吧 啊 呀 和 与 就 都 也 还 在 有 没 没有 这 那 这个 那个 一个 一下 "
    "请 请问 帮 帮我 给 把 被 让 要 想 能 能不能 可以 可不可以 怎么 怎么样 如何 什么 为什么 哪 哪里 一 个 不 很 "
    "吧 嗯 哦 好 好的 谢谢 麻烦 一下下 下 上 中 里 之 及 或 而 着 过 会 对 到 从 用".split()
)


CJK_STOP_CHARS = frozenset(
    "的了是我你他她它们吗呢吧啊呀和与就都也还在有没这那一个不很嗯哦好请帮给把被让要想能可以怎么什么为哪里上下中之及或而着过会对到从用多少来去说"
)


def _segmenter() -> Any:
    global _jieba
    if _jieba is None:
        with _lock:
            if _jieba is None:
                import jieba  # imported here: processes that never route never load the dictionary

                jieba.setLogLevel(logging.WARNING)
                tokenizer = jieba.Tokenizer()
                tokenizer.tmp_dir = tempfile.gettempdir()
                tokenizer.cache_file = os.path.join(tempfile.gettempdir(), "prompt-registry-jieba.cache")
                tokenizer.initialize()
                _jieba = tokenizer
    return _jieba


def warm_up() -> None:
    """Load jieba's dictionary now (about a second, once per process) rather than inside the
    first Chinese message's routing."""
    _segmenter()


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """A light English stemmer: plurals, -ing, -ed, -ly, -ation, a final -e; doubled consonants
    undone. Enough for "cancelled/cancelling/cancels/cancel" to meet; not a linguist."""
    if len(word) <= 3 or not word.isalpha():
        return word
    for suffix, repl in (("ies", "y"), ("ied", "y"), ("sses", "ss"), ("ness", ""), ("ment", ""), ("ingly", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)] + repl
            break
    else:
        for suffix in ("ations", "ation", "ings", "ing", "edly", "ed", "ly", "es", "s"):
            if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                if suffix in ("s", "es") and word.endswith(("ss", "us", "is")):
                    break
                if suffix == "es" and not word.endswith(("ches", "shes", "xes", "zes", "sses")):
                    suffix = "s"
                word = word[: -len(suffix)]
                if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiousz":
                    word = word[:-1]  # cancell -> cancel, stopp -> stop
                break
    if len(word) > 4 and word.endswith("e"):
        word = word[:-1]
    return word


def content_words(text: str) -> list[str]:
    """The words of `text` that carry meaning, in order: lower-cased, stop words dropped,
    English stemmed, CJK runs segmented by jieba."""
    text = text.lower()
    out: list[str] = []
    if not _CJK.search(text):
        for match in _WORD.finditer(text):
            word = match.group()
            if word not in STOP:
                out.append(stem(word))
        return out
    position = 0
    for run in _CJK.finditer(text):
        out.extend(content_words(text[position : run.start()]))
        for word in _segmenter().cut_for_search(run.group()):
            if word not in CJK_STOP and word.strip():
                out.append(word)
        # Single characters too, marked so they never equal a word: short Chinese paraphrases
        # often share a character (没电/电池, 丢了/丢件) where jieba's words differ.
        out.extend("#" + ch for ch in run.group() if ch not in CJK_STOP_CHARS)
        position = run.end()
    out.extend(content_words(text[position:]))
    return out
