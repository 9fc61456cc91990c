"""Files, vector stores and embeddings with the ``openai`` SDK only, over real HTTP.

On the in-process app and on Ray Serve (the ``replica`` app of the session: ingestion as Ray
tasks through the storage actor). The documents are written here: a PDF made with fpdf2,
Markdown and HTML. The embedder is the built-in ``sim-embedding`` (feature hashing of words),
so a "paraphrase" below is one that still shares words with its passage: queries with none
in common would not be found by it, and are not claimed to be.
"""

from __future__ import annotations

import numpy as np
import openai
import pytest
from openai import OpenAI

from tests.servers import serve_app, served_local
from tests.unit.test_rag_pure import pdf_of
from troupe.runtime.settings import ModelSpec
from troupe.serve.config import ServerSettings
from troupe.sim.server import create_sim_app

PDF_SECTIONS = (
    "Router manual. Resetting: to reset the router to factory settings, hold the recessed power button for ten"
    " seconds with a paperclip until every light turns off, then release it and wait two minutes while the"
    " device restarts and restores the factory configuration.",
    "Status lights: a blinking orange light means the router has lost its connection to the internet provider;"
    " check the cable to the wall socket first, then call the provider if the orange light keeps blinking for"
    " more than ten minutes after the cable was reconnected.",
    "Warranty: the warranty period is two years from the date of purchase and covers defects in materials and"
    " workmanship; keep the receipt, because a claim without proof of purchase cannot be accepted by the"
    " service centre or by the retailer.",
)
MARKDOWN = """# Sourdough guide

## Feeding the starter

Feed the starter twice a day with equal weights of flour and water, discard half of it before each feeding,
and keep the jar at room temperature so that it doubles within six hours of a feeding.

## Baking

Bake the loaf in a covered cast iron pot at 250 degrees for twenty minutes, then uncover it and bake it for
another twenty five minutes at 230 degrees until the crust is deep brown and sounds hollow when tapped.

## Storing

Store the cooled bread cut side down on a wooden board for two days, or slice it and freeze the slices in a
bag, toasting them straight from the freezer when you want them.
"""
HTML = """<html><head><title>Garden care</title><style>body{font-family:serif}</style></head><body>
<h1>Garden care</h1>
<p>Watering: water the tomato plants at their base early every morning in summer, never on the leaves, and
give them more water during heat waves when the soil dries out before the afternoon.</p>
<p>Pruning: prune the rose bushes in late winter, cut back dead wood to healthy buds and remove crossing
stems so that air moves through the middle of each bush during the wet spring months.</p>
<p>Compost: turn the compost heap every two weeks, keep it as damp as a wrung out sponge and mix green
kitchen scraps with brown dry leaves so that it breaks down into dark soil within a year.</p>
</body></html>"""

# (query, the file it must come from, a phrase the first chunk must hold)
QUERIES = (
    ("warranty period", "manual.pdf", "two years from the date of purchase"),  # keyword
    ("compost heap", "garden.html", "wrung out sponge"),  # keyword
    ("How often should I feed my sourdough starter?", "sourdough.md", "twice a day"),  # paraphrase, shared words
    ("what does a blinking orange light mean", "manual.pdf", "lost its connection"),  # paraphrase, shared words
    ("when should rose bushes be cut back", "garden.html", "late winter"),  # paraphrase, shared words
)


def _upload_documents(client: OpenAI) -> dict[str, str]:
    files = {
        "manual.pdf": pdf_of(*PDF_SECTIONS),
        "sourdough.md": MARKDOWN.encode(),
        "garden.html": HTML.encode(),
    }
    return {name: client.files.create(file=(name, data), purpose="assistants").id for name, data in files.items()}


