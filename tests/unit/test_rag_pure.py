"""troupe.rag with plain values: parsing, chunking, terms, the sim embedder, fusion, wire checks."""

from __future__ import annotations

import fpdf
import numpy as np
import pytest

from troupe.protocol import InvalidRequest
from troupe.rag import DocumentError, SimEmbedder, chunk_text, count_tokens, fuse, parse_document, terms, wire
from troupe.rag.embedders import decode_base64, encode_base64


def pdf_of(*paragraphs: str) -> bytes:
    doc = fpdf.FPDF()
    doc.add_page()
    doc.set_font("Helvetica", size=11)
    for paragraph in paragraphs:
        doc.multi_cell(0, 6, paragraph)
        doc.ln(3)
    return bytes(doc.output())


# -- parsing ------------------------------------------------------------------------------


def test_each_kind_is_read_as_text() -> None:
    assert "hold the power button" in parse_document("m.pdf", pdf_of("To reset, hold the power button."))
    html = b"<html><head><title>T</title><style>p{}</style></head><body><p>One</p><script>no()</script><p>Two</p>"
    assert parse_document("p.HTML", html) == "T\nOne\nTwo"
    assert parse_document("n.md", "# Título\n\nCuerpo".encode()) == "# Título\n\nCuerpo"


@pytest.mark.parametrize(
    ("name", "data", "code"),
    [
        ("broken.pdf", b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage", "invalid_file"),
        ("a.docx", b"PK\x03\x04", "unsupported_file"),
        ("latin.txt", "café".encode("latin-1"), "invalid_file"),
        ("empty.md", b"  \n ", "unsupported_file"),
    ],
)
def test_what_cannot_be_read_says_why(name: str, data: bytes, code: str) -> None:
    with pytest.raises(DocumentError) as caught:
        parse_document(name, data)
    assert caught.value.code == code


# -- terms and chunks --------------------------------------------------------------------------


def test_terms_drop_stop_words_and_inflections() -> None:
    assert terms("The routers were restarting nightly; libraries RUN running") == [
        "router", "restart", "night", "library", "run", "run",
    ]  # fmt: skip


def test_chunks_are_overlapping_windows_of_the_text() -> None:
    text = " ".join(f"w{i:02d}" for i in range(50))  # 50 words of 1 token each
    chunks = chunk_text(text, max_tokens=20, overlap_tokens=5)
    assert [c.tokens for c in chunks] == [20, 20, 20]
    assert all(c.text in text for c in chunks)
    assert chunks[0].text.split()[-5:] == chunks[1].text.split()[:5]  # the overlap
    assert chunks[-1].text.endswith("w49")


def test_a_chunk_keeps_the_documents_own_line_breaks() -> None:
    chunks = chunk_text("alpha beta\n\ngamma delta", max_tokens=100, overlap_tokens=0)
    assert [c.text for c in chunks] == ["alpha beta\n\ngamma delta"]
    assert count_tokens("abcdefghij") == 3  # ceil(10 / 4)


# -- the sim embedder ---------------------------------------------------------------------------


def test_sim_vectors_are_unit_deterministic_and_about_shared_words() -> None:
    texts = ["the router restarts at night", "routers restarting nightly", "bake the bread"]
    a = SimEmbedder(256).embed(texts)
    assert a.shape == (3, 256) and np.allclose(np.linalg.norm(a, axis=1), 1.0)
    assert np.array_equal(a, SimEmbedder(256).embed(texts))
    assert a[0] @ a[1] > 0.5 and abs(a[0] @ a[2]) < 0.2
    assert np.array_equal(decode_base64(encode_base64(a[0])), a[0])


# -- fusion --------------------------------------------------------------------------------------


def test_fusion_rewards_agreement_and_scales_to_one() -> None:
    fused = dict(fuse([(1.0, [1, 2, 3]), (1.0, [2, 1])]))
    assert fused[1] == fused[2] < 1.0 and fused[3] < fused[1]
    assert fuse([(1.0, [7]), (1.0, [7])]) == [(7, 1.0)]
    text_only = fuse([(0.0, [1, 2]), (1.0, [2, 1])])
    assert [c for c, _ in text_only] == [2, 1]


# -- wire checks -----------------------------------------------------------------------------------


def test_chunking_strategy_defaults_and_ranges() -> None:
    auto = {"type": "static", "static": {"max_chunk_size_tokens": 800, "chunk_overlap_tokens": 400}}
    assert wire.chunking_strategy(None) == wire.chunking_strategy({"type": "auto"}) == auto
    static = {"type": "static", "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 50}}
    assert wire.chunking_strategy(static) == static
    for size, overlap, param in ((99, 0, "max_chunk_size_tokens"), (4097, 0, "max_chunk_size_tokens"),
                                 (200, 101, "chunk_overlap_tokens")):  # fmt: skip
        bad = {"type": "static", "static": {"max_chunk_size_tokens": size, "chunk_overlap_tokens": overlap}}
        with pytest.raises(InvalidRequest) as caught:
            wire.chunking_strategy(bad)
        assert caught.value.param == f"chunking_strategy.static.{param}"


def test_filters_compare_like_kinds_only() -> None:
    attrs = {"team": "infra", "year": 2024, "public": True}
    f = wire.check_filters({"type": "and", "filters": [
        {"type": "eq", "key": "team", "value": "infra"}, {"type": "gte", "key": "year", "value": 2023}]})  # fmt: skip
    assert wire.matches(f, attrs) and not wire.matches(f, {**attrs, "year": 2020})
    assert wire.matches({"type": "in", "key": "team", "value": ["ops", "infra"]}, attrs)
    assert not wire.matches({"type": "eq", "key": "year", "value": "2024"}, attrs)  # a string is not a number
    assert not wire.matches({"type": "gt", "key": "public", "value": 0}, attrs)  # nor is a boolean
    assert wire.matches({"type": "ne", "key": "missing", "value": 1}, attrs)
    with pytest.raises(InvalidRequest) as caught:
        wire.check_filters({"type": "or", "filters": [{"type": "like", "key": "a", "value": 1}]})
    assert caught.value.param == "filters.filters[0].type"


def test_ranking_options_and_attributes_are_checked() -> None:
    options = wire.check_ranking_options({"score_threshold": 0.5, "hybrid_search": {"embedding_weight": 0,
                                                                                      "text_weight": 2}})  # fmt: skip
    assert (options.score_threshold, options.embedding_weight, options.text_weight) == (0.5, 0.0, 2.0)
    with pytest.raises(InvalidRequest):
        wire.check_ranking_options({"score_threshold": 1.5})
    with pytest.raises(InvalidRequest) as caught:
        wire.check_attributes({"k": [1]})
    assert caught.value.param == "attributes.k"
    with pytest.raises(InvalidRequest):
        wire.check_attributes({f"k{i}": 1 for i in range(17)})
