"""Which passage a code answer quotes: the library's lines before a test's, and a sentence that
names a value as an inline literal (````HTTP_PROXY````, ``:class:`HTTPAdapter```) is prose.

Chunk texts are real: psf/requests at tag psf__requests-2317 (Apache-2.0, © Kenneth Reitz),
requests/sessions.py, test_requests.py and docs/user/advanced.rst.
"""

from __future__ import annotations

import pytest

from ragline.query.answer import code_answer
from ragline.query.answer.extractive import (
    code_stems,
    extract,
    is_answer_sentence,
    is_code_or_markup,
    prose_sentences,
    prose_view,
    score_candidates,
    select,
    sentences_of,
    statements,
)
from ragline.shared.sdk.contracts import Hit

REBUILD_AUTH = '''\
    def rebuild_auth(self, prepared_request, response):
        """
        When being redirected we may want to strip authentication from the
        request to avoid leaking credentials. This method intelligently removes
        and reapplies authentication where possible to avoid credential loss.
        """
        headers = prepared_request.headers
        url = prepared_request.url

        if 'Authorization' in headers:
            # If we get redirected to a new host, we should strip out any
            # authentication headers.
            original_parsed = urlparse(response.request.url)
            redirect_parsed = urlparse(url)

            if (original_parsed.hostname != redirect_parsed.hostname):
                del headers['Authorization']

        # .netrc might have more auth for us on our new host.
        new_auth = get_netrc_auth(url) if self.trust_env else None
        if new_auth is not None:
            prepared_request.prepare_auth(new_auth)

        return
'''

AUTH_TESTS = """\
    def test_auth_is_stripped_on_redirect_off_host(self):
        r = requests.get(
            httpbin('redirect-to'),
            params={'url': 'http://www.google.co.uk'},
            auth=('user', 'pass'),
        )
        assert r.history[0].request.headers['Authorization']
        assert not r.request.headers.get('Authorization', '')

    def test_auth_is_retained_for_redirect_on_host(self):
        r = requests.get(httpbin('redirect/1'), auth=('user', 'pass'))
        h1 = r.history[0].request.headers['Authorization']
        h2 = r.request.headers['Authorization']
"""

PROXIES = """\
Proxies
If you need to use a proxy, you can configure individual requests with the ``proxies`` argument to any request method::
import requests
proxies = {
"http": "http://10.10.1.10:3128",
"https": "http://10.10.1.10:1080",
}
requests.get("http://example.org", proxies=proxies)
You can also configure proxies by setting the environment variables ``HTTP_PROXY`` and ``HTTPS_PROXY``.
"""

ADAPTERS_DOC = (
    "Requests ships with a single Transport Adapter, the :class:`HTTPAdapter <requests.adapters.HTTPAdapter>`."
    " This adapter provides the default Requests interaction with HTTP and HTTPS using the powerful"
    " `urllib3`_ library."
)


def code_hit(path: str, content: str, start: int, layer: str, symbol: str) -> Hit:
    return Hit(
        doc_id=f"requests/{path}",
        chunk_no=0,
        path=f"requests/{path}",
        layer=layer,
        content=content,
        metadata={
            "start_line": start,
            "end_line": start + content.count("\n"),
            "language": "python",
            "symbol": symbol,
        },
    )


LIBRARY = code_hit(
    "requests/sessions.py", REBUILD_AUTH, 197, "C0_SOURCE_CHUNKS", "SessionRedirectMixin.rebuild_auth"
)
TEST = code_hit(
    "test_requests.py",
    AUTH_TESTS,
    942,
    code_answer.TESTS_LAYER,
    "RequestsTestCase.test_auth_is_stripped_on_redirect_off_host",
)
QUESTION = "Where does requests remove the Authorization header when a redirect points to a different host?"


@pytest.mark.parametrize("order", [(TEST, LIBRARY), (LIBRARY, TEST)])
def test_a_where_question_is_answered_from_the_library_not_its_test(order):
    ex = extract(QUESTION, list(order))
    assert ex.kind == "code"
    assert "`requests/requests/sessions.py:" in ex.text and "rebuild_auth" in ex.text
    assert "del headers['Authorization']" in ex.text
    assert "test_auth_is_stripped" not in ex.text


def test_the_tests_layer_is_the_configured_one():
    renamed = TEST.model_copy(update={"layer": "T"})
    # under another layer name the same chunk is a test only when the caller says so
    assert "test_requests.py" in extract(QUESTION, [renamed, LIBRARY], tests_layer="X").text.split("\n")[0]
    assert "sessions.py" in extract(QUESTION, [renamed, LIBRARY], tests_layer="T").text.split("\n")[0]


