"""The file ranking's vote and floors through the retrieval's own code (query/retrieval/search.py to
query/service.py): a hybrid code search lists the lexical list's first file second even when the
fusion cut every chunk of it; a vector or lexical search has one list alone,
nothing to keep."""

from __future__ import annotations

import numpy as np
import pytest

from bench.synthetic import EmbeddingSpace, load_chunks
from ragline.query import service
from ragline.shared.sdk.contracts import SearchRequest
from ragline.shared.worker import db

TENANT, GROUPS = "t-lexical-reserve", ["dev"]
FILES, NAMED = 120, 77  # one chunk per file; the file whose chunk alone holds the identifier
WORD = "frobnicate_widget"


@pytest.fixture(scope="module")
def question(stack) -> np.ndarray:
    rng = np.random.default_rng(5)
    vectors = EmbeddingSpace(seed=5).sample(FILES + 1, rng)
    q, vectors = vectors[0], vectors[1:].copy()
    vectors[NAMED] = -q  # the farthest row from the question: never in the vector list's first 50
    texts = [f"plain module text {i}" for i in range(FILES)]
    texts[NAMED] = f"def {WORD}(widget): return widget"
    with db.connection() as conn:
        conn.execute("DELETE FROM chunks WHERE tenant = %s", (TENANT,))
        conn.execute("DELETE FROM documents WHERE tenant = %s", (TENANT,))
        load_chunks(conn, TENANT, vectors, GROUPS, chunks_per_doc=1, texts=texts)
        conn.execute("UPDATE documents SET path = 'repo/' || doc_id || '.py' WHERE tenant = %s", (TENANT,))
        conn.execute(
            "UPDATE chunks SET path = 'repo/' || doc_id || '.py', layer = 'C0_SOURCE_CHUNKS' WHERE tenant = %s",
            (TENANT,),
        )
        conn.commit()
    return q


def files(q: np.ndarray, mode: str) -> list:
    req = SearchRequest(
        query=WORD, tenant=TENANT, groups=GROUPS, k=5, mode=mode, query_vector=q.tolist(), rerank=False
    )
    return service.search(req).files


def test_a_hybrid_code_search_keeps_the_lexical_lists_first_file_the_fusion_cut(question):
    hybrid = files(question, "hybrid")
    named = f"repo/doc-{NAMED}.py"
    # the lexical list's 1st file: within 2·1 + 1 by its floor, and 2nd by its vote (the fused
    # hits' first file and it score the same, the hits' order first), so no floor had to move it
    assert [f.path for f in hybrid].index(named) == 1, hybrid
    lead = hybrid[1]
    assert not lead.reserved and lead.first_hit is None  # no chunk of it among the fused hits
    assert named not in [f.path for f in files(question, "vector")]
    lexical = files(question, "lexical")
    assert [(f.path, f.reserved) for f in lexical] == [(named, False)]
