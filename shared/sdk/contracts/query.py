"""Payloads and results of the query pool's tasks: what a chat backend sends and receives."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from ragline.shared.sdk.contracts.common import Group, Ident, Pattern, Text, check_vector, unpack_vector


class SearchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: Text = Field(default="", max_length=4000)
    tenant: Ident
    groups: list[Group] = Field(
        max_length=1000, description="caller's ACL groups; empty means nothing is visible"
    )
    k: int = Field(default=10, ge=1, le=200)
    mode: Literal["hybrid", "vector", "lexical", "lexical_code", "exact"] = Field(
        default="hybrid",
        description="'exact' returns the chunks of `doc_ids` / `paths` without ranking; 'lexical_code' is"
        " the lexical code fallback: lexical search of the source layer only, no statement at all when"
        " the query has no terms",
    )
    #: a precomputed query embedding (benchmarks, callers that embed themselves): skips the embedder
    query_vector: Annotated[
        list[float] | None,
        BeforeValidator(unpack_vector, json_schema_input_type=list[float] | str | None),
        AfterValidator(check_vector),
    ] = Field(
        default=None,
        min_length=1,
        max_length=4096,
        description="finite, of the index's dimension: a list of numbers, or its float32 values"
        " little-endian in base64 (ragline.pack_vector; a quarter of the list's length)",
    )
    # --- filters (retrieval contract); path patterns are LIKE-escaped ---------------------------
    layers: list[Pattern] = Field(default_factory=list, max_length=50, description="only these source layers")
    path_prefixes: list[Pattern] = Field(
        default_factory=list, max_length=100, description="include paths with a prefix"
    )
    exclude_path_prefixes: list[Pattern] = Field(default_factory=list, max_length=100)
    exclude_like_patterns: list[Pattern] = Field(
        default_factory=list,
        max_length=100,
        description="globs: * any run, ? one character; all else literal",
    )
    prefer_path_prefixes: list[Pattern] = Field(
        default_factory=list, max_length=100, description="ranking bonus"
    )
    prefer_like_patterns: list[Pattern] = Field(
        default_factory=list, max_length=100, description="globs; bonus"
    )
    prefer_non_tests: bool = Field(default=False, description="penalise test paths in the ranking")
    # --- structural ranking (docs/code.md) -------------------------------------------------------
    structure: bool | None = Field(
        default=None,
        description="re-score hybrid and vector hits by structure (files and identifiers the question"
        " names, definitions, related_code, layer ranks); None: RAGLINE_CODE_STRUCTURE",
    )
    ordering: Literal["score", "contract"] = Field(
        default="score",
        description="'contract': the retrieval contract's order (prefer_bonus, test_penalty, layer_rank,"
        " lexical_rank, structural score, distance) instead of the score",
    )
    # --- exact lookup (mode 'exact') -------------------------------------------------------------
    doc_ids: list[Pattern] = Field(default_factory=list, max_length=1000)
    paths: list[Pattern] = Field(default_factory=list, max_length=1000, description="empty ones are dropped")
    rerank: bool | None = Field(default=None, description="None: rerank when a reranker is configured")

    @field_validator("groups")
    @classmethod
    def _groups(cls, v: list[str]) -> list[str]:
        return sorted(set(v))


class Hit(BaseModel):
    """One retrieved chunk. ``span_start``, ``span_end`` and ``title`` are the retrieval contract's
    row fields (design seed 000); they repeat ``metadata``'s line span and ``heading`` at the top
    level, filled by :meth:`_contract_fields` from whichever a hit was built with, so every path that
    makes or reads a hit (retrieval, rerank, a client decoding a reply of an older worker) has them."""

    doc_id: str
    chunk_no: int
    path: str = ""
    heading: str = ""
    title: str | None = Field(
        default=None, description="the chunk's title: its heading path (`heading`); None when it has none"
    )
    span_start: int | None = Field(
        default=None, description="first line of a code chunk (1-based, `metadata.span_start`); None for text"
    )
    span_end: int | None = Field(
        default=None, description="last line of a code chunk (inclusive, `metadata.span_end`); None for text"
    )
    content: str = ""
    context: str = ""
    page: int | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    layer: str = ""
    score: float = Field(
        default=0.0, description="final ranking score (fused + bonus - penalty, or rerank score)"
    )
    fused_score: float | None = Field(
        default=None,
        description="the fusion policy's score before bonuses, in RRF units: weighted RRF, or a convex"
        " combination of normalised scores scaled by 1 / (rrf_k + 1) (query/retrieval/fusion.py)",
    )
    vector_rank: int | None = None
    vector_distance: float | None = None
    vector_z: float | None = Field(
        default=None,
        description="the vector similarity standardised against the question's background in the"
        " searched scope (the vector list's candidates past its first ten): how far the hit stands out,"
        " in no model's cosine scale; None without enough candidates (query/retrieval/ranking.py)",
    )
    lexical_rank: int | None = None
    lexical_score: float | None = None
    prefer_bonus: float = 0.0
    test_penalty: float = 0.0
    structural_score: float | None = Field(
        default=None, description="bonus of the structural ranking, already in `score`"
    )
    layer_rank: int | None = Field(
        default=None,
        description="the layer's rank in the retrieval contract's order: source, symbols, docs, tests (query/retrieval/structure.py LAYER_ORDER)",
    )
    named_rank: int | None = Field(
        default=None, description="rank among the chunks of files the question names (structural ranking)"
    )
    rerank_score: float | None = None

    @model_validator(mode="after")
    def _contract_fields(self) -> Hit:
        """The contract's top-level fields from where ingestion keeps them, unless given."""
        if self.title is None and self.heading:
            self.title = self.heading
        for key in ("span_start", "span_end"):
            value = self.metadata.get(key)
            if getattr(self, key) is None and isinstance(value, int) and not isinstance(value, bool):
                setattr(self, key, value)
        return self


