"""Reading a generated secret file of the ragline home: private (0600) and not empty, or refused.

Its own module, below both the settings and ``shared/worker/credentials.py`` (which generates the files):
``Settings.effective_redis_url`` reads the password of its process's Redis user here.
"""

from __future__ import annotations

import stat
from pathlib import Path

#: the folder of the home that holds them, 0700
FOLDER = "secrets"


class InsecureSecretError(RuntimeError):
    """A password that must not be used where it is configured, or a secrets file others can read."""


def read(path: Path) -> str:
    """The secret in ``path``; a file other users can read, or an empty one, is refused."""
    mode = path.stat().st_mode
    if stat.S_IMODE(mode) & 0o077:
        raise InsecureSecretError(
            f"{path} can be read by other users (mode {stat.S_IMODE(mode):o}): chmod 600 {path}"
        )
    value = path.read_text(encoding="utf-8").strip()
    if not value:
        raise InsecureSecretError(f"{path} is empty: delete it and run `ragline up` to generate a new one")
    return value
