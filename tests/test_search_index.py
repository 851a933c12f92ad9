"""Topic search: the incremental index stays equal to a rebuild, ranks correctly, searches the summary."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chd.backends.memory import MemoryBackend
from chd.core.errors import InvalidRequest
from chd.core.history import ConversationHistory
from chd.core.memory.index import ConversationIndex
from chd.core.settings import Settings

WORDS = ["paris", "rain", "budget", "hotel", "train", "museum", "dinner", "flight"]


def _index_snapshot(index: ConversationIndex) -> tuple[Any, ...]:
    postings = {t: dict(p) for t, p in index.postings.items()}
    return postings, dict(index.docs), index.total_length


def _rebuilt(history: ConversationHistory, cid: str = "default") -> ConversationIndex:
    fresh = ConversationIndex()
    fresh.sync(history.backend.read(cid))
    return fresh


def _find(history: ConversationHistory, text: str, **data: Any) -> dict[str, Any]:
    return history.query(text, {}, data).result


class TestIncrementalIndex:
    """Whatever happens to a conversation, the cached index equals one built from scratch."""

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.lists(
            st.one_of(
                st.tuples(
                    st.just("store"), st.lists(st.sampled_from(WORDS), min_size=1, max_size=4)
                ),
                st.tuples(st.just("remove"), st.integers(min_value=1, max_value=40)),
                st.tuples(st.just("search"), st.sampled_from(WORDS)),
                st.tuples(st.just("shrink"), st.integers(min_value=1, max_value=8)),
                st.tuples(st.just("mark"), st.integers(min_value=1, max_value=40)),
            ),
            min_size=1,
            max_size=40,
        ),
        st.sampled_from(["fifo", "importance"]),
        st.sampled_from([(True, False), (False, True), (True, True), (False, False)]),
    )
    def test_index_matches_a_rebuild_after_any_operations(
        self, steps: list[tuple[str, Any]], policy: str, keeping: tuple[bool, bool]
    ) -> None:
        """Stores, evictions, folds, archiving, removes, marks and limit changes never leave the index stale."""
        summaries, archive = keeping
        history = ConversationHistory(
            background=False,
            settings=Settings(
                buffer_size=10,
                eviction_batch=2,
                eviction_policy=policy,
                summarization_enabled=summaries,
                archive_evicted=archive,
            ),
        )
        for op, arg in steps:
            try:
                if op == "store":
                    history.query("Add utterance: " + " ".join(arg))
                elif op == "remove":
                    history.query(f"Remove utterance {arg}")
                elif op == "search":
                    history.query(f"Find utterances about {arg}")
                elif op == "shrink":
                    history.query(f"Set the buffer size to {arg}")
                else:
                    history.query(f"Mark utterance {arg} as important")
            except Exception as error:  # NOT_FOUND for seqs that are gone is expected
                assert type(error).__name__ == "NotFound"
        history.query("Find utterances about paris")
        cached = history.indexes.get("default")
        assert _index_snapshot(cached) == _index_snapshot(_rebuilt(history))

    def test_store_updates_a_live_index_without_a_resync(self) -> None:
        """After the first search, each store is applied to the index as it commits."""
        history = ConversationHistory(background=False)
        history.query("Add utterance: paris in spring")
        history.query("Find utterances about paris")
        index = history.indexes.get("default")
        history.query("Add utterance: paris in autumn")
        assert index.matches(history.backend.read("default"))

    def test_out_of_order_store_update_is_skipped_and_caught_up(self) -> None:
        """An update for a seq the index is not ready for is ignored; the next sync adds it."""
        history = ConversationHistory(background=False)
        history.query("Add utterance: rain")
        history.query("Find utterances about rain")
        index = history.indexes.get("default")
        state = history.backend.read("default")
        late = state.utterances[0].__class__(**{**state.utterances[0].to_record(), "seq": 5})
        assert index.note_store(late, []) is False
        history.query("Add utterance: rain again")
        assert sorted(
            u["seq"] for u in _find(history, "Find utterances about rain")["utterances"]
        ) == [1, 2]

    def test_index_is_rebuilt_when_seqs_go_backwards(self) -> None:
        """A conversation replaced by an older copy (an import) is re-indexed, not trusted."""
        backend = MemoryBackend()
        history = ConversationHistory(backend)
        for word in ("alpha", "beta", "gamma"):
            history.query(f"Add utterance: {word}")
        history.query("Find utterances about alpha")
        other = ConversationHistory(MemoryBackend())
        other.query("Add utterance: delta")
        backend._states["default"] = other.backend.read("default")  # what an import would write
        assert [u["text"] for u in _find(history, "Find utterances about delta")["utterances"]] == [
            "delta"
        ]
        assert _find(history, "Find utterances about alpha")["utterances"] == []


class TestOtherWritersAndRestarts:
    """The index is a cache of the backend: other writers and restarts are seen."""

    def test_store_by_another_daemon_on_the_same_backend_is_found(self) -> None:
        """Two daemons share a backend; each one's search sees the other's writes."""
        backend = MemoryBackend()
        first, second = ConversationHistory(backend), ConversationHistory(backend)
        first.query("Add utterance: the museum opens at nine")
        assert len(first.query("Find utterances about museum").result["utterances"]) == 1
        second.query("Add utterance: the museum is closed on monday")
        second.query("Remove utterance 1")
        hits = first.query("Find utterances about museum").result["utterances"]
        assert [h["seq"] for h in hits] == [2]

    def test_a_new_daemon_rebuilds_the_index_from_the_backend(self) -> None:
        """After a restart nothing is cached, and the search still finds everything."""
        backend = MemoryBackend()
        before = ConversationHistory(backend)
        for text in ("train to lyon", "hotel in lyon", "dinner"):
            before.query(f"Add utterance: {text}")
        after = ConversationHistory(backend)
        hits = after.query("Find utterances about lyon").result["utterances"]
        assert sorted(h["seq"] for h in hits) == [1, 2]

    def test_index_cache_keeps_only_recently_searched_conversations(self) -> None:
        """Past the bound the least recently searched index is dropped and rebuilt on demand."""
        history = ConversationHistory(background=False)
        history.indexes.max_conversations = 2
        for cid in ("a", "b", "c"):
            history.query("Add utterance: flight", {"conversation_id": cid})
            history.query("Find utterances about flight", {"conversation_id": cid})
        assert len(history.indexes) == 2 and history.indexes.peek("a") is None
        assert (
            len(
                history.query("Find utterances about flight", {"conversation_id": "a"}).result[
                    "utterances"
                ]
            )
            == 1
        )

    def test_conversations_have_separate_indexes(self) -> None:
        """A search in one conversation never returns another's utterances."""
        history = ConversationHistory(background=False)
        history.query("Add utterance: flight to rome", {"conversation_id": "a"})
        history.query("Add utterance: flight to oslo", {"conversation_id": "b"})
        hits = history.query("Find utterances about flight", {"conversation_id": "a"}).result[
            "utterances"
        ]
        assert [h["text"] for h in hits] == ["flight to rome"]


