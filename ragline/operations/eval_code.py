"""Code retrieval evaluation: an issue's text against the repository as it was when the issue was
filed; which files come back, and how high.

A query set names, per query, a repository (a git bundle or a repository folder) and a ref; each
distinct snapshot is ingested once into a tenant of its own through the real git source (the
caller supplies the ingest function, so this module stays on the query side of the layers), and
the embedding cache makes the next snapshot of the same repository cost only what changed. Every
query then goes through the real retrieval task, in every mode and layer variant asked for.

Metrics are file-level, as in the localisation literature (SWE-bench Lite file localisation, the
SweRank tables): hits (chunks) map to the file they come from, in the order of
:func:`ragline.query.retrieval.file_rank.ranked_paths` (the first occurrence while ``RAGLINE_CODE_FILE_RANK``
is off; the file rankings of :func:`ragline.operations.code_ablations.file_variants` are measured beside it on every
mode's hits, with the held-out split, at no extra retrieval);
``acc@k`` is 1 when *all* gold files are within the first k files, ``recall@10`` the share of gold
files within 10, ``mrr`` the reciprocal rank of the first gold file.

The structural signals (:mod:`ragline.query.retrieval.structure`) and the lexical weights are
measured one by one on each query's whole candidate lists (the vector and the lexical search's
``top_n`` each, :func:`ablation_candidates`), re-fused and re-scored with the same pure functions
the retrieval task applies, so an ablation costs no extra retrieval beyond those two lists; a
re-fusion with a weight reproduces what the retrieval task answers with that weight.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from ragline.ingest.chunk import code as code_chunker
from ragline.operations import code_ablations
from ragline.operations.eval import doc_ranking, recall_at_k, reciprocal_rank, retrieve
from ragline.query.retrieval import file_rank, structure
from ragline.query.retrieval.fusion import CODE, PROSE, FusionPolicy
from ragline.query.retrieval.ranking import RankingPolicy
from ragline.query.retrieval.search import LIST_DEPTH
from ragline.shared.config.settings import Settings, get_settings
from ragline.shared.sdk.contracts import Hit

EVAL_GROUP = "eval"
ACC_AT = (1, 3, 5, 10)
RECALL_AT = 10
#: the retrieval contract's question limit (``SearchRequest.query``); longer issue texts are cut
MAX_QUERY_CHARS = 4000
#: RRF weights of the lexical list measured beside the default (the vector list's weight is 1)
LEXICAL_WEIGHTS = (0.0175, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0)
#: a mode is a retrieval mode, or one with the structural re-score (``+structure``); lexical with
#: structure is what a code search answers while the repository's vectors are being filled
MODES = ("lexical", "lexical+structure", "vector", "hybrid", "hybrid+structure")


def modes_for(mode: str) -> list[str]:
    """The modes a code evaluation's ``--mode`` runs: every one for ``all``; a mode that can take
    the structural re-score (lexical, hybrid) with and without it."""
    if mode == "all":
        return list(MODES)
    return [m for m in MODES if m.split("+")[0] == mode]


@dataclass(frozen=True)
class Snapshot:
    """A repository at a ref: ``repo`` is a bundle file or a repository folder."""

    repo: Path
    ref: str

    @property
    def name(self) -> str:
        """The repository's short name (``requests`` for ``requests.bundle``): the git source name."""
        stem = self.repo.name.removesuffix(".bundle").removesuffix(".git")
        return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in stem) or "repo"


@dataclass(frozen=True)
class CodeQuery:
    id: str
    query: str
    snapshot: Snapshot
    relevant: tuple[str, ...]  # files inside the repository


