"""Export and import stream (issue 17): memory does not grow with the file; the round trip is exact."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from chd.backends.base import Change, ConversationState
from chd.backends.disk import DiskBackend
from chd.backends.memory import MemoryBackend
from chd.core.errors import InvalidRequest
from chd.core.history import ConversationHistory
from chd.core.settings import Settings
from chd.core.transfer import BATCH_CONVERSATIONS, export_lines, import_stream, iter_states
from tests.conftest import ROOT, chd_env, run_chd


def _filled(backend, conversations: int) -> None:
    """Conversations with a buffer, a folded summary, a queue, an archive and a setting."""
    history = ConversationHistory(
        backend, Settings(buffer_size=4, eviction_batch=2, archive_evicted=True), background=False
    )
    for c in range(conversations):
        meta = {"conversation_id": f"conv{c:04d}"}
        for turn in range(9):
            history.query(f"Add utterance: Crate {turn} of ship {c} holds {turn * 3} barrels.", meta)
        history.query("Get summary", meta)
        history.query("Add utterance: one more after the fold", meta)
    backend.transact("conv0000", lambda s: (Change(
        pending_add=[s.utterances[0]], remove={s.utterances[0].seq}, settings={"buffer_size": 7}), None))


class TestStreaming:
    """An import holds a batch of conversations at most, whatever the file's length."""

    def test_an_import_holds_no_more_than_a_batch_of_conversations_at_once(self, tmp_path: Path) -> None:
        source = MemoryBackend()
        _filled(source, 3)
        template = list(export_lines(source, ["conv0001"]))
        total = 3 * BATCH_CONVERSATIONS + 17  # longer than one batch, many times over

        def lines() -> Iterator[str]:
            """The same conversation under many ids, generated as it is read (never a whole file)."""
            for i in range(total):
                header = json.loads(template[0])
                header["conversation_id"] = f"big{i:05d}"
                headers_read.append(i)
                yield json.dumps(header)
                for line in template[1:]:
                    record = json.loads(line)
                    record["conversation_id"] = f"big{i:05d}"
                    yield json.dumps(record)

        headers_read: list[int] = []
        parsed_when: list[int] = []  # conversations read from the input when each one was yielded

        def states() -> Iterator[ConversationState]:
            for state in iter_states(lines()):
                parsed_when.append(len(headers_read))
                yield state

        held: list[int] = []
        target = DiskBackend(tmp_path)

        def written(batch: list[ConversationState], counts) -> None:
            held.append(len(parsed_when) - counts.conversations + len(batch))

        counts = import_stream(target, states(), on_batch=written)
        assert counts.conversations == total
        # The parser reads a chunk of lines ahead (512 lines, a few dozen of
        # these conversations), never the file ...
        ahead = max(read - yielded for yielded, read in enumerate(parsed_when, start=1))
        assert ahead <= 512 // (len(template) - 1) + 2 < total // 10
        # ... and the writer holds one batch.
        assert max(held) <= BATCH_CONVERSATIONS
        assert target.count_conversations() == total
        assert target.read("big00123") == ConversationState(
            "big00123", **{f: getattr(source.read("conv0001"), f) for f in
                           ("next_seq", "last_turn", "summary", "settings")},
            utterances=[_moved(u, "big00123") for u in source.read("conv0001").utterances],
            pending=[_moved(u, "big00123") for u in source.read("conv0001").pending],
            archive=[_moved(u, "big00123") for u in source.read("conv0001").archive],
        )
        target.close()

    def test_a_line_that_is_not_json_deep_in_a_long_file_is_named(self) -> None:
        """Lines are decoded a chunk at a time; a bad one is still named by its number."""
        source = MemoryBackend()
        _filled(source, 70)
        lines = list(export_lines(source, source.conversations()))
        assert len(lines) > 700
        lines[699] = lines[699][:-3]
        with pytest.raises(InvalidRequest, match=r"^line 700: not JSON"):
            list(iter_states(lines))
        lines[699] = "[1, 2]"
        with pytest.raises(InvalidRequest, match=r"^line 700: each line must be a JSON object"):
            list(iter_states(lines))


class TestRoundTrip:
    """chd export, chd import (from a file or a pipe), chd export again: the same bytes."""

    def test_export_import_export_gives_the_same_file_and_the_same_states(self, tmp_path: Path) -> None:
        first = DiskBackend(tmp_path / "first")
        _filled(first, 12)
        expected = {cid: first.read(cid) for cid in first.conversations()}
        first.close()
        exported = tmp_path / "first.jsonl"
        done = run_chd("export", "--data-dir", str(tmp_path / "first"), "--output", str(exported))
        assert done.returncode == 0, done.stderr
        assert done.stderr.strip() == "exported 12 conversation(s)"
        with exported.open("rb") as stdin:
            piped = subprocess.run(
                [sys.executable, "-m", "chd", "import", "--data-dir", str(tmp_path / "second")],
                stdin=stdin, capture_output=True, text=True, env=chd_env(), cwd=ROOT, timeout=60,
            )
        assert piped.returncode == 0, piped.stderr
        assert piped.stderr.count("imported conv") == 12
        again = tmp_path / "second.jsonl"
        assert run_chd("export", "--data-dir", str(tmp_path / "second"), "--output", str(again)).returncode == 0
        assert again.read_bytes() == exported.read_bytes()
        second = DiskBackend(tmp_path / "second")
        assert {cid: second.read(cid) for cid in second.conversations()} == expected
        assert expected["conv0000"].pending and expected["conv0003"].archive
        assert second.count_conversations() == 12
        assert list(second.queued_conversations()) == [c for c, s in expected.items() if s.pending]
        second.close()


def _moved(utterance, conversation_id: str):
    from dataclasses import replace

    return replace(utterance, conversation_id=conversation_id)
