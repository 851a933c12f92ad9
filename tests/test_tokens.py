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
        for text in ("<|endoftext|> and <|fim_prefix|>x<|endofprompt|>", "héllo 🎉 日本語\n\tend.", "", "a" * 3000):
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
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"
