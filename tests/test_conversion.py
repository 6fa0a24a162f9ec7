"""conversion/: original format -> Hugging Face checkpoint -> original format, and every kind of bad input."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from conftest import FIXTURE_SETS, MULTILINGUAL_FR
from conversion.convert_original_elmo import convert_hf_to_original, convert_original_to_hf, main
from conversion.original_format import ConversionError, state_dict_to_original, write_original_weights
from hf_elmo import ElmoConfig, ElmoModel, ElmoTokenizer

SCRIPT = Path(__file__).resolve().parents[1] / "conversion" / "convert_original_elmo.py"
TINY = dict(
    char_embedding_dim=4,
    char_cnn_filters=[[1, 4], [2, 8], [3, 16]],
    num_highway_layers=1,
    cell_size=24,
    projection_dim=8,
    num_lstm_layers=2,
)


def read_datasets(path) -> dict[str, np.ndarray]:
    arrays = {}
    with h5py.File(path, "r") as handle:
        handle.visititems(lambda name, item: arrays.__setitem__(name, item[...]) if isinstance(item, h5py.Dataset) else None)
    return arrays


def write_original(folder: Path, config: ElmoConfig, seed: int = 0, options_extra: dict | None = None):
    """An original-format model (options.json + weights.hdf5) with random weights; returns the model."""
    torch.manual_seed(seed)
    model = ElmoModel(config).eval()
    folder.mkdir(parents=True, exist_ok=True)
    options = config.to_original_options()
    options.update(options_extra or {})
    (folder / "options.json").write_text(json.dumps(options))
    write_original_weights(state_dict_to_original(model.state_dict(), config), folder / "weights.hdf5")
    return model


def run_script(*args) -> subprocess.CompletedProcess:
    """The converter as a user runs it, in its own process."""
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def run_main(capsys, *args) -> tuple[int, str, str]:
    """The converter's command line in this process (quicker than a new Python for every case)."""
    code = main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("name", FIXTURE_SETS)
def test_round_trip_gives_identical_datasets(tmp_path, converted, name):
    fixture = FIXTURE_SETS[name]
    convert_hf_to_original(converted[name], tmp_path / "back")
    original, back = read_datasets(fixture.weight_file), read_datasets(tmp_path / "back" / "weights.hdf5")
    assert original.keys() == back.keys()
    for key in original:
        assert back[key].dtype == np.float32
        assert np.array_equal(original[key], back[key]), key
    options = json.loads((tmp_path / "back" / "options.json").read_text())
    assert options == {**json.loads(fixture.options_file.read_text()), "lstm": options["lstm"]}
    assert ElmoConfig.from_original_options(tmp_path / "back" / "options.json").to_dict() == ElmoConfig.from_original_options(fixture.options_file).to_dict()


def test_converted_folder_is_complete_and_self_contained(converted):
    folder = converted["allennlp-elmo"]
    names = {path.name for path in folder.iterdir()}
    assert {
        "config.json", "model.safetensors", "tokenizer_config.json", "README.md",
        "configuration_elmo.py", "modeling_elmo.py", "tokenization_elmo.py",
    } <= names
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "elmo"
    assert config["auto_map"]["AutoModel"] == "modeling_elmo.ElmoModel"
    assert config["auto_map"]["AutoConfig"] == "configuration_elmo.ElmoConfig"
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert tokenizer_config["auto_map"]["AutoTokenizer"][0] == "tokenization_elmo.ElmoTokenizer"
    card = (folder / "README.md").read_text()
    assert card.startswith("---\nlibrary_name: transformers\n")
    assert "custom_code" in card and "lm_weights.hdf5" in card and "${" not in card
    assert not [name for name in (folder.parent).iterdir() if ".partial-" in name.name]


