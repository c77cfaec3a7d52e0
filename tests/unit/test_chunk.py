"""Chunker: sentence-safe splitting, whole tables/code, and hypothesis properties of the packing."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ragline.ingest.chunk.prose import _units, chunk_blocks, pack_section
from ragline.ingest.parse import Block
from ragline.shared.worker.text import split_sentences


def test_abbreviations_versions_and_decimals_are_not_split():
    text = (
        "Система проверяет доступ, т.е. права пользователя. Версия v1.2 вышла вчера. "
        "Число 3.14 знают все. Это см. раздел 2.1 выше."
    )
    assert split_sentences(text) == [
        "Система проверяет доступ, т.е. права пользователя.",
        "Версия v1.2 вышла вчера.",
        "Число 3.14 знают все.",
        "Это см. раздел 2.1 выше.",
    ]


def test_table_is_kept_whole_below_the_hard_limit():
    rows = ["№ | Описание"] + [f"1.{i} | Требование номер {i} к системе." for i in range(20)]
    table = Block("\n".join(rows), "table", ("ASVS",))
    chunks = chunk_blocks(
        [Block("Вводный текст.", "text", ("ASVS",)), table], max_chars=200, hard_max_chars=4000
    )
    tables = [c for c in chunks if "1.0 |" in c.content]
    assert len(tables) == 1 and tables[0].content.endswith("\n".join(rows))


def test_oversized_table_is_split_by_rows_with_the_header_repeated():
    header = "№ | Описание | L1"
    rows = [f"4.{i} | Убедитесь, что требование {i} выполняется на стороне сервера. | ✓" for i in range(60)]
    chunks = chunk_blocks(
        [Block("\n".join([header, *rows]), "table", ("V4",))], max_chars=800, hard_max_chars=1000
    )
    assert len(chunks) > 3
    seen = []
    for c in chunks:
        lines = c.content.splitlines()
        assert lines[0] == header and len(c.content) <= 1000
        seen += lines[1:]
    assert seen == rows  # every row exactly once, in order: table rows are never overlapped


def test_oversized_code_is_split_by_lines():
    lines = [f"const value{i} = compute({i}) // строка {i}" for i in range(200)]
    chunks = chunk_blocks([Block("\n".join(lines), "code", ("Код",))], max_chars=800, hard_max_chars=1500)
    assert all(len(c.content) <= 1500 for c in chunks)
    assert [ln for c in chunks for ln in c.content.splitlines()] == lines


def test_sections_follow_headings():
    blocks = [
        Block("Первый раздел. Его текст.", "text", ("Док", "А")),
        Block("Второй раздел.", "text", ("Док", "Б")),
    ]
    chunks = chunk_blocks(blocks)
    assert [(c.heading_path, c.content) for c in chunks] == [
        (("Док", "А"), "Первый раздел. Его текст."),
        (("Док", "Б"), "Второй раздел."),
    ]


# --- properties ----------------------------------------------------------------------------------
WORDS = [
    "система",
    "доступ",
    "т.е.",
    "v1.2",
    "3.14",
    "пользователь",
    "права",
    "версия",
    "см.",
    "данные",
    "проверка",
    "сервер",
    "ключ",
    "token",
    "API",
    "2.0",
    "журнал",
    "запрос",
]


@st.composite
def sentence(draw, n: int) -> str:
    words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=40))
    return f"Пункт{n} " + " ".join(words) + draw(st.sampled_from([".", "!", "?"]))


@st.composite
def blocks(draw) -> list[Block]:
    out, n = [], 0
    headings = [("Док",), ("Док", "Раздел А"), ("Док", "Раздел Б")]
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["text", "text", "text", "list", "table", "code"]))
        path = draw(st.sampled_from(headings))
        if kind in ("table", "code"):
            k = draw(st.integers(1, 40))
            lines = [f"ряд{n}-{i} | значение {i} | " + "x" * draw(st.integers(0, 120)) for i in range(k)]
            n += 1
            out.append(Block("\n".join(lines), kind, path))
            continue
        sents = []
        for _ in range(draw(st.integers(1, 12))):
            sents.append(draw(sentence(n)))
            n += 1
        out.append(Block(" ".join(sents), kind, path))
    return out


@settings(max_examples=80, deadline=None)
@given(blocks(), st.integers(120, 900), st.floats(0.0, 0.3))
def test_packing_properties(bs, max_chars, ratio):
    hard = max(max_chars * 2, 300)
    overlap_chars = int(max_chars * ratio)
    from itertools import groupby

    for _, section in groupby(bs, key=lambda b: b.heading_path):
        units = _units(list(section), max_chars, hard)
        ids = {id(u): i for i, u in enumerate(units)}
        packed = pack_section(units, max_chars, overlap_chars)
        covered = -1  # highest unit index emitted so far
        for chunk in packed:
            idx = [ids[id(u)] for u in chunk]
            assert idx == list(range(idx[0], idx[0] + len(idx)))  # contiguous, in order
            assert idx[-1] > covered  # something new: never a chunk of overlap only
            assert idx[0] <= covered + 1  # nothing skipped
            overlap = [i for i in idx if i <= covered]
            assert all(units[i].kind == "sentence" for i in overlap)  # tables/code never repeated
            text = chunk_text(chunk)
            if len(text) > max_chars:
                assert len(chunk) == 1, "only an indivisible unit may exceed the limit"
                assert len(text) <= hard
            covered = idx[-1]
        assert covered == len(units) - 1  # every unit landed in some chunk


def chunk_text(chunk):
    from ragline.ingest.chunk.prose import _join

    return _join(chunk)


@settings(max_examples=60, deadline=None)
@given(blocks())
def test_every_sentence_lands_in_a_chunk_in_order(bs):
    chunks = chunk_blocks(bs, max_chars=400, overlap_ratio=0.15, hard_max_chars=1000)
    assert [c.chunk_no for c in chunks] == list(range(len(chunks)))
    flat = "\n".join(c.content for c in chunks)
    pos = 0
    for b in bs:
        pieces = split_sentences(b.text) if b.kind in ("text", "list") else b.text.splitlines()
        for p in pieces:
            if len(p) > 400:  # an over-long sentence is wrapped at whitespace: check its first words
                p = p[:40]
            found = flat.find(p, pos if b.kind in ("text", "list") else 0)
            assert found >= 0, p
        # sentences appear in order: the first sentence of each block is found after the previous block's
        first = pieces[0][:40]
        nxt = flat.find(first, pos)
        assert nxt >= 0
        pos = nxt
