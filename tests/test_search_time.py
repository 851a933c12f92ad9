"""Utterance times given on store (metadata.timestamp) and time filters on search (issue 27)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
import pytest

from chd.core.days import day_bounds, parse_zone
from chd.core.errors import InvalidRequest
from chd.core.history import ConversationHistory
from chd.core.language.parser import parse
from chd.core.settings import Settings
from tests.conftest import query
from tests.ops_support import ask, channel_to, running


def _store(history: ConversationHistory, text: str, when: str | None = None) -> dict[str, Any]:
    metadata = {} if when is None else {"timestamp": when}
    return history.query(f"Add utterance: {text}", metadata).result["utterance"]


def _seqs(history: ConversationHistory, **data: Any) -> list[int]:
    return sorted(
        u["seq"]
        for u in history.query("", {}, {"operation": "retrieve", **data}).result["utterances"]
    )


@pytest.fixture
def imported() -> ConversationHistory:
    """An imported history: utterances of April, May and June 2023, then one of now."""
    history = ConversationHistory(
        background=False,
        settings=Settings(
            buffer_size=3, eviction_batch=1, summarization_enabled=False, archive_evicted=True
        ),
    )
    _store(history, "we planned the garden", "2023-04-20T10:00:00Z")
    _store(history, "the garden got roses", "2023-05-03T09:30:00+02:00")
    _store(history, "the garden flooded", "2023-05-30T23:59:59Z")
    _store(history, "the garden is dry now", "2023-06-01T00:00:00Z")
    _store(history, "and today the garden is fine")
    return history


class TestStoredTime:
    """metadata.timestamp is kept as the utterance's time."""

    def test_given_time_is_kept_in_utc(self, imported: ConversationHistory) -> None:
        """An offset time is stored as the same instant in UTC, in the daemon's own format."""
        stored = imported.query("", {}, {"operation": "retrieve", "seqs": [4]}).result["utterances"]
        assert stored[0]["timestamp"] == "2023-06-01T00:00:00.000000Z"
        archived = imported.query("Get archived utterances").result["utterances"]
        assert archived[1]["timestamp"] == "2023-05-03T07:30:00.000000Z"

    def test_without_a_time_the_store_time_is_used(self) -> None:
        """No metadata.timestamp: now, as before."""
        history = ConversationHistory(background=False)
        when = datetime.fromisoformat(_store(history, "hello")["timestamp"])
        assert abs(when.timestamp() - time.time()) < 60

    def test_times_may_go_backwards(self) -> None:
        """An older time after a newer one is accepted: time filters test each utterance's own."""
        history = ConversationHistory(background=False)
        _store(history, "late", "2023-06-01T00:00:00Z")
        _store(history, "early", "2023-01-01T00:00:00Z")
        assert _seqs(history, since="2023-05-01T00:00:00Z") == [1]

    @pytest.mark.parametrize(
        ("when", "fragment"),
        [
            ("yesterday", "RFC 3339"),
            ("2023-05-01T10:00:00", "time zone"),
            (12345, "metadata.timestamp"),
            ((datetime.now(UTC) + timedelta(hours=1)).isoformat(), "in the future"),
        ],
        ids=["words", "no-zone", "a-number", "an-hour-ahead"],
    )  # fixed ids: parallel workers must collect the same
    def test_bad_time_is_refused_and_nothing_is_stored(self, when: Any, fragment: str) -> None:
        """Unparseable, zoneless or future times are INVALID_ARGUMENT; the store does not happen."""
        history = ConversationHistory(background=False)
        with pytest.raises(InvalidRequest, match=fragment):
            _store(history, "x", when)
        assert history.backend.read("default").utterances == []

    def test_a_little_clock_skew_is_accepted(self) -> None:
        """A time a minute ahead of the daemon's clock (another machine's clock) is kept."""
        history = ConversationHistory(background=False)
        ahead = (datetime.now(UTC) + timedelta(seconds=60)).isoformat()
        assert _store(history, "x", ahead)["seq"] == 1


class TestTimeFilters:
    """since and until choose utterances by their own time, in the one search too."""

    def test_a_month_is_since_its_first_day_until_the_next(
        self, imported: ConversationHistory
    ) -> None:
        """'in May 2023' as data: since 2023-05-01, until 2023-06-01 (exclusive)."""
        may = {"since": "2023-05-01T00:00:00Z", "until": "2023-06-01T00:00:00Z"}
        assert _seqs(imported, topic="garden", **may) == [2, 3]

    def test_until_alone_reaches_into_the_archive(self, imported: ConversationHistory) -> None:
        """Archived utterances are filtered by their time like buffered ones."""
        assert _seqs(imported, topic="garden", until="2023-05-01T00:00:00Z") == [1]

    def test_time_filter_keeps_summary_segments_out(self, imported: ConversationHistory) -> None:
        """A summary has no single time, so a time filter leaves segments out of the list."""
        hits = imported.query(
            "", {}, {"operation": "retrieve", "topic": "garden", "until": "2024-01-01T00:00:00Z"}
        ).result["utterances"]
        assert all(h["where"] != "summary" for h in hits)

    def test_until_before_since_is_refused(self, imported: ConversationHistory) -> None:
        """An empty time range is a mistake, not an empty answer."""
        with pytest.raises(InvalidRequest, match="must be after since"):
            _seqs(imported, since="2023-06-01T00:00:00Z", until="2023-05-01T00:00:00Z")


