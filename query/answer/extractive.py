"""The offline answer: whole sentences quoted from the retrieved chunks, each cited [N].

Pure functions. A chunk is not plain prose: the chunker joins a section's blocks with newlines, so
one chunk holds paragraphs, code blocks, table rows and labels such as "Попробовать в песочнице"
next to each other, and consecutive chunks repeat their boundary sentences (whole-sentence
overlap). Splitting such text into sentences directly quotes fragments of code
(``'Да' : 'Нет' }}``) and glues a label onto the sentence after it. So a chunk is read line by
line: code, markup and label lines are dropped, table rows give their prose cells, and only the
remaining prose is split into sentences. Sentences are then de-duplicated across chunks by their
normalised text, scored by the question's terms, and for a "что такое X" / "what is X" question
the sentence that defines X comes first.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from ragline.query.answer import code_answer, texts
from ragline.shared.sdk.contracts import Hit
from ragline.shared.worker import text as text_
from ragline.shared.worker.text import split_sentences

_WORD = re.compile(r"\w+", re.UNICODE)
_LETTER_WORD = re.compile(r"[^\W\d_]{2,}", re.UNICODE)

#: how a line of code starts: comments, tags, brackets, prompts, declarations, shell commands
_CODE_LINE = re.compile(
    r"""^(?:
        //|/\*|\*/|\#!|<[!/]|<[^<>]*>$|[{}\[\]()]|\$\s|>>>\s|
        (?:import|export)\s.*(?:\bfrom\b|[{*]|\bdefault\b)|
        (?:const|let|var)\s+[\w$]+\s*=|
        (?:async\s+)?function\s*+[\w$]*+\s*+\(|
        (?:def|class)\s+\w+\s*[(:{]|
        return\s.*[;)\]}'"]$|
        (?:npm|yarn|pnpm|npx|pip|curl|git)\s+[a-z-]
    )""",
    re.VERBOSE,
)
#: template, markup and operator syntax anywhere in a line (a bare ``<Suspense>`` in prose is a
#: component's name, a tag with attributes is markup)
_MARKUP = re.compile(
    r"\{\{|\}\}|=>|</|/>|\]\(|!\[|`|[{}]|<[a-zA-Z][\w.-]*\s+[^<>]*=[^<>]*>|"
    r"\b\w+\([^()]*\)\s*[;{]|\s(?:===?|!==?|&&|\|\||\+=)\s"
)
#: ``name = value`` / ``key: 'value'``
_ASSIGNMENT = re.compile(r"^[\w.$\[\]]+\s*(?:=\s*\S|:\s*['\"\[{])")
_BULLET = re.compile(r"^(?:[•●▪◦‣∙·\-–—*]|\d{1,2}[.)])\s+")
#: a docstring's delimiters where a line of a code chunk opens or closes it (``"""Remember a
#: callback."""``, ``r'''``, a closing ``"""`` alone): the prose between them is quotable, the
#: quotes are not
_DOCSTRING_OPEN = re.compile(r"^[rRuUbBfF]{0,2}(?:\"{3}|'{3})\s*")

_END = (".", "!", "?", "…", ";", '."', ".»", "!»", "?»")


#: what a question names exactly (a version, a name with digits, an identifier, a path): the
#: passages answering it spell it the same way, in any language
_SPECIFIC = re.compile(
    r"(?<![\w.])(?:\d+(?:\.\d+)+|[A-Za-z]+/\d+(?:\.\d+)?|[A-Za-z]+\d+[\w.]*|\w+(?:[._]\w+)+|"
    r"[a-z]+[A-Z]\w*|[A-Z][a-z]+[A-Z]\w*|[A-Z]{2,}\w*)(?![\w])"
)
_LATIN_WORD = re.compile(r"(?<![\w-])[A-Za-z][A-Za-z-]{2,}(?![\w-])")


def specific_terms(question: str) -> list[str]:
    """The terms of a question a passage about its topic must contain: versions and names with
    digits (``5.0``, ``HTTP/2``, ``L2``), identifiers (``max_retries``, ``nextTick``), acronyms
    (``HTTP``); in a question in Cyrillic also every word in Latin letters (``Quux``, ``Zorplib``:
    a product is named in its own spelling). Lower-cased, in order, each once."""
    found = [m.group(0) for m in _SPECIFIC.finditer(question)]
    if re.search(r"[\u0400-\u04FF]", question):
        # a name (Quux, Zorplib, v-model), not a gloss in parentheses ("перебор (brute force)")
        found += [w for w in _LATIN_WORD.findall(question) if w[0].isupper() or re.search(r"[-_.]", w)]
    # an acronym's plural is the acronym ("URLs" is written "URL" as often)
    found = [t[:-1] if re.fullmatch(r"[A-Z]{2,}s", t) else t for t in found]
    return list(dict.fromkeys(t.lower().strip(".") for t in found if t.strip(".")))


def mentions(text: str, term: str) -> bool:
    """``term`` occurs in ``text`` as a whole token (``5.0`` is not in ``2.5.0``), case-insensitive."""
    return re.search(rf"(?<![\w.]){re.escape(term)}(?![\w]|\.\d)", text, re.IGNORECASE) is not None


def stems(text: str) -> set[str]:
    """The Snowball stems of the words of three letters or more (:mod:`ragline.shared.worker.text`)."""
    return text_.stems(text, min_len=3)


def code_stems(text: str) -> set[str]:
    """:func:`stems` of ``text`` and of its identifiers' parts (``TooManyRedirects`` holds
    ``redirects``): code and its documentation answer in names a question spells as words."""
    return text_.term_stems(text, keep_stop_words=True)


def question_terms(question: str) -> set[str]:
    """The question's topic stems (stop words dropped; all words when nothing else is left)."""
    return text_.topic_stems(question)


def is_code_line(line: str) -> bool:
    """A line of a code block (how it starts, an assignment, few letters), not prose."""
    s = line.strip()
    if not s:
        return True
    if _CODE_LINE.match(s) or _ASSIGNMENT.match(s):
        return True
    chars = [c for c in s if not c.isspace()]
    letters = sum(c.isalpha() for c in chars)
    return letters < 0.6 * len(chars)


#: an inline literal of reStructuredText or Markdown (````verify````, ```x```), an rST role
#: (``:class:`Session <requests.Session>```) or link (```described here`_``): a name or a value
#: written in a sentence of a docstring or of the documentation, not markup around it
_INLINE_LITERAL = re.compile(
    r"(?::[a-z]+(?::[a-z]+)?:)?``[^`\n]{1,80}``|(?::[a-z]+(?::[a-z]+)?:)?(?<![`\w])`[^`\n]{1,80}`(?!`)_{0,2}"
)


def prose_view(text: str) -> str:
    """``text`` with each inline literal read as one word: a sentence naming ````HTTP_PROXY```` or
    ``:class:`HTTPAdapter```` is prose, and what is still code or markup around them shows."""
    return _INLINE_LITERAL.sub(" literal ", text)


def is_code_or_markup(text: str) -> bool:
    """Code, a template or markup anywhere in ``text`` (a line or a sentence), not prose; inline
    literals (:func:`prose_view`) are names in a sentence."""
    view = prose_view(text)
    return is_code_line(view) or bool(_MARKUP.search(view))


def _table_cells(line: str) -> list[str] | None:
    """The cells of a table row ("a | b | c"), or None when the line is not one."""
    if line.count("|") < 2 and not (line.startswith("|") or line.endswith("|")):
        return None
    return [c.strip() for c in line.strip("|").split("|") if c.strip()]


#: a table row's number ("2.1.1", "V14.4", "A3"): a requirement is named by it, so its prose cell
#: is quoted with it
_ROW_ID = re.compile(r"^(?:[A-ZА-Я]{1,3}\d{1,3}(?:\.\d{1,3}){0,3}|\d{1,3}(?:\.\d{1,3}){1,3})$")


def clean_sentence(sentence: str) -> str:
    """A list item read as a sentence: bullet dropped, capitalised, ended with a full stop."""
    s = _BULLET.sub("", sentence.strip())
    if _ROW_ID.match(s.split(" ", 1)[0]):  # "2.1.1 Убедитесь, ...": the number stays as written
        head, _, rest = s.partition(" ")
        return f"{head} {clean_sentence(rest)}" if rest else s
    if s.endswith((";", ",")):
        s = s[:-1].rstrip() + "."
    if re.match(r"\w*(?:_|[a-z][A-Z])", s):  # an identifier keeps its case ("max_retries: …")
        return s
    return s[:1].upper() + s[1:]


def is_answer_sentence(sentence: str) -> bool:
    """A whole sentence that reads on its own: at least four words, ends like a sentence (not
    with a colon that announces a code block), no code or markup in it."""
    s = _BULLET.sub("", sentence.strip())
    return (
        len(_LETTER_WORD.findall(prose_view(s))) >= 4
        and s.endswith(_END)
        and not is_code_or_markup(s)
        and s[0] not in ",;:)]}"
        # a piece cut out of a parenthesis or a quotation is not a sentence of its own
        and s.count("(") == s.count(")")
        and s.count("«") == s.count("»")
    )


def prose_sentences(content: str, carry: bool = True) -> list[str]:
    """The quotable sentences of a chunk, in order (as written; :func:`clean_sentence` tidies them).

    Lines are the chunker's block boundaries: each is code, a table row or a paragraph. Labels
    and headings (lines that do not end like a sentence) and code never reach the sentence
    splitter, so neither can be glued onto a neighbouring sentence. A sentence introducing a
    block (:func:`introduced_block`) is also read with it, when ``carry``.
    """
    out: list[str] = []
    lines = content.splitlines()
    for i, raw in enumerate(lines):
        line = strip_docstring_quotes(raw.strip())
        if not line:
            continue
        block = introduced_block(line, lines[i + 1 :]) if carry else ""
        if block:
            out.append(f"{split_sentences(line)[-1].strip()}\n{block}")
        cells = _table_cells(line)
        if cells and len(cells) > 1 and _ROW_ID.match(cells[0]):
            row = numbered_row(cells)
            if row:
                out.append(row)
            continue
        for piece in cells if cells is not None else [line]:
            if is_code_line(piece):
                continue
            # markup inside a paragraph (an inline image) costs only the sentence that holds it
            out.extend(s.strip() for s in statements(split_sentences(piece)) if is_answer_sentence(s))
    return out


#: a sentence naming a goal or a case and no instruction ("Чтобы отфильтровать элементы в списке.",
#: "If you need a proxy."), and a sentence whose instruction refers back to the one before it ("В
#: этих случаях, замените …", "In this case, set …")
_CASE = re.compile(r"^(?:чтобы|если|когда|для\s+того\s+чтобы|to|if|when|in\s+order\s+to)\s", re.IGNORECASE)
_BACK_REFERENCE = re.compile(
    r"^(?:в\s+(?:этих|этом|таких|таком)\s+случа\w*|тогда|для\s+этого|in\s+(?:this|these|such)\s+cases?|"
    r"then|to\s+do\s+(?:so|this))\b",
    re.IGNORECASE,
)


#: the lines of a block a sentence introduces that are quoted with it, at most
BLOCK_LINES = 12


def introduced_block(line: str, after: list[str]) -> str:
    """The code, list or table lines right after a prose ``line`` ending with a colon ("pass the
    proxy URL to the client:"), which that sentence introduces and carries; empty otherwise."""
    if not line.endswith(":") or is_code_line(line):
        return ""
    block: list[str] = []
    for raw in after:
        s = raw.strip()
        if not s and not block:
            continue
        if not s or not (is_code_line(s) or _BULLET.match(s) or _table_cells(s) is not None or names_code(s)):
            break
        block.append(raw.rstrip())
        if len(block) == BLOCK_LINES:
            break
    return "\n".join(block)


def names_code(line: str) -> bool:
    """A line that is no sentence and spells an identifier or a call (``requests.get(url)``)."""
    return not line.endswith(_END) and any(text_.is_neutral(w) for w in line.split())


def statements(sentences: list[str]) -> list[str]:
    """Sentences of one paragraph, a case and the instruction answering it joined into one
    statement: quoted alone, the case ("Чтобы отфильтровать элементы в списке (например …).")
    answers nothing, and the instruction ("В этих случаях, замените users на вычисляемое свойство")
    does not say when it applies."""
    out: list[str] = []
    for sentence in sentences:
        if out and _BACK_REFERENCE.match(sentence.strip()) and _CASE.match(out[-1].strip()):
            out[-1] = f"{out[-1].rstrip()} {sentence.strip()}"
        else:
            out.append(sentence)
    return out


def numbered_row(cells: list[str]) -> str:
    """A numbered table row (a requirement) read as one statement: its number, its sentences, then
    the short cells that say something in words ("12 часов или 30 минут бездействия" of a per-level
    column); check marks and bare numbers (CWE, NIST references) left out. Empty when the row
    holds no sentence. A row is quoted whole: its second sentence ("Такие механизмы включают …
    CAPTCHA") is as much the requirement as its first."""
    said = [s.strip() for c in cells[1:] for s in split_sentences(c) if is_answer_sentence(s)]
    if not said:
        return ""
    values = [
        c
        for c in cells[1:]
        if not any(is_answer_sentence(s) for s in split_sentences(c))
        and _LETTER_WORD.search(c)
        and not is_code_or_markup(c)
    ]
    row = f"{cells[0]} {' '.join(said)}"
    return f"{row} {'; '.join(values)}." if values else row


def strip_docstring_quotes(line: str) -> str:
    """A line without the docstring delimiters that open or close it (code chunks: a docstring
    is the prose of a definition, and an answer quoting it must not quote its quotes)."""
    line = _DOCSTRING_OPEN.sub("", line)
    closed = line.rstrip(",;)")
    if closed.endswith(('"""', "'''")):
        return closed[:-3].rstrip()
    return line


def sentence_key(sentence: str) -> str:
    """Normalised text: the same sentence from two overlapping chunks (or two formats of one
    document) compares equal."""
    return " ".join(_WORD.findall(clean_sentence(sentence).lower()))


#: ``:param int name:`` of a docstring: the field list's marker, the parameter's name stays
_FIELD = re.compile(r"^:(?:param|arg|keyword|kwarg)\s+(?:[\w.\[\], ]+\s)?(\w+):\s*")


def docstring_paragraphs(code: str) -> str:
    """A code chunk with its docstrings' wrapped lines joined into one line a paragraph (a
    docstring wraps a sentence over several lines; a chunk of prose has one block a line), and
    ``:param x:`` fields read as ``x:``."""
    out: list[str] = []
    joinable = False  # the line before is prose that goes on
    for raw in code.splitlines():
        stripped = raw.strip()
        comment = stripped.startswith("#") and not stripped.startswith("#!")
        line = (
            stripped.lstrip("#").strip() if comment else _FIELD.sub(r"\1: ", strip_docstring_quotes(stripped))
        )
        prose = bool(line) and not is_code_line(line) and not line.startswith((">>>", "..."))
        if prose and joinable:
            out[-1] += " " + line
        else:
            out.append(line if prose else raw)
        joinable = prose and not line.endswith(_END + (":",))
    return "\n".join(out)


def sentences_of(hits: list[Hit]) -> list[tuple[int, int, str]]:
    """(hit number, position, sentence) of every quotable sentence, each once: the better ranked
    chunk keeps a sentence that overlapping chunks repeat, and a statement's first sentence alone
    (:func:`statements`: the chunk boundary cut it from its instruction) repeats that statement."""
    seen: set[str] = set()
    out: list[tuple[int, int, str]] = []
    for n, h in enumerate(hits, start=1):
        code = code_answer.is_code(h)  # a code chunk's lines are the code answer's to quote
        content = docstring_paragraphs(h.content) if code else h.content
        for pos, sent in enumerate(prose_sentences(content, carry=not code)):
            key = sentence_key(sent)
            if key not in seen and not any(k.startswith(key + " ") for k in seen):
                seen.add(key)
                out.append((n, pos, sent))
    return out


@dataclass(frozen=True)
class Candidate:
    """A quotable sentence of the hits and what the composer read in it."""

    n: int  # the hit's number in the prompt, 1-based
    pos: int  # the sentence's place in its chunk
    text: str
    score: float = 0.0  # the composer's one score (:func:`score_candidates`)
    similarity: float | None = None  # the embedder's question-sentence similarity, in its own scale
    lexical: float = 0.0  # the question's terms the sentence holds, weighted by rarity, in [0, 1]
    overlap: int = 0  # how many of the question's term stems it holds


def near_duplicate(a: str, b: str, threshold: float = 0.6) -> bool:
    """The same statement in other words (two versions or translations of one page): most of
    their word stems are shared."""
    sa, sb = stems(a), stems(b)
    return bool(sa and sb) and len(sa & sb) / len(sa | sb) >= threshold


def render_segments(chosen: list[Candidate]) -> list[str]:
    """The answer's segments, one a quoted sentence (with the block it carries), whose concatenation
    is the answer: consecutive sentences of one chunk share one [N]; a sentence carrying the block it
    introduces is cited at its colon, the block fenced below it."""
    out: list[str] = []
    for i, c in enumerate(chosen):
        head, _, block = c.text.partition("\n")
        last = i + 1 == len(chosen) or chosen[i + 1].n != c.n
        piece = head + (f" [{c.n}]" if last or block else "")
        if block:
            piece += f"\n```\n{block}\n```"
        out.append(piece + ("" if i + 1 == len(chosen) else "\n" if block else " "))
    return out


def render(chosen: list[Candidate]) -> str:
    """The quoted sentences as one text (:func:`render_segments`)."""
    return "".join(render_segments(chosen))


def asks_list(question: str) -> bool:
    """The answer is a list: the rows under one heading (:data:`_LIST_QUESTION`)."""
    return _LIST_QUESTION.match(question) is not None


def asks_place(question: str) -> bool:
    """The answer is a place in code (:data:`_PLACE_QUESTION`)."""
    return _PLACE_QUESTION.match(question) is not None


#: "перечисли …", "list the …", "какие X …", "which Xs …": the answer is a list, often one table or
#: bulleted block of one document
_LIST_QUESTION = re.compile(
    r"^\s*(?:перечисл\w*|назови(?:те)?|list|enumerate|name\s+(?:all|the))\b|"
    r"^\s*(?:какие|каких)\s|^\s*(?:which|what)\s+(?:\w+\s+){0,3}?\w{3,}s\s+(?:do|does|are|is|can)\b",
    re.IGNORECASE,
)
#: "where …", "which function / class / method …", "где …", "в какой функции …": the answer is a place
_PLACE_QUESTION = re.compile(
    r"^\s*(?:where|где|в\s+как\w+\s+(?:функци|метод|класс|файл)\w*|which\s+(?:function|method|class|file))\b",
    re.IGNORECASE,
)
#: items of a list answer, at most
MAX_ITEMS = 6
#: how many of the first hits a code answer's lines may come from
CODE_HITS = 5


@dataclass
class Extract:
    """An extractive answer and what it is made of: the confidence is judged from what was quoted,
    and the groundedness check skips the framing (ragline's own words, never a claim)."""

    text: str
    kind: str  # none, sentences, definition, list, code, crosslingual
    lang: str  # the question's language: the framing's and the refusal's
    framing: list[str] = field(default_factory=list)
    quoted: list[tuple[int, str]] = field(default_factory=list)  # (hit number, quoted text)
    #: what the confidence model reads (:data:`FEATURES`), measured while composing
    features: dict[str, float | None] = field(default_factory=dict)
    #: the answer in the pieces a stream sends (framing, each quoted sentence or item); their
    #: concatenation is ``text``; empty: one piece, the whole text
    segments: list[str] = field(default_factory=list)

    @property
    def no_answer(self) -> bool:
        return self.kind == "none"


def render_list_segments(chosen: list[Candidate]) -> list[str]:
    """One item a line; an item's citation after the last consecutive item of its chunk."""
    out: list[str] = []
    for i, c in enumerate(chosen):
        last = i + 1 == len(chosen)
        cite = f" [{c.n}]" if last or chosen[i + 1].n != c.n else ""
        out.append(f"- {c.text}{cite}" + ("" if last else "\n"))
    return out


def render_list(chosen: list[Candidate]) -> str:
    return "".join(render_list_segments(chosen))


def best_code_window(
    question: str, hits: list[Hit], tests_layer: str = code_answer.TESTS_LAYER
) -> tuple[int, Hit, code_answer.Window] | None:
    """(hit number, hit, window) of the code lines that answer best, among the first
    :data:`CODE_HITS` hits. A question naming something exactly (``max_retries``, ``GET``) is
    answered from a chunk that holds it: the chunk holding most of its identifiers wins, then the
    best window of the chunks holding one of its names (an acronym "CA" is held by
    ``REQUESTS_CA_BUNDLE``: :func:`~ragline.query.answer.code_answer.holds`). How many of the names
    a chunk holds does not count: acronyms ("HTTPS", "URL") are everywhere in a library's code, and
    the chunk repeating most of them is seldom the one whose lines answer. A test's lines answer
    only when no other code does or the question asks about tests: a test repeats the words of the
    behaviour it checks (its name, its asserts) more densely than the code that has it, and shows
    a call, not the place. A "how do I" question is answered by a usage example where a chunk has
    one (:func:`~ragline.query.answer.code_answer.example_window`): it shows the call to write."""
    specific = specific_terms(question)
    identifiers = [t for t in specific if re.search(r"[._]", t)]
    tests_count = code_answer.asks_about_tests(question)
    how = code_answer.asks_how(question)
    windows = []
    for n, h in enumerate(hits[:CODE_HITS], start=1):
        w = code_answer.best_window(question, h)
        if w is None:
            continue
        named = any(code_answer.holds(h.content, t) for t in specific)
        if specific and not named:
            continue
        exact = sum(mentions(h.content, t) for t in identifiers)
        library = tests_count or not code_answer.is_test(h, tests_layer)
        example = code_answer.example_window(question, h) if how and library else None
        w = example or w
        windows.append(((library, exact, w.example), w.score - 0.5 * (n - 1), n, h, w))
    if not windows:
        return None
    _, _, n, h, w = max(windows, key=lambda t: (t[0], t[1], -t[2]))
    return n, h, w


def default_lines(question: str, hits: list[Hit], n: int, h: Hit, w: code_answer.Window):
    """(window, hit number, hit) of the line giving a parameter the question names its default,
    in the quoted chunk or another chunk of its file, or (None, n, h): "what does parameter X do"
    is answered by what it does and what it is. Not for "where" questions."""
    if asks_place(question):
        return None, n, h
    same_file = [(k, x) for k, x in enumerate(hits[:CODE_HITS], start=1) if x.doc_id == h.doc_id]
    for k, x in sorted(same_file, key=lambda t: t[0] != n):
        default = code_answer.default_window(question, x, w if x is h else None)
        if default is not None:
            return default, k, x
    return None, n, h


def code_extract(
    question: str,
    hits: list[Hit],
    lang: str,
    prose: list[Candidate],
    tests_layer: str = code_answer.TESTS_LAYER,
) -> Extract | None:
    """The code answer (module docstring of :mod:`ragline.query.answer.code_answer`): the best window
    of the first :data:`CODE_HITS` code hits, a place first, the lines as a code block, then up to two
    sentences that also answer (a docstring, the documentation). None without a code hit."""
    best = best_code_window(question, hits, tests_layer)
    if best is None:
        return None
    n, h, w = best
    best_prose = max((c.overlap for c in prose), default=0)
    if not asks_place(question) and not w.example and w.peak < best_prose:
        return None  # the documents say it in words better than the code shows it (not how to call it)
    symbol = texts.say("code_symbol", lang, symbol=w.symbol) if w.symbol else ""
    framing = texts.say("code_place", lang, place=code_answer.place(h, w), symbol=symbol) + f" [{n}]:"
    lines = code_answer.quoted_lines(h, w)
    language = str(h.metadata.get("language") or "")
    block = f"```{language}\n" + "\n".join(lines) + "\n```"
    # sentences scored as the lines are (identifiers in parts): a docstring's "max_retries: …"
    named, terms = code_answer.code_terms(question)
    said = [c for c in select(prose, 2) if code_answer.line_score(c.text, named, terms) >= 0.5 * w.peak]
    text, framings, quoted = f"{framing}\n{block}", [framing], [(n, "\n".join(lines))]
    default, dn, dh = default_lines(question, hits, n, h, w)
    if default is not None:
        symbol = texts.say("code_symbol", lang, symbol=default.symbol) if default.symbol else ""
        more = (
            texts.say("code_place", lang, place=code_answer.place(dh, default), symbol=symbol) + f" [{dn}]:"
        )
        extra = code_answer.quoted_lines(dh, default)
        text += f"\n{more}\n```{language}\n" + "\n".join(extra) + "\n```"
        framings.append(more)
        quoted.append((dn, "\n".join(extra)))
    if said:
        text += f"\n{render(said)}"
    quoted += [(c.n, c.text) for c in said]
    return Extract(text, "code", lang, framings, quoted)


Ranker = Callable[[str, list[str]], list[float]]


def passages_language(hits: list[Hit]) -> str:
    """The language the first hits are written in (their prose, code left out)."""
    prose = [s for _, _, s in sentences_of(hits[:3])]
    return texts.language_of(" ".join(prose) if prose else " ".join(h.content[:300] for h in hits[:3]))


# ------------------------------------------------------------------------------ the composer
#: how the three signals make a sentence's score, each standardised over the candidate sentences of
#: the question first (a z-score: no constant assumes one embedding model's cosine scale, nor one
#: corpus's term weights): the embedder's question-sentence similarity (the only signal across
#: languages), the question's terms the sentence holds weighted by their rarity among the
#: candidates, and the rank of the hit it comes from
SIMILARITY_WEIGHT = 1.0
LEXICAL_WEIGHT = 0.5
RANK_WEIGHT = 0.25
#: a sentence joins the best one when its score is within this many standard deviations of it, up
#: to :data:`MAX_SENTENCES`: on xquad-answers' fit half every sentence more is a fact more often found
#: (docs/evaluation.md, "Answer length"); four keep an answer a short paragraph
KEEP_WITHIN = 2.0
MAX_SENTENCES = 4
#: the candidate sentences embedded for one question, at most (the best ranked chunks' first)
MAX_POOL = 64
#: what the confidence model reads, in order (query/answer/confidence.json holds its coefficients);
#: none is in an embedding model's own cosine scale: a cosine's level says the corpus's genre and the
#: model as much as the answer's fit (docs/evaluation.md, "Confidence")
FEATURES = ("similarity", "lexical", "passage_lexical", "names", "cross", "code", "hit_z")


def _standardised(values: list[float]) -> list[float]:
    """``values`` as z-scores over themselves (all 0 when they do not vary)."""
    if len(values) < 2:
        return [0.0] * len(values)
    mean, sd = statistics.fmean(values), statistics.pstdev(values)
    return [(v - mean) / sd if sd > 1e-9 else 0.0 for v in values]


def term_weights(question: str, said: list[set[str]]) -> dict[str, float]:
    """The question's term stems (words and identifier parts, stop words out), each weighted by its
    inverse document frequency among the candidate sentences: a term every sentence holds tells
    none of them apart, one that only the answer holds does."""
    terms = question_terms(question) | text_.term_stems(question)
    df = Counter(t for s in said for t in terms & s)
    n = len(said)
    return {t: math.log(1.0 + n / (1.0 + df[t])) for t in terms}


def lexical_coverage(weights: dict[str, float], said: set[str]) -> float:
    """The weighted share of the question's terms that ``said`` holds, in [0, 1]."""
    total = sum(weights.values())
    return sum(w for t, w in weights.items() if t in said) / total if total else 0.0


def score_candidates(question: str, pool: list[tuple[int, int, str]], rank: Ranker | None) -> list[Candidate]:
    """Every candidate sentence scored by the one function of the module: the standardised
    similarity, lexical coverage and hit rank, weighted (:data:`SIMILARITY_WEIGHT` …)."""
    # a question the passage asks (a heading, a FAQ's entry) answers nothing
    pool = [p for p in pool if not p[2].rstrip().endswith("?")][:MAX_POOL]
    if not pool:
        return []
    sentences = [clean_sentence(s) for _, _, s in pool]
    said = [code_stems(s) for s in sentences]
    weights = term_weights(question, said)
    lexical = [lexical_coverage(weights, s) for s in said]
    sims = rank(question, sentences) if rank is not None else None
    z_sim = _standardised(sims) if sims is not None else [0.0] * len(pool)
    z_lex = _standardised(lexical)
    z_rank = _standardised([-math.log(n) for n, _, _ in pool])
    out = []
    for i, (n, pos, _) in enumerate(pool):
        score = SIMILARITY_WEIGHT * z_sim[i] + LEXICAL_WEIGHT * z_lex[i] + RANK_WEIGHT * z_rank[i]
        out.append(
            Candidate(
                n,
                pos,
                sentences[i],
                score,
                sims[i] if sims is not None else None,
                lexical[i],
                len(set(weights) & said[i]),
            )
        )
    return out


def select(cands: list[Candidate], max_sentences: int = MAX_SENTENCES) -> list[Candidate]:
    """The best sentence and those scoring within :data:`KEEP_WITHIN` of it, near-duplicates left
    out: the best one first (the answer opens with what answers), then the others in reading
    order, the best one's chunk first, each chunk's sentences in their own order."""
    if not cands:
        return []
    ranked = sorted(cands, key=lambda c: -c.score)
    best = [ranked[0]]
    for c in ranked[1:]:
        if len(best) == max_sentences or c.score < ranked[0].score - KEEP_WITHIN:
            break
        if not any(near_duplicate(c.text, b.text) for b in best):
            best.append(c)
    chunk_score: dict[int, float] = {}
    for c in best:
        chunk_score[c.n] = max(chunk_score.get(c.n, c.score), c.score)
    return [best[0], *sorted(best[1:], key=lambda c: (-chunk_score[c.n], c.n, c.pos))]


def select_list(cands: list[Candidate], max_items: int = MAX_ITEMS) -> list[Candidate]:
    """A list answer: the sentences (items, table rows) of the chunk holding the best one, in their
    order, each scoring within twice :data:`KEEP_WITHIN` of the best (a list is written under one
    heading); the best other sentences when that chunk holds fewer than two."""
    if not cands:
        return []
    top = max(cands, key=lambda c: c.score)
    same = sorted(
        (c for c in cands if c.n == top.n and c.score >= top.score - 2 * KEEP_WITHIN), key=lambda c: c.pos
    )[:max_items]
    if len(same) >= 2:
        return same
    return select(cands)


def hit_z(hits: list[Hit]) -> float | None:
    """How far the hits the answer reads stand out of the question's background in the searched
    scope (``Hit.vector_z``, the best of them; None when no hit has one): a question whose topic the
    scope holds has a passage well above its neighbourhood, one it lacks has only neighbours."""
    zs = [h.vector_z for h in hits if h.vector_z is not None]
    return max(zs) if zs else None


def features(
    question: str,
    hits: list[Hit],
    cands: list[Candidate],
    chosen: list[Candidate],
    lang: str,
    cited: set[int],
) -> dict[str, float | None]:
    """What the confidence model reads (:data:`FEATURES`), none in the embedding model's own scale:
    how far the best quoted sentence's
    similarity stands above the other candidates' (a z-score), its and its passages' lexical
    coverage, the share of the names and numbers the question spells that the cited passages hold,
    whether the quotes are in another language than the question, whether the answer is code
    (``chosen`` empty: the code lines of the ``cited`` hits were quoted, the best sentence of those
    hits stands for them), and how far the hits stand out of the question's background (:func:`hit_z`)."""
    code = not chosen
    chosen = chosen or [c for c in cands if c.n in cited]
    best = max(chosen, key=lambda c: c.score) if chosen else None
    sims = [c.similarity for c in cands if c.similarity is not None]
    sd = statistics.pstdev(sims) if len(sims) > 1 else 0.0
    # unknown (None), not 0, when there are no other candidates to stand above: a lone sentence is
    # not an average one, and the model then reads the other features alone
    above = None
    if best is not None and best.similarity is not None and sd > 1e-9:
        above = (best.similarity - statistics.fmean(sims)) / sd
    passages = " ".join(hits[n - 1].content for n in cited if 1 <= n <= len(hits))
    # a name is held by a passage's text, context, heading or source ("Acme" by acme/…: a collection
    # names itself in its ids more than in each chunk)
    around = " ".join(
        f"{h.context} {h.heading} {h.path} {h.doc_id}" for n, h in enumerate(hits, 1) if n in cited
    )
    said = [code_stems(c.text) for c in cands]
    weights = term_weights(question, said)
    named = specific_terms(question)
    return {
        "similarity": above,
        "hit_z": hit_z(hits),
        "lexical": best.lexical if best is not None else 0.0,
        "passage_lexical": lexical_coverage(weights, code_stems(passages)),
        "names": sum(code_answer.holds(f"{passages} {around}", t) for t in named) / len(named)
        if named
        else 1.0,
        "cross": float(passages_language(hits) != lang),
        "code": float(code),
    }


def extract(
    question: str,
    hits: list[Hit],
    rank: Ranker | None = None,
    max_sentences: int = MAX_SENTENCES,
    tests_layer: str = code_answer.TESTS_LAYER,
) -> Extract:
    """The offline answer to ``question`` from ``hits`` (``[N]`` = ``hits[N-1]``): the candidate
    sentences scored by :func:`score_candidates`; a place and the code lines for code; the rows
    under the best heading for a list question; else the best sentences. Quotes in another
    language than the question's stand under framing in the question's language."""
    lang = texts.language_of(question)
    if not hits:
        return Extract(texts.no_answer(lang), "none", lang)
    cands = score_candidates(question, sentences_of(hits), rank)
    code = code_extract(question, hits, lang, cands, tests_layer)
    if code is not None:
        code.features = features(question, hits, cands, [], lang, {n for n, _ in code.quoted})
        return code
    listed = asks_list(question)
    chosen = select_list(cands) if listed else select(cands, max_sentences)
    if not chosen:
        return Extract(texts.no_answer(lang), "none", lang)
    feats = features(question, hits, cands, chosen, lang, {c.n for c in chosen})
    segments = render_list_segments(chosen) if listed else render_segments(chosen)
    framing = []
    if feats["cross"]:
        source = texts.language_of(" ".join(c.text for c in chosen))
        framing = [texts.say("quoted_in", lang, language=texts.language_name(source, lang))]
        segments = [framing[0] + "\n", *segments]
    kind = "crosslingual" if framing else "list" if listed else "sentences"
    quoted = [(c.n, c.text) for c in chosen]
    return Extract("".join(segments), kind, lang, framing, quoted, feats, segments)


def extractive_answer(question: str, hits: list[Hit], max_sentences: int = MAX_SENTENCES) -> str:
    """Quote the sentences of the retrieved chunks that best answer ``question``, each cited."""
    return extract(question, hits, max_sentences=max_sentences).text
