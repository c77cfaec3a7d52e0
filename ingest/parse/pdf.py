"""PDF: pdfminer.six layout boxes per page, headings from font sizes, text through ``partition_text``.

A PDF has no heading markup, so headings are the boxes set noticeably larger than the body text,
ranked by size into depths. Page numbers in the top or bottom margin are dropped; every element
keeps the number of the page it came from.

pdfminer's own box order interleaves the columns of a two-column page (its ``boxes_flow`` ranks
boxes by a blend of position that puts a right-column paragraph between two left-column ones
whenever their tops line up), so each page is put in reading order here by recursive XY-cut
(:func:`reading_order`): columns left to right, each top to bottom. Within one pdfminer box, a
line set much larger than the next (a heading the layout glued onto its paragraph) starts a box
of its own, and a box that merely continues the sentence of the box above it (a wrapped list
item, a table cell's second line) is joined back to it.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

from ragline.ingest.parse.common import ParseError
from ragline.shared.config.settings import get_settings

_PAGE_NUMBER = re.compile(r"^(\d{1,4}|[-–—]\s*\d{1,4}\s*[-–—])$")


@dataclass
class _PdfBox:
    page: int
    text: str
    size: float
    chars: int
    # the box on its page, in PDF points from the bottom left: reading order and continuations
    x0: float = 0.0
    y0: float = 0.0
    x1: float = 0.0
    y1: float = 0.0


def elements(data: bytes) -> list:
    """Per page: headings by font size (larger than the body text, ranked into depths), the
    text between them through ``partition_text`` with the page number in its metadata."""
    from pdfminer.pdfdocument import PDFEncryptionError, PDFPasswordIncorrect  # parse package stays light
    from unstructured.documents.elements import ElementMetadata, Title  # parse package stays light

    try:
        boxes = _pdf_boxes(data)
    except PdfLimitExceeded as exc:
        raise ParseError(f"PDF refused: {exc}") from None
    except (PDFPasswordIncorrect, PDFEncryptionError) as exc:
        raise ParseError(f"encrypted PDF cannot be read ({type(exc).__name__})") from None
    except Exception as exc:  # noqa: BLE001 - pdfminer raises many types on corrupt files
        raise ParseError(f"corrupt PDF: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not boxes:
        raise ParseError("PDF has no text layer (scanned images?)")
    weight: dict[float, int] = {}
    for b in boxes:
        weight[b.size] = weight.get(b.size, 0) + b.chars
    body = max(weight.items(), key=lambda kv: kv[1])[0]
    heading_sizes = sorted({b.size for b in boxes if _pdf_heading(b, body)}, reverse=True)[:4]
    depth = {s: i for i, s in enumerate(heading_sizes)}
    out: list = []
    buf: list[str] = []
    for i, b in enumerate(boxes):
        if b.size in depth and _pdf_heading(b, body):
            out.append(
                Title(b.text, metadata=ElementMetadata(page_number=b.page, category_depth=depth[b.size]))
            )
        else:
            buf.append(b.text)
        if buf and (
            i + 1 == len(boxes)
            or boxes[i + 1].page != b.page
            or boxes[i + 1].size in depth
            and _pdf_heading(boxes[i + 1], body)
        ):
            out.extend(_pdf_text_elements(buf, b.page))
            buf = []
    return out


def _pdf_boxes(data: bytes) -> list[_PdfBox]:
    boxes: list[_PdfBox] = []
    for page_no, page in enumerate(limited_pages(data, PdfLimits.from_settings()), start=1):
        boxes.extend(_page_boxes(page, page_no))
    return boxes


def _page_boxes(page, page_no: int) -> list[_PdfBox]:
    """The text of one pdfminer page as boxes in reading order, page numbers dropped."""
    from pdfminer.layout import LTTextContainer, LTTextLine  # parse package stays light: loads per format

    boxes: list[_PdfBox] = []
    for el in page:
        if not isinstance(el, LTTextContainer):
            continue
        lines = [el] if isinstance(el, LTTextLine) else [ln for ln in el if isinstance(ln, LTTextLine)]
        for box in _size_runs(lines, page_no):
            if _PAGE_NUMBER.match(box.text) and (box.y1 < page.height * 0.1 or box.y0 > page.height * 0.9):
                continue  # a page number in the top or bottom margin is not text
            boxes.append(box)
    return _join_continuations(reading_order(boxes))


#: a paragraph a heading is split from has at least this many characters (a short label in a
#: smaller font, such as ":2017" under a large "A1", stays with its line)
_MIN_SPLIT_BODY = 20


def _size_runs(lines: list, page_no: int) -> list[_PdfBox]:
    """The lines of one layout box as boxes: a new box where the font size changes by a fifth or
    more between a line and a paragraph (a heading glued onto its paragraph), so heading
    detection sees the heading on its own."""
    from pdfminer.layout import LTChar  # parse package stays light: loads per format

    runs: list[tuple[dict[float, int], list]] = []
    for line in lines:
        sizes: dict[float, int] = {}
        for ch in getattr(line, "_objs", ()):
            if isinstance(ch, LTChar) and not ch.get_text().isspace():
                s = round(ch.size * 2) / 2
                sizes[s] = sizes.get(s, 0) + 1
        if sizes:
            runs.append((sizes, [line]))
    merged: list[tuple[dict[float, int], list]] = []
    for sizes, run in runs:
        if merged and not _size_break(merged[-1][0], sizes):
            for s, n in sizes.items():
                merged[-1][0][s] = merged[-1][0].get(s, 0) + n
            merged[-1][1].extend(run)
        else:
            merged.append((sizes, run))
    runs = merged
    out = []
    for sizes, run in runs:
        text = _join_pdf_lines("".join(ln.get_text() for ln in run))
        if text:
            out.append(
                _PdfBox(
                    page_no,
                    text,
                    max(sizes.items(), key=lambda kv: kv[1])[0],
                    sum(sizes.values()),
                    min(ln.x0 for ln in run),
                    min(ln.y0 for ln in run),
                    max(ln.x1 for ln in run),
                    max(ln.y1 for ln in run),
                )
            )
    return out


def _size_break(above: dict[float, int], below: dict[float, int]) -> bool:
    """Whether a line (``below``: its character count per size) starts a new box after the lines
    ``above``: one side is set a fifth larger and the smaller side is paragraph text."""
    a = max(above.items(), key=lambda kv: kv[1])[0]
    b = max(below.items(), key=lambda kv: kv[1])[0]
    if max(a, b) < 1.2 * min(a, b):
        return False
    smaller = above if a < b else below
    return sum(smaller.values()) >= _MIN_SPLIT_BODY


#: narrowest white strip between two columns, in points (a table's cells sit closer)
_MIN_GUTTER = 6.0
#: narrowest column, as a share of the region's width: narrower strips (a table's check-mark or
#: number column, a margin note) are read row by row with their neighbours
_MIN_COLUMN_SHARE = 0.2


#: deepest XY-cut recursion; a region still undivided there (a page of thousands of tiny boxes)
#: is read top to bottom, left to right, so no page can exhaust the stack or take quadratic time
_MAX_CUT_DEPTH = 64


def reading_order(boxes: list[_PdfBox], depth: int = 0) -> list[_PdfBox]:
    """Boxes of one page in reading order by recursive XY-cut.

    A region that white vertical strips divide into columns of a useful width is read column by
    column, left to right; otherwise it is cut at its widest white horizontal strip, top part
    first. Cutting only at the widest strip, rather than at every one, keeps a two-column body
    whole when a paragraph break in the left column happens to line up with one in the right.
    Columns whose breaks mostly line up are a table and are read row by row instead. A region
    with no cut left is a row: narrow cells left to right, else top to bottom.
    """
    if len(boxes) <= 1 or depth >= _MAX_CUT_DEPTH:
        return sorted(boxes, key=lambda b: (-b.y1, b.x0))
    columns = _columns(boxes, _MIN_COLUMN_SHARE)
    if columns and not _table_like(boxes, columns):
        return [b for col in columns for b in reading_order(col, depth + 1)]
    gaps = _gaps([(b.y0, b.y1) for b in boxes])
    if gaps:
        lo, hi = max(gaps, key=lambda g: g[1] - g[0])
        cut = (lo + hi) / 2
        return reading_order([b for b in boxes if b.y0 >= cut], depth + 1) + reading_order(
            [b for b in boxes if b.y0 < cut], depth + 1
        )
    columns = _columns(boxes, 0.0)
    if columns:
        return [b for col in columns for b in reading_order(col, depth + 1)]
    return sorted(boxes, key=lambda b: (-b.y1, b.x0))


#: a white horizontal strip this high (points) or more is a break between paragraphs or rows
_ROW_BREAK = 3.0
#: columns whose sparser one has at least this share of its breaks running across all columns
#: are table rows (a requirement table, label | description), not text columns
_TABLE_ROWS = 0.8


def _table_like(boxes: list[_PdfBox], columns: list[list[_PdfBox]]) -> bool:
    """Whether the breaks of the sparser column line up with breaks across the whole region: a
    table's rows do; two text columns break where their own paragraphs end."""
    breaks = min(len(_gaps([(b.y0, b.y1) for b in col], _ROW_BREAK)) for col in columns)
    if not breaks:
        return False
    return len(_gaps([(b.y0, b.y1) for b in boxes], _ROW_BREAK)) >= _TABLE_ROWS * breaks


