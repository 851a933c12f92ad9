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

import importlib
import math
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = [
    "Embedder",
    "WordLlamaEmbedder",
    "embedder_class",
    "load_embedder",
    "normalized",
    "usable_vectors",
]


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
      (logged once per search); it never fails a retrieve. So does a call
      that outlasts its share of the search's deadline (hybrid.py): the
      search answers without it and the call is abandoned, never waited for
      under a lock a store needs.
    * What it returns is checked (``usable_vectors``): a reply with another
      count of vectors than texts is dropped whole; a vector of another
      length than the others, or holding NaN or infinity, is dropped alone.
      Dropped vectors are never cached and the utterance is ranked by its
      words only (logged once per search).
    """

    def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]: ...


def normalized(vector: Sequence[float]) -> tuple[float, ...]:
    """``vector`` scaled to length 1 (the zero vector stays zero), so a dot product is the cosine."""
    length = math.sqrt(sum(x * x for x in vector))
    return tuple(float(x) / length for x in vector) if length else tuple(0.0 for _ in vector)


def usable_vectors(
    reply: object, count: int, dimensions: int
) -> tuple[list[tuple[float, ...] | None], str]:
    """``reply`` (an ``embed`` result for ``count`` texts) as unit vectors, None where unusable.

    ``dimensions`` is the length earlier vectors had (0: none yet; then the
    commonest length in the reply). Also returns why vectors were dropped
    ("" when none were), for the log line.
    """
    try:
        rows = list(reply)  # type: ignore[call-overload]
    except TypeError:
        return [None] * count, f"it returned {type(reply).__name__}, not a list of vectors"
    if len(rows) != count:
        return [None] * count, f"it returned {len(rows)} vector(s) for {count} text(s)"
    floats: list[tuple[float, ...] | None] = []
    for row in rows:
        try:
            floats.append(tuple(float(x) for x in row))
        except (TypeError, ValueError):
            floats.append(None)
    if not dimensions:
        lengths = Counter(len(v) for v in floats if v)
        dimensions = lengths.most_common(1)[0][0] if lengths else 0
    out: list[tuple[float, ...] | None] = []
    problems: set[str] = set()
    for vector in floats:
        if vector is None or not vector:
            problems.add("not a list of numbers")
        elif len(vector) != dimensions:
            problems.add(f"{len(vector)} numbers where the others have {dimensions}")
        elif not all(math.isfinite(x) for x in vector):
            problems.add("NaN or infinity")
        else:
            out.append(normalized(vector))
            continue
        out.append(None)
    return out, "; ".join(sorted(problems))


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


# Embedders ``chd serve --embedder`` knows by name; anything else is module:Class.
EMBEDDERS: dict[str, type] = {"wordllama": WordLlamaEmbedder}


def embedder_class(name: str) -> type:
    """The class ``name`` stands for: a known name or ``module:Class`` (the ``--backend`` convention).

    Imports the module but builds nothing, so ``chd config`` can refuse a
    name that does not load without loading a model.

    Raises:
        ValueError: an unknown name, or a module or class that does not load.
    """
    spec = name.strip()
    known = EMBEDDERS.get(spec.lower())
    if known is not None:
        return known
    module_name, colon, class_name = spec.partition(":")
    if not colon or not module_name or not class_name:
        raise ValueError(
            f"unknown embedder {spec!r}; use {', '.join(sorted(EMBEDDERS))} "
            "or module:Class for your own (docs/search.md)"
        )
    try:
        found = getattr(importlib.import_module(module_name), class_name)
    except Exception as exc:  # importing runs the module's code: whatever it raises, one line
        raise ValueError(
            f"cannot load embedder {spec!r}: {type(exc).__name__}: {exc}".splitlines()[0]
        ) from None
    if not isinstance(found, type):
        raise ValueError(f"embedder {spec!r} is not a class")
    return found


def load_embedder(name: str) -> Embedder:
    """An embedder built from ``name`` (see ``embedder_class``) with no arguments.

    A class that needs arguments (a model name, a client) is wrapped in a
    subclass of your own whose ``__init__`` takes none (docs/search.md).

    Raises:
        ValueError: it does not load, cannot be built without arguments,
            fails while being built, or has no ``embed`` method.
    """
    cls = embedder_class(name)
    try:
        embedder = cls()
    except Exception as exc:  # its own failure, whatever it is, told in one line
        raise ValueError(f"embedder {name.strip()!r} could not be built: {exc}") from None
    if not isinstance(embedder, Embedder):
        raise ValueError(
            f"embedder {name.strip()!r} has no embed(texts) method (the Embedder protocol)"
        )
    return embedder