class TestThroughTheServer:
    """The real server on every backend: times kept, bad ones refused with INVALID_ARGUMENT."""

    def test_time_is_kept_and_filtered_on_every_backend(self, stub) -> None:
        """Stores with given times, then a topic search in a time range, over gRPC."""
        for text, when in (
            ("rain in april", "2023-04-02T08:00:00Z"),
            ("rain in may", "2023-05-02T08:00:00Z"),
        ):
            query(stub, f"Add utterance: {text}", {"timestamp": when})
        reply = query(
            stub,
            "",
            {},
            {
                "operation": "retrieve",
                "topic": "rain",
                "since": "2023-05-01T00:00:00Z",
                "until": "2023-06-01T00:00:00Z",
            },
        )
        hits = reply.result["utterances"]
        assert [(h["text"], h["timestamp"], h["where"]) for h in hits] == [
            ("rain in may", "2023-05-02T08:00:00.000000Z", "buffer")
        ]

    @pytest.mark.parametrize(
        ("metadata", "data", "fragment"),
        [
            (
                {"timestamp": "2099-01-01T00:00:00Z"},
                {"operation": "store", "text": "x"},
                "in the future",
            ),
            ({"timestamp": "May 2023"}, {"operation": "store", "text": "x"}, "metadata.timestamp"),
            ({}, {"operation": "retrieve", "topic": "x", "where": "attic"}, "data.where"),
            ({}, {"operation": "retrieve", "day": "the day after"}, "data.day"),
        ],
    )
    def test_bad_input_is_invalid_argument(self, stub, metadata, data, fragment) -> None:
        """Each bad value gets INVALID_ARGUMENT and a message naming the field."""
        with pytest.raises(grpc.RpcError) as refused:
            query(stub, "", metadata, data)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert fragment in refused.value.details()


class TestTimeInTheQueryLanguage:
    """'in May 2023', 'since <time>' and 'until <time>' end a topic and filter by time."""

    @pytest.fixture
    def history(self) -> ConversationHistory:
        history = ConversationHistory(background=False)
        for text, when in (
            ("garden in april", "2023-04-20T10:00:00Z"),
            ("garden in may", "2023-05-03T10:00:00Z"),
            ("garden in june", "2023-06-03T10:00:00Z"),
        ):
            _store(history, text, when)
        return history

    @pytest.mark.parametrize(
        ("text", "seqs"),
        [
            ("Find utterances about the garden in May 2023", [2]),
            ("What did the user say about the garden during jun 2023?", [3]),
            ("Find utterances about the garden until 2023-05-01", [1]),
            ("Find utterances about the garden since 2023-05-01 until 2023-06-01", [2]),
            ("Get utterances in April 2023", [1]),
            ("Get utterances in December 2023", []),
        ],
    )
    def test_time_phrase_filters(
        self, history: ConversationHistory, text: str, seqs: list[int]
    ) -> None:
        """Each phrase reads as since/until and leaves the topic alone."""
        assert sorted(u["seq"] for u in history.query(text).result["utterances"]) == seqs

    def test_a_month_in_december_ends_at_the_new_year(self) -> None:
        """'in December 2023' is until 2024-01-01."""
        history = ConversationHistory(background=False)
        _store(history, "party", "2023-12-31T23:00:00Z")
        _store(history, "party again", "2024-01-01T00:00:00Z")
        assert [
            u["seq"] for u in history.query("Get utterances in December 2023").result["utterances"]
        ] == [1]


# A Wednesday, 10:00 UTC: the daemon's clock in the day unit tests.
_WEDNESDAY = datetime(2026, 11, 25, 10, 0, tzinfo=UTC).timestamp()


