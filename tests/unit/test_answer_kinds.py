"""Each kind of offline answer over real chunks: a code answer names the place and quotes the lines,
a list question gets the items of its table, a glossary entry defines, a comparison quotes both
sides, an English question over Russian passages quotes them under English framing, and every
refusal and framing follows the question's language. Each answer passes the structural
groundedness check (the framing is not judged, the quotes are spans of their passages).

Chunk texts are real: psf/requests at tag psf__requests-2317 (Apache-2.0, © Kenneth Reitz),
requests/sessions.py and requests/adapters.py as ``code_chunks`` cuts them; OWASP ASVS 4.0.3 in
Russian (CC BY-SA, © The OWASP Foundation), 0x12-V3-Session-management.md and
0x90-Appendix-A_Glossary.md; Vue 3 documentation in Russian (CC BY 4.0, © Yuxi (Evan) You and
contributors), guide/essentials/conditional.md.
"""

from __future__ import annotations

import re

import pytest

from ragline.query.answer import grounding, texts
from ragline.query.answer.citations import build_citations, cited_numbers
from ragline.query.answer.extractive import asks_place, extract
from ragline.query.question import compared
from ragline.shared.sdk.contracts import Hit

SESSIONS_137 = """\
            # Cache the url, unless it redirects to itself.
            if resp.is_permanent_redirect and req.url != prepared_request.url:
                self.redirect_cache[req.url] = prepared_request.url

            # http://tools.ietf.org/html/rfc7231#section-6.4.4
            if (resp.status_code == codes.see_other and
                    method != 'HEAD'):
                method = 'GET'

            # Do what the browsers do, despite standards...
            # First, turn 302s into GETs.
            if resp.status_code == codes.found and method != 'HEAD':
                method = 'GET'

            # Second, if a POST is responded to with a 301, turn it into a GET.
            # This bizarre behaviour is explained in Issue 1704.
            if resp.status_code == codes.moved and method == 'POST':
                method = 'GET'

            prepared_request.method = method"""

ADAPTERS_52 = '''\
class HTTPAdapter(BaseAdapter):
    """The built-in HTTP Adapter for urllib3.

    Provides a general-case interface for Requests sessions to contact HTTP and
    HTTPS urls by implementing the Transport Adapter interface. This class will
    usually be created by the :class:`Session <Session>` class under the
    covers.

    :param pool_connections: The number of urllib3 connection pools to cache.
    :param pool_maxsize: The maximum number of connections to save in the pool.
    :param int max_retries: The maximum number of retries each connection
        should attempt. Note, this applies only to failed connections and
        timeouts, never to requests where the server returns a response.
    :param pool_block: Whether the connection pool should block for connections.

    Usage::

      >>> import requests
      >>> s = requests.Session()
      >>> a = requests.adapters.HTTPAdapter(max_retries=3)
      >>> s.mount('http://', a)
    """
    __attrs__ = ['max_retries', 'config', '_pool_connections', '_pool_maxsize',
                 '_pool_block']

    def __init__(self, pool_connections=DEFAULT_POOLSIZE,
                 pool_maxsize=DEFAULT_POOLSIZE, max_retries=DEFAULT_RETRIES,
                 pool_block=DEFAULT_POOLBLOCK):
        self.max_retries = max_retries'''

COOKIES = """№ | Описание | L1 | L2 | L3 | CWE | NIST
3.4.1 | Убедитесь, что для сессионных токенов на основе файлов cookie установлен атрибут Secure. ( C6 ) | ✓ | ✓ | ✓ | 614 | 7.1.1
3.4.2 | Убедитесь, что для сессионных токенов на основе cookie установлен атрибут HttpOnly. ( C6 ) | ✓ | ✓ | ✓ | 1004 | 7.1.1
3.4.3 | Убедитесь, что сессионные токены на основе cookie используют атрибут SameSite, установленный в значение Lax или Strict, чтобы ограничить подверженность атакам по подмене межсайтовых запросов (CSRF). ( C6 ) | ✓ | ✓ | ✓ | 16 | 7.1.1
3.4.4 | Убедитесь, что токены сессии на основе cookie используют префикс "__Host-". Таким образом, cookie отправляются только на тот хост, который изначально его установил. | ✓ | ✓ | ✓ | 16 | 7.1.1"""

GLOSSARY = """Security Control –мера обеспечения безопасности– функция или компонент, который контролирует (например, меры контроля доступа) или приводит к действию по обеспечению безопасности (например, регистрирует запись в журнале аудита).
Server-side Request Forgery (SSRF) –подделка запросов на стороне сервера– атака, которая злоупотребляет функциональными возможностями сервера для чтения или обновления внутренних ресурсов путем предоставления или изменения URL-адреса, по которому код, запущенный на сервере, будет читать или отправлять данные."""

