"""Parsing: heading paths, tables as rows, code kept whole, HTML chrome dropped, PDF/DOCX, bad input."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ragline.ingest.chunk import chunk_blocks
from ragline.ingest.parse import ParseError, clean_markdown, parse_bytes
from tests.conftest import REPO
from tests.pdfs import make_pdf

SAMPLE_PDF = [
    [
        (20, "Access Control"),
        (11, "Authorization is the concept of allowing access to resources."),
        (15, "Design Principles"),
        (11, "Verify that the application enforces access control rules."),
        (11, "Verify that all user attributes cannot be manipulated by end users."),
        (11, "602"),
    ],
    [
        (15, "Operation Level"),
        (11, "Verify that sensitive data and APIs are protected against IDOR attacks."),
    ],
]


def test_markdown_heading_paths_tables_and_code():
    md = (
        "# Руководство {#guide}\n\nВведение в систему.\n\n## Таблицы\n\n"
        "| № | Описание |\n|---|---|\n| 1.2.3 | Проверьте, что т.е. всё верно. |\n| 1.2.4 | Вторая строка. |\n\n"
        "### Код\n\n```js{2}\nconst a = 1\nconst b = 2\n```\n\nКонец раздела.\n"
    )
    doc = parse_bytes(md.encode(), "md", default_title="guide")
    assert doc.title == "Руководство"
    by_kind = {b.kind: b for b in doc.blocks}
    assert by_kind["table"].heading_path == ("Руководство", "Таблицы")
    assert by_kind["table"].text.splitlines() == [
        "№ | Описание",
        "1.2.3 | Проверьте, что т.е. всё верно.",
        "1.2.4 | Вторая строка.",
    ]
    assert by_kind["code"].text == "const a = 1\nconst b = 2"
    assert by_kind["code"].heading_path == ("Руководство", "Таблицы", "Код")


def test_markdown_raw_html_wrappers_do_not_swallow_content():
    """A fenced <script setup> example inside <div class="composition-api"> must not hide the page."""
    md = (
        '---\noutline: deep\n---\n\n# Входные параметры\n\n<div class="composition-api">\n\n'
        "Первый абзац.\n\n```vue\n<script setup>\nconst props = defineProps(['foo'])\n</script>\n```\n\n</div>\n"
        '<VueSchoolLink\n  href="https://example.org"\n/>\n\n::: tip Примечание\nСовет внутри контейнера.\n:::\n\n'
        "## Дальше\n\nПоследний абзац.\n"
    )
    assert "<div" not in clean_markdown(md)
    doc = parse_bytes(md.encode(), "md")
    texts = [b.text for b in doc.blocks]
    assert "Первый абзац." in texts and "Последний абзац." in texts
    assert any("defineProps" in t for t in texts)
    assert "Совет внутри контейнера." in texts
    assert doc.blocks[-1].heading_path == ("Входные параметры", "Дальше")
    assert not any("outline" in t for t in texts)


def test_html_navigation_chrome_is_dropped_and_code_tables_become_code():
    html = """<html><head><title>Site</title></head><body>
      <div id="mobile-bar"><a class="menu-button">menu</a></div>
      <header id="header"><ul id="nav"><li>Обучение</li><li>Экосистема</li><li>Магазин футболок</li></ul></header>
      <div id="main" class="fix-sidebar">
        <div class="sidebar"><ul><li><a>Введение</a></li><li><a>Установка</a></li></ul></div>
        <div class="content guide">
          <h1>Вычисляемые свойства</h1>
          <p>Выражения в шаблонах удобны для простых операций, но сложная логика их раздувает.</p>
          <h2 id="x"><a class="headerlink" href="#x"></a>Простой пример</h2>
          <figure class="highlight js"><table><tr><td class="gutter"><pre>1<br>2</pre></td>
            <td class="code"><pre><code>var vm = new Vue({<br>  el: '#example'<br>})</code></pre></td></tr></table></figure>
          <p>Откройте консоль и поиграйте с примером.</p>
          <div class="section-header"><h2>Кэширование</h2><p>Вычисляемые свойства кэшируются на основе своих
            реактивных зависимостей и пересчитываются только тогда, когда изменилась хотя бы одна из них. Это
            значит, что повторное обращение к свойству сразу вернёт ранее вычисленный результат.</p></div>
          <div class="footer">Нашли ошибку? Исправьте на GitHub.</div>
        </div>
      </div></body></html>"""
    doc = parse_bytes(html.encode(), "html", default_title="computed")
    text = doc.text
    assert doc.title == "Вычисляемые свойства"
    for chrome in ("Обучение", "Магазин футболок", "Установка", "menu", "Нашли ошибку"):
        assert chrome not in text
    code = [b for b in doc.blocks if b.kind == "code"]
    assert [b.text for b in code] == ["var vm = new Vue({\n  el: '#example'\n})"]
    assert code[0].heading_path == ("Вычисляемые свойства", "Простой пример")
    cached = [b for b in doc.blocks if b.text.startswith("Вычисляемые свойства кэшируются")]
    assert cached and cached[0].heading_path == ("Вычисляемые свойства", "Кэширование")


def test_pdf_pages_and_font_size_headings():
    doc = parse_bytes(make_pdf(SAMPLE_PDF), "pdf", default_title="asvs")
    assert doc.title == "Access Control"
    blocks = {b.text: b for b in doc.blocks}
    enforce = blocks["Verify that the application enforces access control rules."]
    assert enforce.heading_path == ("Access Control", "Design Principles") and enforce.page == 1
    idor = blocks["Verify that sensitive data and APIs are protected against IDOR attacks."]
    assert idor.heading_path == ("Access Control", "Operation Level") and idor.page == 2
    assert "602" in blocks  # a number inside the text area is content (a CWE column)
    assert "17" not in blocks and "18" not in blocks  # page numbers in the bottom margin are dropped
    chunks = chunk_blocks(doc.blocks)
    assert {c.page for c in chunks} == {1, 2}


def test_encrypted_pdf_is_a_readable_error():
    pypdf = pytest.importorskip("pypdf")
    import io

    reader = pypdf.PdfReader(io.BytesIO(make_pdf(SAMPLE_PDF)))
    writer = pypdf.PdfWriter()
    for page in reader.pages:
        writer.add_page(page)
    writer.encrypt(user_password="secret", owner_password="owner", algorithm="RC4-128")
    buf = io.BytesIO()
    writer.write(buf)
    with pytest.raises(ParseError, match="encrypted PDF"):
        parse_bytes(buf.getvalue(), "pdf")


@pytest.mark.parametrize(
    ("data", "fmt", "message"),
    [
        (b"", "md", "empty document"),
        (b"   \n\t\n", "text", "empty document"),
        (b"\x00\x01\x02binary\x00garbage" * 50, "text", "binary content"),
        ("Привет".encode("cp1251") + b" \xff\xfe", "md", "not valid UTF-8"),
        (b"%PDF-1.4\n1 0 obj <<< broken", "pdf", "corrupt PDF|no text layer"),
        (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "pdf", "corrupt PDF|no text layer"),
        (b"PK\x03\x04 not really a zip", "docx", "corrupt DOCX"),
        (b"plain text, not a zip container", "docx", "corrupt DOCX"),
        (b"", "pdf", "empty document"),
    ],
)
def test_bad_input_is_a_readable_parse_error(data, fmt, message):
    with pytest.raises(ParseError, match=message):
        parse_bytes(data, fmt)


def test_unknown_extension_is_rejected_at_load(tmp_path):
    from ragline.ingest.load import load
    from ragline.shared.sdk.contracts import IngestRequest

    f = tmp_path / "data.xyz"
    f.write_bytes(b"whatever")
    with pytest.raises(ParseError, match="unsupported file type '.xyz'"):
        load(IngestRequest(tenant="t", doc_id="d", uri=str(f)))


def test_blank_spacy_pipeline_is_used_without_network():
    """unstructured would download en_core_web_sm on first use; with sockets disabled it must not try."""
    code = r"""
