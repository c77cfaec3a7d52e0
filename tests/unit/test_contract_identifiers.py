"""Identifiers and vectors are refused in the contracts, as ``invalid payload``, never as an
internal error: every contract field that carries a tenant, groups, doc ids or a path refuses
control and invisible formatting characters, and a query vector must be finite and, where the
worker validates, of the index's dimension."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from pydantic import BaseModel, ValidationError

from ragline.shared.sdk import contracts

BAD = {
    "NUL": "a\x00b",
    "newline": "a\nb",
    "ESC": "a\x1b[31mb",
    "RLO": "a\u202eb",
    "LRI": "a\u2066b",
    "RLM": "a\u200fb",
    "zero width space": "a\u200bb",
    "line separator": "a\u2028b",
}

SEARCH = {"query": "q", "tenant": "t", "groups": ["g"]}
INGEST = {"tenant": "t", "doc_id": "d.md", "content": "text", "path": "d.md", "acl": ["g"], "uri": None}
SYNC = {"tenant": "t", "doc_id": "d", "acl": ["g"], "version": 1, "producer": "p"}
EVENT = {"type": "upsert", "tenant": "t", "doc_id": "d", "uri": "https://x/d", "version": 1, "acl": ["g"]}

#: (model, a valid payload, the field to spoil, whether it is a list); every identifier-carrying field
CASES = [
    (contracts.SearchRequest, SEARCH, "tenant", False),
    (contracts.SourcesRequest, {"tenant": "t", "groups": ["g"]}, "tenant", False),
    (contracts.SourcesRequest, {"tenant": "t", "groups": ["g"]}, "groups", True),
    (contracts.SearchRequest, SEARCH, "groups", True),
    (contracts.SearchRequest, SEARCH, "doc_ids", True),
    (contracts.SearchRequest, SEARCH, "paths", True),
    (contracts.SearchRequest, SEARCH, "layers", True),
    (contracts.SearchRequest, SEARCH, "path_prefixes", True),
    (contracts.AskRequest, SEARCH, "tenant", False),
    (contracts.RerankRequest, {"query": "q", "tenant": "t", "hits": []}, "tenant", False),
    (contracts.AskRequest, SEARCH, "groups", True),
    (contracts.AskRequest, SEARCH, "doc_ids", True),
    (contracts.AskRequest, SEARCH, "paths", True),
    (contracts.IngestRequest, INGEST, "tenant", False),
    (contracts.IngestRequest, INGEST, "doc_id", False),
    (contracts.IngestRequest, INGEST, "acl", True),
    (contracts.IngestRequest, INGEST, "path", False),
    (contracts.IngestRequest, INGEST, "layer", False),
    (contracts.AclSyncItem, SYNC, "tenant", False),
    (contracts.AclSyncItem, SYNC, "doc_id", False),
    (contracts.AclSyncItem, SYNC, "acl", True),
    (contracts.AclSyncItem, SYNC, "producer", False),
    (contracts.AclSyncItem, {**SYNC, "doc_id": None, "path_prefix": "hr/"}, "path_prefix", False),
    (contracts.IngestEvent, EVENT, "tenant", False),
    (contracts.IngestEvent, EVENT, "doc_id", False),
    (contracts.IngestEvent, EVENT, "acl", True),
    (contracts.IngestEvent, EVENT, "path", False),
    (contracts.IngestEvent, {**EVENT, "producer": "p"}, "producer", False),
    (
        contracts.IngestEvent,
        {"type": "push", "tenant": "t", "source": "s", "after": "main", "version": 1},
        "source",
        False,
    ),
]

#: field names that carry identifiers, wherever a request contract has them
IDENTIFIER_FIELDS = {
    "tenant",
    "groups",
    "doc_id",
    "doc_ids",
    "paths",
    "acl",
    "path",
    "path_prefix",
    "producer",
    "source",
}
REQUESTS = [
    contracts.SearchRequest,
    contracts.SourcesRequest,
    contracts.AskRequest,
    contracts.RerankRequest,
    contracts.IngestRequest,
    contracts.IngestBatchRequest,
    contracts.AclSyncItem,
    contracts.AclSyncRequest,
    contracts.IngestEvent,
]


def test_every_identifier_field_of_every_request_contract_is_in_the_matrix():
    covered = {(m, f) for m, _, f, _ in CASES}
    for model in REQUESTS:
        for name in model.model_fields:
            if name in IDENTIFIER_FIELDS:
                assert (model, name) in covered, f"{model.__name__}.{name} has no case"


@pytest.mark.parametrize("bad", list(BAD), ids=list(BAD))
@pytest.mark.parametrize(
    "model, payload, name, many", CASES, ids=[f"{m.__name__}.{f}" for m, _, f, _ in CASES]
)
def test_control_and_formatting_characters_are_refused(model: type[BaseModel], payload, name, many, bad):
    model.model_validate(payload)  # the payload itself is valid
    spoiled = {**payload, name: [BAD[bad]] if many else BAD[bad]}
    with pytest.raises(ValidationError) as err:
        model.model_validate(spoiled)
    [problem] = err.value.errors(include_url=False)
    assert problem["loc"][0] == name and "may not hold" in problem["msg"], problem
    assert "\x00" not in problem["msg"] and "\u202e" not in problem["msg"]  # the message shows escapes


def test_batches_refuse_a_bad_identifier_in_any_item():
    with pytest.raises(ValidationError):
        contracts.IngestBatchRequest.model_validate({"documents": [INGEST, {**INGEST, "tenant": "a\x00"}]})
    with pytest.raises(ValidationError):
        contracts.AclSyncRequest.model_validate({"items": [SYNC, {**SYNC, "acl": ["g\u202e"]}]})


def test_ordinary_names_stay_accepted():
    from ragline.shared.sdk.contracts.common import identifier_problem

    for name in ("acme", "Отдел кадров", "hr/отпуск 2026.md", "a-b_c.d", "東京", "emoji 📄", "tab\tless"[:3]):
        assert identifier_problem(name) is None
        contracts.SearchRequest.model_validate({**SEARCH, "tenant": name, "groups": [name]})


def test_the_problem_names_the_characters_and_escapes_the_text():
    from ragline.shared.sdk.contracts.common import escaped, identifier_problem

    why = identifier_problem("a\u202eb\n.md", "a file name")
    assert why == (
        "'a\\u202eb\\u000a.md' has characters a file name may not hold"
        " (U+202E RIGHT-TO-LEFT OVERRIDE, U+000A control character)"
    )
    assert escaped("ok") == "ok"


SERVER = {"now": 1_800_000_000.0, "max_clock_skew_s": 300.0, "embed_dim": 4}


@pytest.mark.parametrize(
    "vector, where, message",
    [
        ([0.1, math.nan, 0.2, 0.3], None, "NaN or infinity"),
        ([0.1, math.inf, 0.2, 0.3], None, "NaN or infinity"),
        ([0.1, 0.2, 0.3], SERVER, "has 3 dimensions; the index stores 4"),
        ([0.1] * 5, SERVER, "has 5 dimensions"),
    ],
)
def test_query_vectors_are_finite_and_of_the_index_dimension(vector, where, message):
    """Each rule holds for the list and for the packed form (``pack_vector``) alike."""
    for model in (contracts.SearchRequest, contracts.AskRequest):
        for form in (vector, contracts.pack_vector(vector)):
            with pytest.raises(ValidationError, match=message):
                model.model_validate({**SEARCH, "query_vector": form}, context=where)
        for form in ([0.1, 0.2, 0.3, 0.4], contracts.pack_vector([0.1, 0.2, 0.3, 0.4])):
            model.model_validate({**SEARCH, "query_vector": form}, context=SERVER)


@pytest.mark.parametrize(
    "values",
    [
        [0.1, -0.2, 0.3, 0.4],
        [1e-30, -3.4e38, 0.0, -0.0],
        np.random.default_rng(3).standard_normal(384).tolist(),
    ],
)
def test_a_packed_vector_is_the_list_of_its_float32_values(values):
    """The packed form validates to what the search uses either way: the float32 values (the
    index stores float32; the worker converts the list form to float32 too)."""
    as_float32 = np.asarray(values, dtype=np.float32)
    packed = contracts.pack_vector(values)
    for form in (packed, contracts.pack_vector(as_float32)):
        req = contracts.SearchRequest.model_validate({**SEARCH, "query_vector": form})
        assert np.array_equal(np.asarray(req.query_vector, dtype=np.float32), as_float32)
        assert req.query_vector == as_float32.astype(np.float64).tolist()
    listed = contracts.SearchRequest.model_validate({**SEARCH, "query_vector": values})
    assert np.array_equal(np.asarray(listed.query_vector, dtype=np.float32), as_float32)
    if len(values) > 100:  # a quarter of the JSON list, give or take the digits
        assert len(packed) < len(json.dumps(values)) / 2


@pytest.mark.parametrize(
    "packed, message",
    [("not base64!", "must be base64"), ("AAA=", "whole float32 values: 2 bytes"), ("", "at least 1 item")],
)
def test_a_packed_vector_that_does_not_decode_is_refused(packed, message):
    with pytest.raises(ValidationError, match=message):
        contracts.SearchRequest.model_validate({**SEARCH, "query_vector": packed})


def test_a_nul_in_a_question_is_refused():
    for model, payload in (
        (contracts.SearchRequest, {**SEARCH, "query": "a\x00b"}),
        (contracts.RerankRequest, {"query": "a\x00", "hits": []}),
        (contracts.AskRequest, {**SEARCH, "history": [{"role": "user", "content": "\x00"}]}),
    ):
        with pytest.raises(ValidationError, match="NUL"):
            model.model_validate(payload)


@pytest.mark.parametrize(
    "payload",
    [
        {**SEARCH, "tenant": "acme\x00"},
        {**SEARCH, "groups": ["staff\x00"]},
        {**SEARCH, "query_vector": [math.nan] * 384},
        {**SEARCH, "query_vector": [0.1] * 383},
    ],
    ids=["NUL tenant", "NUL group", "NaN vector", "short vector"],
)
def test_query_tasks_answer_invalid_payload_not_internal_error(payload, caplog):
    """Through the task base, with the worker's own dimension (RAGLINE_EMBED_DIM, 384 by default)."""
    from ragline.shared.sdk.names import TASK_QUERY_ASK, TASK_QUERY_RETRIEVE
    from ragline.shared.worker.celery_app import app

    app.loader.import_default_modules()
    for module in app.conf.include:
        __import__(module)
    for task in (TASK_QUERY_RETRIEVE, TASK_QUERY_ASK):
        out = app.tasks[task].apply(args=[payload]).get()
        assert out["ok"] is False and out["error"] == "invalid payload", out
    assert "Traceback" not in caplog.text and "internal error" not in caplog.text


def test_every_code_point_is_judged_by_its_category():
    """The printable shortcut of ``unsafe_characters`` must agree with the category rule on every code
    point, alone and inside an otherwise printable name (a non-printable but safe character, such as
    a no-break space, must not hide an unsafe one after it)."""
    import sys
    import unicodedata

    from ragline.shared.sdk.contracts.common import UNSAFE_CATEGORIES, unsafe_characters

    wrong = [
        hex(cp)
        for cp in range(sys.maxunicode + 1)
        if unsafe_characters(chr(cp))
        != ([chr(cp)] if unicodedata.category(chr(cp)) in UNSAFE_CATEGORIES else [])
    ]
    assert wrong == []
    assert unsafe_characters("отчёт\u00a0q\u202e.md") == ["\u202e"]
    assert unsafe_characters("отчёт\u00a0q.md") == []