# ------------------------------------------------------------------------------------------ data
def read_code_queries(path: Path) -> list[CodeQuery]:
    """Query rows ``{"query", "repo", "ref", "relevant"}``; ``repo`` (or ``bundle``) is a path relative
    to the query file's folder, ``relevant`` (or ``gold_files``) the files that answer it. The
    swe-loc-dev ``instances.jsonl`` is read as it is."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            row = json.loads(line)
            repo = row.get("bundle") or row.get("repo")
            relevant = row.get("relevant", row.get("gold_files"))
            if not isinstance(repo, str) or not row.get("ref") or not relevant:
                raise ValueError(f"{path}:{n}: a code query needs 'repo' (or 'bundle'), 'ref' and 'relevant'")
            where = Path(repo).expanduser()
            out.append(
                CodeQuery(
                    id=str(row.get("instance_id") or row.get("id") or n),
                    query=str(row["query"]),
                    snapshot=Snapshot(where if where.is_absolute() else path.parent / where, str(row["ref"])),
                    relevant=tuple(dict.fromkeys(str(p) for p in relevant)),
                )
            )
    return out


def is_code_query_set(path: Path) -> bool:
    """Whether the first row of a query file names a repository (a code query set)."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                row = json.loads(line)
                return isinstance(row, dict) and bool(row.get("repo") or row.get("bundle"))
    return False


def snapshot_tenant(snap: Snapshot, commit: str, config: str) -> str:
    """One tenant per repository, commit and ingest configuration (include/exclude globs): a rerun
    with the same configuration finds its snapshots already ingested."""
    return f"code-{snap.name}-{commit[:12]}-{config}"


def ingest_config_key(include: Iterable[str], exclude: Iterable[str], settings: Settings) -> str:
    """A short hash of what decides a snapshot's chunks (globs, chunk sizes, layers, symbols) and
    which of them get vectors (the embedding budget): a snapshot stored under another budget is
    another tenant, not one whose vectors a rerun would silently reuse."""
    code = settings.code
    key = json.dumps(
        [
            sorted(include),
            sorted(exclude),
            code_chunker.MAX_CHARS,
            code_chunker.MIN_CHARS,
            code.source_layer,
            code.tests_layer,
            code.symbols_layer,
            code.symbols,
            settings.embed.model_name,
            sorted(settings.ingest.lexical_only_layers),
        ]
    )
    return hashlib.sha256(key.encode()).hexdigest()[:8]


def question(text: str) -> str:
    return text[:MAX_QUERY_CHARS]


# --------------------------------------------------------------------------------------- metrics
def file_of(hit: Hit | dict, source: str) -> str:
    """The file a hit comes from, as a path inside the repository (the doc path minus ``source/``)."""
    path = hit["path"] if isinstance(hit, dict) else hit.path
    return path[len(source) + 1 :] if path.startswith(source + "/") else path


def file_ranking(hits: Iterable[Hit | dict], source: str) -> list[str]:
    """Files in the order of their best hit."""
    return doc_ranking(file_of(h, source) for h in hits)


def accuracy_at(files: list[str], relevant: Iterable[str], k: int) -> float:
    """1 when every relevant file is within the first ``k`` files."""
    return float(set(relevant) <= set(files[:k]))


@dataclass
class CodeReport:
    """File-level metrics of one mode and layer variant over the queries."""

    name: str
    rows: list[dict] = field(default_factory=list)

    def add(self, q: CodeQuery, files: list[str], degraded: list[str] | None = None) -> None:
        """``degraded``: the search's ``degraded_reasons`` (a hybrid search whose question embedding
        timed out is the lexical list): kept per query and counted, so a mode's numbers never
        silently mix in another mode's."""
        row = {"id": q.id, **{f"acc@{k}": accuracy_at(files, q.relevant, k) for k in ACC_AT}}
        row[f"recall@{RECALL_AT}"] = recall_at_k(files, q.relevant, RECALL_AT)
        row["mrr"] = reciprocal_rank(files, q.relevant)
        row["rank"] = next((i for i, f in enumerate(files, start=1) if f in q.relevant), None)
        row["top"] = files[:3]
        if degraded:
            row["degraded"] = list(degraded)
        self.rows.append(row)

    def summary(self) -> dict:
        keys = [*(f"acc@{k}" for k in ACC_AT), f"recall@{RECALL_AT}", "mrr"]
        out = {k: round(statistics.fmean(r[k] for r in self.rows), 3) if self.rows else 0.0 for k in keys}
        out["n"] = len(self.rows)
        out["degraded"] = sum(1 for r in self.rows if r.get("degraded"))
        return out


