"""chd's fast reading of cl100k_base is tiktoken's encoding, exactly (daemon/core/token_table.py)."""

from __future__ import annotations

import random

import pytest
import tiktoken

from chd.core.token_table import _TABLE, CL100K_NAME, cl100k_encoding
from chd.core.tokens import TiktokenCounter


@pytest.fixture(scope="module")
def theirs() -> tiktoken.Encoding:
    return tiktoken.get_encoding(CL100K_NAME)


@pytest.fixture(scope="module")
def ours() -> tiktoken.Encoding:
    return cl100k_encoding()


def test_same_table_pattern_and_special_tokens(
    ours: tiktoken.Encoding, theirs: tiktoken.Encoding
) -> None:
    assert ours.name == theirs.name
    assert ours._pat_str == theirs._pat_str
    assert ours._special_tokens == theirs._special_tokens
    assert ours._mergeable_ranks == theirs._mergeable_ranks
    assert ours.n_vocab == theirs.n_vocab


def test_same_tokens_on_varied_text(ours: tiktoken.Encoding, theirs: tiktoken.Encoding) -> None:
    rng = random.Random(7)
    alphabet = "abc XYZ 0123456789 .,;:!?'\"\n\r\t\u00a0\u3000é ß ü 漢字 😀 ' ll 've -_/\\{}[]()"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 300))) for _ in range(500)]
    texts += ["I'm sure they've said it's 3,141.59 km — naïve café résumé.", "   \n\n  trailing  "]
    for text in texts:
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)


def test_the_counter_uses_it(ours: tiktoken.Encoding) -> None:
    counter = TiktokenCounter()
    text = "What is the weather in Paris today?"
    assert counter.count(text) == len(ours.encode_ordinary(text)) == 8


def test_a_table_with_another_hash_is_refused(tmp_path) -> None:
    tampered = tmp_path / "cl100k_base.tiktoken"
    data = bytearray(_TABLE.read_bytes())
    data[-2:-1] = b"7" if data[-2:-1] != b"7" else b"8"  # another rank on the last line
    tampered.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="SHA-256"):
        cl100k_encoding(tampered)
