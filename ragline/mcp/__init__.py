"""``ragline mcp``: an MCP server over the query pool's task contract (docs/mcp.md).

:mod:`ragline.mcp.server` builds the server and its tools, :mod:`ragline.mcp.tokens` keeps the
bearer tokens of its HTTP transport. Like a chat backend, the server is a producer: it imports no
worker code and reaches the index only through the query pool's tasks.
"""