# ------------------------------------------------------------------------------ held-out split
#: what a held-out split chooses the structural weights by, then its tie-breaks
SELECT_BY = ("mrr", "acc@5", "acc@1")


def repository_of(query_id: str) -> str:
    """``psf__requests-1142`` -> ``psf__requests``: the repository an instance id names."""
    head, sep, tail = query_id.rpartition("-")
    return head if sep and tail.isdigit() else query_id


def _order(query_id: str) -> tuple[str, int, str]:
    number = query_id.rpartition("-")[2]
    return repository_of(query_id), int(number) if number.isdigit() else 0, query_id


def split_halves(ids: Iterable[str]) -> tuple[list[str], list[str]]:
    """Two halves of the queries, every repository in both: within each repository, by issue
    number, alternately to the first and the second half (pure, deterministic)."""
    by_repo: dict[str, list[str]] = {}
    for i in sorted(set(ids), key=_order):
        by_repo.setdefault(repository_of(i), []).append(i)
    first: list[str] = []
    second: list[str] = []
    for group in by_repo.values():
        for n, i in enumerate(group):
            (first if n % 2 == 0 else second).append(i)
    return first, second


def _summary(rows: list[dict], ids: set[str]) -> dict:
    report = CodeReport("", [r for r in rows if r["id"] in ids])
    return report.summary()


def held_out(variants: dict[str, list[dict]], ids: list[str]) -> dict:
    """The structural weights chosen on one half of the queries and reported on the other, both
    ways (pure). ``variants``: label -> per-query rows (:class:`CodeReport` rows) of one layer
    variant, ``none`` and ``configured`` among them. The variant with the best :data:`SELECT_BY`
    on the choosing half is reported on the other half beside ``none`` (plain fusion) and
    ``configured`` (the shipped defaults, themselves chosen on all the queries); the first listed
    variant wins a tie."""
    first, second = split_halves(ids)
    out: dict = {"halves": {"A": first, "B": second}, "select_by": list(SELECT_BY), "runs": []}
    for chose_on, report_on in (("A", "B"), ("B", "A")):
        choose, report = set(out["halves"][chose_on]), set(out["halves"][report_on])
        scored = [(label, _summary(rows, choose)) for label, rows in variants.items()]
        best_label, best = max(scored, key=lambda t: tuple(t[1][k] for k in SELECT_BY))
        ties = [label for label, s in scored if all(s[k] == best[k] for k in SELECT_BY)]
        out["runs"].append(
            {
                "chosen_on": chose_on,
                "reported_on": report_on,
                "chosen": best_label,
                "tied_with": [t for t in ties if t != best_label],
                "chosen_on_choosing_half": best,
                "chosen_on_held_out_half": _summary(variants[best_label], report),
                "configured_on_held_out_half": _summary(variants["configured"], report),
                "none_on_held_out_half": _summary(variants["none"], report),
            }
        )
    return out


# ------------------------------------------------------------------------------------- the run
#: (query text, tenant, mode, layers, structure) -> the retrieval task's result
SearchFn = Callable[[str, str, str, list[str], bool], dict]
#: (snapshot, ingest configuration key, source name) -> the ingest's summary: ``tenant``, ``commit``,
#: ``outcome`` and, when a job ran, its counts
IngestFn = Callable[[Snapshot, str, str], dict]


LAYER_VARIANTS = ("all", "code", "source")


