"""Hybrid topic search through a pluggable Embedder (issue 27): off by default, wired when given."""

from __future__ import annotations

import importlib
import math
import re
import threading
from collections.abc import Sequence
from pathlib import Path

import grpc
import pytest

from chd.core.history import ConversationHistory
from chd.core.memory.embedder import Embedder, usable_vectors
from chd.core.settings import Settings
from chd.service.config import ConfigError
from tests.ops_support import ask, channel_to, running

# Words that mean the same share an axis; any other word gets none.
_AXES = {"car": 0, "automobile": 0, "vehicle": 0, "dog": 1, "puppy": 1, "rain": 2, "drizzle": 2}


class AxisEmbedder:
    """A tiny deterministic embedder: a text's vector counts its words per meaning."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(len(texts))
        vectors = []
        for text in texts:
            vector = [0.0, 0.0, 0.0]
            for word in text.lower().replace(".", " ").split():
                if word in _AXES:
                    vector[_AXES[word]] += 1.0
            vectors.append(vector)
        return vectors


class BrokenEmbedder:
    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise RuntimeError("the model server is down")


class GatedEmbedder(AxisEmbedder):
    """AxisEmbedder that answers only once ``release`` is set: a slow or hung model."""

    entered = threading.Event()
    release = threading.Event()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        GatedEmbedder.entered.set()
        GatedEmbedder.release.wait(60)
        return super().embed(texts)


class BadReplyEmbedder(AxisEmbedder):
    """AxisEmbedder whose replies are spoiled as ``spoil`` says (class attribute, set per test)."""

    spoil = "ragged"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = super().embed(texts)
        if self.spoil == "ragged":
            return [v + [1.0] * (i % 2) for i, v in enumerate(vectors)]
        if self.spoil == "nan":
            return [[math.nan, *v[1:]] for v in vectors]
        if self.spoil == "inf":
            return [[math.inf, *v[1:]] for v in vectors]
        if self.spoil == "short":
            return vectors[:-1]
        if self.spoil == "query_dim":
            return vectors if len(texts) > 1 else [v + [0.0] for v in vectors]
        return vectors


def _history(embedder: Embedder | None) -> ConversationHistory:
    history = ConversationHistory(
        background=False, settings=Settings(buffer_size=100), embedder=embedder
    )
    for text in (
        "my car broke down again",
        "the puppy chewed a shoe",
        "drizzle all morning",
        "dinner at eight",
    ):
        history.query(f"Add utterance: {text}")
    return history


def _seqs(history: ConversationHistory, topic: str, **data: object) -> list[int]:
    result = history.query("", {}, {"operation": "retrieve", "topic": topic, **data}).result
    return [u["seq"] for u in result["utterances"]]


class TestEmbedderWiring:
    """The embedder finds what shares no word with the topic; without one nothing changes."""

    def test_the_protocol_is_what_a_plain_class_satisfies(self) -> None:
        """Any object with embed() is an Embedder."""
        assert isinstance(AxisEmbedder(), Embedder)

    def test_without_an_embedder_a_search_is_lexical(self) -> None:
        """Off by default: 'automobile' finds nothing, no word is shared."""
        assert _seqs(_history(None), "automobile") == []

    def test_with_an_embedder_a_synonym_is_found_first(self) -> None:
        """'automobile' finds the car utterance through its vector."""
        assert _seqs(_history(AxisEmbedder()), "automobile")[0] == 1

    def test_filters_apply_to_vector_hits(self) -> None:
        """A speaker filter keeps vector-only hits of other speakers out."""
        history = _history(AxisEmbedder())
        assert _seqs(history, "automobile", speaker="assistant") == []

    def test_utterance_vectors_are_made_once(self) -> None:
        """Vectors are cached in the index: a second search embeds only its topic."""
        embedder = AxisEmbedder()
        history = _history(embedder)
        _seqs(history, "automobile")
        embedder.calls.clear()
        _seqs(history, "puppy")
        assert embedder.calls == [1]

    def test_a_failing_embedder_leaves_the_lexical_answer(self) -> None:
        """The embedder's errors never fail a retrieve: the lexical hits come back."""
        assert _seqs(_history(BrokenEmbedder()), "puppy") == [2]


class TestBadEmbedderReplies:
    """What an embedder returns is checked: bad vectors are dropped, never cached, never INTERNAL."""

    @pytest.mark.parametrize("spoil", ["ragged", "nan", "inf", "short", "query_dim"])
    def test_a_bad_reply_leaves_a_lexical_answer(self, spoil: str) -> None:
        """'puppy' finds the puppy utterance, and only it, whatever the embedder got wrong."""
        embedder = BadReplyEmbedder()
        embedder.spoil = spoil
        history = _history(embedder)
        for _ in range(2):  # the second search meets whatever the first cached
            embedder.calls.clear()
            result = history.query("", {}, {"operation": "retrieve", "topic": "puppy"}).result
            assert [u["seq"] for u in result["utterances"]] == [2]
            assert all(math.isfinite(u["score"]) for u in result["utterances"])
        # A text whose vector was refused is not sent again: the second search embeds its topic only.
        assert embedder.calls == [1]
        index = history.indexes.peek("default")
        assert index is not None
        assert all(all(math.isfinite(x) for x in v) for v in index.vectors.values())
        assert len({len(v) for v in index.vectors.values()}) <= 1

    def test_usable_vectors_drops_each_bad_one_alone(self) -> None:
        vectors, why = usable_vectors([[3, 4], [1, 2, 3], [math.nan, 1], [0, 2]], 4, 0)
        assert vectors == [(0.6, 0.8), None, None, (0.0, 1.0)]
        assert "3 numbers where the others have 2" in why and "NaN" in why

    def test_a_reply_of_the_wrong_count_is_dropped_whole(self) -> None:
        vectors, why = usable_vectors([[1.0, 0.0]], 2, 0)
        assert vectors == [None, None] and "1 vector(s) for 2 text(s)" in why


