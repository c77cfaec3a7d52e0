"""Embed texts in batches, through a cache keyed by (model, sha256(text)).

An unchanged chunk is never embedded twice: its vector comes from ``embedding_cache``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import psycopg
from psycopg.rows import DictRow

from ragline.shared.worker import metrics as m
from ragline.shared.worker.providers import Embedder


@dataclass
class EmbedResult:
    vectors: list[np.ndarray]
    embedded: int  # texts actually sent to the embedder
    cached: int
    sent: set[bytes] = field(default_factory=set)  # keys of the texts that were sent

    def count_sent(self, texts: list[str], claimed: set[bytes]) -> int:
        return count_sent(texts, self.sent, claimed)


def count_sent(texts: list[str], sent: set[bytes], claimed: set[bytes]) -> int:
    """How many of ``texts`` were sent, each counted for the first document that claims it."""
    n = 0
    for k in {text_key(t) for t in texts}:
        if k in sent and k not in claimed:
            claimed.add(k)
            n += 1
    return n


def text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def as_array(value) -> np.ndarray:
    """pgvector values come back as numpy arrays or ``Vector`` objects depending on the loader."""
    if hasattr(value, "to_numpy"):
        value = value.to_numpy()
    return np.asarray(value, dtype=np.float32)


def batched(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


#: called with the vectors known so far and the keys being sent, after the cache lookup and after
#: every embedding request, with the connection idle (committed): a batch's documents can be stored
#: and reported one by one while later requests are still to come
OnVectors = Callable[[dict[bytes, np.ndarray], set[bytes]], None]


def cached(conn: psycopg.Connection[DictRow], model: str, keys: list[bytes]) -> dict[bytes, np.ndarray]:
    """The cache's vectors of ``model`` for those of ``keys`` it holds (no embedding)."""
    if not keys:
        return {}
    rows = conn.execute(
        "SELECT text_sha256, embedding FROM embedding_cache WHERE model = %s AND text_sha256 = ANY(%s)",
        (model, list(set(keys))),
    ).fetchall()
    return {bytes(r["text_sha256"]): as_array(r["embedding"]) for r in rows}


def cached_vectors(
    conn: psycopg.Connection[DictRow], model: str, texts: list[str]
) -> list[np.ndarray | None]:
    """Per text, its cached vector or None: what a row stored before it is embedded can carry
    already (an unchanged chunk of a changed file keeps its vector)."""
    keys = [text_key(t) for t in texts]
    found = cached(conn, model, keys)
    return [found.get(k) for k in keys]


def embed_with_cache(
    conn: psycopg.Connection[DictRow],
    embedder: Embedder,
    texts: list[str],
    batch_size: int = 128,
    on_vectors: OnVectors | None = None,
) -> EmbedResult:
    keys = [text_key(t) for t in texts]
    found = cached(conn, embedder.model, keys)
    missing: dict[bytes, str] = {}
    for k, t in zip(keys, texts, strict=True):
        if k not in found and k not in missing:
            missing[k] = t
    embedded = 0
    miss_items = list(missing.items())
    if on_vectors is not None:
        conn.commit()
        on_vectors(found, set(missing))
    for batch in batched(miss_items, batch_size):
        vectors = embedder.embed_documents([t for _, t in batch])  # providers record latency and texts
        if len(vectors) != len(batch):
            raise RuntimeError(f"embedder returned {len(vectors)} vectors for {len(batch)} texts")
        embedded += len(batch)
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO embedding_cache (model, text_sha256, embedding) VALUES (%s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                [
                    (embedder.model, k, np.asarray(v, dtype=np.float32))
                    for (k, _), v in zip(batch, vectors, strict=True)
                ],
            )
        conn.commit()
        for (k, _), v in zip(batch, vectors, strict=True):
            found[k] = np.asarray(v, dtype=np.float32)
        if on_vectors is not None:
            on_vectors(found, set(missing))
    m.EMBED_CACHE_HITS.inc(len(texts) - embedded)
    return EmbedResult([found[k] for k in keys], embedded, len(texts) - embedded, set(missing))
