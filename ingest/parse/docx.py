"""DOCX through ``partition_docx``, after a zip-bomb check on the container's central directory.

python-docx inflates whole parts in memory, so a hostile file is refused from its declared sizes
before anything is inflated.
"""

from __future__ import annotations

import io
import zipfile

from ragline.ingest.parse.common import ParseError

#: a DOCX whose parts inflate past this is refused before parsing (python-docx inflates whole parts in memory)
DOCX_MAX_UNCOMPRESSED = 256 * 1024 * 1024
DOCX_MAX_RATIO = 200  # deflate of real XML stays far below this; a bomb is in the thousands


def elements(data: bytes) -> list:
    """unstructured elements of a DOCX file; a broken or hostile container is a :class:`ParseError`."""
    from unstructured.partition.docx import partition_docx  # parse package stays light: loads per format

    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise ParseError("corrupt DOCX: not a ZIP container")
    _check_zip_bomb(data)
    try:
        return partition_docx(file=io.BytesIO(data), languages=[""])
    except Exception as exc:  # noqa: BLE001 - python-docx raises many types on broken files
        raise ParseError(f"corrupt DOCX: {type(exc).__name__}: {str(exc)[:200]}") from None


def _check_zip_bomb(data: bytes) -> None:
    """Refuse zip bombs from the central directory alone (zipfile never inflates past the declared sizes)."""
    try:
        infos = zipfile.ZipFile(io.BytesIO(data)).infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise ParseError(f"corrupt DOCX: {type(exc).__name__}: {str(exc)[:200]}") from None
    total = sum(i.file_size for i in infos)
    if total > DOCX_MAX_UNCOMPRESSED:
        raise ParseError(
            f"DOCX refused: parts inflate to {total} bytes (limit {DOCX_MAX_UNCOMPRESSED}; zip bomb?)"
        )
    for i in infos:
        if i.file_size > 1024 * 1024 and i.file_size > DOCX_MAX_RATIO * max(1, i.compress_size):
            raise ParseError(
                f"DOCX refused: {i.filename} inflates {i.file_size // max(1, i.compress_size)}x (zip bomb?)"
            )
