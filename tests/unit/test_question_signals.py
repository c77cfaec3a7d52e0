"""What an issue names, by kind, read from real issue texts (../shared/datasets/swe-loc-dev/instances.jsonl)
and weighed by the ranking (query/retrieval/structure.py ``named``, query/retrieval/file_rank.py): a
path, a bare file name, a traceback frame's file (the deepest first), an identifier quoted as code."""

from __future__ import annotations

import json

import pytest

from ragline.query.retrieval import file_rank, structure
from ragline.query.retrieval.file_rank import FileWeights, rank_files
from ragline.shared.sdk.contracts import Hit
from tests.conftest import DATASETS

INSTANCES = DATASETS / "swe-loc-dev" / "instances.jsonl"
pytestmark = pytest.mark.skipif(not INSTANCES.is_file(), reason="datasets not present")


def issue(instance_id: str) -> str:
    for line in INSTANCES.read_text().splitlines():
        row = json.loads(line)
        if row["instance_id"] == instance_id:
            return row["query"][:4000]
    raise KeyError(instance_id)


def hit(path: str, score: float, symbols: tuple[str, ...] = ()) -> Hit:
    return Hit(doc_id=path, chunk_no=0, path=path, score=score, metadata={"symbols": list(symbols)})


def test_a_path_the_issue_writes_names_its_file_and_a_bare_file_name_half():
    n = structure.named(issue("psf__requests-2317"))  # "... in requests/sessions.py ..."
    assert "requests/sessions.py" in n.files
    assert structure.path_named(n, "requests/sessions.py") == 1.0
    assert structure.path_named(n, "requests/models.py") == 0.0
    bare = structure.named(issue("pydicom__pydicom-1256"))  # "... in `jsonrep.py` ..."
    assert structure.path_named(bare, "pydicom/jsonrep.py") == 0.5


def test_a_traceback_frame_names_its_file_the_deepest_weighing_most():
    text = issue("marshmallow-code__marshmallow-1343")
    frames = file_rank.frames(text)
    # site-packages paths are the repository's files; the frames outermost first
    assert frames[-1].endswith("marshmallow/fields.py") and any(
        f.endswith("marshmallow/schema.py") for f in frames
    )
    files = rank_files(
        [
            hit("src/marshmallow/utils.py", 1.0),
            hit("src/marshmallow/schema.py", 0.6),
            hit("src/marshmallow/fields.py", 0.6),
        ],
        text,
        FileWeights(frame=0.5),
    )
    by_path = {f.path: f for f in files}
    assert by_path["src/marshmallow/fields.py"].frame == 1.0 > by_path["src/marshmallow/schema.py"].frame > 0
    assert files[0].path == "src/marshmallow/fields.py" and by_path["src/marshmallow/utils.py"].frame == 0


@pytest.mark.parametrize(
    ("instance_id", "quoted"),
    [
        ("psf__requests-1963", "Session.resolve_redirects"),  # "`Session.resolve_redirects` copies ..."
        ("pallets__flask-4992", "flask.Config.from_file"),  # "... `flask.Config.from_file()` ..."
        ("pydicom__pydicom-1694", "Dataset.to_json_dict"),  # "`Dataset.to_json_dict(...)` ..."
    ],
)
def test_an_identifier_quoted_as_code_is_named(instance_id, quoted):
    assert quoted in structure.named(issue(instance_id)).identifiers
