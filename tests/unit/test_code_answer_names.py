"""How a code answer reads the names a question spells and what a "how do I" question over code
is answered by: an acronym is held by the identifiers that contain it (``REQUESTS_CA_BUNDLE``
holds "CA"), the chunk repeating the most acronyms is not therefore the one whose lines answer,
the question's "retry" is the code's ``max_retries``, and a usage example answers "how do I".

Chunk texts are real: psf/requests at tag psf__requests-2317 (Apache-2.0, © Kenneth Reitz),
requests/sessions.py and requests/adapters.py.
"""

from __future__ import annotations

from ragline.query.answer import code_answer
from ragline.query.answer.extractive import best_code_window, extract
from ragline.shared.sdk.contracts import Hit

MERGE_ENVIRONMENT = '''\
    def merge_environment_settings(self, url, proxies, stream, verify, cert):
        """Check the environment and merge it with some settings."""
        # Gather clues from the surrounding environment.
        if self.trust_env:
            # Set environment's proxies.
            env_proxies = get_environ_proxies(url) or {}
            for (k, v) in env_proxies.items():
                proxies.setdefault(k, v)

            # Look for requests environment configuration and be compatible
            # with cURL.
            if verify is True or verify is None:
                verify = (os.environ.get('REQUESTS_CA_BUNDLE') or
                          os.environ.get('CURL_CA_BUNDLE'))

        # Merge all the kwargs.
        proxies = merge_setting(proxies, self.proxies)
        stream = merge_setting(stream, self.stream)
        verify = merge_setting(verify, self.verify)
        cert = merge_setting(cert, self.cert)

        return {'verify': verify, 'proxies': proxies, 'stream': stream,
                'cert': cert}
'''

CERT_VERIFY = '''\
    def cert_verify(self, conn, url, verify, cert):
        """Verify a SSL certificate. This method should not be called from user
        code, and is only exposed for use when subclassing the
        :class:`HTTPAdapter <requests.adapters.HTTPAdapter>`.

        :param conn: The urllib3 connection object associated with the cert.
        :param url: The requested URL.
        :param verify: Whether we should actually verify the certificate.
        :param cert: The SSL certificate to verify.
        """
        if url.lower().startswith('https') and verify:

            cert_loc = None

            # Allow self-specified cert location.
            if verify is not True:
                cert_loc = verify

            if not cert_loc:
                cert_loc = DEFAULT_CA_BUNDLE_PATH

            if not cert_loc:
                raise Exception("Could not find a suitable SSL CA certificate bundle.")

            conn.cert_reqs = 'CERT_REQUIRED'
            conn.ca_certs = cert_loc
        else:
            conn.cert_reqs = 'CERT_NONE'
            conn.ca_certs = None

        if cert:
            if not isinstance(cert, basestring):
                conn.cert_file = cert[0]
                conn.key_file = cert[1]
            else:
                conn.cert_file = cert
'''

HTTP_ADAPTER = '''\
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
'''

SESSION_INIT = """\
        #: :class:`RequestsCookieJar <requests.cookies.RequestsCookieJar>`, but
        #: may be any other ``cookielib.CookieJar`` compatible object.
        self.cookies = cookiejar_from_dict({})

        # Default connection adapters.
        self.adapters = OrderedDict()
        self.mount('https://', HTTPAdapter())
        self.mount('http://', HTTPAdapter())

        self.redirect_cache = {}

    def __enter__(self):
"""


def code_hit(path: str, content: str, start: int, symbol: str, distance: float = 0.1) -> Hit:
    return Hit(
        doc_id=f"requests/{path}",
        chunk_no=start,
        path=f"requests/{path}",
        layer="C0_SOURCE_CHUNKS",
        content=content,
        vector_distance=distance,
        metadata={
            "start_line": start,
            "end_line": start + content.count("\n") - 1,
            "language": "python",
            "symbol": symbol,
            "symbols": [symbol],
        },
    )


MERGE = code_hit("requests/sessions.py", MERGE_ENVIRONMENT, 610, "Session.merge_environment_settings")
VERIFY = code_hit("requests/adapters.py", CERT_VERIFY, 151, "HTTPAdapter.cert_verify")
ADAPTER = code_hit("requests/adapters.py", HTTP_ADAPTER, 52, "HTTPAdapter")
INIT = code_hit("requests/sessions.py", SESSION_INIT, 321, "Session.__init__")

CA_QUESTION = (
    "How do I make requests verify HTTPS certificates against my own CA bundle, "
    "and which environment variables can set it?"
)
RETRY_QUESTION = (
    "How do I make a requests Session retry failed connections up to 3 times for all https:// URLs?"
)


def test_an_acronym_is_held_by_the_identifiers_that_contain_it():
    assert code_answer.holds(MERGE_ENVIRONMENT, "ca")  # REQUESTS_CA_BUNDLE
    assert code_answer.holds("class HTTPAdapter(BaseAdapter):", "http")
    assert code_answer.holds("HTTP and HTTPS urls", "url")  # the plural the question wrote as "URLs"
    # a word that only starts like the acronym holds nothing, nor does a version inside another
    assert not code_answer.holds("self.cache = cache_dir", "ca")
    assert not code_answer.holds("version 2.5.0", "5.0")
    assert code_answer.stem("retries") == code_answer.stem("retry") == code_answer.stem("retried")


def test_the_lines_reading_the_environment_answer_not_the_chunk_repeating_the_acronyms():
    # cert_verify names HTTPS and CA both, the environment's merge only CA (in its variables'
    # names); the variables the question asks for are in the merge
    for order in ([MERGE, VERIFY], [VERIFY, MERGE]):
        n, h, w = best_code_window(CA_QUESTION, order)
        assert h is MERGE, (n, h.path)
    ex = extract(CA_QUESTION, [MERGE, VERIFY])
    assert ex.kind == "code"
    assert "REQUESTS_CA_BUNDLE" in ex.text and "CURL_CA_BUNDLE" in ex.text, ex.text
    # and its confidence reads the names as the choice did: the cited passages hold "CA"
    assert ex.features["names"] >= 0.5 and ex.features["code"] == 1.0, ex.features


def test_a_how_to_question_is_answered_by_the_usage_example():
    ex = extract(RETRY_QUESTION, [INIT, ADAPTER])
    assert ex.kind == "code", ex.text
    first = ex.text.split("\n", 1)[0]
    assert first.startswith("It is `requests/requests/adapters.py:69-72`, `HTTPAdapter`"), first
    assert "HTTPAdapter(max_retries=3)" in ex.text and "s.mount('http://', a)" in ex.text, ex.text
    # the same chunk asked where, not how: the densest lines, not the example
    _, _, where = best_code_window("Where does requests limit the retries of a failed connection?", [ADAPTER])
    assert not where.example and where.start_line < 69, where


def test_an_example_sharing_no_term_with_the_question_is_no_answer():
    assert code_answer.example_window("How do I stream a download?", ADAPTER) is None
    assert code_answer.example_window(RETRY_QUESTION, MERGE) is None  # no example at all
    w = code_answer.example_window(RETRY_QUESTION, ADAPTER)
    assert w is not None and w.example and (w.start_line, w.end_line) == (69, 72)
