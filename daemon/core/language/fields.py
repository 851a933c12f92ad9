"""Checking values that arrive from the wire.

A google.protobuf.Struct carries every number as a double (turn 5 arrives as
5.0, and 5.5, NaN and infinity are legal), and any field may hold a string,
list or nested Struct where a scalar is expected. Each check here names the
field it rejects, so the caller learns what to fix.
"""

from __future__ import annotations

import math
from typing import Any

from chd.core.errors import InvalidRequest, quote
from chd.core.utterance import SPEAKERS, Speaker

__all__ = ["as_int", "as_bool", "as_str", "as_speaker", "describe"]


def describe(value: Any) -> str:
    """A short name for a value's type in an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int) and value.bit_length() > 64:
        # repr() of an int over 4,300 digits raises ValueError (issue 14).
        return f"a number of about {int(value.bit_length() * 0.30103) + 1} digits"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {quote(value, 40)}"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def as_int(name: str, value: Any, *, minimum: int = 0, maximum: int = 2**53) -> int:
    """``value`` as a whole number in [minimum, maximum]; a string of digits is not accepted."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequest(f"{name} must be a whole number, got {describe(value)}")
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise InvalidRequest(f"{name} must be a whole number, got {describe(value)}")
    whole = int(value)
    if whole < minimum:
        raise InvalidRequest(f"{name} must be at least {minimum}, got {describe(whole)}")
    if whole > maximum:
        raise InvalidRequest(f"{name} must be at most {maximum}, got {describe(whole)}")
    return whole


def as_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidRequest(f"{name} must be true or false, got {describe(value)}")
    return value


def as_str(name: str, value: Any, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise InvalidRequest(f"{name} must be a string, got {describe(value)}")
    if not allow_empty and not value.strip():
        raise InvalidRequest(f"{name} must not be empty")
    return value


def as_speaker(name: str, value: Any) -> Speaker:
    text = as_str(name, value).strip().lower()
    if text not in SPEAKERS:
        raise InvalidRequest(f"{name} must be one of {', '.join(SPEAKERS)}, got {describe(value)}")
    return text
