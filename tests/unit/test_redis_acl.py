"""The Redis users' declaration (shared/sdk/redis_acl.py): ids, URLs, the generated docs table."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from ragline.shared.config.settings import RoleName
from ragline.shared.sdk import redis_acl

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def test_the_docs_table_is_generated_from_the_declaration():
    text = DOC.read_text()
    current = text[text.index(redis_acl.DOC_BEGIN) : text.index(redis_acl.DOC_END) + len(redis_acl.DOC_END)]
    assert current == redis_acl.markdown(), (
        "run `ragline redis-acl --markdown` and paste it into docs/operations.md"
    )


@pytest.mark.parametrize(
    ("url", "prefix"),
    [
        ("redis://chat:pw@127.0.0.1:6379/0", "chat-"),
        ("redis://relay:p%40w@redis:6379/0", "relay-"),
        ("redis://worker:pw@redis:6379/0", ""),
        ("redis://operator:pw@redis:6379/0", ""),
        ("redis://:pw@redis:6379/0", ""),  # one password for everything: today's ids
        ("redis://someone:pw@redis:6379/0", ""),  # a user ragline does not know
        (None, ""),
    ],
)
def test_task_ids_carry_the_prefix_of_a_producer_that_reads_only_its_own(url, prefix):
    first, second = redis_acl.task_id(url), redis_acl.task_id(url)
    assert first != second and first.startswith(prefix)
    assert len(first) == len(prefix) + 36
    role = redis_acl.role_of_url(url)
    if prefix:  # the id's result key, answer stream and result channel are inside the user's patterns
        assert f"{redis_acl.RESULT_KEY_PREFIX}{prefix}*" in role.keys
        assert f"ragline-answer:{prefix}*" in role.keys
        assert f"{redis_acl.RESULT_KEY_PREFIX}{prefix}*" in role.channels
        assert redis_acl.reply_channel(url).startswith(f"{redis_acl.RESULT_KEY_PREFIX}{prefix}")


def test_every_role_is_a_setting_value_and_has_its_rules():
    assert set(get_args(RoleName)) == set(redis_acl.ROLES)
    passwords = {r: f"pw-{r}" for r in redis_acl.ROLES}
    users = redis_acl.conf_users(passwords)
    assert users[0][:3] == ["user", "default", "off"]
    assert [u[1] for u in users[1:]] == list(redis_acl.ROLES)
    for user in users[1:]:
        assert user[2:4] == ["on", f">pw-{user[1]}"] and "-@all" in user
    setuser = redis_acl.setuser_commands()
    assert setuser[-1] == ["ACL", "SETUSER", "default", "off"]
    assert all(c[:2] == ["ACL", "SETUSER"] and "reset" in c for c in setuser[:-1])


def test_only_flower_moves_its_kombu_bookkeeping():
    assert redis_acl.transport_options("redis://flower:x@h:6379/0") == {
        "unacked_key": "flower.unacked",
        "unacked_index_key": "flower.unacked_index",
        "unacked_mutex_key": "flower.unacked_mutex",
    }
    assert redis_acl.transport_options("redis://worker:x@h:6379/0") == {}
    assert redis_acl.transport_options("redis://:x@h:6379/0") == {}


def test_the_deployments_acl_file_is_generated_from_the_declaration():
    """deploy/redis/users.acl.in (compose's Redis fills in the passwords at start) is the declaration's."""
    template = DOC.parents[1] / "deploy" / "redis" / "users.acl.in"
    assert template.read_text() == redis_acl.aclfile_template(), (
        "run `ragline redis-acl --aclfile > deploy/redis/users.acl.in`"
    )
