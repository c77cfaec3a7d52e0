"""``make bench``: run every benchmark (or the ones named), each in its own process on a private
embedded stack.

    python -m bench.run_all            # all of them
    python -m bench.run_all c b        # by letter or by name

Each writes ``bench/results/<name>.json`` and ``<name>.png``; the exit code is 0 even when a
target fails (a failed target is a result, reported in the file), 2 when a benchmark crashed.
"""

from __future__ import annotations

import importlib
import sys
import time
import traceback

#: benchmark letter -> module
BENCHMARKS = {
    "a": "ingest_throughput",
    "b": "upsert",
    "c": "retrieval",
    "d": "acl_sync",
    "e": "local_embedder",
    "f": "scale",
    "g": "async_client",
    "h": "fairness",
    "i": "bulk_load",
    "j": "peer",
    "k": "ingest_stages",
}


def resolve(names: list[str]) -> list[str]:
    if not names:
        return list(BENCHMARKS.values())
    out = []
    for n in names:
        mod = BENCHMARKS.get(n, n)
        if mod not in BENCHMARKS.values():
            raise SystemExit(
                f"unknown benchmark {n!r}; choose from {', '.join(f'{k}={v}' for k, v in BENCHMARKS.items())}"
            )
        out.append(mod)
    return out


def main(argv: list[str] | None = None) -> int:
    names = resolve(list(sys.argv[1:] if argv is None else argv))
    if len(names) > 1:
        # each benchmark in a fresh process on a fresh stack: no result depends on the tables, dirty
        # pages or autovacuum work that an earlier benchmark left behind
        import subprocess

        codes = [subprocess.run([sys.executable, "-m", "bench.run_all", name]).returncode for name in names]
        return max(codes)
    from bench import common

    crashed = []
    with common.embedded_stack():
        for name in names:
            module = importlib.import_module(f"bench.{name}")
            print(f"== {name}: {module.TITLE}", flush=True)
            t = time.perf_counter()
            try:
                data = module.run()
            except Exception:
                traceback.print_exc()
                crashed.append(name)
                continue
            if data.get("skipped"):  # a peer that is not installed: said, not a crash
                print(f"   skipped ({data['skipped']})", flush=True)
                continue
            for target in data["targets"]:
                mark = "PASS" if target["passed"] else "FAIL"
                print(
                    f"   {mark}  {target['name']}: {target['measured']:g} {target['op']} {target['threshold']:g}"
                    f" {target['unit']}",
                    flush=True,
                )
            print(
                f"   ({time.perf_counter() - t:.0f} s) -> bench/results/{name}.json, {name}.png", flush=True
            )
    if crashed:
        print(f"crashed: {', '.join(crashed)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