def _gaps(spans: list[tuple[float, float]], min_width: float = 0.0) -> list[tuple[float, float]]:
    """White strips between the merged ``(low, high)`` spans, wider than ``min_width``."""
    out: list[tuple[float, float]] = []
    spans = sorted(spans)
    reach = spans[0][1]
    for lo, hi in spans[1:]:
        if lo - reach > min_width:
            out.append((reach, lo))
        reach = max(reach, hi)
    return out


def _columns(boxes: list[_PdfBox], min_share: float) -> list[list[_PdfBox]] | None:
    """The boxes split at white vertical strips into columns, left to right; a column narrower
    than ``min_share`` of the region joins its left neighbour (the first, its right one). None
    when that leaves a single column."""
    cuts = [(lo + hi) / 2 for lo, hi in _gaps([(b.x0, b.x1) for b in boxes], _MIN_GUTTER)]
    if not cuts:
        return None
    width = max(b.x1 for b in boxes) - min(b.x0 for b in boxes)
    while cuts:
        edges = [min(b.x0 for b in boxes), *cuts, max(b.x1 for b in boxes)]
        narrow = [i for i in range(len(edges) - 1) if edges[i + 1] - edges[i] < min_share * width]
        if not narrow:
            break
        i = narrow[0]
        cuts.pop(i - 1 if i > 0 else 0)
    if not cuts:
        return None
    columns: list[list[_PdfBox]] = [[] for _ in range(len(cuts) + 1)]
    for b in boxes:
        columns[sum(1 for c in cuts if b.x0 > c)].append(b)
    return columns


