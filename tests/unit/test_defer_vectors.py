"""Which documents are stored before their vectors: the policy × document kind matrix, and the
fill's batch statement (rows without any vector first, then source, symbols, the rest)."""

import pytest

from ragline.ingest.pipeline import defers_vectors
from ragline.ingest.reembed import BATCH_SQL, FILL_ROWS, REEMBED_ROWS
from ragline.shared.worker import pending_vectors

#: (policy, what it defers of: a repository's source file, a repository's doc, a source file of a
#: folder or upload, a document that is no repository's)
DEFERS = {
    "repositories": (True, True, True, False),
    "code": (True, False, True, False),
    "all": (True, True, True, True),
    "none": (False, False, False, False),
}
KINDS = [(True, True), (False, True), (True, False), (False, False)]  # (code, repository)


@pytest.mark.parametrize("policy", sorted(DEFERS))
@pytest.mark.parametrize("kind", range(len(KINDS)), ids=["repo-code", "repo-doc", "code", "doc"])
def test_the_policy_decides_per_document_kind(policy, kind):
    code, repository = KINDS[kind]
    assert defers_vectors(policy, code, repository) is DEFERS[policy][kind]


def test_every_policy_of_the_setting_is_in_the_matrix():
    from typing import get_args

    from ragline.shared.config.settings import IngestSettings

    assert set(get_args(IngestSettings.model_fields["defer_vectors"].annotation)) == set(DEFERS)
    assert IngestSettings().defer_vectors == "repositories"


def test_the_fill_and_the_reembedding_share_one_batch_statement():
    fill, reembed = BATCH_SQL.format(rows=FILL_ROWS), BATCH_SQL.format(rows=REEMBED_ROWS)
    assert pending_vectors.FILL_PREDICATE in fill and pending_vectors.FILL_PREDICATE not in reembed
    assert "c.embedding IS NOT NULL" in REEMBED_ROWS  # disjoint: a row is the fill's or the re-embedding's
    order = fill[fill.index("ORDER BY") :]
    assert order.index("c.embedding IS NOT NULL") < order.index("%(source)s") < order.index("%(symbols)s")


@pytest.mark.parametrize(
    ("seconds_per_batch", "budget", "left", "batches"),
    [
        (1.0, 100.0, 10, 4),  # a quick machine: the batch count ends the task
        (160.0, 300.0, 10, 2),  # a loaded one: the second batch crosses the budget, no third starts
        (700.0, 300.0, 10, 1),  # one batch slower than the budget still runs (at least one)
        (1.0, 100.0, 2, 2),  # nothing left: the rows end it
        (1.0, 0.0, 10, 1),
    ],
)
def test_a_fill_starts_no_batch_after_its_time_budget(seconds_per_batch, budget, left, batches):
    from ragline.ingest.reembed import fill_batches

    now = [0.0]
    ran = []

    def batch():
        if len(ran) == left:
            return None
        ran.append(1)
        now[0] += seconds_per_batch
        return 128, 120

    written, sent, gave_way = fill_batches(batch, 4, budget, 0.0, clock=lambda: now[0])
    assert len(ran) == batches and (written, sent) == (128 * batches, 120 * batches)
    assert gave_way is False


@pytest.mark.parametrize(("job_after", "batches"), [(None, 4), (0, 1), (2, 3)])
def test_a_fill_gives_way_after_the_batch_in_which_a_job_arrived(job_after, batches):
    """``give_way`` is asked after every batch: once it says so, no further batch starts (the one
    running finishes), and the run says it gave way; while it says no, the batch count ends the run."""
    from ragline.ingest.reembed import fill_batches

    ran: list[int] = []

    def batch():
        ran.append(1)
        return 128, 128

    written, sent, gave_way = fill_batches(
        batch, 4, 1e9, 0.0, clock=lambda: 0.0, give_way=lambda: job_after is not None and len(ran) > job_after
    )
    assert len(ran) == batches and written == sent == 128 * batches
    assert gave_way is (job_after is not None)


# ------------------------------------------------------------------------------ the embedding budget
SOURCE, SYMBOLS, TESTS = "C0_SOURCE_CHUNKS", "C1_SYMBOLS", "C0_TEST_CHUNKS"


