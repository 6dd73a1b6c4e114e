"""The lock files: exact versions for every dependency pyproject.toml names, used by make and the image,
and the environment the tests run in installed from them."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def pins(file: str) -> dict[str, str]:
    """Canonical name -> exact version of every line of a lock file (each must be `name==version`)."""
    found: dict[str, str] = {}
    for line in (REPO / file).read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9._-]+)==([A-Za-z0-9.+!-]+)", line)
        assert match, f"{file}: {line!r} is not name==version"
        found[canonicalize_name(match[1])] = match[2]
    return found


@pytest.mark.parametrize(("file", "groups"), [("requirements.lock", ["gpu", "tracing"]), ("requirements-dev.lock", ["dev", "gpu", "tracing"])])
def test_every_dependency_is_locked_at_a_version_pyproject_allows(file: str, groups: list[str]) -> None:
    locked = pins(file)
    wanted = [Requirement(text) for text in PYPROJECT["dependencies"]]
    wanted += [Requirement(text) for group in groups for text in PYPROJECT["optional-dependencies"][group]]
    for requirement in wanted:
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{file} lacks {requirement.name} (run `make lock`)"
        assert requirement.specifier.contains(locked[name], prereleases=True), f"{file}: {name}=={locked[name]} ∉ {requirement}"


def test_the_dev_lock_extends_the_runtime_lock_with_the_same_versions() -> None:
    runtime, dev = pins("requirements.lock"), pins("requirements-dev.lock")
    assert {name: dev.get(name) for name in runtime} == runtime


def test_make_and_the_image_install_the_locks_then_the_project_without_resolving() -> None:
    makefile, dockerfile = (REPO / "Makefile").read_text(), (REPO / "Dockerfile").read_text()
    for lock in ("requirements.lock", "requirements-dev.lock"):
        assert f"pip install --quiet -r {lock}" in makefile
    assert makefile.count("pip install --quiet --no-deps -e .") == 2
    assert "RUN pip install -r requirements.lock" in dockerfile and "RUN pip install --no-deps ." in dockerfile


def test_this_environment_was_installed_from_the_dev_lock() -> None:
    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    differing = {name: (pinned, installed(name)) for name, pinned in pins("requirements-dev.lock").items()
                 if installed(name) != pinned}  # fmt: skip
    assert differing == {}, f"installed versions differ from requirements-dev.lock (run `make install-dev`): {differing}"
