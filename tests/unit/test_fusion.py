from dataclasses import replace

from ragline.query.retrieval.fusion import rrf


def test_rrf_sums_reciprocal_ranks_with_k():
    fused = dict(rrf({"a": ["x", "y"], "b": ["y", "z"]}, k=60))
    assert fused["y"] == 1 / 62 + 1 / 61
    assert fused["x"] == 1 / 61
    assert fused["z"] == 1 / 62


def test_rrf_order_and_weights():
    order = [d for d, _ in rrf({"a": ["x", "y"], "b": ["y", "z"]}, k=60)]
    assert order == ["y", "x", "z"]
    weighted = [d for d, _ in rrf({"a": ["x"], "b": ["z"]}, k=60, weights={"a": 0.5, "b": 1.0})]
    assert weighted == ["z", "x"]


def test_rrf_ties_break_by_best_rank_then_first_seen():
    order = [d for d, _ in rrf({"a": ["p", "q"], "b": ["q", "p"]}, k=60)]
    assert order == ["p", "q"]


def _row(doc: str, n: int = 0, **kw) -> dict:
    return {
        "doc_id": doc,
        "chunk_no": n,
        "path": f"{doc}.md",
        "layer": "docs",
        "heading_path": "",
        "content": doc,
        "context": "",
        "page": None,
        "metadata": {},
        "distance": 0.1,
        "rank": 0.5,
        **kw,
    }


def fuse(vector, lexical, settings, limit, query="", vector_share=1.0, paths=None):
    """A search's fused hits for ``query`` (:meth:`RankingPolicy.fuse`), with the path preferences
    ``paths`` (:class:`~ragline.query.retrieval.ranking.PathPreferences`)."""
    from ragline.query.retrieval.ranking import PathPreferences, RankingPolicy

    policy = replace(RankingPolicy.for_question(query, settings), paths=paths or PathPreferences())
    return policy.fuse(vector, lexical, limit, vector_share)


def test_fuse_scores_rows_then_builds_only_the_kept_hits(monkeypatch):
    from ragline.query.retrieval import fusion
    from ragline.shared.config.settings import Settings

    monkeypatch.setattr(fusion, "PROSE", replace(fusion.PROSE, vector_weight=1.0, lexical_weight=1.0))
    s = Settings(fusion_method="rrf")
    from ragline.query.retrieval.ranking import PathPreferences

    vector = [_row("a", distance=0.1), _row("b", distance=0.2), _row("t", distance=0.3, layer="T")]
    lexical = [_row("b", rank=0.9), _row("c", rank=0.4)]
    paths = PathPreferences(prefixes=("c.",), tests_layer="T", bonus=0.5, penalty=1.0)
    hits = fuse(vector, lexical, s, limit=3, paths=paths)
    assert [h.doc_id for h in hits] == ["c", "b", "a"]  # bonus lifts c; b is in both lists; t penalised out
    c, b, a = hits
    assert (b.vector_rank, b.vector_distance, b.lexical_rank, b.lexical_score) == (2, 0.2, 1, 0.9)
    assert (a.vector_rank, a.lexical_rank, c.vector_rank, c.lexical_rank) == (1, None, None, 2)
    assert b.fused_score == round(1 / 62 + 1 / 61, 8) and b.score == b.fused_score
    assert c.score == round(1 / 62 + 0.5, 8) and c.prefer_bonus == 0.5
    everything = fuse(vector, lexical, s, limit=10, paths=paths)
    assert everything[-1].doc_id == "t" and everything[-1].score < 0


# ------------------------------------------------------------------- cross-lingual lexical weight
RU = [
    "Лютер писал, что двое монахов, Иоганн Эш и Генрих Вос, были сожжены на костре в Брюсселе.",
    "Методистская церковь учит, что спасение даётся верой, и ведёт служение в США и за рубежом.",
]
EN_QUESTION = "Why were Johann Esch and Heinrich Voes executed by the Catholic Church?"
RU_QUESTION = "Почему Иоганн Эш и Генрих Вос были казнены католической церковью?"


def test_script_of_reads_the_words_not_numbers_or_identifiers():
    from ragline.query.retrieval.language import neutral_terms, script_of

    assert script_of(EN_QUESTION) == "LATIN"
    assert script_of(RU_QUESTION) == "CYRILLIC"
    assert script_of("Ελληνικά γράμματα") == "GREEK"
    # a Latin title in a Russian question (it is spelled in Latin in the Russian passage too)
    assert script_of("Кто написал Liber servitoris?") is None
    assert script_of("как работает computed в Vue?") is None  # mixed
    assert script_of("1564 2015") is None and script_of("") is None
    assert script_of("Что делает author.books и defineProps() в Vue 3") == "CYRILLIC"
    assert neutral_terms("What does defineProps return in Vue 3 for register_hook, author.books, now()?") == [
        "defineProps",
        "3",
        "register_hook",
        "author.books",
        "now()",
    ]
    assert neutral_terms(EN_QUESTION) == []


