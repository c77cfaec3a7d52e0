"""The offline answer to a question about code: the place (``path:start-end`` and the enclosing
symbol), then the lines that show it. Pure functions over a code chunk and the question.

A code chunk is a span of a source file (``metadata.start_line``/``end_line``, ``symbol``). Its
prose is at most a docstring, so quoting sentences (:mod:`ragline.query.answer.extractive`) loses what a
"where is X decided" or "what does parameter X do" question asks for: the condition, the default,
the call. The lines are scored by the question's terms, identifiers split into their parts
(``max_retries`` is ``max`` and ``retries``, ``HTTPAdapter`` is ``http`` and ``adapter``), a whole
identifier of the question counting more than its parts; the answer is the densest window of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ragline.query.retrieval.filters import DEFAULT_TESTS_LAYER
from ragline.shared.sdk.contracts import Hit
from ragline.shared.worker import text as text_

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[\u0400-\u04FF]+", re.UNICODE)
#: an upper-case run is tried from its first letter only and taken whole (possessive): linear
_CAMEL_BOUNDARY = re.compile(r"[a-z0-9][A-Z]|(?<![A-Z])[A-Z]{2,}+[a-z]")
_DEFINITION = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s+(\w+)")
#: what code a question names as written: snake_case, camelCase, dotted, a call
_NAMED = re.compile(r"\b\w+(?:[._]\w+)+\b|\b[a-z]+[A-Z]\w*\b|\b[A-Z][a-z]+[A-Z]\w*\b|\b\w+\(\)|\b[A-Z]{2,}\b")
#: a language whose chunks are prose, not code, even when they carry line numbers
PROSE_LANGUAGES = frozenset({"markdown", "text", "rst", "restructuredtext", "html", ""})
#: the longest quoted window, in lines
MAX_LINES = 14


@dataclass(frozen=True)
class Window:
    """The quoted lines of one code chunk: ``first``..``last`` (0-based, inclusive) of its content."""

    first: int
    last: int
    score: float  # the window's lines' scores summed
    peak: float  # its best line's score (what compares with a sentence's)
    start_line: int  # the file's line number of ``first``
    symbol: str
    example: bool = False  # the lines are a usage example (:func:`example_window`)

    @property
    def end_line(self) -> int:
        return self.start_line + self.last - self.first


def is_code(hit: Hit) -> bool:
    """A chunk of a source file (line span and a programming language), not prose."""
    meta = hit.metadata or {}
    start = meta.get("start_line")
    return (
        isinstance(start, int)
        and not isinstance(start, bool)
        and str(meta.get("language") or "").lower() not in PROSE_LANGUAGES
    )


#: the layer test files are stored in when the settings do not say (``RAGLINE_CODE_TESTS_LAYER``):
#: the settings' default, as search's test penalty reads it
TESTS_LAYER = DEFAULT_TESTS_LAYER
_ASKS_TESTS = re.compile(r"\b(?:tests?|tested|testing|unit\s*tests?|тест\w*)\b", re.IGNORECASE)


def is_test(hit: Hit, tests_layer: str = TESTS_LAYER) -> bool:
    """A chunk of a test file: the ingest put it in the tests layer (``RAGLINE_CODE_TEST_GLOBS``)."""
    return hit.layer == tests_layer


#: "how do I …", "how can I …", "how to …", "как …": the question asks what to write
_ASKS_HOW = re.compile(
    r"^\s*(?:how\s+(?:do|can|should|would|could)\s+(?:i|you|we|one)\b|how\s+to\b|как\b)", re.IGNORECASE
)
#: a line of a usage example in a docstring or comment: an interpreter prompt (``>>>``, ``...``)
_EXAMPLE = re.compile(r"^\s*(?:#\s*)?(?:>>>|\.\.\.)(?:\s|$)")


def asks_how(question: str) -> bool:
    """The question asks how to do something ("How do I make a Session retry …?"): over code its
    answer is a call, which a usage example shows and a definition's body seldom does."""
    return _ASKS_HOW.search(question) is not None


