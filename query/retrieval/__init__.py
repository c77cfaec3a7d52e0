"""Retrieval: what finds the chunks a question needs (never a chat model, never the answer side)."""