_SENTENCE_END = (".", "!", "?", ":", ";", "…")
#: abbreviations a wrapped sentence may break after ("т.е." at a table cell's line end)
_ABBREVIATIONS = ("т.е.", "т. е.", "т.к.", "т.о.", "т.д.", "напр.", "e.g.", "i.e.")


def _continues(prev: _PdfBox, box: _PdfBox) -> bool:
    """``box`` carries on the sentence of ``prev``: it starts in lower case right below it, in
    the same column and type size, and ``prev`` ended mid-sentence."""
    line = max(prev.size, box.size)
    return (
        box.page == prev.page
        and box.text[:1].islower()
        and (not prev.text.endswith(_SENTENCE_END) or prev.text.endswith(_ABBREVIATIONS))
        and max(prev.size, box.size) < 1.2 * min(prev.size, box.size)
        and -0.5 * line <= prev.y0 - box.y1 <= 1.5 * line
        and box.x0 < prev.x1
        and box.x1 > prev.x0
    )


def _join_continuations(boxes: list[_PdfBox], lookback: int = 4) -> list[_PdfBox]:
    """Boxes that continue a box just above them (within the last ``lookback`` boxes: a table
    row's other cells come between) are appended to it."""
    out: list[_PdfBox] = []
    for box in boxes:
        for prev in reversed(out[-lookback:]):
            if _continues(prev, box):
                prev.text = prev.text + box.text if prev.text.endswith("-") else f"{prev.text} {box.text}"
                prev.chars += box.chars
                prev.x0, prev.y0 = min(prev.x0, box.x0), min(prev.y0, box.y0)
                prev.x1, prev.y1 = max(prev.x1, box.x1), max(prev.y1, box.y1)
                break
        else:
            out.append(box)
    return out


def _join_pdf_lines(text: str) -> str:
    """Lines of one layout box become one paragraph; a hyphen at a line end is kept, no space."""
    out = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        out += line if not out or out.endswith("-") else " " + line
    return out


def _pdf_text_elements(texts: list[str], page: int) -> list:
    from unstructured.documents.elements import Text  # parse package stays light: loads per format
    from unstructured.partition.text import partition_text  # parse package stays light: loads per format

    out = []
    for el in partition_text(text="\n\n".join(texts), paragraph_grouper=False, languages=[""]):
        if type(el).__name__ == "Title":  # a heuristic guess: font size decides headings here
            el = Text(el.text)
        el.metadata.page_number = page
        out.append(el)
    return out


def _pdf_heading(b: _PdfBox, body: float) -> bool:
    return b.size >= body * 1.2 and 3 <= len(b.text) <= 120 and any(c.isalpha() for c in b.text)


