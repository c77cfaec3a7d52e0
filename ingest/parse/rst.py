"""reStructuredText through docutils' own parser, walked into the elements the other formats produce.

Read as plain text, an rST page loses its structure: a section title and its ``====`` underline are
two short lines instead of a heading, a literal block's lines look like titles, and a paragraph is
cut wherever a line is short. docutils parses the markup exactly; its document tree becomes
unstructured elements (``Title`` with the section depth, text, ``CodeSnippet`` for literal and
doctest blocks, ``ListItem``, ``Table`` with its rows as HTML), so the heading path, chunking and
layers are the same as for Markdown.

Sphinx documents use directives and roles docutils does not know (``autoclass``, ``versionadded``,
``:class:``): an unknown role renders as its text, an unknown directive as its argument and
content, ``code-block``/``sourcecode`` as a literal block. No file is included and no raw markup
passes (a document must not read the worker's files); docutils reads nothing from the network.
A document docutils cannot parse at all is read as plain text (:mod:`.text`).
"""

from __future__ import annotations

#: docutils settings: no report output, never halt on a markup error, nothing read from disk
_SETTINGS = {
    "report_level": 5,
    "halt_level": 5,
    "warning_stream": False,
    "file_insertion_enabled": False,
    "raw_enabled": False,
    "doctitle_xform": False,
    "sectsubtitle_xform": False,
    "input_encoding": "unicode",
    "syntax_highlight": "none",
}
#: sections of the tree that hold no document text
_SKIP = {
    "comment",
    "system_message",
    "substitution_definition",
    "target",
    "raw",
    "image",
    "figure",
    "pending",
    "footnote_reference",
    "citation_reference",
}
#: Sphinx's version notes, worded as Sphinx renders them
_VERSION_NOTES = {
    "versionadded": "New in version",
    "versionchanged": "Changed in version",
    "deprecated": "Deprecated since version",
}
#: Sphinx roles whose text is prose (a link's title, a term); every other unknown role names code
_PROSE_ROLES = {"ref", "doc", "term", "abbr", "numref", "download", "keyword", "option"}
_installed = False


def elements(text: str) -> tuple[list, str]:
    """unstructured elements of an rST document; the title comes from its headings."""
    try:
        tree = _parse(text)
    except Exception:  # noqa: BLE001 - docutils failed on this input: its text is still readable
        from ragline.ingest.parse import text as plain

        return plain.elements(text)
    out: list = []
    _walk(tree, 0, out)
    return out, ""


def _parse(text: str):
    from docutils.core import publish_doctree  # parse package stays light: loads per format

    _install_fallbacks()
    return publish_doctree(text, settings_overrides=_SETTINGS)


def _install_fallbacks() -> None:
    """Give docutils' lookups a fallback for unknown directives and roles.

    docutils turns an unknown name into an error node and drops what it marked up; a Sphinx page
    uses dozens of names of its own. The lookup functions are wrapped, not replaced: a known name
    resolves as before, so other users of docutils in the process are unaffected."""
    global _installed
    if _installed:
        return
    from docutils.parsers.rst import directives, roles
    from docutils.parsers.rst.directives.body import CodeBlock

    class SphinxCode(CodeBlock):
        """Sphinx's ``code-block``: docutils' ``code`` with Sphinx's options (``emphasize-lines``)."""

        option_spec = _AnyOptions()

    for name in ("code-block", "sourcecode"):
        directives.register_directive(name, SphinxCode)
    find_directive, find_role = directives.directive, roles.role

    def directive(name, language, document):
        found, messages = find_directive(name, language, document)
        return (found or _generic_directive()), messages

    def role(name, language, lineno, reporter):
        found, messages = find_role(name, language, lineno, reporter)
        return (found or _text_role), messages

    directives.directive = directive
    roles.role = role
    _installed = True


class _AnyOptions(dict):
    """An option spec that accepts every option as plain text."""

    def __contains__(self, key) -> bool:
        return True

    def __bool__(self) -> bool:  # docutils reads options only when the spec is truthy
        return True

    def __getitem__(self, key):
        from docutils.parsers.rst import directives

        return directives.unchanged


def _generic_directive():
    from docutils import nodes
    from docutils.parsers.rst import Directive

    class Generic(Directive):
        """An unknown directive: its argument as a paragraph, its content parsed as rST."""

        optional_arguments = 1
        final_argument_whitespace = True
        has_content = True
        option_spec = _AnyOptions()

        def run(self):
            out = []
            argument = " ".join(self.arguments[0].split()) if self.arguments else ""
            if self.name in _VERSION_NOTES and argument:
                version, _, rest = argument.partition(" ")
                argument = f"{_VERSION_NOTES[self.name]} {version}:" + (f" {rest}" if rest else "")
            if argument:
                out.append(nodes.paragraph(text=argument))
            if self.content:
                box = nodes.container()
                self.state.nested_parse(self.content, self.content_offset, box)
                out.append(box)
            return out

    return Generic


def _ref_title(text: str) -> str | None:
    """``title`` of ``title <target>`` ('' for ``<target>`` alone), None when ``text`` does not end
    in a ``<target>``; by the last ``<``, where a pattern's lazy title would be tried at every
    position of the text."""
    start = text.rfind("<")
    if start < 0 or not text.endswith(">") or len(text) - start < 3 or ">" in text[start + 1 : -1]:
        return None
    return text[:start].rstrip()


