"""Synthetic vectors with embedding-like structure, and a fast COPY loader for chunks.

Uniform noise is the wrong test for an ANN index: every point is about equally far from
every other, so HNSW looks either perfect or hopeless. Real sentence embeddings are
anisotropic (a shared mean direction), most of their variance lives in a few dozen
directions, and they cluster by topic. :class:`EmbeddingSpace` draws from a Gaussian mixture
with those three properties and normalises, like e5 does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import psycopg


@dataclass
class EmbeddingSpace:
    dim: int = 384
    clusters: int = 200
    rank: int = 32
    seed: int = 7

    def __post_init__(self) -> None:
        rng = np.random.default_rng(self.seed)
        self.mean = rng.standard_normal(self.dim)
        self.mean *= 2.4 / np.linalg.norm(self.mean)  # anisotropy: random pairs have cosine ~0.55
        q, _ = np.linalg.qr(rng.standard_normal((self.dim, self.rank)))
        self.basis = q.T  # (rank, dim), orthonormal rows
        self.scales = 1.0 / np.sqrt(1 + np.arange(self.rank))  # decaying spectrum
        self.centers = (rng.standard_normal((self.clusters, self.rank)) * self.scales) @ self.basis

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` unit vectors (float32): mean + topic centre + low-rank spread + isotropic noise."""
        topic = rng.integers(self.clusters, size=n)
        low_rank = (rng.standard_normal((n, self.rank)) * self.scales * 0.45) @ self.basis
        noise = rng.standard_normal((n, self.dim)) * (0.35 / np.sqrt(self.dim))
        x = self.mean + self.centers[topic] + low_rank + noise
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def structure_stats(vectors: np.ndarray, rng: np.random.Generator, sample: int = 500) -> dict[str, float]:
    """Mean cosine of random pairs and of each point's nearest neighbour (shows it is not noise)."""
    idx = rng.choice(len(vectors), size=min(sample, len(vectors)), replace=False)
    s = vectors[idx]
    sims = s @ vectors.T
    sims[np.arange(len(idx)), idx] = -1
    nn = np.sort(sims, axis=1)[:, -10:]
    rand = vectors[rng.integers(len(vectors), size=len(idx))]
    return {
        "random_pair_cosine": round(float(np.mean(np.sum(s * rand, axis=1))), 3),
        "nn1_cosine": round(float(np.mean(nn[:, -1])), 3),
        "nn10_cosine": round(float(np.mean(nn[:, 0])), 3),
    }


def load_chunks(
    conn: psycopg.Connection,
    tenant: str,
    vectors: np.ndarray,
    acl: list[str],
    chunks_per_doc: int = 10,
    start: int = 0,
    texts: list[str] | None = None,
    doc_acls: list[list[str]] | None = None,
) -> int:
    """COPY documents and chunks (binary) for one tenant; returns rows written. Caller commits.
    ``texts``: the chunks' contents (cycled), for benchmarks that search words; else a numbered
    placeholder. ``doc_acls``: each document's own groups (its chunks carry them), else ``acl``."""
    n = len(vectors)
    n_docs = (n + chunks_per_doc - 1) // chunks_per_doc
    acls = doc_acls if doc_acls is not None else [acl] * n_docs
    hashes = [hashlib.sha256(t.encode()).hexdigest() for t in texts] if texts else []
    with conn.cursor() as cur:
        with cur.copy("COPY documents (tenant, doc_id, status, acl, chunk_count) FROM STDIN") as copy:
            for d in range(n_docs):
                copy.write_row((tenant, f"doc-{start + d}", "ready", acls[d], chunks_per_doc))
        with cur.copy(
            "COPY chunks (tenant, doc_id, chunk_no, content, content_hash, embedding, acl)"
            " FROM STDIN WITH (FORMAT BINARY)"
        ) as copy:
            copy.set_types(["text", "text", "int4", "text", "text", "vector", "text[]"])
            for i in range(n):
                if texts:
                    text, digest = texts[i % len(texts)], hashes[i % len(texts)]
                else:
                    text = f"синтетический фрагмент {start * chunks_per_doc + i}"
                    digest = hashlib.sha256(text.encode()).hexdigest()
                d = i // chunks_per_doc
                copy.write_row(
                    (tenant, f"doc-{start + d}", i % chunks_per_doc, text, digest, vectors[i], acls[d])
                )
    return n
