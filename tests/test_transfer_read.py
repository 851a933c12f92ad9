"""Reading an export (chd import's check pass): runs of lines, files read in blocks, the same answer every way (issue 17)."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from chd.backends.disk import DiskBackend
from chd.backends.encoded import EncodedConversation
from chd.core import transfer
from chd.core.errors import InvalidRequest
from chd.core.transfer import read_export
from tests.conftest import ROOT, chd_command, chd_env, run_chd


def _line(where: str, seq: int, cid: str = "c", **fields: Any) -> str:
    """An utterance line as chd export writes it."""
    record = {
        "seq": seq,
        "speaker": "user",
        "text": f"text {seq}",
        "turn_number": seq,
        "timestamp": "2026-01-01T00:00:00Z",
        "tokens": 2,
        "conversation_id": cid,
        "important": False,
    }
    record.update(fields)
    return json.dumps(
        {"record": "utterance", "in": where, **record}, ensure_ascii=False, separators=(",", ":")
    )


def _header(cid: str = "c", next_seq: int = 100, **fields: Any) -> str:
    return json.dumps(
        {
            "record": "conversation",
            "format": 1,
            "conversation_id": cid,
            "next_seq": next_seq,
            "last_turn": 9,
            "settings": {},
            **fields,
        },
        separators=(",", ":"),
    )


def _outcome(source: Any) -> Any:
    try:
        return list(read_export(source))
    except InvalidRequest as exc:
        return str(exc)


def _every_way(lines: list[str]) -> Any:
    """What read_export makes of ``lines`` as a file, as lines read from it, and as lines without newlines: one answer."""
    text = "".join(line + "\n" for line in lines)
    outcomes = [
        _outcome(io.StringIO(text)),
        _outcome(list(io.StringIO(text))),
        _outcome(list(lines)),
    ]
    assert outcomes[0] == outcomes[1] == outcomes[2]
    return outcomes[0]


TRICKY = [
    'a "quoted" word and a back\\slash',
    "café ü € 😀",
    'looks like {"record":"utterance","in":"buffer","seq":9} inside',
    "tab\there and a new\nline",
    "",
    "x" * 501,  # a long text: its own record on disk
    "é" * 450 + "\\" * 60,  # 510 characters: long
    "é" * 400 + "\\" * 60,  # 460 characters, 520 in JSON: not long
    "y" * 500,
]


class TestSameAnswerEveryWay:
    """A file, its lines and its lines without newlines read the same, whatever the lines hold."""

    def test_runs_of_plain_lines_and_tricky_ones_read_the_same(self) -> None:
        lines = [_header("a", next_seq=40)]
        lines += [_line("archive", seq, "a") for seq in range(1, 11)]
        lines += [
            _line("archive", 10 + i, "a", text=text) for i, text in enumerate(TRICKY, start=1)
        ]
        lines += [
            _line("pending", seq, "a", speaker="assistant", important=True) for seq in range(20, 25)
        ]
        lines += [_line("buffer", seq, "a") for seq in range(25, 40)]
        lines += [
            _header("b", next_seq=5),
            _line("buffer", 1, "b"),
            _line("archive", 2, "b"),
            _line("buffer", 3, "b"),
        ]
        conversations = _every_way(lines)
        assert [c.conversation_id for c in conversations] == ["a", "b"]
        a = conversations[0]
        assert [seq for seq, _, _ in a.archive] == list(range(1, 11 + len(TRICKY)))
        assert [long for _, long, _ in a.archive][10:] == [
            False,
            False,
            False,
            False,
            False,
            True,
            True,
            False,
            False,
        ]
        assert [json.loads(text)["text"] for _, _, text in a.archive][10:] == TRICKY
        assert all(text.startswith('{"seq":') for _, _, text in a.buffer + a.pending + a.archive)
        assert [seq for seq, _, _ in conversations[1].buffer] == [1, 3]

    @pytest.mark.parametrize(
        "bad, named",
        [
            (
                _line("buffer", 5, "other"),
                "line 6: utterance of conversation 'other' inside conversation 'c'",
            ),
            (_line("buffer", 5, timestamp="   "), "line 6: timestamp must not be empty"),
            (_line("buffer", 5, timestamp="\u3000"), "line 6: timestamp must not be empty"),
            (_line("buffer", 5, cid=""), "line 6: conversation_id must not be empty"),
            (_line("buffer", 5)[:-1], "line 6: not JSON"),
            (
                _line("buffer", 4),
                "conversation starting at line 1: the buffer utterances must have ascending",
            ),
        ],
    )
    def test_a_bad_line_inside_a_run_is_named(self, bad: str, named: str) -> None:
        """The run stops before it and the line is read on its own, which names what is wrong."""
        lines = (
            [_header()]
            + [_line("buffer", seq) for seq in range(1, 5)]
            + [bad]
            + [_line("buffer", seq) for seq in range(6, 9)]
        )
        assert _every_way(lines).startswith(named)

    def test_a_run_of_another_conversation_is_refused_at_its_first_line(self) -> None:
        lines = [_header("a"), _line("buffer", 1, "a")] + [
            _line("buffer", seq, "b") for seq in range(2, 6)
        ]
        assert _every_way(lines) == "line 3: utterance of conversation 'b' inside conversation 'a'"
        lines = [_line("buffer", seq) for seq in range(1, 4)] + [_header()]
        assert _every_way(lines) == "line 1: an utterance before any conversation line"

    def test_blank_lines_are_skipped_and_later_lines_keep_their_numbers(self) -> None:
        """A blank line before a line read as JSON once shifted that line's place (and refused the file)."""
        lines = [
            _header("a", next_seq=4),
            _line("buffer", 1, "a"),
            "",
            _line("buffer", 2, "a"),
            "  ",
            _header("b", next_seq=3),
            _line("buffer", 1, "b"),
        ]
        assert [c.conversation_id for c in _every_way(lines)] == ["a", "b"]
        lines[-1] = lines[-1][:-1]
        assert _every_way(lines).startswith("line 7: not JSON")

    def test_line_numbers_hold_across_chunks_and_blocks(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Read in blocks much smaller than a line, and chunks of a few lines, a bad line is still named."""
        lines = [_header(next_seq=2000)] + [_line("buffer", seq) for seq in range(1, 1200)]
        lines[700] = _line("buffer", 700, "other")
        expected = "line 701: utterance of conversation 'other' inside conversation 'c'"
        assert _every_way(lines) == expected
        monkeypatch.setattr(transfer, "_READ", 7)
        monkeypatch.setattr(transfer, "_CHUNK", 5)
        assert _every_way(lines) == expected
        lines[700] = _line("buffer", 700)
        assert sum(len(c.buffer) for c in _every_way(lines)) == 1199

    def test_a_line_of_a_megabyte_of_escapes_quotes_or_spaces_reads(self) -> None:
        """One string of a million backslashes, quotes or spaces: read whole (its time is probed in bench/)."""
        for text in ("\\" * 1_000_000, 'a"' * 500_000, " " * 1_000_000):
            lines = [_header(next_seq=3), _line("buffer", 1, text=text), _line("buffer", 2)]
            (conversation,) = _every_way(lines)
            assert [long for _, long, _ in conversation.buffer] == [True, False]
            assert json.loads(conversation.buffer[0][2])["text"] == text


class TestSummaryChecks:
    """The usual summary is checked without a call per field; any other is checked as before."""

    def test_a_whole_number_written_as_a_float_still_reads(self) -> None:
        segment = {
            "text": "t",
            "tokens": 3,
            "seq_from": 1,
            "seq_to": 2,
            "turn_from": 1,
            "turn_to": 2,
        }
        plain = _every_way(
            [_header(summary={"segments": [segment], "through_seq": 2, "tokens": 3})]
        )
        floated = _every_way(
            [
                _header(
                    summary={
                        "segments": [{**segment, "tokens": 3.0}],
                        "through_seq": 2,
                        "tokens": 3,
                    }
                )
            ]
        )
        assert plain == floated and plain[0].summary.segments[0].tokens == 3

    @pytest.mark.parametrize(
        "change, named",
        [
            ({"tokens": -1}, "summary segment 0 tokens must be at least 0"),
            ({"seq_to": True}, "summary segment 0 seq_to must be a whole number"),
            ({"made_by": None}, "summary segment 0 made_by must be a string"),
            ({"keys": ["a", 1]}, "summary segment 0 keys must be a list of strings"),
            ({"text": 5}, "summary segment 0 text must be a string"),
        ],
    )
    def test_a_bad_segment_field_is_named(self, change: dict[str, Any], named: str) -> None:
        segment = {
            "text": "t",
            "tokens": 3,
            "seq_from": 1,
            "seq_to": 2,
            "turn_from": 1,
            "turn_to": 2,
            **change,
        }
        outcome = _every_way(
            [_header(summary={"segments": [segment], "through_seq": 2, "tokens": 3})]
        )
        assert outcome.startswith(f"conversation starting at line 1: {named}")


class TestBatchWrite:
    """write_encoded inserts a batch's new conversations in one statement, as if one by one."""

    def test_the_same_conversation_twice_in_a_batch_is_refused_unless_replacing(
        self, tmp_path: Path
    ) -> None:
        first = EncodedConversation("c", next_seq=3, buffer=[(1, False, _record(1))])
        second = EncodedConversation("c", next_seq=4, buffer=[(2, False, _record(2))])
        backend = DiskBackend(tmp_path / "data")
        with pytest.raises(InvalidRequest, match="'c' already holds data"):
            backend.write_encoded(
                [
                    first,
                    EncodedConversation("d", next_seq=2, buffer=[(1, False, _record(1, "d"))]),
                    second,
                ],
                replace=False,
            )
        assert (
            backend.count_conversations() == 0
            and backend.read("c").is_empty
            and backend.read("d").is_empty
        )
        backend.write_encoded([first, second], replace=True)
        assert [u.seq for u in backend.read("c").utterances] == [2] and backend.read(
            "c"
        ).next_seq == 4
        assert backend.count_conversations() == 1
        backend.close()


def _record(seq: int, cid: str = "c") -> str:
    return _line("buffer", seq, cid).replace('{"record":"utterance","in":"buffer",', "{", 1)


def test_an_import_of_a_file_with_blank_lines_and_every_kind_of_line(tmp_path: Path) -> None:
    """Through the command: read in blocks, stored, exported again as chd writes it."""
    lines = (
        [_header("a", next_seq=40)] + [_line("archive", seq, "a") for seq in range(1, 11)] + [""]
    )
    lines += [_line("archive", 10 + i, "a", text=text) for i, text in enumerate(TRICKY, start=1)]
    lines += [json.dumps(json.loads(_line("buffer", 30, "a")))]  # spaces: the line read on its own
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = run_chd("import", str(path), "--data-dir", str(tmp_path / "data"))
    assert done.returncode == 0, done.stderr
    backend = DiskBackend(tmp_path / "data")
    state = backend.read("a")
    assert [u.text for u in state.archive][10:] == TRICKY and [u.seq for u in state.utterances] == [
        30
    ]
    backend.close()


@pytest.mark.parametrize("from_stdin", [False, True])
def test_a_byte_that_is_not_utf8_is_refused_naming_its_line(
    tmp_path: Path, from_stdin: bool
) -> None:
    """Not a UnicodeDecodeError traceback: one line naming where, and nothing imported."""
    lines = [_header("a", next_seq=40)] + [_line("archive", seq, "a") for seq in range(1, 6)]
    data = (
        ("\n".join(lines) + "\n").encode()
        + _line("archive", 6, "a").encode().replace(b"text 6", b"text \xff6")
        + b"\n"
    )
    path = tmp_path / "in.jsonl"
    path.write_bytes(data)
    source = "-" if from_stdin else str(path)
    done = subprocess.run(
        [*chd_command(), "import", source, "--data-dir", str(tmp_path / "data")],
        input=data,
        capture_output=True,
        timeout=30,
        env=chd_env(),
        cwd=ROOT,
    )
    stderr = done.stderr.decode()
    assert done.returncode != 0
    assert "line 7: not UTF-8 text (byte 0xff)" in stderr
    assert "Traceback" not in stderr
    assert not (tmp_path / "data").exists()


def _conversations(ids: range, prefix: str = "c") -> list[str]:
    lines = []
    for i in ids:
        lines += [
            _header(f"{prefix}{i}", next_seq=3),
            _line("buffer", 1, f"{prefix}{i}"),
            _line("buffer", 2, f"{prefix}{i}"),
        ]
    return lines


def test_a_bad_line_after_written_batches_leaves_no_new_data_dir(tmp_path: Path) -> None:
    """A new data dir is written in one pass: batches land before the bad line is read, and all of it goes."""
    lines = _conversations(range(2 * transfer.BATCH_CONVERSATIONS + 1)) + [
        '{"record": "utterance", "in": "buffer"'
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = run_chd("import", str(path), "--data-dir", str(tmp_path / "new" / "data"))
    assert done.returncode == 1
    assert f"line {len(lines)}:" in done.stderr
    assert not (tmp_path / "new").exists()


def test_a_bad_line_changes_nothing_in_a_data_dir_that_holds_data(tmp_path: Path) -> None:
    """Into a dir that exists, the whole file is checked before the first write."""
    data = tmp_path / "data"
    first = tmp_path / "first.jsonl"
    first.write_text("\n".join(_conversations(range(3), "old")) + "\n", encoding="utf-8")
    assert run_chd("import", str(first), "--data-dir", str(data)).returncode == 0
    lines = _conversations(range(transfer.BATCH_CONVERSATIONS + 1)) + ["not json"]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = run_chd("import", str(path), "--data-dir", str(data))
    assert done.returncode == 1 and f"line {len(lines)}:" in done.stderr
    backend = DiskBackend(data)
    assert sorted(backend.conversations()) == ["old0", "old1", "old2"]
    backend.close()
