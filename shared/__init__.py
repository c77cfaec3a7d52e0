"""What the pools, the CLI and the producers share, in four layers (each imports only the ones below):

* ``ragline.shared.stack``: the embedded stack (Postgres, Redis, the worker processes): the CLI's;
* ``ragline.shared.worker``: the worker runtime (Celery app, task base, database, migrations,
  providers, metrics, logging, redelivery);
* ``ragline.shared.sdk``: what a producer needs (client, async client, answer stream, contracts,
  names, signing); the base install, ``import ragline``;
* ``ragline.shared.config``: the settings and the embedded stack's ``runtime.json``.

The modules were once all in this folder. A process that still imports one by its old name
(``ragline.shared.settings``, ``celery -A ragline.shared.celery_app``, ``python -m
ragline.shared.metrics_server``) gets the module of the new name, the same object, with a
DeprecationWarning: a deployment or a producer written against the old names keeps working. The
finder installed here serves every package's table of moves (``MOVED`` here and in
``ragline.query``), so there is one mechanism for old names.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

#: old module name -> its home now; a submodule of an old package follows its package
MOVED: dict[str, str] = {
    **{
        f"ragline.shared.{name}": f"ragline.shared.sdk.{name}"
        for name in (
            "answer_stream",
            "async_client",
            "celery_base",
            "client",
            "contracts",
            "formats",
            "names",
            "sender",
            "signing",
        )
    },
    **{f"ragline.shared.{name}": f"ragline.shared.config.{name}" for name in ("runtime", "settings")},
    **{
        f"ragline.shared.{name}": f"ragline.shared.worker.{name}"
        for name in (
            "celery_app",
            "credentials",
            "db",
            "identifiers",
            "jobs",
            "kombu_redis",
            "logging_setup",
            "metrics",
            "metrics_server",
            "migrate",
            "migrations",
            "pending_vectors",
            "providers",
            "redelivery",
            "replicas",
            "task_base",
            "task_stats",
            "text",
            "timing",
            "transient",
            "warmup",
        )
    },
    **{f"ragline.shared.{name}": f"ragline.shared.stack.{name}" for name in ("processes", "services")},
    "ragline.shared.offline_nlp": "ragline.ingest.parse.offline_nlp",
}


def new_name(old: str) -> str | None:
    """The current name of a module imported by an old one (None: not a moved module).

    Each package that moved modules out of its folder lists them in its own ``MOVED`` (this one,
    ``ragline.query``'s); the table of the nearest imported ancestor package that names ``old``
    answers. An ancestor is always imported before its submodules, so the finder sees its table.
    """
    parts = old.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        table = getattr(sys.modules.get(".".join(parts[:cut])), "MOVED", None)
        if not isinstance(table, dict):
            continue
        for prefix, target in table.items():
            if old == prefix or old.startswith(prefix + "."):
                return target + old[len(prefix) :]
    return None


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name and loads it as the module of the new name (one module object, so a
    setting cached or a Celery app built under either name is the same)."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("ragline."):
            return None
        target_name = new_name(fullname)
        if target_name is None:
            return None
        target_spec = importlib.util.find_spec(target_name)
        if target_spec is None:
            return None
        is_package = target_spec.submodule_search_locations is not None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=is_package)

    def create_module(self, spec) -> ModuleType:
        target_name = new_name(spec.name)
        assert target_name is not None
        warnings.warn(
            f"{spec.name} moved to {target_name}; import it by its new name",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(target_name)
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """The module of the new name ran when it was imported; the import machinery set its
        ``__spec__`` to the old name's, which is put back (the module keeps its own name)."""
        module.__spec__ = module.__spec__.loader_state  # type: ignore[union-attr]

    def get_code(self, fullname):
        """For ``python -m <old name>``: the code of the new module, run as ``__main__``."""
        target_name = new_name(fullname)
        assert target_name is not None
        spec = importlib.util.find_spec(target_name)
        assert spec is not None and spec.loader is not None
        return spec.loader.get_code(target_name)  # type: ignore[attr-defined]


# first: the path finder would find an old package's submodule in the new folder and load it twice
if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Alias())
