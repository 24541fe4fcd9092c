"""Settings: FLUKSIO_* variables first, then fluksio.toml (or FLUKSIO_CONFIG); unknown keys are errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from fluksio.errors import ConfigError
from fluksio.settings import Settings, load_settings, redact_url


@pytest.fixture(autouse=True)
def clean_environment(tmp_path, monkeypatch):
    """No FLUKSIO_* variable and no fluksio.toml from the machine running the tests."""
    for key in list(os.environ):
        if key.startswith("FLUKSIO_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


def test_defaults_are_the_embedded_mode():
    settings = load_settings()
    assert settings.broker_url == "memory://"
    assert settings.embedded is True
    assert settings.engine == "embedded"
    assert settings.database_url == "sqlite:///.fluksio/fluksio.db"
    assert settings.artifacts_dir == Path(".fluksio/artifacts")
    assert settings.flows == [] and settings.labels == []
    assert settings.result_backend is None and settings.cpus is None


def test_environment_variables_are_read(monkeypatch):
    monkeypatch.setenv("FLUKSIO_BROKER_URL", "redis://localhost:6379/0")
    monkeypatch.setenv("FLUKSIO_DATABASE_URL", "postgresql://u@db/fluksio")
    monkeypatch.setenv("FLUKSIO_ARTIFACTS_DIR", "/shared/artifacts")
    monkeypatch.setenv("FLUKSIO_CPUS", "12")
    monkeypatch.setenv("FLUKSIO_STALE_AFTER_S", "2.5")
    settings = load_settings()
    assert settings.broker_url == "redis://localhost:6379/0"
    assert settings.embedded is False
    assert settings.engine == "redis"
    assert settings.database_url == "postgresql://u@db/fluksio"
    assert settings.artifacts_dir == Path("/shared/artifacts")
    assert settings.cpus == 12
    assert settings.stale_after_s == 2.5


def test_an_object_store_url_stays_a_url_and_a_folder_stays_a_path(monkeypatch):
    monkeypatch.setenv("FLUKSIO_ARTIFACTS_DIR", "s3://bucket/runs/")
    assert load_settings().artifacts_dir == "s3://bucket/runs"  # "//" would not survive a Path
    assert load_settings(artifacts_dir="relative/folder").artifacts_dir == Path("relative/folder")
    assert load_settings().artifacts_cache == Path(".fluksio/artifacts-cache")


def test_an_object_store_url_without_a_bucket_is_an_error_naming_the_setting(monkeypatch):
    monkeypatch.setenv("FLUKSIO_ARTIFACTS_DIR", "s3://")
    with pytest.raises(ConfigError, match="artifacts_dir: .*'s3://' names no bucket"):
        load_settings()


def test_constructor_arguments_win_over_the_environment(monkeypatch):
    monkeypatch.setenv("FLUKSIO_CPUS", "12")
    assert load_settings(cpus=3).cpus == 3


def test_fluksio_toml_in_the_working_directory_is_read(tmp_path):
    (tmp_path / "fluksio.toml").write_text('database_url = "sqlite:///here.db"\ncpus = 6\n')
    settings = load_settings()
    assert settings.database_url == "sqlite:///here.db"
    assert settings.cpus == 6


def test_fluksio_config_names_the_toml_file(tmp_path, monkeypatch):
    config = tmp_path / "elsewhere" / "site.toml"
    config.parent.mkdir()
    config.write_text(
        'broker_url = "redis://broker:6379/0"\n'
        'flows = ["pkg.flows", "flows/train.py"]\n'
        'labels = ["gpu", "a100"]\n'
        "ram_mb = 64000\n"
    )
    (tmp_path / "fluksio.toml").write_text('broker_url = "redis://ignored/0"\n')
    monkeypatch.setenv("FLUKSIO_CONFIG", str(config))
    settings = load_settings()
    assert settings.broker_url == "redis://broker:6379/0"
    assert settings.flows == ["pkg.flows", "flows/train.py"]
    assert settings.labels == ["gpu", "a100"]
    assert settings.ram_mb == 64000


def test_the_environment_wins_over_the_toml_file(tmp_path, monkeypatch):
    config = tmp_path / "site.toml"
    config.write_text('broker_url = "redis://from-file/0"\ncpus = 2\n')
    monkeypatch.setenv("FLUKSIO_CONFIG", str(config))
    monkeypatch.setenv("FLUKSIO_BROKER_URL", "redis://from-env/0")
    settings = load_settings()
    assert settings.broker_url == "redis://from-env/0"
    assert settings.cpus == 2


def test_a_missing_toml_file_is_not_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("FLUKSIO_CONFIG", str(tmp_path / "absent.toml"))
    assert load_settings().broker_url == "memory://"


def test_an_unknown_fluksio_variable_is_an_error_naming_it(monkeypatch):
    monkeypatch.setenv("FLUKSIO_BROKR_URL", "redis://typo")
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert "unknown setting(s) FLUKSIO_BROKR_URL" in message
    assert "FLUKSIO_BROKER_URL" in message  # lists what is known, so the typo is easy to spot


def test_unrelated_environment_variables_are_ignored(monkeypatch):
    monkeypatch.setenv("FLUKSIOX_THING", "1")
    monkeypatch.setenv("BROKER_URL", "redis://other")
    assert load_settings().broker_url == "memory://"


def test_an_unknown_toml_key_is_an_error_naming_key_and_file(tmp_path, monkeypatch):
    config = tmp_path / "site.toml"
    config.write_text('brokr_url = "redis://typo"\n')
    monkeypatch.setenv("FLUKSIO_CONFIG", str(config))
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert "brokr_url" in message
    assert "Extra inputs are not permitted" in message
    assert str(config) in message


def test_an_invalid_value_is_an_error_naming_the_setting(monkeypatch):
    monkeypatch.setenv("FLUKSIO_CPUS", "0")
    with pytest.raises(ConfigError, match=r"invalid fluksio settings \(cpus: Input should be greater than or equal"):
        load_settings()


def test_a_toml_file_that_does_not_parse_is_an_error(tmp_path, monkeypatch):
    config = tmp_path / "broken.toml"
    config.write_text("broker_url = \n")
    monkeypatch.setenv("FLUKSIO_CONFIG", str(config))
    with pytest.raises(ConfigError, match=f"cannot read {config}"):
        load_settings()


def test_settings_are_frozen():
    settings = load_settings()
    with pytest.raises(ValidationError, match="frozen"):
        settings.cpus = 4
    assert settings.cpus is None


def test_comma_separated_flows_and_labels_in_toml_or_arguments_are_split(tmp_path, monkeypatch):
    config = tmp_path / "site.toml"
    config.write_text('flows = "pkg.a, flows/b.py,,"\nlabels = "gpu,a100"\n')
    monkeypatch.setenv("FLUKSIO_CONFIG", str(config))
    settings = load_settings()
    assert settings.flows == ["pkg.a", "flows/b.py"]
    assert settings.labels == ["gpu", "a100"]
    assert Settings(flows="x, y").flows == ["x", "y"]


def test_json_lists_in_the_environment_are_read(monkeypatch):
    monkeypatch.setenv("FLUKSIO_LABELS", '["gpu", "a100"]')
    assert load_settings().labels == ["gpu", "a100"]


def test_comma_separated_flows_and_labels_in_the_environment_are_split(monkeypatch):
    monkeypatch.setenv("FLUKSIO_FLOWS", "pkg.flows, flows/train.py")
    monkeypatch.setenv("FLUKSIO_LABELS", "gpu,a100")
    settings = load_settings()
    assert settings.flows == ["pkg.flows", "flows/train.py"]
    assert settings.labels == ["gpu", "a100"]


@pytest.mark.parametrize(
    "url, expected",
    [
        ("redis://user:secret@host:6379/0", "redis://user:***@host:6379/0"),
        ("redis://:secret@host:6379/0", "redis://:***@host:6379/0"),
        ("postgresql+psycopg://fluksio:p%40ss@db.example:5432/runs", "postgresql+psycopg://fluksio:***@db.example:5432/runs"),
        ("amqp://guest:pa:ss@rabbit//", "amqp://guest:***@rabbit//"),
    ],
)
def test_redact_url_hides_passwords(url, expected):
    redacted = redact_url(url)
    assert redacted == expected
    assert "secret" not in redacted and "p%40ss" not in redacted


@pytest.mark.parametrize("url", ["memory://", "redis://host:6379/0", "redis://user@host/0", "sqlite:///.fluksio/x.db"])
def test_redact_url_leaves_urls_without_a_password_alone(url):
    assert redact_url(url) == url


def test_secret_values_in_the_environment_are_no_settings_and_no_mistake(monkeypatch):
    monkeypatch.setenv("FLUKSIO_SECRET_HF_TOKEN", "hf_value")
    monkeypatch.setenv("FLUKSIO_SECRETS_DIR", "/run/secrets")
    settings = load_settings()
    assert settings.secrets_dir == Path("/run/secrets")
    assert "hf_value" not in settings.model_dump_json()


def test_signing_needs_all_three_files_and_says_which_are_missing(monkeypatch):
    assert not Settings().signing
    monkeypatch.setenv("FLUKSIO_SIGNING_KEY", "/keys/me.key")
    with pytest.raises(ConfigError, match="FLUKSIO_SIGNING_CERTIFICATE, FLUKSIO_SIGNING_CERT_STORE are not set"):
        load_settings()
    monkeypatch.setenv("FLUKSIO_SIGNING_CERTIFICATE", "/keys/me.pem")
    monkeypatch.setenv("FLUKSIO_SIGNING_CERT_STORE", "/keys/trusted")
    settings = load_settings()
    assert settings.signing and settings.signing_cert_store == Path("/keys/trusted")


@pytest.mark.parametrize(("url", "expected"), [
    ("rediss://:pw@h:6380/0", "rediss://:pw@h:6380/0?ssl_cert_reqs=required"),
    ("rediss://h/0?ssl_ca_certs=/etc/ca.pem", "rediss://h/0?ssl_ca_certs=/etc/ca.pem&ssl_cert_reqs=required"),
    ("rediss://h/0?ssl_cert_reqs=none", "rediss://h/0?ssl_cert_reqs=none"),
    ("redis://h/0", "redis://h/0"),
    ("memory://", "memory://"),
])
def test_a_rediss_url_verifies_the_server_unless_it_says_otherwise(url, expected):
    from fluksio.settings import verified_redis_url

    assert verified_redis_url(url) == expected


def test_pools_come_from_the_environment_as_json(monkeypatch):
    monkeypatch.setenv("FLUKSIO_POOLS", '{"licenses": 4, "db": 1}')
    assert load_settings().pools == {"licenses": 4, "db": 1}


def test_pools_come_from_a_pools_table_in_fluksio_toml(tmp_path):
    (tmp_path / "fluksio.toml").write_text("[pools]\nlicenses = 4\nshared_db = 2\n")
    assert load_settings().pools == {"licenses": 4, "shared_db": 2}


@pytest.mark.parametrize(("pools", "complaint"), [
    ('{"licenses": 0}', "pool 'licenses' must have at least 1 slot, got 0"),
    ('{"two words": 1}', "pool name 'two words' is not valid"),
    ('{"licenses": "many"}', "pools.licenses"),
])
def test_a_bad_pool_is_a_config_error_naming_it(monkeypatch, pools, complaint):
    monkeypatch.setenv("FLUKSIO_POOLS", pools)
    with pytest.raises(ConfigError, match=complaint):
        load_settings()


def test_an_environment_variable_that_is_not_json_is_named(monkeypatch):
    monkeypatch.setenv("FLUKSIO_POOLS", "{bad")
    with pytest.raises(ConfigError, match=r"^FLUKSIO_POOLS cannot be read: Expecting property name .* takes JSON"):
        load_settings()


# -- configuration files that are a JSON list of objects -----------------------------------------------


def test_a_json_list_names_each_problem_in_file_order_and_refuses_the_whole_file() -> None:
    from pydantic import BaseModel, ConfigDict

    from fluksio.settings import parse_json_list

    class Entry(BaseModel):
        model_config = ConfigDict(extra="forbid")
        name: str
        size: int

    def parse(data: object) -> list[Entry]:
        return parse_json_list(data, "things.json", Entry, item="thing", holds="things (objects)",
                               describe=lambda err: f"{'.'.join(map(str, err['loc']))}: {err['type']}",
                               named_before=lambda index: f"thing {index}")

    assert parse([{"name": "a", "size": 1}]) == [Entry(name="a", size=1)]
    with pytest.raises(ConfigError, match=r"^things.json: must be a JSON list of things \(objects\), got dict$"):
        parse({"name": "a"})
    with pytest.raises(ConfigError) as caught:
        parse([{"name": "a", "size": 1}, 3, {"name": "a", "size": "2"}, {"size": 1}])
    assert str(caught.value) == (
        "things.json: thing 1: must be an object, got int; thing 2 ('a'): size: int_type; "
        "thing 2 ('a'): name: thing 0 has the same name; names must be unique; thing 3: name: missing")


def test_runs_resume_automatically_by_default_but_the_embedded_default_keeps_that_off_unless_asked(tmp_path):
    """A driver-capable worker coming back continues a run whose driver died; in the embedded default the
    drivers live as long as one command, so a later unrelated command must not pick up a run left behind."""
    from fluksio.runtime import Runtime

    assert Settings().auto_resume is True
    stores = {"database_url": f"sqlite:///{tmp_path / 'f.db'}", "artifacts_dir": tmp_path / "artifacts"}
    for given, embedded in (({}, False), ({"auto_resume": True}, True), ({"auto_resume": False}, False)):
        runtime = Runtime.embedded(Settings(**stores, **given))
        try:
            assert runtime.settings.auto_resume is embedded
            assert runtime.settings.accept_code == "any"  # its own submits' packages: nobody else reaches it
        finally:
            runtime.close()
