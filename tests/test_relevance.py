"""EmbeddingScorer: item vectors cached in the window's :vectors hash (per content and tag,
removed with the item), query builds and SELECTIVE with it, and its failures."""

from __future__ import annotations

import hashlib
import math

import pytest

import contextstore as cs

from support import dump_window, key

TOPICS = ["redis persistence", "kubernetes pods", "coffee machine", "expense reports", "tls certificates"]


class BagOfWords:
    """A deterministic embedding: hashed word counts. Records what it was asked to embed."""

    def __init__(self, dims: int = 64) -> None:
        self.dims = dims
        self.calls: list[list[str]] = []

    def vector(self, text: str) -> list[float]:
        v = [0.0] * self.dims
        for word in text.lower().split():
            v[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dims] += 1.0
        return v

    def __call__(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [self.vector(t) for t in texts]

    def embedded(self) -> list[str]:
        return [t for call in self.calls for t in call]


def _docs(w) -> None:
    w.add_many([
        {"id": f"d{n}", "content": f"notes about {t} " + "filler text " * 10, "type": "retrieved_document"}
        for n, t in enumerate(TOPICS)
    ])  # fmt: skip


def test_vectors_are_cached_per_item_and_reused(make_store, r, prefix):
    embed = BagOfWords()
    store = make_store(relevance_scorer=cs.EmbeddingScorer(embed, tag="bow"))
    w = store.window("vec", max_tokens=4000)
    _docs(w)
    opts = cs.BuildOptions(max_tokens=40, reserve_for_response=0, query="coffee machine")
    assert w.build_structured(opts).included_item_ids == ["d2"]
    assert len(embed.embedded()) == 1 + len(TOPICS)  # the query and every document, in one call
    cached = r.hgetall(key(prefix, "vec", "vectors"))
    assert sorted(cached) == [f"d{n}".encode() for n in range(len(TOPICS))]
    assert all(v.startswith(b"bow|") for v in cached.values())
    embed.calls.clear()
    w.add("notes about tls certificates and renewals " + "filler text " * 10, id="d9", type="retrieved_document")
    again = cs.BuildOptions(max_tokens=40, reserve_for_response=0, query="tls certificates renewals")
    assert w.build_structured(again).included_item_ids == ["d9"]
    assert embed.calls == [["tls certificates renewals", w.get("d9").content]]  # only what is new
    embed.calls.clear()
    w.build_structured(opts)  # the query vector is remembered too
    assert embed.calls == []


def test_a_vector_goes_with_its_item(make_store, r, prefix):
    store = make_store(relevance_scorer=cs.EmbeddingScorer(BagOfWords()))
    w = store.window("vec-rm", max_tokens=4000)
    _docs(w)
    w.build(cs.BuildOptions(max_tokens=200, reserve_for_response=0, query="coffee"))
    vectors = key(prefix, "vec-rm", "vectors")
    w.remove("d0")
    assert not r.hexists(vectors, "d0") and r.hlen(vectors) == len(TOPICS) - 1
    w.compact("selective", target_percent=1, query="coffee")
    assert set(r.hkeys(vectors)) <= {i.id.encode() for i in w.items()}
    assert w.verify().ok
    w.clear()
    assert not r.exists(vectors)


def test_verify_finds_a_stray_vector(make_store, r, prefix):
    store = make_store(relevance_scorer=cs.EmbeddingScorer(BagOfWords()))
    w = store.window("vec-stray", max_tokens=4000)
    _docs(w)
    r.hset(key(prefix, "vec-stray", "vectors"), "ghost", "default|x|AAAA")
    assert any(":vectors" in p and "ghost" in p for p in w.verify().problems)


def test_another_tag_or_other_content_is_embedded_again(make_store, r, prefix):
    first, second = BagOfWords(), BagOfWords()
    make_store(relevance_scorer=cs.EmbeddingScorer(first, tag="model-a")).window("vec-tag", max_tokens=4000)
    w = make_store(relevance_scorer=cs.EmbeddingScorer(first, tag="model-a")).window("vec-tag")
    _docs(w)
    w.build(cs.BuildOptions(query="coffee", reserve_for_response=0))
    w2 = make_store(relevance_scorer=cs.EmbeddingScorer(second, tag="model-b")).window("vec-tag")
    w2.build(cs.BuildOptions(query="coffee", reserve_for_response=0))
    assert sorted(second.embedded()[1:]) == sorted(i.content for i in w.items())  # none of model-a's used
    assert all(v.startswith(b"model-b|") for v in r.hvals(key(prefix, "vec-tag", "vectors")))


def test_selective_with_embeddings_keeps_the_closest(make_store):
    store = make_store(relevance_scorer=cs.EmbeddingScorer(BagOfWords()))
    w = store.window("vec-sel", max_tokens=1000, compaction_threshold=100)
    _docs(w)
    w.compact("selective", target_percent=3, query="kubernetes pods eviction")
    assert [i.id for i in w.items()] == ["d1"]


def test_a_failing_embed_changes_nothing(make_store, r, prefix):
    def broken(texts):
        raise RuntimeError("embedding service down")

    store = make_store(relevance_scorer=cs.EmbeddingScorer(broken))
    w = store.window("vec-fail", max_tokens=1000, compaction_threshold=100)
    _docs(w)
    before = dump_window(r, prefix, "vec-fail")
    with pytest.raises(cs.HelperError) as info:
        w.compact("selective", target_percent=3, query="coffee")
    assert isinstance(info.value.__cause__, RuntimeError)
    with pytest.raises(cs.HelperError):
        w.build(cs.BuildOptions(query="coffee", reserve_for_response=0))
    after = dump_window(r, prefix, "vec-fail")
    assert {k: v for k, v in after.items() if not k.endswith(b":events")} == {
        k: v for k, v in before.items() if not k.endswith(b":events")
    }


@pytest.mark.parametrize(
    "answer", [lambda texts: [[1.0]] * (len(texts) - 1), lambda texts: [[math.nan]] * len(texts), lambda t: "no"]
)
def test_a_bad_embedding_is_a_relevance_scorer_error(make_store, answer):
    store = make_store(relevance_scorer=cs.EmbeddingScorer(answer))
    w = store.window("vec-bad", max_tokens=1000)
    _docs(w)
    with pytest.raises(cs.HelperError):
        w.build(cs.BuildOptions(query="coffee", reserve_for_response=0))


def test_an_async_embed_on_the_async_store(redis_url, prefix):
    import asyncio

    embed = BagOfWords()

    async def aembed(texts):
        await asyncio.sleep(0)
        return embed(texts)

    async def main():
        async with cs.AsyncContextStore.from_url(
            redis_url, prefix=prefix, relevance_scorer=cs.EmbeddingScorer(aembed)
        ) as store:
            w = await store.window("vec-async", max_tokens=4000)
            docs = [{"id": f"d{n}", "content": t, "type": "retrieved_document"} for n, t in enumerate(TOPICS)]
            await w.add_many(docs)
            built = await w.build_structured(cs.BuildOptions(max_tokens=5, reserve_for_response=0, query="coffee"))
            return built.included_item_ids

    assert asyncio.run(main()) == ["d2"] and len(embed.calls) == 1


def test_bad_scorer_options():
    with pytest.raises(cs.InvalidOptionsError):
        cs.EmbeddingScorer("not callable")  # type: ignore[arg-type]
    with pytest.raises(cs.InvalidOptionsError):
        cs.EmbeddingScorer(BagOfWords(), tag="a|b")


def test_clearing_a_tool_result_drops_its_vector(make_store, r, prefix):
    from test_conversations import turn

    store = make_store(relevance_scorer=cs.EmbeddingScorer(BagOfWords()))
    w = store.window("vec-clear", max_tokens=1000, compaction_threshold=100, keep_recent=1)
    for n in range(6):
        turn(w, n, size=60)
    assert w.stats().usage_percent > 40
    w.compact("selective", target_percent=40, query="question 5")  # scores (and caches) every turn
    vectors = key(prefix, "vec-clear", "vectors")
    results = [i.id for i in w.items() if i.type is cs.ItemType.TOOL_RESULT]
    assert results and all(r.hexists(vectors, i) for i in results[:-1])
    w.compact("clear_tool_results", target_percent=0)
    cleared = [i.id for i in w.items() if i.type is cs.ItemType.TOOL_RESULT and i.metadata.get("context_cleared")]
    assert cleared and not any(r.hexists(vectors, i) for i in cleared)
