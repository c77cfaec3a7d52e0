"""Git repositories built by tests: every commit reproducible (fixed author, dates from the
caller), git run without the user's configuration or a global PATH."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.org",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.org",
    "PATH": "/usr/bin:/bin",
}
#: the time of a commit whose test does not care when it was made
WHEN = 1_700_000_000


def git(repo: Path, *args: str, when: int = WHEN) -> str:
    """``git -C repo args...`` with author and committer time ``when``; its stripped output."""
    env = {**ENV, "GIT_AUTHOR_DATE": f"{when} +0000", "GIT_COMMITTER_DATE": f"{when} +0000"}
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True
    ).stdout.strip()


def write(repo: Path, files: dict[str, str | bytes | None]) -> None:
    """Files written (text or bytes, parents created) or, for ``None``, deleted."""
    for name, content in files.items():
        f = repo / name
        if content is None:
            f.unlink()
            continue
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(content if isinstance(content, bytes) else content.encode())


def commit(
    repo: Path,
    files: dict[str, str | bytes | None] | None = None,
    when: int = WHEN,
    message: str | None = None,
) -> str:
    """``files`` written, everything committed at ``when``; the new commit's hash."""
    write(repo, files or {})
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message or f"at {when}", when=when)
    return git(repo, "rev-parse", "HEAD")


def snapshot(bundle: Path, ref: str, files: list[str], dest: Path) -> Path:
    """A one-commit repository at ``dest`` holding ``files`` as they are at ``ref`` of a dataset's
    git bundle: real code without the bundle's whole tree, so a test ingests seconds of it."""
    clone = dest.parent / f"{dest.name}-clone"
    subprocess.run(["git", "clone", "-q", str(bundle), str(clone)], check=True, capture_output=True)
    git(clone, "checkout", "-q", ref)
    dest.mkdir(parents=True)
    git(dest, "init", "-q", "-b", "main")
    commit(dest, {f: (clone / f).read_bytes() for f in files})
    shutil.rmtree(clone)
    return dest


def git_sources(tenant: str, name: str, path: Path, acl: list[str]) -> str:
    """``RAGLINE_LIFECYCLE_SOURCES`` naming one git source: the repository at ``path`` as ``name``."""
    import json

    return json.dumps([{"name": name, "kind": "git", "tenant": tenant, "acl": acl, "path": str(path)}])


#: the ways a tracked file is someone else's code (``ingest/git.py``'s ``vendored_reason``), each as
#: the files a commit adds (a ``.gitattributes`` among them when it declares the file) and the path
#: that must not be indexed while the source's default skip rules apply
VENDORED_WAYS = {
    "linguist-path-cextern": (
        {"cextern/wcslib/wcs.c": "int wcsset(void)\n{\n  return 0;\n}\n"},
        "cextern/wcslib/wcs.c",
    ),
    "linguist-path-_vendor": (
        {"pkg/_vendor/six.py": "def with_metaclass(meta):\n    return meta\n"},
        "pkg/_vendor/six.py",
    ),
    "linguist-path-extern": (
        {"pkg/extern/ply/lex.py": "def lex(data):\n    return data\n"},
        "pkg/extern/ply/lex.py",
    ),
    "gitattributes-vendored": (
        {
            "lib/bundled.py": "def bundled():\n    return 1\n",
            ".gitattributes": "lib/bundled.py linguist-vendored\n",
        },
        "lib/bundled.py",
    ),
    "gitattributes-generated": (
        {"pkg/tables.py": "TABLE = {1: 2}\n", ".gitattributes": "pkg/tables.py linguist-generated=true\n"},
        "pkg/tables.py",
    ),
    "nested-gitattributes": (
        {"pkg/sub/gen_x.py": "X = 1\n", "pkg/sub/.gitattributes": "gen_*.py linguist-generated\n"},
        "pkg/sub/gen_x.py",
    ),
}
#: a file under a vendored path that the repository claims as its own (``-linguist-vendored``)
CLAIMED = (
    {"extern/ours.py": "def ours():\n    return 2\n", "extern/.gitattributes": "* -linguist-vendored\n"},
    "extern/ours.py",
)
