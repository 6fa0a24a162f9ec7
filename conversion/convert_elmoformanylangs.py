"""Convert an ELMoForManyLangs model (HIT-SCIR's 44 languages, PyPI `elmoformanylangs`) to a Hugging Face
checkpoint, and back.

    python conversion/convert_elmoformanylangs.py --model-dir zhs.model --output-dir elmo-zhs --language zh
    python conversion/convert_elmoformanylangs.py --to-elmoformanylangs --model-dir elmo-zhs --output-dir zhs.back

MODEL_DIR is a folder as the package's releases unpack: config.json, char.dic, word.dic, token_embedder.pkl and
encoder.pkl (the architecture json that config.json names may be there, or be the package's own
cnn_50_100_512_4096_sample.json, which every released model uses). The Hugging Face folder holds the config,
safetensors weights, the tokenizer with char.dic and word.dic, a model card and the model code with an `auto_map`,
so it can be pushed to the Hub as it is; it loads through the same classes as every other ELMo. Before reporting
success, the folder is reloaded: its tokenizer's char.dic and word.dic must read back as the source's, entry for
entry, and it must give exactly the weights and outputs of the converted model. An output folder is
written completely or not at all; the way back writes the package's files, every tensor and dictionary as they were.
"""

import argparse
import json
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hf_elmo import ElmoModel, ElmoTokenizer  # noqa: E402
from hf_elmo.lexicon import LexiconError, read_dictionary  # noqa: E402
from hf_elmo.model_card import card_option_problem, check_language, check_license, render_model_card  # noqa: E402

from conversion.convert_original_elmo import (  # noqa: E402
    _verify_reload, atomic_output_dir, check_weights_to_write, check_output_dir, load_checkpoint, quiet_transformers,
    refuse_card_options)
from conversion.elmoformanylangs_format import (  # noqa: E402
    WEIGHT_FILES,
    architecture_from_config,
    architecture_options,
    check_convertible,
    config_from_options,
    package_to_state_dict,
    read_architecture,
    read_tokenizer,
    read_weights,
    state_dict_to_package,
)
from conversion.original_format import ConversionError  # noqa: E402

ARCHITECTURE_FILE = "architecture.json"


def _verify_dictionaries(reloaded_tokenizer: ElmoTokenizer, model_dir: Path, output_dir: str | Path) -> None:
    """The saved tokenizer, `reloaded_tokenizer` (loaded from the staging folder with AutoTokenizer), must spell with
    the source's char.dic and word.dic, entry for entry: the probe sentences of `_verify_reload` meet only a few of
    their entries. The error names `output_dir`, the folder that the staging folder (removed when the conversion
    fails) was to become."""
    lexicon = getattr(reloaded_tokenizer, "lexicon", None)
    saved = {"char.dic": None if lexicon is None else lexicon.chars,
             "word.dic": None if lexicon is None else lexicon.words}
    for name, found in saved.items():
        source = model_dir / name
        expected = read_dictionary(source) if source.is_file() else None
        if found == expected:
            continue
        if found is None:
            difference = "the saved tokenizer has none"
        elif expected is None:
            difference = "the saved tokenizer has one, the source none"
        else:
            token = next(t for t in [*expected, *found] if expected.get(t) != found.get(t))
            ids = (f"id {entries[token]}" if token in entries else "no entry" for entries in (found, expected))
            difference = "{!r}: {} saved, {} in the source".format(token, *ids)
        raise ConversionError(f"{output_dir}: the saved tokenizer's {name} did not read back as {source} "
                              f"({difference})")