# ---------------------------------------------------------------------------------- limits
# pdfminer inflates every stream whole (zlib.decompress without a bound) and keeps every layout
# object of a page, so a small hostile PDF can ask for gigabytes: a flate bomb, a page tree of
# millions of pages, a content stream drawing one glyph millions of times. The pages below come
# from pdfminer's own parser and interpreter with three bounds added.


class PdfLimitExceeded(Exception):
    """A PDF asks for more than :class:`PdfLimits` allow (not a ValueError: pdfminer catches some)."""


@dataclass(frozen=True)
class PdfLimits:
    max_pages: int = 2000
    max_stream_bytes: int = 32 * 1024 * 1024  # one stream, inflated
    max_decoded_bytes: int = 256 * 1024 * 1024  # all streams of the document, inflated
    max_page_objects: int = 200_000  # glyphs, paths and images drawn on one page

    @classmethod
    def from_settings(cls) -> PdfLimits:
        s = get_settings().ingest
        return cls(s.pdf_max_pages, s.pdf_max_stream_bytes, s.pdf_max_decoded_bytes)


class _Budget:
    """What one document has used so far; a refusal sticks, so it is raised again even when
    pdfminer caught it somewhere on the way."""

    def __init__(self, limits: PdfLimits) -> None:
        self.limits = limits
        self.decoded = 0
        self.refused: str | None = None

    def refuse(self, message: str) -> None:
        self.refused = self.refused or message
        raise PdfLimitExceeded(self.refused)

    def take(self, n: int) -> None:
        self.decoded += n
        if self.decoded > self.limits.max_decoded_bytes:
            self.refuse(
                f"its streams inflate past {self.limits.max_decoded_bytes} bytes (RAGLINE_INGEST_PDF_MAX_DECODED_BYTES)"
            )


def limited_pages(data: bytes, limits: PdfLimits) -> Iterator:
    """pdfminer's ``extract_pages`` with the :class:`PdfLimits`: the page count is checked before
    the first page is laid out, every stream inflates through a bound, and a page that draws
    too many objects is refused."""
    import itertools

    from pdfminer.layout import LAParams  # parse package stays light: loads per format
    from pdfminer.pdfdocument import PDFDocument  # parse package stays light: loads per format
    from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager  # parse package stays light
    from pdfminer.pdfpage import PDFPage  # parse package stays light: loads per format

    budget = _Budget(limits)
    doc = PDFDocument(_bounded_parser_class()(io.BytesIO(data), budget))
    pages = list(itertools.islice(PDFPage.create_pages(doc), limits.max_pages + 1))
    if budget.refused:
        raise PdfLimitExceeded(budget.refused)
    if len(pages) > limits.max_pages:
        raise PdfLimitExceeded(f"more than {limits.max_pages} pages (RAGLINE_INGEST_PDF_MAX_PAGES)")
    resources = PDFResourceManager(caching=True)
    device = _counting_device_class()(resources, LAParams(), budget)
    interpreter = PDFPageInterpreter(resources, device)
    for page in pages:
        device.objects = 0
        interpreter.process_page(page)
        layout = device.get_result()
        if budget.refused:
            raise PdfLimitExceeded(budget.refused)
        yield layout


def inflate(data: bytes, cap: int, budget: _Budget) -> bytes:
    """Flate data inflated up to ``cap`` bytes. Like pdfminer, what inflated before a corrupt
    byte (often a broken checksum at the end) is kept."""
    import zlib

    d = zlib.decompressobj()
    out = bytearray()
    step = 64 * 1024
    try:
        for i in range(0, len(data), step):
            out += d.decompress(data[i : i + step], cap + 1 - len(out))
            if len(out) > cap or d.unconsumed_tail:
                budget.refuse(_too_big(cap))
    except zlib.error:
        pass
    return bytes(out)


def _too_big(cap: int) -> str:
    return f"a stream inflates past {cap} bytes (RAGLINE_INGEST_PDF_MAX_STREAM_BYTES)"


