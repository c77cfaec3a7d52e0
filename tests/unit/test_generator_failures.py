"""A streamed answer that breaks off says what broke, by kind, whichever way the SDK reports it."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from ragline.shared.worker.providers.generate import _failure_kind

REQUEST = httpx.Request("POST", "http://127.0.0.1:9/v1/messages")


def wrapped(cause: Exception) -> anthropic.APIConnectionError:
    """The SDK's connection error raised from ``cause``, as its body reader raises it."""
    try:
        try:
            raise cause
        except Exception as err:
            raise anthropic.APIConnectionError(message="Connection failed", request=REQUEST) from err
    except anthropic.APIConnectionError as exc:
        return exc


@pytest.mark.parametrize(
    "exc,kind",
    [
        (wrapped(httpx.RemoteProtocolError("peer closed connection")), "RemoteProtocolError"),
        (httpx.RemoteProtocolError("peer closed connection"), "RemoteProtocolError"),
        (wrapped(httpx.ReadTimeout("timed out")), "ReadTimeout"),
        (anthropic.APIConnectionError(request=REQUEST), "APIConnectionError"),
        (ValueError("a malformed event"), "ValueError"),
    ],
)
def test_the_failure_is_named_by_the_transport_error_the_sdk_wraps(exc, kind):
    assert _failure_kind(exc, anthropic.APIConnectionError) == kind