def convert_elmoformanylangs_to_hf(
    model_dir: str | Path,
    output_dir: str | Path,
    model_id: str | None = None,
    language: str = "und",
    overwrite: bool = False,
    license: str | None = None,
) -> Path:
    """Write a complete, verified Hugging Face checkpoint of an ELMoForManyLangs model to `output_dir`; `language`
    and `license` (the card's; a Hub license id, or None for none) are checked before anything else."""
    check_language(language)
    check_license(license)
    check_output_dir(output_dir, overwrite, (model_dir,))  # before the weights are read, as for the original format
    model_dir = Path(model_dir)
    architecture, source = read_architecture(model_dir)
    options = architecture_options(architecture, source)
    tokenizer = read_tokenizer(model_dir, options)  # (its dictionaries checked, their ids 0 .. N - 1 among them)
    config = config_from_options(options, tokenizer, source)
    state = package_to_state_dict(read_weights(model_dir, config, len(tokenizer.lexicon.chars)), config)
    model = ElmoModel(config)
    model.load_state_dict(state, strict=True)
    model.eval()
    model_id = model_id or Path(output_dir).resolve().name
    card = render_model_card(
        model, model_id, language=language, license=license,
        source=f"converted from the ELMoForManyLangs model `{model_dir.resolve().name}` ({', '.join(WEIGHT_FILES)})",
    )
    with atomic_output_dir(output_dir, overwrite, (model_dir,)) as staging:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / "README.md").write_text(card, encoding="utf-8")
        reloaded_tokenizer = AutoTokenizer.from_pretrained(staging)
        _verify_dictionaries(reloaded_tokenizer, model_dir, output_dir)
        _verify_reload(staging, model, tokenizer, reloaded_tokenizer, output_dir)
    return Path(output_dir)


def convert_hf_to_elmoformanylangs(model_dir: str | Path, output_dir: str | Path, overwrite: bool = False) -> Path:
    """Write the package's files (config.json, architecture.json, char.dic, word.dic, token_embedder.pkl,
    encoder.pkl) for a checkpoint folder (local) with a character vocabulary; `Embedder(output_dir)` loads them."""
    check_output_dir(output_dir, overwrite, (model_dir,))
    model = load_checkpoint(model_dir)
    config = model.config
    check_convertible(config)
    check_weights_to_write(model, model_dir)
    # A folder saved before the tokenizer recorded its alphabet would load without char.dic as a byte tokenizer.
    for name in ("char.dic", "word.dic") if config.word_vocab_size else ("char.dic",):
        if not (path := Path(model_dir, name)).is_file():
            problem = "is a folder, not a dictionary file" if path.is_dir() else "not found"
            raise ConversionError(f"{path}: {problem}; the model's tokenizer reads it")
    for name in ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json"):
        if (path := Path(model_dir, name)).is_file():  # transformers' json error names no file
            _read_json_file(path)
    try:  # (the lexicon checks its dictionaries, their ids 0 .. N - 1 among them, as on the way in)
        tokenizer = ElmoTokenizer.from_pretrained(model_dir)
    except LexiconError as error:
        raise ConversionError(str(error)) from None
    _check_lexicon_matches(tokenizer.lexicon, config, Path(model_dir))
    tensors = state_dict_to_package(model.state_dict(), config)
    output_dir = Path(output_dir)
    with atomic_output_dir(output_dir, overwrite, (model_dir,)) as staging:
        (staging / "config.json").write_text(json.dumps({"config_path": ARCHITECTURE_FILE}), encoding="utf-8")
        architecture = architecture_from_config(config)
        (staging / ARCHITECTURE_FILE).write_text(json.dumps(architecture, indent=2), encoding="utf-8")
        tokenizer.lexicon.save(staging / "char.dic", staging / "word.dic")
        for file_name, state in tensors.items():
            torch.save(state, staging / file_name)
        # Read back the way the conversion reads a model: the same dictionaries, tensors and config. The messages
        # name the output folder, where the user looks (the staging folder is gone by then).
        if read_dictionary(staging / "char.dic") != tokenizer.lexicon.chars or (
            tokenizer.lexicon.words is not None and read_dictionary(staging / "word.dic") != tokenizer.lexicon.words
        ):
            raise ConversionError(f"{output_dir}: the dictionaries did not read back identically")
        reread = read_weights(staging, config, len(tokenizer.lexicon.chars))
        for file_name, state in tensors.items():
            for name, tensor in state.items():
                if not torch.equal(tensor, reread[file_name][name]):
                    raise ConversionError(f"{output_dir / file_name}: tensor {name} did not read back identically")
    return output_dir