class TestSimilarityFloor:
    """With an embedder, a hit mentions the topic or is alike enough; ``matches`` counts the hits."""

    def test_an_unrelated_topic_finds_nothing(self) -> None:
        result = (
            _history(AxisEmbedder())
            .query("", {}, {"operation": "retrieve", "topic": "quantum physics"})
            .result
        )
        assert result["utterances"] == [] and result["matches"] == 0

    def test_matches_counts_vector_hits_too(self) -> None:
        result = (
            _history(AxisEmbedder())
            .query("", {}, {"operation": "retrieve", "topic": "automobile"})
            .result
        )
        assert [u["seq"] for u in result["utterances"]] == [1] and result["matches"] == 1


class TestSlowEmbedder:
    """A slow or hung model never holds a store, and a search answers within its deadline."""

    def test_a_store_during_a_slow_search_answers(self) -> None:
        # The daemon imports this file by its dotted name, a module apart from pytest's.
        gated = importlib.import_module("tests.test_search_hybrid").GatedEmbedder
        gated.entered.clear()
        gated.release.clear()
        found: list[object] = []
        try:
            with running(embedder="tests.test_search_hybrid:GatedEmbedder", workers=2) as server:
                with channel_to(server) as channel:
                    meta = {"conversation_id": "e"}
                    for text in ("my car broke down again", "the puppy chewed a shoe"):
                        ask(channel, f"Add utterance: {text}", meta)

                    def search() -> None:
                        try:
                            data = {"operation": "retrieve", "topic": "puppy"}
                            found.append(ask(channel, "", meta, data, timeout=4))
                        except grpc.RpcError as error:
                            found.append(error.code())

                    searching = threading.Thread(target=search)
                    searching.start()
                    assert gated.entered.wait(30)
                    # The model is still busy: the store must not wait for it.
                    stored = ask(channel, "Add utterance: the puppy slept", meta, timeout=30)
                    other = ask(channel, "Add utterance: hello", {"conversation_id": "f"})
                    searching.join(60)
                    # Answered while the model never returned: lexically.
                    assert not gated.release.is_set()
        finally:
            gated.release.set()
        assert stored.result["utterance"]["seq"] == 3 and other.result["utterance"]["seq"] == 1
        (answer,) = found
        assert not isinstance(answer, grpc.StatusCode), answer
        assert [u["text"] for u in answer.result["utterances"]][:1] == ["the puppy chewed a shoe"]


class TestShippedModel:
    """The wordllama package's shipped model, loaded with downloads disabled (test extra)."""

    def test_wordllama_finds_a_related_utterance(self) -> None:
        """With the real static model, 'vehicle repair' ranks the car utterance above the others."""
        pytest.importorskip("wordllama")
        from chd.core.memory.embedder import WordLlamaEmbedder

        assert _seqs(_history(WordLlamaEmbedder()), "vehicle")[0] == 1


class NoEmbedMethod:
    """A class that loads but is no Embedder."""


class TestServeFlag:
    """``chd serve --embedder module:Class`` (the ``--backend`` convention) turns hybrid search on."""

    def test_the_named_class_ranks_a_search_through_grpc(self) -> None:
        """'automobile' shares no word with 'my car broke down again' and is found by its vector."""
        with running(embedder="tests.test_search_hybrid:AxisEmbedder") as server:
            with channel_to(server) as channel:
                for text in ("my car broke down again", "the puppy chewed a shoe"):
                    ask(channel, f"Add utterance: {text}", {"conversation_id": "e"})
                found = ask(
                    channel,
                    "",
                    {"conversation_id": "e"},
                    {"operation": "retrieve", "topic": "automobile"},
                )
        hits = found.result["utterances"]
        assert [hit["text"] for hit in hits][:1] == ["my car broke down again"]

    @pytest.mark.parametrize(
        "source", ["raise RuntimeError('no GPU here')\n", "def broken(:\n", "import no_such_mod\n"]
    )
    def test_a_module_failing_at_import_is_refused_in_one_line(
        self, source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Its RuntimeError or SyntaxError was a traceback and exit 1 (review of issue 27)."""
        (tmp_path / "chd_failing_embedder.py").write_text(source)
        monkeypatch.syspath_prepend(str(tmp_path))
        with pytest.raises(ConfigError, match="cannot load embedder") as refused:
            with running(embedder="chd_failing_embedder:Thing"):
                pass
        assert refused.value.key == "embedder" and "\n" not in str(refused.value)

    @pytest.mark.parametrize(
        "name, problem",
        [
            ("tests.no_such_module:Thing", "cannot load embedder"),
            ("wordllamma", "unknown embedder"),
            ("tests.test_search_hybrid:NoEmbedMethod", "no embed(texts) method"),
        ],
    )
    def test_a_name_that_does_not_give_an_embedder_is_refused_naming_the_key(
        self, name: str, problem: str
    ) -> None:
        with pytest.raises(ConfigError, match=re.escape(problem)) as refused:
            with running(embedder=name):
                pass
        assert refused.value.key == "embedder"
