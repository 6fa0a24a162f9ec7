"""The converters' behaviour that mutations of them showed no other test held: a long output folder name, an input
the system cannot open, each direction's inputs alone, --overwrite of a folder holding one input, a fine-tuned checkpoint's way back, the ways back's
own checks (a scalar mix the original format has no place for, an incomplete checkpoint named once), the forward
conversion's reload check through the saved tokenizer, a character-only model without word.dic, the language checked
before anything is read, and the character embedding's zero padding row."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import ELMOFORMANYLANGS, FIXTURE_SETS, assert_only_an_error_line
from test_conversion import read_datasets

from conversion import convert_elmoformanylangs, convert_original_elmo
from conversion.convert_elmoformanylangs import convert_elmoformanylangs_to_hf, convert_hf_to_elmoformanylangs
from conversion.convert_original_elmo import convert_hf_to_original, convert_original_to_hf
from hf_elmo import ElmoForSequenceClassification, ElmoModel, ElmoTokenizer

CONVERTER = Path(__file__).resolve().parents[1] / "conversion" / "convert_original_elmo.py"


def test_an_output_folder_with_a_long_name_is_written_both_ways(tmp_path):
    """A name of 250 bytes (a file system allows 255): the staging and retired folders beside it are named from its
    first bytes only (named from all of it, they passed the limit and the conversion failed after reading every
    weight, naming a hidden folder nobody gave); nothing is left beside the outputs."""
    long_name = "e" * 250
    fixture = FIXTURE_SETS["allennlp-elmo"]
    (tmp_path / "hf").mkdir()
    (tmp_path / "back").mkdir()
    out = convert_original_to_hf(fixture.options_file, fixture.weight_file, tmp_path / "hf" / long_name)
    out = convert_original_to_hf(fixture.options_file, fixture.weight_file, out, overwrite=True)
    back = convert_hf_to_original(out, tmp_path / "back" / long_name)
    assert sorted(path.name for path in back.iterdir()) == ["options.json", "weights.hdf5"]
    chinese = convert_elmoformanylangs_to_hf(ELMOFORMANYLANGS / "chars_only", tmp_path / long_name)
    assert (chinese / "char.dic").is_file()
    assert convert_hf_to_elmoformanylangs(chinese, tmp_path / "back" / ("z" * 250)).is_dir()
    assert sorted(path.name for path in (tmp_path / "hf").iterdir()) == [long_name]
    assert sorted(path.name for path in (tmp_path / "back").iterdir()) == [long_name, "z" * 250]


def test_an_options_file_below_a_file_is_one_error_line(tmp_path, capsys):
    """`--options-file file.txt/options.json`: open raises NotADirectoryError, which no check turns into a
    ConversionError: still the command's one error line naming the path."""
    (tmp_path / "file.txt").write_text("x")
    options = tmp_path / "file.txt" / "options.json"
    code = convert_original_elmo.main(["--options-file", str(options), "--weight-file",
                                       str(FIXTURE_SETS["allennlp-elmo"].weight_file), "--output-dir", str(tmp_path / "out")])
    assert_only_an_error_line(code, capsys.readouterr().err, str(options))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["file.txt"]


def test_neither_direction_takes_the_others_input(converted, tmp_path, capsys):
    """--options-file and --weight-file with --to-original, and --model-dir without it, are usage errors (each
    direction left the other's input unread and reported success)."""
    fixture, model = FIXTURE_SETS["allennlp-elmo"], converted["allennlp-elmo"]
    for option, path in (("--options-file", fixture.options_file), ("--weight-file", fixture.weight_file)):
        with pytest.raises(SystemExit) as refused:
            convert_original_elmo.main(["--to-original", "--model-dir", str(model), option, str(path),
                                        "--output-dir", str(tmp_path / "back")])
        assert refused.value.code == 2 and "--to-original writes them from --model-dir" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:
        convert_original_elmo.main(["--options-file", str(fixture.options_file), "--weight-file",
                                    str(fixture.weight_file), "--model-dir", str(model), "--output-dir",
                                    str(tmp_path / "hf")])
    assert refused.value.code == 2 and "--model-dir is what --to-original reads" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_overwrite_never_replaces_a_folder_that_holds_only_the_weight_file(tmp_path, capsys):
    fixture = FIXTURE_SETS["allennlp-elmo"]
    options = shutil.copy(fixture.options_file, tmp_path / "options.json")
    out = tmp_path / "out"
    out.mkdir()
    weights = shutil.copy(fixture.weight_file, out / "weights.hdf5")
    code = convert_original_elmo.main(["--options-file", str(options), "--weight-file", str(weights),
                                       "--output-dir", str(out), "--overwrite"])
    assert_only_an_error_line(code, capsys.readouterr().err, f"{out}: the output folder holds the input {weights}, "
                              "which replacing it would delete: write to another folder")
    assert sorted(path.name for path in out.iterdir()) == ["weights.hdf5"]
    assert (out / "weights.hdf5").read_bytes() == fixture.weight_file.read_bytes()


