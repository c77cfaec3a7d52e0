"""Parse a source file into ordered blocks that carry their heading path and page.

``unstructured`` does the format work (md, html, text, docx; PDF text goes through its text
partitioner page by page); this module turns its elements into :class:`Block` values with a
heading path ("A › B › C"), keeps tables and code as whole blocks (tables rendered one row per
line, header first, so the chunker can split them by rows), records page numbers, and removes
what is not document text: HTML navigation chrome and Markdown's raw HTML wrapper lines.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field
from pathlib import Path

from ragline.shared.offline_nlp import install_blank_spacy

HEADING_SEP = " › "

SUPPORTED = {
    ".md": "md",
    ".markdown": "md",
    ".txt": "text",
    ".text": "text",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".docx": "docx",
}
BINARY_FORMATS = {"pdf", "docx"}


class ParseError(ValueError):
    """The document cannot be parsed; the message is shown to the operator."""


@dataclass(frozen=True)
class Block:
    text: str
    kind: str = "text"  # text | table | code | list
    heading_path: tuple[str, ...] = ()
    page: int | None = None

    @property
    def heading(self) -> str:
        return HEADING_SEP.join(self.heading_path)


@dataclass
class ParsedDocument:
    title: str
    blocks: list[Block] = field(default_factory=list)
    fmt: str = "text"

    @property
    def text(self) -> str:
        return "\n\n".join(b.text for b in self.blocks)


_KIND = {"Table": "table", "CodeSnippet": "code", "ListItem": "list"}
_SKIP = {"Image", "PageBreak", "Header", "Footer", "PageNumber"}


def blocks_from_elements(elements: list, default_title: str) -> ParsedDocument:
    """Pure: walk unstructured elements keeping a heading stack by ``category_depth``."""
    stack: list[tuple[int, str]] = []
    blocks: list[Block] = []
    title = ""
    for el in elements:
        name = type(el).__name__
        if name in _SKIP:
            continue
        meta = el.metadata
        if name == "Table":
            text = table_text(meta.text_as_html) if getattr(meta, "text_as_html", None) else ""
            text = text or (el.text or "").strip()
        else:
            text = (el.text or "").strip() if name != "CodeSnippet" else (el.text or "").strip("\n")
        text = text.replace("\x00", "")  # Postgres text cannot hold NUL
        if not text.strip():
            continue
        if name == "Title":
            depth = meta.category_depth if meta.category_depth is not None else 0
            while stack and stack[-1][0] >= depth:
                stack.pop()
            stack.append((depth, _clean_heading(text)))
            if not title:
                title = _clean_heading(text)
            continue
        kind = _KIND.get(name, "text")
        page = getattr(meta, "page_number", None)
        blocks.append(Block(text=text, kind=kind, heading_path=tuple(h for _, h in stack), page=page))
    return ParsedDocument(title=title or default_title, blocks=blocks)


def _clean_heading(text: str) -> str:
    """Drop VitePress-style ``{#anchor}`` ids and collapse whitespace in headings."""
    text = " ".join(text.split())
    if text.endswith("}") and "{#" in text:
        text = text[: text.rindex("{#")].rstrip()
    return text


def table_text(html: str) -> str:
    """A table as one line per row (``cell | cell``), the header row first."""
    import lxml.html

    try:
        root = lxml.html.fragment_fromstring(html, create_parent="div")
    except Exception:  # noqa: BLE001 - malformed table markup: caller falls back to plain text
        return ""
    lines = []
    for tr in root.iter("tr"):
        cells = [" ".join(td.text_content().split()) for td in tr if td.tag in ("td", "th")]
        if any(cells):
            lines.append(" | ".join(cells))
    return "\n".join(lines)


# --- text decoding -----------------------------------------------------------------------------
def decode_text(data: bytes) -> str:
    if not data.strip():
        raise ParseError("empty document")
    if b"\x00" in data[:8192]:
        raise ParseError("binary content (NUL bytes) in a text document")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ParseError(f"not valid UTF-8 at byte {exc.start}") from None
    controls = sum(1 for ch in text[:8192] if ord(ch) < 32 and ch not in "\t\n\r\f")
    if controls > 0.05 * min(len(text), 8192):
        raise ParseError("binary content (control characters) in a text document")
    return text


# --- Markdown ----------------------------------------------------------------------------------
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_TAG_LINE = re.compile(r"^\s*</?[A-Za-z][\w.:-]*(\s[^<>]*)?/?>\s*$")
_TAG_OPEN = re.compile(r"^\s*<[A-Za-z][\w.:-]*(\s[^<>]*)?$")
_FRONT_MATTER = re.compile(r"\A---\s*\n.*?\n---\s*\n", re.S)
_CONTAINER = re.compile(r"^\s*:::+\s*(\w[\w-]*)?\s*(.*)$")


def clean_markdown(text: str) -> str:
    """Drop raw HTML wrapper lines (``<div class=...>``, ``</div>``, component tags) and
    VitePress ``:::`` container fences outside code fences.

    Python-Markdown leaves everything inside a raw HTML block unprocessed, so a fenced
    ``<script setup>`` example inside ``<div class="composition-api">`` would swallow the rest
    of the page. The content between the wrappers is kept; a container's title stays as text.
    """
    text = _FRONT_MATTER.sub("", text, count=1)
    out: list[str] = []
    fence: str | None = None
    in_tag = False
    for line in text.splitlines():
        m = _FENCE.match(line)
        if fence is not None:
            out.append(line)
            if (
                m
                and m.group(1)[0] == fence[0]
                and len(m.group(1)) >= len(fence)
                and not line.strip()[len(m.group(1)) :].strip()
            ):
                fence = None
            continue
        if m:  # normalise the info string: ```vue-html{2} is not a fence to Python-Markdown
            fence = m.group(1)
            lang = re.match(r"[\w+#.-]*", line.strip()[len(fence) :].strip()).group(0)
            out.append(fence + lang)
            continue
        if in_tag:  # a tag spread over several lines (<Component\n  attr="..."\n/>)
            if line.rstrip().endswith(">"):
                in_tag = False
            continue
        if _TAG_LINE.match(line):
            out.append("")
            continue
        if _TAG_OPEN.match(line) and not line.rstrip().endswith(">"):
            in_tag = True
            out.append("")
            continue
        c = _CONTAINER.match(line)
        if c and line.lstrip().startswith(":::"):
            out.append("")
            if c.group(2).strip():
                out.extend([f"**{c.group(2).strip()}**", ""])
            continue
        out.append(line)
    return "\n".join(out)


# --- HTML --------------------------------------------------------------------------------------
_CHROME_TAGS = {
    "script",
    "style",
    "noscript",
    "template",
    "nav",
    "header",
    "footer",
    "aside",
    "form",
    "iframe",
    "svg",
    "button",
    "select",
    "input",
    "head",
}
_CHROME_TOKENS = {
    "nav",
    "navbar",
    "navigation",
    "menu",
    "menubar",
    "sidebar",
    "footer",
    "header",
    "breadcrumb",
    "breadcrumbs",
    "sponsor",
    "sponsors",
    "banner",
    "ad",
    "ads",
    "advert",
    "advertisement",
    "social",
    "share",
    "cookie",
    "cookies",
    "toc",
    "pagination",
    "pager",
    "skip",
    "headerlink",
    "mobile",
    "links",
}
_ROOTS = (
    "//main",
    "//article",
    "//*[@role='main']",
    "//*[@id='content']",
    "//*[contains(concat(' ', normalize-space(@class), ' '), ' content ')]",
)
_HEADINGS = ("h1", "h2", "h3", "h4", "h5", "h6")


def _is_chrome(el) -> bool:
    if not isinstance(el.tag, str):
        return False
    if el.tag in _CHROME_TAGS:
        return True
    if (el.get("role") or "") in ("navigation", "banner", "contentinfo", "complementary", "search"):
        return True
    names = f"{el.get('id') or ''} {el.get('class') or ''}".lower()
    tokens = set(re.split(r"[\s_-]+", names)) - {""}
    if not tokens & _CHROME_TOKENS:
        return False
    # a class name alone is weaker evidence: a wrapper holding real prose (".section-header" around
    # paragraphs) is content; menus and sidebars are lists of short links
    prose = sum(len(p.text_content()) for p in el.iter("p"))
    return prose < 200


def clean_html(text: str) -> tuple[str, str]:
    """Main content of a page without navigation chrome; returns ``(html, title)``.

    The content root is ``<main>``/``<article>``/``#content``/``.content`` when one holds real
    text; inside it, menus, sidebars, headers, footers, ads and scripts are removed unless
    they contain the page's ``<h1>``. Highlighted code rendered as a table (``figure.highlight``
    with a line-number gutter) becomes a plain ``<pre>`` so it stays one code block.
    """
    import lxml.html

    try:
        doc = lxml.html.document_fromstring(text)
    except Exception as exc:  # noqa: BLE001 - lxml raises several types for hostile input
        raise ParseError(f"invalid HTML: {exc}") from None
    head_title = " ".join((doc.findtext(".//title") or "").split())
    for el in doc.xpath("//comment()"):
        if el.getparent() is not None:
            el.drop_tree()
    root = None
    for xp in _ROOTS:
        for cand in doc.xpath(xp):
            if len(" ".join(cand.text_content().split())) >= 200:
                root = cand
                break
        if root is not None:
            break
    if root is None:
        root = doc.find("body") if doc.find("body") is not None else doc
    _rewrite_code_tables(root)
    for el in list(root.iter()):
        if el is root or el.getparent() is None or not _is_chrome(el):
            continue
        if el.tag != "head" and el.xpath(".//h1"):
            continue
        el.drop_tree()
    h1 = root.xpath(".//h1")
    title = " ".join(h1[0].text_content().split()) if h1 else head_title
    return lxml.html.tostring(root, encoding="unicode"), title


def _rewrite_code_tables(root) -> None:
    import lxml.html

    for fig in root.xpath(
        ".//figure[.//td[contains(@class, 'code')]] | .//table[.//td[contains(@class, 'gutter')]]"
    ):
        code_cells = fig.xpath(".//td[contains(@class, 'code')]")
        if not code_cells or fig.getparent() is None:
            continue
        for br in code_cells[0].iter("br"):
            br.tail = "\n" + (br.tail or "")
        code = code_cells[0].text_content().strip("\n")
        pre = lxml.html.Element("pre")
        inner = lxml.html.Element("code")
        inner.text = code
        pre.append(inner)
        pre.tail = fig.tail
        fig.getparent().replace(fig, pre)


# --- PDF ---------------------------------------------------------------------------------------
_PAGE_NUMBER = re.compile(r"^(\d{1,4}|[-–—]\s*\d{1,4}\s*[-–—])$")


@dataclass
class _PdfBox:
    page: int
    text: str
    size: float
    chars: int


def _pdf_boxes(data: bytes) -> list[_PdfBox]:
    from pdfminer.high_level import extract_pages
    from pdfminer.layout import LTChar, LTTextContainer

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


def _pdf_elements(data: bytes) -> list:
    """Per page: headings by font size (larger than the body text, ranked into depths), the
    text between them through ``partition_text`` with the page number in its metadata."""
    from pdfminer.pdfdocument import PDFEncryptionError, PDFPasswordIncorrect
    from unstructured.documents.elements import ElementMetadata, Title

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
    elements: list = []
    buf: list[str] = []
    for i, b in enumerate(boxes):
        if b.size in depth and _pdf_heading(b, body):
            elements.append(
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
            elements.extend(_pdf_text_elements(buf, b.page))
            buf = []
    return elements


def _pdf_text_elements(texts: list[str], page: int) -> list:
    from unstructured.documents.elements import Text
    from unstructured.partition.text import partition_text

    out = []
    for el in partition_text(text="\n\n".join(texts), paragraph_grouper=False, languages=[""]):
        if type(el).__name__ == "Title":  # a heuristic guess: font size decides headings here
            el = Text(el.text)
        el.metadata.page_number = page
        out.append(el)
    return out


def _pdf_heading(b: _PdfBox, body: float) -> bool:
    return b.size >= body * 1.2 and 3 <= len(b.text) <= 120 and any(c.isalpha() for c in b.text)


# --- entry points ------------------------------------------------------------------------------
def parse_file(path: Path) -> ParsedDocument:
    fmt = SUPPORTED.get(path.suffix.lower())
    if fmt is None:
        raise ParseError(f"unsupported file type {path.suffix or '(none)'!r}")
    return parse_bytes(path.read_bytes(), fmt, default_title=path.stem)


def parse_bytes(data: bytes, fmt: str, default_title: str = "") -> ParsedDocument:
    install_blank_spacy()
    if fmt in BINARY_FORMATS:
        if not data.strip():
            raise ParseError("empty document")
        elements = _pdf_elements(data) if fmt == "pdf" else _docx_elements(data)
        title = ""
    else:
        text = decode_text(data)
        elements, title = _text_elements(text, fmt)
    doc = blocks_from_elements(elements, default_title)
    if title and doc.title == default_title:
        doc.title = title
    if doc.title and doc.title != default_title:  # text before the first heading sits under the title
        doc.blocks = [
            b if b.heading_path else Block(b.text, b.kind, (doc.title,), b.page) for b in doc.blocks
        ]
    doc.fmt = fmt
    if not doc.blocks:
        # a document of headings only (often one short line that unstructured calls a Title):
        # its text is still the content, not nothing
        doc.blocks = [
            Block(text=(el.text or "").strip(), page=getattr(el.metadata, "page_number", None))
            for el in elements
            if (el.text or "").strip()
        ]
    if not doc.blocks:
        raise ParseError("no text found in document")
    return doc


def _text_elements(text: str, fmt: str) -> tuple[list, str]:
    if fmt == "md":
        from unstructured.partition.md import partition_md

        return partition_md(text=clean_markdown(text), languages=[""]), ""
    if fmt == "html":
        from unstructured.partition.html import partition_html

        html, title = clean_html(text)
        return partition_html(text=html, languages=[""]), title
    if fmt == "text":
        from unstructured.partition.text import partition_text

        return [_demote_sentence_title(el) for el in partition_text(text=text, languages=[""])], ""
    raise ParseError(f"unsupported format {fmt!r}")


def _demote_sentence_title(el):
    """Plain text has no markup: a "title" guessed by unstructured that ends like a sentence is text."""
    from unstructured.documents.elements import Text

    if type(el).__name__ == "Title" and el.text.rstrip().endswith((".", "!", "?", ";", ",")):
        new = Text(el.text)
        new.metadata = el.metadata
        return new
    return el


#: a DOCX whose parts inflate past this is refused before parsing (python-docx inflates whole parts in memory)
DOCX_MAX_UNCOMPRESSED = 256 * 1024 * 1024
DOCX_MAX_RATIO = 200  # deflate of real XML stays far below this; a bomb is in the thousands


def _check_zip_bomb(data: bytes) -> None:
    """Refuse zip bombs from the central directory alone (zipfile never inflates past the declared sizes)."""
    import zipfile

    try:
        infos = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ParseError(f"corrupt DOCX: {type(exc).__name__}: {str(exc)[:200]}") from None
    total = sum(i.file_size for i in infos)
    if total > DOCX_MAX_UNCOMPRESSED:
        raise ParseError(
            f"DOCX refused: parts inflate to {total} bytes (limit {DOCX_MAX_UNCOMPRESSED}; zip bomb?)"
        )
    for i in infos:
        if i.file_size > 1024 * 1024 and i.file_size > DOCX_MAX_RATIO * max(1, i.compress_size):
            raise ParseError(
                f"DOCX refused: {i.filename} inflates {i.file_size // max(1, i.compress_size)}x (zip bomb?)"
            )


def _docx_elements(data: bytes) -> list:
    import zipfile

    from unstructured.partition.docx import partition_docx

    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise ParseError("corrupt DOCX: not a ZIP container")
    _check_zip_bomb(data)
    try:
        return partition_docx(file=io.BytesIO(data), languages=[""])
    except Exception as exc:  # noqa: BLE001 - python-docx raises many types on broken files
        raise ParseError(f"corrupt DOCX: {type(exc).__name__}: {str(exc)[:200]}") from None
