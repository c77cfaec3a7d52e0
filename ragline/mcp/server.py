"""The MCP server: four tools over the query pool's task contract, permissions bound by the server.

Every tool sends the query pool the same task a chat backend sends (``AsyncRaglineClient``: search,
ask, and ``sources``; ``read`` is the contract's exact lookup, ``mode="exact"``), so admission,
rate limits, deadlines, the tenant and ACL conditions in SQL, the worker's JSON log line and its
Prometheus counters apply to an agent's call exactly as to a chat question. There is no second
query path.

Who the caller is comes from the server, never from the model: a :class:`~ragline.mcp.tokens.Grant`
fixed when the server starts (stdio) or the one the bearer token maps to (HTTP,
:class:`TokenGrants`). The tools' argument models are built from the contracts' own fields
(:func:`contract_args`) without ``tenant`` and ``groups``, and reject any property they do not
declare, so neither an argument nor a document an agent read and obeyed can widen the scope.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools.base import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from ragline.mcp.tokens import Grant, TokenStore
from ragline.shared.sdk.async_client import AsyncRaglineClient
from ragline.shared.sdk.client import RaglineError, RaglineRateLimited, RaglineTimeout
from ragline.shared.sdk.contracts import AskRequest, Citation, Hit, SearchRequest, SourcesResponse
from ragline.shared.sdk.contracts.common import Pattern, Text
from ragline.shared.worker.logging_setup import get_logger, question_hash

log = get_logger("ragline.mcp")

#: a hit's snippet: the opening of its chunk, enough to judge it before reading the file
SNIPPET_CHARS = 400
#: ``read``'s chunks of one document per call: the exact lookup's ``k`` at most (SearchRequest)
READ_CHUNKS = 200
#: ``read``'s text at most, so one call cannot fill an agent's context
READ_CHARS = 60_000

#: the filters of the retrieval contract (design seed 000) both tools take, as SearchRequest has them
FILTERS = (
    "layers",
    "path_prefixes",
    "exclude_path_prefixes",
    "exclude_like_patterns",
    "prefer_path_prefixes",
    "prefer_like_patterns",
    "prefer_non_tests",
)


class ToolArgs(ArgModelBase):
    """A tool's arguments: a property the schema does not declare is refused, never ignored."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


def contract_args(
    name: str, contract: type[BaseModel], fields: tuple[str, ...], **own: Any
) -> type[ToolArgs]:
    """A tool's argument model: ``fields`` with the contract's own types, limits and descriptions,
    plus ``own`` (``name=(type, Field(...))``); the JSON Schema an agent sees is generated from it."""
    picked = {f: (contract.model_fields[f].annotation, contract.model_fields[f]) for f in fields}
    return create_model(name, __base__=ToolArgs, **own, **picked)  # type: ignore[call-overload]


_QUERY = (Text, Field(min_length=1, max_length=4000, description="the question or search words"))

SearchArgs = contract_args(
    "SearchArgs",
    SearchRequest,
    ("k", "mode", *FILTERS, "doc_ids", "paths"),
    query=_QUERY,
)
AskArgs = contract_args("AskArgs", AskRequest, ("k", "mode", *FILTERS, "history"), query=_QUERY)
SourcesArgs = contract_args("SourcesArgs", SearchRequest, ())


class ReadArgs(ToolArgs):
    doc_id: Pattern | None = Field(default=None, min_length=1, description="a hit's doc_id")
    path: Pattern | None = Field(default=None, min_length=1, description="or a hit's path")
    chunk_no: int | None = Field(default=None, ge=0, description="only this chunk (a hit's chunk_no)")
    start_line: int | None = Field(default=None, ge=1, description="first line to read (code), from 1")
    end_line: int | None = Field(default=None, ge=1, description="last line to read, inclusive")

    @model_validator(mode="after")
    def _one_document(self) -> ReadArgs:
        if (self.doc_id is None) == (self.path is None):
            raise ValueError("give exactly one of doc_id and path")
        if self.start_line and self.end_line and self.end_line < self.start_line:
            raise ValueError("end_line is before start_line")
        return self


class SearchHit(BaseModel):
    """A hit as the retrieval contract names it, with the opening of its chunk."""

    doc_id: str
    chunk_no: int
    path: str
    title: str | None
    span_start: int | None
    span_end: int | None
    layer: str
    score: float
    snippet: str

    @classmethod
    def of(cls, hit: Hit) -> SearchHit:
        return cls(
            **hit.model_dump(include=set(cls.model_fields) - {"snippet"}), snippet=hit.content[:SNIPPET_CHARS]
        )


