"""Split texts into provider batches: at most ``max_texts`` texts and ``max_tokens`` estimated tokens."""

from __future__ import annotations


def estimate_tokens(text: str) -> int:
    """Conservative without the provider's tokenizer: Cyrillic runs near 3 characters per token."""
    return len(text) // 3 + 1


def plan_batches(texts: list[str], max_texts: int, max_tokens: int) -> list[list[str]]:
    batches: list[list[str]] = []
    cur: list[str] = []
    cur_tokens = 0
    for t in texts:
        n = estimate_tokens(t)
        if cur and (len(cur) >= max_texts or cur_tokens + n > max_tokens):
            batches.append(cur)
            cur, cur_tokens = [], 0
        cur.append(t)
        cur_tokens += n
    if cur:
        batches.append(cur)
    return batches
