"""Sources list (doc_id, version, fingerprint) cheaply; the reindex plan is a pure function of the
listing and the stored state. The URL source is tested against a real local http.server."""

from __future__ import annotations

import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ragline.ingest.control.reindex import namespaced, plan
from ragline.ingest.parse import ParseError
from ragline.ingest.sources import (
    FolderSource,
    Listed,
    Listing,
    SourceSpec,
    SourceUnavailable,
    UrlListSource,
    configured_sources,
    fetch_url,
    guess_format,
)
from ragline.shared.config.settings import reset_settings
from tests.loopback import send_canned


def _spec(**kw) -> SourceSpec:
    return SourceSpec.model_validate({"name": "s", "kind": "folder", "tenant": "t", "acl": ["g"], **kw})


def test_folder_source_lists_supported_files_with_mtime_and_size(tmp_path: Path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.md").write_text("# A")
    (tmp_path / "sub" / "b.txt").write_text("bbb")
    (tmp_path / "image.png").write_bytes(b"\x89PNG")
    os.utime(tmp_path / "a.md", ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    listing = FolderSource(_spec(path=str(tmp_path))).list()
    by_id = {i.doc_id: i for i in listing.items}
    assert set(by_id) == {"a.md", "sub/b.txt"}
    assert by_id["a.md"].version == 1_700_000_000_000_000_000
    assert by_id["a.md"].fingerprint == "1700000000000000000:3"
    assert by_id["sub/b.txt"].uri == str(tmp_path / "sub" / "b.txt")
    only_md = FolderSource(_spec(path=str(tmp_path), glob="*.md")).list()
    assert [i.doc_id for i in only_md.items] == ["a.md"]


def test_missing_folder_is_unavailable_not_empty(tmp_path: Path):
    with pytest.raises(SourceUnavailable):
        FolderSource(_spec(path=str(tmp_path / "unmounted"))).list()


def test_source_specs_are_validated():
    with pytest.raises(ValueError):
        SourceSpec.model_validate({"name": "x", "kind": "folder", "tenant": "t"})  # no path
    with pytest.raises(ValueError):
        SourceSpec.model_validate(
            {"name": "x", "kind": "urls", "tenant": "t", "urls": ["file:///etc/passwd"]}
        )
    with pytest.raises(ValueError):
        configured_sources([{"name": "x", "kind": "urls", "tenant": "t"}] * 2)
    with pytest.raises(ValueError):
        SourceSpec.model_validate({"name": "x", "kind": "urls", "tenant": "t", "acl": [""]})


class _Site(BaseHTTPRequestHandler):
    pages = {
        "/etag.md": (200, {"ETag": '"v1"'}, b"# Etag page"),
        "/lm.html": (200, {"Last-Modified": "Wed, 21 Oct 2026 07:28:00 GMT"}, b"<h1>LM</h1>"),
        "/plain": (200, {"Content-Type": "text/markdown; charset=utf-8"}, b"# no validators"),
        "/broken": (500, {}, b"oops"),
        "/forbidden.md": (403, {}, b"no"),
    }
    heads: list[str] = []

    def log_message(self, *a):
        pass

    def _reply(self, body: bool):
        send_canned(self, *self.pages.get(self.path, (404, {}, b"missing")), body=body)

    def do_HEAD(self):  # noqa: N802
        _Site.heads.append(self.path)
        self._reply(False)

    def do_GET(self):  # noqa: N802
        self._reply(True)


@pytest.fixture()
def site(monkeypatch):
    # the site is on 127.0.0.1: fetching it needs an explicit allowance
    monkeypatch.setenv("RAGLINE_INGEST_FETCH_ALLOW_PRIVATE", "true")
    reset_settings()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    _Site.heads.clear()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()
    reset_settings()


def test_url_source_uses_etag_and_last_modified_from_head(site):
    urls = [f"{site}/etag.md", f"{site}/lm.html", f"{site}/plain", f"{site}/gone.md", f"{site}/broken"]
    listing = UrlListSource(SourceSpec(name="w", kind="urls", tenant="t", urls=urls), timeout=5).list()
    by_id = {i.doc_id: i for i in listing.items}
    assert by_id[f"{site}/etag.md"].fingerprint == 'etag:"v1"'
    assert by_id[f"{site}/lm.html"].fingerprint.startswith("lm:")
    assert by_id[f"{site}/lm.html"].version == 1792567680 * 1_000_000_000
    assert by_id[f"{site}/plain"].fingerprint == ""  # unknown: always re-checked by content hash
    assert f"{site}/gone.md" not in by_id and f"{site}/gone.md" not in listing.unavailable  # 404: vanished
    assert listing.unavailable == {f"{site}/broken"}  # 5xx: kept, never pruned
    assert sorted(_Site.heads) == sorted(u.removeprefix(site) for u in urls)  # one HEAD each, no GET


def test_unreachable_url_is_unavailable():
    listing = UrlListSource(
        SourceSpec(name="w", kind="urls", tenant="t", urls=["http://127.0.0.1:9/x.md"]), timeout=2
    ).list()
    assert listing.items == [] and listing.unavailable == {"http://127.0.0.1:9/x.md"}


def test_fetch_url_for_ingestion(site):
    data, fmt = fetch_url(f"{site}/etag.md")
    assert (data, fmt) == (b"# Etag page", "md")
    assert fetch_url(f"{site}/plain")[1] == "md"  # from the content type
    with pytest.raises(ParseError):
        fetch_url(f"{site}/forbidden.md")
    with pytest.raises(ConnectionError):
        fetch_url(f"{site}/broken")
    assert guess_format("https://x.org/a/b.PDF?x=1") == "pdf"


def _stored(version, fp, status="ready", source="s"):
    return {"version": version, "fp": fp, "status": status, "source": source}


def test_plan_new_changed_unchanged_vanished():
    listing = Listing(
        [
            Listed("a", 10, "10:1", "u", "a"),
            Listed("b", 20, "20:5", "u", "b"),
            Listed("c", 30, "30:1", "u", "c"),
            Listed("d", 5, "", "u", "d"),
        ]
    )
    stored = {
        "a": _stored(10, "10:1"),
        "b": _stored(15, "15:4"),
        "d": _stored(5, ""),
        "gone": _stored(3, "3:3"),
        "other-source": _stored(3, "x", source="z"),
        "tomb": _stored(9, None, status="deleted"),
    }
    p = plan(listing, stored, "s")
    assert p.unchanged == 1
    assert {(i.doc_id, v, r) for i, v, r in p.enqueue} == {
        ("b", 20, "changed"),
        ("c", 30, "new"),
        ("d", 6, "changed"),
    }
    assert p.vanished == ["gone"]


def test_plan_bumps_version_when_the_source_version_went_backwards():
    listing = Listing([Listed("a", 100, "100:7", "u", "a")])  # restored from a backup: older mtime
    p = plan(listing, {"a": _stored(500, "500:9")}, "s")
    assert [(i.doc_id, v) for i, v, _ in p.enqueue] == [("a", 501)]


def test_plan_never_prunes_unavailable_or_failed_docs_retry():
    listing = Listing([Listed("f", 10, "10:1", "u", "f")], unavailable={"u1"})
    stored = {"u1": _stored(1, "e"), "f": _stored(10, "10:1", status="failed")}
    p = plan(listing, stored, "s")
    assert p.vanished == [] and [i.doc_id for i, _, _ in p.enqueue] == ["f"]


def test_folder_doc_ids_are_namespaced_by_source():
    spec = _spec(path="/x")
    out = namespaced(spec, Listing([Listed("a.md", 1, "1:1", "/x/a.md", "a.md")], {"b.md"}))
    assert out.items[0].doc_id == "s/a.md" and out.items[0].path == "s/a.md" and out.unavailable == {"s/b.md"}
