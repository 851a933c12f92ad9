"""A Reading: what one operation's rules made of a query, and how much of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Reading"]


@dataclass(slots=True)
class Reading:
    """One operation's interpretation of a query.

    ``unexplained`` are the words no rule of this operation understood;
    their share of the query's words is what lowers the confidence.
    ``refusal`` is set when the rules understood the query well enough to
    know it must not be guessed at (an ambiguous remove): if this reading
    wins, the query is refused with that message.
    """

    operation: str
    fields: dict[str, Any] = field(default_factory=dict)
    unexplained: list[str] = field(default_factory=list)
    total_words: int = 1
    refusal: str | None = None
    # A read whose first word no rule understood may begin with a verb the
    # grammar does not know ("annihilate the user's messages"): it is held
    # to a write's threshold, so an unknown verb is never guessed to be a read.
    strict: bool = False

    @property
    def confidence(self) -> float:
        share = len(self.unexplained) / max(self.total_words, 1)
        return round(max(0.0, 1.0 - share), 2)
