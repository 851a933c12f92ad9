"""Every console transcript of README.md and docs/ prints, today, what it shows (tests/transcripts.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.transcripts import (
    DOCUMENTS,
    Transcript,
    commands_outside_console_blocks,
    jobs_left,
    matches,
    names_jobs,
    normalized,
    replay,
    transcripts,
)

ALL = transcripts()
# The blocks left out, each with the reason its marker gives: adding one is a decision.
NOT_REPLAYED = {"docs/operations.md: Deploying"}


@pytest.mark.parametrize(
    "transcript", [t for t in ALL if t.not_replayed is None], ids=lambda t: t.name
)
def test_the_transcript_prints_what_the_doc_shows(transcript: Transcript, tmp_path: Path):
    """Each command, run in order as the block says, prints what follows it in the doc."""
    replay(transcript, tmp_path)


def test_the_transcripts_are_found_where_the_docs_have_them():
    """The tour, Summaries, storage, Redis, configuration and grpcurl sessions are all found."""
    names = {t.name for t in ALL}
    for name in (
        "README.md: A short tour",
        "README.md: Talking to chd",
        "README.md: Summaries",
        "README.md: Durable storage",
        "README.md: Durable storage (2)",
        "README.md: Running the daemon",
        "README.md: Running the daemon (2)",
        "docs/operations.md: Configuring",
        "docs/operations.md: Configuring (2)",
        "docs/operations.md: Health and reflection: a grpcurl session",
    ):
        assert name in names
    assert sum(len(t.steps()) for t in ALL) >= 50


def test_only_the_listed_transcripts_are_not_replayed_and_each_says_why():
    left_out = {t.name: t.not_replayed for t in ALL if t.not_replayed is not None}
    assert set(left_out) == NOT_REPLAYED
    assert all(len(reason or "") >= 20 for reason in left_out.values())


def test_a_block_naming_jobs_by_number_follows_one_that_left_no_job_running():
    """A reader runs a document's blocks in one shell: jobs a block leaves behind renumber the next
    block's ``%N`` (newcomer 32 #3: the Redis block's ``kill -9 %2`` killed redis-server)."""
    for before, after in zip(ALL, ALL[1:]):
        if before.path == after.path and names_jobs(after):
            assert jobs_left(before) == [], (before.name, after.name)


@pytest.mark.parametrize("path", DOCUMENTS)
def test_every_command_shown_in_a_doc_is_in_a_console_block(path: str):
    """A `$ ` line in another fence or an indented block would escape the replay."""
    assert commands_outside_console_blocks(path) == []


class TestComparison:
    """What the replay takes as the same output, and what it does not."""

    def test_a_changed_word_is_a_difference(self):
        assert not matches(["#1 [turn 1] user: hi"], ["#1 [turn 1] user: hello"])

    def test_an_extra_or_missing_line_is_a_difference(self):
        assert not matches(["a"], ["a", "b"])
        assert not matches(["a", "b"], ["a"])

    def test_an_ellipsis_line_stands_for_any_lines_and_only_there(self):
        assert matches(["a", "...", "z"], ["a", "z"])
        assert matches(["a", "...", "z"], ["a", "b", "c", "z"])
        assert not matches(["a", "...", "z"], ["a", "b", "y"])

    def test_times_and_replay_ports_read_as_documented(self):
        got = normalized(
            '"timestamp": "2026-11-27T20:01:02.5Z" on 127.0.0.1:41234  \n', {50051: 41234}
        )
        assert got == normalized(
            '"timestamp": "2026-11-24T03:19:18.533299Z" on 127.0.0.1:50051', {}
        )
        assert normalized("score 41234", {50051: 41235}) == ["score 41234"]
