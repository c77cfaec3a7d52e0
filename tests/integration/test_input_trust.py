"""Input trust through the real worker: local paths are default-deny (roots granted per tenant by
``ragline ingest``, configured sources, the explicit setting), URL fetching cannot reach internal
addresses, and hostile PDFs and DOCX files are refused with a readable per-document error while
the worker goes on. The builders of hostile files are shared with the chaos suite."""

from __future__ import annotations

import hashlib
import io
import json
import os
import threading
import time
import zipfile
import zlib
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from ragline.ingest.roots import grant_roots
from ragline.shared.sdk.names import TASK_INGEST_DOCUMENT, TASK_INGEST_EVENT
from ragline.shared.worker import db, jobs
from tests.loopback import loopback_voyage
from tests.pdfs import raw_pdf

# ------------------------------------------------------------------------ hostile file builders


def text_page(line: str) -> bytes:
    return zlib.compress(f"BT /F1 12 Tf 72 700 Td ({line}) Tj ET".encode("latin-1"))


def pdf_pages(n: int) -> bytes:
    """``n`` small pages of text."""
    return raw_pdf([text_page(f"Page {i} of a long document.") for i in range(n)])


def flate_bomb(inflated: int) -> bytes:
    """A flate stream of ``inflated`` spaces (a valid content stream: whitespace), about 1000:1."""
    c = zlib.compressobj(9)
    block = b" " * (1 << 20)
    parts = [c.compress(block) for _ in range(inflated >> 20)]
    return b"".join(parts) + c.compress(b" " * (inflated & ((1 << 20) - 1))) + c.flush()


def pdf_flate_bomb(inflated: int = 1 << 30) -> bytes:
    return raw_pdf([flate_bomb(inflated)])


def pdf_drawing(objects: int) -> bytes:
    """One page that draws ``objects`` rectangles (a few bytes each, compressed to almost nothing)."""
    return raw_pdf([zlib.compress(b"0 0 1 1 re f\n" * objects)])


def docx(document_xml: bytes, *, name: str = "word/document.xml", extra: int = 0) -> bytes:
    """A DOCX container holding ``document_xml`` as its main part under ``name`` (declared by an
    override content type whatever its extension), plus ``extra`` empty members."""
    types = (
        '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
        'content-types"><Default Extension="xml" ContentType="application/xml"/><Default Extension="rels"'
        ' ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Override PartName="/'
        f'{name}" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.'
        'main+xml"/></Types>'
    )
    rels = (
        '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/'
        '2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
        f'relationships/officeDocument" Target="{name}"/></Relationships>'
    )
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", types)
        z.writestr("_rels/.rels", rels)
        z.writestr(name, document_xml)
        for i in range(extra):
            z.writestr(f"customXml/pad{i}.bin", b"")
    return buf.getvalue()


def document_xml(paragraphs: int) -> bytes:
    body = "".join(
        f"<w:p><w:r><w:t>Paragraph {i} of a large document.</w:t></w:r></w:p>" for i in range(paragraphs)
    )
    return (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="http://schemas.openxml'
        f'formats.org/wordprocessingml/2006/main"><w:body>{body}</w:body></w:document>'
    ).encode()


# ------------------------------------------------------------------------------------- helpers


@pytest.fixture()
def voyage(use_settings):
    with loopback_voyage(use_settings) as srv:
        yield srv


def _ingest(payload: dict) -> dict:
    from ragline.shared.worker.celery_app import app

    return app.send_task(TASK_INGEST_DOCUMENT, args=[payload]).get(timeout=120)


def _errors(tenant: str) -> dict[str, str]:
    from ragline.cli import app as cli

    out = CliRunner().invoke(cli, ["errors", "--tenant", tenant, "--json"])
    assert out.exit_code == 0, out.output
    return {e["doc_id"]: e["error"] for e in json.loads(out.stdout)}


def _doc(tenant: str, doc_id: str, uri: str, **kw) -> dict:
    return {"tenant": tenant, "doc_id": doc_id, "uri": uri, "acl": ["g"], "version": 1, **kw}


# --------------------------------------------------------------------------------------- paths


