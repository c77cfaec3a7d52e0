"""`ragline mcp`: the MCP server for agents (stdio, or Streamable HTTP with bearer tokens), and its tokens.

The server is a producer like a chat backend: it logs in to Redis as the ``chat`` user unless
``RAGLINE_SERVICES_REDIS_ROLE`` (or ``REDIS_URL``) says otherwise, and with message signing its
``ragline-chat`` certificate lets it send questions only (docs/mcp.md says why no role of its own).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from datetime import UTC, datetime

import typer

from ragline.cli.common import EXIT_UNREACHABLE, console, echo, fail, iso, split_csv
from ragline.shared.config.settings import get_settings, reset_settings

app = typer.Typer()
mcp_app = typer.Typer(
    help="An MCP server over the query pool: tools search, ask, read, sources (docs/mcp.md).",
    invoke_without_command=True,
)
app.add_typer(mcp_app, name="mcp")
token_app = typer.Typer(
    no_args_is_help=True, help="Bearer tokens of `ragline mcp --http`, one per tenant and groups."
)
mcp_app.add_typer(token_app, name="token")

#: the Redis user of the server (a producer that asks questions: the chat backends' user)
PRODUCER_ROLE = "chat"


@mcp_app.callback()
def serve(
    ctx: typer.Context,
    tenant: str = typer.Option(None, "--tenant", help="stdio: the tenant every call runs as"),
    groups: str = typer.Option(None, "--groups", help="stdio: the caller's ACL groups, comma-separated"),
    http: bool = typer.Option(False, "--http", help="Streamable HTTP at http://HOST:PORT/mcp, bearer tokens"),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8765, "--port"),
    timeout: float = typer.Option(60.0, "--timeout", help="seconds to wait for the query pool's answer"),
) -> None:
    """Serve MCP on stdio for one tenant and its groups (`--tenant T --groups G1,G2`), or with `--http`
    for the tenants of the tokens `ragline mcp token create` made. Tools cannot change either."""
    if ctx.invoked_subcommand is not None:
        return
    if http == (tenant is not None) or (tenant is None) != (groups is None):
        fail("give --tenant and --groups (stdio) or --http (tokens), not both", 2)
    os.environ.setdefault("RAGLINE_SERVICES_REDIS_ROLE", PRODUCER_ROLE)
    reset_settings()
    from ragline.mcp.server import build_server  # start-up: the MCP SDK, anyio, starlette
    from ragline.mcp.tokens import TokenStore, grant
    from ragline.shared.sdk.async_client import AsyncRaglineClient
    from ragline.shared.sdk.client import RaglineUnavailable
    from ragline.shared.worker import credentials, logging_setup

    logging_setup.configure()  # JSON lines on stderr: stdout is the stdio transport's
    try:
        client = AsyncRaglineClient(timeout=timeout)
    except RaglineUnavailable as exc:
        fail(f"the stack is not reachable: {exc}", EXIT_UNREACHABLE)
    if not http:
        try:
            fixed = grant(tenant, split_csv(groups))
        except ValueError as exc:
            fail(str(exc), 2)
        build_server(client, grant=fixed).run("stdio")
        return
    if not credentials.is_loopback(host):
        console.print(
            f"warning: serving MCP on {host} without TLS: bearer tokens cross the network in clear; put a TLS proxy in front",
            markup=False,
            highlight=False,
        )
    url = f"http://{host}:{port}"
    server = build_server(client, tokens=TokenStore(get_settings()), url=url)
    server.run("streamable-http", host=host, port=port)


@token_app.command("create")
def token_create(
    tenant: str = typer.Option(..., "--tenant"),
    groups: str = typer.Option(..., "--groups", help="comma-separated ACL groups"),
    note: str = typer.Option("", "--note", help="who or what it is for"),
) -> None:
    """Make a token for TENANT and GROUPS and print it once (only its hash is kept)."""
    from ragline.mcp.tokens import TokenStore

    try:
        record, token = TokenStore(get_settings()).create(tenant, split_csv(groups), note)
    except ValueError as exc:
        fail(str(exc), 2)
    typer.echo(f"id: {record.id}", err=True)
    print(token)


@token_app.command("revoke")
def token_revoke(token_id: str = typer.Argument(..., help="the id `ragline mcp token list` shows")) -> None:
    """Delete a token; the server refuses it from its next request."""
    from ragline.mcp.tokens import TokenStore

    if not TokenStore(get_settings()).revoke(token_id):
        fail(f"no token {token_id}")
    echo(f"revoked {token_id}")


@token_app.command("list")
def token_list(as_json: bool = typer.Option(False, "--json")) -> None:
    """The tokens: id, tenant, groups, creation time, note (never the token)."""
    from ragline.mcp.tokens import TokenStore

    records = TokenStore(get_settings()).records().values()
    if as_json:
        rows = [{**asdict(r), "created_at": iso(datetime.fromtimestamp(r.created_at, UTC))} for r in records]
        print(json.dumps([{k: v for k, v in r.items() if k != "sha256"} for r in rows], indent=2))
        return
    for r in records:
        created = iso(datetime.fromtimestamp(r.created_at, UTC))
        echo(f"{r.id}  {r.tenant}  {','.join(r.groups)}  {created}  {r.note}")