def test_to_original_of_a_fine_tuned_checkpoint_prints_its_one_line_and_writes_the_body(converted, tmp_path):
    """A checkpoint saved from a head (elmo.* and classifier.*) converts back to the biLM's weights exactly, and the
    command prints its line of success only, not transformers' load report of the classifier's tensors (which the
    way back does not write). (In its own process: transformers' logger writes to the stderr it found first.)"""
    head = tmp_path / "head"
    ElmoForSequenceClassification.from_pretrained(converted["allennlp-elmo"], num_labels=3).save_pretrained(head)
    result = subprocess.run([sys.executable, str(CONVERTER), "--to-original", "--model-dir", str(head), "--output-dir",
                             str(tmp_path / "back")], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout == f"wrote options.json and weights.hdf5 to {tmp_path / 'back'}\n"
    original = read_datasets(FIXTURE_SETS["allennlp-elmo"].weight_file)
    back = read_datasets(tmp_path / "back" / "weights.hdf5")
    assert back.keys() == original.keys() and all(np.array_equal(back[k], original[k]) for k in original)


def test_to_original_leaves_alone_a_scalar_mix_that_float32_cannot_hold_or_that_holds_a_nan(converted, tmp_path):
    """A float64 checkpoint whose biLM float32 holds (a body frozen while the task's mix trained) converts back: the
    mix, which the original format has no place for, is not checked as a weight written."""
    model = ElmoModel.from_pretrained(converted["allennlp-elmo"]).double()
    with torch.no_grad():
        model.scalar_mixes[0].scalar_parameters.copy_(torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64))
        model.scalar_mixes[0].gamma.fill_(1.1)
    assert not torch.equal(model.scalar_mixes[0].gamma.float().double(), model.scalar_mixes[0].gamma)
    model.save_pretrained(tmp_path / "model")
    back = read_datasets(convert_hf_to_original(tmp_path / "model", tmp_path / "back") / "weights.hdf5")
    original = read_datasets(FIXTURE_SETS["allennlp-elmo"].weight_file)
    assert back.keys() == original.keys() and all(np.array_equal(back[key], original[key]) for key in original)
    # Nor is a mix that holds a NaN (a task's training gone wrong): the biLM it was trained on converts.
    with torch.no_grad():
        model.scalar_mixes[0].gamma.fill_(float("nan"))
    model.save_pretrained(tmp_path / "model")
    back = read_datasets(convert_hf_to_original(tmp_path / "model", tmp_path / "again") / "weights.hdf5")
    assert back.keys() == original.keys() and all(np.array_equal(back[key], original[key]) for key in original)


@pytest.mark.parametrize("converter", ["original", "elmoformanylangs"])
def test_an_incomplete_checkpoint_is_one_line_naming_the_folder_once(converted, converted_elmoformanylangs, tmp_path,
                                                                     capsys, monkeypatch, converter):
    source = converted["allennlp-elmo"] if converter == "original" else converted_elmoformanylangs["with_words"]
    shutil.copytree(source, tmp_path / "model")
    state = load_file(tmp_path / "model" / "model.safetensors")
    del state["char_encoder.highway.0.transform.weight"]
    save_file(state, tmp_path / "model" / "model.safetensors", metadata={"format": "pt"})
    monkeypatch.chdir(tmp_path)
    if converter == "original":
        code = convert_original_elmo.main(["--to-original", "--model-dir", "model", "--output-dir", "back"])
    else:
        code = convert_elmoformanylangs.main(["--to-elmoformanylangs", "--model-dir", "model", "--output-dir", "back"])
    assert code == 2
    assert capsys.readouterr().err == ("error: model: not a complete ElmoModel: it lacks the tensor "
                                       "char_encoder.highway.0.transform.weight\n")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model"]


