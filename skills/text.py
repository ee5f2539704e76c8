"""The words of routing live in core.text (registry.skills_content's look-alike check needs them
too, and the registry sits below skills). This name stays for skills.router and skills.lexicon
until their rewrite imports core.text directly."""

from core.text import CJK_STOP, CJK_STOP_CHARS, STOP, content_words, stem, warm_up

__all__ = ["CJK_STOP", "CJK_STOP_CHARS", "STOP", "content_words", "stem", "warm_up"]