def test_cross_script_only_when_no_term_can_match_alike():
    from ragline.query.retrieval.language import cross_script

    assert cross_script(EN_QUESTION, RU)
    assert not cross_script(RU_QUESTION, RU)
    assert cross_script(RU_QUESTION, ["The United Methodist Church teaches salvation by faith."])
    # a number or an identifier is spelled the same in both: the lexical list can match it for real
    assert not cross_script("What is the name of the French colony established in 1564?", RU)
    assert not cross_script("What does defineProps return?", RU)
    # passages in no clear script (Russian prose around as much English code) tell nothing
    mixed = [
        "Функция computed() возвращает ref: const total = computed(() => items.value.length) return total"
    ]
    assert not cross_script("How do computed properties work?", mixed)
    assert not cross_script(EN_QUESTION, [])


def test_lexical_weight_drops_only_for_a_cross_script_question():
    from ragline.query.retrieval.language import lexical_weight

    assert lexical_weight(EN_QUESTION, RU, 0.25, 0.0) == 0.0
    assert lexical_weight(RU_QUESTION, RU, 0.25, 0.0) == 0.25
    assert lexical_weight(EN_QUESTION, [], 0.25, 0.0) == 0.25  # no vector list to fall back on
    # the cross-script weight never raises the lexical one: setting it >= the weight turns the check off
    assert lexical_weight(EN_QUESTION, RU, 0.25, 0.5) == 0.25
    assert lexical_weight(EN_QUESTION, RU, 0.25, 0.01) == 0.01


def _noise_lists() -> tuple[list[dict], list[dict]]:
    """The vector list ranks the right passage first; the lexical list matched only the word
    "Church" of the English title of the wrong one."""
    vector = [
        _row("Martin_Luther_p3", content=RU[0], distance=0.15),
        _row("United_Methodist_Church_p4", content=RU[1], distance=0.151),
    ]
    lexical = [_row("United_Methodist_Church_p4", content=RU[1], rank=0.02)]
    return vector, lexical


def test_fuse_keeps_the_vector_order_for_an_english_question_over_russian_passages(monkeypatch):
    from ragline.query.retrieval import fusion
    from ragline.shared.config.settings import Settings

    s = Settings(fusion_method="rrf")  # the RRF defaults: 1 : 0.0175, cross-script 0
    vector, lexical = _noise_lists()
    hits = fuse(vector, lexical, s, limit=2, query=EN_QUESTION)
    assert [h.doc_id for h in hits] == ["Martin_Luther_p3", "United_Methodist_Church_p4"]
    assert hits[1].lexical_rank == 1 and hits[1].fused_score == round(1 / 62, 8)  # still reported, weight 0
    # the same lists for the Russian wording, or with the check off, fuse as before: the lexical
    # match lifts the second passage over the first
    shipped = fusion.PROSE
    for query, cross_script in ((RU_QUESTION, shipped.cross_script_weight), (EN_QUESTION, 1.0)):
        monkeypatch.setattr(fusion, "PROSE", replace(shipped, cross_script_weight=cross_script))
        hits = fuse(vector, lexical, s, limit=2, query=query)
        assert [h.doc_id for h in hits] == ["United_Methodist_Church_p4", "Martin_Luther_p3"], query
        assert hits[0].fused_score == round(1 / 62 + 0.0175 / 61, 8)


def test_sweep_recomputes_hybrid_with_the_retrievers_lexical_weight():
    from ragline.operations.eval import sweep_rrf

    vector, lexical = _noise_lists()
    lists = {"vector": vector, "lexical": lexical}

    def search(query: str, mode: str, k: int) -> dict:
        return {
            "hits": [{"doc_id": r["doc_id"], "chunk_no": 0, "content": r["content"]} for r in lists[mode]]
        }

    queries = [
        {"query": EN_QUESTION, "relevant": {"Martin_Luther_p3": 1}},
        {"query": RU_QUESTION, "relevant": {"Martin_Luther_p3": 1}},
    ]
    checked, unchecked = (
        sweep_rrf(queries, search, [(1.0, 1.0)], cross_script_weight=w)[0] for w in (0.0, None)
    )
    assert checked["cross_script"] == 1 and unchecked["cross_script"] == 0
    # checked: the English question keeps the right passage first (RR 1), the Russian one does not (1/2)
    assert checked["mrr@10"] == 0.75 and unchecked["mrr@10"] == 0.5
