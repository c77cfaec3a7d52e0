"""The git layer against real repositories built in temporary folders: tree, blobs, diffs, clones,
skip rules and the git source's listing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragline.ingest import git
from ragline.ingest.parse import ParseError
from ragline.ingest.sources import GitSource, SourceSpec, SourceUnavailable, git_uri, parse_git_uri
from tests.gitrepo import CLAIMED, VENDORED_WAYS, commit, write
from tests.gitrepo import git as sh


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    sh(r, "init", "-q", "-b", "main")
    return r


def test_tree_blobs_and_diff_of_two_commits(repo):
    write(
        repo, {"a.py": "def a():\n    return 1\n", "b.py": "def b():\n    return 2\n" * 20, "c.py": "C = 3\n"}
    )
    c1 = commit(repo, when=1_700_000_000, message="one")
    write(repo, {"a.py": "def a():\n    return 10\n", "c.py": None, "d.py": "D = 4\n"})
    (repo / "lib").mkdir()
    sh(repo, "mv", "b.py", "lib/b2.py")
    c2 = commit(repo, when=1_700_000_100, message="two")
    assert git.resolve_commit(repo, "HEAD") == c2 == git.resolve_commit(repo, "main")
    assert git.commit_time_ns(repo, c1) == 1_700_000_000 * 10**9
    tree = {e.path: e for e in git.list_tree(repo, c2)}
    assert set(tree) == {"a.py", "lib/b2.py", "d.py"}
    assert tree["d.py"].size == 6
    assert git.read_blob(repo, c1, "c.py", limit=100) == b"C = 3\n"
    with pytest.raises(git.GitError, match="too large"):
        git.read_blob(repo, c1, "b.py", limit=10)
    assert git.read_blobs(repo, [tree["d.py"].blob]) == {tree["d.py"].blob: b"D = 4\n"}
    assert set(git.diff(repo, c1, c2)) == {
        git.Change("M", "a.py"),
        git.Change("A", "d.py"),
        git.Change("R", "lib/b2.py", "b.py"),  # detected as a rename: same content
        git.Change("D", "c.py"),
    }
    # a new branch (all-zero "before") or no "before": every tracked file is added
    assert {c.path for c in git.diff(repo, "0" * 40, c2)} == set(tree)
    assert git.commit_exists(repo, c1) and not git.commit_exists(repo, "f" * 40)


def test_refs_from_outside_are_never_options(repo):
    for bad in ("-x", "--upload-pack=touch /tmp/x", "a..b", "a b", ""):
        with pytest.raises(ValueError):
            git.check_ref(bad)
    write(repo, {"a.py": "A = 1\n"})
    commit(repo, when=1_700_000_000, message="one")
    with pytest.raises(git.GitError):
        git.resolve_commit(repo, "no-such-branch")
    assert (
        git.redact_url("fatal: https://user:tok3n@host/x.git not found")
        == "fatal: https://***@host/x.git not found"
    )


def test_clone_and_fetch_into_a_bare_mirror(repo, tmp_path):
    write(repo, {"a.py": "A = 1\n"})
    c1 = commit(repo, when=1_700_000_000, message="one")
    dest = tmp_path / "home" / "git" / "t" / "src.git"
    git.sync_clone(str(repo), dest)
    assert git.resolve_commit(dest, "main") == c1
    write(repo, {"b.py": "B = 2\n"})
    c2 = commit(repo, when=1_700_000_100, message="two")
    git.sync_clone(str(repo), dest)  # fetched, not cloned again
    assert git.resolve_commit(dest, "main") == c2
    bundle = tmp_path / "r.bundle"
    sh(repo, "bundle", "create", str(bundle), "--all")
    assert git.resolve_commit(git.sync_clone(str(bundle), tmp_path / "from-bundle.git"), "main") == c2


def test_default_skip_rules_and_globs():
    skip = git.path_skip_reason
    for path in (
        "vendor/lib.go",
        "web/node_modules/x/index.js",
        "third_party/a.c",
        "static/app.min.js",
        "package-lock.json",
        "poetry.lock",
        "api/service_pb2.py",
        "gen/x.pb.go",
    ):
        assert skip(path, 10, 1000) is not None, path
    assert skip("src/app.py", 10, 1000) is None
    assert skip("src/app.py", 2000, 1000) == "larger than 1000 bytes"
    assert skip("src/app.py", 10, 1000, include=["lib/*"]) == "not matched by include"
    assert skip("lib/deep/app.py", 10, 1000, include=["lib/*"]) is None
    assert skip("src/app.py", 10, 1000, exclude=["**/app.py"]) == "excluded (**/app.py)"
    assert (
        skip("app.py", 10, 1000, exclude=["**/app.py"]) == "excluded (**/app.py)"
    )  # '**/' may match nothing
    assert skip("vendor/lib.go", 10, 1000, skip_defaults=False) is None


@pytest.mark.parametrize(
    "path",
    [
        "vendor/lib.go",
        "src/Vendor/x.m",
        "pkg/vendors/a.js",
        "pip/_vendor/six.py",
        "third_party/a.c",
        "lib/3rdparty/b.c",
        "cextern/wcslib/C/wcs.c",
        "astropy/extern/ply/lex.py",
        "src/external/zlib/inflate.c",
        "web/node_modules/x/index.js",
        "static/bower_components/y.js",
        "Godeps/_workspace/src/a.go",
    ],
)
def test_linguist_vendored_paths(path):
    """linguist's vendored-dependency paths, at any depth and inside a folder name, are vendored."""
    assert git.vendored_reason(path) is not None
    assert git.path_skip_reason(path, 10, 1000).startswith("vendored")
    assert git.path_skip_reason(path, 10, 1000, skip_defaults=False) is None