def test_multilingual_options_with_training_keys(tmp_path):
    """bilm-tf training writes extra keys into options.json; they are accepted and ignored."""
    out = convert_original_to_hf(MULTILINGUAL_FR / "options.json", MULTILINGUAL_FR / "weights.hdf5", tmp_path / "fr")
    convert_hf_to_original(out, tmp_path / "back")
    original, back = read_datasets(MULTILINGUAL_FR / "weights.hdf5"), read_datasets(tmp_path / "back" / "weights.hdf5")
    assert all(np.array_equal(original[key], back[key]) for key in original) and original.keys() == back.keys()


@pytest.mark.parametrize(
    "variant, options_extra",
    [
        ({"use_skip_connections": False}, {}),
        ({"cell_size": 8}, {}),  # cell size == projection size: no W_P_0
        ({"char_cnn_filters": [[1, 2], [2, 6]]}, {}),  # 8 filters == projection size: no CNN_proj
        ({"max_characters_per_token": 20}, {}),
        ({"num_highway_layers": 0, "cell_clip": None, "proj_clip": None}, {}),
        ({"char_cnn_activation": "tanh"}, {"n_characters": 261}),  # training-style options file
    ],
)
def test_variants_convert_exactly(tmp_path, variant, options_extra):
    config = ElmoConfig(**{**TINY, **variant})
    extra = {}
    if options_extra:
        extra["char_cnn"] = {**config.to_original_options()["char_cnn"], **options_extra}
    original = write_original(tmp_path / "original", config, options_extra=extra)
    if "cell_size" in variant:
        assert not any("W_P_0" in key for key in read_datasets(tmp_path / "original" / "weights.hdf5"))
    if "char_cnn_filters" in variant:
        assert "CNN_proj/W_proj" not in read_datasets(tmp_path / "original" / "weights.hdf5")
    out = convert_original_to_hf(tmp_path / "original" / "options.json", tmp_path / "original" / "weights.hdf5", tmp_path / "hf")
    converted = ElmoModel.from_pretrained(out).eval()
    tokenizer = ElmoTokenizer.from_pretrained(out)
    assert tokenizer.max_characters_per_token == config.max_characters_per_token
    batch = tokenizer([["a", "verylongwordthatgetscutsomewhere", "."], ["b"]], is_split_into_words=True,
                      padding=True, return_tensors="pt")
    with torch.no_grad():
        for a, b in zip(original(**batch).hidden_states, converted(**batch).hidden_states):
            assert torch.equal(a, b)
    convert_hf_to_original(out, tmp_path / "back")
    before, after = read_datasets(tmp_path / "original" / "weights.hdf5"), read_datasets(tmp_path / "back" / "weights.hdf5")
    assert before.keys() == after.keys() and all(np.array_equal(before[k], after[k]) for k in before)


# ---- bad input: one clear message, nothing written -------------------------------------------------------


@pytest.fixture
def original(tmp_path) -> Path:
    folder = tmp_path / "original"
    write_original(folder, ElmoConfig(**TINY))
    return folder


def edit_weights(folder: Path, change):
    with h5py.File(folder / "weights.hdf5", "r+") as handle:
        change(handle)


def edit_options(folder: Path, change):
    options = json.loads((folder / "options.json").read_text())
    change(options)
    (folder / "options.json").write_text(json.dumps(options))


