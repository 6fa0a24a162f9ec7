"""Shared test data: the real ELMo fixtures in ../shared/fixtures, converted once per test session."""

import contextlib
import json
import os
import re
import signal
import site
import subprocess
import sys
import tempfile
import time
import venv
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
FIXTURES = REPO.parent / "shared" / "fixtures"
# Where the exactness tests run: the CPU always, and a CUDA device where this machine has one (CI has none;
# the GPU check of benchmarks/gpu.sh runs them there).
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def relative_error(found: torch.Tensor, expected: torch.Tensor) -> float:
    """|found - expected| / |expected| (Frobenius norms, in float64): how the fast paths are held to the plain one."""
    return ((found.double() - expected.double()).norm() / expected.double().norm().clamp(min=1e-30)).item()


def readme_python_block(after: str) -> str:
    """The code of the README's first ```python block after the text `after`."""
    section = README.read_text(encoding="utf-8").split(after)[1]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


@dataclass(frozen=True)
class FixtureSet:
    """A tiny ELMo in the original format with the outputs that the original TensorFlow model gave."""

    name: str
    folder: Path
    sentences_file: str

    @property
    def options_file(self) -> Path:
        return self.folder / "options.json"

    @property
    def weight_file(self) -> Path:
        return self.folder / "lm_weights.hdf5"

    def batches(self) -> list[list[list[str]]]:
        """10 batches of 3 sentences: row k of batch i is `sentences[k][i]`."""
        sentences = json.loads((self.folder / self.sentences_file).read_text(encoding="utf-8"))
        return [[sentences[k][i].split() for k in range(3)] for i in range(10)]

    def expected_top_layer(self, row: int, batch: int) -> np.ndarray:
        """[words, 2P]: the original model's top layer, forward and backward halves."""
        with h5py.File(self.folder / f"lm_embeddings_{row}.hdf5", "r") as handle:
            both = handle[str(batch)][...]
        return np.concatenate([both[0], both[1]], axis=-1)


FIXTURE_SETS = {
    # skip connections on
    "allennlp-elmo": FixtureSet("allennlp-elmo", FIXTURES / "allennlp-elmo", "sentences.json"),
    # skip connections off
    "bilm-tf": FixtureSet("bilm-tf", FIXTURES / "bilm-tf" / "model", "lm_embeddings_sentences.json"),
}
MULTILINGUAL_FR = FIXTURES / "allennlp-elmo" / "v0.9.0" / "elmo_multilingual" / "fr"
# The tests measure and keep their kernel choices (hf_elmo/fast_linear.py) in a file of their own, never reading the
# user's (whose choices could change what a test exercises) nor writing into it. Set when this file is imported, so
# that test modules that copy the environment for their subprocesses at import time give them the same file: a run
# resumed in another process is compared bit for bit with one in this process, so both must take the same kernels.
_KERNEL_CHOICES = tempfile.TemporaryDirectory(prefix="hf-elmo-test-kernels-")  # (removed when the tests end)
os.environ["HF_ELMO_KERNEL_CHOICES"] = str(Path(_KERNEL_CHOICES.name) / "kernels.json")


# Tiny models in ELMoForManyLangs' format, made with that package's own code, and its outputs
# (conversion/make_elmoformanylangs_fixtures.py): "with_words" reads words and characters, "chars_only" characters,
# "wide_projection" characters with cells narrower than their projection.
ELMOFORMANYLANGS = Path(__file__).resolve().parent / "fixtures" / "elmoformanylangs"
ELMOFORMANYLANGS_MODELS = ("with_words", "chars_only", "wide_projection")


@pytest.fixture(scope="session", autouse=True)
def _fixtures_present():
    if not FIXTURES.is_dir():
        pytest.fail(f"ELMo fixtures not found at {FIXTURES}: clone this repository next to shared/")


@pytest.fixture(scope="session")
def converted(tmp_path_factory) -> dict[str, Path]:
    """Each fixture set converted with the project's converter into a Hugging Face folder."""
    from conversion.convert_original_elmo import convert_original_to_hf

    folders = {}
    for name, fixture in FIXTURE_SETS.items():
        folder = tmp_path_factory.mktemp("converted") / name
        convert_original_to_hf(fixture.options_file, fixture.weight_file, folder)
        folders[name] = folder
    return folders


def unwritable_folder(tmp_path: Path) -> Path:
    """A folder this process cannot create anything in (root ignores permissions: a kernel file system there)."""
    if os.geteuid() == 0:
        return Path("/sys")
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


def unreadable_file(tmp_path: Path) -> Path:
    """A file this process cannot read (Permission denied): one without read permission, or, for root (who reads
    any such file), a write-only kernel setting."""
    if os.geteuid() == 0:
        return Path("/proc/sys/vm/drop_caches")
    path = tmp_path / "unreadable.txt"
    if not path.exists():
        path.write_text("a b\n", encoding="utf-8")
        path.chmod(0)
    return path


