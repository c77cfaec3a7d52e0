"""No regular expression of the pools backtracks super-linearly on untrusted text.

Questions (up to 4,000 characters) and documents (megabytes) reach the patterns of ``ingest/``,
``query/`` and ``shared/``; Python's ``re`` backtracks, so one pattern with overlapping quantifiers
("compare" + 1,500 spaces + "x" took two minutes on ``\\s+(?P<a>.+?)\\s+and``) holds a worker, and
a threads pool's other questions with it. This audit:

* finds every use of ``re`` in those folders from the source (``re.compile``, ``re.search``, ... with
  a literal pattern) and every compiled pattern a module keeps (lists and dicts of them too); a call
  whose pattern is not a literal must be listed in :data:`BUILT` with what it is built from;
* builds worst-case inputs for each pattern from its own parse tree: each of its literal words as a
  prefix, then a long run of one character (every character class of the pattern has a member in
  the pool, and each literal character is tried), then a character that fails the match;
* times the slowest of them at 512 and 4,096 characters in a child process: a pattern whose time
  grows more than linearly with the input (over 32 times for 8 times the length, and again more
  than 3 times for twice 4,096), or that does not finish at all (the child is killed), fails,
  named with its file and line.

A pattern is judged by how its time *grows*, not by a wall-clock threshold, so a loaded machine
does not fail it.
"""

from __future__ import annotations

import ast
import importlib
import multiprocessing as mp
import re
import time
from dataclasses import dataclass
from pathlib import Path
from re import _constants as sre
from re import _parser as sre_parse

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("ingest", "query", "shared")
#: the calls of ``re`` that take a pattern as their first argument
PATTERN_CALLS = {"compile", "search", "match", "fullmatch", "split", "sub", "subn", "findall", "finditer"}
#: patterns built at run time from more than literals and escaped words (``re.escape(...)``, judged
#: as a word), by file and source of the call -> a representative pattern; a new one fails the
#: audit until it is listed here with what it is built from
BUILT: dict[str, dict[str, str]] = {}
ESCAPED = "word"

SHORT, LONG = 512, 4096
#: the length at which every input is tried, to find the worst
SCREEN = 256
#: how many of the slowest inputs at SCREEN are timed at SHORT and LONG
CANDIDATES = 3
#: linear is 8 (LONG / SHORT), quadratic 64; the margin absorbs timer noise on a loaded machine
MAX_GROWTH = 32
#: from LONG to twice LONG a linear pattern takes twice as long, a quadratic one four times
CONFIRM = 3.0
#: below this at LONG the growth is timer noise (a quadratic pattern takes tens of ms there)
NOISE_S = 0.003
#: a pattern whose worst inputs do not finish in this long is cut off (and fails)
HANG_S = 5.0
#: characters tried as the repeated run: separators, letters of both scripts, digits, punctuation
POOL = " \t\n\r\u00a0aAzZяЯ09_.-/,;:@'\"()[]{}<>`#*=&?!\\|+~$%^\u0301"
FAIL = "\x00"


@dataclass(frozen=True)
class Use:
    file: str
    line: int
    pattern: str | bytes
    flags: int
    #: "match" when the pattern is only ever tried at the start of its text, else "search"
    mode: str = "search"

    @property
    def name(self) -> str:
        return f"{self.file}:{self.line}: {self.pattern!r}"


def _flags(node: ast.expr | None) -> int:
    """The value of a flags argument made of ``re.X`` names joined by ``|``."""
    if node is None:
        return 0
    return int(eval(compile(ast.Expression(node), "<flags>", "eval"), {"re": re}))  # noqa: S307


def _call_flags(call: ast.Call, position: int) -> int:
    for kw in call.keywords:
        if kw.arg == "flags":
            return _flags(kw.value)
    return _flags(call.args[position]) if len(call.args) > position else 0


#: where a call's flags argument is, by function: (pattern, string, count/maxsplit, flags)
FLAG_POSITION = {
    "compile": 1,
    "search": 2,
    "match": 2,
    "fullmatch": 2,
    "findall": 2,
    "finditer": 2,
    "split": 3,
}
FLAG_POSITION |= {"sub": 4, "subn": 4}


def _static(node: ast.expr, names: dict[str, str | bytes] | None = None) -> str | bytes | None:
    """The pattern a literal, an f-string of escaped words, a module's constant or a sum of them
    builds, else None."""
    names = names or {}
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "re.escape":
        return ESCAPED
    if isinstance(node, ast.FormattedValue) and node.format_spec is None:
        return _static(node.value, names)
    if isinstance(node, ast.JoinedStr):
        parts = [_static(v, names) for v in node.values]
        return "".join(parts) if all(isinstance(p, str) for p in parts) else None  # type: ignore[arg-type]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _static(node.left, names), _static(node.right, names)
        if isinstance(left, str) and isinstance(right, str):
            return left + right
    return None