def test_a_test_answers_when_the_question_asks_about_tests_or_nothing_else_does():
    asked = (
        "Where is it tested that requests removes the Authorization header on a redirect to a different host?"
    )
    assert "test_requests.py" in extract(asked, [TEST, LIBRARY]).text.split("\n")[0]
    assert "test_requests.py" in extract(QUESTION, [TEST]).text.split("\n")[0]


def test_a_sentence_naming_inline_literals_is_prose():
    sentences = prose_sentences(PROXIES)
    assert (
        "You can also configure proxies by setting the environment variables ``HTTP_PROXY`` and ``HTTPS_PROXY``."
        in sentences
    )
    # the sentence announcing the example ("::") and the example's lines are not sentences
    assert not any(s.endswith("::") or "10.10.1.10" in s for s in sentences)
    assert is_answer_sentence(ADAPTERS_DOC.split(" This")[0])
    assert prose_view("the ``verify`` argument") == "the  literal  argument"
    for markup in ("<span>{{ x }}</span>", "const url = `${base}/get`;", "x => x + 1"):
        assert is_code_or_markup(markup), markup


def test_a_config_question_quotes_the_documentation_sentence_with_the_variables():
    docs = Hit(
        doc_id="requests/docs/user/advanced.rst",
        chunk_no=36,
        path="requests/docs/user/advanced.rst",
        content=PROXIES,
    )
    ex = extract("How do I configure requests to use an HTTP proxy through environment variables?", [docs])
    assert "``HTTP_PROXY``" in ex.text and "[1]" in ex.text


VERIFY = """\
You can pass ``verify`` the path to a CA_BUNDLE file with certificates of trusted CAs. This list of trusted \
CAs can also be specified through the ``REQUESTS_CA_BUNDLE`` environment variable.
Requests can also ignore verifying the SSL certificate if you set ``verify`` to False.
::
By default, ``verify`` is set to True. Option ``verify`` only applies to host certs.
"""


def test_a_sentence_naming_an_identifier_answers_the_words_of_its_parts():
    docs = Hit(
        doc_id="requests/docs/user/advanced.rst",
        chunk_no=16,
        path="requests/docs/user/advanced.rst",
        content=VERIFY,
    )
    question = "How can I set the bundle requests verifies certificates with, and which environment variable sets it?"
    best = [c.text for c in select(score_candidates(question, sentences_of([docs]), None), 2)]
    # REQUESTS_CA_BUNDLE is the bundle the question asks about, in words
    assert any("``REQUESTS_CA_BUNDLE`` environment variable." in t for t in best), best
    assert code_stems("``REQUESTS_CA_BUNDLE``") >= {"bundl", "request"}
    assert code_stems("Используйте publishedBooksMessage") >= {"использ", "publish", "book", "messag"}


LIST_7 = (
    'Чтобы отфильтровать элементы в списке (например v-for="user in users" v-if="user.isActive"). В этих случаях, '
    "замените users на новое вычисляемое свойство, которое возвращает ваш отфильтрованный список (например activeUsers).\n"
    'Чтобы не отображать список, если он должен быть скрыт (например v-for="user in users" v-if="shouldShowUsers"). '
    "В этих случаях, переместите v-if в элемент контейнера (например ul, ol)."
)


def test_a_case_and_the_instruction_answering_it_are_one_statement():
    sentences = prose_sentences(LIST_7)
    assert len(sentences) == 2
    assert (
        sentences[0].startswith("Чтобы отфильтровать")
        and "замените users на новое вычисляемое свойство" in sentences[0]
    )
    answer = extract(
        "Как во Vue отфильтровать элементы списка, выводимого через v-for?",
        [Hit(doc_id="d", chunk_no=0, content=LIST_7)],
    )
    assert "замените users на новое вычисляемое свойство" in answer.text, answer.text
    assert statements(["If you need a proxy.", "In this case, pass proxies."]) == [
        "If you need a proxy. In this case, pass proxies."
    ]
    assert statements(["Proxies are supported.", "In this case, pass proxies."]) == [
        "Proxies are supported.",
        "In this case, pass proxies.",
    ]


def test_the_case_alone_from_an_overlapping_chunk_repeats_its_statement():
    cut = 'Есть два случая:\nЧтобы отфильтровать элементы в списке (например v-for="user in users" v-if="user.isActive").'
    quoted = [
        s
        for _, _, s in sentences_of(
            [Hit(doc_id="d", chunk_no=7, content=LIST_7), Hit(doc_id="d", chunk_no=6, content=cut)]
        )
    ]
    assert sum(s.startswith("Чтобы отфильтровать") for s in quoted) == 1, quoted