class TestRanking:
    """Relevance first, recency second, filters before the cut, scores on every hit."""

    @pytest.fixture
    def history(self) -> ConversationHistory:
        history = ConversationHistory(background=False, settings=Settings(buffer_size=100))
        for speaker, text in (
            ("user", "Paris, Paris, Paris!"),
            ("assistant", "Paris is lovely"),
            ("user", "what about the budget"),
            ("assistant", "The budget for Paris is fine"),
            ("user", "Paris is lovely"),
        ):
            history.query(f"Add {speaker} utterance: {text}")
        return history

    def test_hits_are_ranked_by_score_and_each_carries_it(
        self, history: ConversationHistory
    ) -> None:
        """The most relevant utterance comes first; scores never increase down the list."""
        hits = _find(history, "Find utterances about Paris")["utterances"]
        assert hits[0]["seq"] == 1
        scores = [h["score"] for h in hits]
        assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)

    def test_newer_wins_between_equally_relevant_utterances(
        self, history: ConversationHistory
    ) -> None:
        """Two identical texts: the newer one ranks higher."""
        seqs = [h["seq"] for h in _find(history, "Find utterances about lovely")["utterances"]]
        assert seqs == [5, 2]

    def test_filters_apply_before_the_limit(self, history: ConversationHistory) -> None:
        """The best assistant hit is returned even though a user utterance scores higher overall."""
        hits = _find(history, "Find the top 1 utterance about Paris from the assistant")[
            "utterances"
        ]
        overall = _find(history, "Find utterances about Paris")["utterances"]
        assert overall[0]["speaker"] == "user"
        best_assistant = next(h for h in overall if h["speaker"] == "assistant")
        assert [h["seq"] for h in hits] == [best_assistant["seq"]]

    def test_matches_counts_all_hits_beyond_the_limit(self, history: ConversationHistory) -> None:
        """result.matches says how many there were when limit cut the list."""
        result = _find(history, "Find 2 utterances about Paris")
        assert len(result["utterances"]) == 2 and result["matches"] == 4

    def test_window_restricts_candidates_before_ranking(self, history: ConversationHistory) -> None:
        """'among the last 2 utterances' ranks only those two."""
        hits = _find(history, "Find utterances about Paris among the last 2 utterances")[
            "utterances"
        ]
        assert sorted(h["seq"] for h in hits) == [4, 5]

    def test_words_not_in_the_buffer_find_nothing(self, history: ConversationHistory) -> None:
        """An unknown topic returns no hits rather than everything."""
        assert _find(history, "Find utterances about submarines")["utterances"] == []


