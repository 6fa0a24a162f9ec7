"""The wheel that `pip install .` builds: built here offline (no index, no build isolation) from a copy of the
package's files, and checked for what the package needs at run time outside this checkout."""

import importlib.metadata
import re
import shutil
import stat
import subprocess
import sys
import zipfile

import pytest
from conftest import REPO
from packaging.version import Version

PACKAGE = REPO / "hf_elmo"


def build_requirement() -> Version:
    """The setuptools version that pyproject.toml's [build-system] requires at least."""
    found = re.search(r'requires = \["setuptools>=([0-9.]+)"\]', (REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert found, "pyproject.toml: [build-system] requires no `setuptools>=VERSION`"
    return Version(found.group(1))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    try:
        installed = Version(importlib.metadata.version("setuptools"))
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("setuptools is not installed here (torch, which `make setup` installs, brings it)")
    if installed < build_requirement():
        pytest.skip(f"setuptools {installed} here, the build needs {build_requirement()} or later")
    # The repository's top-level files (pyproject.toml, README.md, model_card.md, ...) and the package as it is,
    # symbolic links kept: the build sees what it sees in the checkout, and leaves no build output there.
    source, output = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    for path in REPO.iterdir():
        if path.is_file():
            shutil.copy2(path, source / path.name)
    shutil.copytree(PACKAGE, source / "hf_elmo", symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                             "--disable-pip-version-check", "-q", "-w", str(output), str(source)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    (built,) = output.glob("hf_elmo-*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def test_the_wheel_holds_every_module_and_the_default_model(wheel):
    names = set(wheel.namelist())
    modules = {f"hf_elmo/{path.name}" for path in PACKAGE.glob("*.py")}
    assert "hf_elmo/__init__.py" in modules and modules <= names, sorted(modules - names)
    model_files = {path.name for path in (PACKAGE / "default-model").iterdir() if path.is_file()}
    assert {"config.json", "model.safetensors", "tokenizer_config.json", "README.md"} <= model_files
    for name in model_files:  # (each whole: the weights too)
        assert wheel.read(f"hf_elmo/default-model/{name}") == (PACKAGE / "default-model" / name).read_bytes(), name


def test_the_wheel_holds_the_model_card_template_as_a_file_not_a_link(wheel):
    """hf_elmo/model_card.md is a symbolic link to the repository's model_card.md; the wheel must hold its text."""
    info = wheel.getinfo("hf_elmo/model_card.md")
    mode = info.external_attr >> 16
    assert not stat.S_ISLNK(mode) and (mode == 0 or stat.S_ISREG(mode))
    assert wheel.read(info) == (PACKAGE / "model_card.md").read_bytes() == (REPO / "model_card.md").read_bytes()


def test_the_wheel_declares_the_command_and_the_license(wheel):
    (entry_points,) = [name for name in wheel.namelist() if name.endswith(".dist-info/entry_points.txt")]
    assert "hf-elmo = hf_elmo.cli:main" in wheel.read(entry_points).decode()
    (metadata,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
    assert "License-Expression: Apache-2.0" in wheel.read(metadata).decode().splitlines()
