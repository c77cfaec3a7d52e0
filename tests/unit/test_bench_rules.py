"""The benchmarks' pure rules: what a target compares, not what a run measured."""

from __future__ import annotations

import pytest

from bench import common


def test_queue_overhead_is_judged_against_the_bare_round_trip():
    # a slow VM: Celery alone takes 10 ms at p95, ragline adds 12 ms on top of 3 ms of SQL
    record, target = common.queue_overhead("t", queue_p95=15.0, direct_p95=3.0, bare_p95=10.0)
    assert target.passed and record["passed"]
    assert record == {
        "queue_p95_ms": 15.0,
        "direct_p95_ms": 3.0,
        "bare_celery_p95_ms": 10.0,
        "overhead_p95_ms": 12.0,
        "allowed_ms": 12.5,
        "passed": True,
    }
    assert target.measured == 12.0 and target.threshold == pytest.approx(12.5) and target.op == "<="
    assert "bare Celery round trip" in target.name


@pytest.mark.parametrize(
    ("queue", "direct", "bare", "passed"),
    [
        (15.0, 3.0, 10.0, True),  # a fixed 1.5 x direct + 5 ms allowance (9.5 ms) would fail it
        (15.5, 3.0, 10.0, True),  # exactly 1.25 x the bare round trip
        (15.6, 3.0, 10.0, False),
        (4.0, 3.0, 1.0, True),  # a quiet machine: the allowance shrinks with Celery's own cost
        (6.0, 3.0, 1.0, False),  # ... and ragline's 3 ms on top of 1 ms Celery is too much there
        (40.0, 30.0, 10.0, True),  # slow SQL is not the queue's overhead
    ],
)
def test_queue_overhead_boundaries(queue, direct, bare, passed):
    record, target = common.queue_overhead("t", queue, direct, bare)
    assert target.passed is passed and record["passed"] is passed
    assert record["overhead_p95_ms"] == pytest.approx(queue - direct)


def test_retrieval_call_orders_put_every_side_once_in_every_position():
    from bench.retrieval import ORDERS

    sides = {"rls", "owner", "queue", "bare"}
    assert all(set(order) == sides and len(order) == len(sides) for order in ORDERS)
    for position in range(len(sides)):
        assert {order[position] for order in ORDERS} == sides


def test_the_no_op_worker_is_the_query_pools_command_on_its_own_app_and_queue():
    from bench import noop_worker
    from ragline.shared.config.settings import get_settings
    from ragline.shared.sdk.names import CELERY_APP, QUEUES
    from ragline.shared.stack.processes import worker_command

    settings = get_settings()
    argv, env = noop_worker.worker_argv(settings)
    pool = worker_command(settings, "query").argv
    assert argv[argv.index("-A") + 1] == "bench.noop_worker:app" and CELERY_APP not in argv
    assert argv[argv.index("-Q") + 1] == noop_worker.QUEUE and noop_worker.QUEUE not in QUEUES
    assert argv[argv.index("--pool") + 1] == pool[pool.index("--pool") + 1]  # the query pool's kind
    # everything else (concurrency, events, gossip and mingle off, log level) as the query pool runs
    strip = {"-A", "-Q", "-n"}

    def rest(a):
        return [x for i, x in enumerate(a) if x not in strip and (i == 0 or a[i - 1] not in strip)]

    assert rest(argv) == rest(pool)
    assert env == worker_command(settings, "query").env


def _sides(r_cps, r_chars, r_q, r_in, p_cps, p_chars, p_q, r_recall=0.9, p_recall=0.9):
    def lat(p95):
        return {"p50_ms": p95 / 2, "p95_ms": p95}

    ragline = {
        "ingest": {"chunks_per_s": r_cps, "source_chars_per_s": r_chars},
        "query_queue": lat(r_q),
        "query_in_process": lat(r_in),
        "recall": {"recall@10": r_recall},
    }
    peer = {
        "ingest": {"chunks_per_s": p_cps, "source_chars_per_s": p_chars},
        "query": lat(p_q),
        "recall": {"recall@10": p_recall},
    }
    return ragline, peer


