"""Text for retrieval: the analyzer (terms), token counts and the chunker.

One analyzer serves both sides of the search: BM25's keyword index and the ``sim``
embedder's features are the *terms* of a text, and a query is analyzed exactly as the
documents were, so that the two meet.

* **Terms** (:func:`terms`): lower-cased Unicode words (``\\w+``), English stop words
  dropped, then a light suffix stripper (:func:`stem`: plurals, ``-ing``, ``-ed``, ``-ly``).
  It is not a linguist's stemmer (Porter's would turn "university" and "universe" into one
  stem, this one does not try); what matters is that documents and queries get the same.
* **Tokens** (:func:`count_tokens`): chunk sizes are in tokens, as OpenAI's
  ``chunking_strategy`` says, but Troupe has no tokenizer of any model. A token is
  estimated as in :mod:`troupe.agentloop.context`: about four characters, so a
  whitespace-separated word of ``n`` characters counts ``ceil(n / 4)`` tokens (at least 1).
  English prose comes out within about 15% of ``cl100k_base``.
* **Chunks** (:func:`chunk_text`): windows of at most ``max_tokens`` tokens over the words
  of the text, each starting ``max_tokens - overlap_tokens`` tokens after the previous one
  (OpenAI's static strategy; ``auto`` is 800 and 400). A chunk's text is an exact slice of
  the parsed document (its line breaks kept), from its first word to its last.

Example::

    >>> terms("The routers were restarting nightly")
    ['router', 'restart', 'night']
    >>> [c.text for c in chunk_text("a b c d e", max_tokens=2, overlap_tokens=1)]
    ['a b', 'b c', 'c d', 'd e']
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections import Counter
from dataclasses import dataclass

__all__ = [
    "CHARS_PER_TOKEN",
    "Chunk",
    "chunk_text",
    "count_tokens",
    "indexed_terms",
    "stem",
    "term_counts",
    "term_hash",
    "terms",
]

CHARS_PER_TOKEN = 4
"""Characters per estimated token (as :data:`troupe.agentloop.context.CHARS_PER_TOKEN`)."""

_WORD = re.compile(r"\w+", re.UNICODE)
_PIECE = re.compile(r"\S+")

# Function words that carry no topic; dropped from terms (BM25 would give them a low weight
# anyway, but the sim embedder would spend dimensions on them).
_STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most my
    myself no nor not now of off on once only or other our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with would you your
    yours yourself yourselves""".split()
)


@functools.lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """``word`` (lower case) without a common English inflection: ``routers`` → ``router``,
    ``restarting`` → ``restart``, ``libraries`` → ``library``, ``nightly`` → ``night``.

    Conservative: short words and double letters (``class``, ``is``) are kept as they are.
    """
    if len(word) <= 3 or word.isdigit():
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("sses"):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix, keep in (("ing", 4), ("ed", 4), ("ly", 4)):
        if word.endswith(suffix) and len(word) - len(suffix) >= keep:
            word = word[: -len(suffix)]
            if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]  # "running" -> "runn" -> "run"
            break
    return word


def terms(text: str) -> list[str]:
    """The terms of ``text``, in order (stop words dropped, words stemmed)."""
    return [stem(w) for w in _WORD.findall(text.lower()) if w not in _STOP_WORDS]


def term_counts(text: str) -> Counter[str]:
    """How often each term occurs in ``text`` (BM25's term frequencies)."""
    return Counter(terms(text))


@functools.lru_cache(maxsize=1 << 16)
def term_hash(term: str) -> int:
    """A term's id in the keyword index: the first 8 bytes of its BLAKE2b digest, as a signed
    64-bit integer. DuckDB compares integers several times faster than strings (measured:
    30 ms against 110 ms for 4 million rows), and collisions among 64-bit ids are negligible."""
    return int.from_bytes(hashlib.blake2b(term.encode(), digest_size=8).digest(), "little", signed=True)


def indexed_terms(text: str | list[str]) -> tuple[dict[int, int], int]:
    """``text`` (or its :func:`terms`) as the keyword index holds it: ``{term hash: count}``,
    and its length in terms."""
    counts = Counter(terms(text) if isinstance(text, str) else text)
    return {term_hash(term): n for term, n in counts.items()}, sum(counts.values())


def count_tokens(text: str) -> int:
    """The estimated tokens of ``text`` (module docstring)."""
    return sum(_piece_tokens(len(m.group())) for m in _PIECE.finditer(text))


def _piece_tokens(chars: int) -> int:
    return max(1, -(-chars // CHARS_PER_TOKEN))


@dataclass(frozen=True, slots=True, kw_only=True)
class Chunk:
    """One chunk of a document."""

    index: int
    """Its position among the document's chunks, from 0."""
    text: str
    """The slice of the document it holds."""
    tokens: int
    """Its estimated tokens (at most the window)."""


def chunk_text(text: str, *, max_tokens: int, overlap_tokens: int) -> list[Chunk]:
    """Split ``text`` into overlapping windows of at most ``max_tokens`` estimated tokens.

    A word longer than the whole window becomes a chunk of its own. Text with no words
    gives no chunks.

    Raises:
        ValueError: ``overlap_tokens`` is not below ``max_tokens``.
    """
    if not 0 <= overlap_tokens < max_tokens:
        raise ValueError(f"overlap_tokens must be in [0, max_tokens), got {overlap_tokens} of {max_tokens}")
    pieces = [(m.start(), m.end(), _piece_tokens(m.end() - m.start())) for m in _PIECE.finditer(text)]
    chunks: list[Chunk] = []
    start = 0
    while start < len(pieces):
        end, size = start, 0
        while end < len(pieces) and (size + pieces[end][2] <= max_tokens or end == start):
            size += pieces[end][2]
            end += 1
        chunks.append(Chunk(index=len(chunks), text=text[pieces[start][0] : pieces[end - 1][1]], tokens=size))
        if end == len(pieces):
            break
        start = _next_start(pieces, start, end, overlap_tokens)
    return chunks


def _next_start(pieces: list[tuple[int, int, int]], start: int, end: int, overlap_tokens: int) -> int:
    """Where the window after ``pieces[start:end]`` begins: as far back from ``end`` as
    ``overlap_tokens`` reach, but always after ``start`` (so that the chunker moves on)."""
    back, carried = end, 0
    while back - 1 > start and carried + pieces[back - 1][2] <= overlap_tokens:
        back -= 1
        carried += pieces[back][2]
    return back
