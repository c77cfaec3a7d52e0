"""b. Upsert rows/s through ``ingest/store.py`` against raw binary COPY into the same table.

The upsert path is exactly the pipeline's store stage: per document one transaction with
the advisory lock, the documents row, COPY into the staging table and ``INSERT ... ON
CONFLICT DO UPDATE``, and the delete of chunk numbers past the new count. The baseline is
one binary COPY of the same rows straight into ``chunks`` (documents rows created before
the clock starts, because the foreign key needs them). Both pay for every index on
``chunks``: HNSW, GIN tsv (the generated Russian tsvector), GIN acl, the btrees. Rounds
alternate upsert and COPY so both see a table of the same size and the same machine load.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from bench import common
from bench.synthetic import EmbeddingSpace

NAME = "upsert"
TITLE = "Upsert rows/s (store.py: COPY to staging + ON CONFLICT) vs raw binary COPY"
SMOKE = {"docs_per_round": 3, "chunks_per_doc": 5, "rounds": 2, "preload_rows": 0}
MODEL = "bench-model"
COLUMNS = (
    "tenant, doc_id, chunk_no, path, layer, heading_path, content, context, content_hash, page,"
    " embedding, embed_model, acl, metadata"
)
TYPES = [
    "text",
    "text",
    "int4",
    "text",
    "text",
    "text",
    "text",
    "text",
    "text",
    "int4",
    "vector",
    "text",
    "text[]",
    "jsonb",
]


def _documents(
    tenant: str, n_docs: int, per_doc: int, texts: list[str], space: EmbeddingSpace, rng: np.random.Generator
):
    from ragline.ingest.store import DocumentRecord, StoredChunk

    vecs = space.sample(n_docs * per_doc, rng)
    out = []
    for d in range(n_docs):
        chunks = [
            StoredChunk(
                i,
                texts[(d * per_doc + i) % len(texts)],
                f"Документ {d} › Раздел {i // 3}",
                f"Раздел {i // 3}",
                None,
                vecs[d * per_doc + i],
                {"kind": "text"},
            )
            for i in range(per_doc)
        ]
        rec = DocumentRecord(
            tenant=tenant,
            doc_id=f"doc-{d}",
            source_uri=f"bench://{d}",
            path=f"bench/{d}.md",
            title=f"Документ {d}",
            content_hash=f"h{d}",
            version=1,
            acl=["bench"],
        )
        out.append((rec, chunks))
    return out


def _upsert(docs) -> float:
    from ragline.ingest import store
    from ragline.shared.worker import db

    t = time.perf_counter()
    for rec, chunks in docs:
        with db.connection() as conn, conn.transaction():
            store.lock_document(conn, rec.tenant, rec.doc_id)
            if store.upsert_document(conn, rec, chunks, MODEL) != "stored":
                raise RuntimeError("upsert did not store")
    return time.perf_counter() - t


def _copy(docs) -> float:
    from psycopg.types.json import Jsonb

    from ragline.shared.worker import db

    with db.connection() as conn, conn.cursor() as cur:
        with cur.copy(
            "COPY documents (tenant, doc_id, source_uri, path, title, content_hash, version, acl,"
            " status, embed_model, chunk_count) FROM STDIN"
        ) as copy:
            for rec, chunks in docs:
                copy.write_row(
                    (
                        rec.tenant,
                        rec.doc_id,
                        rec.source_uri,
                        rec.path,
                        rec.title,
                        rec.content_hash,
                        rec.version,
                        rec.acl,
                        "ready",
                        MODEL,
                        len(chunks),
                    )
                )
    t = time.perf_counter()
    with db.connection() as conn, conn.cursor() as cur:
        with cur.copy(f"COPY chunks ({COLUMNS}) FROM STDIN WITH (FORMAT BINARY)") as copy:
            copy.set_types(TYPES)
            for rec, chunks in docs:
                for c in chunks:
                    copy.write_row(
                        (
                            rec.tenant,
                            rec.doc_id,
                            c.chunk_no,
                            rec.path,
                            rec.layer,
                            c.heading_path,
                            c.content,
                            c.context,
                            c.content_hash,
                            c.page,
                            c.embedding,
                            MODEL,
                            rec.acl,
                            Jsonb(c.metadata),
                        )
                    )
    return time.perf_counter() - t


def _count(tenant: str) -> int:
    from ragline.shared.worker import db

    with db.connection() as conn:
        return conn.execute("SELECT count(*) AS n FROM chunks WHERE tenant = %s", (tenant,)).fetchone()["n"]


def run(
    out_dir: Path = common.RESULTS,
    docs_per_round: int = 100,
    chunks_per_doc: int = 40,
    rounds: int = 3,
    preload_rows: int = 20_000,
    seed: int = 5,
) -> dict:
    from bench.synthetic import load_chunks
    from ragline.shared.worker import db

    space = EmbeddingSpace()
    rng = np.random.default_rng(seed)
    texts = common.passages(400, max_chars=800, min_chars=0)
    run_id = int(time.time())
    with db.connection() as c:
        desc = common.machine(c)
    if preload_rows:  # a table that already holds data, so HNSW inserts are not into an empty graph
        with db.connection() as conn:
            load_chunks(conn, f"bench-ups-{run_id}-pre", space.sample(preload_rows, rng), ["other"])
    rows_per_round = docs_per_round * chunks_per_doc
    samples: dict[str, list[float]] = {"upsert": [], "copy": []}
    for r in range(rounds):
        order = ("upsert", "copy") if r % 2 == 0 else ("copy", "upsert")
        for kind in order:
            tenant = f"bench-ups-{run_id}-{kind}-{r}"
            docs = _documents(tenant, docs_per_round, chunks_per_doc, texts, space, rng)
            seconds = _upsert(docs) if kind == "upsert" else _copy(docs)
            written = _count(tenant)
            if written != rows_per_round:
                raise RuntimeError(f"{kind} wrote {written} rows, expected {rows_per_round}")
            samples[kind].append(rows_per_round / seconds)
    ups = float(np.median(samples["upsert"]))
    cop = float(np.median(samples["copy"]))
    ratio = ups / cop
    targets = [common.Target("upsert rows/s / raw COPY rows/s", ratio, ">=", 0.5)]
    raw = {
        "upsert_rows_per_s": [round(x, 1) for x in samples["upsert"]],
        "copy_rows_per_s": [round(x, 1) for x in samples["copy"]],
        "upsert_median_rows_per_s": round(ups, 1),
        "copy_median_rows_per_s": round(cop, 1),
        "ratio": round(ratio, 4),
    }
    params = {
        "docs_per_round": docs_per_round,
        "chunks_per_doc": chunks_per_doc,
        "rounds": rounds,
        "rows_per_round": rows_per_round,
        "preload_rows": preload_rows,
        "content_chars": "<= 800, tydi-ru passages",
        "indexes": "HNSW (m16, ef_c64), GIN tsv, GIN acl, btree tenant, (tenant, path), unique",
    }
    notes = [
        "Upsert: one transaction per document (lock, documents row, COPY to staging, INSERT ON CONFLICT,"
        " delete of surplus chunk numbers), like the pipeline's store stage.",
        "COPY: one binary COPY of the same rows into chunks; its documents rows are written before the clock.",
    ]
    data = common.result(NAME, TITLE, params, raw, targets, desc, notes)
    common.write_json(data, out_dir)
    common.bar_plot(
        out_dir / f"{NAME}.png",
        f"Upsert vs raw COPY ({rows_per_round:,} rows per round, median of {rounds})",
        {"rows/s": {"store.py upsert": ups, "raw binary COPY": cop}},
        "rows per second",
        targets,
    )
    return data
