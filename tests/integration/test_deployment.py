"""The deployment files stay valid: compose file, worker profiles, example settings."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from fluksio.errors import ConfigError
from fluksio.settings import load_settings
from fluksio.worker.inventory import build_inventory
from fluksio.worker.profile import load_profile
from tests.integration.support.servers import in_ci

REPO = Path(__file__).resolve().parents[2]


def compose_command() -> list[str]:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if in_ci():
        pytest.fail("neither `docker compose` nor `docker-compose` is installed")
    pytest.skip("no docker compose client")


def test_the_compose_file_is_valid() -> None:
    done = subprocess.run([*compose_command(), "-f", str(REPO / "docker/compose.yaml"), "config"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for service in ("redis", "postgres", "flower", "drivers", "cpu-worker", "gpu-worker"):
        assert f"  {service}:" in done.stdout
    assert "capabilities" in done.stdout and "nvidia" in done.stdout  # the GPU worker reserves devices


def test_the_compose_check_would_catch_a_broken_file(tmp_path: Path) -> None:
    broken = (REPO / "docker/compose.yaml").read_text().replace("    command:", "    comand:", 1)
    (tmp_path / "compose.yaml").write_text(broken)
    done = subprocess.run([*compose_command(), "-f", str(tmp_path / "compose.yaml"), "config", "-q"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0


@pytest.mark.parametrize("profile", sorted((REPO / "workers").glob("*.toml")), ids=lambda p: p.name)
def test_worker_profiles_make_valid_inventories(profile: Path) -> None:
    loaded = load_profile(profile)
    inventory = build_inventory(loaded.name, ",".join(loaded.labels), loaded.cpus, loaded.gpus_text, loaded.ram_mb)
    assert inventory.name == loaded.name and inventory.cpus == loaded.cpus


def test_a_profile_with_an_unknown_key_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bad.toml").write_text('name = "x"\ncpu = 4\n')
    with pytest.raises(ConfigError, match="cpu: Extra inputs are not permitted"):
        load_profile(tmp_path / "bad.toml")


def test_the_example_settings_file_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLUKSIO_CONFIG", str(REPO / "config/fluksio.toml"))
    settings = load_settings()
    assert settings.broker_url.startswith("redis://") and not settings.embedded
    assert settings.flows == ["examples/demo.py"]


def test_the_systemd_unit_starts_a_worker_from_its_profile() -> None:
    unit = (REPO / "workers/fluksio-worker@.service").read_text()
    assert "fluksio worker --profile /etc/fluksio/workers/%i.toml" in unit


def test_a_profile_says_which_code_its_worker_runs_and_refuses_a_mode_that_does_not_exist(tmp_path: Path) -> None:
    (tmp_path / "open.toml").write_text('name = "box"\naccept_code = "any"\n')
    assert load_profile(tmp_path / "open.toml").accept_code == "any"
    assert load_profile(REPO / "workers/gpu.toml").accept_code is None  # the installation's setting
    (tmp_path / "typo.toml").write_text('name = "box"\naccept_code = "signd"\n')
    with pytest.raises(ConfigError, match="accept_code: Input should be 'registered', 'signed' or 'any'"):
        load_profile(tmp_path / "typo.toml")
