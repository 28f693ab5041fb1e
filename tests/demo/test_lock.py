"""The versions a machine installs: pyproject.toml's ranges leave out the releases with published vulnerabilities,
and constraints.txt (`make lock`, demo/lock.py) pins what CI tested, inside those ranges, for every install target."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from demo.lock import EXTRAS, needed, render

REPO = Path(__file__).resolve().parents[2]

# Releases a fresh install must never get: the last vulnerable release of each advisory, or the one bad release.
VULNERABLE = [
    ("urllib3", "2.6.2"),  # CVE-2026-21441: a redirect's body decompressed without bound
    ("urllib3", "2.4.0"),  # CVE-2025-50181: redirects followed although disabled
    ("requests", "2.32.3"),  # CVE-2024-47081: a .netrc credential sent to another host
    ("cryptography", "44.0.0"),  # GHSA-79v4-65xg-pq4g: its wheels' OpenSSL (CVE-2024-12797)
    ("cryptography", "42.0.8"),
    ("grpcio", "1.67.1"),
    ("grpcio-tools", "1.67.1"),  # it requires the grpcio of its own release
    ("protobuf", "5.29.4"),  # CVE-2025-4565: unbounded recursion on nested groups
    ("protobuf", "5.26.0"),
    ("pyjwt", "2.10.0"),  # CVE-2024-53861: the issuer compared as a substring
]


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _requirements() -> list[Requirement]:
    project = _pyproject()["project"]
    lines = project["dependencies"] + [line for extra in project["optional-dependencies"].values() for line in extra]
    return [Requirement(line) for line in lines]


def _pins() -> dict[str, Version]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


@pytest.mark.parametrize(("name", "version"), VULNERABLE)
def test_pyproject_ranges_leave_out_vulnerable_releases(name, version):
    requirements = [r for r in _requirements() if canonicalize_name(r.name) == name]
    assert requirements, f"{name} is no longer a requirement of pyproject.toml: drop it from VULNERABLE"
    for req in requirements:
        assert not req.specifier.contains(version, prereleases=True), f"pyproject.toml's {req} admits {version}"


def test_build_backend_floor_leaves_out_vulnerable_setuptools():
    (setuptools,) = (Requirement(r) for r in _pyproject()["build-system"]["requires"])
    assert not setuptools.specifier.contains("78.1.0"), "CVE-2025-47273: a package index writes outside the build"


def test_constraints_pin_versions_inside_pyproject_ranges():
    pins = _pins()
    for req in _requirements():
        name = canonicalize_name(req.name)
        if name == "playwright":  # the e2e extra: `make e2e` installs it, CI does not
            continue
        assert name in pins, f"{req.name} is not in constraints.txt: run `make lock`"
        assert req.specifier.contains(pins[name], prereleases=True), f"constraints.txt pins {name}=={pins[name]}: {req}"
    for name, version in VULNERABLE:
        assert pins[name] != Version(version)


def test_constraints_pin_what_the_venv_runs():
    """CI installs with the pins, so a difference here is a pyproject.toml edited, or a venv upgraded, without
    `make lock`."""
    pins = _pins()
    installed = needed(extras=tuple(e for e in EXTRAS if e != "e2e"))
    assert {name: version for name, version in installed.items() if Version(version) != pins.get(name)} == {}, (
        "installed versions differ from constraints.txt: `make lock` (docs/development/index.md)"
    )


def test_lock_writes_pins_the_constraints_file_reads():
    text = render(needed())
    assert text.startswith("#")
    assert "sf-cdc-delta" not in text  # the project itself is installed editable, never pinned
    assert re.search(r"^setuptools==\S+$", text, re.MULTILINE), "pip freeze leaves it out; grpcio-tools needs it"
    assert all(re.fullmatch(r"[a-z0-9-]+==\S+", line) for line in text.splitlines() if not line.startswith("#"))


def test_every_install_target_passes_the_constraints():
    makefile = (REPO / "Makefile").read_text()
    installs = re.findall(r"^\t(.*-e '\.\[.*)$", makefile, re.MULTILINE)
    # `make lock` alone installs without the pins: it is how they move.
    pinned = [line for line in installs if "$(UPGRADE)" not in line]
    assert len(pinned) == len(installs) - 1 >= 4, installs  # install, e2e, docs, lint
    assert all(line.startswith("$(PIP_INSTALL) ") for line in pinned), pinned
    assert "PIP_INSTALL := $(BIN)/pip install --quiet -c $(CONSTRAINTS)" in makefile
