"""Every module path the repository names exists, and the module names removed in 0.2 are gone and
each is named with its new home in the upgrade note.

The docs, deploy files, examples, comments and patch targets name modules by dotted name
(``ragline.shared.worker.db``) and by file (``shared/worker/db.py``); after a module moves, a stale
name is a wrong map for the next reader.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

from ragline.shared.sdk.names import ALL_TASKS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = {"ragline": ROOT / "ragline", "ragline.ingest": ROOT / "ingest"}
PACKAGE_DIRS |= {"ragline.query": ROOT / "query", "ragline.shared": ROOT / "shared"}
#: the files that name the old module paths on purpose
OLD_NAMES_ON_PURPOSE = {"docs/upgrading.md", "tests/unit/test_module_names.py"}
UPGRADING = ROOT / "docs" / "upgrading.md"
DOTTED = re.compile(r"(?<![\w.])ragline\.(?:cli|ingest|query|shared)(?:\.[A-Za-z_]\w*)+")
#: a module imported by name: an old name here is stale even when it is also a task's name
IMPORTED = re.compile(r"(?:^|\s)(?:from|import)\s+(ragline\.[\w.]+)", re.M)
# a path followed by ``:lines`` is a citation of an ingested corpus, not a module of this checkout
FILE = re.compile(r"(?<![\w./-])(?:ragline|ingest|query|shared)/[\w/]+\.py\b(?!:\d)")
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".sh", ".js", ".json", ".cfg", ".txt", ""}


@cache
def tracked_texts() -> dict[str, str]:
    names = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, check=True
    ).stdout.split()
    texts = {}
    for name in names:
        path = ROOT / name
        if name.startswith("bench/results/") or path.suffix not in TEXT_SUFFIXES or not path.is_file():
            continue
        try:
            texts[name] = path.read_text()
        except UnicodeDecodeError:
            continue
    return texts


def module_file(dotted: str) -> Path | None:
    """The file of a module or package by dotted name, read from the folders (nothing imported)."""
    for prefix in sorted(PACKAGE_DIRS, key=len, reverse=True):
        if dotted == prefix or dotted.startswith(prefix + "."):
            base = PACKAGE_DIRS[prefix].joinpath(
                *dotted[len(prefix) + 1 :].split(".") if dotted != prefix else ()
            )
            if (base / "__init__.py").is_file():
                return base / "__init__.py"
            if base.with_suffix(".py").is_file():
                return base.with_suffix(".py")
            return base if base.is_dir() else None  # a folder of data files (migrations)
    return None


@cache
def top_level_names(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(names)


def stale(dotted: str) -> bool:
    """A name whose longest module prefix is a package that has no such submodule or attribute
    (a module of a plain file may be followed by any attribute path: classes, functions, fields)."""
    if dotted in ALL_TASKS or any(dotted.startswith(task + ".") for task in ALL_TASKS):
        return False
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        path = module_file(".".join(parts[:cut]))
        if path is None:
            continue
        if cut == len(parts) or path.name != "__init__.py" or path.is_dir():
            return False
        return parts[cut] not in top_level_names(path)
    return True


def test_every_module_the_repository_names_exists():
    missing = []
    for name, text in tracked_texts().items():
        if name in OLD_NAMES_ON_PURPOSE:
            continue
        for match in DOTTED.finditer(text):
            dotted = match.group(0).rstrip(".")
            if dotted in ALL_TASKS:  # a task name (``ragline.query.retrieve``), not a module's
                continue
            if stale(dotted) or _removed(dotted):
                missing.append(f"{name}: {dotted}")
        for match in IMPORTED.finditer(text):
            if _removed(match.group(1)):
                missing.append(f"{name}: {match.group(1)}")
        for match in FILE.finditer(text):
            if not (ROOT / match.group(0)).is_file():
                missing.append(f"{name}: {match.group(0)}")
    assert not missing, "names of modules that do not exist:\n" + "\n".join(sorted(set(missing)))


def test_the_stale_check_sees_a_moved_module():
    """The check above would have caught the names from before the split."""
    assert stale("ragline.shared.settings")
    assert stale("ragline.shared.no_such_module")
    assert not stale("ragline.shared.config.settings.get_settings")
    assert not stale("ragline.query.ask")  # a task name
    assert stale("ragline.query.extractive.extract")
    assert _removed("ragline.query.extractive.extract") and not _removed("ragline.query.answer.extractive")


#: the module names 0.1 still imported through a finder of aliases (``MOVED``), removed in 0.2 ->
#: their homes (``ragline.query.retrieve``'s names were split among the retrieval modules)
REMOVED_IN_0_2: dict[str, str] = {
    "ragline.query.agentic": "ragline.query.answer.agentic",
    "ragline.query.cache": "ragline.query.retrieval.cache",
    "ragline.query.citations": "ragline.query.answer.citations",
    "ragline.query.code_answer": "ragline.query.answer.code_answer",
    "ragline.query.context": "ragline.query.answer.context",
    "ragline.query.expand": "ragline.query.retrieval.expand",
    "ragline.query.extractive": "ragline.query.answer.extractive",
    "ragline.query.file_rank": "ragline.query.retrieval.file_rank",
    "ragline.query.filters": "ragline.query.retrieval.filters",
    "ragline.query.fusion": "ragline.query.retrieval.fusion",
    "ragline.query.generate": "ragline.query.answer.generate",
    "ragline.query.grounding": "ragline.query.answer.grounding",
    "ragline.query.language": "ragline.query.retrieval.language",
    "ragline.query.prompt": "ragline.query.answer.prompt",
    "ragline.query.rerank": "ragline.query.retrieval.rerank",
    "ragline.query.retrieve": "ragline.query.retrieval.search",
    "ragline.query.sanitize": "ragline.query.answer.sanitize",
    "ragline.query.stream": "ragline.query.answer.stream",
    "ragline.query.structure": "ragline.query.retrieval.structure",
    "ragline.query.terms": "ragline.query.retrieval.terms",
    "ragline.query.texts": "ragline.query.answer.texts",
    "ragline.query.transforms": "ragline.query.plan",
    "ragline.query.vector_index": "ragline.query.retrieval.vector_index",
    "ragline.shared.answer_stream": "ragline.shared.sdk.answer_stream",
    "ragline.shared.async_client": "ragline.shared.sdk.async_client",
    "ragline.shared.celery_app": "ragline.shared.worker.celery_app",
    "ragline.shared.celery_base": "ragline.shared.sdk.celery_base",
    "ragline.shared.client": "ragline.shared.sdk.client",
    "ragline.shared.contracts": "ragline.shared.sdk.contracts",
    "ragline.shared.credentials": "ragline.shared.worker.credentials",
    "ragline.shared.db": "ragline.shared.worker.db",
    "ragline.shared.formats": "ragline.shared.sdk.formats",
    "ragline.shared.identifiers": "ragline.shared.worker.identifiers",
    "ragline.shared.jobs": "ragline.shared.worker.jobs",
    "ragline.shared.kombu_redis": "ragline.shared.worker.kombu_redis",
    "ragline.shared.logging_setup": "ragline.shared.worker.logging_setup",
    "ragline.shared.metrics": "ragline.shared.worker.metrics",
    "ragline.shared.metrics_server": "ragline.shared.worker.metrics_server",
    "ragline.shared.migrate": "ragline.shared.worker.migrate",
    "ragline.shared.migrations": "ragline.shared.worker.migrations",
    "ragline.shared.names": "ragline.shared.sdk.names",
    "ragline.shared.offline_nlp": "ragline.ingest.parse.offline_nlp",
    "ragline.shared.pending_vectors": "ragline.shared.worker.pending_vectors",
    "ragline.shared.processes": "ragline.shared.stack.processes",
    "ragline.shared.providers": "ragline.shared.worker.providers",
    "ragline.shared.redelivery": "ragline.shared.worker.redelivery",
    "ragline.shared.replicas": "ragline.shared.worker.replicas",
    "ragline.shared.runtime": "ragline.shared.config.runtime",
    "ragline.shared.sender": "ragline.shared.sdk.sender",
    "ragline.shared.services": "ragline.shared.stack.services",
    "ragline.shared.settings": "ragline.shared.config.settings",
    "ragline.shared.signing": "ragline.shared.sdk.signing",
    "ragline.shared.task_base": "ragline.shared.worker.task_base",
    "ragline.shared.task_stats": "ragline.shared.worker.task_stats",
    "ragline.shared.text": "ragline.shared.worker.text",
    "ragline.shared.timing": "ragline.shared.worker.timing",
    "ragline.shared.transient": "ragline.shared.worker.transient",
    "ragline.shared.warmup": "ragline.shared.worker.warmup",
}


def _removed(dotted: str) -> bool:
    return any(dotted == old or dotted.startswith(old + ".") for old in REMOVED_IN_0_2)


@pytest.mark.parametrize("old", sorted(REMOVED_IN_0_2))
def test_a_removed_module_name_no_longer_imports(old):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_the_upgrade_note_names_each_removed_module_with_its_home():
    text = UPGRADING.read_text(encoding="utf-8")
    for old, new in REMOVED_IN_0_2.items():
        assert f"| `{old}` | `{new}` |" in text, old
    for new in set(REMOVED_IN_0_2.values()):
        assert not stale(new), new