class FileHit(BaseModel):
    """A file of a code search's hits with the evidence that ranks it (query/retrieval/file_rank.py): the
    answer to "which file" is a file, and a file with several matching chunks, or named by the
    question's traceback, outranks one lucky chunk."""

    path: str
    score: float = Field(
        description="the file's score: its evidence (chunks + frame) in units of the best hit's score, or,"
        " where the search had a vector and a lexical list, that order fused with the lexical list's files"
        " (reciprocal rank, query/retrieval/file_rank.py)"
    )
    chunks: float = Field(default=0.0, description="its hits' scores, normalised and summed with decay")
    frame: float = Field(default=0.0, description="a traceback frame is in it, the deepest weighing 1")
    first_hit: int | None = Field(
        default=0,
        ge=0,
        description="the position of its first hit among `hits`; null for a file listed from a single"
        " list's leads alone (the vector or the lexical list's first files)",
    )
    reserved: bool = Field(
        default=False,
        description="placed by a single list's floor (query/retrieval/file_rank.py): the vector or the"
        " lexical list's n-th file is listed within the first 2n + 1 files, here above where the fused"
        " order put it, or absent from it",
    )


class SearchResponse(BaseModel):
    hits: list[Hit]
    files: list[FileHit] = Field(
        default_factory=list,
        description="a code search's files, best first (RAGLINE_CODE_FILE_RANK, query/retrieval/file_rank.py);"
        " empty when no hit is code or the file ranking is off",
    )
    degraded: bool = False
    degraded_reasons: list[str] = Field(default_factory=list)
    unembedded_rows: int = Field(
        default=0,
        ge=0,
        description="rows in the caller's scope stored before their vectors (RAGLINE_INGEST_DEFER_VECTORS):"
        " the vector search cannot see them yet, the lexical search finds them; counted when the"
        " search ran a vector search",
    )
    lexical_only_rows: int | None = Field(
        default=None,
        ge=0,
        description="rows in the caller's scope that the embedding budget never embeds"
        " (RAGLINE_INGEST_LEXICAL_ONLY_LAYERS, the symbol records and tests by default): found by the"
        " lexical search and the structural ranking, by design; not counted in unembedded_rows, not a"
        " degradation; counted only when the search ran a vector search while rows of the scope"
        " await their vectors (they are left out of vector_share), null otherwise: counting them"
        " would read each of them on every search (`ragline status` counts them per tenant)",
    )
    vectors_complete: bool = Field(
        default=True,
        description="false while unembedded_rows > 0: hybrid search is lexical-only for those rows",
    )
    vector_share: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="the share of the caller's scope the vector search could see (1 - unembedded rows /"
        " rows the budget embeds); the vector list's fusion weight is scaled by it, so a partly embedded"
        " scope ranks mostly by the lexical list",
    )
    corpus_names: list[str] = Field(
        default_factory=list,
        description="the names of the collection the question asks about (and its edition) that both"
        " lists searched without, within that collection's documents (RAGLINE_RETRIEVAL_CORPUS_TERMS)",
    )
    timings_ms: dict[str, float] = Field(default_factory=dict)
    #: the first chunk of each of the first files of the hybrid search's single lists (vector,
    #: lexical), which the file ranking keeps a place for (query/retrieval/file_rank.py); kept in
    #: the worker, never sent
    _list_leads: list[list[Hit]] = PrivateAttr(default_factory=list)

    @property
    def list_leads(self) -> list[list[Hit]]:
        return self._list_leads

    def with_list_leads(self, leads: list[list[Hit]]) -> SearchResponse:
        self._list_leads = leads
        return self


