"""Source code: definitions found by tree-sitter, with their line spans.

A file's language comes from its extension (:data:`EXTENSIONS`). Languages with a grammar wheel
(:data:`GRAMMARS`: Python, JavaScript, TypeScript/TSX, Go, Java, Rust, C, C++, C#, Ruby, PHP,
Kotlin) are parsed by tree-sitter; the grammars are compiled into their wheels and loaded from
them, nothing is downloaded. Other text files of a repository (shell, SQL, TOML, YAML, ...) are
read by lines, split at blank lines.

:func:`parse_code` turns the text into :class:`Segment` values that cover every line of the file:
one per definition (a function, a method, a type; a class's own lines before, between and after
its members are segments of the class), and the code around them (imports, module-level code).
Each segment knows its symbol path (``Session › send``), the lines of its signature and the lines
where a statement starts; the document also lists its :class:`Definition` values whole. This module
only parses: the chunking stage packs the segments into chunks (``ingest/chunk/code.py``) and makes
the definitions symbol records (``ingest/chunk/symbols.py``); which layer a source file goes to is
``ingest/layers.py``'s rule.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache

from ragline.ingest.parse.common import Block, ParsedDocument

#: file suffix -> language; the language is the document's format
EXTENSIONS = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".java": "java",
    ".rs": "rust",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".cxx": "cpp",
    ".hpp": "cpp",
    ".hh": "cpp",
    ".hxx": "cpp",
    ".cs": "csharp",
    ".rb": "ruby",
    ".php": "php",
    ".kt": "kotlin",
    ".kts": "kotlin",
    # read by lines
    ".sh": "shell",
    ".bash": "shell",
    ".sql": "sql",
    ".toml": "toml",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".ini": "ini",
    ".cfg": "ini",
    ".proto": "proto",
    ".gradle": "gradle",
    ".scala": "scala",
    ".swift": "swift",
    ".lua": "lua",
    ".pl": "perl",
    ".r": "r",
}

#: language -> (module, function returning the grammar) of its tree-sitter wheel
GRAMMARS = {
    "python": ("tree_sitter_python", "language"),
    "javascript": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "tsx": ("tree_sitter_typescript", "language_tsx"),
    "go": ("tree_sitter_go", "language"),
    "java": ("tree_sitter_java", "language"),
    "rust": ("tree_sitter_rust", "language"),
    "c": ("tree_sitter_c", "language"),
    "cpp": ("tree_sitter_cpp", "language"),
    "csharp": ("tree_sitter_c_sharp", "language"),
    "ruby": ("tree_sitter_ruby", "language"),
    "php": ("tree_sitter_php", "language_php"),
    "kotlin": ("tree_sitter_kotlin", "language"),
}

#: every code format (a language name)
FORMATS = frozenset(EXTENSIONS.values())


@dataclass(frozen=True)
class Syntax:
    """Which node types of one grammar are definitions."""

    leaves: frozenset[str]  # functions, methods, types without members
    containers: frozenset[str] = frozenset()  # classes, modules, impls: their members are chunked apart
    wrappers: frozenset[str] = frozenset()  # decorators, export, template: the definition inside
    transparent: frozenset[str] = frozenset()  # walked through (preprocessor blocks, extern "C")


_JS_LEAVES = {"function_declaration", "generator_function_declaration", "method_definition"}
_JS_WRAPPERS = {"export_statement", "lexical_declaration", "variable_declaration"}
_TS_LEAVES = _JS_LEAVES | {
    "type_alias_declaration",
    "enum_declaration",
    "function_signature",
    "abstract_method_signature",
}
_TS_CONTAINERS = {
    "class_declaration",
    "abstract_class_declaration",
    "interface_declaration",
    "internal_module",
    "module",
}
_C_LEAVES = {
    "function_definition",
    "type_definition",
    "struct_specifier",
    "union_specifier",
    "enum_specifier",
}
_C_TRANSPARENT = {
    "preproc_if",
    "preproc_ifdef",
    "preproc_else",
    "preproc_elif",
    "linkage_specification",
    "declaration_list",
}

SYNTAX = {
    "python": Syntax(
        frozenset({"function_definition"}),
        frozenset({"class_definition"}),
        frozenset({"decorated_definition"}),
    ),
    "javascript": Syntax(frozenset(_JS_LEAVES), frozenset({"class_declaration"}), frozenset(_JS_WRAPPERS)),
    "typescript": Syntax(frozenset(_TS_LEAVES), frozenset(_TS_CONTAINERS), frozenset(_JS_WRAPPERS)),
    "tsx": Syntax(frozenset(_TS_LEAVES), frozenset(_TS_CONTAINERS), frozenset(_JS_WRAPPERS)),
    "go": Syntax(frozenset({"function_declaration", "method_declaration", "type_declaration"})),
    "java": Syntax(
        frozenset({"method_declaration", "constructor_declaration", "compact_constructor_declaration"}),
        frozenset(
            {
                "class_declaration",
                "interface_declaration",
                "enum_declaration",
                "record_declaration",
                "annotation_type_declaration",
            }
        ),
    ),
    "rust": Syntax(
        frozenset(
            {
                "function_item",
                "function_signature_item",
                "struct_item",
                "enum_item",
                "union_item",
                "type_item",
                "macro_definition",
                "const_item",
                "static_item",
            }
        ),
        frozenset({"impl_item", "trait_item", "mod_item"}),
    ),
    "c": Syntax(frozenset(_C_LEAVES), transparent=frozenset(_C_TRANSPARENT)),
    "cpp": Syntax(
        frozenset(_C_LEAVES),
        frozenset({"class_specifier", "struct_specifier", "namespace_definition"}),
        frozenset({"template_declaration"}),
        frozenset(_C_TRANSPARENT),
    ),
    "csharp": Syntax(
        frozenset(
            {
                "method_declaration",
                "constructor_declaration",
                "destructor_declaration",
                "property_declaration",
                "operator_declaration",
                "indexer_declaration",
                "enum_declaration",
                "delegate_declaration",
            }
        ),
        frozenset(
            {
                "class_declaration",
                "struct_declaration",
                "interface_declaration",
                "record_declaration",
                "namespace_declaration",
            }
        ),
    ),
    "ruby": Syntax(
        frozenset({"method", "singleton_method"}), frozenset({"class", "module", "singleton_class"})
    ),
    "php": Syntax(
        frozenset({"function_definition", "method_declaration"}),
        frozenset(
            {
                "class_declaration",
                "interface_declaration",
                "trait_declaration",
                "enum_declaration",
                "namespace_definition",
            }
        ),
    ),
    "kotlin": Syntax(
        frozenset({"function_declaration", "type_alias"}),
        frozenset({"class_declaration", "object_declaration", "companion_object"}),
    ),
}

_COMMENTS = frozenset({"comment", "line_comment", "block_comment"})
_BODY_TYPES = frozenset(
    {
        "block",
        "class_body",
        "declaration_list",
        "field_declaration_list",
        "body_statement",
        "interface_body",
        "enum_body",
        "statement_block",
        "compound_statement",
        "function_body",
        "constructor_body",
    }
)
_NAME_TYPES = frozenset(
    {
        "identifier",
        "type_identifier",
        "field_identifier",
        "property_identifier",
        "simple_identifier",
        "name",
        "constant",
        "namespace_identifier",
        "qualified_identifier",
    }
)
_FUNCTION_VALUES = frozenset(
    {"arrow_function", "function_expression", "function", "generator_function", "class"}
)


@dataclass(frozen=True)
class Segment:
    """Lines ``start``..``end`` (1-based, inclusive) of one definition or of the code around them."""

    start: int
    end: int
    path: tuple[str, ...]  # symbol path: () for module-level code
    is_def: bool  # a definition, or a class's header (its signature and docstring)
    scope: tuple[str, ...]  # where it lives: neighbours merge only within one scope
    signature: tuple[int, int] | None = None  # lines repeated before each later part of a split definition
    boundaries: tuple[tuple[int, int], ...] = ()  # (line where a statement starts, nesting depth)


@dataclass(frozen=True)
class Definition:
    """One definition of a file, whole: a class with all its members, a function, a method."""

    path: tuple[str, ...]  # symbol path
    kind: str  # class | function | method
    start: int  # first line, with the comments right above it
    end: int
    signature: tuple[int, int]  # its signature lines (from the definition's own first line)


@dataclass
class CodeDocument(ParsedDocument):
    """A parsed source file: its lines and segments (``blocks`` hold the segments' text for callers
    that read ``text``), and its definitions (for the symbol records)."""

    language: str = ""
    lines: list[str] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    parsed_by: str = "lines"  # tree-sitter | lines
    definitions: list[Definition] = field(default_factory=list)


def language_for(path: str) -> str | None:
    """The language (format) of a file name by its extension, or None."""
    dot = path.rfind(".")
    return EXTENSIONS.get(path[dot:].lower()) if dot > path.rfind("/") else None


@cache
def parser_for(language: str):
    """A tree-sitter parser for ``language`` from its grammar wheel (loaded once per process)."""
    from tree_sitter import Language, Parser  # parse package stays light: loads with the first source file

    module, function = GRAMMARS[language]
    return Parser(Language(getattr(importlib.import_module(module), function)()))


def parse_code(text: str, language: str, title: str = "") -> CodeDocument:
    """Segments of a source file (pure apart from the cached grammar). ``title`` names the module."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    segments: list[Segment] | None = None
    definitions: list[Definition] = []
    parsed_by = "lines"
    if language in GRAMMARS:
        root = parser_for(language).parse(text.encode("utf-8")).root_node
        walker = _Walker(language, SYNTAX[language], lines)
        segments = walker.segments(root)
        definitions = sorted(walker.definitions, key=lambda d: (d.start, -d.end))
        parsed_by = "tree-sitter"
    if not segments:
        segments = _paragraphs(lines)
    blocks = [
        Block("\n".join(lines[s.start - 1 : s.end]), "code", ((title,) if title else ()) + s.path)
        for s in segments
    ]
    return CodeDocument(
        title=title,
        blocks=blocks,
        fmt=language,
        language=language,
        lines=lines,
        segments=segments,
        parsed_by=parsed_by,
        definitions=definitions,
    )