@pytest.mark.parametrize(
    "path", ["astropy/wcs/wcs.py", "src/extensions/a.py", "docs/vendoring.rst", "tools/build.py", "dist/x.py"]
)
def test_own_paths_are_not_vendored(path):
    assert git.vendored_reason(path) is None and git.path_skip_reason(path, 10, 1000) is None


@pytest.mark.parametrize(
    ("attributes", "vendored"),
    [
        ({"linguist-vendored": "set"}, True),
        ({"linguist-vendored": "true"}, True),
        ({"linguist-generated": "set"}, True),
        ({"linguist-vendored": "unset"}, False),
        ({"linguist-vendored": "false"}, False),
        ({}, True),
    ],
)
def test_a_repository_declares_vendored_files(attributes, vendored):
    """``.gitattributes`` decide before the path: set vendors any file, un-set claims a vendored path."""
    for path in ("cextern/a.c", "pkg/own.py"):
        expected = vendored if attributes or path == "cextern/a.c" else False
        assert (git.vendored_reason(path, attributes) is not None) is expected, (path, attributes)


def test_content_rules_binary_minified_generated():
    assert git.content_skip_reason(b"\x89PNG\r\n\x1a\n\x00\x00", 1000) == "binary (NUL bytes)"
    assert git.content_skip_reason(b"var a=1;" * 500, 1000).startswith("minified")
    go = b"// Code generated by protoc-gen-go. DO NOT EDIT.\npackage api\n"
    assert git.content_skip_reason(go, 1000).startswith("generated")
    assert git.content_skip_reason(b"# @generated by tool\nx = 1\n", 1000).startswith("generated")
    assert git.content_skip_reason(b"def f():\n    return 1\n", 1000) is None
    # code that only talks about the markers (like ingest/git.py itself) is not generated
    own = (Path(git.__file__)).read_bytes()
    assert git.content_skip_reason(own, 1000) is None


@pytest.fixture()
def configured(monkeypatch):
    """Configure git sources (``RAGLINE_LIFECYCLE_SOURCES``): the repositories a source's tenant may open
    without the database (``roots.admit_repository``)."""
    from ragline.shared.config.settings import reset_settings

    def apply(*specs: SourceSpec) -> None:
        raw = [s.model_dump(mode="json", exclude_defaults=True) | {"kind": s.kind} for s in specs]
        monkeypatch.setenv("RAGLINE_LIFECYCLE_SOURCES", json.dumps(raw))
        reset_settings()

    yield apply
    monkeypatch.undo()
    reset_settings()


