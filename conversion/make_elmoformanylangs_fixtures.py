"""Make small ELMoForManyLangs models with the package's own code, and record its outputs as reference values.

Runs in the peer venv that ../shared/tools/peer-elmoformanylangs-setup.sh builds (never in the project's):

    build/elmoformanylangs-venv/bin/python conversion/make_elmoformanylangs_fixtures.py tests/fixtures/elmoformanylangs
    build/elmoformanylangs-venv/bin/python conversion/make_elmoformanylangs_fixtures.py --published-size build/bench-manylangs
    build/elmoformanylangs-venv/bin/python conversion/make_elmoformanylangs_fixtures.py EXPORTED_DIR --check-against \\
        tests/fixtures/elmoformanylangs/with_words_outputs.npz

Each model is made the way the package makes one: `biLM.py train` builds the character and word lexicons from a
training text and writes char.dic, word.dic and config.json (run with `--max_epoch 0`: its training loop does not
run on torch 2), then the `Model` it built gets its weights perturbed, so that every parameter matters (non-zero
`<pad>` rows, highway gates away from their start, LSTM cells that reach the clip), and `Model.save_model` writes
token_embedder.pkl and encoder.pkl. The reference outputs are `Embedder.sents2elmo` on that folder: every
layer (`output_layer=-2`) and their average (`output_layer=-1`), each call after `reset_states()` and with all
sentences of a set in one batch; and two calls in a row without a reset, for the carried state.

The tiny models (a few KB each) and their outputs are committed under tests/fixtures/elmoformanylangs, so
`make test` needs nothing else; `--published-size` makes one model of the released models' size with random
weights (2 x 4096 cells, 512 projection, 2048 filters, 100-dimensional words) for `make bench`; `--check-against`
loads a folder that `convert_elmoformanylangs.py --to-elmoformanylangs` wrote and compares the package's outputs
on it with its outputs on the model they were recorded from, which must be the same to the last bit, and those with
the recorded ones, within 2e-5: another CPU rounds the package's float32 sums otherwise (`make
check-elmoformanylangs`).

OUTPUT is replaced whole, so a folder with files in it is refused unless this script made it (the README.md it
writes into each folder says so). The arguments are checked before any work, in any venv; the work needs the package.
"""

import argparse
import contextlib
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

try:  # (the arguments are checked without it, so that a mistake in them is said in any venv)
    from elmoformanylangs import Embedder, biLM
except ImportError as error:
    Embedder = biLM = None
    PACKAGE_MISSING = f"{type(error).__name__}: {error}"

# Training text for the lexicons: Chinese (segmented, and one character per word) and English. char.dic holds
# every character of it (and those of "<bos>" and "<eos>", which the package reads as words of the text).
TRAINING_TEXT = """\
天气 不错 ！ 小天 你 说 是 吗 ？
今天 天气 很 好 ， 我们 去 公园 吧 。
天 气 不 错 ！ 小 天 你 说 是 吗 ？
明天 会 下雨 吗 ？
The weather is nice today , is n't it ?
I eat an apple every day .
Apple is a company in California .
"""

# The architecture file of the tiny models, in the format of the package's configs/cnn_50_100_512_4096_sample.json.
TINY_ARCHITECTURE = {
    "encoder": {"name": "elmo", "projection_dim": 8, "cell_clip": 3, "proj_clip": 3, "dim": 24, "n_layers": 2},
    "token_embedder": {
        "name": "cnn", "activation": "relu", "filters": [[1, 4], [2, 8], [3, 16]], "n_highway": 2,
        "word_dim": 6, "char_dim": 5, "max_characters_per_token": 50,
    },
    "classifier": {"name": "sampled_softmax", "n_samples": 8192},
    "dropout": 0.1,
}
# The released models' architecture (the package's configs/cnn_50_100_512_4096_sample.json).
PUBLISHED_ARCHITECTURE = {
    "encoder": {"name": "elmo", "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096, "n_layers": 2},
    "token_embedder": {
        "name": "cnn", "activation": "relu",
        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]], "n_highway": 2,
        "word_dim": 100, "char_dim": 50, "max_characters_per_token": 50,
    },
    "classifier": {"name": "sampled_softmax", "n_samples": 8192},
    "dropout": 0.1,
}

