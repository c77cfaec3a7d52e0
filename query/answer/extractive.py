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

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ragline.query.answer import code_answer, texts
from ragline.query.question import compared, definition_subject, question_parts
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
        (?:async\s+)?function\s*[\w$]*\s*\(|
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
_DOCSTRING_CLOSE = re.compile(r"\s*(?:\"{3}|'{3})[,;)]*$")
_END = (".", "!", "?", "…", ";", '."', ".»", "!»", "?»")

#: "X — это …", "X is a …": the marker after the subject of a definition; the weaker markers
#: ("X является экспериментальной функцией") describe as often as they define
_DEFINES = re.compile(
    r"\s(?:[—–-]\s*это|это|представляет\s+собой|представляют\s+собой|is\s+an?|is\s+the|refers\s+to)\s",
    re.IGNORECASE,
)
#: "X не является …", "X is not …": a negation right before the marker
_NEGATED = re.compile(r"\s(?:не|not)\s*$", re.IGNORECASE)
#: a glossary entry: "Term (ABBR) –перевод– definition", "Term — definition"
_GLOSSARY = re.compile(r"\s[—–]\s?|\s?[—–]\s")
_DESCRIBES = re.compile(
    r"\s(?:является|являются|называется|называются|означает|are|means)\s",
    re.IGNORECASE,
)


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
    (``ASVS``); in a question in Cyrillic also every word in Latin letters (``Nuxt``, ``Vuetify``:
    a product is named in its own spelling). Lower-cased, in order, each once."""
    found = [m.group(0) for m in _SPECIFIC.finditer(question)]
    if re.search(r"[\u0400-\u04FF]", question):
        # a name (Nuxt, Vuetify, v-model), not a gloss in parentheses ("перебор (brute force)")
        found += [w for w in _LATIN_WORD.findall(question) if w[0].isupper() or re.search(r"[-_.]", w)]
    # an acronym's plural is the acronym ("URLs" is written "URL" as often)
    found = [t[:-1] if re.fullmatch(r"[A-Z]{2,}s", t) else t for t in found]
    return list(dict.fromkeys(t.lower().strip(".") for t in found if t.strip(".")))


def mentions(text: str, term: str) -> bool:
    """``term`` occurs in ``text`` as a whole token (``5.0`` is not in ``2.5.0``), case-insensitive."""
    return re.search(rf"(?<![\w.]){re.escape(term)}(?![\w]|\.\d)", text, re.IGNORECASE) is not None


@dataclass(frozen=True)
class Candidate:
    n: int  # the hit's number in the prompt, 1-based
    pos: int  # the sentence's place in its chunk
    text: str
    score: float
    defines: bool = False
    #: for a question of two parts (:func:`~ragline.query.question.question_parts`), how many of
    #: each part's own terms the sentence holds
    parts: tuple[int, ...] = ()
    #: how many of them answer that part (0: the part has no terms of its own)
    needs: tuple[int, ...] = ()
    #: the document and heading of the sentence's chunk
    section: str = ""


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


#: in a subject, what names it exactly: a tag, an identifier, a word in Latin letters among Cyrillic
_NAME = re.compile(r"<[\w.-]+>|\b\w+(?:[._-]\w+)+\b|\b[A-Za-z]\w+\b")


def subject_terms(subject: str) -> set[str]:
    """The stems that name a subject: its names when it has any ("встроенный компонент <Teleport>"
    is named by Teleport; a Latin word counts only among Cyrillic ones), else its topic stems."""
    names = [n for n in _NAME.findall(subject) if not n.isascii() or not subject.isascii() or "<" in n]
    return question_terms(" ".join(names)) if names else question_terms(subject)


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


def prose_sentences(content: str) -> list[str]:
    """The quotable sentences of a chunk, in order (as written; :func:`clean_sentence` tidies them).

    Lines are the chunker's block boundaries: each is code, a table row or a paragraph. Labels
    and headings (lines that do not end like a sentence) and code never reach the sentence
    splitter, so neither can be glued onto a neighbouring sentence.
    """
    out: list[str] = []
    for raw in content.splitlines():
        line = strip_docstring_quotes(raw.strip())
        if not line:
            continue
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
    return _DOCSTRING_CLOSE.sub("", _DOCSTRING_OPEN.sub("", line))


def sentence_key(sentence: str) -> str:
    """Normalised text: the same sentence from two overlapping chunks (or two formats of one
    document) compares equal."""
    return " ".join(_WORD.findall(clean_sentence(sentence).lower()))


def definition_weight(sentence: str, subject: str) -> float:
    """How surely ``sentence`` defines ``subject`` (0 when it does not): the subject's words come
    before a defining marker ("— это", "is a"; weaker: "является") near the sentence's start."""
    wanted = subject_terms(subject)
    for pattern, weight in ((_DEFINES, 2.0), (_GLOSSARY, 1.8), (_DESCRIBES, 1.5)):
        m = pattern.search(f" {sentence} ")
        if not m or m.start() > 120 or _NEGATED.search(f" {sentence} "[: m.start() + 1]):
            continue
        head = stems(sentence[: m.start()])
        # a bare "это" defines only right after its subject ("Однако, когда мы изменяем X, <Y> это
        # корректно обрабатывает" does not define Y)
        if m.group(0).strip().lower() == "это" and len(_WORD.findall(sentence[: m.start()])) > 5:
            continue
        if wanted and len(wanted & head) >= max(1, (len(wanted) + 1) // 2):
            return weight
    return 0.0


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
        content = docstring_paragraphs(h.content) if code_answer.is_code(h) else h.content
        for pos, sent in enumerate(prose_sentences(content)):
            key = sentence_key(sent)
            if key not in seen and not any(k.startswith(key + " ") for k in seen):
                seen.add(key)
                out.append((n, pos, sent))
    return out


def corpus_terms(hits: list[Hit]) -> set[str]:
    """The stems of the sources the hits come from (``asvs`` of ``asvs/0x11-V2-….md``, ``vue`` of
    ``vue3/guide/…``): a question naming its corpus ("… according to ASVS") names no topic, and
    the sentences repeating the corpus's name (a preface) do not answer it."""
    out: set[str] = set()
    for h in hits:
        m = re.match(r"[^\W\d_]+", h.doc_id.split("/", 1)[0].lower())
        if m and len(m.group(0)) >= 3:
            out.add(m.group(0)[:5])
    return out


def topic_specific_terms(question: str, hits: list[Hit]) -> list[str]:
    """:func:`specific_terms` without the corpus's own name ("Vue", "ASVS": every passage of it
    is about it, few repeat it)."""
    corpus = corpus_terms(hits)
    return [t for t in specific_terms(question) if t[:5] not in corpus]


def topic_terms(question: str, hits: list[Hit]) -> set[str]:
    """The question's topic stems without the names of the corpus it asks (all of them when that
    leaves nothing)."""
    terms = question_terms(question)
    return (terms - corpus_terms(hits)) or terms


def candidates(question: str, hits: list[Hit]) -> list[Candidate]:
    """Every quotable sentence sharing a term with the question, de-duplicated (the better
    ranked chunk keeps it), scored."""
    subject = definition_subject(question)
    terms = topic_terms(question, hits)
    if subject is not None:  # "что такое ASVS": the corpus's name is the subject here
        terms |= subject_terms(subject)
    own = part_terms(question, hits)
    # a sentence answers a part when it holds more than half of the part's own terms (one of one,
    # two of two or three): one shared word ("tuples" for "how is a tuple interpreted") is a tangent
    needs = tuple(len(t) // 2 + 1 if t else 0 for t in own)
    out: list[Candidate] = []
    for n, pos, sent in sentences_of(hits):
        said = code_stems(sent)
        overlap = len(terms & said)
        if not overlap:
            continue
        weight = definition_weight(sent, subject) if subject is not None else 0.0
        # better-ranked chunks and earlier sentences win ties; very long sentences read badly
        score = overlap + weight - 0.05 * (n - 1) - 0.001 * pos
        score -= 0.5 if len(sent) > 350 else 0.0
        parts = tuple(len(t & said) for t in own)
        section = f"{hits[n - 1].doc_id}\n{hits[n - 1].heading}"
        out.append(Candidate(n, pos, clean_sentence(sent), score, weight > 0, parts, needs, section))
    return out


def part_terms(question: str, hits: list[Hit]) -> list[set[str]]:
    """For a question asking two things, each part's own topic stems (those the other part does not
    share: "How do I make requests verify … CA bundle, and which environment variables can set it?"
    asks for ``envir``, ``varia`` in its second part); empty for a question of one part."""
    parts = question_parts(question)
    if len(parts) < 2:
        return []
    terms = [topic_terms(p, hits) for p in parts]
    return [t - set().union(*(o for j, o in enumerate(terms) if j != i)) for i, t in enumerate(terms)]


def near_duplicate(a: str, b: str, threshold: float = 0.6) -> bool:
    """The same statement in other words (two versions or translations of one page): most of
    their word stems are shared."""
    sa, sb = stems(a), stems(b)
    return bool(sa and sb) and len(sa & sb) / len(sa | sb) >= threshold


def answering_parts(cands: list[Candidate], max_sentences: int) -> list[Candidate]:
    """For a question asking two things, the best sentence for each part (most of the part's own
    terms, then the better score), each once: quoting the three best sentences of the whole
    question answers its first part three times when the passage says the first at length
    ("verify … CA bundle …") and the second in one sentence ("… the ``REQUESTS_CA_BUNDLE``
    environment variable")."""
    out: list[Candidate] = []
    for i, need in enumerate(cands[0].needs if cands else ()):
        if not need:
            continue
        named = [c for c in cands if c.parts[i] >= need and c not in out]
        if named and len(out) < max_sentences:
            out.append(max(named, key=lambda c: (c.parts[i], c.score)))
    return out


def select(cands: list[Candidate], max_sentences: int = 3, min_share: float = 0.5) -> list[Candidate]:
    """The best sentences (each scoring at least ``min_share`` of the best one: no tangents), in
    reading order: a defining sentence first, then chunk by chunk, the chunk holding the best
    sentence first, each chunk's sentences in their own order."""
    if not cands:
        return []
    top = max(c.score for c in cands)
    best = answering_parts(cands, max_sentences)
    for c in sorted((c for c in cands if c.score >= min_share * top), key=lambda c: -c.score):
        if c in best:
            continue
        if len(best) == max_sentences:
            break
        if not any(near_duplicate(c.text, b.text) for b in best):
            best.append(c)
    definition = next((c for c in best if c.defines), None)
    rest = [c for c in best if c is not definition]
    chunk_score: dict[int, float] = {}
    for c in rest:
        chunk_score[c.n] = max(chunk_score.get(c.n, c.score), c.score)
    if definition is not None:
        chunk_score[definition.n] = float("inf")  # the definition's chunk goes on first
    rest.sort(key=lambda c: (-chunk_score[c.n], c.n, c.pos))
    return ([definition] if definition else []) + rest


#: a sentence drawing its conclusion from the points before it ("В связи с этими ограничениями мы
#: рекомендуем …", "По указанным выше причинам …", "For these reasons, …"): quoted alone, it says
#: neither what the limitations nor what the reasons are
_REFERS_BACK = re.compile(
    r"^(?:в\s+связи\s+с\s+(?:этими|этим|вышеуказанными|указанными|перечисленными)|"
    r"по\s+(?:этим|указанным(?:\s+выше)?|перечисленным(?:\s+выше)?|вышеуказанным)\s+причинам|"
    r"из-за\s+(?:этих|указанных|перечисленных)|"
    r"(?:for|because\s+of|due\s+to|given)\s+(?:these|those|the\s+above|all\s+these)(?:\s+\w+)?)(?!\w)",
    re.IGNORECASE,
)
#: a list item's mark as the chunk may still hold it ("3. ", "- ")
_ITEM_MARK = re.compile(r"^(?:\d{1,2}[.)]|[-*+•])\s+")


def point_sentence(line: str) -> str | None:
    """The first sentence of a labelled point ("3. **Не дружелюбен к деструктуризации:** когда мы
    …, мы теряем связь с реактивностью:" → "Не дружелюбен к деструктуризации: когда мы …, мы
    теряем связь с реактивностью."), its list mark and emphasis dropped and the colon announcing
    its example read as a full stop; None for a line that is no labelled point."""
    text = _ITEM_MARK.sub("", line.strip()).replace("**", "").replace("__", "")
    if not labelled(text):
        return None
    first = split_sentences(text)[0].strip() if split_sentences(text) else ""
    first = first[:-1].rstrip() + "." if first.endswith(":") else first
    return first if is_answer_sentence(first) else None


def referred_points(content: str, sentence: str, max_points: int = 3) -> list[str]:
    """The labelled points (:func:`point_sentence`) that come before ``sentence`` in ``content``,
    up to the section's heading, the nearest ``max_points`` in reading order; empty unless the
    sentence refers back to them (:data:`_REFERS_BACK`)."""
    if not _REFERS_BACK.match(sentence):
        return []
    lines = content.splitlines()
    key = sentence_key(sentence)[:40]
    at = next((i for i, line in enumerate(lines) if key and key in sentence_key(line)), None)
    if at is None:
        return []
    points: list[str] = []
    for line in reversed(lines[:at]):
        if line.lstrip().startswith("#"):
            break
        point = point_sentence(line)
        if point is not None:
            points.append(point)
            if len(points) == max_points:
                break
    return points[::-1]


def with_referred_points(chosen: list[Candidate], hits: list[Hit]) -> list[Candidate]:
    """``chosen`` with the points each sentence drawing a conclusion refers back to quoted before it
    (:func:`referred_points`, from its own chunk), each point once."""
    out: list[Candidate] = []
    for c in chosen:
        if 1 <= c.n <= len(hits):
            for point in referred_points(hits[c.n - 1].content, c.text):
                if not any(sentence_key(point) == sentence_key(o.text) for o in out + chosen):
                    out.append(replace(c, text=point, defines=False))
        out.append(c)
    return out


def render(chosen: list[Candidate]) -> str:
    """Sentences with their citation; consecutive sentences of one chunk share one [N]."""
    parts: list[str] = []
    for i, c in enumerate(chosen):
        parts.append(c.text)
        if i + 1 == len(chosen) or chosen[i + 1].n != c.n:
            parts[-1] += f" [{c.n}]"
    return " ".join(parts)


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


def question_kind(question: str) -> str:
    """``compare``, ``definition``, ``place``, ``list`` or ``other``: what shape the answer takes."""
    if compared(question) is not None:
        return "compare"
    if definition_subject(question) is not None:
        return "definition"
    if _PLACE_QUESTION.match(question):
        return "place"
    if _LIST_QUESTION.match(question):
        return "list"
    return "other"


@dataclass
class Extract:
    """An extractive answer and what it is made of: the confidence is judged from what was quoted,
    and the groundedness check skips the framing (ragline's own words, never a claim)."""

    text: str
    kind: str  # none, sentences, definition, list, code, crosslingual
    lang: str  # the question's language: the framing's and the refusal's
    framing: list[str] = field(default_factory=list)
    quoted: list[tuple[int, str]] = field(default_factory=list)  # (hit number, quoted text)

    @property
    def no_answer(self) -> bool:
        return self.kind == "none"


def select_list(
    cands: list[Candidate], max_items: int = MAX_ITEMS, min_share: float = 0.34
) -> list[Candidate]:
    """A list answer: the items of the chunk holding the best sentence (a list is written in one
    place), in their order, each scoring at least ``min_share`` of the best; other chunks fill in
    when that chunk has fewer than two."""
    if not cands:
        return []
    top = max(cands, key=lambda c: c.score)
    same = [c for c in cands if c.n == top.n and c.score >= min_share * top.score]
    same.sort(key=lambda c: c.pos)
    # the rows of a table are items of their own however alike they read ("… attribute Secure",
    # "… attribute HttpOnly"); a row's second sentence is not an item
    numbered = [c for c in same if _ROW_ID.match(c.text.split(" ", 1)[0])]
    if len(numbered) >= 2:
        same = numbered
    chosen: list[Candidate] = []
    for c in same:
        if len(chosen) < max_items and (numbered or not any(near_duplicate(c.text, b.text) for b in chosen)):
            chosen.append(c)
    if len(chosen) < 2:
        rest = [c for c in select(cands, 3) if c.n != top.n]
        chosen += rest[: 3 - len(chosen)]
    return chosen


def names(side: str, text: str) -> bool:
    """``text`` speaks of ``side`` (one side of a comparison): it holds one of the side's names as
    written (``v-if``, ``computed``) or one of its words' stems (``вычисляемым`` → ``вычис``)."""
    lower = text.lower()
    for token in re.findall(r"[\w<>.-]+", side.lower()):
        if re.search(r"[-._<>]", token) or token.isascii():
            if len(token) >= 2 and re.search(rf"(?<![\w-]){re.escape(token)}(?![\w-])", lower):
                return True
        elif len(token) >= 3 and text_.stem(token) in stems(text):
            return True
    return False


#: a sentence that states how two things differ ("Однако разница заключается в том, что …", "Unlike
#: A, B …", "… в то время как …"), not one that only names both
_CONTRAST = re.compile(
    r"(?<!\w)(?:разниц\w*|отлича\w*|отличи\w*|в\s+отличие|в\s+то\s+время\s+как|тогда\s+как|"
    r"для\s+сравнения|по\s+сравнению|differen\w*|differs?|unlike|whereas|in\s+contrast|by\s+contrast|"
    r"compared\s+(?:to|with))(?!\w)",
    re.IGNORECASE,
)
#: a labelled point of an enumeration: "Неясный источник свойств: при использовании …", "Implicit
#: coupling: several …" (a list item whose bold term the parser kept as text before a colon)
_LABELLED = re.compile(r"^(?P<label>[^\W\d_][^:.!?;()`]{2,60}?):\s+\S")


def labelled(text: str) -> bool:
    """``text`` opens with a label of two to six words and a colon (:data:`_LABELLED`)."""
    m = _LABELLED.match(text)
    return m is not None and 2 <= len(_WORD.findall(m.group("label"))) <= 6


def labelled_points(cands: list[Candidate], sides: tuple[str, str], max_points: int = 3) -> list[Candidate]:
    """The labelled points (:func:`labelled`) of the section holding the best sentence naming a
    side, when it has two or more, in reading order: "чем A лучше B" is answered by a section
    listing B's drawbacks point by point ("Неясный источник свойств: …", "Коллизии в пространстве
    имён: …"), and its best sentence alone states one of them."""
    named = [c for c in cands if names(sides[0], c.text) or names(sides[1], c.text)]
    if not named:
        return []
    section = max(named, key=lambda c: c.score).section
    points = [c for c in cands if c.section == section and labelled(c.text)]
    if len(points) < 2:
        return []
    return sorted(points, key=lambda c: (c.n, c.pos))[:max_points]


def select_compared(
    cands: list[Candidate], sides: tuple[str, str], max_sentences: int = 3
) -> list[Candidate]:
    """A comparison's answer: the labelled points of a section enumerating the differences
    (:func:`labelled_points`), or else the best sentence stating a contrast (:data:`_CONTRAST`)
    and naming a side or naming both sides, then the best naming each side, in reading order as
    :func:`select` orders them."""
    points = labelled_points(cands, sides, max_sentences)
    if points:
        return points
    a, b = sides
    both = [c for c in cands if names(a, c.text) and names(b, c.text)]
    contrast = [c for c in cands if _CONTRAST.search(c.text) and (names(a, c.text) or names(b, c.text))]
    first = sorted(
        {id(c): c for c in both + contrast}.values(),
        key=lambda c: (-bool(_CONTRAST.search(c.text)), -(c in both), -c.score),
    )
    only_a = sorted((c for c in cands if names(a, c.text)), key=lambda c: -c.score)
    only_b = sorted((c for c in cands if names(b, c.text)), key=lambda c: -c.score)
    picked: list[Candidate] = []
    for group in (first, only_a, only_b, first[1:]):
        for c in group:
            if c in picked or any(near_duplicate(c.text, p.text) for p in picked):
                continue
            picked.append(c)
            break
        if len(picked) == max_sentences:
            break
    return select(picked, max_sentences, min_share=0.0) if picked else []


def render_list(chosen: list[Candidate]) -> str:
    """One item a line; an item's citation after the last consecutive item of its chunk."""
    lines: list[str] = []
    for i, c in enumerate(chosen):
        last_of_chunk = i + 1 == len(chosen) or chosen[i + 1].n != c.n
        lines.append(f"- {c.text}" + (f" [{c.n}]" if last_of_chunk else ""))
    return "\n".join(lines)


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
    if question_kind(question) == "place":
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
    best_prose = max((c.score for c in prose), default=0.0)
    if question_kind(question) != "place" and not w.example and w.peak < best_prose:
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


def crosslingual_extract(
    question: str, hits: list[Hit], lang: str, rank: Ranker | None, max_sentences: int = 3
) -> Extract | None:
    """A question in another language than the passages shares no words with them: the sentences
    of the first three hits ranked by ``rank`` (the embedder's similarity of each to the question),
    the best ones quoted in their own language under framing in the question's. A question of two
    parts gets the best sentence for each part first (ranked against the whole question, the
    sentences on its first part crowd out the one answering the second); a list question gets
    the items of the chunk holding the best one, as :func:`select_list` picks them. Without a
    ranker the first hit's opening sentences stand for it (the vector list ranked that chunk
    first)."""
    pool = [(n, pos, s) for n, pos, s in sentences_of(hits[:3])]
    if not pool:
        return None
    texts_ = [s for _, _, s in pool]
    if rank is not None:
        sims = rank(question, texts_)
        parts = question_parts(question)
        keep: list[int] = []
        if len(parts) > 1:
            for part in parts:
                part_sims = rank(part, texts_)
                best = max((i for i in range(len(pool)) if i not in keep), key=lambda i: part_sims[i])
                keep.append(best)
        order = sorted(range(len(pool)), key=lambda i: -sims[i])
        top = sims[order[0]]
        keep += [i for i in order if sims[i] >= top - 0.02 and i not in keep]
        keep = keep[:max_sentences]
        scored = [Candidate(n, pos, clean_sentence(s), sims[i]) for i, (n, pos, s) in enumerate(pool)]
    else:
        keep = [i for i, (n, _, _) in enumerate(pool) if n == pool[0][0]][:max_sentences]
        scored = [Candidate(n, pos, clean_sentence(s), -0.001 * i) for i, (n, pos, s) in enumerate(pool)]
    source = texts.language_of(" ".join(h.content[:300] for h in hits[:3]))
    framing = texts.say("quoted_in", lang, language=texts.language_name(source, lang))
    if question_kind(question) == "list":
        # a similarity is no share of the best one's: every row of the best one's table is an item
        ranked = sorted(scored, key=lambda c: -c.score)
        by_place = [replace(c, score=float(len(ranked) - i)) for i, c in enumerate(ranked)]
        items = select_list(by_place, min_share=0.0)
        if len(items) >= 2:
            return Extract(
                f"{framing}\n{render_list(items)}",
                "crosslingual",
                lang,
                [framing],
                [(c.n, c.text) for c in items],
            )
    chosen = [scored[i] for i in keep]
    chosen.sort(key=lambda c: (c.n, c.pos))
    chosen = with_referred_points(chosen, hits)
    return Extract(
        f"{framing}\n{render(chosen)}", "crosslingual", lang, [framing], [(c.n, c.text) for c in chosen]
    )


def passages_language(hits: list[Hit]) -> str:
    """The language the first hits are written in (their prose, code left out)."""
    prose = [s for _, _, s in sentences_of(hits[:3])]
    return texts.language_of(" ".join(prose) if prose else " ".join(h.content[:300] for h in hits[:3]))


def extract(
    question: str,
    hits: list[Hit],
    rank: Ranker | None = None,
    max_sentences: int = 3,
    tests_layer: str = code_answer.TESTS_LAYER,
) -> Extract:
    """The offline answer to ``question`` from ``hits`` (``[N]`` = ``hits[N-1]``), shaped by the
    question: a place and code lines for code, a list for a list question, the defining sentence
    first for a definition, quotes under framing in the question's language when the passages are
    in another, else the best sentences. ``tests_layer``: the layer of test files' chunks."""
    lang = texts.language_of(question)
    if not hits:
        return Extract(texts.no_answer(lang), "none", lang)
    cands = candidates(question, hits)
    code = code_extract(question, hits, lang, cands, tests_layer)
    if code is not None:
        return code
    if passages_language(hits) != lang:
        cross = crosslingual_extract(question, hits, lang, rank, max_sentences)
        if cross is not None:
            return cross
    kind = question_kind(question)
    sides = compared(question)
    if sides is not None:
        chosen = select_compared(cands, sides)
        if chosen:
            return Extract(render(chosen), "compare", lang, [], [(c.n, c.text) for c in chosen])
    if kind == "list":
        chosen = select_list(cands)
        if chosen:
            return Extract(render_list(chosen), "list", lang, [], [(c.n, c.text) for c in chosen])
    chosen = with_referred_points(select(cands, max_sentences), hits)
    if not chosen:
        return Extract(texts.no_answer(lang), "none", lang)
    shape = "definition" if any(c.defines for c in chosen) else "sentences"
    return Extract(render(chosen), shape, lang, [], [(c.n, c.text) for c in chosen])


def extractive_answer(question: str, hits: list[Hit], max_sentences: int = 3) -> str:
    """Quote the sentences of the retrieved chunks that best answer ``question``, each cited."""
    return extract(question, hits, max_sentences=max_sentences).text
