"""Key names of the Redis backend: a conversation's keys and its index partition's.

Every key of a conversation is ``chd:{<tag>}:<part>`` where ``<tag>`` is its
id percent-encoded: injective, and it leaves no ``{``, ``}`` or ``*``, so the
whole conversation hashes to one cluster slot and no id can break a pattern.

The index (backends/redis_index.py) lives in partitions: on Redis Cluster
one per slot, named by a tag ``!<k>`` chosen to hash to that slot (no
percent-encoded id starts with ``!``), so a conversation's commit script
declares only keys of its own slot; on standalone Redis a single ``!``.
"""

from __future__ import annotations

from binascii import crc_hqx
from functools import lru_cache
from urllib.parse import quote, unquote

__all__ = [
    "SLOTS",
    "QUOTA_KEY",
    "conversation_key",
    "conversation_of",
    "conversation_tag",
    "index_keys",
    "partition_of",
    "partitions",
]

SLOTS = 16384
STANDALONE = "!"
# Redis Cluster only: the places conversations take (backends/redis_quota.py).
QUOTA_KEY = "chd:{!}:quota"


def conversation_tag(conversation_id: str) -> str:
    return quote(conversation_id, safe="") or "%"


def conversation_key(conversation_id: str, part: str) -> str:
    """``chd:{<escaped id>}:<part>``."""
    return "chd:{" + conversation_tag(conversation_id) + "}:" + part


def conversation_of(meta_key: str) -> str:
    """The id of the conversation whose meta key (``chd:{<tag>}:m``) this is."""
    tag = meta_key[len("chd:{") : -len("}:m")]
    return "" if tag == "%" else unquote(tag, errors="strict")


@lru_cache(maxsize=1)
def _slot_tags() -> tuple[str, ...]:
    """For each cluster slot, the first tag ``!<k>`` that hashes to it (~0.1 s, once)."""
    tags: list[str | None] = [None] * SLOTS
    left, k = SLOTS, 0
    while left:
        tag = f"!{k}"
        # crc_hqx is CRC-16/XMODEM, the hash Redis Cluster slots keys by.
        slot = crc_hqx(tag.encode(), 0) % SLOTS
        if tags[slot] is None:
            tags[slot] = tag
            left -= 1
        k += 1
    return tuple(tag for tag in tags if tag is not None)


def partitions(cluster: bool) -> tuple[str, ...]:
    """Every index partition's tag."""
    return _slot_tags() if cluster else (STANDALONE,)


def partition_of(tag: str, cluster: bool) -> str:
    """The partition holding the index entries of the conversation tagged ``tag``."""
    if not cluster:
        return STANDALONE
    return _slot_tags()[crc_hqx(tag.encode(), 0) % SLOTS]


def index_keys(partition: str) -> list[str]:
    """The ids, queued and expiries keys of one partition."""
    return [f"chd:{{{partition}}}:n", f"chd:{{{partition}}}:q", f"chd:{{{partition}}}:e"]