#: the most characters one candidate of a rerank request may carry (its content, context, heading,
#: path and metadata together): a chat turn's limit, and five times a chunk of the default hard limit
RERANK_HIT_MAX_CHARS = 20_000


class RerankRequest(BaseModel):
    """Rerank given candidates (e.g. the hits of a retrieve call) for a query: a tenant's question
    like a search, through the same admission and at most as many candidates as a search returns."""

    model_config = ConfigDict(extra="forbid")

    query: Text = Field(min_length=1, max_length=4000)
    tenant: Ident = Field(description="the tenant asking: its admission (rate, questions in flight) applies")
    hits: list[Hit] = Field(
        max_length=200,
        description=f"at most a search's k; each at most {RERANK_HIT_MAX_CHARS} characters"
        " (content, context, heading, path and metadata)",
    )
    top_k: int | None = Field(default=None, ge=1, le=200, description="default: RAGLINE_RERANK_TOP_K")
    threshold: float | None = Field(
        default=None,
        description="hits the provider scores below this are dropped; default: the server's (query/service.py RERANK_THRESHOLD)",
    )

    @field_validator("hits")
    @classmethod
    def _bounded_hits(cls, hits: list[Hit]) -> list[Hit]:
        for i, h in enumerate(hits):
            size = len(h.content) + len(h.context) + len(h.heading) + len(h.path) + len(repr(h.metadata))
            if size > RERANK_HIT_MAX_CHARS:
                raise ValueError(f"hit {i} carries {size} characters, more than {RERANK_HIT_MAX_CHARS}")
        return hits


class RerankResponse(SearchResponse):
    """The same shape as a search response: the reranked hits."""


class ChatTurn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"]
    content: Text = Field(max_length=20_000)