@pytest.fixture(params=["local", "replica"])
def rag_client(request) -> OpenAI:
    url = request.getfixturevalue("local_url") if request.param == "local" else \
        request.getfixturevalue("troupe_apps")[request.param]  # fmt: skip
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def test_upload_attach_and_search_five_queries(rag_client: OpenAI) -> None:
    client = rag_client
    ids = _upload_documents(client)
    assert client.files.retrieve(ids["sourdough.md"]).bytes == len(MARKDOWN.encode())
    assert client.files.content(ids["garden.html"]).read() == HTML.encode()
    store = client.vector_stores.create(name="handbook", metadata={"team": "docs"})
    chunking = {"type": "static", "static": {"max_chunk_size_tokens": 100, "chunk_overlap_tokens": 20}}
    for name, file_id in ids.items():
        attached = client.vector_stores.files.create_and_poll(
            vector_store_id=store.id, file_id=file_id, chunking_strategy=chunking, attributes={"kind": name[-3:]}
        )
        assert (attached.status, attached.last_error) == ("completed", None), name
        assert attached.chunking_strategy.static.max_chunk_size_tokens == 100
    store = client.vector_stores.retrieve(store.id)
    assert (store.status, store.file_counts.completed, store.file_counts.total) == ("completed", 3, 3)
    assert store.usage_bytes > 0 and store.metadata == {"team": "docs"}
    chunks = client.vector_stores.files.content(file_id=ids["sourdough.md"], vector_store_id=store.id).data
    assert len(chunks) >= 2 and "twice a day" in "".join(c.text for c in chunks)

    for query, filename, phrase in QUERIES:
        results = client.vector_stores.search(vector_store_id=store.id, query=query, max_num_results=3).data
        assert results, query
        first = results[0]
        assert (first.filename, first.file_id) == (filename, ids[filename]), (query, [r.filename for r in results])
        assert phrase in first.content[0].text, (query, first.content[0].text)
        assert 0 < first.score <= 1 and first.attributes == {"kind": filename[-3:]}

    only_md = client.vector_stores.search(
        vector_store_id=store.id, query="bake the bread", filters={"type": "eq", "key": "kind", "value": ".md"}
    ).data
    assert {r.filename for r in only_md} == {"sourdough.md"}

    listed = client.vector_stores.files.list(vector_store_id=store.id, filter="completed", limit=2)
    assert len(listed.data) == 2 and listed.has_more
    assert {f.id for f in listed} == set(ids.values())  # the SDK pages on with `after`
    client.vector_stores.files.delete(file_id=ids["manual.pdf"], vector_store_id=store.id)
    assert all(r.filename != "manual.pdf" for r in client.vector_stores.search(vector_store_id=store.id,
                                                                              query="warranty period").data)  # fmt: skip
    assert client.vector_stores.delete(store.id).deleted
    assert client.files.delete(ids["manual.pdf"]).deleted
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve(ids["manual.pdf"])


def test_file_search_in_a_response_finds_and_cites_the_right_file(rag_client: OpenAI) -> None:
    client = rag_client
    ids = _upload_documents(client)
    store = client.vector_stores.create(name="handbook")
    batch = client.vector_stores.file_batches.create_and_poll(vector_store_id=store.id, file_ids=list(ids.values()))
    assert batch.file_counts.completed == 3
    question = "How often should I feed my sourdough starter?"
    tools = [{"type": "file_search", "vector_store_ids": [store.id], "max_num_results": 3}]
    response = client.responses.create(model="sim", input=question, tools=tools, include=["file_search_call.results"])
    call, message = response.output
    assert (call.type, call.status, call.queries) == ("file_search_call", "completed", [question])
    assert call.results[0].filename == "sourdough.md" and "twice a day" in call.results[0].text
    [citation] = message.content[0].annotations
    assert (citation.type, citation.file_id, citation.filename) == ("file_citation", ids["sourdough.md"], "sourdough.md")
    assert response.output_text[citation.index :].startswith("【0†sourdough.md】")
    assert "twice a day" in response.output_text

    with client.responses.stream(model="sim", input=question, tools=tools) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    searched = [k for k in kinds if k.startswith("response.file_search_call.")]
    assert searched == [f"response.file_search_call.{s}" for s in ("in_progress", "searching", "completed")]
    assert kinds.index("response.output_text.annotation.added") < kinds.index("response.output_text.done")
    assert final.output[0].results is None, "results only when included"
    assert final.output[1].content[0].annotations[0].file_id == ids["sourdough.md"]

    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.create(model="sim", input=question, tools=[{"type": "file_search", "vector_store_ids": ["vs_nope"]}])
    assert missing.value.body["param"] == "tools[0].vector_store_ids"


def test_a_batch_completes_with_its_failed_file_counted(rag_client: OpenAI) -> None:
    client = rag_client
    good = [client.files.create(file=(f"n{i}.txt", f"note {i} about lanterns".encode()), purpose="assistants").id
            for i in range(3)]  # fmt: skip
    bad = client.files.create(file=("scan.pdf", b"%PDF-1.4 broken"), purpose="assistants").id
    store = client.vector_stores.create(name="batch")
    batch = client.vector_stores.file_batches.create_and_poll(vector_store_id=store.id, file_ids=[*good, bad])
    assert batch.status == "completed"
    assert (batch.file_counts.completed, batch.file_counts.failed, batch.file_counts.total) == (3, 1, 4)
    failed = client.vector_stores.file_batches.list_files(batch_id=batch.id, vector_store_id=store.id, filter="failed")
    assert [f.id for f in failed.data] == [bad] and failed.data[0].last_error.code == "invalid_file"


