"""Small valid PDFs written byte by byte, for parser tests that must not depend on a PDF library."""

from __future__ import annotations

import zlib


def raw_pdf(contents: list[bytes], filters: str = "/FlateDecode") -> bytes:
    """A PDF with one page per content stream (already encoded with ``filters``), Helvetica as F1."""
    n = len(contents)
    objs = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{' '.join(f'{4 + 2 * i} 0 R' for i in range(n))}] /Count {n} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, stream in enumerate(contents):
        objs.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >>"
            f" /Contents {5 + 2 * i} 0 R >>".encode()
        )
        objs.append(
            f"<< /Length {len(stream)} /Filter {filters} >>\nstream\n".encode() + stream + b"\nendstream"
        )
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objs, start=1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def make_pdf(pages: list[list[tuple[float, str]]]) -> bytes:
    """A PDF of text pages: each page is a list of (font size, ASCII line) drawn top to bottom, with its
    page number in the bottom margin (a running element the parser must drop)."""
    streams = []
    for lines in pages:
        y = 760
        ops = []
        for size, text in lines:
            esc = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
            ops.append(f"BT /F1 {size:g} Tf 72 {y} Td ({esc}) Tj ET")
            y -= int(size * 2.2)
        ops.append(f"BT /F1 9 Tf 300 30 Td ({17 + len(streams)}) Tj ET")
        streams.append(zlib.compress("\n".join(ops).encode("latin-1")))
    return raw_pdf(streams)
