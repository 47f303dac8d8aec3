"""The deployment files of docs/deploy/ (what docs/jupyterhub.md shows an administrator to
install) are checked as the programs that read them read them: the systemd unit by
`systemd-analyze verify`, the two Python config files by loading them into the classes they
configure (every setting known, every value valid, every Hub scope one that exists), the
Prometheus scrape config against the served route; and the page shows each file as it is."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from jupyterhub.app import JupyterHub
from jupyterhub.scopes import _check_scopes_exist
from jupyterhub.spawner import LocalProcessSpawner
from traitlets.config import Config, Configurable

from jupyter_edt.api import API_PREFIX, default_handlers
from jupyter_edt.serve.app import EDTService
from jupyter_edt.serve.auth import HubAuthenticator

DOCS = Path(__file__).parents[2] / "docs"
DEPLOY = DOCS / "deploy"
UNIT = DEPLOY / "jupyter-edt.service"
SYSTEM_UNITS = Path("/usr/lib/systemd/system")  # the targets a unit's default dependencies name
ANALYZE = shutil.which("systemd-analyze")
needs_systemd = pytest.mark.skipif(
    ANALYZE is None, reason="systemd-analyze is missing: `make systemd` installs it"
)
#: The secrets the Hub's config reads, as an administrator made them.
SECRETS = {
    "/etc/jupyter-edt/token.env": "JUPYTERHUB_API_TOKEN=" + "5e" * 32 + "\n",
    "/etc/prometheus/jupyterhub.token": "7a" * 32 + "\n",
}


def settings(unit: str) -> dict[str, list[str]]:
    """Each setting of a unit file and its values, in order (comments are whole lines)."""
    out: dict[str, list[str]] = {}
    for line in unit.splitlines():
        if line.strip() and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def verify(unit_text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`systemd-analyze verify` of the unit, installed in a root of its own: the system's
    units (the targets it orders itself against), and the programs of its ExecStart and
    ExecReload there, as the docs install them. So the unit file is verified as it is, not
    rewritten."""
    root = tmp_path / "root"
    shutil.copytree(SYSTEM_UNITS, root / SYSTEM_UNITS.relative_to("/"), symlinks=True)
    unit = settings(unit_text)
    for command in unit["ExecStart"] + unit.get("ExecReload", []):
        program = root / command.split()[0].lstrip("/")
        program.parent.mkdir(parents=True, exist_ok=True)
        program.write_text("#!/bin/sh\n")
        program.chmod(0o755)
    installed = root / "etc" / "systemd" / "system" / UNIT.name
    installed.parent.mkdir(parents=True, exist_ok=True)
    installed.write_text(unit_text)
    return subprocess.run(
        [ANALYZE, "verify", "--man=no", f"--root={root}", UNIT.name],
        capture_output=True,
        text=True,
        timeout=60,
    )


@needs_systemd
def test_systemd_verifies_the_unit(tmp_path):
    checked = verify(UNIT.read_text(), tmp_path)
    assert (checked.returncode, checked.stdout + checked.stderr) == (0, "")


@needs_systemd
def test_the_verification_finds_what_systemd_would_ignore(tmp_path):
    """The check is real: an inline comment, which systemd takes as part of the value (and
    then ignores the setting), fails it, as does a program that is not installed."""
    commented = UNIT.read_text().replace("KillMode=process", "KillMode=process  # the service")
    assert "Failed to parse kill mode" in verify(commented, tmp_path / "comment").stderr
    unit = UNIT.read_text()
    checked = verify(unit, tmp_path / "moved")
    assert checked.returncode == 0
    (tmp_path / "moved" / "root" / "opt" / "jupyter-edt" / "venv" / "bin" / "jupyter").unlink()
    checked = subprocess.run(checked.args, capture_output=True, text=True, timeout=60)
    assert checked.returncode != 0 and "is not executable" in checked.stderr


def test_the_unit_starts_before_the_hub_and_leaves_the_jobs_running():
    unit = settings(UNIT.read_text())
    assert unit["Before"] == ["jupyterhub.service"]
    assert unit["KillMode"] == ["process"]
    assert unit["ExecReload"] == ["/bin/kill -HUP $MAINPID"]  # reloads the live settings
    assert unit["EnvironmentFile"] == ["/etc/jupyter-edt/token.env"]
    assert not [v for values in unit.values() for v in values if "#" in v]