def _read_json_file(path: Path) -> None:
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConversionError(f"{path}: not a JSON file ({error})") from None


def _check_lexicon_matches(lexicon, config, model_dir: Path) -> None:
    """The package builds its embeddings from char.dic and word.dic, one row per entry, and spells with their ids:
    they must be the model's (its config's sizes and special ids), or the folder written would not load in the
    package, or would not read the model as hf_elmo does."""
    # (their ids were checked to be dense before the tokenizer was built)
    if mismatch := lexicon.config_mismatch(config):
        source, field, value = mismatch
        raise ConversionError(f"{model_dir / source}: its entries give {field} {value}, but {model_dir / 'config.json'} "
                              f"says {getattr(config, field)}: the dictionary is not the model's")


def _read_elmo_config(config_file: Path) -> dict | None:
    """A Hugging Face ELMo checkpoint's config.json as a dict; None for anything else (no file, not JSON, no ELMo)."""
    try:
        saved = json.loads(config_file.read_text(encoding="utf-8"))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, json.JSONDecodeError, UnicodeDecodeError):
        return None  # (any other OSError, such as a permission, is the error to show)
    return saved if isinstance(saved, dict) and saved.get("model_type") == "elmo" else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", required=True,
                        help="the ELMoForManyLangs model folder (with --to-elmoformanylangs: the Hugging Face checkpoint)")
    parser.add_argument("--output-dir", required=True, help="folder to write (must not exist or be empty)")
    parser.add_argument("--model-id", help="the Hub id (NAME or NAMESPACE/NAME) that the model card's code loads "
                        "(default: the output folder's name)")
    parser.add_argument("--language",
                        help="the model's language for the card, an ISO 639 code such as zh or fr (default: und)")
    parser.add_argument("--license", help="the weights' license for the card, a Hub license id such as mit or "
                        "cc-by-4.0 (default: none)")
    parser.add_argument("--to-elmoformanylangs", action="store_true", help="convert a Hugging Face checkpoint back")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    args = parser.parse_args(argv)
    if args.to_elmoformanylangs:
        refuse_card_options(parser, args, "converting to Hugging Face", "--to-elmoformanylangs")
    if args.language is None:  # (an empty --language is refused below, not read as the default)
        args.language = "und"
    try:
        if problem := card_option_problem(args.language, args.license, args.model_id):
            raise ConversionError(problem)
        with quiet_transformers():
            if args.to_elmoformanylangs:
                saved = _read_elmo_config(Path(args.model_dir, "config.json"))
                if saved is None and Path(args.model_dir).is_dir():  # (no folder: load_checkpoint says what it is)
                    raise ConversionError(f"{args.model_dir}: no config.json of an ELMo, not a Hugging Face checkpoint "
                                          "folder")
                convert_hf_to_elmoformanylangs(args.model_dir, args.output_dir, overwrite=args.overwrite)
                print(f"wrote an ELMoForManyLangs model to {args.output_dir}")
                if "ElmoForPreTraining" in (saved.get("architectures") or []):  # (its softmax stays behind: say so)
                    print(f"left out: the pretraining softmax over {saved.get('lm_vocab_size')} words, which the "
                          "package's Embedder does not read (its own training would need it as classifier.pkl, which is "
                          "not written)")
            else:
                convert_elmoformanylangs_to_hf(args.model_dir, args.output_dir, model_id=args.model_id,
                                               language=args.language, overwrite=args.overwrite,
                                               license=args.license)
                print(f"wrote and verified a Hugging Face checkpoint in {args.output_dir}")
    except (ValueError, OSError) as error:  # ConversionError, LexiconError, the config's own checks, a full disk
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