def _match_only(tree: ast.AST) -> set[str]:
    """Module names bound to ``re.compile(...)`` that the module only ever calls ``.match`` /
    ``.fullmatch`` on (tried at the start of the text: one attempt, not one per position)."""
    compiled = {
        t.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and ast.unparse(node.value.func) == "re.compile"
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    used: dict[str, set[str]] = {}
    methods = set()  # the name inside ``NAME.method``: a call of that method, not a use of its own
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in compiled:
            used.setdefault(node.value.id, set()).add(node.attr)
            methods.add(id(node.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in compiled and isinstance(node.ctx, ast.Load):
            if id(node) not in methods:
                used.setdefault(node.id, set()).add("passed on")
    return {name for name, attrs in used.items() if attrs and attrs <= {"match", "fullmatch"}}


def _import_problems(tree: ast.AST, rel: str) -> list[str]:
    """Imports that would hide a pattern from the audit: another engine, ``re`` under other names."""
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "regex" or (alias.name == "re" and alias.asname):
                    problems.append(
                        f"{rel}:{node.lineno}: import {alias.name} as {alias.asname}: use re.<fn>"
                    )
        elif isinstance(node, ast.ImportFrom) and node.module in ("re", "regex"):
            problems.append(f"{rel}:{node.lineno}: from {node.module} import: use re.<fn>")
    return problems


def source_uses(path: Path) -> tuple[list[Use], list[str]]:
    """The literal patterns ``path`` applies, and the problems (built patterns not in BUILT, other
    regex engines)."""
    rel = path.relative_to(ROOT).as_posix()
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    match_only = _match_only(tree)
    constants: dict[str, str | bytes] = {}
    for node in tree.body:  # in order, so a constant may be built from the ones before it
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if (value := _static(node.value, constants)) is not None:
                constants[node.targets[0].id] = value
    anchored = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id in match_only for t in node.targets)
    }
    uses: list[Use] = []
    problems = _import_problems(tree, rel)
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "re"
            and node.func.attr in PATTERN_CALLS
            and node.args
        ):
            continue
        flags = _call_flags(node, FLAG_POSITION[node.func.attr])
        mode = "match" if node.func.attr in ("match", "fullmatch") or id(node) in anchored else "search"
        pattern = _static(node.args[0], constants)
        if pattern is None:
            call = ast.get_source_segment(source, node) or ""
            pattern = BUILT.get(rel, {}).get(call)
            if pattern is None:
                problems.append(f"{rel}:{node.lineno}: pattern built at run time, not in BUILT: {call}")
                continue
        uses.append(Use(rel, node.lineno, pattern, flags, mode))
    return uses, problems


def module_patterns(path: Path) -> list[re.Pattern]:
    """The compiled patterns the imported module keeps, alone or in lists, tuples, sets and dicts."""
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    module = importlib.import_module(".".join(["ragline", *parts]))
    found: list[re.Pattern] = []
    for value in vars(module).values():
        items = value.values() if isinstance(value, dict) else value
        if isinstance(items, (list, tuple, set, frozenset, type({}.values()))):
            found += [v for v in items if isinstance(v, re.Pattern)]
        elif isinstance(value, re.Pattern):
            found.append(value)
    return found


def files() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py") if "re" in _imports(p))