class TestSummaryHit:
    """The running summary is searched too and reported apart from the utterances."""

    @pytest.fixture
    def history(self) -> ConversationHistory:
        history = ConversationHistory(
            background=False, settings=Settings(buffer_size=4, eviction_batch=2)
        )
        for text in (
            "the submarine tour is booked",
            "we leave at dawn",
            "bring a coat",
            "lunch at noon",
            "the train is late",
        ):
            history.query(f"Add utterance: {text}")
        return history

    def test_summary_matching_the_topic_is_a_separate_hit(
        self, history: ConversationHistory
    ) -> None:
        """The evicted utterance about the submarine is found through the summary (the old summary_hit too)."""
        result = _find(history, "Find utterances about the submarine")
        assert [h["where"] for h in result["utterances"]] == ["summary"]
        segment = result["utterances"][0]
        assert "submarine" in segment["text"] and segment["score"] > 0
        assert (segment["turn_from"], segment["turn_to"]) == (1, 2)
        assert "submarine" in result["summary_hit"]["text"] and result["summary_hit"]["score"] > 0

    def test_speaker_filter_excludes_summary_segments_from_the_list(
        self, history: ConversationHistory
    ) -> None:
        """A speaker filter keeps summary segments out of the ranked list as well."""
        result = _find(history, "Find utterances about the submarine from the user")
        assert all(h["where"] != "summary" for h in result["utterances"])

    def test_speaker_filter_excludes_the_summary(self, history: ConversationHistory) -> None:
        """A summary mixes speakers, so a speaker-filtered search does not return it."""
        assert "summary_hit" not in _find(
            history, "Find utterances about the submarine from the user"
        )

    def test_summary_not_matching_is_not_returned(self, history: ConversationHistory) -> None:
        """No shared words, no summary hit."""
        assert "summary_hit" not in _find(history, "Find utterances about trains")