def test_a_task_reads_only_below_a_root_granted_to_its_tenant(celery_worker, voyage, conn, tenant, tmp_path):
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "a.md").write_text("# Заметка\n\nТекст, который можно читать.\n", encoding="utf-8")
    payload = _doc(tenant, "a.md", str(folder / "a.md"))

    refused = _ingest(payload)
    assert refused["status"] == "failed" and "outside the allowed ingest roots" in refused["error"]
    grant_roots(f"{tenant}-other", [folder])  # another tenant's grant is not this tenant's
    assert _ingest(payload)["status"] == "failed"
    assert "outside the allowed ingest roots" in _errors(tenant)["a.md"]

    assert grant_roots(tenant, [folder]) == [folder.resolve()]
    assert _ingest(payload)["status"] == "stored"
    assert "a.md" not in _errors(tenant)
    rows = conn.execute("SELECT root, granted_by FROM ingest_roots WHERE tenant = %s", (tenant,)).fetchall()
    assert [(r["root"], r["granted_by"]) for r in rows] == [(str(folder.resolve()), "cli")]
    # a grant never reaches outside itself, whatever the payload asks for
    for doc_id, uri in {
        "passwd": "/etc/passwd",
        "traversal": f"{folder}/../../../../etc/passwd",
        "token": "/var/run/secrets/kubernetes.io/serviceaccount/token",
    }.items():
        res = _ingest(_doc(tenant, doc_id, uri, fmt="text"))
        assert res["status"] == "failed" and "outside the allowed ingest roots" in res["error"], (doc_id, res)


def test_ragline_ingest_grants_its_folders_and_events_stay_inside(celery_worker, voyage, tenant, tmp_path):
    """The operator's `ragline ingest DIR` grants DIR to the tenant; a producer's event may then
    name a new file in it, but not one next to it."""
    from ragline.cli import app as cli
    from ragline.shared.worker.celery_app import app

    folder, beside = tmp_path / "wiki", tmp_path / "private"
    folder.mkdir()
    beside.mkdir()
    (folder / "start.md").write_text("# Старт\n\nКак начать.\n", encoding="utf-8")
    run = CliRunner().invoke(
        cli, ["ingest", str(folder), "--tenant", tenant, "--acl", "g", "--wait", "--json"]
    )
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout.strip().splitlines()[-1])["failed"] == 0

    (folder / "new.md").write_text("# Новое\n\nПоявилось позже.\n", encoding="utf-8")
    (beside / "salary.md").write_text("# Зарплаты\n\nНе для индекса.\n", encoding="utf-8")
    results = {}
    for doc_id, f in (("new", folder / "new.md"), ("salary", beside / "salary.md")):
        ev = {"type": "upsert", "tenant": tenant, "doc_id": doc_id, "uri": str(f), "version": 1, "acl": ["g"]}
        sent = app.send_task(TASK_INGEST_EVENT, args=[ev]).get(timeout=60)
        results[doc_id] = app.AsyncResult(sent["task_id"]).get(timeout=120)
    assert results["new"]["status"] == "stored"
    assert results["salary"]["status"] == "failed"
    assert "outside the allowed ingest roots" in _errors(tenant)["salary"]


def test_source_folders_are_roots_of_their_own_tenant(celery_worker, voyage, use_settings, tenant, tmp_path):
    folder = tmp_path / "handbook"
    folder.mkdir()
    (folder / "leave.md").write_text("# Отпуск\n\nПравила отпуска.\n", encoding="utf-8")
    source = {"name": "handbook", "kind": "folder", "tenant": tenant, "acl": ["g"], "path": str(folder)}
    use_settings(lifecycle_sources=json.dumps([source]))
    assert _ingest(_doc(tenant, "leave", str(folder / "leave.md")))["status"] == "stored"
    other = _ingest(_doc(f"{tenant}-x", "leave", str(folder / "leave.md")))
    assert other["status"] == "failed" and "outside the allowed ingest roots" in other["error"]


