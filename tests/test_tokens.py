"""Token counting uses the real cl100k_base table and needs no network."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from chd.core.tokens import TiktokenCounter, default_counter
from tests.conftest import chd_env


class TestTokenCounting:
    """Counts match cl100k_base and trimming respects limits."""

    def test_counts_match_known_cl100k_values(self) -> None:
        """'hello world' is 2 tokens and the quick-brown-fox pangram 10 in cl100k_base."""
        counter = default_counter()
        assert counter.count("hello world") == 2
        assert counter.count("The quick brown fox jumps over the lazy dog.") == 10

    def test_special_token_text_is_counted_not_rejected(self) -> None:
        """A user typing '<|endoftext|>' is plain text, not an error."""
        assert default_counter().count("<|endoftext|>") > 1

    def test_counts_are_those_of_encode_with_special_tokens_as_text(self) -> None:
        """Counting reads special-token text exactly as encode(..., disallowed_special=()) does."""
        counter = default_counter()
        encoding = counter._encoding
        for text in (
            "<|endoftext|> and <|fim_prefix|>x<|endofprompt|>",
            "héllo 🎉 日本語\n\tend.",
            "",
            "a" * 3000,
        ):
            assert counter.count(text) == len(encoding.encode(text, disallowed_special=()))

    def test_truncate_never_exceeds_limit_even_mid_character(self) -> None:
        """Cutting multi-byte text stays within the limit and valid unicode."""
        counter = default_counter()
        text = "日本語のテキストと絵文字 🎉🎉🎉 " * 20
        for limit in range(1, 40):
            cut = counter.truncate(text, limit)
            assert counter.count(cut) <= limit
            assert "\ufffd" not in cut
            assert text.startswith(cut)

    def test_fit_prefers_a_sentence_end(self) -> None:
        """fit() drops the half sentence instead of ending mid-word."""
        counter = TiktokenCounter()
        assert counter.fit("One two. Three four five six seven.", 4) == "One two."


def test_counting_works_with_network_blocked(tmp_path) -> None:
    """In a fresh process with sockets disabled and an empty tiktoken cache, counting still works."""
    script = textwrap.dedent(
        """
        import socket
        def refuse(*args, **kwargs):
            raise OSError("network blocked by test")
        socket.socket = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse
        from chd.core.tokens import default_counter
        print(default_counter().count("hello world"))
        """
    )
    env = chd_env() | {"TIKTOKEN_CACHE_DIR": str(tmp_path / "empty-cache")}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"


class TestJoinedCounts:
    """A summary's count comes from its segments' counts, exactly as counting the joined text."""

    PARTS = [
        "Summary of turns 1 to 20: the harbour and the gull.",
        "ferry at 9:40",
        "it's",
        "'s",
        "’s fine",
        "end.",
        "end. ",
        "end.\n",
        "end \n",
        "trailing  ",
        "\n",
        "...",
        "—",
        "🙂 emoji",
        "naïve café",
        "日本語の文",
        "\xa0nbsp",
        "\u3000ideographic",
        "\x1cfile separator",
        "\tTab",
        " leading",
        "1234567",
        "x" * 250,
        "word " * 60,
        "Sentence. " * 30 + "!",
        "a\r\nb",
        "q?\n\n",
        "<|endoftext|>",
    ]

    def test_joined_counts_equal_the_count_of_the_joined_text(self) -> None:
        """Thousands of joins of tricky parts, long and short, agree with a plain count, as do long texts."""
        import random

        counter = TiktokenCounter()
        plain = counter._encoding.encode_ordinary
        rng = random.Random(3)
        for _ in range(3000):
            texts = [
                rng.choice(self.PARTS) + rng.choice(["", " ", ".", "\n", " and more words"])
                for _ in range(rng.randint(1, 5))
            ]
            assert counter.count_joined(texts) == len(plain("\n".join(texts))), texts
            assert counter.count("\n".join(texts)) == counter.count_joined(texts), texts

    def test_a_last_segment_ending_in_a_word_is_not_encoded_again_when_one_follows(self) -> None:
        """ "X\n" counts one more than "X" when X ends in a letter or digit: the second count reuses the first."""
        counter = TiktokenCounter()
        encoded: list[str] = []
        ids = counter._ids
        counter._ids = lambda text: (encoded.append(text), ids(text))[1]  # type: ignore[method-assign]
        older, last = (
            "Turns 1–20: the harbour pilot logged tides " * 3 + "and storms",
            "the ferry at 9:40 " * 8 + "x2",
        )
        counter.count_joined([older, last])
        encoded.clear()
        new = "Turn 21: the lighthouse keeper noted the gull colony " * 3 + "today"
        assert counter.count_joined([older, last, new]) == len(
            counter._encoding.encode_ordinary("\n".join([older, last, new]))
        )
        assert encoded == [new]

    def test_lines_are_cut_where_the_pattern_cuts(self) -> None:
        """The str.find cutting equals the split by the _LINES pattern, Unicode whitespace included."""
        import random

        from chd.core.tokens import _LINES, _lines

        rng = random.Random(7)
        alphabet = [
            "\n",
            "\n",
            " ",
            "\t",
            "\r",
            "\xa0",
            "\u3000",
            "\x1c",
            "\u2028",
            "a",
            "Z",
            ".",
            "“",
            "1",
            "日",
        ]
        for _ in range(5000):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
            assert _lines(text) == _LINES.split(text), repr(text)

    def test_a_segment_counted_once_is_not_encoded_again_and_its_text_is_not_kept(self) -> None:
        """The second count of a summary encodes only its new segment; the memory holds digests, not texts."""
        counter = TiktokenCounter()
        encoded: list[str] = []
        ids = counter._ids
        counter._ids = lambda text: (encoded.append(text), ids(text))[1]  # type: ignore[method-assign]
        segments = [
            f"Segment {i}: " + "the harbour pilot logged tides and storms. " * 8 for i in range(4)
        ]
        counter.count_joined(segments)
        encoded.clear()
        new = "A new segment about the lighthouse keeper and the ferry timetable. " * 4
        assert (
            counter.count_joined(segments[1:] + [new])
            == counter._encoding.encode_ordinary("\n".join(segments[1:] + [new])).__len__()
        )
        assert encoded == [segments[3] + "\n", new]  # the old last line now ends in a newline
        assert all(isinstance(key, bytes) and len(key) == 16 for key in counter._known)


class TestLearnedCounts:
    """A counter takes the part counts of another counter of its encoding instead of encoding again."""

    TEXT = (
        "Turns 1–5, about the harbour: the user said “the ferry leaves at 9:40”.\nfacts: "
        + "pier; " * 60
    )

    def test_part_counts_add_up_to_the_count(self) -> None:
        counter = TiktokenCounter()
        counts = counter.part_counts(self.TEXT)
        assert len(counts) == 2 and sum(counts) == counter.count(self.TEXT)
        assert counter.part_counts("short") == ()  # counted whole, nothing to learn

    def test_a_learned_text_is_not_encoded_again(self) -> None:
        """The daemon's counter, taught the child's counts, answers without an encode."""
        child, daemon = TiktokenCounter(), TiktokenCounter()
        encoded: list[str] = []
        ids = daemon._ids
        daemon._ids = lambda text: (encoded.append(text), ids(text))[1]  # type: ignore[method-assign]
        daemon.learn(self.TEXT, child.part_counts(self.TEXT))
        assert daemon.count(self.TEXT) == child.count(self.TEXT)
        assert encoded == []

    def test_counts_that_do_not_fit_the_text_are_ignored(self) -> None:
        counter = TiktokenCounter()
        counter.learn(self.TEXT, (1,))  # two parts, one count
        assert counter.count(self.TEXT) == len(counter._encoding.encode_ordinary(self.TEXT))