def _blank(line: str) -> bool:
    return not line.strip()


def _paragraphs(lines: list[str]) -> list[Segment]:
    """Files without a grammar: runs of lines between blank lines; every line may start a part."""
    out: list[Segment] = []
    start = None
    for i, line in enumerate([*lines, ""], start=1):
        if _blank(line):
            if start is not None:
                out.append(
                    Segment(start, i - 1, (), False, (), boundaries=tuple((n, 0) for n in range(start, i)))
                )
                start = None
        elif start is None:
            start = i
    return out


class _Walker:
    """One file's definitions, then the gaps between them, as segments."""

    def __init__(self, language: str, syntax: Syntax, lines: list[str]) -> None:
        self.language = language
        self.syntax = syntax
        self.lines = lines
        self.defs: list[Segment] = []
        self.containers: list[tuple[int, int, tuple[str, ...], tuple[int, int]]] = []
        self.definitions: list[Definition] = []

    # --- the walk -------------------------------------------------------------------------------
    def segments(self, root) -> list[Segment]:
        self.visit(root.named_children, ())
        return self.fill_gaps()

    def visit(self, nodes, path: tuple[str, ...]) -> None:
        nodes = list(nodes)
        for i, node in enumerate(nodes):
            target = self.definition(node)
            if target is None:
                if node.type == "ERROR" or node.type in self.syntax.transparent:
                    self.visit(node.named_children, path)
                continue
            full = path + self.names(target)
            start = self.leading_comments(nodes, i)
            end = node.end_point[0] + 1
            body = self.body_of(target)
            container = self.is_container(target)
            kind = (
                "class" if container else "method" if path and path in self.container_paths() else "function"
            )
            self.definitions.append(Definition(full, kind, start, end, self.signature(target, body)))
            if container:
                members = list(body.named_children) if body is not None else []
                if any(self.definition(m) is not None for m in self.flatten(members)):
                    self.containers.append((start, end, full, self.signature(target, body)))
                    self.visit(members, full)
                    continue
            self.defs.append(
                Segment(
                    start,
                    end,
                    full,
                    True,
                    path,
                    self.signature(target, body),
                    self.statement_starts(target),
                )
            )

    def container_paths(self) -> set[tuple[str, ...]]:
        return {c[2] for c in self.containers}

    def flatten(self, nodes) -> Iterator:
        for n in nodes:
            if n.type == "ERROR" or n.type in self.syntax.transparent:
                yield from self.flatten(n.named_children)
            else:
                yield n

    def definition(self, node, depth: int = 0):
        """The definition ``node`` is or wraps, or None."""
        s = self.syntax
        if node.type in s.leaves or node.type in s.containers:
            if (
                node.type == "struct_specifier"
                or node.type == "union_specifier"
                or node.type == "enum_specifier"
            ):
                return node if node.child_by_field_name("body") is not None else None
            return node
        if depth > 3:
            return None
        if node.type == "variable_declarator":
            value = node.child_by_field_name("value")
            return node if value is not None and value.type in _FUNCTION_VALUES else None
        if node.type in s.wrappers or (node.type == "declaration" and self.language in ("c", "cpp")):
            inner = node.child_by_field_name("definition") or node.child_by_field_name("declaration")
            candidates = [inner] if inner is not None else list(node.named_children)
            found = [d for d in (self.definition(c, depth + 1) for c in candidates) if d is not None]
            return found[0] if len(found) == 1 else None
        return None

    def is_container(self, target) -> bool:
        if target.type == "variable_declarator":
            value = target.child_by_field_name("value")
            return value is not None and value.type == "class"
        return target.type in self.syntax.containers

    def body_of(self, target):
        if target.type == "variable_declarator":
            target = target.child_by_field_name("value")
        body = target.child_by_field_name("body")
        if body is not None:
            return body
        for child in reversed(target.named_children):
            if child.type in _BODY_TYPES:
                return child
        return None

    def leading_comments(self, siblings: list, i: int) -> int:
        """The first line of ``siblings[i]`` with the comments right above it (no blank line between)."""
        start = siblings[i].start_point[0]
        j = i - 1
        while j >= 0 and siblings[j].type in _COMMENTS and siblings[j].end_point[0] >= start - 1:
            if j > 0 and siblings[j - 1].end_point[0] == siblings[j].start_point[0]:
                break  # a trailing comment of the previous statement
            start = siblings[j].start_point[0]
            j -= 1
        return start + 1

    def signature(self, target, body) -> tuple[int, int]:
        """The lines from the definition's first line up to its body (its first line alone when the
        body starts on it), at most five."""
        first = target.start_point[0] + 1
        last = first
        if body is not None and body.start_point[0] > target.start_point[0]:
            last = body.start_point[0]  # the line before the body
            if self.lines[body.start_point[0]].lstrip().startswith("{"):
                last += 1  # a brace on its own line belongs to the signature
        return first, min(max(last, first), first + 4)

    def statement_starts(self, target) -> tuple[tuple[int, int], ...]:
        """Lines where a statement of the definition's body (at any depth) starts, with its depth."""
        found: dict[int, int] = {}
        stack = [(target, 0)]
        while stack:
            node, depth = stack.pop()
            block = node.type in _BODY_TYPES or node.type.endswith(("block", "_body", "statement_list"))
            for child in node.named_children:
                if block:
                    line = child.start_point[0] + 1
                    found[line] = min(found.get(line, depth), depth)
                stack.append((child, depth + 1 if block else depth))
        return tuple(sorted(found.items()))

    # --- names ----------------------------------------------------------------------------------
    def names(self, target) -> tuple[str, ...]:
        """The names a definition adds to the symbol path (a Go method or a C++ ``A::f`` adds two)."""
        t = target.type
        if t == "method_declaration" and self.language == "go":
            receiver = target.child_by_field_name("receiver")
            recv = _first_of(receiver, {"type_identifier"}) if receiver is not None else None
            name = target.child_by_field_name("name")
            return tuple(_text(n) for n in (recv, name) if n is not None)
        if t == "type_declaration":
            spec = _first_of(target, {"type_spec", "type_alias"})
            name = spec.child_by_field_name("name") if spec is not None else None
            return (_text(name),) if name is not None else ("type",)
        if t == "impl_item":
            typ = target.child_by_field_name("type")
            return (_text(typ).split("<", 1)[0],) if typ is not None else ("impl",)
        name = target.child_by_field_name("name")
        if name is None:
            name = self.declarator_name(target)
        if name is None:
            name = next((c for c in target.named_children if c.type in _NAME_TYPES), None)
        if name is None:
            return (
                ("default",)
                if target.parent is not None and target.parent.type == "export_statement"
                else ("<anonymous>",)
            )
        text = _text(name)
        return tuple(p for p in text.split("::") if p) if "::" in text else (text,)

    def declarator_name(self, target):
        node = target.child_by_field_name("declarator")
        for _ in range(8):
            if node is None or node.type in _NAME_TYPES or node.type in ("destructor_name", "operator_name"):
                return node
            node = node.child_by_field_name("declarator") or next(
                (c for c in node.named_children if c.type in _NAME_TYPES), None
            )
        return None

    # --- coverage -------------------------------------------------------------------------------
    def fill_gaps(self) -> list[Segment]:
        """Every line not in a definition goes to a segment of its innermost class (or of the module)."""
        n = len(self.lines)
        covered = [False] * (n + 2)
        defs = sorted(self.defs, key=lambda s: s.start)
        kept: list[Segment] = []
        for s in defs:
            if any(covered[s.start : s.end + 1]):
                continue  # a definition inside another one (a wrapper seen twice): keep the outer
            kept.append(s)
            for line in range(s.start, min(s.end, n) + 1):
                covered[line] = True
        # the innermost class of each line: larger classes first, inner ones overwrite them
        owners: list[tuple | None] = [None] * (n + 2)
        for c in sorted(self.containers, key=lambda c: c[0] - c[1]):
            for line in range(c[0], min(c[1], n) + 1):
                owners[line] = c
        gaps: list[Segment] = []
        run: list[int] = []
        owner: tuple | None = None
        for line in range(1, n + 2):
            inside = line <= n and not covered[line]
            here = owners[line] if inside else None
            if run and (not inside or here != owner):
                gaps.extend(self.gap(run, owner))
                run = []
            if inside:
                if not run:
                    owner = here
                run.append(line)
        return sorted([*kept, *gaps], key=lambda s: s.start)

    def gap(self, run: list[int], owner: tuple | None) -> list[Segment]:
        lines = [n for n in run if not _blank(self.lines[n - 1])]
        if not lines:
            return []
        start, end = lines[0], lines[-1]
        bounds = tuple((n, 0) for n in range(start, end + 1))
        if owner is None:
            return [Segment(start, end, (), False, (), None, bounds)]
        _, _, path, signature = owner
        header = start <= signature[0]  # the class's own first lines: its signature and docstring
        return [Segment(start, end, path, header, path, signature if header else None, bounds)]


def _text(node) -> str:
    return node.text.decode("utf-8", "replace")


def _first_of(node, types: set[str]):
    stack = [node]
    while stack:
        cur = stack.pop(0)
        if cur.type in types:
            return cur
        stack.extend(cur.named_children)
    return None