@pytest.mark.timeout(60)
def test_the_reindex_tie_break_reads_with_the_same_bounds(conn, tmp_path):
    """A changed folder file is hashed before it is enqueued; a FIFO (or /dev/zero) there must
    not hang the control pool, and a file outside the folder is not read at all."""
    from ragline.ingest.control.reindex import Plan, tie_break
    from ragline.ingest.sources import Listed, SourceSpec

    folder = tmp_path / "src"
    folder.mkdir()
    os.mkfifo(folder / "pipe.md")
    (tmp_path / "outside.md").write_text("same")
    (folder / "link.md").symlink_to(tmp_path / "outside.md")
    spec = SourceSpec(name="s", kind="folder", tenant="t-tie", path=folder)
    items = [Listed(n, 2, "fp2", str(folder / n), n) for n in ("pipe.md", "link.md")]
    plan = Plan(enqueue=[(i, 2, "changed") for i in items])
    digest = hashlib.sha256(b"same").hexdigest()
    stored = {n: {"status": "ready", "content_hash": digest, "version": 1} for n in ("pipe.md", "link.md")}
    t0 = time.monotonic()
    assert tie_break(conn, spec, plan, stored) == 0
    assert time.monotonic() - t0 < 5
    assert [i.doc_id for i, _, _ in plan.enqueue] == ["pipe.md", "link.md"]  # the ingest records why


# ----------------------------------------------------------------------------------------- URLs


class _Doc(BaseHTTPRequestHandler):
    hits: list[str] = []

    def log_message(self, *a):
        pass

    def do_GET(self):  # noqa: N802
        _Doc.hits.append(self.path)
        body = "# Внутренний\n\nДокумент внутренней сети.\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/markdown")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def _site():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Doc)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    _Doc.hits.clear()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_url_ingestion_is_refused_inside_and_allowed_explicitly(celery_worker, voyage, use_settings, tenant):
    with _site() as site:
        refused = _ingest(_doc(tenant, "internal", f"{site}/doc.md"))
        assert refused["status"] == "failed" and "127.0.0.1: loopback address" in refused["error"]
        assert _Doc.hits == [] and "loopback" in _errors(tenant)["internal"]
        use_settings(ingest_fetch_allow_private="true")
        assert _ingest(_doc(tenant, "internal", f"{site}/doc.md", version=2))["status"] == "stored"
        assert _Doc.hits == ["/doc.md"]


def test_a_request_of_a_url_source_is_held_to_its_allowed_hosts(stack, use_settings, tenant):
    from ragline.ingest.fetch import FetchRefused
    from ragline.ingest.load import load
    from ragline.shared.sdk.contracts import IngestRequest

    with _site() as site:
        other = site.replace("127.0.0.1", "localhost")
        source = {
            "name": "site",
            "kind": "urls",
            "tenant": tenant,
            "urls": [],
            "allowed_hosts": ["localhost"],
        }
        use_settings(ingest_fetch_allow_private="true", lifecycle_sources=json.dumps([source]))
        req = IngestRequest(tenant=tenant, doc_id="d", uri=f"{site}/doc.md", metadata={"source": "site"})
        with pytest.raises(FetchRefused, match="allowed_hosts"):
            load(req)
        assert load(req.model_copy(update={"uri": f"{other}/doc.md"})).data.startswith(
            "# Внутренний".encode()
        )
        assert load(req.model_copy(update={"metadata": {}})).fmt == "md"  # no source: the global guard only


# -------------------------------------------------------------------------------- parser limits


def test_pdf_limits_on_pages_streams_and_drawn_objects():
    from ragline.ingest.parse import ParseError, parse_bytes
    from ragline.ingest.parse.pdf import PdfLimitExceeded, PdfLimits, limited_pages

    small = PdfLimits(max_pages=3, max_stream_bytes=1 << 20, max_decoded_bytes=2 << 20, max_page_objects=1000)
    assert len(list(limited_pages(pdf_pages(3), small))) == 3
    cases = {
        "more than 3 pages": pdf_pages(4),
        "a stream inflates past 1048576 bytes": pdf_flate_bomb(8 << 20),
        "its streams inflate past 2097152 bytes": raw_pdf([flate_bomb(900_000)] * 3),
        "a page draws more than 1000 objects": pdf_drawing(5000),
    }
    for message, data in cases.items():
        with pytest.raises(PdfLimitExceeded, match=message):
            list(limited_pages(data, small))
    # the same bounds for LZW and run-length streams, which expand too
    run_length = bytes([129, ord(" ")]) * 20_000 + b"\x80"  # 20,000 runs of 128 spaces
    with pytest.raises(PdfLimitExceeded, match="a stream inflates"):
        list(limited_pages(raw_pdf([run_length], "/RunLengthDecode"), small))
    # through the parser: a readable error
    with pytest.raises(ParseError, match="PDF refused: a stream inflates past 33554432 bytes"):
        parse_bytes(pdf_flate_bomb(64 << 20), "pdf")
    assert "Page 0" in parse_bytes(pdf_pages(1), "pdf").text