@pytest.mark.parametrize("name", ["with_words", "chars_only"])
def test_the_reload_check_runs_the_saved_tokenizer(tmp_path, monkeypatch, capsys, name):
    """The reload check embeds the probe sentences with the tokenizer read back from the saved folder: one saved with
    other settings than the model reads (words of 40 characters, the model reads 50) is one error line naming the
    output folder, though its char.dic and word.dic are the source's; nothing is left behind."""
    save = ElmoTokenizer.save_pretrained

    def damaged_save(self, folder, **kwargs):
        saved = save(self, folder, **kwargs)
        settings = json.loads((Path(folder) / "tokenizer_config.json").read_text())
        (Path(folder) / "tokenizer_config.json").write_text(json.dumps({**settings, "max_characters_per_token": 40}))
        return saved

    monkeypatch.setattr(ElmoTokenizer, "save_pretrained", damaged_save)
    output = tmp_path / "out"
    code = convert_elmoformanylangs.main(["--model-dir", str(ELMOFORMANYLANGS / name), "--output-dir", str(output)])
    assert_only_an_error_line(code, capsys.readouterr().err,
                              f"{output}: the saved folder does not reload: input_ids must be [batch, words, 50]")
    assert list(tmp_path.iterdir()) == []


def test_a_saved_tokenizer_without_its_dictionaries_is_refused(tmp_path, monkeypatch, capsys):
    """The dictionaries' check where the saved tokenizer has none at all (it reloads as a byte tokenizer): one error
    line naming char.dic and the output folder, not a traceback."""
    save = ElmoTokenizer.save_pretrained

    def save_without_dictionaries(self, folder, **kwargs):  # (as a tokenizer saved before it recorded its alphabet)
        saved = save(self, folder, **kwargs)
        for dictionary in ("char.dic", "word.dic"):
            (Path(folder) / dictionary).unlink(missing_ok=True)
        settings = json.loads((Path(folder) / "tokenizer_config.json").read_text())
        settings.pop("alphabet", None)
        (Path(folder) / "tokenizer_config.json").write_text(json.dumps(settings))
        return saved

    monkeypatch.setattr(ElmoTokenizer, "save_pretrained", save_without_dictionaries)
    output = tmp_path / "out"
    code = convert_elmoformanylangs.main(["--model-dir", str(ELMOFORMANYLANGS / "chars_only"), "--output-dir", str(output)])
    assert_only_an_error_line(code, capsys.readouterr().err,
                              f"{output}: the saved tokenizer's char.dic did not read back as "
                              f"{ELMOFORMANYLANGS / 'chars_only' / 'char.dic'} (the saved tokenizer has none)")
    assert list(tmp_path.iterdir()) == []


def test_a_character_only_model_without_word_dic_converts_both_ways(converted_elmoformanylangs, tmp_path):
    """A character-only model needs no word.dic (the fixtures, as the package's releases, hold one in both folders):
    a folder without it converts, there and back, exactly."""
    source = shutil.copytree(ELMOFORMANYLANGS / "chars_only", tmp_path / "model")
    (source / "word.dic").unlink()
    out = convert_elmoformanylangs_to_hf(source, tmp_path / "hf")
    assert not (out / "word.dic").exists() and ElmoTokenizer.from_pretrained(out).lexicon.words is None
    reference = ElmoModel.from_pretrained(converted_elmoformanylangs["chars_only"]).state_dict()
    state = ElmoModel.from_pretrained(out).state_dict()
    assert state.keys() == reference.keys() and all(torch.equal(state[k], reference[k]) for k in state)
    back = convert_hf_to_elmoformanylangs(out, tmp_path / "back")
    assert sorted(path.name for path in back.iterdir()) == ["architecture.json", "char.dic", "config.json",
                                                            "encoder.pkl", "token_embedder.pkl"]
    assert (back / "char.dic").read_bytes() == (source / "char.dic").read_bytes()


def test_the_converter_functions_check_the_language_before_reading_anything(tmp_path):
    """"`language` and `license` ... are checked before anything else": a bad language is the error even where the
    inputs are missing (nothing read, nothing written)."""
    with pytest.raises(ValueError, match=r"^'french' is not a language code"):
        convert_original_to_hf(tmp_path / "none.json", tmp_path / "none.hdf5", tmp_path / "out", language="french")
    with pytest.raises(ValueError, match=r"^'french' is not a language code"):
        convert_elmoformanylangs_to_hf(tmp_path / "no-model", tmp_path / "out", language="french")
    assert list(tmp_path.iterdir()) == []


def test_the_converted_character_embedding_is_a_zero_padding_row_over_the_originals(converted):
    """Row 0, the padding word's, is zero as AllenNLP's character encoder builds it (no output or round trip sees it:
    its outputs are masked and the way back drops it)."""
    for name, fixture in FIXTURE_SETS.items():
        with h5py.File(fixture.weight_file, "r") as handle:
            original = handle["char_embed"][...]
        embedding = load_file(converted[name] / "model.safetensors")["char_encoder.char_embedding.weight"].numpy()
        assert embedding.shape == (original.shape[0] + 1, original.shape[1]), name
        assert not embedding[0].any() and np.array_equal(embedding[1:], original), name
