"""Ingestion pool: load, parse, chunk, contextualize, embed, store."""
