"""Convert original ELMo weights (options.json + weights.hdf5) to a Hugging Face checkpoint, and back.

    python conversion/convert_original_elmo.py --options-file OPTIONS.json --weight-file WEIGHTS.hdf5 \\
        --output-dir DIR [--language fr]
    python conversion/convert_original_elmo.py --to-original --model-dir DIR --output-dir ORIGINAL_DIR

The Hugging Face folder holds the config, safetensors weights, tokenizer files, a model card and the model
code with an `auto_map`, so it can be pushed to the Hub as it is. Before reporting success, the folder is
reloaded and must give exactly the outputs of the converted model. An output folder is written completely
or not at all.
"""

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AutoModel, AutoTokenizer

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from safetensors import safe_open  # noqa: E402

from hf_elmo import ElmoConfig, ElmoModel, ElmoTokenizer  # noqa: E402
from hf_elmo.files import check_output_location, give_plain_modes, input_inside, temporary_prefix  # noqa: E402
from hf_elmo.model_card import card_option_problem, check_language, check_license, render_model_card  # noqa: E402
from hf_elmo.modeling_elmo import BILM_WEIGHT  # noqa: E402

from conversion.original_format import (  # noqa: E402
    ConversionError,
    original_to_state_dict,
    read_original_weights,
    state_dict_to_original,
    write_original_weights,
)

# Sentences the saved folder is checked on: a boundary marker, punctuation, a long word, CJK and emoji.
PROBE_SENTENCES = [
    ["The", "U.S.", "Centers", "for", "Disease", "Control", "advised", "schools", "to", "close", "."],
    ["天", "气", "不", "错", "！", "🙂", "<S>", "Pneumonoultramicroscopicsilicovolcanoconiosis" * 2],
    ["I", "eat", "an", "apple", "."],
]


def check_output_dir(output_dir: str | os.PathLike, overwrite: bool, inputs: tuple = ()) -> None:
    """Before any work: `output_dir` can be written, and is empty or may be replaced; replacing it must not delete
    one of `inputs` (the files or folders converted), which --overwrite would do without a word."""
    check_output_location(output_dir, "folder", error=ConversionError)
    output_dir = Path(output_dir).absolute()
    if output_dir.is_dir() and any(output_dir.iterdir()):
        if not overwrite:
            raise ConversionError(
                f"{output_dir}: output folder exists and is not empty (pass --overwrite to replace it)"
            )
        source = input_inside(output_dir, inputs)
        if source is not None:
            raise ConversionError(f"{output_dir}: the output folder holds the input {source}, which replacing it "
                                  "would delete: write to another folder")


@contextlib.contextmanager
def atomic_output_dir(output_dir: str | os.PathLike, overwrite: bool, inputs: tuple = ()):
    """Yield a temporary folder beside `output_dir` that becomes `output_dir` only if the block succeeds."""
    check_output_dir(output_dir, overwrite, inputs)
    output_dir = Path(output_dir).resolve()
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=temporary_prefix(output_dir.name, "partial-"), dir=output_dir.parent))
    try:
        yield staging
        give_plain_modes(staging)
        if output_dir.exists():
            retired = Path(tempfile.mkdtemp(prefix=temporary_prefix(output_dir.name, "old-"), dir=output_dir.parent))
            os.replace(output_dir, retired / "old")
            os.replace(staging, output_dir)
            shutil.rmtree(retired)
        else:
            os.replace(staging, output_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def load_checkpoint(model_dir: str | os.PathLike) -> ElmoModel:
    """The `ElmoModel` of a Hugging Face checkpoint folder, or a ConversionError naming what is missing or broken."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ConversionError(f"{model_dir}: not found" if not model_dir.exists() else f"{model_dir}: is a file, not a checkpoint folder")
    config_file = model_dir / "config.json"
    if not config_file.is_file():
        raise ConversionError(f"{model_dir}: no config.json, not a Hugging Face checkpoint folder")
    try:
        # utf-8 as transformers reads it: a byte-order mark is refused here, naming the file, not by from_pretrained.
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConversionError(f"{config_file}: not a JSON config file ({error})") from None
    if not isinstance(config, dict):
        raise ConversionError(f"{config_file}: not a config file: it holds a JSON {type(config).__name__}, not an object")
    weights = model_dir / "model.safetensors"
    index = model_dir / "model.safetensors.index.json"
    if not (weights.is_file() or index.is_file()):
        raise ConversionError(f"{model_dir}: no model.safetensors, so there are no weights to convert")
    for shard in [weights.name] if weights.is_file() else sorted(set(_shard_names(index))):
        try:
            with safe_open(model_dir / shard, "pt") as tensors:  # reads the header, and checks the data fills the file
                _check_float32_holds(tensors, model_dir)
        except ConversionError:
            raise
        except Exception as error:  # safetensors' error type is not importable in every version
            raise ConversionError(f"{model_dir / shard}: not a readable safetensors file ({error})") from None
    try:
        config = ElmoConfig.from_pretrained(model_dir)
    except ValueError as error:
        raise ConversionError(f"{config_file}: {error}") from None
    # A missing or extra tensor of the biLM is an error below, not a load report; one line, not a progress bar.
    try:
        with quiet_transformers(errors_only=True):
            return ElmoModel.from_pretrained(model_dir, config=config)
    except ValueError as error:  # a tensor of the biLM missing or extra, named
        raise ConversionError(str(error) if str(error).startswith(str(model_dir)) else f"{model_dir}: {error}") from None
    except (OSError, RuntimeError) as error:
        raise ConversionError(f"{model_dir}: cannot load the checkpoint ({str(error).strip().splitlines()[0]})") from None


def _check_float32_holds(tensors, model_dir: Path) -> None:
    """The original formats are float32: a float64 weight of the biLM whose values float32 would round is refused,
    naming it. Read from the file, as loading casts every tensor to the dtype of config.json (float32 for a model
    with one float64 layer). (Non-finite values are the finite check's: `check_weights_to_write`.)"""
    for name in tensors.keys():
        if BILM_WEIGHT.match(name) and tensors.get_slice(name).get_dtype() == "F64":
            values = tensors.get_tensor(name)
            values = values[torch.isfinite(values)]
            if not torch.equal(values.to(torch.float32).to(torch.float64), values):
                raise ConversionError(f"{model_dir}: tensor {name.removeprefix('elmo.')} "
                                      "is float64, with values that float32 (the original format's) would round")


@contextlib.contextmanager
def quiet_transformers(errors_only: bool = False):
    """transformers without its progress bars (and, with `errors_only`, its warnings) inside the block, as it was
    after: what a converter prints is its one line of success or `error: ...`, not the bars of the saving and
    reloading that come before it."""
    verbosity, progress_bars = transformers.logging.get_verbosity(), transformers.logging.is_progress_bar_enabled()
    transformers.logging.disable_progress_bar()
    if errors_only:
        transformers.logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(verbosity)
        if progress_bars:
            transformers.logging.enable_progress_bar()


def check_weights_to_write(model: ElmoModel, model_dir: str | os.PathLike) -> None:
    """Every weight a way back writes is finite: the original formats are read with NaN and infinity refused (the
    read-back of the files written would refuse them naming the staging folder, which is gone by then). That float32
    holds each exactly was checked in the file, by `load_checkpoint`."""
    for name, tensor in model.state_dict().items():
        if name.startswith("scalar_mixes."):
            continue
        if not torch.isfinite(tensor).all():
            count = tensor.numel() - int(torch.isfinite(tensor).sum())
            plural = "s" if count > 1 else ""
            raise ConversionError(f"{model_dir}: tensor {name} holds {count} non-finite value{plural} (NaN or infinity)")


def _shard_names(index: Path) -> list[str]:
    """The files that the index's weight_map names: each a file name beside it."""
    try:
        names = list(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as error:
        raise ConversionError(f"{index}: not a safetensors index ({error})") from None
    for name in names:
        if not (isinstance(name, str) and name and Path(name).name == name):
            raise ConversionError(f"{index}: not a safetensors index (its weight_map names {name!r}, not a file name)")
    return names


def _probe_outputs(model: ElmoModel, tokenizer: ElmoTokenizer) -> list[torch.Tensor]:
    batch = tokenizer(PROBE_SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    # With autograd on, the model runs its plain computation (the definition): the inference fast path's
    # multiplies may round differently for weights at another memory alignment, as memory-mapped ones are.
    with torch.enable_grad():
        output = model(**batch)
    return [t.detach() for t in list(output.hidden_states) + list(output.elmo_representations)]


def _verify_reload(folder: Path, model: ElmoModel, tokenizer: ElmoTokenizer, reloaded_tokenizer: ElmoTokenizer,
                   output_dir: str | os.PathLike) -> None:
    """The saved folder must load through the Auto classes (`reloaded_tokenizer` is its tokenizer, loaded with
    AutoTokenizer) and reproduce `model` exactly. The errors name `output_dir`, the folder that `folder` (its staging
    folder, removed when the conversion fails) was to become."""
    try:
        reloaded = AutoModel.from_pretrained(folder).eval()
        probed = _probe_outputs(reloaded, reloaded_tokenizer)
    except (ValueError, OSError, RuntimeError) as error:  # (what loading or running it raised names `folder`)
        raise ConversionError(f"{output_dir}: the saved folder does not reload: "
                              f"{str(error).replace(str(folder), str(output_dir))}") from None
    expected_state, found_state = model.state_dict(), reloaded.state_dict()
    if expected_state.keys() != found_state.keys():
        raise ConversionError(f"{output_dir}: reloaded weights differ in names from the converted ones")
    for name, tensor in expected_state.items():
        if not torch.equal(tensor, found_state[name]):
            raise ConversionError(f"{output_dir}: reloaded weight {name} differs from the converted one")
    for layer, (expected, found) in enumerate(zip(_probe_outputs(model, tokenizer), probed)):
        if not torch.equal(expected, found):
            difference = (expected - found).abs().max().item()
            raise ConversionError(f"{output_dir}: reloaded model differs at output {layer} by {difference:.3g}")


def convert_original_to_hf(
    options_file: str | os.PathLike,
    weight_file: str | os.PathLike,
    output_dir: str | os.PathLike,
    model_id: str | None = None,
    overwrite: bool = False,
    language: str | list[str] = "en",
    license: str | None = None,
) -> Path:
    """Write a complete, verified Hugging Face checkpoint of an original ELMo model to `output_dir`; `language` and
    `license` (the card's: the released models are English; a Hub license id, or None for none) are checked before
    anything else."""
    check_language(language)
    check_license(license)
    inputs = (options_file, weight_file)
    check_output_dir(output_dir, overwrite, inputs)
    config = ElmoConfig.from_original_options(options_file)
    state = original_to_state_dict(read_original_weights(weight_file, config), config)
    model = ElmoModel(config)
    model.load_state_dict(state, strict=True)
    model.eval()
    tokenizer = ElmoTokenizer(max_characters_per_token=config.max_characters_per_token)
    model_id = model_id or Path(output_dir).resolve().name
    card = render_model_card(
        model, model_id, source=f"converted from `{Path(options_file).name}` and `{Path(weight_file).name}`",
        language=language, license=license,
    )
    with atomic_output_dir(output_dir, overwrite, inputs) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / "README.md").write_text(card, encoding="utf-8")
        _verify_reload(staging, model, tokenizer, AutoTokenizer.from_pretrained(staging), output_dir)
    return Path(output_dir)


def convert_hf_to_original(
    model_dir: str | os.PathLike, output_dir: str | os.PathLike, overwrite: bool = False
) -> Path:
    """Write `options.json` and `weights.hdf5` (bilm-tf's format, read by AllenNLP) for a checkpoint."""
    check_output_dir(output_dir, overwrite, (model_dir,))
    model = load_checkpoint(model_dir)
    check_weights_to_write(model, model_dir)
    config = model.config
    arrays = state_dict_to_original(model.state_dict(), config)
    with atomic_output_dir(output_dir, overwrite, (model_dir,)) as staging:
        try:
            (staging / "options.json").write_text(json.dumps(config.to_original_options(), indent=2), encoding="utf-8")
            write_original_weights(arrays, staging / "weights.hdf5")
        except OSError as error:  # (a full disk: named in the output folder, as the staging folder goes)
            raise ConversionError(f"{output_dir}: the files could not be written ({error.strerror or error}); nothing "
                                  "was written") from None
        reread = read_original_weights(staging / "weights.hdf5", ElmoConfig.from_original_options(staging / "options.json"))
        for name, value in arrays.items():
            if not np.array_equal(value, reread[name]):
                # (named in the output folder: the staging folder is gone when the user reads this)
                raise ConversionError(
                    f"{Path(output_dir) / 'weights.hdf5'}: dataset {name} did not read back identically"
                )
    return Path(output_dir)


def refuse_card_options(parser: argparse.ArgumentParser, args: argparse.Namespace, forward: str, way_back: str):
    """A way back writes no card: the card's options given with it are a usage error (they would do nothing)."""
    for option in ("model_id", "language", "license"):
        if getattr(args, option) is not None:
            parser.error(f"--{option.replace('_', '-')} is the card's, which only {forward} writes (not {way_back})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--options-file", help="original options.json")
    parser.add_argument("--weight-file", help="original weights.hdf5")
    parser.add_argument("--output-dir", required=True, help="folder to write (must not exist or be empty)")
    parser.add_argument("--model-id", help="the Hub id (NAME or NAMESPACE/NAME) that the model card's code loads "
                        "(default: the output folder's name)")
    parser.add_argument("--language", help="the model's language for the card, an ISO 639 code such as en or fr "
                        "(default: en, the language of the released models)")
    parser.add_argument("--license", help="the weights' license for the card, a Hub license id such as apache-2.0 "
                        "or mit (default: none)")
    parser.add_argument("--to-original", action="store_true", help="convert a Hugging Face checkpoint back")
    parser.add_argument("--model-dir", help="with --to-original: the Hugging Face checkpoint folder")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    args = parser.parse_args(argv)
    if args.to_original and not args.model_dir:
        parser.error("--to-original needs --model-dir")
    if args.to_original and (args.options_file or args.weight_file):
        parser.error("--options-file and --weight-file are what converting original weights reads; --to-original "
                     "writes them from --model-dir")
    if not args.to_original and not (args.options_file and args.weight_file):
        parser.error("converting original weights needs --options-file and --weight-file")
    if not args.to_original and args.model_dir:
        parser.error("--model-dir is what --to-original reads; converting original weights reads --options-file and "
                     "--weight-file")
    if args.to_original:
        refuse_card_options(parser, args, "converting original weights", "--to-original")
    if args.language is None:  # (an empty --language is refused below, not read as the default)
        args.language = "en"
    try:
        if problem := card_option_problem(args.language, args.license, args.model_id):
            raise ConversionError(problem)
        with quiet_transformers():
            if args.to_original:
                convert_hf_to_original(args.model_dir, args.output_dir, overwrite=args.overwrite)
                print(f"wrote options.json and weights.hdf5 to {args.output_dir}")
            else:
                convert_original_to_hf(args.options_file, args.weight_file, args.output_dir, model_id=args.model_id,
                                       overwrite=args.overwrite, language=args.language, license=args.license)
                print(f"wrote and verified a Hugging Face checkpoint in {args.output_dir}")
    except (ValueError, OSError) as error:  # ConversionError, the config's own checks, a full disk
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
