"""An offline token estimate: no vocabulary to download, the same answer on every machine.

Limits that are stated in tokens (the L1 skill cards, knowledge packs) are checked with this
estimate, not with any one provider's tokenizer: providers disagree by 10-30 % anyway, and
tiktoken downloads its vocabularies at run time, which this service may not do.

How it counts:

- Each CJK character (Han ideographs, kana, hangul, CJK and full-width punctuation) is one
  token. BPE vocabularies of current models spend roughly one token per ideograph (common
  ones a little less, rare ones two or three), so a count by characters neither ignores
  Chinese (as a count by spaces would) nor divides it by four (as a count by bytes/4 would
  not; by characters/4 it would be four times too low).
- The rest is split into words (runs of letters, digits and underscores) and punctuation
  runs. English averages about 0.75 words per token, so words cost 4/3 of a token; each
  punctuation run costs one. Text without spaces (identifiers, hashes, base64, URLs) would be
  undercounted by words, so the estimate for the non-CJK part is never below one token per
  4 characters, the usual rule of thumb for English BPE.

The result errs on the high side for prose, which is the safe side for a budget.
"""

import math
import re

__all__ = ["estimate_tokens"]

# Han (unified + extensions A, compatibility), kana, hangul syllables and jamo, CJK symbols
# and punctuation, full-width forms. Bopomofo included: it only appears next to Chinese.
_CJK_RANGES = (
    "\u2e80-\u2fdf"  # radicals
    "\u3000-\u303f"  # CJK symbols and punctuation
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3100-\u312f"  # bopomofo
    "\u3130-\u318f"  # hangul compatibility jamo
    "\u31f0-\u31ff"  # katakana extensions
    "\u3400-\u4dbf"  # Han extension A
    "\u4e00-\u9fff"  # Han unified ideographs
    "\uac00-\ud7af"  # hangul syllables
    "\u1100-\u11ff"  # hangul jamo
    "\uf900-\ufaff"  # Han compatibility ideographs
    "\uff00-\uffef"  # half- and full-width forms
    "\U00020000-\U0003134f"  # Han extensions B-G
)
_CJK = re.compile(f"[{_CJK_RANGES}]")
# A word is a run of letters/digits/underscore (\w without CJK, which was removed first);
# a punctuation run is a run of anything else that is not whitespace.
_PIECE = re.compile(r"(\w+)|[^\w\s]+")

WORDS_PER_TOKEN = 0.75
CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Estimated tokens in `text` (0 for empty text). Deterministic and offline; see the module
    docstring for the rule."""
    if not text:
        return 0
    cjk = len(_CJK.findall(text))
    rest = _CJK.sub(" ", text) if cjk else text
    words = 0
    punct = 0
    chars = 0
    for match in _PIECE.finditer(rest):
        if match.group(1) is not None:
            words += 1
        else:
            punct += 1
        chars += match.end() - match.start()
    by_words = math.ceil(words / WORDS_PER_TOKEN) + punct
    by_chars = math.ceil(chars / CHARS_PER_TOKEN)
    return cjk + max(by_words, by_chars)
