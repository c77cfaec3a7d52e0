"""File-level ranking of code hits (query/retrieval/file_rank.py): what an issue says about files, and how a
file's evidence adds up."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as examples
from hypothesis import strategies as st

from ragline.operations import code_ablations
from ragline.operations.eval_code import file_ranking
from ragline.query.retrieval import file_rank
from ragline.query.retrieval.file_rank import FileWeights, frames, rank_files, ranked_paths
from ragline.query.retrieval.structure import module_match
from ragline.shared.config.settings import CodeSettings, Settings
from ragline.shared.sdk.contracts import Hit

ISSUE = """Card.value is wrong for long strings

```python
from astropy.io import fits
from astropy.modeling.separable import separability_matrix, _cstack
import astropy.units as u
```

See astropy.io.fits.card.Card and `Table.read`:

Traceback (most recent call last):
  File "/home/me/script.py", line 3, in <module>
    fits.Card.fromstring(s)
  File "/usr/lib/python3/site-packages/astropy/io/fits/header.py", line 10, in fromstring
    return Card(s)
  File "/usr/lib/python3/site-packages/astropy/io/fits/card.py", line 20, in _parse_value
    raise ValueError
"""

ALL = FileWeights(decay=0.5, depth=3, frame=0.5)


def hit(path, score, symbols=(), chunk_no=0) -> Hit:
    return Hit(doc_id=path, chunk_no=chunk_no, path=path, score=score, metadata={"symbols": list(symbols)})


def test_the_traceback_frames_are_read_outermost_first():
    assert frames(ISSUE) == (
        "home/me/script.py",
        "usr/lib/python3/site-packages/astropy/io/fits/header.py",
        "usr/lib/python3/site-packages/astropy/io/fits/card.py",
    )
    assert frames("no traceback here") == ()


def test_module_match_is_a_path_suffix_and_a_package_is_its_init():
    assert module_match("astropy/io/fits/card", "astropy/io/fits/card.py")
    assert module_match("astropy/io/fits", "astropy/io/fits/__init__.py")
    assert module_match("io/fits", "astropy/io/fits/__init__.py")
    assert not module_match("astropy/io/fits", "astropy/io/fits/card.py")
    assert not module_match("fits/card", "astropy/io/fits/scard.py")


def test_default_weights_keep_the_first_hit_order_of_the_eval():
    hits = [hit("r/a.py", 0.9), hit("r/b.py", 0.8), hit("r/a.py", 0.7, chunk_no=1), hit("r/c.py", 0.1)]
    assert (
        ranked_paths(hits, ISSUE, FileWeights(), "r") == file_ranking(hits, "r") == ["a.py", "b.py", "c.py"]
    )


def test_several_matching_chunks_outrank_one_slightly_better_chunk():
    hits = [hit("r/one.py", 1.0), *(hit("r/many.py", 0.9, chunk_no=i) for i in range(3))]
    assert ranked_paths(hits, "no names here", FileWeights(), "r")[0] == "one.py"
    ranked = rank_files(hits, "no names here", FileWeights(decay=0.5, depth=3), "r")
    assert [f.path for f in ranked] == ["many.py", "one.py"]
    assert abs(ranked[0].chunks - 0.9 * (1 + 0.5 + 0.25)) < 1e-9
    # depth caps how many chunks count: with one, the better single chunk wins again
    assert ranked_paths(hits, "", FileWeights(decay=0.5, depth=1), "r")[0] == "one.py"


def test_deepest_traceback_frame_wins_and_outer_frames_count_less():
    hits = [
        hit("astropy/astropy/io/fits/hdu/base.py", 1.0),
        hit("astropy/astropy/io/fits/header.py", 0.6),
        hit("astropy/astropy/io/fits/card.py", 0.5),
    ]
    ranked = rank_files(hits, ISSUE, FileWeights(frame=1.0), "astropy")
    assert [f.path for f in ranked] == [
        "astropy/io/fits/card.py",
        "astropy/io/fits/header.py",
        "astropy/io/fits/hdu/base.py",
    ]
    assert ranked[0].frame == 1.0 and ranked[1].frame == 0.5 and ranked[2].frame == 0.0


def test_bonuses_are_relative_to_the_best_hit_so_any_score_scale_ranks_the_same():
    def hits(scale):
        return [hit("r/x.py", 1.0 * scale), hit("r/astropy/io/fits/card.py", 0.8 * scale)]

    orders = {tuple(ranked_paths(hits(s), ISSUE, FileWeights(frame=0.25), "r")) for s in (0.0003, 1.0, 17.0)}
    assert orders == {("astropy/io/fits/card.py", "x.py")}


def test_dict_hits_and_an_empty_list():
    assert rank_files([], ISSUE, ALL) == []
    assert ranked_paths([{"doc_id": "d", "chunk_no": 0, "path": "r/a.py", "score": 1.0}], "", ALL, "r") == [
        "a.py"
    ]


def code_settings(**code) -> Settings:
    return Settings().model_copy(update={"code": CodeSettings().model_copy(update=code)})


def test_settings_switch_the_file_rank_on_and_off():
    assert file_rank.file_weights_from(code_settings(file_rank=False)).is_first_hit
    assert file_rank.file_weights_from(code_settings(file_rank=True)) == file_rank.WEIGHTS
    # the shipped default: on, the traceback frames, a file's further chunks at a quarter each
    shipped = file_rank.file_weights_from(Settings())
    assert shipped.frame > 0
    assert (shipped.decay, shipped.depth) == (0.25, 3)


FUSED = [hit(f"r/{p}.py", 1.0 - i / 10) for i, p in enumerate("abcdefg")]


@pytest.mark.parametrize(
    ("vector", "lexical", "listed", "reserved"),
    [
        # each list's 1st file within the first 2, its 2nd within the first 4: the lexical list's
        # first file, absent from the fused hits, takes the 2nd place; c, 3rd in the fused order and
        # 2nd in the lexical one, is voted up to the 3rd
        ("ab", "xc", "axcbdefg", "ax"),
        # both lists' first files low in the fused order: the lexical list's are voted up, the
        # vector list's first file is floored to the 2nd place
        ("ga", "fe", "fgeabcd", "g"),
        # a file the fused order has above its floor keeps that place
        ("ab", "ba", "abcdefg", ""),
        # several chunks of one file are one file
        ("aab", "ggfe", "gafbecd", "ab"),
        # one list alone is the fused order's own: nothing to keep
        ("", "xy", "abcdefg", ""),
    ],
)
def test_each_lists_first_files_keep_a_place_in_the_file_list(vector, lexical, listed, reserved):
    """Whatever the fusion's weights, the vector and the lexical list's n-th file is listed within
    the first 2n files (no slack), whether the fused hits hold it lower or not at all (a file
    without a fused hit has no first hit); the fused hits' file order and the lexical list's vote
    equally (file_rank.voted), and the floors move a file above that order (``reserved``)."""
    w = FileWeights(floor_slack=0)
    leads = [[hit(f"r/{p}.py", 5.0) for p in one] for one in (vector, lexical)]
    files = rank_files(FUSED, "an issue", w, "r", leads=leads)
    assert "".join(f.path[0] for f in files) == listed
    assert "".join(f.path[0] for f in files if f.reserved) == reserved
    assert all((f.best is None) == (f.path[0] not in "abcdefg") for f in files)
    assert [f.path for f in rank_files(FUSED, "an issue", w, "r")] == [f"{p}.py" for p in "abcdefg"]


#: a search's fused hits and its two lists, none empty (a search with one list has nothing to keep)
FILES = st.lists(st.sampled_from("abcdefghijklmnopqrstuvwxyz"), min_size=1, max_size=30)


@given(fused=FILES, vector=FILES, lexical=FILES, slack=st.integers(0, 2))
@examples(max_examples=300, deadline=None)
def test_the_file_list_holds_every_lists_first_k_files_within_2k_plus_slack(fused, vector, lexical, slack):
    """The guarantee, for every k up to LEADS: the first 2k + slack files listed hold the first k
    files of the vector and of the lexical list (so Acc@(2k + slack) of the file list is at least
    each list's Acc@k); with a slack the first file of the fused order fused with the lexical
    list's vote stays first; every fused file is listed once, and the files no floor keeps (the
    fused hits' alone) keep the fused order."""
    fused_hits = [hit(f"{p}.py", 1.0 - i / 100, chunk_no=i) for i, p in enumerate(fused)]
    leads = [[hit(f"{p}.py", 1.0) for p in one] for one in (vector, lexical)]
    w = FileWeights(floor_slack=slack)
    files = [f.path for f in rank_files(fused_hits, "an issue", w, leads=leads)]
    assert len(files) == len(set(files)) and {f"{p}.py" for p in fused} <= set(files)
    firsts = [list(dict.fromkeys(one))[: file_rank.LEADS] for one in (vector, lexical)]
    for k in range(1, file_rank.LEADS + 1):
        for first in firsts:
            assert {f"{p}.py" for p in first[:k]} <= set(files[: 2 * k + slack]), (k, first)
    voted = file_rank.voted(rank_files(fused_hits, "an issue", w), [f"{p}.py" for p in firsts[1]], {})
    assert slack == 0 or files[0] == voted[0].path
    floored = {f"{p}.py" for first in firsts for p in first}
    assert [f for f in files if f not in floored] == [
        f"{p}.py" for p in dict.fromkeys(fused) if f"{p}.py" not in floored
    ]


def test_lead_files_absent_from_the_fused_hits_are_listed_with_their_own_evidence():
    leads = [[hit("x.py", 1.0)], [hit("y.py", 1.0)]]
    files = rank_files([hit("a.py", 1.0)], "an issue", FileWeights(floor_slack=0), leads=leads)
    # both lists' first files within the first two places (the lexical one, which the vote lists,
    # first), the fused hits' file after them
    assert [(f.path, f.reserved, f.best) for f in files] == [
        ("y.py", True, None),
        ("x.py", True, None),
        ("a.py", False, 0),
    ]
    # with the shipped slack of one the fused order's first file keeps the first place, and the
    # lexical list's first file (its vote) comes before the vector list's
    files = rank_files([hit("a.py", 1.0)], "an issue", FileWeights(), leads=leads)
    assert [f.path for f in files] == ["a.py", "y.py", "x.py"]
    # a lead file's own evidence: the issue's traceback frame is in it
    frame = rank_files(
        [hit("a.py", 1.0)],
        ISSUE,
        FileWeights(frame=0.5),
        leads=[[hit("a.py", 1.0)], [hit("r/astropy/io/fits/card.py", 1.0)]],
    )
    assert frame[-1].frame == 1.0 and frame[-1].chunks == 0.0


def test_the_variants_measured_hold_the_first_hit_order_and_the_configured_weights():
    configured = FileWeights(frame=0.5)
    v = code_ablations.file_variants(configured)
    assert v["none"].is_first_hit and v["configured"] == configured
    assert {"only frame=0.5", "only decay=0.25", "all"} <= set(v)


def test_the_code_eval_ranks_files_by_their_evidence_and_measures_the_variants(tmp_path):
    """The eval's file list goes through the file ranking: the traceback's deepest frame ranks first
    although another file's chunk matched better (the first-hit order put it second)."""
    from ragline.operations.eval_code import CodeQuery, Snapshot, run_code_eval

    snap = Snapshot(tmp_path / "astropy.bundle", "abc")
    queries = [
        CodeQuery(f"astropy__astropy-{n}", ISSUE, snap, ("astropy/io/fits/card.py",)) for n in range(1, 5)
    ]
    hits = [
        hit("astropy/astropy/io/fits/hdu/base.py", 0.9).model_dump(),
        hit("astropy/astropy/io/fits/card.py", 0.8).model_dump(),
    ]

    def search(query, tenant, mode, layers, structural):
        return {"hits": hits}

    result = run_code_eval(
        queries,
        lambda s, c, n: {"tenant": "t", "commit": "c" * 40},
        search,
        ["lexical"],
        "code",
        ablate=False,
    )
    assert result["modes"]["lexical [code]"]["acc@1"] == 1.0
    variants = result["file_rank"]["lexical [code]"]
    assert variants["none"]["acc@1"] == 0.0 and variants["only frame=0.5"]["acc@1"] == 1.0
    assert result["meta"]["file_rank"] is True
    assert {r["chosen_on"] for r in result["file_rank_held_out"]["lexical [code]"]["runs"]} == {"A", "B"}


@pytest.mark.parametrize(
    ("file_rank_on", "layer", "listed"),
    [(True, "C0_SOURCE_CHUNKS", True), (True, "docs", False), (False, "C0_SOURCE_CHUNKS", False)],
)
def test_a_search_response_lists_the_files_in_the_file_rankings_order(
    monkeypatch, file_rank_on, layer, listed
):
    """service.search's ``files`` are rank_files' order with the configured weights (the deepest
    traceback frame first), for a code search with the file ranking on; none otherwise."""
    from ragline.query import service
    from ragline.shared.sdk.contracts import SearchRequest, SearchResponse

    s = Settings(code_file_rank=file_rank_on)
    hits = [
        Hit(doc_id=p, chunk_no=0, path=p, score=sc, layer=layer)
        for p, sc in (("r/astropy/io/fits/hdu/base.py", 0.9), ("r/astropy/io/fits/card.py", 0.8))
    ]
    monkeypatch.setattr(service, "get_settings", lambda: s)
    monkeypatch.setattr(
        service,
        "retrieve",
        lambda req, limit, conn=None: SearchResponse(hits=hits, timings_ms={"total": 1.0}),
    )
    resp = service.search(SearchRequest(query=ISSUE, tenant="t", groups=["g"], rerank=False))
    if not listed:
        assert resp.files == []
        return
    assert [f.path for f in resp.files] == ranked_paths(hits, ISSUE, file_rank.file_weights_from(s))
    assert resp.files[0].path == "r/astropy/io/fits/card.py" and resp.files[0].frame == 1.0
    assert [f.first_hit for f in resp.files] == [1, 0]


def test_a_search_response_lists_the_list_leads_the_retrieval_kept_and_never_sends_them(monkeypatch):
    """The retrieval hands service.search the hybrid search's single lists' leads beside its hits
    (a private attribute: not part of the contract, never serialized); the files listed hold them."""
    from ragline.query import service
    from ragline.shared.sdk.contracts import SearchRequest, SearchResponse

    s = Settings()
    hits = [
        Hit(doc_id=p, chunk_no=0, path=p, score=1.0, layer="C0_SOURCE_CHUNKS") for p in ("r/a.py", "r/b.py")
    ]
    lead = Hit(doc_id="r/x.py", chunk_no=3, path="r/x.py", layer="C0_SOURCE_CHUNKS")
    monkeypatch.setattr(service, "get_settings", lambda: s)
    monkeypatch.setattr(
        service,
        "retrieve",
        lambda req, limit, conn=None: SearchResponse(hits=hits, timings_ms={"total": 1.0}).with_list_leads(
            [[hits[0]], [lead]]
        ),
    )
    resp = service.search(SearchRequest(query="an issue", tenant="t", groups=["g"], rerank=False))
    # the lexical list's first file, which no fused hit holds, is voted to the second place
    assert [(f.path, f.reserved, f.first_hit) for f in resp.files] == [
        ("r/a.py", False, 0),
        ("r/x.py", False, None),
        ("r/b.py", False, 1),
    ]
    sent = resp.model_dump_json()
    assert (
        "list_leads" not in sent
        and "r/x.py" in sent
        and SearchResponse.model_validate_json(sent).list_leads == []
    )


@pytest.mark.parametrize(
    ("fused", "vote", "listed"),
    [
        # a file both orders rank second beats one only the fused order ranks first
        ("abc", "xb", "bax c".replace(" ", "")),
        # the vote alone: equal places tie, and the fused order goes first
        ("ab", "xy", "axby"),
        # the same order twice is that order
        ("abc", "abc", "abc"),
    ],
)
def test_the_lexical_list_votes_on_the_file_order_as_much_as_the_fused_hits(fused, vote, listed):
    """The fused hits weigh the lexical list a tenth per chunk for code; the file order gives its
    files an equal vote (reciprocal rank, the same constant for both orders), so a file the text
    model misses but the lexical list ranks well is not buried. Fails on the floors alone, which
    keep the fused order wherever no floor is due."""
    ranked = rank_files([hit(f"{p}.py", 1.0 - i / 10, chunk_no=i) for i, p in enumerate(fused)], "", ALL)
    extra = {f"{p}.py": file_rank.FileScore(f"{p}.py", 0.0, 0.0, 0.0, None) for p in vote}
    out = file_rank.voted(ranked, [f"{p}.py" for p in vote], extra)
    assert "".join(f.path[0] for f in out) == listed
    assert [f.score for f in out] == sorted((f.score for f in out), reverse=True)
    # through rank_files: the lexical list's second file, third in the fused hits, moves up
    leads = [[hit("a.py", 1.0)], [hit("x.py", 1.0), hit("c.py", 1.0)]]
    hits = [hit(f"{p}.py", 1.0 - i / 10, chunk_no=i) for i, p in enumerate("abcd")]
    assert [f.path for f in rank_files(hits, "", ALL, leads=leads)][:3] == ["c.py", "a.py", "x.py"]