CONDITIONAL = """Отличия в том, что элемент с v-show будет всегда отрисовываться и оставаться в DOM, а переключаться будет лишь его CSS свойство display.
v-if — это «настоящий» условный рендеринг, так как он гарантирует, что слушатели событий и дочерние компоненты внутри условного блока будут правильно уничтожаться и воссоздаваться во время переключения.
Для сравнения, v-show намного проще — элемент всегда отрисовывается, вне зависимости от исходного состояния с переключением на основе CSS.
В целом, у v-if выше затраты на переключение, в то время как v-show имеет больше затрат на первичную отрисовку. Так что используйте v-show, если переключения будут частыми, и предпочитайте v-if, если условие может и не измениться во время исполнения."""


def code_hit(path: str, content: str, start: int, symbol: str, symbols: list[str] | None = None) -> Hit:
    end = start + content.count("\n")
    meta = {
        "start_line": start,
        "end_line": end,
        "language": "python",
        "symbol": symbol,
        "symbols": symbols or [symbol],
    }
    return Hit(doc_id=f"requests/{path}", chunk_no=0, path=f"requests/{path}", content=content, metadata=meta)


def doc_hit(doc_id: str, content: str, heading: str = "") -> Hit:
    return Hit(doc_id=doc_id, chunk_no=0, path=doc_id, heading=heading, content=content)


def grounded(ex, hits: list[Hit]) -> grounding.Grounding:
    """The structural check the service runs on an extractive answer: nothing may be removed."""
    g = grounding.check(ex.text, [h.content for h in hits], "structural", framing=ex.framing)
    assert not g.removed, g.removed
    return g


# ------------------------------------------------------------------------------------------ code
def test_a_where_question_over_code_gets_the_place_and_the_lines():
    hits = [code_hit("requests/sessions.py", SESSIONS_137, 137, "SessionRedirectMixin.resolve_redirects")]
    q = "Where in requests is it decided to switch the HTTP method to GET when following a redirect?"
    ex = extract(q, hits)
    assert ex.kind == "code" and asks_place(q)
    first, block = ex.text.split("\n", 1)
    m = re.fullmatch(
        r"It is `requests/requests/sessions\.py:(\d+)-(\d+)`, `SessionRedirectMixin\.resolve_redirects` \[1\]:",
        first,
    )
    assert m, first
    start, end = map(int, m.groups())
    assert 137 <= start < end <= 156
    assert block.startswith("```python\n") and "method = 'GET'" in block
    # the quoted lines are the file's lines start..end, indentation of the block removed
    code = block.split("\n```", 1)[0].split("\n", 1)[1].splitlines()
    original = SESSIONS_137.splitlines()[start - 137 : end - 137 + 1]
    assert [line.strip() for line in code] == [line.strip() for line in original]
    g = grounded(ex, hits)
    assert any(c.code for c in g.claims) and all(c.cites == [1] for c in g.claims)
    # a judge holding only the response (the answer eval) finds the same framing in the text
    assert texts.framing_lines(ex.text) == ex.framing
    assert texts.framing_lines("It is raining today. [1]\nCookies: [1]") == []


def test_a_parameter_question_quotes_the_signature_and_the_docstring_field():
    hits = [
        code_hit(
            "requests/adapters.py", ADAPTERS_52, 52, "HTTPAdapter", ["HTTPAdapter", "HTTPAdapter.__init__"]
        )
    ]
    ex = extract(
        "What does the max_retries parameter of requests' HTTPAdapter do, and what is its default value?",
        hits,
    )
    assert ex.kind == "code"
    assert "max_retries=DEFAULT_RETRIES" in ex.text
    assert "max_retries: The maximum number of retries each connection should attempt." in ex.text
    grounded(ex, hits)


def test_brackets_in_quoted_code_are_not_citations():
    content = "def ok(resp):\n    return resp.history[200] if resp.ok else codes[404]"
    hits = [code_hit("requests/x.py", content, 10, "ok")]
    ex = extract("Where does ok read the history of resp?", hits)
    assert ex.kind == "code" and "[200]" in ex.text
    assert cited_numbers(ex.text) == [1]
    citations = build_citations(ex.text, hits)
    assert [(c.n, c.start_line, c.locator) for c in citations] == [(1, 10, "requests/requests/x.py:10-11")]


def test_a_code_answer_in_russian_frames_in_russian():
    hits = [code_hit("requests/sessions.py", SESSIONS_137, 137, "SessionRedirectMixin.resolve_redirects")]
    ex = extract("Где requests меняет метод на GET при редиректе (codes.see_other)?", hits)
    assert ex.kind == "code" and ex.text.startswith("Это `requests/requests/sessions.py:")


