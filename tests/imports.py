"""What a statement imports, seen from a fresh interpreter: the tests that keep a light path light
(a producer, the ACL sync, the provider registry) ask the same question this way."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
exec(sys.argv[1])
prefixes, allowed = tuple(json.loads(sys.argv[2])), set(json.loads(sys.argv[3]))
print(json.dumps(sorted(m for m in sys.modules if m.startswith(prefixes) and m not in allowed)))
"""


def modules_loaded_by(statement: str, prefixes: tuple[str, ...], allowed: tuple[str, ...] = ()) -> list[str]:
    """The modules starting with one of ``prefixes`` (a name or a dotted prefix) that are loaded
    after ``statement`` runs in a new Python process, except ``allowed``."""
    run = subprocess.run(
        [sys.executable, "-c", PROBE, statement, json.dumps(prefixes), json.dumps(allowed)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])
