"""Clone URLs of git sources under the fetch policy of ingest/fetch.py: refused before git runs
when they lead to a private address, no HTTP redirect followed, a clone over http works when the
policy allows the address."""

from __future__ import annotations

import functools
import ipaddress
import stat
import subprocess
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ragline.ingest import git
from ragline.ingest.clone_guard import sync_guarded
from ragline.ingest.fetch import FetchPolicy, FetchRefused
from tests.unit.test_fetch import GUARD_ON, LOOPBACK_ALLOWED, serving

ONLY_127_0_0_1 = FetchPolicy(allowed_networks=(ipaddress.ip_network("127.0.0.1/32"),), timeout_s=5)


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("https://github.com/psf/requests.git", git.CloneTarget("https", "github.com", 443)),
        ("http://10.0.0.5:8080/r.git", git.CloneTarget("http", "10.0.0.5", 8080)),
        ("git://169.254.169.254/r", git.CloneTarget("git", "169.254.169.254", 9418)),
        ("ssh://git@127.0.0.1:2222/r.git", git.CloneTarget("ssh", "127.0.0.1", 2222)),
        ("git+ssh://[::1]/r.git", git.CloneTarget("ssh", "::1", 22)),
        ("git@localhost:team/r.git", git.CloneTarget("ssh", "localhost", 22)),
        ("[::ffff:127.0.0.1]:r.git", git.CloneTarget("ssh", "::ffff:127.0.0.1", 22)),
        ("/srv/repos/r.git", git.CloneTarget("file")),
        ("file:///srv/repos/r.git", git.CloneTarget("file")),
        ("../r.bundle", git.CloneTarget("file")),
    ],
)
def test_where_a_clone_url_connects(url, target):
    assert git.clone_target(url) == target


@pytest.mark.parametrize("url", ["ext::sh -c touch% /tmp/pwned", "fd::17", "ftp://example.com/r.git", "-u"])
def test_other_transports_are_refused(url, tmp_path):
    with pytest.raises(ValueError):
        sync_guarded(url, tmp_path / "c.git", 10, GUARD_ON)


@pytest.mark.parametrize(
    "url",
    [
        "git@127.0.0.1:r.git",
        "ssh://git@localhost/r.git",
        "git://169.254.169.254/r",
        "https://[::ffff:127.0.0.1]/r.git",
        "ssh://10.1.2.3/r.git",
    ],
)
def test_private_addresses_are_refused_before_git_runs(url, tmp_path):
    with pytest.raises(FetchRefused):
        sync_guarded(url, tmp_path / "c.git", 10, GUARD_ON)
    assert not (tmp_path / "c.git").exists()


def test_a_loopback_server_gets_no_request_unless_allowed(tmp_path):
    with serving({}) as srv:
        with pytest.raises(FetchRefused, match="loopback"):
            sync_guarded(f"{srv.url}/r.git", tmp_path / "a.git", 10, GUARD_ON)
        assert srv.requests == []
        # with an explicit allowance git does connect (and fails on the 404)
        with pytest.raises(git.GitError):
            sync_guarded(f"{srv.url}/r.git", tmp_path / "b.git", 10, LOOPBACK_ALLOWED)
        assert srv.requests


def test_no_redirect_is_followed(tmp_path):
    """127.0.0.1 is allowed; it redirects to 127.0.0.2, which is not: git must not follow."""
    refs = "/r.git/info/refs?service=git-upload-pack"
    with serving({}, host="127.0.0.2") as inside:
        moved = (302, {"Location": f"{inside.url}{refs}"}, b"")
        with serving({refs: moved}) as allowed:
            with pytest.raises(git.GitError):
                sync_guarded(f"{allowed.url}/r.git", tmp_path / "c.git", 10, ONLY_127_0_0_1)
            assert allowed.requests
    assert inside.requests == []


def test_a_clone_over_http_works_when_allowed(tmp_path):
    src = tmp_path / "src"
    subprocess.run(["git", "init", "-q", "-b", "main", str(src)], check=True)
    (src / "a.py").write_text("x = 1\n")
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    subprocess.run(["git", "-C", str(src), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(src), "commit", "-qm", "one"], check=True, env={**env, "PATH": "/usr/bin:/bin"}
    )
    served = tmp_path / "served" / "r.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(served)], check=True)
    subprocess.run(["git", "-C", str(served), "update-server-info"], check=True)  # dumb HTTP
    handler = functools.partial(QuietFiles, directory=str(served.parent))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://localhost:{httpd.server_address[1]}/r.git"
        dest = sync_guarded(url, tmp_path / "git" / "acme" / "clone.git", 30, LOOPBACK_ALLOWED)
        assert git.resolve_commit(dest, "main") == git.resolve_commit(Path(served), "main")
        # a tenant's clones are private to the stack's user, whatever the cloning process's umask
        for folder in (tmp_path / "git", tmp_path / "git" / "acme"):
            assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
        sync_guarded(url, dest, 30, LOOPBACK_ALLOWED)  # fetched again through the same checks
    finally:
        httpd.shutdown()
        httpd.server_close()


class QuietFiles(SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass
