"""Local paths in a task are default-deny: read only below an allowed root, as regular files,
opened without following a symlink swapped in after the check, and read with a bound."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from ragline.ingest import load as load_mod
from ragline.ingest.load import check_path, load, read_bounded, read_local
from ragline.ingest.parse import ParseError
from ragline.ingest.roots import containing_root, resolve, source_roots
from ragline.ingest.sources import SourceSpec
from ragline.shared.sdk.contracts import IngestRequest


@pytest.fixture()
def tree(tmp_path: Path) -> dict[str, Path]:
    """kb/ (the allowed root) with a file and a subfolder; secret/ outside it."""
    kb, secret = tmp_path / "kb", tmp_path / "secret"
    (kb / "sub").mkdir(parents=True)
    secret.mkdir()
    (kb / "a.md").write_text("# A\n\nallowed text\n")
    (kb / "sub" / "b.md").write_text("# B\n\nallowed too\n")
    (secret / "a.md").write_text("SECRET KEY\n")
    (secret / "b.md").write_text("SECRET B\n")
    return {"kb": resolve(kb), "secret": resolve(secret)}


def test_a_path_below_an_allowed_root_is_read(tree):
    assert read_local(tree["kb"] / "a.md", [tree["kb"]], 1000) == b"# A\n\nallowed text\n"
    assert read_local(tree["kb"] / "sub" / "b.md", [tree["kb"]], 1000).startswith(b"# B")


def test_paths_outside_the_roots_are_refused(tree):
    kb = tree["kb"]
    for path in (
        tree["secret"] / "a.md",
        kb / ".." / "secret" / "a.md",  # traversal
        Path("/etc/passwd"),
        Path(str(kb) + "-evil") / "a.md",  # a sibling whose name starts like the root
    ):
        with pytest.raises(ParseError, match="outside the allowed ingest roots"):
            read_local(path, [kb], 1000)
    with pytest.raises(ParseError, match="outside the allowed ingest roots"):
        read_local(kb / "a.md", [], 1000)  # no root at all: nothing is readable
    with pytest.raises(ParseError, match="must be absolute"):
        check_path(Path("kb/a.md"), [kb])


def test_a_symlink_in_the_root_is_judged_by_its_target(tree):
    kb = tree["kb"]
    (kb / "alias.md").symlink_to(kb / "a.md")
    (kb / "leak.md").symlink_to(tree["secret"] / "a.md")
    (kb / "outside").symlink_to(tree["secret"], target_is_directory=True)
    assert read_local(kb / "alias.md", [kb], 1000).startswith(b"# A")
    for path in (kb / "leak.md", kb / "outside" / "a.md"):
        with pytest.raises(ParseError, match="outside the allowed ingest roots"):
            read_local(path, [kb], 1000)


def _swap_after_check(monkeypatch, swap) -> None:
    """Run ``swap`` right after the path was checked, before it is opened: the race an attacker
    with write access to the folder would try to win."""
    real_check = load_mod.check_path

    def check_then_swap(path, allowed):
        out = real_check(path, allowed)
        swap()
        return out

    monkeypatch.setattr(load_mod, "check_path", check_then_swap)


def test_a_file_swapped_for_a_symlink_after_the_check_is_refused(tree, monkeypatch):
    kb, target = tree["kb"], tree["kb"] / "a.md"

    def swap():
        target.unlink()
        target.symlink_to(tree["secret"] / "a.md")

    _swap_after_check(monkeypatch, swap)
    with pytest.raises(ParseError, match="changed to a symlink"):
        read_local(target, [kb], 1000)


def test_a_folder_swapped_for_a_symlink_after_the_check_is_refused(tree, monkeypatch):
    kb = tree["kb"]

    def swap():
        (kb / "sub").rename(kb / "sub.old")
        (kb / "sub").symlink_to(tree["secret"], target_is_directory=True)

    _swap_after_check(monkeypatch, swap)
    with pytest.raises(ParseError, match="changed to a symlink"):
        read_local(kb / "sub" / "b.md", [kb], 1000)


def test_dev_zero_and_a_fifo_fail_fast(tree):
    with pytest.raises(ParseError, match="not a regular file \\(a character device\\)"):
        read_local(Path("/dev/zero"), [Path("/dev")], 1000)
    fifo = tree["kb"] / "pipe.md"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def attempt() -> None:
        try:
            read_local(fifo, [tree["kb"]], 1000)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    t0 = time.monotonic()
    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(5)
    assert not worker.is_alive(), "opening a FIFO blocked"
    assert time.monotonic() - t0 < 2
    assert isinstance(outcome[0], ParseError) and "a FIFO" in str(outcome[0])
    with pytest.raises(ParseError, match="a directory"):
        read_local(tree["kb"] / "sub", [tree["kb"]], 1000)


def test_reads_are_bounded(tree):
    big = tree["kb"] / "big.md"
    big.write_bytes(b"x" * 1001)
    with pytest.raises(ParseError, match="too large: 1001 bytes"):
        read_local(big, [tree["kb"]], 1000)
    assert len(read_local(big, [tree["kb"]], 1001)) == 1001
    # whatever fstat says, a read stops one byte past the limit (/dev/zero never ends)
    fd = os.open("/dev/zero", os.O_RDONLY)
    try:
        with pytest.raises(ParseError, match="more than 4096 bytes"):
            read_bounded(fd, 4096)
    finally:
        os.close(fd)


def test_a_single_granted_file_allows_only_itself(tree):
    only = tree["kb"] / "a.md"
    assert read_local(only, [only], 1000).startswith(b"# A")
    with pytest.raises(ParseError, match="outside the allowed ingest roots"):
        read_local(tree["kb"] / "sub" / "b.md", [only], 1000)


def test_roots_come_from_the_tenants_sources_and_the_innermost_wins(tmp_path):
    specs = [
        SourceSpec(name="wiki", kind="folder", tenant="acme", path=tmp_path / "wiki"),
        SourceSpec(name="other", kind="folder", tenant="globex", path=tmp_path / "globex"),
        SourceSpec(name="site", kind="urls", tenant="acme", urls=["https://example.org/a.md"]),
    ]
    assert source_roots(specs, "acme") == [resolve(tmp_path / "wiki")]
    outer, inner = Path("/data"), Path("/data/wiki")
    assert containing_root(Path("/data/wiki/a.md"), [outer, inner]) == inner
    assert containing_root(Path("/data2/a.md"), [outer]) is None


def test_load_checks_the_type_and_absoluteness_before_any_root(tmp_path):
    """Cheap refusals need no database: a relative path never reaches the roots lookup."""
    with pytest.raises(ParseError, match="must be absolute"):
        load(IngestRequest(tenant="t", doc_id="d", uri="docs/a.md"))
    with pytest.raises(ParseError, match="unsupported file type"):
        load(IngestRequest(tenant="t", doc_id="d", uri="/etc/passwd"))