LONG_WORD = "Pneumonoultramicroscopicsilicovolcanoconiosis" * 2  # 90 characters: cut to 48
SENTENCE_SETS = {
    # 天气不错！小天你说是吗？ as the package's users segment it, and one character per word.
    "chinese": [
        ["天气不错", "！", "小天", "你", "说", "是", "吗", "？"],
        list("天气不错！小天你说是吗？"),
        ["天气", "不错", "！", "小天", "你", "说", "是", "吗", "？"],
    ],
    "english": [
        ["The", "weather", "is", "nice", "today", ",", "is", "n't", "it", "?"],
        ["I", "eat", "an", "apple", "."],
        ["Apple", "is", "a", "company", "in", "California", "."],
    ],
    # Characters and words that are in neither dictionary (a character outside the BMP among them).
    "unknown": [
        ["Ωμέγα", "☃", "🙂", "𝔘nicode", "qzx"],
        ["天", "Ж", "气", "é", "unknownword"],
    ],
    # Longer than max_characters_per_token - 2 = 48 characters, exactly 48, and 49.
    "long_words": [
        [LONG_WORD, "is", "long", "."],
        ["天" * 60, "a" * 48, "b" * 49],
    ],
    # The text itself holds the boundary words.
    "boundaries": [
        ["我", "<bos>", "你", "<eos>", "好"],
        ["<bos>"],
        ["<eos>", "<bos>"],
    ],
}
# Two calls in a row without a reset: the second starts from the state the first left, row by row (the rows
# are the sentences sorted by length, longest first, as the package batches them).
STATEFUL_CALLS = [SENTENCE_SETS["english"], SENTENCE_SETS["chinese"]]


_BUILT = []  # the Models that biLM.train built


def _recording_model(*args, **kwargs) -> "biLM.Model":
    """biLM's own Model, remembered when `biLM.train` builds it, so that its weights can be set and saved.

    Model.__init__ calls `super(Model, self)` through the module's name, so the name is the class while it runs."""
    biLM.Model = _PACKAGE_MODEL
    try:
        _BUILT.append(_PACKAGE_MODEL(*args, **kwargs))
    finally:
        biLM.Model = _recording_model
    return _BUILT[-1]


_PACKAGE_MODEL = biLM.Model if biLM is not None else None


def build_with_package(folder: Path, architecture: dict, training_text: str) -> "biLM.Model":
    """Run `biLM.py train --max_epoch 0` in `folder`: lexicons, config.json and the built (unsaved) Model."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "architecture.json").write_text(json.dumps(architecture, indent=2), encoding="utf-8")
    (folder / "train.txt").write_text(training_text, encoding="utf-8")
    _BUILT.clear()
    saved_argv, saved_cwd = sys.argv, os.getcwd()
    # Paths relative to the model folder, so that config.json names the architecture file as a published one does.
    sys.argv = ["biLM.py", "train", "--train_path", "train.txt", "--config_path", "architecture.json",
                "--model", ".", "--max_epoch", "0", "--min_count", "1", "--seed", "1"]
    try:
        os.chdir(folder)
        biLM.Model = _recording_model
        with contextlib.redirect_stdout(sys.stderr):
            biLM.train()
    finally:
        sys.argv, biLM.Model = saved_argv, _PACKAGE_MODEL
        os.chdir(saved_cwd)
    (folder / "train.txt").unlink()
    return _BUILT[-1]


def perturb(model: "biLM.Model", seed: int) -> None:
    """Weights away from the package's initialisation, so that every parameter changes the outputs."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.startswith("classify_layer"):
                continue  # not saved: Model.save_model(..., save_classify_layer=False)
            fan_in = parameter.shape[-1] if parameter.dim() > 1 else 1
            scale = 1.0 if "embedding" in name else (0.5 if parameter.dim() == 1 else 1.5 / fan_in**0.5)
            parameter.add_(scale * torch.randn(parameter.shape, generator=generator))
        for layer in model.encoder.forward_layers + model.encoder.backward_layers:
            cell = layer.cell_size
            layer.state_linearity.bias[cell : 2 * cell] += 1.5  # forget gates mostly open: cells reach the clip


def make_model(folder: Path, architecture: dict, training_text: str, seed: int) -> None:
    model = build_with_package(folder, architecture, training_text)
    perturb(model, seed)
    model.save_model(str(folder), False)


def embed(embedder: Embedder, sentences, output_layer: int, reset: bool = True) -> list[np.ndarray]:
    if reset:
        embedder.model.encoder.reset_states()
    return [np.asarray(array, dtype=np.float32) for array in embedder.sents2elmo(sentences, output_layer=output_layer)]


def record_outputs(folder: Path) -> dict[str, np.ndarray]:
    """`sents2elmo` of every sentence set: `{set}/{i}/all` [3, words, 2P], `{set}/{i}/average` [words, 2P], and
    `stateful/{call}/{i}/all` for the two calls without a reset in between."""
    embedder = Embedder(str(folder), batch_size=64)
    arrays = {}
    for name, sentences in SENTENCE_SETS.items():
        for kind, layer in (("all", -2), ("average", -1)):
            for i, array in enumerate(embed(embedder, sentences, layer)):
                arrays[f"{name}/{i}/{kind}"] = array
    embedder.model.encoder.reset_states()
    for call, sentences in enumerate(STATEFUL_CALLS):
        for i, array in enumerate(embed(embedder, sentences, -2, reset=False)):
            arrays[f"stateful/{call}/{i}/all"] = array
    return arrays


# The first words of the README.md that the script writes into each folder it makes, by which it knows them.
MADE_BY = "Made by `conversion/make_elmoformanylangs_fixtures.py"


def write_readme(folder: Path, what: str, options: str = "") -> None:
    """The folder's README.md: that this script made it (`options`: how it was run), and `what` it holds."""
    (folder / "README.md").write_text(
        f"{MADE_BY}{options}` with elmoformanylangs 0.0.4.post2 (torch {torch.__version__}): {what}\n", encoding="utf-8")


def made_here(folder: Path) -> bool:
    """Whether `folder` is one that this script made, which it may replace: its README.md says so."""
    try:
        return (folder / "README.md").read_text(encoding="utf-8").startswith(MADE_BY)
    except (OSError, ValueError):  # (none there, or unreadable)
        return False


class ArgumentError(ValueError):
    """Arguments that cannot be used; the message names the option or file."""


def check_arguments(args) -> str | None:
    """Before any work (and before elmoformanylangs is needed): what makes the arguments unusable raises an
    ArgumentError; returns --training-text's text, where given."""
    if args.training_text is not None and not args.published_size:
        raise ArgumentError("--training-text is read only with --published-size: add --published-size, or drop "
                            "--training-text")
    if args.source is not None and not args.check_against:
        raise ArgumentError("--source is read only with --check-against: add --check-against, or drop --source")
    if args.check_against:
        if args.published_size:
            raise ArgumentError("--published-size writes a model, --check-against checks one: give one of them")
        if not Path(args.check_against).is_file():
            raise ArgumentError(f"--check-against {args.check_against}: no such file (a .npz of recorded outputs)")
        if args.source is None and not default_source(Path(args.check_against)).is_dir():
            raise ArgumentError(f"--check-against {args.check_against}: no model folder beside it that it was "
                                f"recorded from ({default_source(Path(args.check_against))}); give it with --source")
        for what, folder, role in (("OUTPUT", args.output, "to check"), ("--source", args.source, "recorded from")):
            if folder is not None and not Path(folder).is_dir():
                raise ArgumentError(f"{what} {folder}: no such folder (the model in the package's format {role})")
        return None
    # (hf_elmo.files has these checks, but the peer venv that runs this script has no transformers or huggingface_hub
    # to import hf_elmo with)
    output = Path(args.output).resolve()
    if output.exists() and not output.is_dir():
        raise ArgumentError(f"OUTPUT {output}: is a file, not a folder")
    folder = output.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise ArgumentError(f"OUTPUT {output}: {folder} is a file, so the folder cannot be written there")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ArgumentError(f"OUTPUT {output}: cannot write in {folder}")
    if output.is_dir() and any(output.iterdir()) and not made_here(output):
        raise ArgumentError(f"OUTPUT {output}: a folder with other files in it, which writing would replace whole "
                            "(it is none that this script made: its README.md would say so); give a new or empty folder")
    if args.training_text is None:
        return None
    try:
        return Path(args.training_text).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ArgumentError(f"--training-text {args.training_text}: no such file") from None
    except IsADirectoryError:
        raise ArgumentError(f"--training-text {args.training_text}: is a folder, not a file") from None
    except UnicodeDecodeError as error:
        raise ArgumentError(f"--training-text {args.training_text}: is not UTF-8 text ({error.reason} at byte "
                            f"{error.start})") from None
    except OSError as error:
        raise ArgumentError(f"--training-text {args.training_text}: cannot be read ({error.strerror})") from None


@contextlib.contextmanager
def _written_atomically(output: Path):
    """A staging folder beside `output` that replaces it only if the block succeeds; removed either way. (`output`
    is replaced whole: `check_arguments` refuses one that this script did not make.)"""
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.partial-", dir=output.parent))
    staging.chmod(0o755)
    try:
        yield staging
        if output.exists():
            shutil.rmtree(output)
        os.replace(staging, output)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def make_fixtures(output: Path) -> None:
    with _written_atomically(output) as staging:
        words = TINY_ARCHITECTURE["token_embedder"]["word_dim"]
        # (wide_projection: cells narrower than their projection, which the package's cell projects up to 8)
        for name, word_dim, cell, seed in (("with_words", words, 24, 1), ("chars_only", 0, 24, 2),
                                           ("wide_projection", 0, 6, 3)):
            architecture = json.loads(json.dumps(TINY_ARCHITECTURE))
            architecture["token_embedder"]["word_dim"] = word_dim
            architecture["encoder"]["dim"] = cell
            make_model(staging / name, architecture, TRAINING_TEXT, seed)
            np.savez_compressed(staging / f"{name}_outputs.npz", **record_outputs(staging / name))
        (staging / "sentences.json").write_text(
            json.dumps({"sets": SENTENCE_SETS, "stateful_calls": STATEFUL_CALLS}, ensure_ascii=False, indent=1),
            encoding="utf-8",
        )
        write_readme(staging, "three tiny models in the package's format (`with_words`: word and character input; "
                     "`chars_only`: characters only; `wide_projection`: characters only, 6-wide cells projected to 8) "
                     "and `Embedder.sents2elmo`'s outputs on `sentences.json`.")