class TestOneSearchOverEverything:
    """One topic search ranks buffer, queue, archive and summary together (issue 27)."""

    @pytest.fixture
    def history(self) -> ConversationHistory:
        settings = Settings(
            buffer_size=4, eviction_batch=2, summarization_enabled=False, archive_evicted=True
        )
        history = ConversationHistory(background=False, settings=settings)
        for text in (
            "the ferry to Naxos leaves at six",
            "pack sunscreen",
            "the ferry back is on friday",
            "dinner by the harbour",
            "book the hotel",
            "the ferry was cancelled",
        ):
            history.query(f"Add utterance: {text}")
        return history

    def test_archive_and_buffer_hits_come_back_in_one_ranked_list(
        self, history: ConversationHistory
    ) -> None:
        """Archived and buffered utterances about the ferry are one list, best first, each saying where it lives."""
        hits = _find(history, "Find utterances about the ferry")["utterances"]
        assert sorted(h["seq"] for h in hits) == [1, 3, 6]
        assert {h["seq"]: h["where"] for h in hits} == {1: "archive", 3: "buffer", 6: "buffer"}
        assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
        archived = next(h for h in hits if h["seq"] == 1)
        assert archived["archived"] is True and "utterance_index" not in archived

    def test_where_narrows_the_search(self, history: ConversationHistory) -> None:
        """data.where picks the places searched, as a name or a list."""
        only_archive = _find(history, "", operation="retrieve", topic="ferry", where="archive")[
            "utterances"
        ]
        assert [h["seq"] for h in only_archive] == [1]
        only_buffer = _find(history, "", operation="retrieve", topic="ferry", where=["buffer"])[
            "utterances"
        ]
        assert sorted(h["seq"] for h in only_buffer) == [3, 6]

    def test_archived_form_still_reads_only_the_archive(self, history: ConversationHistory) -> None:
        """'archived' keeps its meaning: the archive alone."""
        hits = _find(history, "", operation="retrieve", topic="ferry", archived=True)["utterances"]
        assert [(h["seq"], h["where"]) for h in hits] == [(1, "archive")]

    def test_a_window_searches_the_buffer_only(self, history: ConversationHistory) -> None:
        """'among the last 4 utterances' is a window of the buffer, as before."""
        hits = _find(history, "Find utterances about the ferry among the last 4 utterances")[
            "utterances"
        ]
        assert sorted(h["seq"] for h in hits) == [3, 6]

    def test_queued_utterances_are_found_before_they_are_folded(self) -> None:
        """An evicted utterance waiting for the summary is a hit, where 'pending'."""
        history = ConversationHistory(
            background=True, settings=Settings(buffer_size=2, eviction_batch=1, fold_delay=60)
        )
        try:
            for text in ("the vault code is 4411", "lunch", "tea"):
                history.query(f"Add utterance: {text}")
            hits = _find(history, "Find utterances about the vault")["utterances"]
            assert [(h["seq"], h["where"]) for h in hits] == [(1, "pending")]
        finally:
            history.close()

    @pytest.mark.parametrize("where", ["attic", ["buffer", "cellar"], [], 3])
    def test_unknown_place_is_refused(self, history: ConversationHistory, where: Any) -> None:
        """A where naming no place is INVALID_ARGUMENT, with the places it may name."""
        with pytest.raises(InvalidRequest, match="buffer, pending, archive, summary"):
            _find(history, "", operation="retrieve", topic="ferry", where=where)

    @pytest.mark.parametrize(
        ("data", "fragment"),
        [
            ({"where": "archive"}, "narrows a topic search"),
            ({"where": "summary", "seqs": [10]}, "narrows a topic search"),
            ({"topic": "ferry", "where": "buffer", "archived": True}, "archived searches"),
            ({"topic": "ferry", "where": "archive", "last_n": 3}, "last_n chooses"),
            ({"topic": "ferry", "where": ["buffer", "archive"], "seqs": [1]}, "seqs chooses"),
        ],
    )
    def test_where_that_would_be_ignored_or_leave_nothing_is_refused(
        self, history: ConversationHistory, data: dict, fragment: str
    ) -> None:
        """Applied silently, these answered with the buffer or with nothing (review of issue 27)."""
        with pytest.raises(InvalidRequest, match=fragment):
            _find(history, "", operation="retrieve", **data)

    def test_index_cache_is_bounded_by_documents(self) -> None:
        """Past max_documents the least recently searched conversations' indexes are dropped."""
        history = ConversationHistory(background=False, settings=Settings(buffer_size=100))
        history.indexes.max_documents = 15
        for cid in ("a", "b", "c"):
            for i in range(6):
                history.query(f"Add utterance: word{i}", {"conversation_id": cid})
            history.query("Find utterances about word1", {"conversation_id": cid})
        history.query("Find utterances about word1", {"conversation_id": "c"})
        assert history.indexes.peek("a") is None and history.indexes.peek("c") is not None


