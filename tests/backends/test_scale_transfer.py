"""Export and import stream (issue 17): memory does not grow with the file; the round trip is exact."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

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
            history.query(
                f"Add utterance: Crate {turn} of ship {c} holds {turn * 3} barrels.", meta
            )
        history.query("Get summary", meta)
        history.query("Add utterance: one more after the fold", meta)
    backend.transact(
        "conv0000",
        lambda s: (
            Change(
                pending_add=[s.utterances[0]],
                remove={s.utterances[0].seq},
                settings={"buffer_size": 7},
            ),
            None,
        ),
    )


class TestStreaming:
    """An import holds a batch of conversations at most, whatever the file's length."""

    def test_an_import_holds_no_more_than_a_batch_of_conversations_at_once(
        self, tmp_path: Path
    ) -> None:
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
            "big00123",
            **{
                f: getattr(source.read("conv0001"), f)
                for f in ("next_seq", "last_turn", "summary", "settings")
            },
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

    def test_export_import_export_gives_the_same_file_and_the_same_states(
        self, tmp_path: Path
    ) -> None:
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
                stdin=stdin,
                capture_output=True,
                text=True,
                env=chd_env(),
                cwd=ROOT,
                timeout=60,
            )
        assert piped.returncode == 0, piped.stderr
        assert piped.stderr.count("imported conv") == 12
        again = tmp_path / "second.jsonl"
        assert (
            run_chd(
                "export", "--data-dir", str(tmp_path / "second"), "--output", str(again)
            ).returncode
            == 0
        )
        assert again.read_bytes() == exported.read_bytes()
        second = DiskBackend(tmp_path / "second")
        assert {cid: second.read(cid) for cid in second.conversations()} == expected
        assert expected["conv0000"].pending and expected["conv0003"].archive
        assert second.count_conversations() == 12
        assert list(second.queued_conversations()) == [c for c, s in expected.items() if s.pending]
        second.close()


def _moved(utterance, conversation_id: str):
    return replace(utterance, conversation_id=conversation_id)


def _line(where: str, **fields) -> str:
    """An utterance line as chd export writes it (fields in Utterance.to_record's order)."""
    record = {
        "seq": 1,
        "speaker": "user",
        "text": "hello",
        "turn_number": 1,
        "timestamp": "2026-01-01T00:00:00Z",
        "tokens": 2,
        "conversation_id": "c",
        "important": False,
    }
    record.update(fields)
    return json.dumps(
        {"record": "utterance", "in": where, **record}, ensure_ascii=False, separators=(",", ":")
    )


def _header(cid: str = "c", next_seq: int = 10, **fields) -> str:
    return json.dumps(
        {
            "record": "conversation",
            "format": 1,
            "conversation_id": cid,
            "next_seq": next_seq,
            "last_turn": 9,
            "settings": {},
            **fields,
        }
    )


def _stored_rows(directory: Path) -> dict[str, tuple]:
    """Every row of the data dir's Cache table but its times, the meta records' tokens blanked."""
    import re
    import sqlite3

    with sqlite3.connect(directory / "cache.db") as db:
        rows = db.execute(
            "SELECT key, raw, expire_time, access_count, tag, size, mode, filename, value FROM Cache"
        )
        return {
            row[0]: (*row[1:8], re.sub(r'"token":"[^"]*"', '"token":""', str(row[8])))
            for row in rows
        }