import socket
def deny(*a, **k):
    raise OSError("network disabled in this test")
socket.socket.connect = deny
socket.create_connection = deny
from ragline.ingest.parse import parse_bytes
doc = parse_bytes("Первое предложение о системе. Второе предложение о ней.\n\nЕщё абзац текста здесь.".encode(), "text")
md = parse_bytes("# Заголовок\n\nТекст раздела о чём-то важном.".encode(), "md")
from unstructured.nlp import tokenize
nlp = tokenize._get_nlp()
print(nlp.lang, ",".join(nlp.pipe_names), "Ещё абзац" in doc.text, md.blocks[0].heading_path[0])
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["xx", "sentencizer", "True", "Заголовок"]


def test_one_line_text_document_is_content_not_nothing():
    """A single short line (which unstructured classifies as a Title) still yields a block."""
    from ragline.ingest.parse import parse_bytes

    line = "Азербайджан можно поделить на 10 крупных экономических районов:"
    doc = parse_bytes(line.encode(), "text", default_title="p0206")
    assert [b.text for b in doc.blocks] == [line]
    md = parse_bytes("# Только заголовок\n".encode(), "md", default_title="x")
    assert [b.text for b in md.blocks] == ["Только заголовок"]


FRONT_MATTER_ONLY = (
    b"---\nname: Feature request\nabout: Suggest a feature\n---\n\n<!--\nDescribe the feature.\n-->\n"
)


def test_a_parser_crash_on_one_input_is_that_documents_parse_error():
    """unstructured raises AttributeError on Markdown that renders to an empty HTML body."""
    with pytest.raises(ParseError, match="the md parser failed on this document"):
        parse_bytes(FRONT_MATTER_ONLY, "md")


def test_a_time_limit_inside_a_parser_is_not_turned_into_a_document_error(monkeypatch):
    from celery.exceptions import SoftTimeLimitExceeded

    from ragline.ingest import parse

    def slow(_text):
        raise SoftTimeLimitExceeded()

    monkeypatch.setitem(parse._PARSERS, "md", slow)
    with pytest.raises(SoftTimeLimitExceeded):
        parse_bytes(b"# T\n\ntext", "md")