class TestWordForms:
    """Spelling variants and inflections of a topic word find each other (issue 27)."""

    @pytest.mark.parametrize(
        ("stored", "topic"),
        [
            ("the colour of the new sofa", "color"),
            ("we met at the theater downtown", "theatre"),
            ("she organized the whole trip", "organising"),
            ("I painted the fence on sunday", "painting"),
            ("two forecasts disagreed", "forecast"),
            ("my favourite band", "favorite"),
            ("a quiet neighborhood", "neighbourhood"),
            ("we were travelling all week", "traveled"),
            ("the flight was cancelled", "canceling"),
            ("her mum called", "mom"),
            ("I practise the piano", "practicing"),
            ("a grey cat", "gray"),
            ("they showed three paintings", "paint"),
        ],
    )
    def test_a_variant_of_the_word_is_found(self, stored: str, topic: str) -> None:
        """British/American spellings, verb forms and plurals are one term."""
        history = ConversationHistory(background=False)
        history.query(f"Add utterance: {stored}")
        history.query("Add utterance: nothing to do with it")
        assert [
            h["seq"] for h in _find(history, "", operation="retrieve", topic=topic)["utterances"]
        ] == [1]

    def test_short_words_are_not_folded_together(self) -> None:
        """'four' is not 'for' and 'hour' is kept: the -our fold needs 6 letters."""
        history = ConversationHistory(background=False)
        history.query("Add utterance: four tickets")
        assert [
            h["seq"] for h in _find(history, "", operation="retrieve", topic="four")["utterances"]
        ] == [1]


class TestQuestionWords:
    """A question's own words do not decide its hits (issue 27)."""

    def test_pronouns_and_kind_words_match_nothing(self) -> None:
        """'What kind of books does he like?' is about books, not 'he' or 'kind'."""
        history = ConversationHistory(background=False)
        history.query("Add utterance: he is kind and he said his kind of day was long")
        history.query("Add utterance: I read two books a week")
        hits = _find(history, "", operation="retrieve", topic="What kind of books does he like?")
        assert [h["seq"] for h in hits["utterances"]] == [2]

    def test_a_topic_of_only_such_words_still_searches_them(self) -> None:
        history = ConversationHistory(background=False)
        history.query("Add utterance: that was kind of you")
        hits = _find(history, "", operation="retrieve", topic="kind")
        assert [h["seq"] for h in hits["utterances"]] == [1]

    @pytest.mark.parametrize("topic", ["will", "Will", "can", "how", "The Who", "IT"])
    def test_a_topic_of_only_unindexed_words_is_refused_saying_so(self, topic: str) -> None:
        """They are not indexed: the search came back empty, nothing said why (review of issue 27)."""
        history = ConversationHistory(background=False)
        history.query("Add utterance: Will said he would bring the cake")
        with pytest.raises(InvalidRequest, match="only words too common to search by"):
            _find(history, "", operation="retrieve", topic=topic)

    def test_an_utterance_with_more_of_the_topic_outranks_one_repeating_a_rare_word(
        self,
    ) -> None:
        """Coordination: 'pottery class schedule' ranks the one naming all three first.

        Without it the newer utterance saying only the rarest word, three
        times, came first (2.92 against 2.59).
        """
        history = ConversationHistory(background=False)
        history.query("Add utterance: the pottery class has a new schedule")
        for filler in (
            "class is over",
            "the schedule moved",
            "class schedule again",
            "a class",
            "schedule it",
            "lunch at noon",
            "see you",
            "the class schedule",
        ):
            history.query(f"Add utterance: {filler}")
        history.query("Add utterance: pottery, pottery, I love pottery")
        hits = _find(history, "", operation="retrieve", topic="pottery class schedule")
        assert hits["utterances"][0]["seq"] == 1


