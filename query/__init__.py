"""Query pool: retrieve, fuse, rerank, answer."""