class SearchResult(BaseModel):
    hits: list[SearchHit]
    files: list[str] = Field(default_factory=list, description="a code search's files, best first")
    degraded: bool = False
    degraded_reasons: list[str] = Field(default_factory=list)


class AskResult(BaseModel):
    answer: str
    citations: list[Citation]
    no_answer: bool
    confidence: float | None
    reason: str | None = None
    degraded: bool = False


class ReadChunk(BaseModel):
    chunk_no: int
    title: str | None
    span_start: int | None
    span_end: int | None
    page: int | None
    text: str


class ReadResult(BaseModel):
    doc_id: str
    path: str
    layer: str
    chunks: list[ReadChunk] = Field(description="the chunks read, in order (symbol records left out)")
    start_line: int | None = None
    end_line: int | None = None
    text: str = Field(description="the lines asked for (code), else the chunks' text in order")
    truncated: bool = Field(default=False, description="more of the document than one call returns")


def _line_map(hits: list[Hit]) -> dict[int, str]:
    """A code document's lines from its chunks whose text is exactly their span (pure): a chunk that
    repeats a signature on top (a later part of a long definition) is left out, its lines come from
    its neighbours or stay unknown."""
    lines: dict[int, str] = {}
    for h in hits:
        if h.span_start is None or h.span_end is None:
            continue
        text = h.content.split("\n")
        if len(text) == h.span_end - h.span_start + 1:
            lines.update(zip(range(h.span_start, h.span_end + 1), text, strict=True))
    return lines


def read_result(hits: list[Hit], args: ReadArgs) -> ReadResult:
    """What ``read`` returns for the chunks of one document the caller may read (pure)."""
    first = hits[0]
    chunks = [h for h in hits if h.doc_id == first.doc_id and h.metadata.get("kind") != "symbol"]
    truncated = len(hits) >= READ_CHUNKS
    if args.chunk_no is not None:
        chunks = [h for h in chunks if h.chunk_no == args.chunk_no]
        if not chunks:
            raise ToolError(f"{first.doc_id} has no chunk {args.chunk_no} this caller may read")
        truncated = False
    start = end = None
    if args.start_line is not None or args.end_line is not None:
        lines = _line_map(chunks)
        if not lines:
            raise ToolError(f"{first.doc_id} has no line spans (not code): read it by chunk_no")
        start = args.start_line or min(lines)
        end = min(args.end_line or max(lines), max(lines))
        chunks = [h for h in chunks if (h.span_start or 0) <= end and (h.span_end or 0) >= start]
        text = "\n".join(lines.get(n, "") for n in range(start, end + 1))
    elif first.span_start is not None and (lines := _line_map(chunks)):
        text = "\n".join(lines.get(n, "") for n in range(min(lines), max(lines) + 1))
    else:
        text = "\n\n".join(h.content for h in chunks)
    return ReadResult(
        doc_id=first.doc_id,
        path=first.path,
        layer=first.layer,
        chunks=[
            ReadChunk(**h.model_dump(include=set(ReadChunk.model_fields) - {"text"}), text=h.content)
            for h in chunks
        ],
        start_line=start,
        end_line=end,
        text=text[:READ_CHARS],
        truncated=truncated or len(text) > READ_CHARS,
    )


class TokenGrants:
    """The SDK's ``TokenVerifier`` over the token file: a token's grant travels in its claims."""

    def __init__(self, store: TokenStore) -> None:
        self.store = store

    async def verify_token(self, token: str) -> AccessToken | None:
        found = self.store.verify(token)
        if found is None:
            log.info("mcp_auth_refused")
            return None
        claims = {"tenant": found.tenant, "groups": list(found.groups)}
        return AccessToken(token=token, client_id=found.token_id or "", scopes=[], claims=claims)


def caller(fixed: Grant | None) -> Grant:
    """The grant of this call: the server's (stdio), or its bearer token's (HTTP)."""
    if fixed is not None:
        return fixed
    token = get_access_token()
    if token is None or not token.claims:  # the SDK's middleware refuses such a request first
        raise ToolError("unauthenticated")
    return Grant(token.claims["tenant"], tuple(token.claims["groups"]), token.client_id)


