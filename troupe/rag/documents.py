"""Parsing uploaded files into text: plain text and Markdown, HTML, PDF.

The file's name decides how it is read (its extension, as OpenAI's file_search does):

=====================================  ====================================================
``.pdf``                               pypdf's text extraction, page by page
``.html``, ``.htm``                    the text of the document (``<script>``, ``<style>``
                                       and ``<head>`` other than ``<title>`` dropped; block
                                       elements end a line)
``.md``, ``.markdown``, ``.txt`` and   UTF-8 text as it is (Markdown is readable as text,
source or data files (:data:`TEXT_     and its headings are useful words)
EXTENSIONS`)
=====================================  ====================================================

Errors (:class:`DocumentError`) carry the ``last_error.code`` a vector store file shows:
``unsupported_file`` for a kind of file that is not read here (``.docx``, images, no text
at all), ``invalid_file`` for one that claims a kind and is not (a corrupt PDF, text that is
not UTF-8).

Example::

    parse_document("notes.md", b"# Title\\n\\nBody")   # '# Title\\n\\nBody'
"""

from __future__ import annotations

import io
import logging
import os
from html.parser import HTMLParser

__all__ = ["DocumentError", "TEXT_EXTENSIONS", "parse_document"]

TEXT_EXTENSIONS = frozenset(
    ".txt .md .markdown .rst .csv .tsv .json .jsonl .yaml .yml .toml .xml .log .tex .c .cc .cpp .h .hpp .cs .css"
    " .go .java .js .ts .tsx .jsx .php .py .rb .rs .sh .sql .swift .kt".split()
)
"""Extensions read as UTF-8 text."""
_HTML = frozenset({".html", ".htm"})


class DocumentError(Exception):
    """A file that cannot be turned into text; ``code`` is ``unsupported_file`` or ``invalid_file``.

    Picklable (it crosses from an ingestion task to its caller).
    """

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return self.message


def parse_document(filename: str, data: bytes) -> str:
    """The text of the file ``filename`` holding ``data``.

    Raises:
        DocumentError: an unsupported kind, a corrupt file, or no text in it.
    """
    extension = os.path.splitext(filename)[1].lower()
    if extension == ".pdf":
        text = _pdf_text(data)
    elif extension in _HTML:
        text = _html_text(_utf8(data))
    elif extension in TEXT_EXTENSIONS:
        text = _utf8(data)
    else:
        raise DocumentError("unsupported_file", f"Files of type '{extension or filename}' are not supported for retrieval.")
    if not text.strip():
        raise DocumentError("unsupported_file", f"No text could be extracted from '{filename}'.")
    return text


def _utf8(data: bytes) -> str:
    if b"\x00" in data[:8192]:
        raise DocumentError("invalid_file", "The file is binary, not text.")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DocumentError("invalid_file", f"The file is not valid UTF-8 text (byte {exc.start}).") from exc


def _pdf_text(data: bytes) -> str:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    # pypdf logs every recoverable oddity of a PDF as a warning; a file that cannot be read
    # raises, and that is what the caller is told.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted:
            raise DocumentError("invalid_file", "The PDF is encrypted.")
        pages = [page.extract_text() or "" for page in reader.pages]
    except DocumentError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError) as exc:
        raise DocumentError("invalid_file", f"The PDF could not be read: {exc}") from exc
    return "\n\n".join(page.strip() for page in pages if page.strip())


_BLOCKS = frozenset(
    "address article aside blockquote br dd div dl dt fieldset figcaption figure footer form h1 h2 h3 h4 h5 h6"
    " header hr li main nav ol p pre section table td th tr ul title".split()
)
_SKIPPED = frozenset({"script", "style", "noscript", "template", "svg"})


class _HTMLText(HTMLParser):
    """The visible text of an HTML document, one line per block element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0
        self._in_head = False
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED:
            self._skipping += 1
        elif tag == "head":
            self._in_head = True
        elif tag == "title":
            self._in_title = True
        if tag in _BLOCKS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED and self._skipping:
            self._skipping -= 1
        elif tag == "head":
            self._in_head = False
        elif tag == "title":
            self._in_title = False
        if tag in _BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._skipping or (self._in_head and not self._in_title):
            return
        self.parts.append(data)


def _html_text(html: str) -> str:
    parser = _HTMLText()
    parser.feed(html)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    return "\n".join(line for line in lines if line)