class TestRecordsAsText:
    """Utterances move as the JSON text of their records (issue 17), and still come out as chd writes them."""

    def test_lines_in_any_valid_form_are_stored_and_exported_as_chd_writes_them(
        self, tmp_path: Path
    ) -> None:
        """Spaces, key order, escapes, a repeated key, a record-like text: same states, canonical export."""
        from chd.core.transfer import import_encoded, read_export

        tricky = 'a text with {"seq":2,"speaker":"user"} and ,{"seq":3, inside, \\ and "quotes" and [brackets]'
        lines = [
            _header(next_seq=12),
            # As chd writes it, but a text that looks like the start of another record.
            _line("archive", seq=1, text=tricky),
            # Spaces after the separators.
            json.dumps(json.loads(_line("archive", seq=2))),
            # The fields in another order, an escaped character, no "important".
            '{"record":"utterance","in":"archive","conversation_id":"c","text":"caf\\u00e9","seq":3,'
            '"speaker":"assistant","turn_number":3,"timestamp":"t3","tokens":4}',
            # "in" twice: JSON keeps the last, so it is archived, and no stored record keeps an "in".
            _line("buffer", seq=4)[:-1] + ',"in":"archive"}',
            # A repeated key whose first value is a record-like object.
            _line("buffer", seq=5)[:-1].replace('"seq":5,', '"seq":{"seq":9},"seq":5,', 1) + "}",
            _line("pending", seq=6, text="x" * 600),  # a long text: its own record
            _line("buffer", seq=7, text="y" * 600, speaker="system", important=True),
            _line("buffer", seq=8, text='an "escaped" quote'),
            _line("buffer", seq=11, text="last"),
        ]
        conversations = list(read_export(lines))
        target = DiskBackend(tmp_path / "data")
        import_encoded(target, conversations)
        state = target.read("c")
        assert [u.seq for u in state.archive] == [1, 2, 3, 4]
        assert [u.seq for u in state.pending] == [6]
        assert [u.seq for u in state.utterances] == [5, 7, 8, 11]
        assert state.archive[0].text == tricky and state.archive[2].text == "café"
        assert state.utterances[0].seq == 5 and state.utterances[1].important
        exported = list(export_lines(target, ["c"]))
        canonical = (
            [_line("buffer", **u.to_record()) for u in state.utterances]
            + [_line("pending", **u.to_record()) for u in state.pending]
            + [_line("archive", **u.to_record()) for u in state.archive]
        )
        assert exported[1:] == canonical
        # Read afresh from disk (no cache), the same.
        target.close()
        again = DiskBackend(tmp_path / "data")
        assert list(export_lines(again, ["c"])) == exported
        assert again.read("c") == state
        again.close()

    def test_a_lone_surrogate_escape_is_refused_naming_its_line(self, tmp_path: Path) -> None:
        """JSON lets "\\ud800" through, but no UTF-8 can hold it: it was a traceback from SQLite after the check."""
        half = _line("buffer", seq=2, text="half X a pair").replace("X", "\\ud800")
        lone = [_header(next_seq=3), _line("buffer", seq=1), half]
        path = tmp_path / "lone.jsonl"
        path.write_text("\n".join(lone) + "\n", encoding="utf-8")
        done = run_chd("import", str(path), "--data-dir", str(tmp_path / "data"))
        assert done.returncode == 1
        assert done.stderr.strip() == (
            "chd: line 3: holds a \\ud800-\\udfff escape without its pair, which is not a character"
        )
        assert not (tmp_path / "data").exists()
        # A whole pair is one character, and imports.
        pair = _line("buffer", seq=2, text="X").replace("X", "\\ud83d\\ude00")
        path.write_text("\n".join([*lone[:2], pair]) + "\n", encoding="utf-8")
        done = run_chd("import", str(path), "--data-dir", str(tmp_path / "data"))
        assert done.returncode == 0, done.stderr
        backend = DiskBackend(tmp_path / "data")
        assert backend.read("c").utterances[-1].text == "\U0001f600"
        backend.close()

    def test_the_batch_path_writes_the_rows_cache_set_writes(self, tmp_path: Path) -> None:
        """write_encoded's rows, written with diskcache's own Cache.set, are the same rows, column for column."""
        import diskcache

        from chd.backends.encoded import EncodedConversation

        source = MemoryBackend()
        _filled(source, 4)
        long_one = source.read("conv0002")
        source.transact(
            "conv0002",
            lambda s: (
                Change(
                    append=[replace(long_one.utterances[-1], seq=s.next_seq, text="z" * 700)],
                    next_seq=s.next_seq + 1,
                ),
                None,
            ),
        )
        states = [source.read(cid) for cid in source.conversations()]
        batched = DiskBackend(tmp_path / "batched")
        batched.write_encoded([EncodedConversation.from_state(s) for s in states], replace=False)
        batched.close()
        rows = _stored_rows(tmp_path / "batched")
        assert any(key.startswith("u:conv0002#") for key in rows)  # the long text, on its own
        by_set = diskcache.Cache(
            str(tmp_path / "by-set"), eviction_policy="none", cull_limit=0, disk_min_file_size=2**30
        )
        for key, row in rows.items():
            by_set.set(key, row[-1])
        by_set.close()
        assert _stored_rows(tmp_path / "by-set") == rows
        reopened = DiskBackend(tmp_path / "batched")
        assert [reopened.read(s.conversation_id) for s in states] == states
        assert reopened.count_conversations() == 4
        assert list(reopened.queued_conversations()) == [
            s.conversation_id for s in states if s.pending
        ]
        reopened.close()

    def test_a_batch_with_a_conversation_that_holds_data_writes_nothing_unless_replacing(
        self, tmp_path: Path
    ) -> None:
        """The whole batch is one transaction: refused, none of it is written; with replace, all of it is."""
        from chd.backends.encoded import EncodedConversation

        source = MemoryBackend()
        _filled(source, 3)
        target = DiskBackend(tmp_path / "data")
        target.transact(
            "conv0001", lambda s: (Change(next_seq=40, settings={"buffer_size": 3}), None)
        )
        batch = [EncodedConversation.from_state(source.read(cid)) for cid in source.conversations()]
        with pytest.raises(InvalidRequest, match="'conv0001' already holds data; use --replace"):
            target.write_encoded(batch, replace=False)
        assert target.conversations() == ["conv0001"] and target.count_conversations() == 1
        assert target.read("conv0000").is_empty
        target.write_encoded(batch, replace=True)
        assert [target.read(cid) for cid in source.conversations()] == [
            source.read(cid) for cid in source.conversations()
        ]
        assert target.count_conversations() == 3
        assert list(target.queued_conversations()) == [
            c for c in source.conversations() if source.read(c).pending
        ]
        target.close()

    def test_a_block_not_in_the_form_chd_writes_is_still_exported_right(
        self, tmp_path: Path
    ) -> None:
        """A block record with spaces or extra fields is read with the JSON decoder, not cut by position."""
        import diskcache

        from chd.backends.records import block_key

        backend = DiskBackend(tmp_path / "data")
        _filled(backend, 1)
        expected = list(export_lines(backend, ["conv0000"]))
        backend.close()
        cache = diskcache.Cache(str(tmp_path / "data"))
        key = block_key("conv0000", 0)
        record = json.loads(cache.get(key))
        record["utterances"][0]["note"] = "a field chd does not write"
        cache.set(key, json.dumps(record, indent=1))
        cache.close()
        reopened = DiskBackend(tmp_path / "data")
        assert list(export_lines(reopened, ["conv0000"])) == expected
        reopened.close()