def solved_tagger(
    base: Path, texts: list[str], tags: list[str], labels: list[str], tag_logit: float, other_logit: float
):
    """The tokenizer and an ElmoForTokenClassification on `base` whose classifier is solved (least squares) to
    give each word of `texts`, in its context, the logit `tag_logit` for its tag (`tags`, one per word of all
    texts in order) and `other_logit` for every other label."""
    from hf_elmo import ElmoForTokenClassification, ElmoTokenizer

    tokenizer = ElmoTokenizer.from_pretrained(base)
    model = ElmoForTokenClassification.from_pretrained(
        base, num_labels=len(labels), id2label=dict(enumerate(labels)), label2id={l: i for i, l in enumerate(labels)}
    ).eval()
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        mixes = model.elmo(**batch).elmo_representations[0][batch["attention_mask"].bool()]
        targets = torch.full((len(tags), len(labels)), other_logit)
        targets[range(len(tags)), [labels.index(tag) for tag in tags]] = tag_logit
        model.classifier.weight.copy_(torch.linalg.lstsq(mixes, targets).solution.T)
        model.classifier.bias.zero_()
    return tokenizer, model


@pytest.fixture(scope="session")
def converted_elmoformanylangs(tmp_path_factory) -> dict[str, Path]:
    """Each ELMoForManyLangs fixture model converted with the project's converter into a Hugging Face folder."""
    from conversion.convert_elmoformanylangs import convert_elmoformanylangs_to_hf

    root = tmp_path_factory.mktemp("converted-elmoformanylangs")
    return {name: convert_elmoformanylangs_to_hf(ELMOFORMANYLANGS / name, root / name, language="zh")
            for name in ELMOFORMANYLANGS_MODELS}


@pytest.fixture(scope="session")
def python_without_hf_elmo(tmp_path_factory) -> Path:
    """A separate virtual environment that sees this one's packages (transformers, torch, ...) but not hf_elmo.

    hf_elmo is installed in editable mode through a .pth hook; site-packages added by path do not run .pth
    files, so the hook, and with it hf_elmo, is absent there.
    """
    env = tmp_path_factory.mktemp("isolated") / "venv"
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    env_site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    Path(env_site, "packages_of_the_test_environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


def assert_one_error(code: int, err: str, *must_mention: str) -> None:
    """A command line's failure: exit code 2, no traceback, its last line `error: ...` mentioning each of
    `must_mention`."""
    message = err.strip().splitlines()[-1] if err.strip() else ""
    assert code == 2 and message.startswith("error: ") and "Traceback" not in err, err
    for text in must_mention:
        assert text in message, (text, message)


def assert_only_an_error_line(code: int, err: str, *must_mention: str) -> None:
    """`assert_one_error`, with nothing else on stderr: for commands run in this process, where no library prints
    (progress bars, warnings) before the error."""
    assert len(err.strip().splitlines()) == 1, err
    assert_one_error(code, err, *must_mention)


def run_two_processes(arguments: list, env: dict, timeout: float = 300, stdin_text: str | None = None,
                      accelerate_use_cpu: bool = True, preexec_fn=None) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc_per_node 2 ARGUMENTS` on CPU (gloo); `stdin_text`: written to its standard
    input, a pipe (by default it has the test's); `accelerate_use_cpu`: with ACCELERATE_USE_CPU=1, as the README's
    commands run (False: as a user who leaves it out); `preexec_fn`: run in the launcher before it starts (a limit it
    sets holds for the workers too).

    --standalone rendezvous on a free port, never the fixed 29500 that another job on the machine may hold. On a
    timeout the whole process group (the launcher and both workers) is killed and the test fails with the output,
    which holds where each worker's threads were (faulthandler's traceback on SIGABRT)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *map(str, arguments)]
    # torchrun's agent leaves a torchelastic_* folder in the temporary folder per run: give it one that goes.
    scratch = tempfile.TemporaryDirectory(prefix="hf-elmo-torchrun-")
    env = {**env, "PYTHONFAULTHANDLER": "1", "TMPDIR": scratch.name}
    env = {**env, "ACCELERATE_USE_CPU": "1"} if accelerate_use_cpu else {k: v for k, v in env.items()
                                                                        if k != "ACCELERATE_USE_CPU"}
    process = subprocess.Popen(command, env=env,
                               stdin=None if stdin_text is None else subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                               preexec_fn=preexec_fn)
    try:
        stdout, stderr = process.communicate(input=stdin_text, timeout=timeout)
    except subprocess.TimeoutExpired:
        # torchrun starts each worker in a session of its own: kill them by parentage, then the launcher's group.
        # First the launcher is stopped (it would end the other worker once one dies) and each worker in turn gets
        # SIGABRT, so that it writes its threads' tracebacks to the captured stderr, one after the other.
        os.kill(process.pid, signal.SIGSTOP)
        workers = _descendants(process.pid)
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGABRT)
            time.sleep(1)
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"two processes still running after {timeout} s:\n{stdout[-2000:]}\n{stderr[-12000:]}")
    finally:
        scratch.cleanup()
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc (Linux)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, pending = [], [pid]
    while pending:
        found.extend(below := children.get(pending.pop(), []))
        pending.extend(below)
    return found

# Stand-ins for modules of transformers' test tree, run from build/transformers-tests (see its README.md).
collect_ignore = ["transformers_supplement"]