def test_git_source_lists_tracked_files_minus_skipped(repo, tmp_path, configured):
    write(
        repo,
        {
            "pkg/app.py": "def main():\n    return 0\n",
            "pkg/__init__.py": "",
            "docs/guide.md": "# Guide\n\nText.\n",
            "vendor/dep.py": "X = 1\n",
            "web/app.min.js": "var a=1;",
            "web/big.js": "var a = 1;" * 200,
            "data/logo.png": b"\x89PNG\x00\x00",
            "gen/api.go": "// Code generated by x. DO NOT EDIT.\npackage gen\n",
            "notes.xyz": "what\n",
        },
    )
    (repo / "untracked.py").write_text("U = 1\n")
    c1 = commit(repo, when=1_700_000_000, message="one")
    (repo / "untracked2.py").write_text("U = 2\n")  # never committed: not listed
    spec = SourceSpec(name="src", kind="git", tenant="t", path=repo)
    spec2 = SourceSpec(
        name="src2", kind="git", tenant="t", path=repo, skip_defaults=False, exclude=["docs/*"]
    )
    configured(spec, spec2)
    listing = GitSource(spec).list()
    assert listing.commit == c1
    paths = {i.path for i in listing.items}
    assert paths == {"pkg/app.py", "docs/guide.md", "untracked.py"}
    reasons = dict(listing.skipped)
    assert reasons["vendor/dep.py"].startswith("vendored")
    assert reasons["web/app.min.js"].startswith("lock, minified or generated")
    assert reasons["web/big.js"].startswith("minified")
    assert reasons["gen/api.go"].startswith("generated")
    assert reasons["pkg/__init__.py"] == "empty"
    assert reasons["data/logo.png"] == "unsupported file type"
    item = next(i for i in listing.items if i.path == "pkg/app.py")
    assert item.fingerprint == sh(repo, "rev-parse", f"{c1}:pkg/app.py")  # the blob id
    assert item.version == 1_700_000_000 * 10**9
    assert parse_git_uri(item.uri) == (repo.resolve(), c1, "pkg/app.py")
    # the defaults can be turned off, and include/exclude narrow the listing
    paths2 = {i.path for i in GitSource(spec2).list().items}
    assert {"vendor/dep.py", "web/big.js", "gen/api.go"} <= paths2 and "docs/guide.md" not in paths2


@pytest.mark.parametrize("skip_defaults", [True, False])
@pytest.mark.parametrize("way", sorted(VENDORED_WAYS))
def test_a_git_source_leaves_out_vendored_files(repo, configured, way, skip_defaults):
    """Every way of being vendored, read at the listed commit (an uncommitted ``.gitattributes``
    changes nothing); ``skip_defaults: false`` indexes them all."""
    files, vendored = VENDORED_WAYS[way]
    commit(repo, {"pkg/core.py": "def core():\n    return 0\n", **CLAIMED[0], **files})
    write(repo, {".gitattributes": "pkg/core.py linguist-vendored\n"})  # never committed
    spec = SourceSpec(name="src", kind="git", tenant="t", path=repo, skip_defaults=skip_defaults)
    configured(spec)
    listing = GitSource(spec).list()
    paths = {i.path for i in listing.items}
    assert {"pkg/core.py", CLAIMED[1]} <= paths
    assert (vendored in paths) is not skip_defaults
    if skip_defaults:
        assert dict(listing.skipped)[vendored].startswith(("vendored", "generated"))


def test_git_source_spec_and_uri_validation(tmp_path, configured):
    with pytest.raises(ValueError, match="needs 'path'"):
        SourceSpec(name="s", kind="git", tenant="t")
    with pytest.raises(ValueError, match="not a valid git ref"):
        SourceSpec(name="s", kind="git", tenant="t", url="https://example.org/r.git", ref="--all")
    spec = SourceSpec(name="s", kind="git", tenant="t", path=tmp_path)
    configured(spec)
    with pytest.raises(SourceUnavailable, match="not a git repository"):
        GitSource(spec).list()
    uri = git_uri(Path("/srv/a@b/repo"), "a" * 40, "x/y@z.py")
    assert parse_git_uri(uri) == (Path("/srv/a@b/repo"), "a" * 40, "x/y@z.py")
    for bad in ("git:/srv/repo:x.py", "/srv/repo@" + "a" * 40 + ":x.py", "git:/r@" + "a" * 40 + ":"):
        with pytest.raises(ParseError):
            parse_git_uri(bad)


