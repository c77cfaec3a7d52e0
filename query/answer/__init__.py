"""Answer: what turns the retrieved chunks into an answer (may use retrieval, never the other way round)."""
