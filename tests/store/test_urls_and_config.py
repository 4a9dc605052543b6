"""Store URLs: the two backends, the defaults, $TRTKIT_GATEWAY_STORE; bad URLs and leases fail the config
with the field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_config import with_section
from trtkit.config import parse_config
from trtkit.errors import ConfigError
from trtkit.store import GATEWAY_STORE_ENV, gateway_store_url, ledger_url, parse_store_url


def test_urls_name_their_backend(tmp_path: Path) -> None:
    assert parse_store_url("sqlite:////var/lib/t/usage.db").path == Path("/var/lib/t/usage.db")
    assert parse_store_url("sqlite:///rel/usage.db").path == Path("rel/usage.db")  # SQLAlchemy's spelling
    assert parse_store_url(tmp_path / "g.db").path == tmp_path / "g.db"  # a plain path is a SQLite file
    pg = parse_store_url("postgres://trtkit:s3cret@db:5432/gov")
    assert pg.backend == "postgresql" and pg.dsn == "postgresql://trtkit:s3cret@db:5432/gov"
    assert "s3cret" not in pg.redacted() and "db:5432/gov" in pg.redacted()


@pytest.mark.parametrize(("url", "words"), [
    ("mysql://u@h/db", "unsupported store scheme 'mysql'"),
    ("sqlite://", "not a SQLite URL with a file path"),
    ("sqlite:///", "not a SQLite URL with a file path"),
    ("postgresql:", "has no host or database"),
    ("  ", "empty store URL"),
])
def test_bad_urls_name_the_field_and_the_fix(url: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_store_url(url, "gateway.store")
    assert str(info.value).startswith("gateway.store: ") and words in str(info.value)
    assert "sqlite:///PATH" in str(info.value) and "postgresql://" in str(info.value)


def test_the_config_checks_store_urls_and_lease_strictly() -> None:
    with pytest.raises(ConfigError, match=r"^client.store: unsupported store scheme 'redis'"):
        parse_config(with_section("client", store="redis://cache:6379"))
    with pytest.raises(ConfigError, match=r"gateway.lease_seconds"):
        parse_config(with_section("gateway", lease_seconds=0))
    with pytest.raises(ConfigError, match=r"gateway.lease_secs: unknown key"):
        parse_config(with_section("gateway", lease_secs=5))
    config = parse_config(with_section("gateway", store="postgresql://u@db/gov", lease_seconds=5))
    assert config.gateway.lease_seconds == 5.0 and config.gateway.store == "postgresql://u@db/gov"


def test_defaults_live_under_trtkit_home_and_the_environment_wins(isolated_home: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    assert gateway_store_url(None).path == isolated_home / "gateway.db"
    assert ledger_url(None).path == isolated_home / "usage.db"
    assert gateway_store_url("sqlite:////x/g.db").path == Path("/x/g.db")
    monkeypatch.setenv(GATEWAY_STORE_ENV, "postgresql://u@db/gov")
    assert gateway_store_url("sqlite:////x/g.db").dsn == "postgresql://u@db/gov"
    monkeypatch.setenv(GATEWAY_STORE_ENV, "nope://x")
    with pytest.raises(ConfigError, match=f"^{GATEWAY_STORE_ENV}: unsupported"):
        gateway_store_url(None)


def test_the_k8s_gateway_pod_gets_the_variable_the_gateway_reads() -> None:
    from trtkit.k8s.plan import STORE_ENV

    assert STORE_ENV == GATEWAY_STORE_ENV == "TRTKIT_GATEWAY_STORE"