def test_docx_limits_on_xml_parts_and_members():
    from ragline.ingest.parse import ParseError
    from ragline.ingest.parse.docx import DOCX_MAX_MEMBERS, _check_zip_bomb, declared_members

    _check_zip_bomb(docx(document_xml(100)), max_xml_bytes=1 << 20)
    big = docx(document_xml(30_000))  # about 2 MB of XML that deflates about 100:1
    with pytest.raises(ParseError, match="XML parts inflate to"):
        _check_zip_bomb(big, max_xml_bytes=1 << 20)
    # an XML part named like an image is still XML to python-docx (its content type decides)
    hidden = docx(document_xml(30_000), name="word/media/image1.png")
    with pytest.raises(ParseError, match="XML parts inflate to"):
        _check_zip_bomb(hidden, max_xml_bytes=1 << 20)
    many = docx(document_xml(1), extra=DOCX_MAX_MEMBERS + 1)
    assert declared_members(many) == DOCX_MAX_MEMBERS + 4  # with the three parts
    with pytest.raises(ParseError, match=f"parts \\(limit {DOCX_MAX_MEMBERS}"):
        _check_zip_bomb(many, max_xml_bytes=1 << 20)


def test_hostile_documents_fail_alone_with_readable_errors(
    celery_worker, voyage, use_settings, tenant, tmp_path
):
    """Each refusal is that document's open error in `ragline errors`; the good documents of the
    same job are stored by the same worker."""
    import docx as python_docx

    from ragline.ingest.enqueue import collect_files, default_source_name, enqueue_files

    use_settings(
        ingest_pdf_max_pages=3, ingest_pdf_max_stream_bytes=1 << 20, ingest_docx_max_xml_bytes=1 << 20
    )
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "pages.pdf").write_bytes(pdf_pages(4))
    (folder / "bomb.pdf").write_bytes(pdf_flate_bomb(64 << 20))
    (folder / "xml.docx").write_bytes(docx(document_xml(30_000)))
    (folder / "good.pdf").write_bytes(pdf_pages(2))
    good = python_docx.Document()
    good.add_heading("Политика", level=1)
    good.add_paragraph("Документ в пределах всех ограничений.")
    good.save(folder / "good.docx")
    grant_roots(tenant, [folder])
    summary = jobs.wait_for_job(
        enqueue_files(collect_files([folder]), tenant=tenant, acl=["g"]), 300, poll_s=0.2
    )
    assert (summary["documents"], summary["failed"]) == (5, 3), summary
    prefix = default_source_name(folder)
    errors = {k.removeprefix(f"{prefix}/"): v for k, v in _errors(tenant).items()}
    assert errors == {
        "pages.pdf": "parse: PDF refused: more than 3 pages (RAGLINE_INGEST_PDF_MAX_PAGES)",
        "bomb.pdf": "parse: PDF refused: a stream inflates past 1048576 bytes (RAGLINE_INGEST_PDF_MAX_STREAM_BYTES)",
        "xml.docx": errors["xml.docx"],
    }
    assert (
        errors["xml.docx"].startswith("parse: DOCX refused: XML parts inflate to")
        and "RAGLINE_INGEST_DOCX_MAX_XML_BYTES" in errors["xml.docx"]
    )
    with db.connection() as c:
        ready = c.execute(
            "SELECT doc_id FROM documents WHERE tenant = %s AND status = 'ready' ORDER BY doc_id", (tenant,)
        ).fetchall()
    assert [r["doc_id"] for r in ready] == [f"{prefix}/good.docx", f"{prefix}/good.pdf"]