@pytest.mark.parametrize(
    ("lexical_only", "embedded"),
    [
        ((SYMBOLS,), {SOURCE, TESTS, "docs"}),
        ((), {SOURCE, SYMBOLS, TESTS, "docs"}),
        ((SYMBOLS, TESTS, "docs"), {SOURCE}),
    ],
    ids=["symbols-lexical", "everything-embedded", "source-only"],
)
def test_the_budget_decides_per_layer_and_every_path_reads_it(lexical_only, embedded):
    """What the ingest embeds and caches (``vector_texts``), what it reports as awaiting the fill,
    and the statement parameters of the fill, search and status counts: one rule."""
    from ragline.ingest.chunk import Chunk
    from ragline.ingest.pipeline import Prepared
    from ragline.shared.sdk.contracts import IngestRequest

    budget = pending_vectors.VectorBudget(frozenset(lexical_only))
    layers = [SOURCE, SYMBOLS, TESTS, "docs"]
    assert {layer for layer in layers if budget.embeds(layer)} == embedded
    assert budget.params() == {"lexical_only_layers": sorted(lexical_only)}

    req = IngestRequest(tenant="t", doc_id="r/a.py", acl=["dev"], content="x", fmt="text")
    chunks = [Chunk(n, f"row {n}", ()) for n in range(len(layers))]
    p = Prepared(req, "h", "r/a.py", "py", "", chunks, [""] * len(layers), layer=SOURCE, chunk_layers=layers)
    texts = p.vector_texts(budget)
    assert [t is not None for t in texts] == [layer in embedded for layer in layers]
    assert [t for t in texts if t is not None] == [
        t for t, layer in zip(p.texts, layers, strict=True) if layer in embedded
    ]
    # stored with no vector at all: only the rows the budget embeds wait for the fill
    assert p.awaiting([None] * len(layers), budget) == len(embedded)
    assert p.awaiting([None if layer == SOURCE else object() for layer in layers], budget) == 1


def test_the_default_budget_keeps_the_symbol_records_and_the_tests_lexical():
    """The default the measurements chose (docs/evaluation.md, "The embedding budget" and "What the
    tests layer's vectors buy"): source chunks and prose get vectors, symbol records and tests not."""
    from ragline.shared.config.settings import Settings

    s = Settings()
    budget = pending_vectors.VectorBudget.from_settings(s)
    assert not budget.embeds(s.code.symbols_layer) and not budget.embeds(s.code.tests_layer)
    assert budget.embeds(s.code.source_layer) and budget.embeds("docs")


def test_awaiting_and_lexical_only_rows_are_disjoint_predicates():
    """A row without a vector is either the fill's or the budget's lexical-only, never both; the
    fill picks only the former."""
    assert "<> ALL(%(lexical_only_layers)s" in pending_vectors.PREDICATE
    assert "= ANY(%(lexical_only_layers)s" in pending_vectors.LEXICAL_ONLY
    # the fill's form of PREDICATE, by layer (tests/integration/test_deferred_vectors.py checks
    # that both select the same rows)
    assert FILL_ROWS == pending_vectors.FILL_PREDICATE
    from ragline.query.retrieval import sql

    # a search counts the awaiting rows by ranges of layers (the same rows: the integration tests)
    # and the lexical-only ones by LEXICAL_ONLY, in the pass over the scope it makes while some await
    budget = pending_vectors.VectorBudget(frozenset({"C1_SYMBOLS", "C0_TEST_CHUNKS"}))
    assert budget.awaiting() in sql.awaiting_sql(budget) and "<> ALL" not in sql.awaiting_sql(budget)
    assert pending_vectors.LEXICAL_ONLY in sql.SCOPE_ROWS_SQL


@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_the_awaiting_ranges_are_the_gaps_between_the_lexical_only_layers(n):
    """One range below the first lexical-only layer, one between each two, one above the last,
    bounded by the elements of the sorted parameter (code-point order, as ``COLLATE "C"``)."""
    budget = pending_vectors.VectorBudget(frozenset(f"L{i}" for i in range(n)))
    predicate = budget.awaiting()
    assert predicate.startswith("c.embedding IS NULL")
    assert predicate.count('c.layer COLLATE "C" <') == n and predicate.count('c.layer COLLATE "C" >') == n
    assert predicate.count(" OR ") == n  # n + 1 ranges
    assert [f"[{i}]" in predicate for i in range(1, n + 2)] == [True] * n + [False]
    assert budget.params()["lexical_only_layers"] == sorted(budget.lexical_only)