class TestNeighbours:
    """A turn next to another on the same topic ranks higher (issue 27: neighbouring-turn context)."""

    def test_an_answer_after_a_question_on_the_topic_outranks_a_lone_mention(self) -> None:
        """Two equal mentions: the one right after a question about the topic comes first, though it is older."""
        history = ConversationHistory(background=False, settings=Settings(buffer_size=100))
        for speaker, text in (
            ("user", "was the lake cold?"),
            ("assistant", "the lake was cold"),
            ("user", "unrelated chatter"),
            ("assistant", "more chatter here"),
            ("user", "the lake was cold"),
        ):
            history.query(f"Add {speaker} utterance: {text}")
        hits = _find(history, "", operation="retrieve", topic="lake cold")["utterances"]
        assert [h["seq"] for h in hits][:2] == [2, 5]

    def test_a_filter_does_not_change_the_context_a_neighbour_gives(self) -> None:
        """A neighbour the filter excludes still lends its relevance, as term statistics ignore filters."""
        history = ConversationHistory(background=False, settings=Settings(buffer_size=100))
        for speaker, text in (
            ("user", "was the lake cold?"),
            ("assistant", "the lake was cold"),
            ("user", "unrelated chatter"),
            ("assistant", "the lake was cold"),
        ):
            history.query(f"Add {speaker} utterance: {text}")
        everyone = _find(history, "", operation="retrieve", topic="lake cold")["utterances"]
        assistant = _find(
            history, "", operation="retrieve", topic="lake cold", speaker="assistant"
        )["utterances"]
        assert [(h["seq"], h["score"]) for h in assistant] == [
            (h["seq"], h["score"]) for h in everyone if h["seq"] != 1
        ]

    def test_silent_neighbours_are_not_hits(self) -> None:
        """Only utterances that mention the topic come back, whatever their neighbours say."""
        history = ConversationHistory(background=False)
        for text in ("the lake was cold", "yes", "the lake again"):
            history.query(f"Add utterance: {text}")
        assert sorted(
            h["seq"] for h in _find(history, "Find utterances about the lake")["utterances"]
        ) == [1, 3]


class TestCliLines:
    """The chd command prints every kind of hit of the one search (issue 27)."""

    def test_summary_and_archived_hits_are_printed_with_where_they_live(self) -> None:
        """A summary segment has no seq: it is printed with its turns; an archived hit says so."""
        from chd.cli.answer import utterance_line

        segment = {
            "where": "summary",
            "text": "they booked a ferry",
            "score": 1.5,
            "turn_from": 1,
            "turn_to": 4,
        }
        archived = {
            "where": "archive",
            "seq": 3,
            "turn_number": 2,
            "speaker": "user",
            "text": "ferry",
            "score": 1.0,
        }
        assert utterance_line(segment) == "summary [turns 1-4]: they booked a ferry  score 1.500"
        assert utterance_line(archived) == "#3 [turn 2] user (archive): ferry  score 1.000"


class TestExpansion:
    """Words of the best hits reorder the others; the best literal match stays first (issue 27)."""

    @pytest.fixture
    def history(self) -> ConversationHistory:
        history = ConversationHistory(background=False, settings=Settings(buffer_size=100))
        for text in (
            "lake lake kayak heron",
            "unrelated filler",
            "lake kayak heron",
            "more filler",
            "lake pizza bread",
            "filler",
            "a long note on the lake written with many other words in it",
        ):
            history.query(f"Add utterance: {text}")
        return history

    def test_a_hit_sharing_the_best_hits_rare_words_outranks_a_newer_one(
        self, history: ConversationHistory
    ) -> None:
        """'lake kayak heron' shares kayak and heron with the best hit, so it beats the newer 'lake pizza bread'."""
        hits = _find(history, "Find utterances about the lake")["utterances"]
        assert [h["seq"] for h in hits] == [1, 3, 5, 7]
        assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)

    def test_without_expansion_recency_decides(
        self, history: ConversationHistory, monkeypatch
    ) -> None:
        """The same search with expansion off puts the newer one first among equals: expansion made the difference."""
        import chd.core.memory.search as search

        monkeypatch.setattr(search, "EXPANSION_WEIGHT", 0.0)
        assert [
            h["seq"] for h in _find(history, "Find utterances about the lake")["utterances"]
        ] == [1, 5, 3, 7]


def _distinct_words(rng: Any, count: int) -> str:
    return " ".join(f"w{rng.getrandbits(40):x}" for _ in range(count))


