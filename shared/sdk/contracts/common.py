"""Types every task payload shares: identifiers, groups, path patterns, and the error result."""

from __future__ import annotations

import base64
import binascii
import json
import math
import sys
import unicodedata
from array import array
from typing import Annotated, Any, Literal, TypedDict

from pydantic import (
    AfterValidator,
    BaseModel,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
)

#: Unicode categories an identifier may not hold: control characters (NUL, newline, ESC...), format
#: characters (bidi overrides and isolates U+202A-202E / U+2066-2069, the marks U+200E/F, zero-width
#: characters, the BOM), line and paragraph separators and lone surrogates. Postgres refuses NUL
#: outright; the others make an id display as something it is not (a citation shown reversed, a
#: log line split in two).
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def unsafe_characters(text: str) -> list[str]:
    """The characters of ``text`` an identifier may not hold, in order, once each (pure)."""
    # every unsafe category is one str.isprintable refuses (Other and Separator, the space aside), so
    # a printable text has none: one C pass instead of a category lookup per character, which was
    # most of validating a large permission batch (four identifiers an item)
    if text.isprintable():
        return []
    return list(dict.fromkeys(c for c in text if unicodedata.category(c) in UNSAFE_CATEGORIES))


def escaped(text: str) -> str:
    """``text`` with every unsafe character written as ``\\uXXXX``: safe to show and to store (pure)."""
    return "".join(f"\\u{ord(c):04x}" if unicodedata.category(c) in UNSAFE_CATEGORIES else c for c in text)


def identifier_problem(text: str, what: str = "an identifier") -> str | None:
    """Why ``text`` may not be ``what`` (a tenant, a group, a doc id, a file name), or None (pure):
    the one rule for every contract field and every file name ingestion turns into a doc id."""
    bad = unsafe_characters(text)
    if not bad:
        return None
    names = ", ".join(f"U+{ord(c):04X} {unicodedata.name(c, 'control character')}" for c in bad[:5])
    return f"'{escaped(text)[:300]}' has characters {what} may not hold ({names})"


def _safe(value: str) -> str:
    if why := identifier_problem(value):
        raise ValueError(why)
    return value


Ident = Annotated[
    str, StringConstraints(min_length=1, max_length=512, strip_whitespace=True), AfterValidator(_safe)
]
Group = Annotated[
    str, StringConstraints(min_length=1, max_length=256, strip_whitespace=True), AfterValidator(_safe)
]
#: a path, uri or pattern: free text, but no control or formatting characters either
Pattern = Annotated[str, StringConstraints(max_length=1024), AfterValidator(_safe)]
SafeText = Annotated[str, AfterValidator(_safe)]


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("the text holds a NUL character (U+0000), which PostgreSQL cannot store")
    return value


#: free text (a question, a chat turn): any character but NUL
Text = Annotated[str, AfterValidator(_no_nul)]


class ServerContext(TypedDict):
    """The validation context a worker passes (``shared/worker/task_base.py``): what only the server knows,
    so a producer validating its own payload first never judges it by its own settings or clock."""

    now: float  # the worker's clock, seconds since the epoch
    max_clock_skew_s: float  # lifecycle.max_clock_skew_s
    embed_dim: int  # embed.dim: the dimension of the stored vectors


def server_context(info: ValidationInfo) -> ServerContext | None:
    ctx = info.context
    return ctx if isinstance(ctx, dict) and "now" in ctx else None  # type: ignore[return-value]


def pack_vector(vector: Any) -> str:
    """A vector's compact form for a payload: its float32 values, little-endian, base64 (about a
    quarter of the JSON list's length, and no decimal digits to print or to parse on either side).
    The index stores float32, so the values the search uses are the same. Producers that embed
    themselves send this as ``query_vector``; the list form stays valid."""
    packed = array("f", [float(x) for x in vector] if not isinstance(vector, list) else vector)
    if sys.byteorder == "big":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def unpack_vector(value: Any) -> Any:
    """The list a packed vector (:func:`pack_vector`) holds; anything else is left to the list's
    own validation."""
    if not isinstance(value, str):
        return value
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a packed vector must be base64 (float32, little-endian)") from None
    if len(raw) % 4:
        raise ValueError(f"a packed vector holds whole float32 values: {len(raw)} bytes")
    values = array("f")
    values.frombytes(raw)
    if sys.byteorder == "big":
        values.byteswap()
    return values.tolist()


def check_vector(vector: list[float] | None, info: ValidationInfo) -> list[float] | None:
    """A query vector must be finite everywhere, and as long as the stored vectors where the server
    validates: NaN or a wrong length reaches pgvector as an error, not as a result."""
    if vector is None:
        return None
    if not all(map(math.isfinite, vector)):  # a C loop: the worker validates every question's vector
        raise ValueError("the vector holds NaN or infinity")
    ctx = server_context(info)
    if ctx is not None and len(vector) != ctx["embed_dim"]:
        raise ValueError(
            f"the vector has {len(vector)} dimensions; the index stores {ctx['embed_dim']} (RAGLINE_EMBED_DIM)"
        )
    return vector


class ErrorResult(BaseModel):
    """What a task returns for a payload it cannot accept: the worker stays up."""

    ok: Literal[False] = False
    error: str
    detail: Any = None

    @field_validator("detail")
    @classmethod
    def _json_safe(cls, v: Any) -> Any:
        """Validation errors carry exception objects in ``ctx``: a result must stay JSON-serializable."""
        return json.loads(json.dumps(v, default=str))

    @classmethod
    def invalid_payload(cls, exc: ValidationError) -> dict:
        """The result of a task whose payload failed validation (input values left out: they may be huge)."""
        return cls(
            error="invalid payload", detail=exc.errors(include_url=False, include_input=False)
        ).model_dump()