class AskRequest(SearchRequest):
    k: int = Field(default=5, ge=1, le=50)
    history: list[ChatTurn] = Field(
        default_factory=list,
        max_length=50,
        description="earlier turns; used to rewrite a follow-up into a standalone question",
    )
    agentic: bool | None = Field(default=None, description="None: RAGLINE_ANSWER_AGENTIC")
    expand: Literal["off", "section", "document"] | None = Field(
        default=None,
        description="what the answer reads beyond the chunks found: their sections or whole documents,"
        " for generators with a large context (query/retrieval/expand.py); None: RAGLINE_ANSWER_EXPAND",
    )
    stream: bool = Field(
        default=False,
        description="also publish the answer as it is generated: deltas, then the final response, into"
        " the Redis stream named after the task id (names.answer_stream_key; shared/sdk/answer_stream.py)",
    )


class Citation(BaseModel):
    """One source an answer cites as [n], with what a chat UI shows beside it.

    The fields after ``path`` were added later; a client that knows only the first five keeps
    working (pydantic ignores unknown fields by default).
    """

    n: int
    doc_id: str
    chunk_no: int
    heading: str = Field(default="", description="the heading path, as `heading_path` (first contract)")
    path: str = ""
    page: int | None = Field(default=None, description="page of the cited chunk (PDF, Word), from 1")
    heading_path: str = Field(default="", description="headings above the chunk, outermost first, ' › '")
    snippet: str = Field(
        default="",
        description="the sentences of the chunk the answer used, or its opening; at most 400 characters",
    )
    start_line: int | None = Field(default=None, description="first line of a code chunk, from 1")
    end_line: int | None = Field(default=None, description="last line of a code chunk")
    locator: str = Field(
        default="",
        description="where to look, ready to show, in the answer's language: 'path:12-40' (code), "
        "'p. 11' / 'с. 11' (paged), '§ Heading › Sub' (sections), else the path",
    )


class AskResponse(BaseModel):
    answer: str
    citations: list[Citation]
    #: links and images the answer carried to URLs that are not in the documents it cites: taken
    #: out of ``answer`` (an image entirely, a link down to its text) so a chat UI fetches nothing
    #: a poisoned document asked for
    removed_links: list[str] = Field(default_factory=list)
    no_answer: bool = False
    degraded: bool = False
    degraded_reasons: list[str] = Field(default_factory=list)
    unembedded_rows: int = Field(
        default=0, ge=0, description="as in the search response: rows the retrieval found only lexically"
    )
    vectors_complete: bool = Field(default=True, description="as in the search response")
    #: why there is no answer (nothing passed the threshold, citations rejected, generator failed)
    reason: str | None = None
    #: the agentic loop stopped on its budget, not because the evidence was enough
    partial: bool = False
    #: how far to trust the answer, in [0, 1]: the cited chunks' match to the question and the share
    #: of its sentences the groundedness check found supported (query/answer/grounding.py); None when no
    #: answer was generated. Answers below RAGLINE_ANSWER_MIN_CONFIDENCE come back as no_answer
    confidence: float | None = Field(default=None, ge=0, le=1)
    #: sentences taken out of ``answer`` because the documents they cite do not support them
    removed_sentences: list[str] = Field(default_factory=list)
    timings_ms: dict[str, float] = Field(default_factory=dict)
    trace: dict[str, Any] = Field(default_factory=dict)


class SourcesRequest(BaseModel):
    """What is indexed for a caller: its tenant's sources, counted over the documents its groups read."""

    model_config = ConfigDict(extra="forbid")

    tenant: Ident
    groups: list[Group] = Field(max_length=1000, description="caller's ACL groups; empty: nothing is visible")


class SourceInfo(BaseModel):
    """One source (a git source or ingested folder, ``documents.metadata.source``; '' for documents
    sent without one) as far as the caller may read it."""

    source: str
    documents: int
    chunks: int
    layers: list[str] = Field(default_factory=list)
    commits: list[str] = Field(default_factory=list, description="the git commits its documents come from")
    updated_at: str | None = Field(default=None, description="its latest document's ingest time, ISO 8601")


class SourcesResponse(BaseModel):
    sources: list[SourceInfo]
    documents: int = 0
    chunks: int = 0