class TestIndexBytes:
    """The index cache is bounded by the bytes its indexes take, a share of max_memory_bytes (outside review of issue 28)."""

    @pytest.mark.parametrize(
        "words,vocabulary", [(2000, None), (2000, 500), (2, 10), (2, None), (50, 1000)]
    )
    def test_estimate_is_at_least_what_the_index_allocates(
        self, words: int, vocabulary: int | None
    ) -> None:
        """ConversationIndex.bytes is not below 90 % of what tracemalloc sees the index allocate, nor over 3x."""
        import random
        import tracemalloc

        from chd.core.memory.terms import term_counts
        from chd.core.utterance import Utterance

        rng = random.Random(words * 7 + (vocabulary or 0))
        pool = [f"w{rng.getrandbits(40):x}" for _ in range(vocabulary)] if vocabulary else None
        texts = [
            " ".join(rng.choices(pool, k=words)) if pool else _distinct_words(rng, words)
            for _ in range(max(20, 4000 // words))
        ]
        for text in texts:  # the term cache is apart from the index (its own bound)
            term_counts(text)
        utterances = [
            Utterance(
                conversation_id="c",
                seq=n + 1,
                speaker="user",
                text=t,
                turn_number=n,
                timestamp="2026-01-01T00:00:00Z",
                tokens=1,
            )
            for n, t in enumerate(texts)
        ]
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            index = ConversationIndex()
            for utterance in utterances:
                index.add(utterance)
            allocated = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert 0.9 * allocated <= index.bytes <= 3 * allocated

    def test_removing_everything_brings_the_estimate_back_to_zero(self) -> None:
        """Discarding every utterance leaves an estimate of 0 bytes."""
        history = ConversationHistory(background=False)
        for n in range(5):
            history.query(f"Add utterance: paris hotel {n} rain")
        _find(history, "", operation="retrieve", topic="paris")
        index = history.indexes.peek("default")
        assert index is not None and index.bytes > 0
        for seq in range(1, 6):
            history.query(f"Remove utterance {seq}")
        _find(history, "", operation="retrieve", topic="paris")
        assert index.bytes == 0

    def test_searching_many_conversations_keeps_the_cache_within_its_bound(self) -> None:
        """After each search and each store, the cached indexes' estimate is at most max_bytes; recent ones are kept."""
        import random

        rng = random.Random(28)
        history = ConversationHistory(background=False, settings=Settings(buffer_size=1000))
        history.indexes.max_bytes = 2_000_000
        for n in range(12):
            for _ in range(3):
                history.query(
                    "",
                    {"conversation_id": f"c{n}"},
                    {"operation": "store", "text": _distinct_words(rng, 600)},
                )
        for n in range(12):
            history.query(
                "", {"conversation_id": f"c{n}"}, {"operation": "retrieve", "topic": "paris"}
            )
            assert history.indexes.bytes <= 2_000_000
            assert history.indexes.peek(f"c{n}") is not None
        history.query(
            "",
            {"conversation_id": "c11"},
            {"operation": "store", "text": _distinct_words(rng, 600)},
        )
        assert history.indexes.bytes <= 2_000_000
        assert 1 < len(history.indexes) < 12

    def test_an_index_over_the_bound_alone_is_dropped_after_its_search(self) -> None:
        """A conversation whose index alone exceeds max_bytes is searched correctly and not kept."""
        import random

        history = ConversationHistory(background=False, settings=Settings(buffer_size=1000))
        history.indexes.max_bytes = 100_000
        for _ in range(3):
            history.query(
                "",
                {},
                {"operation": "store", "text": _distinct_words(random.Random(1), 600) + " paris"},
            )
        hits = _find(history, "", operation="retrieve", topic="paris")["utterances"]
        assert len(hits) == 3
        assert len(history.indexes) == 0

    def test_serve_gives_the_indexes_half_of_max_memory_bytes(self) -> None:
        """`chd serve` and `chd mcp` bound the index cache by half of max_memory_bytes."""
        from chd.mcp.serve import open_local
        from chd.service.config import load

        answerer = open_local(load({"max_memory_bytes": 20_000_000}, {}), MemoryBackend())
        assert answerer.history.indexes.max_bytes == 10_000_000
