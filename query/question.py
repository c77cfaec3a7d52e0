"""What a question asks, read from its words alone: the words that carry no topic, the subject of a
definition question ("что такое X?", "what is X?"), the two sides of a comparison.

Both sides of the pool read questions so: retrieval leaves a collection's name out of the searches
(:mod:`ragline.query.retrieval.terms`), the answer picks the sentences that define or compare
(:mod:`ragline.query.answer.extractive`) and one for each part of a question of two, the router
decomposes a comparison and a question of two parts. Pure functions.
"""

from __future__ import annotations

import re

#: words of three letters or more that carry no topic in a question (Russian and English)
STOP_WORDS = frozenset(
    """
    что такое такой такая такие кто как какой какая какие каким чем чём зачем почему где когда
    это эти этот эта для или можно нужно надо есть был была были быть мне нам вам его её
    what are was the how why when where which who whom whose does can with and
    without into from that this there their them they have has had been should would could about
    over under between after before each every other some such than then also only both more most
    при без над под все всё так уже ещё тот той том тех чтобы если также
    """.split()
)

# Every pattern here is linear in the question's length (tests/unit/test_regex_linear.py): a run
# of whitespace is matched possessively and only from its first character (``(?<!\s)\s++``), and
# no pattern holds two quantifiers that can take the same characters; where a question has two
# parts of free text (a comparison's sides), the keyword and the connector are found by two
# searches and the sides are the slices between them.

#: "что такое X?", "what is X?" and close variants; X is the subject to define
_DEFINITION_QUESTION = re.compile(
    r"\s*+(?:(?:что|кто)\s++(?:такое|такой|такая|такие|означает|значит)|(?:дай(?:те)?\s++)?определение|"
    r"what\s++(?:is|are)(?:\s++(?:an?|the))?|define)\s++(?P<subject>.+)",
    re.IGNORECASE,
)
#: where the subject of "что такое X и …", "what is X in …" ends: a conjunction, a preposition, a comma
_SUBJECT_END = re.compile(
    r"(?<!\s)\s++(?:и|или|а|в|во|по|для|and|or|in|of|for|according)\s|[,;:(]", re.IGNORECASE
)


#: "чем A отличается от B", "разница между A и B", "чем A лучше B", "difference between A and B",
#: "A vs B", "how does A differ from B", "compare A and B": what starts the first side and the
#: connector that ends it (the second side is the rest); None: the side starts the question
_COMPARE: list[tuple[re.Pattern[str] | None, re.Pattern[str]]] = [
    (
        re.compile(r"\bчем\s++", re.I),
        re.compile(r"(?<!\s)\s++(?:отлича\w*+|лучше|хуже|удобнее)\s++(?:от\s++)?", re.I),
    ),
    (re.compile(r"\bразниц\w*+\s++между\s++", re.I), re.compile(r"(?<!\s)\s++и\s++", re.I)),
    (re.compile(r"\bdifference\s++between\s++", re.I), re.compile(r"(?<!\s)\s++and\s++", re.I)),
    (
        re.compile(r"\bhow\s++(?:does|do|is|are)\s++", re.I),
        re.compile(r"(?<!\s)\s++differ\w*+\s++from\s++", re.I),
    ),
    (re.compile(r"\bcompare\s++", re.I), re.compile(r"(?<!\s)\s++(?:and|with|to)\s++", re.I)),
    (None, re.compile(r"(?<!\s)\s++vs\.?+\s++", re.I)),
]
#: where the second side ends: the question's next part ("… и когда что лучше использовать?")
_SIDE_END = re.compile(
    r"(?<!\s)\s++(?:и|а|and|or)\s++(?:когда|как|зачем|почему|what|when|how|which|why)\b|[,;?]"
)
#: "методом во Vue": the side is "методом"
_SIDE_PLACE = re.compile(r"(?<!\s)\s++(?:в|во|in)\s")


def _sides(
    question: str, start: re.Pattern[str] | None, connector: re.Pattern[str]
) -> tuple[str, str] | None:
    """The first side (from ``start`` to the first ``connector`` after at least one character)
    and the second (the rest of that line), as they are written."""
    if start is None:
        a_from = 0
    elif (m := start.search(question)) is not None:
        a_from = m.end()
    else:
        return None
    c = connector.search(question, a_from + 1)
    if c is None:
        return None
    a, b = question[a_from : c.start()], question[c.end() :].split("\n", 1)[0]
    if (start is None and "," in a) or (start is not None and "\n" in a) or not b:
        return None
    return a, b


def compared(question: str) -> tuple[str, str] | None:
    """The two things a comparison question compares, or None for any other question."""
    question = question.strip()
    for start, connector in _COMPARE:
        sides = _sides(question, start, connector)
        if sides:
            a = sides[0].strip(" «»\"'")
            b = _SIDE_END.split(sides[1], maxsplit=1)[0].strip(" «»\"'.")
            b = _SIDE_PLACE.split(b, maxsplit=1)[0]
            if a and b:
                return a, b
    return None


def definition_subject(question: str) -> str | None:
    """X in "что такое X?" / "what is X?" (up to a conjunction or preposition: "что такое X и
    кто …"), else None; a comparison ("what is the difference between …") is not a definition."""
    if compared(question) is not None:
        return None
    m = _DEFINITION_QUESTION.fullmatch(question.strip())
    if not m:
        return None
    subject = m.group("subject").rstrip()
    subject = subject.removesuffix("?").rstrip()  # one question mark, as the question ends
    subject = _SUBJECT_END.split(subject, maxsplit=1)[0]
    return subject.strip(" «»\"'") or None


#: where a question's second part starts: "…, и как …", "… and what …", "…, and may they …", "…, и
#: можно ли …" (a second question asked yes or no after a comma)
_SECOND_PART = re.compile(
    r"(?:,\s*+|(?<!\s)\s++)(?:и|а\s++также|and|also)\s++(?=(?:как|какой|какая|какие|каким|где|что|зачем|почему|"
    r"how|what|which|where|why|when)\b)|"
    r",\s*+(?:и|and)\s++(?=(?:можно|нужно|надо|следует|должн\w*|may|can|could|should|must|is|are|does|do|will)\b)",
    re.IGNORECASE,
)


def question_parts(question: str) -> list[str]:
    """The parts of a question that asks two things ("Which events … and how do I …", "how long may
    passwords be, and may they be truncated?"), split where the second one starts; a question of
    one part is itself. A part may lean on the one before it ("… may *they* be truncated")."""
    parts = [p.strip(" ,?") for p in _SECOND_PART.split(question.strip(), maxsplit=1)]
    return parts if len(parts) == 2 and all(parts) else [question]
