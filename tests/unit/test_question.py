"""What a question asks (query/question.py), read by linear patterns: the same reading as the
backtracking patterns it replaced, on every form they knew, and an answer at the longest question."""

from __future__ import annotations

import pytest

from ragline.query.question import compared, definition_subject, question_parts

#: question -> (compared, definition_subject, question_parts), as the backtracking patterns read it
READINGS = {
    "Чем v-if отличается от v-show и когда что лучше использовать?": (("v-if", "v-show"), None, None),
    "чем Vue лучше React": (("Vue", "React"), None, None),
    "Разница между list и tuple в Python": (("list", "tuple"), None, None),
    "What is the difference between TCP and UDP?": (("TCP", "UDP"), None, None),
    "How does asyncio differ from threading in Python?": (("asyncio", "threading"), None, None),
    "Compare Flask and Django": (("Flask", "Django"), None, None),
    "compare x with y, and why": (("x", "y"), None, ["compare x with y", "why"]),
    "Vue vs. React": (("Vue", "React"), None, None),
    "a, b vs c": (None, None, None),
    "Vue\nReact vs Angular": (("Vue\nReact", "Angular"), None, None),
    "compare x\nand y": (("x", "y"), None, None),
    "compare a and  ": (None, None, None),
    "what is a monad?": (None, "monad", None),
    "What is an apple and who eats it?": (None, "apple", None),
    "Что такое GIL и зачем он нужен?": (None, "GIL", ["Что такое GIL", "зачем он нужен"]),
    "define  monad ??": (None, "monad ?", None),
    "дайте определение инкапсуляции": (None, "инкапсуляции", None),
    "what is\nx": (None, "x", None),
    "how long may passwords be, and may they be truncated?": (
        None,
        None,
        ["how long may passwords be", "may they be truncated"],
    ),
    "Which events fire and how do I listen?": (None, None, ["Which events fire", "how do I listen"]),
}


@pytest.mark.parametrize("question", list(READINGS))
def test_the_reading_of_each_form(question):
    sides, subject, parts = READINGS[question]
    assert compared(question) == sides
    assert definition_subject(question) == subject
    assert question_parts(question) == (parts or [question])


@pytest.mark.parametrize(
    "question",
    [
        "compare" + " " * 3992 + "x",
        "what is x" + " " * 3990 + "?",
        "как" + " и" * 1998 + "?",
        "a" + " " * 3997 + "vs",
    ],
)
def test_the_longest_hostile_questions_are_read(question):
    """The inputs that took the backtracking patterns minutes (timed by test_regex_linear)."""
    assert compared(question) is None
    assert question_parts(question) == [question]
    assert definition_subject(question) in (None, "x")