def asks_about_tests(question: str) -> bool:
    """The question asks about tests ("where is X tested?"): a test's lines are then its answer."""
    return _ASKS_TESTS.search(question) is not None


def parts(token: str) -> list[str]:
    """An identifier's lower-cased parts, the whole one too (:func:`~ragline.shared.worker.text.identifier_parts`)."""
    return text_.identifier_parts(token)


stem = text_.stem


def holds(content: str, term: str) -> bool:
    """Whether code or its documentation holds a name the question spells (``term``, lower-case):
    as a whole token, its plural ("urls" for "URLs"), or a part of an identifier
    (``REQUESTS_CA_BUNDLE`` holds "CA", ``HTTPAdapter`` holds "HTTP"). An acronym a question writes
    as a word is written inside names in code."""
    if re.search(rf"(?<![\w.]){re.escape(term)}(?:e?s)?(?![\w]|\.\d)", content, re.IGNORECASE):
        return True
    if not term.isalnum():
        return False
    return any(
        term in parts(token)[1:]
        for token in _IDENT.findall(content)
        if "_" in token or _CAMEL_BOUNDARY.search(token)
    )


def code_terms(question: str) -> tuple[set[str], set[str]]:
    """(whole identifiers the question names, its term stems): stems are the first five letters of
    each identifier part or word of three letters or more that is not a stop word."""
    named = {n.rstrip("()").lower() for n in _NAMED.findall(question)}
    terms: set[str] = set()
    for token in _IDENT.findall(question):
        for p in parts(token):
            if len(p) >= 3 and not text_.is_stop_word(p):
                terms.add(stem(p))
    return named, terms


def dotted_names(line: str) -> list[str]:
    """The dotted names of a line (``requests.adapters.HTTPAdapter``): runs of word characters and
    dots cut at empty parts, two parts or more; one pass over the line."""
    out = []
    for run in _WORDS_AND_DOTS.findall(line):
        group: list[str] = []
        for part in [*run.split("."), ""]:
            if part:
                group.append(part)
                continue
            if len(group) >= 2:
                out.append(".".join(group))
            group = []
    return out


_WORDS_AND_DOTS = re.compile(r"[\w.]+")


def line_score(line: str, named: set[str], terms: set[str]) -> float:
    """A line's share of the question: each distinct term stem once, a whole named identifier 2."""
    tokens = _IDENT.findall(line)
    found = {stem(p) for t in tokens for p in parts(t) if len(p) >= 3}
    whole = {t.lower() for t in tokens} | {d.lower() for d in dotted_names(line)}
    return len(found & terms) + 2.0 * len(named & whole)


def enclosing_symbol(lines: list[str], first: int, hit: Hit) -> str:
    """The definition the window is in: the nearest ``def``/``class`` at or above its first line
    (joined to the chunk's symbol path when it is a method of it), else the chunk's own symbol."""
    meta = hit.metadata or {}
    symbol = str(meta.get("symbol") or "")
    for i in range(first, -1, -1):
        m = _DEFINITION.match(lines[i])
        if not m:
            continue
        name = m.group(1)
        if symbol == name or symbol.endswith("." + name):
            return symbol
        known = [s for s in meta.get("symbols") or [] if isinstance(s, str) and s.split(".")[-1] == name]
        if known:
            return known[0]
        return f"{symbol}.{name}" if symbol and not symbol.endswith(name) and lines[i][:1].isspace() else name
    return symbol


