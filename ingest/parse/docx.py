"""DOCX through ``partition_docx``, after a zip-bomb check on the container's central directory.

python-docx inflates whole parts in memory and parses every XML part into an lxml tree (several
times the XML's size), so a hostile file is refused from its declared sizes before anything is
inflated: too many members, too many bytes in all, XML parts (found by their content type, not
their name) over ``RAGLINE_INGEST_DOCX_MAX_XML_BYTES``, or a member that inflates like a bomb. zipfile
never inflates past a member's declared size, so the declared sizes are a real bound.
"""

from __future__ import annotations

import io
import struct
import zipfile
from collections.abc import Callable
from xml.etree import ElementTree

from ragline.ingest.parse.common import ParseError
from ragline.shared.config.settings import get_settings

#: every part inflated, media included (the file itself is at most RAGLINE_INGEST_MAX_BYTES)
DOCX_MAX_UNCOMPRESSED = 128 * 1024 * 1024
DOCX_MAX_RATIO = 200  # deflate of real XML stays far below this; a bomb is in the thousands
DOCX_MAX_MEMBERS = 10_000  # zipfile builds an object per member before anything can be checked
_CONTENT_TYPES = "[Content_Types].xml"
_MAX_CONTENT_TYPES = 1024 * 1024


def elements(data: bytes) -> list:
    """unstructured elements of a DOCX file; a broken or hostile container is a :class:`ParseError`."""
    from unstructured.partition.docx import partition_docx  # parse package stays light: loads per format

    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise ParseError("corrupt DOCX: not a ZIP container")
    _check_zip_bomb(data, get_settings().ingest.docx_max_xml_bytes)
    try:
        return partition_docx(file=io.BytesIO(data), languages=[""])
    except Exception as exc:  # noqa: BLE001 - python-docx raises many types on broken files
        raise ParseError(f"corrupt DOCX: {type(exc).__name__}: {str(exc)[:200]}") from None


def declared_members(data: bytes) -> int | None:
    """The member count of the end-of-central-directory record, read before zipfile builds its
    list (None when the record is not found; 0xFFFF means a ZIP64 count, refused as too many)."""
    at = data.rfind(b"PK\x05\x06", max(0, len(data) - 65_557))
    if at < 0 or at + 22 > len(data):
        return None
    return struct.unpack_from("<H", data, at + 10)[0]


def _check_zip_bomb(data: bytes, max_xml_bytes: int) -> None:
    """Refuse zip bombs from the central directory alone (zipfile never inflates past the declared sizes)."""
    members = declared_members(data)
    if members is not None and members > DOCX_MAX_MEMBERS:
        raise ParseError(f"DOCX refused: {members} parts (limit {DOCX_MAX_MEMBERS}; zip bomb?)")
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
        infos = z.infolist()
        xml_part = _xml_parts(z)
    except (zipfile.BadZipFile, ElementTree.ParseError, OSError, ValueError) as exc:
        raise ParseError(f"corrupt DOCX: {type(exc).__name__}: {str(exc)[:200]}") from None
    if len(infos) > DOCX_MAX_MEMBERS:
        raise ParseError(f"DOCX refused: {len(infos)} parts (limit {DOCX_MAX_MEMBERS}; zip bomb?)")
    total = sum(i.file_size for i in infos)
    if total > DOCX_MAX_UNCOMPRESSED:
        raise ParseError(
            f"DOCX refused: parts inflate to {total} bytes (limit {DOCX_MAX_UNCOMPRESSED}; zip bomb?)"
        )
    xml = sum(i.file_size for i in infos if xml_part(i.filename))
    if xml > max_xml_bytes:
        raise ParseError(
            f"DOCX refused: XML parts inflate to {xml} bytes (limit {max_xml_bytes},"
            " RAGLINE_INGEST_DOCX_MAX_XML_BYTES; zip bomb?)"
        )
    for i in infos:
        if i.file_size > 1024 * 1024 and i.file_size > DOCX_MAX_RATIO * max(1, i.compress_size):
            raise ParseError(
                f"DOCX refused: {i.filename} inflates {i.file_size // max(1, i.compress_size)}x (zip bomb?)"
            )


def _xml_parts(z: zipfile.ZipFile) -> Callable[[str], bool]:
    """Which members python-docx parses as XML: by ``[Content_Types].xml`` (an override for the
    part, else the default for its extension), as python-docx decides; by name without one."""
    defaults: dict[str, str] = {}
    overrides: dict[str, str] = {}
    try:
        info = z.getinfo(_CONTENT_TYPES)
    except KeyError:
        info = None
    if info is not None:
        if info.file_size > _MAX_CONTENT_TYPES:
            raise ValueError(f"{_CONTENT_TYPES} is {info.file_size} bytes")
        for el in ElementTree.fromstring(z.read(info)):
            tag = el.tag.rsplit("}", 1)[-1]
            if tag == "Default":
                defaults[el.get("Extension", "").lower()] = el.get("ContentType", "")
            elif tag == "Override":
                overrides[el.get("PartName", "").lstrip("/").lower()] = el.get("ContentType", "")

    def is_xml(name: str) -> bool:
        lower = name.lower()
        ctype = overrides.get(lower) or defaults.get(lower.rsplit(".", 1)[-1] if "." in lower else "")
        return "xml" in ctype.lower() if ctype else lower.endswith((".xml", ".rels"))

    return is_xml
