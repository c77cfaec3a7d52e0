"""PDF: pdfminer.six layout boxes per page, headings from font sizes, text through ``partition_text``.

A PDF has no heading markup, so headings are the boxes set noticeably larger than the body text,
ranked by size into depths. Page numbers in the top or bottom margin are dropped; every element
keeps the number of the page it came from.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

from ragline.ingest.parse.common import ParseError

_PAGE_NUMBER = re.compile(r"^(\d{1,4}|[-–—]\s*\d{1,4}\s*[-–—])$")


@dataclass
class _PdfBox:
    page: int
    text: str
    size: float
    chars: int


def elements(data: bytes) -> list:
    """Per page: headings by font size (larger than the body text, ranked into depths), the
    text between them through ``partition_text`` with the page number in its metadata."""
    from pdfminer.pdfdocument import PDFEncryptionError, PDFPasswordIncorrect  # parse package stays light
    from unstructured.documents.elements import ElementMetadata, Title  # parse package stays light

    try:
        boxes = _pdf_boxes(data)
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
    from pdfminer.high_level import extract_pages  # parse package stays light: loads per format
    from pdfminer.layout import LTChar, LTTextContainer  # parse package stays light: loads per format

    boxes: list[_PdfBox] = []
    for page_no, page in enumerate(extract_pages(io.BytesIO(data)), start=1):
        for el in page:
            if not isinstance(el, LTTextContainer):
                continue
            sizes: dict[float, int] = {}
            for line in el:
                for ch in getattr(line, "_objs", ()):
                    if isinstance(ch, LTChar) and not ch.get_text().isspace():
                        s = round(ch.size * 2) / 2
                        sizes[s] = sizes.get(s, 0) + 1
            text = _join_pdf_lines(el.get_text())
            if _PAGE_NUMBER.match(text) and (el.y1 < page.height * 0.1 or el.y0 > page.height * 0.9):
                continue  # a page number in the top or bottom margin is not text
            if text and sizes:
                size = max(sizes.items(), key=lambda kv: kv[1])[0]
                boxes.append(_PdfBox(page_no, text, size, sum(sizes.values())))
    return boxes


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
