"""The pluggable ``Embedder`` for hybrid topic search, and one implementation (issue 27).

Off by default: with no embedder, a topic search is the lexical ranking of
search.py alone and nothing here runs. With one, ``hybrid.fuse`` adds vector
similarity to it. Like the summarizer, the daemon only defines the protocol:
any object with ``embed`` works, so a hosted model (an HTTP call per batch)
or a local one plugs in without a change here (docs/search.md shows how).

No model is downloaded by the default install. ``WordLlamaEmbedder`` uses
the static word-embedding model that the ``wordllama`` package ships inside
its wheel (256 dimensions, ~60 us per utterance on one core), loaded from the
package folder with downloads disabled; install ``wordllama`` to use it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = ["Embedder", "WordLlamaEmbedder", "normalized"]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors whose dot product says how alike two texts are.

    Contract:

    * ``embed(texts)`` returns one vector per text, in order, every vector of
      the same length for the life of the embedder (vectors are cached per
      utterance and compared with vectors of later calls).
    * The same text always gives the same vector (the cache relies on it).
    * It may be called from several threads at once.
    * Anything it raises makes that search fall back to the lexical ranking
      (logged once per search); it never fails a retrieve.
    """

    def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]: ...


def normalized(vector: Sequence[float]) -> tuple[float, ...]:
    """``vector`` scaled to length 1 (the zero vector stays zero), so a dot product is the cosine."""
    length = math.sqrt(sum(x * x for x in vector))
    return tuple(float(x) / length for x in vector) if length else tuple(0.0 for _ in vector)


class WordLlamaEmbedder:
    """The ``wordllama`` package's shipped model, loaded once, with downloads disabled."""

    def __init__(self, dimensions: int = 256) -> None:
        try:
            import wordllama
            from wordllama import WordLlama
        except ImportError as error:
            raise RuntimeError(
                "WordLlamaEmbedder needs the wordllama package: pip install wordllama"
            ) from error
        # The wheel keeps weights/ and tokenizers/ in its own folder; pointed
        # at it as the cache, the loader finds both and never downloads.
        self._model = WordLlama.load(
            cache_dir=Path(wordllama.__file__).parent, dim=dimensions, disable_download=True
        )
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        with self._lock:  # the tokenizer is not documented as thread-safe
            vectors: list[list[float]] = self._model.embed(list(texts)).tolist()
        return vectors
