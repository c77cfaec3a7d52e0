"""Attacks on the broker by each component's Redis user; results in bench/results/chaos.json
(section ``redis_user_attacks``).

Every role of ``shared/sdk/redis_acl.py`` tries every attack of the integration matrix
(``tests/integration/test_redis_acl.py``: read, take, delete or push queued messages of every queue;
read, delete, forge or publish another producer's result; read or forge an answer stream; list every
key, flush, read the configuration, change users) against a private embedded Redis started exactly as
``ragline up`` starts it, seeded before every attack. Beside them, one password for every component
(the stack before per-role users) tries the same attacks.
"""

from __future__ import annotations

import pytest
import redis

from ragline.shared.sdk import redis_acl
from tests.chaos import harness
from tests.integration.test_redis_acl import (  # noqa: F401  (acl_redis: the fixture)
    ALLOWED,
    CELLS,
    HARMLESS,
    _admin,
    _attack,
    _client,
    _former_single_password,
    acl_redis,
)

pytestmark = [pytest.mark.chaos]


def test_each_redis_user_against_every_attack(acl_redis):  # noqa: F811  (the imported fixture)
    settings, base = acl_redis
    admin = _admin(settings, base)
    rows = []
    for role in redis_acl.ROLES:
        attacker = _client(settings, base, role)
        succeeded = {c.name for c in CELLS if _attack(admin, attacker, role, c)}
        attacks = [c.name for c in CELLS if c.name not in ALLOWED[role]]
        rows.append(
            harness.FaultResult(
                fault=f"broker attacks by the {role} Redis user",
                tasks_affected=len(attacks),
                recovered=len([a for a in attacks if a not in succeeded]),
                lost=0,
                duplicated=0,
                time_to_recover_s=None,
                failures_recorded=len([a for a in attacks if a not in succeeded]),
                notes=f"{len(attacks)} attacks outside its part refused or harmless; may: "
                + (", ".join(sorted(ALLOWED[role])) if len(ALLOWED[role]) < 3 else "every queue and result"),
                extra={"succeeded_outside_its_part": sorted(succeeded - ALLOWED[role])},
            )
        )
        assert succeeded == ALLOWED[role]
    port, proc = _former_single_password(settings)
    try:
        one = redis.Redis(port=port, password="one-password", socket_timeout=5)
        succeeded = {c.name for c in CELLS if _attack(one, one, "chat", c)}
    finally:
        proc.terminate()
        proc.wait(10)
    attacks = [c.name for c in CELLS if c.name not in HARMLESS]
    rows.append(
        harness.FaultResult(
            fault="the same attacks with one password for every component (before per-role users)",
            tasks_affected=len(attacks),
            recovered=len([a for a in attacks if a not in succeeded]),
            lost=0,
            duplicated=0,
            time_to_recover_s=None,
            failures_recorded=0,
            notes="a chat backend's password read, took and deleted every queue, read and forged every result"
            " and stream, flushed and re-granted users; only CONFIG (renamed away) failed",
            extra={"succeeded": len(succeeded)},
        )
    )
    assert succeeded == set(attacks) - {"read the server's configuration (CONFIG GET)"}
    harness.record("redis_user_attacks", rows)