def _days(spec: str, now: float = _WEDNESDAY, zone: Any = UTC) -> tuple[str, str]:
    first, end = day_bounds(spec, now, zone)
    shown = (datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M") for t in (first, end))
    return tuple(shown)  # type: ignore[return-value]


class TestDays:
    """Days and relative days (daemon/core/days.py): resolved against a clock, in a zone."""

    @pytest.mark.parametrize(
        ("spec", "bounds"),
        [
            ("today", ("2026-11-25T00:00", "2026-11-26T00:00")),
            ("yesterday", ("2026-11-24T00:00", "2026-11-25T00:00")),
            ("monday", ("2026-11-23T00:00", "2026-11-24T00:00")),
            ("wednesday", ("2026-11-18T00:00", "2026-11-19T00:00")),  # the latest before today
            ("last week", ("2026-11-16T00:00", "2026-11-23T00:00")),
            ("this week", ("2026-11-23T00:00", "2026-11-26T00:00")),
            ("2023-05-03", ("2023-05-03T00:00", "2023-05-04T00:00")),
            ("--05-03", ("2026-05-03T00:00", "2026-05-04T00:00")),
            ("--12-25", ("2025-12-25T00:00", "2025-12-26T00:00")),  # not yet this year
            ("--02-29", ("2024-02-29T00:00", "2024-03-01T00:00")),
        ],
    )
    def test_each_day_in_utc(self, spec: str, bounds: tuple[str, str]) -> None:
        assert _days(spec) == bounds

    def test_a_zone_moves_where_days_begin(self) -> None:
        """23:30 UTC is already Thursday at +02:00, so yesterday is Wednesday there."""
        late = datetime(2026, 11, 25, 23, 30, tzinfo=UTC).timestamp()
        assert _days("yesterday", late) == ("2026-11-24T00:00", "2026-11-25T00:00")
        assert _days("yesterday", late, parse_zone("+02:00")) == (
            "2026-11-24T22:00",
            "2026-11-25T22:00",
        )
        # A named zone follows its summer time: Paris is +02:00 on 3 May.
        assert _days("2023-05-03", zone=parse_zone("Europe/Paris"))[0] == "2023-05-02T22:00"

    @pytest.mark.parametrize(
        ("text", "day"),
        [
            ("What did we discuss yesterday?", "yesterday"),
            ("What did the user say about the garden today?", "today"),
            ("What did we talk about on Monday?", "monday"),
            ("What did the assistant say last Friday", "friday"),
            ("Get messages from last week", "last week"),
            ("What did we discuss this week?", "this week"),
            ("What did we discuss on 3 May?", "--05-03"),
            ("Find utterances about the garden on May 3rd, 2023", "2023-05-03"),
            ("Find utterances about the fence on the 3rd of May 2023", "2023-05-03"),
            ("Get messages on 2023-05-03", "2023-05-03"),
        ],
    )
    def test_phrases_read_as_a_day(self, text: str, day: str) -> None:
        assert parse(text).fields["day"] == day

    @pytest.mark.parametrize(
        ("text", "fields"),
        [
            ("What was said in the last week?", {"within_seconds": 604800}),  # a window, as before
            ("Find utterances about Mondays", {"topic": "Mondays"}),
            ("Find utterances about today's weather", {"topic": "today's weather"}),
        ],
    )
    def test_phrases_that_are_no_day_stay_as_they_were(self, text: str, fields: dict) -> None:
        assert parse(text).fields == fields

    def test_yesterday_against_the_daemons_clock(self) -> None:
        """Stored a day ago, three days ago and now: 'yesterday' finds the first alone."""
        history = ConversationHistory(background=False)
        now = datetime.now(UTC)
        for text, when in (
            ("we fixed the garden fence", now - timedelta(days=3)),
            ("the garden fence fell again", now - timedelta(days=1)),
            ("garden fence is fine now", None),
        ):
            _store(history, text, None if when is None else when.isoformat())
        found = history.query("What did we say about the garden fence yesterday?").result
        assert [u["text"] for u in found["utterances"]] == ["the garden fence fell again"]

    @pytest.mark.parametrize(
        ("data", "fragment"),
        [
            ({"day": "someday"}, "data.day"),
            ({"day": "2023-02-30"}, "not a day of the calendar"),
            ({"day": "today", "timezone": "Mars/Olympus"}, "data.timezone"),
            ({"day": "today", "timezone": "+25:00"}, "not a UTC offset"),
        ],
    )
    def test_a_bad_day_or_zone_is_refused_naming_it(self, data: dict, fragment: str) -> None:
        history = ConversationHistory(background=False)
        with pytest.raises(InvalidRequest, match=fragment):
            history.query("", {}, {"operation": "retrieve", **data})

    def test_an_impossible_date_in_words_is_refused(self) -> None:
        with pytest.raises(InvalidRequest, match="not a day of the calendar"):
            parse("What did we discuss on 31 February?")


class TestDaySpans:
    """'since / before / until / after <day>', 'the day before yesterday', two days refused (review of issue 27)."""

    @pytest.mark.parametrize(
        ("text", "day"),
        [
            ("What was said before yesterday?", "before yesterday"),
            ("Find garden since yesterday", "since yesterday"),
            ("Find utterances about garden since last week", "since last week"),
            ("What did we discuss the day before yesterday?", "day before yesterday"),
            ("Get messages until Friday", "until friday"),
            ("What was said after last week?", "after last week"),
            ("Find garden since May 3rd", "since --05-03"),
        ],
    )
    def test_a_relation_is_part_of_the_day(self, text: str, day: str) -> None:
        fields = parse(text).fields
        assert fields["day"] == day and "since" not in fields.get("topic", "")

    @pytest.mark.parametrize(
        "text", ["Get messages from yesterday and today", "Find garden on Monday on Tuesday"]
    )
    def test_two_days_are_refused(self, text: str) -> None:
        with pytest.raises(InvalidRequest, match="two days in one question"):
            parse(text)

    @pytest.mark.parametrize(
        ("text", "fragment"),
        [
            ("Get messages from next Monday", "a day to come"),
            ("What did we discuss on the 32nd of May?", "not a day of the calendar"),
            ("What did we discuss on 0 May?", "not a day of the calendar"),
        ],
    )
    def test_days_that_cannot_hold_anything_are_refused(self, text: str, fragment: str) -> None:
        """They became topics and answered empty (review of issue 27)."""
        with pytest.raises(InvalidRequest, match=fragment):
            parse(text)

    @pytest.mark.parametrize(
        ("spec", "bounds"),
        [
            ("since yesterday", ("2026-11-26", None)),
            ("after yesterday", ("2026-11-27", None)),
            ("before yesterday", (None, "2026-11-26")),
            ("until yesterday", (None, "2026-11-27")),
            ("day before yesterday", ("2026-11-25", "2026-11-26")),
            ("9999-12-31", ("9999-12-31", "+86400")),
        ],
    )
    def test_day_spans(self, spec: str, bounds: tuple[str | None, str | None]) -> None:
        now = datetime(2026, 11, 27, 21, 10, tzinfo=UTC).timestamp()
        first, end = day_bounds(spec, now)

        def at(day: str) -> float:
            return datetime.fromisoformat(day).replace(tzinfo=UTC).timestamp()

        assert first == (None if bounds[0] is None else at(bounds[0]))
        if bounds[1] == "+86400":  # the calendar's last day: no next date to begin at
            assert first is not None and end == first + 86400
        else:
            assert end == (None if bounds[1] is None else at(bounds[1]))

    def test_through_grpc(self) -> None:
        """Spans answer by the daemon's clock; bad days get INVALID_ARGUMENT, never INTERNAL."""
        today = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
        with running() as server, channel_to(server) as channel:
            for text, back in (("garden three", 3), ("garden two", 2), ("garden one", 1)):
                when = (today - timedelta(days=back)).isoformat()
                ask(channel, f"Add utterance: {text}", {"timestamp": when})
            ask(channel, "Add utterance: garden now")

            def texts(question: str, data: dict | None = None) -> list[str]:
                found = ask(channel, question, {}, data).result["utterances"]
                return sorted(u["text"] for u in found)

            assert texts("What was said before yesterday?") == ["garden three", "garden two"]
            assert texts("Find garden since yesterday") == ["garden now", "garden one"]
            assert texts("What did we discuss the day before yesterday?") == ["garden two"]
            assert texts("", {"operation": "retrieve", "day": "9999-12-31"}) == []
            for question, data, fragment in (
                ("Get messages from yesterday and today", None, "two days"),
                ("", {"operation": "retrieve", "topic": "will"}, "too common"),
                (
                    "",
                    {"operation": "retrieve", "day": "2011-12-30", "timezone": "Pacific/Apia"},
                    "data.day",
                ),
                (
                    "",
                    {"operation": "retrieve", "day": "\u0661\u0669\u0669\u0669-01-01"},
                    "data.day",
                ),
            ):
                with pytest.raises(grpc.RpcError) as refused:
                    ask(channel, question, {}, data)
                assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert fragment in refused.value.details()


class TestZoneNames:
    """Zone names in any case; metadata.timezone checked only where a day reads it (review of issue 27)."""

    def test_a_zone_name_in_any_case(self) -> None:
        assert (
            parse_zone("europe/paris") == parse_zone("EUROPE/PARIS") == parse_zone("Europe/Paris")
        )

    def test_a_bad_metadata_zone_matters_only_to_a_day(self) -> None:
        history = ConversationHistory(background=False)
        _store(history, "hello")
        assert _seqs_with(history, {"timezone": "Mars/Olympus"}, {}) == [1]
        with pytest.raises(InvalidRequest, match="metadata.timezone"):
            _seqs_with(history, {"timezone": "Mars/Olympus"}, {"day": "today"})


def _seqs_with(history: ConversationHistory, metadata: dict, data: dict) -> list[int]:
    found = history.query("", metadata, {"operation": "retrieve", **data}).result["utterances"]
    return [u["seq"] for u in found]
