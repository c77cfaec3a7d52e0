"""HTML: the page's main content without navigation chrome, then ``partition_html``.

A documentation page repeats its menus, sidebars, headers and footers on every page; indexed,
they would match every question and crowd out the text that answers it.
"""

from __future__ import annotations

import re

from ragline.ingest.parse.common import ParseError

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


def elements(text: str) -> tuple[list, str]:
    """unstructured elements of the page's content, and the page title (``<h1>`` or ``<title>``)."""
    from unstructured.partition.html import partition_html  # parse package stays light: loads per format

    html, title = clean_html(text)
    return partition_html(text=html, languages=[""]), title


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
    import lxml.html  # parse package stays light: loads on first use

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
    import lxml.html  # parse package stays light: loads on first use

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