def _refusal(exc: Exception) -> str:
    """What the agent reads for a failed call: the error and its detail, no traceback."""
    if isinstance(exc, ValidationError):
        return "invalid arguments: " + "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False)
        )
    if isinstance(exc, RaglineRateLimited):
        return f"rate limited: retry after {exc.retry_after_s} s"
    if isinstance(exc, RaglineTimeout):
        return f"timeout: {exc}"
    return f"{type(exc).__name__}: {exc}"


def tool(name: str, args: type[ToolArgs], out: type[BaseModel], description: str, grant: Grant | None):
    """A tool running ``fn(caller, **arguments)``: the arguments validated by ``args``, the caller's
    grant resolved by the server, every call logged (never its text: a hash) and a failure
    returned as a tool error the agent reads."""

    def register(fn: Callable[..., Awaitable[BaseModel]]) -> Tool:
        async def run(**kw: Any) -> BaseModel:
            who = caller(grant)
            t0 = time.perf_counter()
            outcome = "ok"
            try:
                return await fn(who, **kw)
            except (RaglineError, ValidationError) as exc:
                outcome = getattr(exc, "error", "invalid arguments")
                raise ToolError(_refusal(exc)) from exc
            except ToolError:
                outcome = "refused"
                raise
            finally:
                log.info(
                    "mcp_call",
                    tool=name,
                    tenant=who.tenant,
                    grant_id=who.token_id,  # a key naming a token is masked in the logs
                    question_hash=question_hash(str(kw.get("query", ""))),
                    latency_ms=round((time.perf_counter() - t0) * 1000, 2),
                    outcome=outcome,
                )

        return Tool(
            fn=run,
            name=name,
            title=None,
            description=description,
            parameters=args.model_json_schema(by_alias=True),
            fn_metadata=FuncMetadata(arg_model=args, output_model=out),
            is_async=True,
            context_kwarg=None,
            annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
        )

    return register


def build_server(
    client: AsyncRaglineClient,
    *,
    grant: Grant | None = None,
    tokens: TokenStore | None = None,
    url: str | None = None,
) -> MCPServer:
    """The server: ``grant`` for stdio, or ``tokens`` and the server's ``url`` for HTTP."""

    @tool(
        "search", SearchArgs, SearchResult, "Search the indexed code and documents; hits with spans.", grant
    )
    async def search(who: Grant, query: str, k: int, mode: str, **filters: Any) -> SearchResult:
        resp = await client.search(query, who.tenant, list(who.groups), k=k, mode=mode, **filters)
        return SearchResult(
            hits=[SearchHit.of(h) for h in resp.hits],
            files=[f.path for f in resp.files],
            degraded=resp.degraded,
            degraded_reasons=resp.degraded_reasons,
        )

    @tool("ask", AskArgs, AskResult, "A grounded answer with validated citations, or no_answer.", grant)
    async def ask(who: Grant, query: str, k: int, mode: str, **filters: Any) -> AskResult:
        resp = await client.ask(query, who.tenant, list(who.groups), k=k, mode=mode, **filters)
        return AskResult.model_validate(resp, from_attributes=True)

    @tool(
        "read",
        ReadArgs,
        ReadResult,
        "Read a document's lines, or one chunk, by a hit's doc_id or path.",
        grant,
    )
    async def read(who: Grant, doc_id: str | None, path: str | None, **want: Any) -> ReadResult:
        where = {"doc_ids": [doc_id]} if doc_id is not None else {"paths": [path]}
        resp = await client.search("", who.tenant, list(who.groups), k=READ_CHUNKS, mode="exact", **where)
        if not resp.hits:  # absent or not readable: one answer, so no caller learns which
            raise ToolError(f"no document {doc_id or path!r} this caller may read")
        return read_result(resp.hits, ReadArgs(doc_id=doc_id, path=path, **want))

    @tool(
        "sources",
        SourcesArgs,
        SourcesResponse,
        "What is indexed for this caller: sources, commits, counts.",
        grant,
    )
    async def sources(who: Grant) -> SourcesResponse:
        return await client.sources(who.tenant, list(who.groups))

    auth = token_verifier = None
    if tokens is not None:
        assert url is not None
        # the tokens are ragline's own, opaque, checked against the token file: no audience to validate
        auth = AuthSettings(
            issuer_url=url,  # type: ignore[arg-type]
            resource_server_url=url + "/mcp",  # type: ignore[arg-type]
            validate_token_resource=False,
        )
        token_verifier = TokenGrants(tokens)
    return MCPServer(
        "ragline",
        instructions="Search, ask and read the code and documents indexed in ragline for this caller.",
        tools=[search, ask, read, sources],
        auth=auth,
        token_verifier=token_verifier,
    )
