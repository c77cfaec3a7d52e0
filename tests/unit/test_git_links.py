"""Every link git follows out of a repository's git dir is checked by :func:`open_repository`.

A tenant with write access in a granted repository can place a link in its git dir and name another
repository's objects through it; git follows symlinks at every path it opens (a loose object, a
fan-out folder, a pack, the objects folder, ``objects/info``, a commit graph, a ref, ``packed-refs``,
``HEAD``, ``info/grafts``, ``config``) and reads the stores the alternates files name (absolute,
relative, C-quoted, nested). Each kind, led out of the folder, is refused; led to a place inside the
folder it is accepted and git reads through it (the control row), so the refusals are about where a
link leads, not that it is one. The integration matrix (tests/integration/test_git_escapes.py) sends
the forms that make git read another tenant's document through every entry point.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ragline.ingest import git
from tests.gitrepo import commit
from tests.gitrepo import git as sh

SECRET = "GLOBEX-BOARD-ONLY-4711"


def repository(folder: Path, text: str) -> str:
    folder.mkdir(parents=True)
    sh(folder, "init", "-q", "-b", "main")
    return commit(folder, {"board.md": text})


def link(path: Path, target: Path) -> None:
    """``path`` replaced by a symlink to ``target`` (parents created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        os.rename(path, path.with_name(path.name + ".was"))
    elif path.exists() or path.is_symlink():
        path.unlink()
    path.symlink_to(target)


#: links by a symlink: where in acme's git dir, to where in the other git dir (``{blob}``: the path
#: of the document's loose object in a store, ``{pack}``: a pack, made first)
SYMLINKS = {
    "loose_object": "objects/{blob}",
    "fanout_folder": "objects/{fanout}",
    "pack": "objects/pack/{pack}",
    "objects_folder": "objects",
    "objects_info": "objects/info",
    "commit_graph": "objects/info/commit-graph",
    "packed_refs": "packed-refs",
    "ref": "refs/heads/main",
    "head": "HEAD",
    "grafts": "info/grafts",
    "config": "config",
    "shallow": "shallow",
}


def alternates_line(kind: str, objects: Path, other: Path) -> str:
    """The alternates line of ``kind`` in acme's ``objects`` naming the store ``other``."""
    if kind == "relative_alternates":
        return os.path.relpath(other, objects)
    if kind == "quoted_alternates":
        return f'"{other}"'
    if kind == "alternates_dotdot":
        # "lnk/../<up>": through the symlink (git since 2.34) it stays in objects; as text (older
        # git's lexical normalization) it climbs to the other store
        up = os.path.relpath(other, objects)
        deep = objects.joinpath(*["d"] * (up.count("..") + 1))
        deep.mkdir(parents=True)
        (objects / "lnk").symlink_to(deep)
        return f"lnk/../{up}"
    if kind == "nested_alternates":  # an alternate inside the folder whose own alternates lead out
        inner = objects.parent.parent / "inner-objects"
        (inner / "info").mkdir(parents=True)
        (inner / "info" / "alternates").write_text(f"{other}\n")
        return str(inner)
    return str(other)


def lay_out(kind: str, acme: Path, other: Path) -> None:
    """One link of ``kind`` in acme's repository leading to ``other`` (a repository's git dir: either
    another tenant's, or a copy inside acme's folder)."""
    objects = acme / ".git" / "objects"
    if kind in SYMLINKS:
        blob = sh(other.parent, f"--git-dir={other}", "rev-parse", "HEAD:board.md")
        if kind == "pack":
            sh(other.parent, f"--git-dir={other}", "repack", "-q", "-a")
        if kind == "commit_graph":
            sh(other.parent, f"--git-dir={other}", "commit-graph", "write", "--reachable")
        packs = sorted(p.name for p in (other / "objects" / "pack").glob("*.*"))
        for pack in packs if kind == "pack" else [""]:  # the pack, its index and the rest beside it
            name = SYMLINKS[kind].format(blob=f"{blob[:2]}/{blob[2:]}", fanout=blob[:2], pack=pack)
            if not (other / name).exists():
                (other / name).write_text("")  # (a grafts or shallow file the other one lacks)
            link(acme / ".git" / name, other / name)
        return
    name = "http-alternates" if kind == "http_alternates" else "alternates"
    (objects / "info" / name).write_text(alternates_line(kind, objects, other / "objects") + "\n")


KINDS = (
    "loose_object",
    "fanout_folder",
    "pack",
    "objects_folder",
    "objects_info",
    "commit_graph",
    "packed_refs",
    "ref",
    "head",
    "grafts",
    "config",
    "shallow",
    "alternates",
    "relative_alternates",
    "quoted_alternates",
    "alternates_dotdot",
    "nested_alternates",
    "http_alternates",
)
#: links that lead git to another repository's objects (the rest name files it reads but whose
#: content names no object elsewhere): for these the control row shows git reading through them
READS_OBJECTS = {
    "loose_object",
    "fanout_folder",
    "pack",
    "objects_folder",
    "alternates",
    "relative_alternates",
    "quoted_alternates",
}


@pytest.mark.parametrize("kind", KINDS)
def test_a_link_out_of_the_repository_is_refused(tmp_path, kind):
    repository(tmp_path / "globex", f"# Board\n\n{SECRET}\n")
    acme = tmp_path / "acme"
    repository(acme, "# Acme\n")
    lay_out(kind, acme, tmp_path / "globex" / ".git")
    with pytest.raises(git.RepositoryRefused, match="refused"):
        git.open_repository(acme)


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_link_inside_the_repository_is_followed(tmp_path, kind):
    """The control row: the link leads to a copy of a repository kept inside acme's folder; the
    folder opens, and for the object links git reads the copy's document through it."""
    acme = tmp_path / "acme"
    repository(acme, "# Acme\n")
    copy = acme / "vendor-copy"
    repository(copy, f"# Board\n\n{SECRET}\n")
    if kind == "alternates_dotdot":  # both readings of the line must stay inside: a short climb
        objects = acme / ".git" / "objects"
        (objects / "d" / "d").mkdir(parents=True)
        (objects / "lnk").symlink_to(objects / "d" / "d")
        (objects / "info" / "alternates").write_text("lnk/../d\n")
    else:
        lay_out(kind, acme, copy / ".git")
    opened = git.open_repository(acme)
    if kind in READS_OBJECTS:
        blob = sh(copy, "rev-parse", "HEAD:board.md")
        assert SECRET.encode() in git.read_blobs(opened, [blob])[blob]


def test_a_quoted_alternates_line_is_read_as_git_unquotes_it():
    assert git._unquote(b'"/srv/a\\"b\\tc\\303\\251"') == b'/srv/a"b\tc\xc3\xa9'
    assert git._unquote(b"/srv/plain") == b"/srv/plain"
    for bad in (b'"/srv/unterminated', b'"/srv/x"trailing', b'"/srv/\\q"'):
        assert git._unquote(bad) is None


def test_a_clone_follows_no_redirect_nor_a_remotes_alternates():
    """git's dumb-HTTP walker follows a server's ``http-alternates`` only with redirects on: the
    clone guard's options keep both off for every transport (pinned: the rule lives in git)."""
    from ragline.ingest import clone_guard
    from ragline.ingest.fetch import FetchPolicy
    from ragline.shared.config.settings import get_settings

    policy = FetchPolicy.from_settings(get_settings())
    for url in ("https://93.184.216.34/r.git", "http://93.184.216.34/r.git", "/srv/r.git"):
        options, _ = clone_guard.guarded_options(url, policy)
        assert "http.followRedirects=false" in options and "protocol.ext.allow=never" in options, url