PREFIX = "RNN_0/RNN/MultiRNNCell/Cell1/LSTMCell"
BAD_INPUTS = {
    "missing weight file": (lambda f: (f / "weights.hdf5").unlink(), ["weights.hdf5", "not found"]),
    "missing options file": (lambda f: (f / "options.json").unlink(), ["options.json", "not found"]),
    "not HDF5": (lambda f: (f / "weights.hdf5").write_text("hello"), ["weights.hdf5", "not an HDF5"]),
    "options not JSON": (lambda f: (f / "options.json").write_text("{"), ["options.json", "not a JSON"]),
    "missing dataset": (lambda f: edit_weights(f, lambda h: h.__delitem__(f"{PREFIX}/B")), [f"{PREFIX}/B", "(96,)", "missing"]),
    "extra dataset": (lambda f: edit_weights(f, lambda h: h.create_dataset("softmax/W", data=np.zeros((3, 8)))), ["softmax/W", "(3, 8)", "unexpected"]),
    "wrong shape": (
        lambda f: edit_weights(f, lambda h: (h.__delitem__(f"{PREFIX}/W_P_0"), h.create_dataset(f"{PREFIX}/W_P_0", data=np.zeros((24, 9), np.float32)))),
        [f"{PREFIX}/W_P_0", "(24, 9)", "(24, 8)"],
    ),
    "options contradict weights": (lambda f: edit_options(f, lambda o: o["lstm"].__setitem__("dim", 32)), ["W_0", "(16, 128)", "(16, 96)"]),
    "fewer highway layers in the options": (lambda f: edit_options(f, lambda o: o["char_cnn"].__setitem__("n_highway", 0)), ["CNN_high_0/W_carry", "unexpected"]),
    "missing option": (lambda f: edit_options(f, lambda o: o["lstm"].pop("projection_dim")), ["lstm.projection_dim", "missing"]),
    "invalid option": (lambda f: edit_options(f, lambda o: o["char_cnn"].__setitem__("activation", "gelu")), ["char_cnn_activation", "gelu"]),
    "bad n_characters": (lambda f: edit_options(f, lambda o: o["char_cnn"].__setitem__("n_characters", 300)), ["n_characters", "300"]),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_fails_clearly_and_writes_nothing(original, tmp_path, capsys, case):
    damage, must_mention = BAD_INPUTS[case]
    damage(original)
    out = tmp_path / "out"
    code, _, err = run_main(capsys, "--options-file", original / "options.json", "--weight-file",
                            original / "weights.hdf5", "--output-dir", out)
    assert code == 2, err
    message = err.strip()
    assert message.startswith("error: ") and "Traceback" not in message and len(message.splitlines()) == 1, message
    for text in must_mention:
        assert text in message, (text, message)
    assert not out.exists()
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".out")]


def test_existing_output_is_kept_unless_overwrite(original, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    args = ["--options-file", original / "options.json", "--weight-file", original / "weights.hdf5", "--output-dir", out]
    code, _, err = run_main(capsys, *args)
    assert code == 2 and "--overwrite" in err
    assert (out / "keep.txt").read_text() == "mine"
    code, _, err = run_main(capsys, *args, "--overwrite")
    assert code == 0, err
    assert not (out / "keep.txt").exists() and (out / "model.safetensors").is_file()


def test_failed_verification_leaves_nothing(original, tmp_path, monkeypatch):
    """A crash after the files are written but before they are verified leaves no output folder."""
    import conversion.convert_original_elmo as converter

    def broken_verify(folder, model, tokenizer):
        raise ConversionError(f"{folder}: simulated failure")

    monkeypatch.setattr(converter, "_verify_reload", broken_verify)
    with pytest.raises(ConversionError):
        converter.convert_original_to_hf(original / "options.json", original / "weights.hdf5", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["original"]


def test_to_original_from_a_folder_that_is_not_a_checkpoint(tmp_path, capsys):
    code, _, err = run_main(capsys, "--to-original", "--model-dir", tmp_path, "--output-dir", tmp_path / "back")
    assert code == 2 and "no config.json" in err
    assert not (tmp_path / "back").exists()


def test_script_converts_and_reports(tmp_path):
    fixture = FIXTURE_SETS["bilm-tf"]
    result = run_script("--options-file", fixture.options_file, "--weight-file", fixture.weight_file,
                        "--output-dir", tmp_path / "hf")
    assert result.returncode == 0, result.stderr
    assert "verified" in result.stdout
    result = run_script("--to-original", "--model-dir", tmp_path / "hf", "--output-dir", tmp_path / "back")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "back").iterdir()) == ["options.json", "weights.hdf5"]
    shutil.rmtree(tmp_path / "hf")