def test_a_repository_is_opened_at_exactly_its_folder(repo, tmp_path):
    """Every layout that makes git read another repository's objects is refused; alternates inside
    the folder (a clone with ``--reference`` to a folder of its own) are not."""
    write(repo, {"a.py": "A = 1\n"})
    c1 = commit(repo, when=1_700_000_000, message="one")
    opened = git.open_repository(repo)
    assert (opened.git_dir, opened.work_tree) == (repo.resolve() / ".git", repo.resolve())
    bare = tmp_path / "bare.git"
    sh(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
    assert git.open_repository(bare).work_tree is None and git.resolve_commit(bare, "main") == c1

    def folder(name: str) -> Path:
        f = tmp_path / name
        f.mkdir()
        return f

    (folder("gitdir") / ".git").write_text(f"gitdir: {repo / '.git'}\n")
    (folder("symlink") / ".git").symlink_to(repo / ".git")
    sh(folder("alternates"), "init", "-q")
    (tmp_path / "alternates" / ".git" / "objects" / "info" / "alternates").write_text(
        f"{repo}/.git/objects\n"
    )
    common = folder("commondir") / ".git"
    common.mkdir()
    (common / "HEAD").write_text("ref: refs/heads/main\n")
    (common / "commondir").write_text(f"{repo / '.git'}\n")
    sh(folder("packlink"), "init", "-q")
    (tmp_path / "packlink" / ".git" / "objects" / "pack" / "x.pack").symlink_to(repo / ".git" / "index")
    sh(repo, "worktree", "add", "-q", "--detach", str(tmp_path / "worktree"))
    for name, reason in [
        ("gitdir", ".git is a file"),
        ("symlink", ".git is a symlink"),
        ("alternates", "alternates reads objects outside"),
        ("commondir", "commondir leads outside"),
        ("packlink", "symlink out of the repository"),
        ("worktree", ".git is a file"),
    ]:
        with pytest.raises(git.RepositoryRefused, match=reason):
            git.open_repository(tmp_path / name)
        with pytest.raises(git.RepositoryRefused):  # every command opens it first
            git.resolve_commit(tmp_path / name, c1)
    (repo / "sub").mkdir()
    with pytest.raises(git.RepositoryRefused, match="not a git repository"):  # no discovery upwards
        git.resolve_commit(repo / "sub", "HEAD")
    inner = repo / "vendored.git"
    sh(repo, "clone", "-q", "--bare", "--shared", str(repo), str(inner))  # alternates into repo/.git
    with pytest.raises(git.RepositoryRefused, match="alternates"):
        git.open_repository(inner)  # the alternate is outside inner
    assert git.open_repository(repo).root == repo.resolve()  # the outer one holds both


def test_a_source_selection_names_every_rule_that_chooses_its_files(tmp_path, monkeypatch):
    """``GitSource.selection``: the same for the same source, another for each input that changes
    which files a sync indexes (globs, the default skip rules and the rules themselves, formats)."""
    from ragline.ingest import git as git_rules
    from ragline.ingest import sources
    from ragline.ingest.sources import GitSource, SourceSpec

    def key(**fields) -> str:
        spec = SourceSpec(name="s", kind="git", tenant="t", path=tmp_path, **fields)
        return GitSource(spec).selection()

    base = key()
    assert key() == base
    variants = {
        "include": key(include=["src/*"]),
        "exclude": key(exclude=["docs/*"]),
        "skip_defaults": key(skip_defaults=False),
    }
    monkeypatch.setattr(git_rules, "DEFAULT_SKIP_GLOBS", (*git_rules.DEFAULT_SKIP_GLOBS, "*.gen.py"))
    variants["skip rules"] = key()
    monkeypatch.undo()
    monkeypatch.setattr(sources, "SUPPORTED", {**sources.SUPPORTED, ".zig": "code"})
    variants["formats"] = key()
    monkeypatch.undo()
    assert all(v != base for v in variants.values()), variants
    assert len(set(variants.values())) == len(variants)
    assert key(acl=["g"], ref="main") == base  # who may read and which commit: not the selection
