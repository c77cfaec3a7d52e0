"""Document identity: ``<source>/<path relative to the folder given>``, stable for one folder, distinct
for two folders of the same name; the ownership rule that refuses writing over another source's
document; the reindex sending such a document to be refused instead of calling it unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragline.ingest.control.reindex import plan
from ragline.ingest.enqueue import IdConflict, collect_files, default_source_name
from ragline.ingest.identity import conflict
from ragline.ingest.sources import Listed, Listing


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def test_default_source_name_is_stable_and_distinct_per_folder(tmp_path, monkeypatch):
    a = _tree(tmp_path / "a" / "docs", {"README.md": "a"})
    b = _tree(tmp_path / "b" / "docs", {"README.md": "b"})
    name = default_source_name(a)
    assert name.startswith("docs-") and len(name) == len("docs-") + 8
    monkeypatch.chdir(tmp_path / "a")
    assert default_source_name(Path("docs")) == default_source_name(Path("./docs/")) == name
    assert default_source_name(b) != name
    weird = _tree(tmp_path / "Мои документы (v2)", {"x.md": "x"})
    assert default_source_name(weird).startswith("Мои-документы-v2-")
    assert "/" not in default_source_name(Path("/"))


def test_same_file_names_in_two_folders_get_different_ids(tmp_path):
    a = _tree(tmp_path / "a" / "docs", {"README.md": "a", "sub/x.md": "x"})
    b = _tree(tmp_path / "b" / "docs", {"README.md": "b"})
    got = {f.doc_id: f for f in collect_files([a, b])}
    assert set(got) == {
        f"{default_source_name(a)}/README.md",
        f"{default_source_name(a)}/sub/x.md",
        f"{default_source_name(b)}/README.md",
    }
    f = got[f"{default_source_name(a)}/sub/x.md"]
    assert (f.path, f.source, f.root) == ((a / "sub" / "x.md").resolve(), default_source_name(a), a.resolve())


def test_a_file_given_directly_is_relative_to_its_folder_and_kept_once(tmp_path):
    a = _tree(tmp_path / "docs", {"README.md": "a", "sub/x.md": "x", "skip.bin": "?"})
    alone = collect_files([a / "sub" / "x.md"])
    assert [f.doc_id for f in alone] == [f"{default_source_name(a / 'sub')}/x.md"]
    # inside a folder given in the same call, a file belongs to the outermost folder, in any order
    for paths in ([a / "sub" / "x.md", a, a / "sub"], [a, a / "README.md", a]):
        ids = [f.doc_id for f in collect_files(paths)]
        assert sorted(ids) == [f"{default_source_name(a)}/README.md", f"{default_source_name(a)}/sub/x.md"]


def test_explicit_source_names_the_prefix_and_refuses_two_files_under_one_id(tmp_path):
    a = _tree(tmp_path / "a", {"README.md": "a", "only-a.md": "a"})
    b = _tree(tmp_path / "b", {"README.md": "b"})
    assert sorted(f.doc_id for f in collect_files([a], source="wiki")) == ["wiki/README.md", "wiki/only-a.md"]
    with pytest.raises(IdConflict, match="wiki/README.md"):
        collect_files([a, b], source="wiki")
    for bad in ("", "a/b", ".hidden", "-x", "x y"):
        with pytest.raises(ValueError, match="invalid source name"):
            collect_files([a], source=bad)


def _owner(source=None, root=None, uri="/a/README.md", status="ready", content_hash="h"):
    return {
        "status": status,
        "content_hash": content_hash,
        "source_uri": uri,
        "source": source,
        "source_root": root,
    }


def test_ownership_rule():
    # nothing stored, a tombstone, a failed first attempt: nobody owns the id
    for owner in (None, _owner("x", status="deleted", content_hash=None), _owner("x", content_hash=None)):
        assert conflict(owner, "y", "/b", "/b/README.md") is None
    # the same source (and folder, when both recorded one) writes its own document
    assert conflict(_owner("x", "/a"), "x", "/a", "/a/README.md") is None
    assert conflict(_owner("x", None), "x", "/elsewhere", "/elsewhere/README.md") is None  # configured source
    # another source, or the same name given to another folder: refused, saying whose it is
    assert "belongs to source 'x' (/a/README.md)" in conflict(_owner("x", "/a"), "y", "/b", "/b/README.md")
    assert "from the folder /a" in conflict(_owner("x", "/a"), "x", "/b", "/b/README.md")
    assert conflict(_owner("x", "/a"), "x", "/b", "/b/README.md", owner_root_exists=False) is None  # moved
    # stored without a source (before doc ids had a prefix, or by an event): only the same file
    assert conflict(_owner(None, uri="/a/README.md"), "x", "/a", "/a/README.md") is None
    assert "stored without a source" in conflict(_owner(None, uri="/a/README.md"), "x", "/b", "/b/README.md")
    # a request without a source manages its ids itself (events, direct task payloads, eval)
    assert conflict(_owner("x", "/a"), None, None, "/b/README.md") is None


def test_reindex_sends_another_sources_document_to_be_refused_not_skipped():
    url = "https://example.org/a.html"
    listing = Listing([Listed(url, 5, "etag:1", url, url)])
    stored = {url: {"version": 5, "fp": "etag:1", "status": "ready", "source": "other"}}
    p = plan(listing, stored, "site")
    assert [(i.doc_id, r) for i, _, r in p.enqueue] == [(url, "new")] and p.unchanged == 0
    stored[url]["source"] = "site"
    assert plan(listing, stored, "site").unchanged == 1