# ------------------------------------------------------------------------------ lists, definitions
def test_a_list_question_gets_the_rows_of_the_table_with_their_numbers():
    hits = [doc_hit("asvs/0x12-V3-Session-management.md", COOKIES, "V3 Управление сессиями › V3.4 Cookie")]
    ex = extract("Перечисли атрибуты и префикс имени, которые ASVS требует для сессионных cookie.", hits)
    assert ex.kind == "list"
    items = ex.text.splitlines()
    assert len(items) >= 4 and all(i.startswith("- 3.4.") for i in items), items
    for word in ("Secure", "HttpOnly", "SameSite", "__Host-"):
        assert word in ex.text
    assert ex.text.endswith("[1]")
    grounded(ex, hits)


def test_a_glossary_entry_defines_its_term():
    hits = [doc_hit("asvs/0x90-Appendix-A_Glossary.md", GLOSSARY)]
    ex = extract("Что такое SSRF в терминологии ASVS?", hits)
    assert ex.kind == "sentences"
    assert "Server-side Request Forgery (SSRF) –подделка запросов на стороне сервера–" in ex.text
    grounded(ex, hits)


def test_a_comparison_quotes_both_sides():
    assert compared("Чем v-if отличается от v-show и когда что лучше использовать?") == ("v-if", "v-show")
    assert compared("What is the difference between computed and methods?") == ("computed", "methods")
    assert compared("Что такое v-if?") is None
    hits = [doc_hit("vue3/guide/essentials/conditional.md", CONDITIONAL)]
    ex = extract("Чем v-if отличается от v-show и когда что лучше использовать?", hits)
    assert ex.kind == "sentences"
    assert "v-if" in ex.text and "v-show" in ex.text and "затраты на переключение" in ex.text
    grounded(ex, hits)


# ------------------------------------------------------------------------- languages and refusals
def test_an_english_question_over_russian_passages_is_framed_in_english():
    hits = [doc_hit("vue3/guide/essentials/conditional.md", CONDITIONAL)]

    def rank(question: str, sentences: list[str]) -> list[float]:
        return [1.0 if "частыми" in s else 0.5 for s in sentences]  # the embedder's similarity

    ex = extract("When should I prefer v-show over v-if?", hits, rank)
    assert ex.kind == "crosslingual"
    assert ex.text.startswith("From the documentation (in Russian):\n") and "частыми" in ex.text
    grounded(ex, hits)


@pytest.mark.parametrize(
    ("question", "lang"),
    [
        ("Что такое SSRF?", "ru"),
        ("Как работает computed?", "ru"),
        ("Где в requests выбирается get_adapter()?", "ru"),
        ("What is SSRF?", "en"),
        ("Where does requests call get_adapter()?", "en"),
        ("v1.2.3", "en"),
    ],
)
def test_the_question_language_decides_ragline_s_own_words(question, lang):
    assert texts.language_of(question) == lang
    refusal = extract(question, []).text
    assert refusal == texts.no_answer(lang) and texts.is_refusal(refusal)


def test_every_refusal_is_recognised_in_every_language():
    for lang in texts.LANGUAGES:
        assert texts.is_refusal(texts.no_answer(lang))
        assert texts.is_refusal(f"К сожалению, {texts.no_answer(lang)}")
    assert not texts.is_refusal("The cache holds the result [1].")
    assert texts.no_answer("ru") != texts.no_answer("en")
    assert texts.no_answer("de") == texts.no_answer(texts.FALLBACK)


# ------------------------------------------------------------------------------------ confidence
def test_the_confidence_is_the_fitted_probability_of_a_right_answer():
    """The shipped model maps the composer's features to a probability: the passages that lack the
    name a question spells, or quotes far from the question, make it less likely to be right."""
    hit = doc_hit("asvs/0x12-V3-Session-management.md", COOKIES, "V3 Управление сессиями › V3.4 Cookie")
    hits = [hit.model_copy(update={"vector_distance": 0.18})]

    def rank(question: str, sentences: list[str]) -> list[float]:  # the embedder's similarities
        return [0.84 if "cookie" in s else 0.8 for s in sentences]

    held = extract("Перечисли атрибуты сессионных cookie.", hits, rank).features
    other = extract("Какие атрибуты cookie нужно задать в Nuxt 3?", hits, rank).features
    assert held["names"] == 1.0 and other["names"] < 1.0
    p_held, p_other = grounding.answer_probability(held), grounding.answer_probability(other)
    assert 0.0 < p_other < p_held < 1.0
    far = {**held, "similarity": (held["similarity"] or 0.0) - 1.0, "lexical": 0.0}
    assert grounding.answer_probability(far) < p_held
    assert set(grounding.confidence_model()["features"]) <= {*held, *grounding.SCOPE_FEATURES}
