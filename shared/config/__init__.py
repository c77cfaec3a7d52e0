"""The configuration every layer reads: the typed settings and the embedded stack's ``runtime.json``.
Imports nothing of ragline."""
