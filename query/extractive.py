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
from dataclasses import dataclass

from ragline.query.prompt import NO_ANSWER
from ragline.shared.contracts import Hit
from ragline.shared.text import split_sentences

_WORD = re.compile(r"\w+", re.UNICODE)
_LETTER_WORD = re.compile(r"[^\W\d_]{2,}", re.UNICODE)

#: words of three letters or more that carry no topic in a question (Russian and English)
STOP_WORDS = frozenset(
    """
    что такое такой такая такие кто как какой какая какие каким чем чём зачем почему где когда
    это эти этот эта для или можно нужно надо есть был была были быть мне нам вам его её
    what are was the how why when which who does can with and
    """.split()
)

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
    r"\{\{|\}\}|=>|</|/>|\]\(|!\[|`|[{}]|<[a-zA-Z][\w.-]*\s+[^<>]*>|"
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

#: "что такое X?", "what is X?" and close variants; X is the subject to define
_DEFINITION_QUESTION = re.compile(
    r"^\s*(?:(?:что|кто)\s+(?:такое|такой|такая|такие|означает|значит)|(?:дай(?:те)?\s+)?определение|"
    r"what\s+(?:is|are)(?:\s+(?:an?|the))?|define)\s+(?P<subject>.+?)\s*\??\s*$",
    re.IGNORECASE,
)
#: "X — это …", "X is a …": the marker after the subject of a definition; the weaker markers
#: ("X является экспериментальной функцией") describe as often as they define
_DEFINES = re.compile(
    r"\s(?:[—–-]\s*это|это|представляет\s+собой|представляют\s+собой|is\s+an?|is\s+the|refers\s+to)\s",
    re.IGNORECASE,
)
#: "X не является …", "X is not …": a negation right before the marker
_NEGATED = re.compile(r"\s(?:не|not)\s*$", re.IGNORECASE)
_DESCRIBES = re.compile(
    r"\s(?:является|являются|называется|называются|означает|are|means)\s",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Candidate:
    n: int  # the hit's number in the prompt, 1-based
    pos: int  # the sentence's place in its chunk
    text: str
    score: float
    defines: bool = False


def stems(text: str) -> set[str]:
    """Crude Russian-friendly stems: the first five letters of each word of three or more."""
    return {w[:5] for w in _WORD.findall(text.lower()) if len(w) >= 3}


def question_terms(question: str) -> set[str]:
    """The question's topic stems (stop words dropped; all words when nothing else is left)."""
    words = [w for w in _WORD.findall(question.lower()) if len(w) >= 3]
    topic = {w[:5] for w in words if w not in STOP_WORDS}
    return topic or {w[:5] for w in words}


def definition_subject(question: str) -> str | None:
    """X in "что такое X?" / "what is X?", else None."""
    m = _DEFINITION_QUESTION.match(question.strip())
    return m.group("subject").strip(" «»\"'") if m else None


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


def is_code_or_markup(text: str) -> bool:
    """Code, a template or markup anywhere in ``text`` (a line or a sentence), not prose."""
    return is_code_line(text) or bool(_MARKUP.search(text))


def _table_cells(line: str) -> list[str] | None:
    """The cells of a table row ("a | b | c"), or None when the line is not one."""
    if line.count("|") < 2 and not (line.startswith("|") or line.endswith("|")):
        return None
    return [c.strip() for c in line.strip("|").split("|") if c.strip()]


def clean_sentence(sentence: str) -> str:
    """A list item read as a sentence: bullet dropped, capitalised, ended with a full stop."""
    s = _BULLET.sub("", sentence.strip())
    if s.endswith((";", ",")):
        s = s[:-1].rstrip() + "."
    return s[:1].upper() + s[1:]


def is_answer_sentence(sentence: str) -> bool:
    """A whole sentence that reads on its own: at least four words, ends like a sentence (not
    with a colon that announces a code block), no code or markup in it."""
    s = _BULLET.sub("", sentence.strip())
    return (
        len(_LETTER_WORD.findall(s)) >= 4
        and s.endswith(_END)
        and not is_code_or_markup(s)
        and s[0] not in ",;:)]}"
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
        pieces = cells if cells is not None else [line]
        for piece in pieces:
            if is_code_line(piece):
                continue
            # markup inside a paragraph (an inline image) costs only the sentence that holds it
            out.extend(s.strip() for s in split_sentences(piece) if is_answer_sentence(s))
    return out


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
    wanted = question_terms(subject)
    for pattern, weight in ((_DEFINES, 2.0), (_DESCRIBES, 1.5)):
        m = pattern.search(f" {sentence} ")
        if not m or m.start() > 120 or _NEGATED.search(f" {sentence} "[: m.start() + 1]):
            continue
        head = stems(sentence[: m.start()])
        if wanted and len(wanted & head) >= max(1, (len(wanted) + 1) // 2):
            return weight
    return 0.0


def candidates(question: str, hits: list[Hit]) -> list[Candidate]:
    """Every quotable sentence sharing a term with the question, de-duplicated (the better
    ranked chunk keeps it), scored."""
    terms = question_terms(question)
    subject = definition_subject(question)
    seen: set[str] = set()
    out: list[Candidate] = []
    for n, h in enumerate(hits, start=1):
        for pos, sent in enumerate(prose_sentences(h.content)):
            key = sentence_key(sent)
            if key in seen:
                continue
            seen.add(key)
            overlap = len(terms & stems(sent))
            if not overlap:
                continue
            weight = definition_weight(sent, subject) if subject is not None else 0.0
            # better-ranked chunks and earlier sentences win ties; very long sentences read badly
            score = overlap + weight - 0.05 * (n - 1) - 0.001 * pos
            score -= 0.5 if len(sent) > 350 else 0.0
            out.append(Candidate(n, pos, clean_sentence(sent), score, weight > 0))
    return out


def near_duplicate(a: str, b: str, threshold: float = 0.6) -> bool:
    """The same statement in other words (two versions or translations of one page): most of
    their word stems are shared."""
    sa, sb = stems(a), stems(b)
    return bool(sa and sb) and len(sa & sb) / len(sa | sb) >= threshold


def select(cands: list[Candidate], max_sentences: int = 3, min_share: float = 0.5) -> list[Candidate]:
    """The best sentences (each scoring at least ``min_share`` of the best one: no tangents), in
    reading order: a defining sentence first, then chunk by chunk, the chunk holding the best
    sentence first, each chunk's sentences in their own order."""
    if not cands:
        return []
    top = max(c.score for c in cands)
    best: list[Candidate] = []
    for c in sorted((c for c in cands if c.score >= min_share * top), key=lambda c: -c.score):
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


def render(chosen: list[Candidate]) -> str:
    """Sentences with their citation; consecutive sentences of one chunk share one [N]."""
    parts: list[str] = []
    for i, c in enumerate(chosen):
        parts.append(c.text)
        if i + 1 == len(chosen) or chosen[i + 1].n != c.n:
            parts[-1] += f" [{c.n}]"
    return " ".join(parts)


def extractive_answer(question: str, hits: list[Hit], max_sentences: int = 3) -> str:
    """Quote the sentences of the retrieved chunks that best answer ``question``, each cited."""
    chosen = select(candidates(question, hits), max_sentences)
    return render(chosen) if chosen else NO_ANSWER