def _imports(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    return {"re"} if re.search(r"^\s*(?:import re\b|from re import|import regex\b)", text, re.M) else set()


# --- worst-case inputs from a pattern's parse tree ----------------------------------------------


def _children(av: object) -> list:
    """The sub-patterns inside a parse-tree node's argument (repeats, groups, branches, asserts)."""
    if isinstance(av, sre_parse.SubPattern):
        return [av]
    if isinstance(av, (tuple, list)):
        return [c for x in av for c in _children(x)]
    return []


def _words(items: list, out: set[str]) -> None:
    """Runs of literal characters (the words an input must contain to get far into the pattern)."""
    run = ""
    for op, av in items:
        if op is sre.LITERAL:
            run += chr(av)
            continue
        if run:
            out.add(run)
            run = ""
        for child in _children(av):
            _words(list(child), out)
    if run:
        out.add(run)


def attacks(pattern: str | bytes, flags: int) -> list[tuple[str, str]]:
    """``(head, pump)`` pairs: a literal word of the pattern (or nothing) and maybe a space, then a
    run of one character (or of a word and a space) repeated, then a character that fails."""
    text = pattern.decode("latin-1") if isinstance(pattern, bytes) else pattern
    words: set[str] = set()
    _words(list(sre_parse.parse(text, flags)), words)
    heads = ["", " ", *sorted(w for w in words if w.strip()), *sorted(w + " " for w in words if w.strip())]
    pumps = sorted(set(POOL) | {c for w in words for c in w} | {w + " " for w in words if len(w) > 1})
    return [(head, pump) for head in heads for pump in pumps]


def attack(head: str, pump: str, n: int) -> str:
    return head + pump * max(1, n // len(pump)) + FAIL


def _run(compiled: re.Pattern, text: str, mode: str, repeat: int = 3) -> float:
    subject: str | bytes = text.encode("utf-8") if isinstance(compiled.pattern, bytes) else text
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        if mode == "match":
            compiled.match(subject)  # type: ignore[arg-type]
        for _m in compiled.finditer(subject) if mode == "search" else ():  # type: ignore[arg-type]
            pass
        best = min(best, time.perf_counter() - t0)
    return best


def growth(pattern: str | bytes, flags: int, mode: str) -> str | None:
    """Why the pattern is super-linear, or None: of its :data:`CANDIDATES` slowest inputs at
    SCREEN, one whose time grows more than :data:`MAX_GROWTH` times from SHORT to LONG and again
    more than linearly (over :data:`CONFIRM`) from LONG to twice LONG (timer noise rarely does both)."""
    compiled = re.compile(pattern, flags)
    inputs = attacks(pattern, flags)
    screened = sorted(inputs, key=lambda hp: _run(compiled, attack(*hp, SCREEN), mode, 1))[-CANDIDATES:]
    for head, pump in reversed(screened):
        short = max(_run(compiled, attack(head, pump, SHORT), mode), 1e-6)
        long_s = _run(compiled, attack(head, pump, LONG), mode)
        if long_s <= NOISE_S or long_s <= MAX_GROWTH * short:
            continue
        longer = _run(compiled, attack(head, pump, 2 * LONG), mode)
        if longer > CONFIRM * long_s:
            sample = f"{head}{pump * 3}… ({LONG} chars){FAIL}"
            return f"grows {long_s / short:.0f}x, then {longer / long_s:.1f}x ({longer * 1000:.0f} ms) on {sample!r}"
    return None


def _child(uses: list[Use], queue: mp.Queue) -> None:
    for use in uses:
        queue.put((use.name, "start", None))
        queue.put((use.name, "done", growth(use.pattern, use.flags, use.mode)))


def judge(uses: list[Use]) -> list[str]:
    """Each use's growth measured in a child process (killed when a pattern hangs). Started by a
    fork server, not forked from this process: in the whole suite this process runs a Celery
    worker, and a child forked from it runs kombu's after-fork hook, which closes the inherited
    broker channel by reading the reply to the parent's pending BRPOP: a read that never returns."""
    bad: list[str] = []
    ctx = mp.get_context("forkserver")
    todo = list(uses)
    while todo:
        queue: mp.Queue = ctx.Queue()
        child = ctx.Process(target=_child, args=(todo, queue), daemon=True)
        child.start()
        current = None
        try:
            while todo:
                name, state, value = queue.get(timeout=HANG_S)
                if state == "start":
                    current = name
                    continue
                if value is not None:
                    bad.append(f"{name} {value}")
                todo.pop(0)
        except Exception:  # queue.Empty: the current pattern hangs
            bad.append(f"{current} did not finish in {HANG_S:.0f} s")
            todo.pop(0)
        finally:
            child.kill()
            child.join()
    return bad


def _params() -> list:
    return [pytest.param(p, id=p.relative_to(ROOT).as_posix()) for p in files()]


@pytest.mark.parametrize("path", _params())
def test_every_pattern_is_linear(path: Path) -> None:
    uses, problems = source_uses(path)
    assert not problems, problems
    literal = {u.pattern for u in uses}
    # a pattern the module keeps that its source does not show literally was built: judged as is
    rel = path.relative_to(ROOT).as_posix()
    uses += [Use(rel, 0, p.pattern, p.flags) for p in module_patterns(path) if p.pattern not in literal]
    assert uses, f"{rel} imports re and applies no pattern the audit finds"
    assert not judge(uses)


def test_the_audit_catches_backtracking() -> None:
    """The audit itself fails the patterns it exists for: nested, overlapping and cubic ones."""
    bad = [
        (r"\bcompare\s+(?P<a>.+?)\s+(?:and|with|to)\s+(?P<b>.+)", re.I),  # cubic
        (r"\s+(?:и|а)\s+(?:как|why)\b", 0),  # quadratic over the start positions
        (r"(?:a|a)*b", 0),  # exponential
    ]
    found = judge([Use("bad", i, p, f) for i, (p, f) in enumerate(bad)])
    assert len(found) == len(bad), found
    good = (r"\w+", r"(?<!\s)\s++(?:и|а)\s", r",[^,]*")
    assert not judge([Use("good", i, p, 0) for i, p in enumerate(good)])
    # anchored at the start, a pattern that is quadratic when searched is tried once
    assert not judge([Use("match", 0, r"[a-z]*:", 0, "match")])
