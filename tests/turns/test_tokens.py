"""The offline token estimate (core/tokens.py)."""

from core.tokens import estimate_tokens


def test_it_counts_nothing_for_empty_or_blank_text():
    assert estimate_tokens("") == 0
    assert estimate_tokens("   \n\t ") == 0


def test_it_counts_english_prose_at_about_four_thirds_of_a_token_per_word():
    text = "Use when the customer asks for a refund of an order they already paid"
    # 14 words -> ceil(14 / 0.75) = 19; no punctuation; 57 chars / 4 = 15 is lower.
    assert estimate_tokens(text) == 19


def test_it_counts_each_punctuation_run_as_one_token():
    assert estimate_tokens("Hello, world!") == estimate_tokens("Hello world") + 2
    assert estimate_tokens("wait...") == estimate_tokens("wait") + 1


def test_it_counts_each_cjk_character_as_one_token():
    assert estimate_tokens("退款") == 2
    assert estimate_tokens("我想退掉上周买的耳机") == 10
    assert estimate_tokens("こんにちは") == 5
    assert estimate_tokens("안녕하세요") == 5
    # Full-width punctuation is CJK too.
    assert estimate_tokens("退款。") == 3


def test_chinese_is_not_divided_like_english_bytes_or_characters():
    chinese = "请帮我查询一下这个订单的物流状态" * 10  # 160 ideographs
    assert estimate_tokens(chinese) == 160
    # A count by spaces would see one word; by characters/4, 40.
    assert estimate_tokens(chinese) > len(chinese) // 4


def test_it_adds_the_english_and_cjk_parts_of_mixed_text():
    assert estimate_tokens("帮我 refund the order 谢谢") == 4 + estimate_tokens("refund the order")


def test_text_without_spaces_is_counted_by_characters():
    digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    # One "word" of 64 characters: words would say 2 tokens, characters say 16.
    assert estimate_tokens(digest) == 16


def test_it_is_deterministic_and_grows_with_the_text():
    text = "Summarise the ticket thread. 总结工单。"
    assert estimate_tokens(text) == estimate_tokens(text)
    assert estimate_tokens(text + " and more") > estimate_tokens(text)
