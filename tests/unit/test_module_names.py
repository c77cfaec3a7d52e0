"""Every module path the repository names exists, and the old names of moved modules still import.

The docs, deploy files, examples, comments and patch targets name modules by dotted name
(``ragline.shared.worker.db``) and by file (``shared/worker/db.py``); after a module moves, a stale
name is a wrong map for the next reader. The names from before a move still work for code outside
the repository (the ``MOVED`` aliases of ``shared/__init__.py`` and ``query/__init__.py``) and are
checked here too.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import warnings
from functools import cache
from pathlib import Path

import pytest

import ragline.query
import ragline.shared
from ragline.shared import new_name
from ragline.shared.sdk.names import ALL_TASKS

#: every package's old module names -> their homes now
MOVED = ragline.shared.MOVED | ragline.query.MOVED

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = {"ragline": ROOT / "ragline", "ragline.ingest": ROOT / "ingest"}
PACKAGE_DIRS |= {"ragline.query": ROOT / "query", "ragline.shared": ROOT / "shared"}
#: the files that name the old module paths on purpose
OLD_NAMES_ON_PURPOSE = {"shared/__init__.py", "query/__init__.py", "tests/unit/test_module_names.py"}
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
            if new_name(dotted) is not None or stale(dotted):
                missing.append(f"{name}: {dotted} (now {new_name(dotted) or '?'})")
        for match in IMPORTED.finditer(text):
            if new_name(match.group(1)) is not None:
                missing.append(f"{name}: {match.group(1)} (now {new_name(match.group(1))})")
        for match in FILE.finditer(text):
            if not (ROOT / match.group(0)).is_file():
                missing.append(f"{name}: {match.group(0)}")
    assert not missing, "names of modules that do not exist:\n" + "\n".join(sorted(set(missing)))


def test_the_stale_check_sees_a_moved_module():
    """The check above would have caught the names from before the split."""
    assert stale("ragline.shared.settings")
    assert stale("ragline.shared.no_such_module")
    assert not stale("ragline.shared.config.settings.get_settings")
    assert not stale("ragline.shared.MOVED")
    assert not stale("ragline.query.ask")  # a task name
    assert stale("ragline.query.extractive.extract")
    assert new_name("ragline.query.extractive.extract") == "ragline.query.answer.extractive.extract"


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_name_imports_the_same_module(old):
    first_time = old not in sys.modules
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])
    assert sys.modules[old] is module
    if first_time:
        assert [w for w in caught if w.category is DeprecationWarning and MOVED[old] in str(w.message)]


def test_a_submodule_of_an_old_package_is_not_loaded_twice():
    from ragline.shared.worker.providers import retry

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module("ragline.shared.providers.retry")
        old_contracts = importlib.import_module("ragline.shared.contracts.query")
    assert old is retry
    assert old_contracts is importlib.import_module("ragline.shared.sdk.contracts.query")


def test_python_dash_m_runs_a_module_by_its_old_name():
    """``python -m ragline.shared.metrics_server`` (a deployment from before the split) runs the
    new module's code: without a pool it prints the usage, which names the new module."""
    done = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-m", "ragline.shared.metrics_server"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "usage: python -m ragline.shared.worker.metrics_server" in done.stderr


def test_the_split_retrieve_module_keeps_its_names():
    """``ragline.query.retrieve`` was split by job: its old public names are each the object of
    their new home, so code written against it calls the same functions."""
    import ragline.query.retrieval.compat as compat
    from ragline.query.retrieval import hybrid, retrievers, row_security, search, sql, transaction

    homes = (hybrid, retrievers, row_security, search, sql, transaction)
    for name in compat.__all__:
        owners = [m for m in homes if name in vars(m) and vars(m)[name] is getattr(compat, name)]
        assert owners, name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module("ragline.query.retrieve")
    assert old.vector_rows is retrievers.vector_rows and old.search is search.search


def test_a_moved_module_keeps_its_own_spec():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = importlib.import_module("ragline.shared.timing")
    assert module.__spec__.name == "ragline.shared.worker.timing"
    assert module.__name__ == "ragline.shared.worker.timing"