def load(path: Path, opened: list[str] | None = None) -> Config:
    """A config file run as traitlets runs it (`c = get_config()`), its secrets read from
    `SECRETS` (`opened`: the paths it read)."""

    def open_secret(name: str, *args: object, **kwargs: object) -> io.StringIO:
        if opened is not None:
            opened.append(name)
        return io.StringIO(SECRETS[name])

    config = Config()
    namespace = {"get_config": lambda: config, "open": open_secret, "__file__": str(path)}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return config


def unknown_settings(config: Config, *classes: type[Configurable]) -> list[str]:
    """The settings no class takes (a section names a class or one it inherits from)."""
    by_name = {
        base.__name__: cls
        for cls in classes
        for base in cls.mro()
        if isinstance(base, type) and issubclass(base, Configurable)
    }
    return [
        f"{section}.{key}"
        for section, values in config.items()
        for key in values
        if section not in by_name or key not in by_name[section].class_traits(config=True)
    ]


def test_the_services_config_sets_known_settings_to_valid_values():
    config = load(DEPLOY / "edt_config.py")
    assert not unknown_settings(config, EDTService, HubAuthenticator)
    service = EDTService(config=config)  # each value validated (the policy loaded)
    assert service.user_quotas == {"intern1": 1} and service.policy == "fair-share"
    assert service.admin_groups == ["edt-admins"]  # they change with a reload, as quotas do
    assert service.share_rules().group_quotas == {"students": 4}


def test_the_hubs_config_sets_known_settings_scopes_and_tokens():
    opened: list[str] = []
    config = load(DEPLOY / "jupyterhub_config.py", opened)
    assert not unknown_settings(config, JupyterHub, LocalProcessSpawner)
    hub = JupyterHub(config=config)
    spawner = LocalProcessSpawner(config=config)
    for role in hub.load_roles:
        _check_scopes_exist(set(role["scopes"]))
    _check_scopes_exist(set(spawner.server_token_scopes))
    services = {s["name"]: s for s in hub.services}
    assert services["edt"]["api_token"] == "5e" * 32  # the line of the unit's token.env
    assert services["prometheus"]["api_token"] == "7a" * 32
    (metrics,) = (r for r in hub.load_roles if r.get("services") == ["prometheus"])
    assert metrics["scopes"] == [HubAuthenticator().metrics_scope]
    # each user's server forwards to the service under the prefix the unit gives it
    unit = settings(UNIT.read_text())
    assert f"JUPYTERHUB_SERVICE_PREFIX={'/services/edt/'}" in unit["Environment"]
    assert spawner.environment["EDT_SERVICE_URL"] == services["edt"]["url"] + "/services/edt/"
    assert sorted(opened) == sorted(SECRETS)


def test_prometheus_scrapes_the_served_route_with_the_hubs_token():
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    edt = jobs["jupyter-edt"]
    route = "/services/edt" + API_PREFIX + "/metrics"
    assert edt["metrics_path"] == route
    assert any(re.fullmatch(pattern, API_PREFIX + "/metrics") for pattern, _ in default_handlers)
    ((target,),) = (c["targets"] for c in edt["static_configs"])
    assert target == "127.0.0.1:8765"  # where the unit's ExecStart listens
    assert "--ip=127.0.0.1 --port=8765" in settings(UNIT.read_text())["ExecStart"][0]
    for job in jobs.values():  # the file jupyterhub_config.py reads Prometheus' token from
        assert job["authorization"]["credentials_file"] == "/etc/prometheus/jupyterhub.token"
    assert jobs["jupyterhub"]["metrics_path"] == "/hub/metrics"


@pytest.mark.parametrize("path", sorted(DEPLOY.iterdir()), ids=lambda p: p.name)
def test_the_page_shows_each_file_as_it_is(path):
    """docs/jupyterhub.md shows each file in full, in a fenced block of its own: the files
    are what the tests check, and the page must not drift from them."""
    language = {".service": "ini", ".py": "python", ".yml": "yaml"}[path.suffix]
    page = (DOCS / "jupyterhub.md").read_text()
    assert f"```{language}\n{path.read_text()}```\n" in page, f"{path.name} differs on the page"
