"""Does binary quantisation hold recall on e5 vectors? Recall@10 of pgvector's ``binary_quantize``
(one bit per dimension: positive or not) followed by re-ranking the best ``N`` by the full vectors,
against exact cosine search, on real multilingual-e5-small embeddings.

    RAGLINE_SERVICES_HOME=/tmp/rl-eval python -m bench.binary_quantization TENANT=QUESTIONS.jsonl [...]

Each argument names an eval tenant that ``ragline eval ... --keep`` left (its chunks' stored
vectors are the corpus) and the query set whose questions are embedded here with the configured
embedder. Hamming distance and re-ranking are computed in numpy, exactly as the SQL would rank them
(``binary_quantize(embedding)::bit(384) <~> binary_quantize(q)``, then ``<=>`` on the candidates),
so the number is the quantisation's, not an index's: an HNSW index on the bits can only lose more.
A "centred" variant (bits of ``x - mean(corpus)``) shows what the anisotropy of e5 vectors costs;
pgvector has no centring, it would need a stored centred column. Not part of ``make bench``: it has
no target, it is the measurement behind the storage choice (bench f measures vector and halfvec).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from bench import common

NAME = "binary_quantization"
CANDIDATES = (10, 40, 100, 200, 400)
K = 10


def recall_at_k(corpus: np.ndarray, queries: np.ndarray, bits_c: np.ndarray, bits_q: np.ndarray) -> dict:
    """Mean recall@K of re-ranking the N nearest by Hamming distance, for each N in CANDIDATES."""
    exact = np.argsort(-(queries @ corpus.T), axis=1, kind="stable")[:, :K]
    hamming = (bits_q[:, None, :] != bits_c[None, :, :]).sum(axis=2)
    out = {}
    for n in CANDIDATES:
        cand = np.argsort(hamming, axis=1, kind="stable")[:, :n]
        found = []
        for i, c in enumerate(cand):
            best = c[np.argsort(-(corpus[c] @ queries[i]), kind="stable")[:K]]
            found.append(len(set(best.tolist()) & set(exact[i].tolist())) / K)
        out[str(n)] = round(float(np.mean(found)), 4)
    return out


def measure(tenant: str, questions: Path, limit: int = 300) -> dict:
    from ragline.shared.worker import db
    from ragline.shared.worker.providers import get_embedder

    with db.connection() as conn:
        rows = conn.execute(
            "SELECT embedding::real[] AS e FROM chunks WHERE tenant = %s AND embedding IS NOT NULL", (tenant,)
        ).fetchall()
    corpus = np.array([r["e"] for r in rows], dtype=np.float32)
    texts = [json.loads(line)["query"] for line in questions.read_text(encoding="utf-8").splitlines()][:limit]
    embedder = get_embedder()
    queries = np.array([embedder.embed_query(t) for t in texts], dtype=np.float32)
    mean = corpus.mean(axis=0)
    return {
        "tenant": tenant,
        "questions": str(questions),
        "corpus_vectors": len(corpus),
        "queries": len(queries),
        "positive_share_of_coordinates": round(float((corpus > 0).mean()), 4),
        "recall_at_10_sign_bits": recall_at_k(corpus, queries, corpus > 0, queries > 0),
        "recall_at_10_centred_bits": recall_at_k(corpus, queries, corpus > mean, queries > mean),
    }


def main(argv: list[str]) -> None:
    pairs = [a.split("=", 1) for a in argv]
    data = {
        "benchmark": NAME,
        "candidates": list(CANDIDATES),
        "k": K,
        "machine": common.machine(),
        "sets": [measure(tenant, Path(path)) for tenant, path in pairs],
    }
    common.write_json(data)
    print(json.dumps(data["sets"], indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