def best_window(question: str, hit: Hit, max_lines: int = MAX_LINES) -> Window | None:
    """The densest run of at most ``max_lines`` lines of a code chunk for the question, trimmed to
    its first and last scoring lines (a lone line gets the lines after it that belong to it: the
    body of a condition), or None when no line shares a term with the question."""
    if not is_code(hit):
        return None
    lines = hit.content.splitlines()
    named, terms = code_terms(question)
    scores = [line_score(line, named, terms) for line in lines]
    if not lines or max(scores, default=0.0) <= 0:
        return None
    best, best_sum = 0, -1.0
    for start in range(len(lines)):
        total = sum(scores[start : start + max_lines])
        if total > best_sum:
            best, best_sum = start, total
    window = [i for i in range(best, min(len(lines), best + max_lines)) if scores[i] > 0]
    first, last = window[0], window[-1]
    # a condition or a signature alone: its body too, while it is indented deeper
    indent = len(lines[first]) - len(lines[first].lstrip())
    while last + 1 < len(lines) and last - first + 1 < max(4, len(window)) and last - first + 1 < max_lines:
        nxt = lines[last + 1]
        if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent and last > first:
            break
        last += 1
    while last > first and not lines[last].strip():
        last -= 1
    start_line = int(hit.metadata["start_line"]) + first
    return Window(first, last, best_sum, max(scores), start_line, enclosing_symbol(lines, first, hit))


def quoted_lines(hit: Hit, window: Window) -> list[str]:
    """The window's lines, their common indentation removed (the code block reads from column 0)."""
    lines = hit.content.splitlines()[window.first : window.last + 1]
    indent = min((len(x) - len(x.lstrip()) for x in lines if x.strip()), default=0)
    return [x[indent:] for x in lines]


def place(hit: Hit, window: Window) -> str:
    """``path:start-end`` of the quoted lines."""
    path = hit.path or hit.doc_id
    if window.end_line > window.start_line:
        return f"{path}:{window.start_line}-{window.end_line}"
    return f"{path}:{window.start_line}"


def default_window(question: str, hit: Hit, besides: Window | None = None) -> Window | None:
    """The line that gives a parameter the question names its default (``max_retries=DEFAULT_RETRIES``
    in a signature, ``DEFAULT_REDIRECT_LIMIT = 30``) when ``besides`` (the quoted window) does not
    hold it, or None: "what does parameter X do" is answered by what it does and what it is."""
    if not is_code(hit):
        return None
    named, _ = code_terms(question)
    names = [n for n in named if "_" in n or n.isidentifier()]
    lines = hit.content.splitlines()
    for i, line in enumerate(lines):
        if besides is not None and besides.first <= i <= besides.last:
            continue
        if line.lstrip().startswith((">>>", "...", "#")):  # an example or a comment sets nothing
            continue
        if any(re.search(rf"(?<![\w.]){re.escape(n)}\s*=(?!=)", line, re.IGNORECASE) for n in names):
            start = int(hit.metadata["start_line"]) + i
            return Window(i, i, 0.0, 0.0, start, enclosing_symbol(lines, i, hit))
    return None


def example_window(question: str, hit: Hit, max_lines: int = MAX_LINES) -> Window | None:
    """The usage example of a code chunk that shares most terms with the question: a run of
    interpreter-prompt lines (``>>> s.mount('http://', a)``) with the output lines between them,
    or None when the chunk has none sharing a term. A docstring's example is how its library
    is meant to be called, which is what a "how do I" question asks for (:func:`asks_how`)."""
    if not is_code(hit):
        return None
    lines = hit.content.splitlines()
    named, terms = code_terms(question)
    runs: list[tuple[int, int]] = []
    i = 0
    while i < len(lines):
        if not _EXAMPLE.match(lines[i]):
            i += 1
            continue
        first = last = i
        i += 1
        # an output line belongs to the example while the prompts go on after it
        while i < len(lines) and lines[i].strip() and not lines[i].strip().startswith(('"""', "'''")):
            if _EXAMPLE.match(lines[i]):
                last = i
            i += 1
        runs.append((first, min(last, first + max_lines - 1)))
    best: Window | None = None
    for first, last in runs:
        scores = [line_score(line, named, terms) for line in lines[first : last + 1]]
        total = sum(scores)
        if total > 0 and (best is None or total > best.score):
            start = int(hit.metadata["start_line"]) + first
            best = Window(
                first, last, total, max(scores), start, enclosing_symbol(lines, first, hit), example=True
            )
    return best