def make_published_size(output: Path, training_text: str) -> None:
    """A model of the released models' size, random weights; its lexicons from `training_text`."""
    with _written_atomically(output) as staging:
        model = build_with_package(staging, PUBLISHED_ARCHITECTURE, training_text)
        model.save_model(str(staging), False)  # the package's own initialisation
        write_readme(staging, "a model of the released models' size in the package's format, the package's random "
                     "initial weights, its lexicons from a training text.", " --published-size")


# How far the package's outputs on the model a .npz was recorded from may be from the recorded ones: another CPU's
# kernels round its float32 sums otherwise (2.9e-6 and 3.8e-6 seen on the tiny models), as the tests allow hf_elmo 2e-5.
RECORDED_TOLERANCE = 2e-5


def _largest_difference(found: dict[str, np.ndarray], expected, what: str) -> float:
    if sorted(found) != sorted(expected):
        raise SystemExit(f"{what}: outputs {sorted(found)} differ in names from {sorted(expected)}")
    return max(float(np.abs(found[name] - expected[name]).max(initial=0.0)) for name in found)


def default_source(expected_file: Path) -> Path:
    """The model that make_fixtures recorded `expected_file` from: the folder beside it that it is named after."""
    return expected_file.parent / expected_file.name.removesuffix("_outputs.npz")


def check_export(folder: Path, expected_file: Path, source: Path | None = None) -> tuple[float, float]:
    """The package loads `folder` (a model converted back by convert_elmoformanylangs.py --to-elmoformanylangs) and
    `source`, the model `expected_file` was recorded from (by default the folder beside it that make_fixtures names
    it after: with_words for with_words_outputs.npz). Returns the largest difference between their outputs, which
    must be 0 (the same tensors and dictionaries give the same numbers on this machine), and the largest between
    `source`'s and the recorded ones, which may be up to RECORDED_TOLERANCE (those of the machine that recorded
    them)."""
    expected = np.load(expected_file)
    if source is None:
        source = default_source(expected_file)
    outputs = []
    for model in (folder, source):
        random.seed(0)  # (sents2elmo shuffles its batches)
        outputs.append(record_outputs(model))
    exported, original = outputs
    recorded = {name: expected[name] for name in expected.files}
    return (_largest_difference(exported, original, f"{folder} against {source}"),
            _largest_difference(original, recorded, f"{source} against {expected_file}"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output", help="folder to write (replaced whole: a folder with files in it only where this "
                        "script made it, as its README.md says); with --check-against: the folder to check")
    parser.add_argument("--published-size", action="store_true", help="one model of the released size, for the benchmark")
    parser.add_argument("--training-text", help="with --published-size: text whose characters and words make the lexicons")
    parser.add_argument("--check-against", help="load OUTPUT with the package and compare its outputs with those of "
                        "the model this .npz was recorded from (exactly) and with the .npz (within 2e-5)")
    parser.add_argument("--source", help="with --check-against: the model the .npz was recorded from (default: the "
                        "folder beside it, with_words for with_words_outputs.npz)")
    args = parser.parse_args(argv)
    if not args.output:  # (Path("") is the current folder, which the fixtures would replace)
        parser.error("OUTPUT is empty: give the folder to write")
    try:
        text = check_arguments(args)
        if biLM is None:
            raise ArgumentError(f"elmoformanylangs does not import in this Python ({PACKAGE_MISSING}): run the script "
                                "with the peer venv's, build/elmoformanylangs-venv/bin/python (made by "
                                "../shared/tools/peer-elmoformanylangs-setup.sh)")
    except ArgumentError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    random.seed(0)
    torch.set_num_threads(1)
    if args.check_against:
        source = Path(args.source) if args.source else None
        exported, recorded = check_export(Path(args.output), Path(args.check_against), source)
        print(f"{args.output}: the package's outputs differ from those of the source model by at most {exported:.3g} "
              f"(must be 0), and the source's from {args.check_against} by at most {recorded:.3g} (must be at most "
              f"{RECORDED_TOLERANCE:g})")
        return 0 if exported == 0.0 and recorded <= RECORDED_TOLERANCE else 1
    output = Path(args.output).resolve()
    output.parent.mkdir(parents=True, exist_ok=True)
    if args.published_size:
        make_published_size(output, TRAINING_TEXT if text is None else text)
    else:
        make_fixtures(output)
    print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