def _text_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """An unknown role as its text: ``:class:`~pkg.Name``` as the inline literal ````Name````,
    ``:ref:`title <target>``` as ``title``."""
    from docutils import nodes

    title = _ref_title(text)
    shown = (title or text).lstrip("~!")
    if text.startswith("~") and title is None:
        shown = shown.rsplit(".", 1)[-1]
    if name.rsplit(":", 1)[-1] in _PROSE_ROLES:
        return [nodes.inline(rawtext, shown)], []
    return [nodes.literal(rawtext, shown)], []


def _walk(node, depth: int, out: list) -> None:
    """Append the elements of ``node``'s children; ``depth`` is the section nesting."""
    for child in node.children:
        name = child.tagname
        if name in _SKIP:
            continue
        handler = _HANDLERS.get(name)
        if handler is not None:
            handler(child, node, depth, out)
        elif child.children:
            _walk(child, depth, out)  # containers, block quotes, admonitions, topics, compounds
        else:
            _paragraph(child, node, depth, out)


def _el():
    from unstructured.documents import elements as el  # parse package stays light

    return el


def _section(child, node, depth: int, out: list) -> None:
    if child.children and child.children[0].tagname == "title":
        out.append(
            _el().Title(_flat(child.children[0]), metadata=_el().ElementMetadata(category_depth=depth))
        )
    _walk(child, depth + 1, out)


def _title(child, node, depth: int, out: list) -> None:
    """A section's title is its heading (see :func:`_section`); an admonition's or a table's is text."""
    if node.tagname == "document":
        out.append(_el().Title(_flat(child), metadata=_el().ElementMetadata(category_depth=depth)))
    elif node.tagname != "section":
        _paragraph(child, node, depth, out)


def _literal(child, node, depth: int, out: list) -> None:
    out.append(_el().CodeSnippet(child.astext()))


def _list(child, node, depth: int, out: list) -> None:
    for item in child.children:
        _list_item(item, depth, out)


def _definitions(child, node, depth: int, out: list) -> None:
    for item in child.children:
        term = " ".join(_flat(t) for t in item.children if t.tagname in ("term", "classifier"))
        defs = [d for d in item.children if d.tagname == "definition"]
        body = " ".join(_flat(p) for d in defs for p in d.children if p.tagname == "paragraph")
        out.append(_el().ListItem(f"{term}: {body}" if body else term))
        for d in defs:
            _walk_except_paragraphs(d, depth, out)


def _fields(child, node, depth: int, out: list) -> None:
    for field in child.children:
        fname = _flat(field.children[0]) if field.children else ""
        body = " ".join(_flat(p) for p in field.children[1:])
        out.append(_el().Text(f"{fname}: {body}".strip(": ")))


def _table(child, node, depth: int, out: list) -> None:
    rows = _table_rows(child)
    if rows:
        html = (
            "<table>"
            + "".join("<tr>" + "".join(f"<td>{_escape(c)}</td>" for c in r) + "</tr>" for r in rows)
            + "</table>"
        )
        text = " ".join(" ".join(r) for r in rows)
        out.append(_el().Table(text, metadata=_el().ElementMetadata(text_as_html=html)))


def _paragraph(child, node, depth: int, out: list) -> None:
    text = _flat(child)
    if text:
        out.append(_el().Text(text))


_HANDLERS = {
    "section": _section,
    "title": _title,
    "subtitle": _title,
    "literal_block": _literal,
    "doctest_block": _literal,
    "bullet_list": _list,
    "enumerated_list": _list,
    "definition_list": _definitions,
    "field_list": _fields,
    "table": _table,
    "paragraph": _paragraph,
    "line_block": _paragraph,
    "rubric": _paragraph,
    "attribution": _paragraph,
}


def _list_item(item, depth: int, out: list) -> None:
    """One item: its paragraphs as the list item's text, nested blocks after it in order."""
    paras = [c for c in item.children if c.tagname == "paragraph"]
    text = " ".join(_flat(p) for p in paras)
    if text:
        out.append(_el().ListItem(text))
    _walk_except_paragraphs(item, depth, out)


def _walk_except_paragraphs(node, depth: int, out: list) -> None:
    from docutils import nodes

    rest = nodes.Element()
    rest.children = [c for c in node.children if c.tagname != "paragraph"]
    _walk(rest, depth, out)


def _table_rows(table) -> list[list[str]]:
    rows = []
    for row in table.findall(lambda n: n.tagname == "row"):
        rows.append([" ".join(entry.astext().split()) for entry in row.children])
    return [r for r in rows if any(r)]


def _flat(node) -> str:
    """A node's text on one line; an inline literal keeps its rST form (````HTTP_PROXY````), as in
    the docstrings of code, so the answer path reads it as a name in a sentence."""
    return " ".join(_inline_text(node).split())


def _inline_text(node) -> str:
    if node.tagname == "literal":
        return f"``{node.astext()}``"
    if node.tagname == "#text":
        return node.astext()
    return "".join(_inline_text(c) for c in node.children)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
