"""The GPU machine reaches no registry: every package soakgate imports there must be either on its
image or among the wheels `scripts/gpu/fetch-wheels.sh` carries. (Since the HTTP client changed,
the script failed there with `No module named 'httptools'`.)"""

from __future__ import annotations

import contextlib
import re
import tomllib
from importlib.metadata import PackageNotFoundError, requires

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.realservers.helpers import REPO

FETCH = REPO / "scripts" / "gpu" / "fetch-wheels.sh"
GPU_PYTHON = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
              "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
              "implementation_name": "cpython", "extra": ""}  # fmt: skip


def _array(name: str) -> set[str]:
    """The package names of a bash array `name=( ... )` in fetch-wheels.sh (pins dropped)."""
    match = re.search(rf"^{name}=\((.*?)^\)", FETCH.read_text(), re.S | re.M)
    assert match, f"{name}=( ... ) not found in {FETCH}"
    words = match.group(1).split()
    return {canonicalize_name(word.split("==")[0]) for word in words}


def _runtime_closure() -> dict[str, str]:
    """Every distribution soakgate's runtime dependencies pull in on the GPU machine's Python,
    by name -> the requirement that brought it (from the installed packages' metadata)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    todo = [(Requirement(text), "pyproject.toml") for text in project["dependencies"]]
    found: dict[str, str] = {}
    while todo:
        requirement, why = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate(GPU_PYTHON):
            continue
        name = canonicalize_name(requirement.name)
        if name in found:
            continue
        found[name] = why
        # Not installed here (another platform's dependency): judged by its name alone.
        with contextlib.suppress(PackageNotFoundError):
            todo += [(Requirement(r), name) for r in requires(requirement.name) or []]
    return found


def test_every_runtime_dependency_is_on_the_gpu_image_or_carried_as_a_wheel() -> None:
    wheels, present = _array("wheels"), _array("present_on_gpu_image")
    closure = _runtime_closure()
    assert {"httptools", "adbc-driver-sqlite", "numpy"} <= set(closure)  # the walk is real
    missing = {name: why for name, why in closure.items() if name not in wheels | present}
    assert not missing, f"add to wheels in {FETCH.name} (or to present_on_gpu_image): {missing}"
    pinned = re.findall(r"^\s+(\S.*)$", FETCH.read_text().split("wheels=(")[1].split(")")[0], re.M)
    assert all("==" in word for line in pinned for word in line.split()), "pin every wheel"
