"""The bearer tokens of ``ragline mcp --http``: each maps to one tenant and its groups.

A token is ``rlmcp_<id>_<secret>``; only its id, the SHA-256 of the whole token and the scope it
grants are stored, in ``<home>/secrets/mcp-tokens.json`` (0600, beside the stack's generated
passwords, :mod:`ragline.shared.worker.credentials`). The secret is 32 random bytes, so a plain
hash is enough: no dictionary reaches it, and a slow hash would only slow every request.
``ragline mcp token create`` prints a token once; ``revoke`` deletes it, effective at the server's
next request (the file is read again whenever it changed).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pydantic import TypeAdapter

from ragline.shared.config import secret_files
from ragline.shared.config.settings import Settings
from ragline.shared.sdk.contracts import Group, Ident
from ragline.shared.worker import credentials

PREFIX = "rlmcp"
FILE = "mcp-tokens.json"

_tenant = TypeAdapter(Ident)
_groups = TypeAdapter(list[Group])


@dataclass(frozen=True)
class Grant:
    """Who a caller is: the tenant and groups every tool call runs with (``token_id`` None: stdio)."""

    tenant: str
    groups: tuple[str, ...]
    token_id: str | None = None


@dataclass(frozen=True)
class TokenRecord:
    id: str
    sha256: str
    tenant: str
    groups: list[str]
    created_at: float
    note: str = ""


def grant(tenant: str, groups: list[str] | tuple[str, ...], token_id: str | None = None) -> Grant:
    """A grant with the contracts' own validation of its tenant and groups (``ValueError``), the
    groups sorted and once each as ``SearchRequest`` keeps them."""
    valid = _groups.validate_python(list(groups))
    return Grant(_tenant.validate_python(tenant), tuple(sorted(set(valid))), token_id)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _token_id(token: str) -> str | None:
    parts = token.split("_", 2)  # the secret is URL-safe base64, which has "_" too
    return parts[1] if len(parts) == 3 and parts[0] == PREFIX and parts[1] else None


class TokenStore:
    """The token file of one ragline home."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.path: Path = credentials.secrets_dir(settings) / FILE
        self._seen: tuple[float, int] | None = None
        self._records: dict[str, TokenRecord] = {}

    def records(self) -> dict[str, TokenRecord]:
        """The stored tokens by id, read again whenever the file changed (a revocation applies at once)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._seen, self._records = None, {}
            return {}
        if self._seen != (st.st_mtime, st.st_size):
            raw = json.loads(secret_files.read(self.path))
            self._records = {r["id"]: TokenRecord(**r) for r in raw}
            self._seen = (st.st_mtime, st.st_size)
        return self._records

    def _write(self, records: dict[str, TokenRecord]) -> None:
        credentials.secure_home(self.settings)
        credentials.write_private(self.path, json.dumps([asdict(r) for r in records.values()], indent=1))

    def create(self, tenant: str, groups: list[str], note: str = "") -> tuple[TokenRecord, str]:
        """A new token for ``tenant`` and ``groups``: its record and the token, shown only now."""
        scope = grant(tenant, groups)
        token_id = secrets.token_hex(6)
        token = f"{PREFIX}_{token_id}_{secrets.token_urlsafe(32)}"
        record = TokenRecord(token_id, _digest(token), scope.tenant, list(scope.groups), time.time(), note)
        self._write({**self.records(), token_id: record})
        return record, token

    def revoke(self, token_id: str) -> bool:
        records = dict(self.records())
        if records.pop(token_id, None) is None:
            return False
        self._write(records)
        return True

    def verify(self, token: str) -> Grant | None:
        """The grant of ``token``, or None for an unknown, revoked or malformed one."""
        token_id = _token_id(token)
        record = self.records().get(token_id) if token_id else None
        if record is None or not hmac.compare_digest(record.sha256, _digest(token)):
            return None
        return Grant(record.tenant, tuple(record.groups), record.id)