def test_tenants_see_only_their_own_files_and_stores() -> None:
    keys = {"sk-alice": "alice", "sk-bob": "bob"}
    for url in served_local(ServerSettings(api_keys=keys)):
        _check_tenants(OpenAI(base_url=f"{url}/v1", api_key="sk-alice", max_retries=0),
                       OpenAI(base_url=f"{url}/v1", api_key="sk-bob", max_retries=0))  # fmt: skip


def _check_tenants(alice: OpenAI, bob: OpenAI) -> None:
    file_id = alice.files.create(file=("a.md", b"alice's secret plan"), purpose="assistants").id
    store = alice.vector_stores.create(name="alice")
    alice.vector_stores.files.create_and_poll(vector_store_id=store.id, file_id=file_id)
    bobs = bob.vector_stores.create(name="bob")
    for call in (
        lambda: bob.files.retrieve(file_id),
        lambda: bob.files.content(file_id),
        lambda: bob.files.delete(file_id),
        lambda: bob.vector_stores.retrieve(store.id),
        lambda: bob.vector_stores.files.list(vector_store_id=store.id),
        lambda: bob.vector_stores.files.retrieve(file_id=file_id, vector_store_id=store.id),
        lambda: bob.vector_stores.search(vector_store_id=store.id, query="secret plan"),
        lambda: bob.vector_stores.files.create(vector_store_id=bobs.id, file_id=file_id),
        lambda: bob.vector_stores.delete(store.id),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert [f.id for f in bob.files.list()] == [] and [s.id for s in bob.vector_stores.list()] == [bobs.id]
    hits = alice.vector_stores.search(vector_store_id=store.id, query="secret plan").data
    assert [h.file_id for h in hits] == [file_id]


def test_an_upload_over_the_limit_is_a_413() -> None:
    for url in served_local(ServerSettings(max_file_bytes=1000)):
        client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        assert client.files.create(file=("ok.txt", b"x" * 1000), purpose="user_data").bytes == 1000
        with pytest.raises(openai.APIStatusError) as caught:
            client.files.create(file=("big.txt", b"x" * 1001), purpose="user_data")
        assert caught.value.status_code == 413
        assert caught.value.body["code"] == "file_too_large"
        with pytest.raises(openai.BadRequestError):
            client.files.create(file=("a.txt", b"x"), purpose="nonsense")  # type: ignore[arg-type]


def test_embeddings_and_an_embedder_over_http() -> None:
    """``POST /v1/embeddings`` for the sim embedder, and a store whose embedder is an
    OpenAI-compatible server (the sim server's ``/v1/embeddings``, 384 dimensions)."""
    with serve_app(create_sim_app()) as sim_url:
        http = ModelSpec(name="e384", kind="openai", task="embeddings", base_url=f"{sim_url}/v1")
        for url in served_local(ServerSettings(), models=(ModelSpec(name="sim", kind="sim"), http)):
            client = OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
            as_base64 = client.embeddings.create(model="sim-embedding", input=["router restarts", "bread"])
            as_floats = client.embeddings.create(model="sim-embedding", input="router restarts", encoding_format="float")
            assert len(as_base64.data) == 2 and len(as_base64.data[0].embedding) == 512
            assert np.allclose(as_base64.data[0].embedding, as_floats.data[0].embedding, atol=1e-6)
            assert len(client.embeddings.create(model="e384", input="hello").data[0].embedding) == 384
            with pytest.raises(openai.NotFoundError):
                client.embeddings.create(model="sim", input="a chat model is no embedder")

            file_id = client.files.create(file=("k.md", b"The kettle boils water in two minutes."), purpose="assistants").id
            store = client.vector_stores.create(name="http", extra_body={"embedding_model": "e384"})
            assert client.vector_stores.files.create_and_poll(vector_store_id=store.id, file_id=file_id).status == "completed"
            only_vectors = {"hybrid_search": {"embedding_weight": 1, "text_weight": 0}}
            hits = client.vector_stores.search(vector_store_id=store.id, query="kettle", ranking_options=only_vectors)
            assert [h.file_id for h in hits.data] == [file_id]
