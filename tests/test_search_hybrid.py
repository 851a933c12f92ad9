"""Hybrid topic search through a pluggable Embedder (issue 27): off by default, wired when given."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest

from chd.core.history import ConversationHistory
from chd.core.memory.embedder import Embedder
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