def test_peer_ratios_are_ragline_over_the_peer():
    from bench import peer

    r = peer.ratios(*_sides(300, 90_000, 12.0, 6.0, 200, 120_000, 8.0))
    assert r["ingest_chunks_per_s"] == 1.5 and r["ingest_source_chars_per_s"] == 0.75
    assert r["query_p95_queue"] == 1.5 and r["query_p95_in_process"] == 0.75
    assert r["query_p50_queue"] == 1.5 and r["query_p50_in_process"] == 0.75
    by_name = {t.name: t for t in peer.targets(r, failed=0)}
    assert not by_name["ingestion, source chars/s: ragline / LlamaIndex"].passed  # same input, slower
    assert by_name["ingestion, chunks/s: ragline / LlamaIndex"].passed
    assert by_name["hybrid query p95, in process: ragline / LlamaIndex"].passed  # lower latency passes
    assert not by_name["hybrid query p95, ragline's queue / LlamaIndex in process"].passed
    assert by_name["documents failed (ragline, every round)"].passed
    recall = "hybrid recall@10 on tydi-ru-dev, local model: ragline / LlamaIndex"
    assert by_name[recall].passed  # equal recall passes
    worse = peer.ratios(*_sides(300, 90_000, 12.0, 6.0, 200, 120_000, 8.0, r_recall=0.8, p_recall=0.9))
    assert worse["recall_at_10"] == 0.8889 and not {t.name: t for t in peer.targets(worse, 0)}[recall].passed
    assert not {t.name: t for t in peer.targets(r, failed=1)}[
        "documents failed (ragline, every round)"
    ].passed


def test_peer_orders_put_every_side_once_in_every_position():
    from bench import peer

    for position in range(len(peer.SIDES)):
        assert {order[position] for order in peer.ORDERS} == set(peer.SIDES)


def test_peer_corpus_and_questions_are_the_same_slice_every_time(tmp_path):
    from bench import peer

    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "two.md").write_text(
        "# Вторая глава\n\nтекст\n\n## `v-model` и [ссылки](x.md)\n", "utf-8"
    )
    (tmp_path / "a.md").write_text("# Первая\n\nтекст\n", "utf-8")
    (tmp_path / "empty.md").write_text("  \n", "utf-8")
    (tmp_path / "README.md").write_text("# о наборе\n", "utf-8")
    docs = peer.corpus(10, tmp_path)
    assert [p for p, _ in docs] == ["a.md", "b/two.md"]  # sorted, empty files and READMEs left out
    assert peer.corpus(1, tmp_path) == docs[:1]
    assert peer.questions(docs, 4) == ["Первая", "Вторая глава", "v-model и ссылки", "Первая"]


def test_peer_recall_set_is_tydi_with_only_the_named_passages_under_a_limit(tmp_path):
    import json

    from bench import peer

    rows = [
        {"id": "p1", "title": "Заголовок", "text": "первый"},
        {"id": "p2", "text": "второй"},
        {"id": "p3", "text": "третий"},
    ]
    (tmp_path / "corpus.jsonl").write_text("\n".join(json.dumps(r) for r in rows), "utf-8")
    qs = [{"query": "один", "relevant": ["p2"]}, {"query": "два", "relevant": {"p3": 1, "p1": 0}}]
    (tmp_path / "dev.jsonl").write_text("\n".join(json.dumps(q) for q in qs), "utf-8")
    docs, queries = peer.tydi_set(root=tmp_path)
    assert docs == [("p1", "Заголовок\n\nпервый"), ("p2", "второй"), ("p3", "третий")] and len(queries) == 2
    docs, queries = peer.tydi_set(1, root=tmp_path)
    assert docs == [("p2", "второй")] and [q["query"] for q in queries] == ["один"]


def test_peer_without_llama_index_says_so_and_measures_nothing(monkeypatch, tmp_path):
    import sys

    from bench import peer

    monkeypatch.setitem(sys.modules, "llama_index", None)  # an import of it raises ImportError
    monkeypatch.setitem(sys.modules, "llama_index.core", None)
    reason = peer.missing_peer()
    assert reason and "not installed" in reason and "[bench]" in reason
    data = peer.run(out_dir=tmp_path)
    assert data["skipped"] == reason and data["targets"] == []
    assert not list(tmp_path.iterdir())  # no result written over the one on record


def test_stage_shares_are_seconds_over_the_wall_time_with_the_rest_as_other():
    from bench.ingest_stages import shares

    s = shares({("parse", "docs"): 2.0, ("embed", "docs"): 5.0, ("embed", "src"): 1.0}, 10.0)
    assert s["by_stage"]["embed"] == {"s": 6.0, "share": 0.6}
    assert s["by_stage"]["other"] == {"s": 2.0, "share": 0.2}
    assert s["by_layer"] == {"docs": {"s": 7.0, "share": 0.7}, "src": {"s": 1.0, "share": 0.1}}
    assert s["accounted_share"] == 0.8


def test_a_shared_stage_time_is_split_by_rows():
    from ragline.shared.worker.metrics import INGEST_STAGE_SECONDS, observe_stage

    def total(layer: str) -> float:
        return INGEST_STAGE_SECONDS.labels("store", layer)._sum.get()

    a, b = total("split-a"), total("split-b")
    observe_stage("store", 1.0, {"split-a": 3, "split-b": 1, "split-c": 0})
    assert (round(total("split-a") - a, 6), round(total("split-b") - b, 6)) == (0.75, 0.25)