def _decode_stream(stream, budget: _Budget) -> bytes:
    """pdfminer's ``PDFStream.decode`` with every expanding filter bounded. Images stay encoded:
    text extraction never reads their pixels."""
    from pdfminer import pdftypes as t  # parse package stays light: loads per format
    from pdfminer.ascii85 import ascii85decode, asciihexdecode  # parse package stays light
    from pdfminer.lzw import LZWDecoder  # parse package stays light: loads per format
    from pdfminer.pdfexceptions import PDFNotImplementedError  # parse package stays light
    from pdfminer.utils import apply_png_predictor, apply_tiff_predictor  # parse package stays light

    cap = budget.limits.max_stream_bytes
    data = stream.rawdata
    if stream.decipher:
        data = stream.decipher(stream.objid, stream.genno, data, stream.attrs)
    for f, params in stream.get_filters():
        if f in t.LITERALS_FLATE_DECODE:
            data = inflate(data, cap, budget)
        elif f in t.LITERALS_LZW_DECODE:
            out = bytearray()
            for part in LZWDecoder(io.BytesIO(data)).run():
                out += part
                if len(out) > cap:
                    budget.refuse(_too_big(cap))
            data = bytes(out)
        elif f in t.LITERALS_RUNLENGTH_DECODE:
            data = _run_length(data, cap, budget)
        elif f in t.LITERALS_ASCII85_DECODE:
            data = ascii85decode(data)
        elif f in t.LITERALS_ASCIIHEX_DECODE:
            data = asciihexdecode(data)
        elif f in (*t.LITERALS_CCITTFAX_DECODE, *t.LITERALS_DCT_DECODE, *t.LITERALS_JBIG2_DECODE):
            break  # image data
        elif f in t.LITERALS_JPX_DECODE:
            break
        elif f == t.LITERAL_CRYPT:
            raise PDFNotImplementedError("/Crypt filter is unsupported")
        else:
            raise PDFNotImplementedError(f"Unsupported filter: {f!r}")
        if params and "Predictor" in params:
            pred = t.int_value(params["Predictor"])
            args = [
                t.int_value(params.get(k, d))
                for k, d in (("Colors", 1), ("Columns", 1), ("BitsPerComponent", 8))
            ]
            if pred == 2:
                data = apply_tiff_predictor(*args, data)
            elif pred >= 10:
                data = apply_png_predictor(pred, *args, data)
            elif pred != 1:
                raise PDFNotImplementedError(f"Unsupported predictor: {pred!r}")
    budget.take(len(data))
    return data


def _run_length(data: bytes, cap: int, budget: _Budget) -> bytes:
    out = bytearray()
    i = 0
    while i < len(data) and data[i] != 128:
        n = data[i]
        if n < 128:
            out += data[i + 1 : i + 2 + n]
            i += n + 2
        else:
            out += data[i + 1 : i + 2] * (257 - n)
            i += 2
        if len(out) > cap:
            budget.refuse(_too_big(cap))
    return bytes(out)


@cache
def _bounded_parser_class() -> type:
    """Built on first use: pdfminer loads per format."""
    from pdfminer.pdfparser import PDFParser  # parse package stays light: loads per format
    from pdfminer.pdftypes import PDFStream  # parse package stays light: loads per format

    class BoundedStream(PDFStream):
        budget: _Budget

        def decode(self) -> None:
            if self.budget.refused:
                raise PdfLimitExceeded(self.budget.refused)
            self.data = _decode_stream(self, self.budget)
            self.rawdata = None

    class BoundedParser(PDFParser):
        """Every stream of the file, object streams and cross-reference streams included, is
        created here (pdfminer's object streams cannot hold streams)."""

        def __init__(self, fp, budget: _Budget) -> None:
            super().__init__(fp)
            self.budget = budget

        def push(self, *objs) -> None:
            super().push(*(self._bound(pos, obj) for pos, obj in objs))

        def _bound(self, pos, obj) -> tuple:
            if type(obj) is PDFStream:
                obj = BoundedStream(obj.attrs, obj.rawdata, obj.decipher)
                obj.budget = self.budget
            return pos, obj

    return BoundedParser


@cache
def _counting_device_class() -> type:
    """Built on first use: pdfminer loads per format."""
    from pdfminer.converter import PDFPageAggregator  # parse package stays light: loads per format

    class CountingAggregator(PDFPageAggregator):
        """Counts what a page draws: a content stream can draw one glyph or path millions of
        times, and each becomes a layout object kept until the page is done."""

        def __init__(self, resources, laparams, budget: _Budget) -> None:
            super().__init__(resources, laparams=laparams)
            self.budget = budget
            self.objects = 0

        def _count(self) -> None:
            self.objects += 1
            if self.objects > self.budget.limits.max_page_objects:
                self.budget.refuse(f"a page draws more than {self.budget.limits.max_page_objects} objects")

        def render_char(self, *args, **kwargs):
            self._count()
            return super().render_char(*args, **kwargs)

        def paint_path(self, *args, **kwargs):
            self._count()
            return super().paint_path(*args, **kwargs)

        def render_image(self, *args, **kwargs):
            self._count()
            return super().render_image(*args, **kwargs)

    return CountingAggregator