def layer_variants(which: str, settings: Settings) -> dict[str, list[str]]:
    """Comma-separated variants: ``all`` (every layer: source, symbols, tests, docs), ``code`` (the
    source and symbol layers), ``source`` (the source layer alone: what the symbol layer adds)."""
    c = settings.code
    known = {"all": [], "code": [c.source_layer, c.symbols_layer], "source": [c.source_layer]}
    names = [n.strip() for n in which.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ValueError(f"layer variants are {', '.join(LAYER_VARIANTS)}; got {which!r}")
    return {n: known[n] for n in names}


def task_search(timeout: float = 300.0) -> SearchFn:
    """Search through the real ``ragline.query.retrieve`` task (the caller points the app at the broker)."""

    def run(query: str, tenant: str, mode: str, layers: list[str], structural: bool) -> dict:
        payload = {
            "query": query,
            "tenant": tenant,
            "groups": [EVAL_GROUP],
            "k": LIST_DEPTH,
            "mode": mode,
            "layers": layers,
            "rerank": False,
            "structure": structural,
        }
        return retrieve(payload, timeout)

    return run


def ingest_snapshots(
    queries: list[CodeQuery], ingest: IngestFn, config: str, say: Callable[[str], None], parallel: int = 2
) -> dict[Snapshot, dict]:
    """Every snapshot the queries name, ingested once: the snapshots of one repository one after the
    other in query order (each finds the previous one's vectors in the embedding cache), up to
    ``parallel`` repositories at a time (their batches keep the ingest pool's processes busy)."""
    chains: dict[Path, list[Snapshot]] = {}
    for q in queries:
        chain = chains.setdefault(q.snapshot.repo, [])
        if q.snapshot not in chain:
            chain.append(q.snapshot)
    done: dict[Snapshot, dict] = {}

    def run(chain: list[Snapshot]) -> None:
        for snap in chain:
            t = time.perf_counter()
            s = ingest(snap, config, snap.name)
            done[snap] = s
            say(
                f"{snap.name}@{snap.ref}: {s.get('outcome', '')} {s.get('documents', 0)} documents,"
                f" {s.get('chunks', 0)} chunks, {s.get('embedded', 0)} embedded, {s.get('failed', 0)}"
                f" failed in {time.perf_counter() - t:.0f}s"
            )

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        for f in [pool.submit(run, chain) for chain in chains.values()]:
            f.result()
    return {q.snapshot: done[q.snapshot] for q in queries}


def ablation_candidates(vector: list[dict], lexical: list[dict], structural: list[dict]) -> list[Hit]:
    """The candidates a re-fusion needs (pure): every chunk of the vector list and of the lexical
    list (each from its own search, so each list is whole), with its rank in each, and the named
    files' rank from the structural hybrid search (``structural``: that search's hits, which carry
    it). The structural search's own hits are not enough: it keeps its best ``top_n``, and under a
    small lexical weight every chunk only the lexical list found is cut, so no re-fusion with a larger
    weight could bring it back."""
    by_key: dict[tuple[str, int], dict] = {}
    for h in (*structural, *vector, *lexical):
        by_key.setdefault(
            (h["doc_id"], h["chunk_no"]), {**h, "vector_rank": None, "lexical_rank": None, "named_rank": None}
        )
    for hits, field_name in ((vector, "vector_rank"), (lexical, "lexical_rank"), (structural, "named_rank")):
        for h in hits:
            by_key[(h["doc_id"], h["chunk_no"])][field_name] = h.get(field_name)
    return [Hit.model_validate(h) for h in by_key.values()]


def _whole_lists(
    lists: dict[str, list[dict]], share: float, search: SearchFn, where: tuple[str, str, list[str]]
) -> tuple[list[Hit], float]:
    """:func:`ablation_candidates` from the hits of the modes already run (``lists``: mode -> hits),
    searching the lists a re-fusion needs and the run did not have (``where``: the question, tenant
    and layers); with the structural search's vector share."""
    text, tenant, layers = where
    for mode, structural in (("hybrid+structure", True), ("vector", False), ("lexical", False)):
        if mode not in lists:
            res = search(text, tenant, mode.split("+")[0], layers, structural)
            lists[mode] = res["hits"]
            share = res.get("vector_share", 1.0) if structural else share
    return ablation_candidates(lists["vector"], lists["lexical"], lists["hybrid+structure"]), share


def ablation_runs(settings: Settings) -> list[tuple[str, structure.Weights, float]]:
    """``(label, structural weights, lexical weight)`` of every structural ablation and lexical
    weight the eval re-fuses each query's candidates with."""
    weights = structure.WEIGHTS
    runs = [(label, w, CODE.lexical_weight) for label, w in code_ablations.ablations(weights).items()]
    runs += [
        (f"{label}, lexical weight {wl:g}", w, wl)
        for wl in LEXICAL_WEIGHTS
        for label, w in (("none", structure.Weights()), ("configured", weights))
    ]
    return runs


def _refused(
    hits: list[Hit],
    share: float,
    text: str,
    source: str,
    runs: list[tuple[str, structure.Weights, float]],
    settings: Settings,
) -> Iterable[tuple[str, list[str]]]:
    """``(label, files)`` of each of ``runs`` (:func:`ablation_runs`), re-fused from one query's
    candidates with the retrieval task's pure functions and its file order (the response's
    ``files``), so ``configured`` at the configured weight is the hybrid+structure mode's row."""
    file_weights = file_rank.file_weights_from(settings)
    # the share of the scope the candidates' vector list saw, as the search weighed it
    code_policy = FusionPolicy.from_settings(settings, code=True).covering(share)
    # each single list in its own order, whose first files the file list keeps (as the search does)
    leads = [
        sorted((h for h in hits if getattr(h, rank) is not None), key=lambda h: getattr(h, rank))
        for rank in ("vector_rank", "lexical_rank")
    ]
    ranking_policy = RankingPolicy.for_question(text, settings, structural=True)
    for label, w, wl in runs:
        fused = code_ablations.refuse(hits, w, replace(code_policy, lexical_weight=wl))
        ranked = replace(ranking_policy, weights=w).restructured(fused)[:LIST_DEPTH]
        yield label, file_rank.ranked_paths(ranked, text, file_weights, source, leads)


def run_code_eval(
    queries: list[CodeQuery],
    ingest: IngestFn,
    search: SearchFn,
    modes: list[str],
    layers: str = "all,code",
    config: str = "",
    ablate: bool = True,
    progress: Callable[[str], None] | None = None,
    settings: Settings | None = None,
    parallel: int = 2,
) -> dict:
    """Ingest every snapshot the queries name (once each, oldest query first), then run every query
    in every mode and layer variant; also score each structural signal alone and each one left out
    (on the hybrid candidates, recomputed with :func:`ragline.query.retrieval.structure.rescore`;
    the variants are :mod:`ragline.operations.code_ablations`')."""
    settings = settings or get_settings()
    say = progress or (lambda _msg: None)
    summaries = ingest_snapshots(queries, ingest, config, say, parallel)
    tenants = {snap: (s["tenant"], snap.name) for snap, s in summaries.items()}
    ingests = [{"repo": str(snap.repo), "ref": snap.ref, **s} for snap, s in summaries.items()]
    variants = layer_variants(layers, settings)
    reports: dict[str, CodeReport] = {}
    weights = structure.WEIGHTS
    file_weights = file_rank.file_weights_from(settings)
    file_variants = code_ablations.file_variants(file_rank.WEIGHTS)
    file_ranks: dict[str, dict[str, CodeReport]] = {}
    ablations: dict[str, CodeReport] = {}
    runs = ablation_runs(settings)
    load_before = os.getloadavg()
    t = time.perf_counter()
    for q in queries:
        tenant, source = tenants[q.snapshot]
        text = question(q.query)
        for variant, layer_list in variants.items():
            lists: dict[str, list[dict]] = {}
            share = 1.0
            for mode in modes:
                res = search(text, tenant, mode.split("+")[0], layer_list, mode.endswith("+structure"))
                lists[mode] = res["hits"]
                name = f"{mode} [{variant}]"
                # the response's own file order (query/retrieval/file_rank.py), as a caller gets it
                files = [file_of(f, source) for f in res.get("files") or []] or file_rank.ranked_paths(
                    res["hits"], text, file_weights, source
                )
                reports.setdefault(name, CodeReport(name)).add(q, files, res.get("degraded_reasons"))
                # a hybrid search's file list keeps its single lists' first files and takes the
                # lexical list's vote, that list as a lexical search orders it (as the task does)
                leads = (
                    [lists[m] for m in ("vector", "lexical+structure") if m in lists]
                    if mode.startswith("hybrid")
                    else []
                )
                for label, fw in file_variants.items():
                    files = file_rank.ranked_paths(res["hits"], text, fw, source, leads)
                    file_ranks.setdefault(name, {}).setdefault(label, CodeReport(label)).add(q, files)
                if leads:  # what the single lists change: the configured file ranking without them
                    files = file_rank.ranked_paths(res["hits"], text, file_weights, source)
                    label = "the fused hits' files alone (no vote, no floors)"
                    file_ranks.setdefault(name, {}).setdefault(label, CodeReport(label)).add(q, files)
                if mode == "hybrid+structure":
                    share = res.get("vector_share", 1.0)
            if ablate:
                candidates, share = _whole_lists(lists, share, search, (text, tenant, layer_list))
                for label, files in _refused(candidates, share, text, source, runs, settings):
                    name = f"{label} [{variant}]"
                    ablations.setdefault(name, CodeReport(name)).add(q, files)
    say(
        f"{len(queries)} queries x {len(modes)} mode(s) x {len(variants)} layer variant(s) in {time.perf_counter() - t:.0f}s"
    )
    ids = [q.id for q in queries]
    by_variant: dict[str, dict[str, list[dict]]] = {}
    for name, r in ablations.items():
        label, _, variant = name.rpartition(" [")
        by_variant.setdefault(variant.rstrip("]"), {})[label] = r.rows
    return {
        "modes": {name: {**r.summary(), "per_query": r.rows} for name, r in reports.items()},
        "structure_ablation": {name: r.summary() for name, r in ablations.items()},
        # per query, for choosing the lexical weight leaving one repository out (bench/code_loro.py)
        "lexical_weight_per_query": {
            name: r.rows for name, r in ablations.items() if ", lexical weight " in name
        },
        "file_rank": {
            name: {label: r.summary() for label, r in by_label.items()}
            for name, by_label in file_ranks.items()
        },
        # per query, for choosing a file weight leaving one repository out (bench/code_loro.py)
        "file_rank_per_query": {
            name: {label: r.rows for label, r in by_label.items()}
            for name, by_label in file_ranks.items()
            if name.startswith("hybrid+structure")
        },
        "file_rank_held_out": {
            name: held_out({label: r.rows for label, r in by_label.items()}, ids)
            for name, by_label in file_ranks.items()
            if len(ids) >= 4
        },
        "held_out": {variant: held_out(rows, ids) for variant, rows in by_variant.items() if len(ids) >= 4},
        "meta": {
            "queries": len(queries),
            "snapshots": ingests,
            "embedder": settings.embed.model_name,
            "retrieval_top_n": LIST_DEPTH,
            "rrf_weight_vector": CODE.vector_weight,
            "rrf_weight_lexical": PROSE.lexical_weight,
            "rrf_weight_lexical_code": CODE.lexical_weight,
            "lexical_rank": settings.lexical.rank,
            "load_average": {"before_queries": load_before, "after_queries": os.getloadavg()},
            "structure_weights": weights.as_dict(),
            "file_rank": settings.code.file_rank,
            "file_rank_weights": file_rank.WEIGHTS.as_dict(),
            "max_query_chars": MAX_QUERY_CHARS,
            "layers": {k: v for k, v in variants.items()},
        },
    }
