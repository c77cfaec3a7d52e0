"""`ragline secrets show`: the passwords of the stack and where each one comes from.

Passwords that are not set are generated once into ``<home>/secrets/`` (``shared/worker/credentials.py``);
this command is how an operator reads them, e.g. to log in to Flower. Nothing else prints them."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from ragline.cli.common import console
from ragline.shared.config.settings import get_settings
from ragline.shared.sdk import redis_acl
from ragline.shared.worker import credentials

app = typer.Typer()
secrets_app = typer.Typer(
    no_args_is_help=True, help="The stack's passwords: generated into the ragline home unless set."
)
app.add_typer(secrets_app, name="secrets")

_USERS = {"flower": lambda s: s.flower.user, "metrics": lambda s: s.ops.metrics_user}


def _user(settings, name: str) -> str:
    """The user name a secret goes with: Flower's and the metrics' basic auth, or the embedded
    Redis's ACL user (``redis``: the operator's; ``redis-<user>``)."""
    if name in _USERS:
        return _USERS[name](settings)
    return next(role for role in redis_acl.ROLES if credentials.redis_secret(role) == name)


@secrets_app.command("show")
def show(
    name: str = typer.Argument(
        None,
        help="redis (the operator's Redis user) | redis-<user> | flower | metrics: print that password alone",
    ),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Print the passwords of Flower, the metrics endpoints and the embedded Redis's users (one per
    component: operator, worker, chat, relay, flower, metrics), and their source (the variable that
    sets it or the file it was generated into). Creates nothing."""
    settings = get_settings()
    names = list(credentials.SECRET_SETTINGS)
    if name is not None and name not in names:
        raise typer.BadParameter(f"unknown secret {name!r}: one of {', '.join(names)}")
    try:
        found = [credentials.describe(settings, n) for n in ([name] if name else names)]
    except credentials.InsecureSecretError as exc:
        console.print(f"error: {exc}", markup=False, highlight=False)
        raise typer.Exit(1) from None
    if name is not None:
        secret = found[0]
        if secret.value is None:
            console.print(f"error: {name}: {secret.source}", markup=False, highlight=False)
            raise typer.Exit(1)
        print(secret.value)
        return
    rows = [
        {"name": s.name, "user": _user(settings, s.name), "password": s.value, "source": s.source}
        for s in found
    ]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("secret", "user", "password", "source")
    for r in rows:
        table.add_row(r["name"], r["user"], r["password"] or "-", r["source"])
    Console().print(table)


@secrets_app.command("check")
def check() -> None:
    """Exit 1 when Flower or the metrics endpoints would listen beyond loopback behind an empty or
    well-known password (what `ragline up` and the metrics server refuse); for container entrypoints
    that start them another way. Creates nothing: an unset password will be generated, never weak."""
    settings = get_settings()
    problems = []
    for name, what, host, user in (
        ("flower", "Flower", settings.flower.host, settings.flower.user),
        ("metrics", "the metrics endpoints", settings.ops.metrics_host, settings.ops.metrics_user),
    ):
        try:
            secret = credentials.describe(settings, name)
            if secret.value is not None:  # set (even empty) or generated already
                credentials.check_exposure(what, host, user, secret.value)
        except credentials.InsecureSecretError as exc:
            problems.append(str(exc))
    for problem in problems:
        console.print(f"error: {problem}", markup=False, highlight=False, soft_wrap=True)
    if problems:
        raise typer.Exit(1)


@app.command("redis-acl")
def redis_acl_users(
    as_json: bool = typer.Option(False, "--json", help="one argument list per command"),
    markdown: bool = typer.Option(False, "--markdown", help="the table of docs/operations.md instead"),
    aclfile: bool = typer.Option(
        False,
        "--aclfile",
        help="an ACL file with @REDIS_<USER>_PASSWORD@ placeholders (deploy/redis/users.acl.in)",
    ),
) -> None:
    """Print the ACL SETUSER commands that give an external Redis one user per component (worker,
    operator, chat, relay, flower, metrics), as the embedded Redis has them (shared/sdk/redis_acl.py),
    and turn its default user off. Replace each <password-of-USER>, pipe the lines into
    `redis-cli` as an admin, then give each component a REDIS_URL with its own user
    (redis://chat:PASSWORD@host:6379/0); docs/operations.md, "Redis users per component"."""
    if markdown:
        print(redis_acl.markdown())
        return
    if aclfile:
        print(redis_acl.aclfile_template(), end="")
        return
    commands = redis_acl.setuser_commands()
    if as_json:
        print(json.dumps(commands, indent=2))
        return
    for command in commands:
        print(" ".join(redis_cli_quote(arg) for arg in command))


def redis_cli_quote(arg: str) -> str:
    """``arg`` as one argument of a line ``redis-cli`` reads: bare when plain, else double-quoted."""
    if arg and all(c.isalnum() or c in "+-@~&|*?[]<>:._/" for c in arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
