"""conversion/: original format -> Hugging Face checkpoint -> original format, and every kind of bad input."""

import json
import logging
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import FIXTURE_SETS, MULTILINGUAL_FR, assert_only_an_error_line, unwritable_folder
from conversion.convert_original_elmo import convert_hf_to_original, convert_original_to_hf, main
from conversion.original_format import ConversionError, state_dict_to_original, write_original_weights
from hf_elmo import ElmoConfig, ElmoForPreTraining, ElmoForSequenceClassification, ElmoForTokenClassification, ElmoModel, ElmoTokenizer
from hf_elmo.modeling_elmo import LOAD_REPORT_LOGGER

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
    """The way back writes the weight file as bilm-tf's dump_weights does: every dataset as it was, float32, and no
    attributes; and the options."""
    fixture = FIXTURE_SETS[name]
    convert_hf_to_original(converted[name], tmp_path / "back")
    original, back = read_datasets(fixture.weight_file), read_datasets(tmp_path / "back" / "weights.hdf5")
    assert original.keys() == back.keys()
    for key in original:
        assert back[key].dtype == original[key].dtype == np.float32
        assert back[key].shape == original[key].shape and back[key].tobytes() == original[key].tobytes(), key  # (bits: -0.0 too)
    with h5py.File(tmp_path / "back" / "weights.hdf5", "r") as handle:
        assert not handle.attrs and not [key for key in back if handle[key].attrs], key
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


def test_a_converted_models_mixes_start_as_the_plain_average_of_its_layers(converted):
    """The original files hold no scalar mix (it is the task's): each of a converted model's mixes starts as the mean
    of its layers, gamma 1 and equal weights, as AllenNLP's does."""
    model = ElmoModel.from_pretrained(converted["allennlp-elmo"]).eval()
    assert model.config.num_output_representations == len(model.scalar_mixes) >= 1
    batch = ElmoTokenizer.from_pretrained(converted["allennlp-elmo"])(["I eat an apple .", "Hi"], padding=True,
                                                                      return_tensors="pt")
    with torch.no_grad():
        output = model(**batch, output_hidden_states=True)
    average = torch.stack(output.hidden_states).mean(0)
    for mix, representation in zip(model.scalar_mixes, output.elmo_representations):
        assert torch.equal(mix.gamma, torch.ones(1)) and torch.equal(mix.scalar_parameters, torch.zeros(3))
        assert torch.allclose(representation, average, atol=1e-6)


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


def replace_dataset(handle, name: str, data: np.ndarray, **options) -> None:
    del handle[name]
    handle.create_dataset(name, data=data, **options)


def damage_compressed_chunk(folder: Path, name: str) -> None:
    """Store dataset `name` gzip-compressed, then overwrite bytes of its chunk, as a bad disk or copy would."""
    edit_weights(folder, lambda h: replace_dataset(h, name, h[name][...], compression="gzip", chunks=h[name].shape))
    with h5py.File(folder / "weights.hdf5", "r") as handle:
        offset = handle[name].id.get_chunk_info(0).byte_offset
    with open(folder / "weights.hdf5", "r+b") as handle:
        handle.seek(offset + 10)
        handle.write(b"\xff" * 20)


def store_with_a_filter_h5py_lacks(folder: Path, name: str) -> None:
    """Store dataset `name` compressed with lzf, then rename that filter in the file to one h5py has no plugin for
    (32099, made mandatory, as a plugin's filter is): a whole file that this h5py cannot read."""
    edit_weights(folder, lambda h: replace_dataset(h, name, np.zeros_like(h[name][...]), compression="lzf",
                                                   chunks=h[name].shape))  # (zeros: lzf stores them compressed)
    data = bytearray((folder / "weights.hdf5").read_bytes())
    lzf = (32000).to_bytes(2, "little") + (8).to_bytes(2, "little")  # the filter's id and its name's length
    assert data.count(lzf) == 1
    at = data.index(lzf)
    data[at:at + 2], data[at + 4:at + 6] = (32099).to_bytes(2, "little"), b"\x00\x00"  # (flags 0: mandatory)
    (folder / "weights.hdf5").write_bytes(bytes(data))


def damage_metadata(folder: Path, where: str) -> None:
    """Overwrite bytes of the HDF5 structure (not of the values), as a bad disk or copy would: the object header of
    a dataset, the index of the root group's links, or the size of a dataset's dimension in its header."""
    path = folder / "weights.hdf5"
    with h5py.File(path, "r") as handle:
        header = h5py.h5o.get_info(handle[f"{PREFIX}/B"].id).addr
    data = bytearray(path.read_bytes())
    if where == "object header":
        data[header:header + 16] = b"\xff" * 16
    elif where == "group index":
        start = data.index(b"TREE")  # the signature of the B-tree of a group's links
        data[start:start + 4] = b"XXXX"
    else:  # the dataset's one dimension, 96, as a size its maximum (96) does not allow
        start = data.index((96).to_bytes(8, "little"), header)
        data[start:start + 8] = (10**12).to_bytes(8, "little")
    path.write_bytes(bytes(data))


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
    "missing dataset": (lambda f: edit_weights(f, lambda h: h.__delitem__(f"{PREFIX}/B")), ["weights.hdf5", f"{PREFIX}/B", "(96,)", "missing"]),
    "two missing datasets": (
        lambda f: edit_weights(f, lambda h: (h.__delitem__(f"{PREFIX}/B"), h.__delitem__(f"{PREFIX}/W_0"))),
        ["weights.hdf5: missing dataset " + f"{PREFIX}/W_0 (expected shape (16, 96) from the options), and 1 more"],
    ),
    "extra dataset": (lambda f: edit_weights(f, lambda h: h.create_dataset("softmax/W", data=np.zeros((3, 8)))), ["weights.hdf5", "softmax/W", "(3, 8)", "unexpected"]),
    "wrong shape": (
        lambda f: edit_weights(f, lambda h: (h.__delitem__(f"{PREFIX}/W_P_0"), h.create_dataset(f"{PREFIX}/W_P_0", data=np.zeros((24, 9), np.float32)))),
        ["weights.hdf5", f"{PREFIX}/W_P_0", "(24, 9)", "(24, 8)"],
    ),
    "options contradict weights": (lambda f: edit_options(f, lambda o: o["lstm"].__setitem__("dim", 32)), ["weights.hdf5", "W_0", "(16, 128)", "(16, 96)"]),
    "fewer highway layers in the options": (lambda f: edit_options(f, lambda o: o["char_cnn"].__setitem__("n_highway", 0)), ["weights.hdf5", "CNN_high_0/W_carry", "unexpected"]),
    "missing option": (lambda f: edit_options(f, lambda o: o["lstm"].pop("projection_dim")), ["lstm.projection_dim", "missing"]),
    "invalid option": (lambda f: edit_options(f, lambda o: o["char_cnn"].__setitem__("activation", "gelu")), ["char_cnn.activation", "gelu"]),
    "bad n_characters": (lambda f: edit_options(f, lambda o: o["char_cnn"].__setitem__("n_characters", 300)), ["n_characters", "300"]),
    # Every option is type-checked: none is converted silently ("false" would be true, 1.9 would be 1).
    "a flag as a string": (
        lambda f: edit_options(f, lambda o: o["lstm"].__setitem__("use_skip_connections", "false")),
        ["option 'lstm.use_skip_connections' must be true or false, got 'false'"],
    ),
    "a fractional filter width": (
        lambda f: edit_options(f, lambda o: o["char_cnn"]["filters"][0].__setitem__(0, 1.9)),
        ["option 'char_cnn.filters' must be a list of lists of integers", "1.9"],
    ),
    "a clip as an object": (lambda f: edit_options(f, lambda o: o["lstm"].__setitem__("cell_clip", {})),
                            ["option 'lstm.cell_clip' must be a number or null, got {}"]),
    "a count as a string": (lambda f: edit_options(f, lambda o: o["char_cnn"].__setitem__("n_highway", "1")),
                            ["option 'char_cnn.n_highway' must be an integer"]),
    "options not an object": (lambda f: (f / "options.json").write_text("[1, 2]"), ["options.json", "holds a JSON list, not an object"]),
    "options file is a folder": (lambda f: ((f / "options.json").unlink(), (f / "options.json").mkdir()), ["options.json: is a folder"]),
    "weight file is a folder": (lambda f: ((f / "weights.hdf5").unlink(), (f / "weights.hdf5").mkdir()), ["weights.hdf5: is a folder"]),
    "integer dataset": (
        lambda f: edit_weights(f, lambda h: (h.__delitem__(f"{PREFIX}/B"), h.create_dataset(f"{PREFIX}/B", data=np.zeros(96, np.int32)))),
        ["weights.hdf5", f"{PREFIX}/B", "has type int32, expected float32"],
    ),
    # A float64 dataset converts only if float32 holds every value: the model is float32 and nothing is rounded.
    "float64 values that float32 would round": (
        lambda f: edit_weights(f, lambda h: replace_dataset(h, f"{PREFIX}/B", h[f"{PREFIX}/B"][...].astype(np.float64) + 1e-12)),
        ["weights.hdf5: dataset " + f"{PREFIX}/B", "has type float64, with values that float32 cannot hold exactly"],
    ),
    # (numpy warned of the overflow on stderr, before the error line)
    "float64 values past float32's range": (
        lambda f: edit_weights(f, lambda h: replace_dataset(h, f"{PREFIX}/B", h[f"{PREFIX}/B"][...].astype(np.float64) + 1e39)),
        ["weights.hdf5: dataset " + f"{PREFIX}/B", "has type float64, with values that float32 cannot hold exactly"],
    ),
    "a NaN": (lambda f: edit_weights(f, lambda h: h[f"{PREFIX}/B"].__setitem__(3, np.nan)),
              ["weights.hdf5: dataset " + f"{PREFIX}/B holds 1 non-finite value (NaN or infinity)"]),
    "two NaNs": (lambda f: edit_weights(f, lambda h: h[f"{PREFIX}/B"].__setitem__(slice(3, 5), np.nan)),
                 ["weights.hdf5: dataset " + f"{PREFIX}/B holds 2 non-finite values (NaN or infinity)"]),
    "an infinity": (lambda f: edit_weights(f, lambda h: h["char_embed"].__setitem__((0, 1), -np.inf)),
                    ["weights.hdf5: dataset char_embed holds 1 non-finite value (NaN or infinity)"]),
    # h5py's own message names neither the file nor the dataset; it cannot tell a damaged chunk from a filter it
    # lacks, so neither is called damage (the test checks).
    "a damaged compressed chunk": (lambda f: damage_compressed_chunk(f, f"{PREFIX}/W_0"),
                                   ["weights.hdf5: cannot read dataset " + f"{PREFIX}/W_0 ("]),
    "a filter h5py lacks": (lambda f: store_with_a_filter_h5py_lacks(f, f"{PREFIX}/W_0"),
                            ["weights.hdf5: cannot read dataset " + f"{PREFIX}/W_0 (", "): it is stored with the "
                             "HDF5 filter 32099 (lzf), which this h5py cannot decode: install that filter's plugin"]),
    # Damaged structure: h5py raised RuntimeError or KeyError (a traceback from the command) naming neither.
    "a damaged object header": (lambda f: damage_metadata(f, "object header"),
                                ["weights.hdf5: cannot list the datasets of this HDF5 file (",
                                 "bad object header version number", "): the file is damaged"]),
    "a damaged group index": (lambda f: damage_metadata(f, "group index"),
                              ["weights.hdf5: cannot list the datasets of this HDF5 file (", "B-tree signature",
                               "): the file is damaged"]),
    "a damaged dataspace": (lambda f: damage_metadata(f, "dataspace"),
                            ["weights.hdf5: cannot open the HDF5 object " + f"{PREFIX}/B (",
                             "dataspace dim 0 size of 1000000000000", "): the file is damaged"]),
    "an empty dataset": (lambda f: edit_weights(f, lambda h: replace_dataset(h, f"{PREFIX}/B", h5py.Empty("f4"))),
                         ["weights.hdf5: dataset " + f"{PREFIX}/B has shape None, expected (96,) from the options"]),
}


@pytest.mark.filterwarnings("error")  # (a warning would be a line on stderr besides the error)
@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_fails_clearly_and_writes_nothing(original, tmp_path, capsys, case):
    damage, must_mention = BAD_INPUTS[case]
    damage(original)
    out = tmp_path / "out"
    code, _, err = run_main(capsys, "--options-file", original / "options.json", "--weight-file",
                            original / "weights.hdf5", "--output-dir", out)
    assert_only_an_error_line(code, err, *must_mention)
    assert ("the file is damaged" in err) == ("damaged" in case and "chunk" not in case)
    assert not out.exists()
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".out")]


def test_float16_and_float64_datasets_that_float32_holds_convert_exactly(original, tmp_path):
    """bilm-tf writes float32; a float16 dataset, or a float64 one whose values are all float32 values, converts with
    every value as it was (converting there and back gives them again, as float32)."""
    edit_weights(original, lambda h: (replace_dataset(h, f"{PREFIX}/W_0", h[f"{PREFIX}/W_0"][...].astype(np.float64)),
                                      replace_dataset(h, f"{PREFIX}/B", h[f"{PREFIX}/B"][...].astype(np.float16))))
    expected = read_datasets(original / "weights.hdf5")
    assert (expected[f"{PREFIX}/W_0"].dtype, expected[f"{PREFIX}/B"].dtype) == (np.float64, np.float16)
    out = convert_original_to_hf(original / "options.json", original / "weights.hdf5", tmp_path / "hf")
    back = read_datasets(convert_hf_to_original(out, tmp_path / "back") / "weights.hdf5")
    assert back.keys() == expected.keys()
    for name, values in expected.items():
        assert back[name].dtype == np.float32 and np.array_equal(back[name], values), name


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


def test_overwrite_never_replaces_a_folder_that_holds_the_input(original, converted, tmp_path, capsys):
    """--overwrite replaced the output folder even where it held what was converted: the original options.json and
    weights.hdf5, or the checkpoint converted back (with any head it had), were deleted, and success reported."""
    model = tmp_path / "model"
    shutil.copytree(converted["allennlp-elmo"], model)
    model_files = sorted(path.name for path in model.iterdir())
    forward = ["--options-file", original / "options.json", "--weight-file", original / "weights.hdf5"]
    for arguments, output, source in [(forward, original, original / "options.json"),
                                      (forward, tmp_path, original / "options.json"),  # a folder above them
                                      (["--to-original", "--model-dir", model], model, model)]:
        code, _, err = run_main(capsys, *arguments, "--output-dir", output, "--overwrite")
        assert_only_an_error_line(code, err, f"{output}: the output folder holds the input {source}, which replacing "
                                             "it would delete: write to another folder")
    assert sorted(path.name for path in original.iterdir()) == ["options.json", "weights.hdf5"]
    assert sorted(path.name for path in model.iterdir()) == model_files
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model", "original"]


def test_a_way_back_to_a_full_disk_is_one_error_and_leaves_nothing(converted, tmp_path):
    """--to-original writing past a file size limit (as on a full disk): one error line naming the output folder and
    the cause, exit code 2, no staging folder left. h5py writing weights.hdf5 there crashed the process (signal 11)
    when it closed the file, after printing its own tracebacks, and left the partial folder behind."""
    script = (
        "import resource, signal, sys\n"
        "from conversion.convert_original_elmo import main\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # (a write past the limit then fails, with EFBIG)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.RLIM_INFINITY))\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    output = tmp_path / "back"
    result = subprocess.run([sys.executable, "-c", script, "--to-original", "--model-dir", converted["allennlp-elmo"],
                             "--output-dir", output], capture_output=True, text=True, timeout=300,
                            cwd=Path(__file__).parents[1])
    assert_only_an_error_line(result.returncode, result.stderr, f"error: {output}: the files could not be written "
                              "(File too large); nothing was written")
    assert os.listdir(tmp_path) == []


def test_failed_verification_leaves_nothing(original, tmp_path, monkeypatch):
    """A crash after the files are written but before they are verified leaves no output folder; with --overwrite,
    the folder it would have replaced is left as it was (the replacement happens only once all is verified)."""
    import conversion.convert_original_elmo as converter

    def broken_verify(folder, model, tokenizer, reloaded_tokenizer, output_dir):
        raise ConversionError(f"{output_dir}: simulated failure")

    monkeypatch.setattr(converter, "_verify_reload", broken_verify)
    with pytest.raises(ConversionError):
        converter.convert_original_to_hf(original / "options.json", original / "weights.hdf5", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["original"]
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "earlier.txt").write_text("an earlier output")
    with pytest.raises(ConversionError):
        converter.convert_original_to_hf(original / "options.json", original / "weights.hdf5", tmp_path / "out",
                                         overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["original", "out"]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["earlier.txt"]


@pytest.mark.parametrize("damage, expected", [
    ("weight", "reloaded weight char_encoder.projection.weight differs from the converted one"),
    ("config", "reloaded model differs at output 1 by"),
    # (what loading or running the saved folder raised named the staging folder, gone by then)
    ("truncated weights", "the saved folder does not reload: .*out"),
    ("tokenizer", "the saved folder does not reload: input_ids must be \\[batch, words, 50\\]"),
])
def test_verification_refuses_a_saved_folder_that_does_not_reproduce_the_model(original, tmp_path, monkeypatch, damage,
                                                                               expected):
    """The reload check itself: a saved folder whose weights, or whose config, would give another model than the
    converted one is refused with what differs, and nothing is left behind."""
    save = ElmoModel.save_pretrained

    def damaged_save(self, folder, **kwargs):
        save(self, folder, **kwargs)
        folder = Path(folder)
        if damage == "weight":
            state = load_file(folder / "model.safetensors")
            state["char_encoder.projection.weight"] += 1e-3
            save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
        elif damage == "truncated weights":
            (folder / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes()[:1000])
        elif damage == "config":  # the same weights, read with a much tighter projection clip
            edit_config(folder, proj_clip=0.01)

    save_tokenizer = ElmoTokenizer.save_pretrained

    def damaged_tokenizer_save(self, folder, **kwargs):  # (words spelled with 40 characters, the model reads 50)
        saved = save_tokenizer(self, folder, **kwargs)
        settings = json.loads((Path(folder) / "tokenizer_config.json").read_text())
        (Path(folder) / "tokenizer_config.json").write_text(json.dumps({**settings, "max_characters_per_token": 40}))
        return saved

    monkeypatch.setattr(ElmoModel, "save_pretrained", damaged_save)
    if damage == "tokenizer":
        monkeypatch.setattr(ElmoTokenizer, "save_pretrained", damaged_tokenizer_save)
    with pytest.raises(ConversionError, match=expected) as raised:
        convert_original_to_hf(original / "options.json", original / "weights.hdf5", tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["original"]
    # The message names the output folder, not the staging folder beside it, which is gone when the user reads it.
    assert str(raised.value).startswith(f"{tmp_path / 'out'}: "), str(raised.value)


def test_a_late_error_of_the_command_is_its_one_line_without_progress_bars(original, tmp_path, monkeypatch, capsys):
    """The command's output is one line `error: ...` even where the failure comes after the saving and reloading
    (whose progress bars transformers would print), and transformers' progress bars are as they were after it."""
    from transformers.utils import logging as transformers_logging

    import conversion.convert_original_elmo as converter

    save = ElmoModel.save_pretrained

    def damaged_save(self, folder, **kwargs):
        save(self, folder, **kwargs)
        edit_config(Path(folder), proj_clip=0.01)

    monkeypatch.setattr(ElmoModel, "save_pretrained", damaged_save)
    transformers_logging.enable_progress_bar()
    code = converter.main(["--options-file", str(original / "options.json"), "--weight-file",
                           str(original / "weights.hdf5"), "--output-dir", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 2 and captured.err.count("\n") == 1 and captured.err.startswith("error: "), captured.err
    assert "reloaded model differs" in captured.err and captured.out == ""
    assert transformers_logging.is_progress_bar_enabled()


def test_the_converters_leave_transformers_logging_as_they_found_it(converted, tmp_path):
    """The converters quiet transformers (no progress bars; no warnings while the checkpoint loads) and put back its
    verbosity and progress bars as they were, whatever they were, for a program that converts and goes on."""
    from transformers.utils import logging as transformers_logging

    verbosity, bars = transformers_logging.get_verbosity(), transformers_logging.is_progress_bar_enabled()
    try:
        for level, enabled in ((transformers_logging.INFO, True), (transformers_logging.DEBUG, False)):
            transformers_logging.set_verbosity(level)
            (transformers_logging.enable_progress_bar if enabled else transformers_logging.disable_progress_bar)()
            back = convert_hf_to_original(converted["allennlp-elmo"], tmp_path / f"back-{level}")
            convert_original_to_hf(back / "options.json", back / "weights.hdf5", tmp_path / f"hf-{level}")
            assert transformers_logging.get_verbosity() == level
            assert transformers_logging.is_progress_bar_enabled() == enabled
    finally:
        transformers_logging.set_verbosity(verbosity)
        (transformers_logging.enable_progress_bar if bars else transformers_logging.disable_progress_bar)()


def test_way_back_read_back_check_names_the_output_folder(converted, tmp_path, monkeypatch):
    """--to-original reads weights.hdf5 back before it reports success; a dataset that does not read back as written
    is named in the output folder (the staging folder beside it is gone when the user reads the message)."""
    import conversion.convert_original_elmo as converter

    def damaged_write(arrays, weight_file):
        write_original_weights(arrays, weight_file)
        edit_weights(Path(weight_file).parent, lambda h: h["CNN_proj/b_proj"].__setitem__(0, 1.5))

    monkeypatch.setattr(converter, "write_original_weights", damaged_write)
    with pytest.raises(ConversionError) as raised:
        convert_hf_to_original(converted["allennlp-elmo"], tmp_path / "back")
    assert str(raised.value) == f"{tmp_path / 'back' / 'weights.hdf5'}: dataset CNN_proj/b_proj did not read back identically"
    assert list(tmp_path.iterdir()) == []


def test_converted_folders_have_the_modes_of_a_plain_folder(original, tmp_path):
    """Not private to their owner (mkdtemp's 0700, transformers' 0600 for model.safetensors): as mkdir and open
    under the process's umask would make them."""
    umask = os.umask(0o027)  # (one that differs from the common 022, and is restored below)
    try:
        folder = convert_original_to_hf(original / "options.json", original / "weights.hdf5", tmp_path / "out")
        back = convert_hf_to_original(folder, tmp_path / "back")
    finally:
        os.umask(umask)
    for top in (folder, back):
        assert stat.S_IMODE(top.stat().st_mode) == 0o750
        modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in top.iterdir()}
        assert modes == dict.fromkeys(modes, 0o640)


def test_model_id_and_language_name_the_model_in_its_card(original, tmp_path, capsys):
    """--model-id is the name the card's usage code loads; by default, the output folder's name. --language is the
    card's language (every card said en: a French community model could not say fr); by default en, the released
    models'. A code that is none is refused before anything is written."""
    from huggingface_hub import ModelCard

    args = ["--options-file", original / "options.json", "--weight-file", original / "weights.hdf5"]
    assert run_main(capsys, *args, "--output-dir", tmp_path / "out", "--model-id", "someone/elmo-test",
                    "--language", "fr")[0] == 0
    card = (tmp_path / "out" / "README.md").read_text()
    assert 'AutoModel.from_pretrained("someone/elmo-test")' in card and ModelCard(card).data.language == "fr"
    assert run_main(capsys, *args, "--output-dir", tmp_path / "elmo-here")[0] == 0
    card = (tmp_path / "elmo-here" / "README.md").read_text()
    assert 'AutoModel.from_pretrained("elmo-here")' in card and ModelCard(card).data.language == "en"
    # --license is the weights' (none by default: the converter cannot know it), checked before anything is written.
    assert ModelCard(card).data.license is None and ModelCard(
        (tmp_path / "out" / "README.md").read_text()).data.license is None
    assert run_main(capsys, *args, "--output-dir", tmp_path / "licensed", "--license", "apache-2.0")[0] == 0
    assert ModelCard.load(tmp_path / "licensed" / "README.md").data.license == "apache-2.0"
    code, _, err = run_main(capsys, *args, "--output-dir", tmp_path / "bad", "--license", "Apache 2")
    assert code == 2 and not (tmp_path / "bad").exists()
    assert err == ("error: --license 'Apache 2' is not a license id: give the Hub's, such as apache-2.0, mit or "
                   "cc-by-4.0 (or other)\n")
    code, _, err = run_main(capsys, *args, "--output-dir", tmp_path / "bad", "--language", "french")
    assert code == 2 and not (tmp_path / "bad").exists()
    assert err == "error: --language 'french' is not a language code: give ISO 639 codes such as en, zh or pt-BR\n"
    for option, value in (("--model-id", "someone/elmo"), ("--language", "fr"), ("--license", "mit")):
        with pytest.raises(SystemExit):  # (the way back writes no card: these did nothing there)
            main(["--to-original", "--model-dir", str(tmp_path / "out"), "--output-dir", str(tmp_path / "back"),
                  option, value])
        assert f"{option} is the card's, which only converting original weights writes" in capsys.readouterr().err
    assert not (tmp_path / "back").exists()


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


def test_options_that_the_references_accept_still_convert(tmp_path):
    """Integers where numbers are expected, null or 0 for no clip, null for an option bilm-tf reads with .get."""
    config = ElmoConfig(**TINY)
    write_original(tmp_path / "original", config)
    edit_options(tmp_path / "original", lambda o: o["lstm"].update(cell_clip=3, proj_clip=0))
    edit_options(tmp_path / "original", lambda o: o["char_cnn"].update(n_highway=None, n_characters=261))
    converted = ElmoConfig.from_original_options(tmp_path / "original" / "options.json")
    assert (converted.cell_clip, converted.proj_clip, converted.num_highway_layers, converted.n_characters) == (3.0, None, 0, 262)


def test_config_fields_are_type_checked_when_loaded_and_set(converted, tmp_path):
    """The bilm-tf fixture (no skip connections) with `"use_skip_connections": "false"` in config.json loaded as
    skip connections on, and gave outputs 0.66 off the original's; now every field's type is checked."""
    folder = tmp_path / "model"
    shutil.copytree(converted["bilm-tf"], folder)
    config = json.loads((folder / "config.json").read_text())
    for name, value, message in [
        ("use_skip_connections", "false", "ElmoConfig.use_skip_connections must be true or false, got 'false' (str)"),
        ("char_cnn_filters", [[1.9, 4], [2, 8]], "ElmoConfig.char_cnn_filters must be a list of lists of integers"),
        ("cell_clip", {}, "ElmoConfig.cell_clip must be a number or null, got {} (dict)"),
        ("dropout", True, "ElmoConfig.dropout must be a number, got True (bool)"),
        ("num_lstm_layers", 2.0, "ElmoConfig.num_lstm_layers must be an integer, got 2.0 (float)"),
        ("lm_vocab_size", "10", "ElmoConfig.lm_vocab_size must be an integer or null"),
    ]:
        (folder / "config.json").write_text(json.dumps({**config, name: value}))
        with pytest.raises(ValueError) as raised:
            ElmoModel.from_pretrained(folder)
        assert str(raised.value).startswith(message), str(raised.value)
    model_config = ElmoConfig(**TINY)
    with pytest.raises(ValueError, match=r"^ElmoConfig.use_skip_connections must be true or false, got 'no'"):
        model_config.use_skip_connections = "no"
    with pytest.raises(ValueError, match=r"^ElmoConfig.num_lstm_layers must be an integer, got '3'"):
        model_config.num_hidden_layers = "3"
    assert model_config.use_skip_connections is True and model_config.num_lstm_layers == 2

    # "The same holds for every ElmoConfig field, in config.json or set in code": a value of the wrong type for each.
    for name, annotation in ElmoConfig.__annotations__.items():
        value = 1 if annotation is str else [["x"]] if "list" in str(annotation) else "x"
        (folder / "config.json").write_text(json.dumps({**config, name: value}))
        with pytest.raises(ValueError, match=rf"^ElmoConfig\.{name} "):
            ElmoConfig.from_pretrained(folder)
        with pytest.raises(ValueError, match=rf"^ElmoConfig\.{name} "):
            setattr(ElmoConfig(**TINY), name, value)
    assert len(ElmoConfig.__annotations__) >= 30

    # What the string "false" did: skip connections on, the top layer 0.66 off the original model's (first batch).
    (folder / "config.json").write_text(json.dumps({**config, "use_skip_connections": True}))
    fixture, model = FIXTURE_SETS["bilm-tf"], ElmoModel.from_pretrained(folder).eval()
    batch = fixture.batches()[0]
    with torch.no_grad():
        top = model(**ElmoTokenizer.from_pretrained(folder)(batch, is_split_into_words=True, padding=True,
                                                             return_tensors="pt")).last_hidden_state
    off = max(np.abs(top[k, :len(words)].numpy() - fixture.expected_top_layer(k, 0)).max() for k, words in enumerate(batch))
    assert round(float(off), 2) == 0.66


# ---- a checkpoint without every weight of the biLM is refused, by loading and by --to-original --------------------


def drop_tensors(folder: Path, *names: str) -> None:
    state = load_file(folder / "model.safetensors")
    save_file({name: tensor for name, tensor in state.items() if name not in names}, folder / "model.safetensors",
              metadata={"format": "pt"})


def edit_config(folder: Path, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


def test_loading_refuses_a_checkpoint_without_every_biLM_weight(converted, tmp_path):
    """transformers starts a missing weight afresh (nan was seen, from uninitialised memory, before the
    initialisation reached every module) and drops a weight the config has no place for, saying so only in its load
    report."""
    folder = tmp_path / "model"
    shutil.copytree(converted["allennlp-elmo"], folder)
    drop_tensors(folder, "layers.1.recurrent_weight", "char_encoder.highway.1.carry.bias")
    loaders = {
        ElmoModel: {},
        ElmoForSequenceClassification: {"num_labels": 3},  # the biLM inside a head
        ElmoForTokenClassification: {"num_labels": 3},
        ElmoForPreTraining: {"lm_vocab_size": 7},  # the body of the pretraining model
    }
    for model_class, kwargs in loaders.items():
        prefix = "" if model_class is ElmoModel else "elmo."
        for report in ({}, {"output_loading_info": False}):  # (False, the default, given: a TypeError before)
            with pytest.raises(ValueError) as raised:
                model_class.from_pretrained(folder, **kwargs, **report)
            assert str(raised.value) == (
                f"{folder}: not a complete {model_class.__name__}: it lacks the tensor "
                f"{prefix}char_encoder.highway.1.carry.bias (and 1 more)"
            )
        # Who asks for transformers' load report gets it instead: it names what is missing.
        _, info = model_class.from_pretrained(folder, output_loading_info=True, **kwargs)
        assert {f"{prefix}layers.1.recurrent_weight", f"{prefix}char_encoder.highway.1.carry.bias"} <= set(info["missing_keys"])
    # A config with fewer highway layers than the weights: the extra layer would be dropped.
    shutil.rmtree(folder)
    shutil.copytree(converted["allennlp-elmo"], folder)
    edit_config(folder, num_highway_layers=1)
    for model_class, kwargs in loaders.items():
        with pytest.raises(ValueError, match=r"holds the tensor char_encoder\.highway\.1\.carry\.bias, which its config\.json has no place for \(and 3 more\)"):
            model_class.from_pretrained(folder, **kwargs)
    # A weight of another shape, even where the caller lets transformers start mismatched weights afresh.
    shutil.rmtree(folder)
    shutil.copytree(converted["allennlp-elmo"], folder)
    state = load_file(folder / "model.safetensors")
    state["layers.0.bias"] = state["layers.0.bias"][:, :-4].contiguous()
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    for ignore in (False, True):  # (without the flag, transformers' error pointed to its load report)
        with pytest.raises(ValueError, match=r"holds the tensor layers\.0\.bias of shape \[2, 252\], where its config\.json needs \[2, 256\]"):
            ElmoModel.from_pretrained(folder, ignore_mismatched_sizes=ignore)
    # Who asks for transformers' load report gets it instead: it names what is wrong, with ignore_mismatched_sizes
    # or without (transformers' bare "look at the above report" error before, and no report).
    for ignore in (True, False):
        _, info = ElmoModel.from_pretrained(folder, ignore_mismatched_sizes=ignore, output_loading_info=True)
        assert [key for key, *_ in info["mismatched_keys"]] == ["layers.0.bias"]


def test_loading_refuses_weights_cut_short_naming_the_model(converted, tmp_path, capsys):
    """A model.safetensors cut short (a copy or download interrupted) is one ValueError naming the folder, in Python
    and from `hf-elmo embed`, not safetensors' traceback that names no file."""
    from hf_elmo.cli import main as hf_elmo_main

    folder = tmp_path / "model"
    shutil.copytree(converted["allennlp-elmo"], folder)
    weights = folder / "model.safetensors"
    with weights.open("r+b") as file:
        file.truncate(weights.stat().st_size // 2)
    message = f"{folder}: its weights (.safetensors) cannot be read, the file is damaged or incomplete: "
    for model_class, kwargs in ((ElmoModel, {}), (ElmoForTokenClassification, {"num_labels": 3}),
                                (ElmoModel, {"output_loading_info": True})):
        with pytest.raises(ValueError) as raised:
            model_class.from_pretrained(folder, **kwargs)
        assert str(raised.value).startswith(message) and "incomplete metadata" in str(raised.value)
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    code = hf_elmo_main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"), "--model", str(folder)])
    assert_only_an_error_line(code, capsys.readouterr().err, message)
    assert not (tmp_path / "out.hdf5").exists()


def test_new_heads_may_start_afresh(converted, tmp_path):
    """What may be missing: a new head's classifier or softmax, and a pretraining checkpoint's scalar mixes."""
    body = ElmoModel.from_pretrained(converted["allennlp-elmo"])
    head, info = ElmoForSequenceClassification.from_pretrained(converted["allennlp-elmo"], num_labels=3, output_loading_info=True)
    assert info["missing_keys"] == {"classifier.weight", "classifier.bias"}
    assert torch.equal(head.elmo.layers[1].recurrent_weight, body.layers[1].recurrent_weight)
    pretraining = ElmoForPreTraining.from_pretrained(converted["allennlp-elmo"], lm_vocab_size=7)
    pretraining.save_pretrained(tmp_path / "pretrained")
    assert not any(name.startswith("elmo.scalar_mixes") for name in load_file(tmp_path / "pretrained" / "model.safetensors"))
    reloaded = ElmoModel.from_pretrained(tmp_path / "pretrained")
    assert torch.equal(reloaded.scalar_mixes[0].gamma, torch.ones(1))
    ElmoForTokenClassification.from_pretrained(tmp_path / "pretrained", num_labels=2)


def test_a_heads_classifier_of_other_labels_is_named_unless_it_may_start_afresh(converted, tmp_path):
    """A tagger saved with 3 labels and loaded with 5: a RuntimeError naming the classifier's weight (before its bias)
    and both shapes (as transformers raises one, but pointing to its load report), unless
    `ignore_mismatched_sizes=True` starts the classifier afresh, the biLM loaded as saved. transformers' load report,
    which said the classifier was started afresh, is not shown for the refused load; a new head's still is."""
    reports = []
    report_handler = logging.Handler()
    report_handler.emit = lambda record: reports.append(record.getMessage())
    LOAD_REPORT_LOGGER.addHandler(report_handler)
    try:
        ElmoForTokenClassification.from_pretrained(converted["allennlp-elmo"], num_labels=3).save_pretrained(tmp_path / "tagger")
        assert len(reports) == 1 and "LOAD REPORT" in reports[0] and "classifier.weight | MISSING" in reports[0]
        reports.clear()
        with pytest.raises(RuntimeError) as raised:
            ElmoForTokenClassification.from_pretrained(tmp_path / "tagger", num_labels=5)
        assert not [report for report in reports if "LOAD REPORT" in report]
    finally:
        LOAD_REPORT_LOGGER.removeHandler(report_handler)
    body = ElmoModel.from_pretrained(converted["allennlp-elmo"])
    hidden = body.config.hidden_size
    assert str(raised.value) == (f"{tmp_path / 'tagger'}: holds the tensor classifier.weight of shape [3, {hidden}], "
                                 f"where this ElmoForTokenClassification needs [5, {hidden}]: pass "
                                 "ignore_mismatched_sizes=True to start it afresh")
    assert (raised.value.key, raised.value.found, raised.value.expected) == ("classifier.weight", [3, hidden], [5, hidden])
    for ignore in (True, False):  # (the report, asked for, instead of the error)
        tagger, info = ElmoForTokenClassification.from_pretrained(tmp_path / "tagger", num_labels=5,
                                                                  output_loading_info=True, ignore_mismatched_sizes=ignore)
        assert sorted(key for key, *_ in info["mismatched_keys"]) == ["classifier.bias", "classifier.weight"]
    tagger = ElmoForTokenClassification.from_pretrained(tmp_path / "tagger", num_labels=5, ignore_mismatched_sizes=True)
    assert tagger.classifier.weight.shape == (5, body.config.hidden_size)
    assert torch.equal(tagger.elmo.layers[1].recurrent_weight, body.layers[1].recurrent_weight)


def damage_checkpoint(folder: Path, case: str) -> None:
    if case == "no folder":
        shutil.rmtree(folder)
    elif case == "a file, not a folder":
        shutil.rmtree(folder)
        folder.write_text("x")
    elif case == "no config.json":
        (folder / "config.json").unlink()
    elif case == "config.json not JSON":
        (folder / "config.json").write_text('{"model_type": "elmo",')
    elif case == "config.json a list":
        (folder / "config.json").write_text("[]")
    elif case == "config.json with a string flag":
        edit_config(folder, use_skip_connections="false")
    elif case == "no weights":
        (folder / "model.safetensors").unlink()
    elif case == "truncated weights":
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    elif case == "a tensor missing":
        drop_tensors(folder, "char_encoder.highway.0.transform.weight")
    elif case == "fewer highway layers in config.json":
        edit_config(folder, num_highway_layers=1)
    elif case == "a tensor of another shape":
        state = load_file(folder / "model.safetensors")
        state["layers.0.bias"] = state["layers.0.bias"][:, :-4].contiguous()
        save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    elif case == "a NaN in a weight":
        state = load_file(folder / "model.safetensors")
        state["layers.1.bias"][0, 3] = float("nan")
        save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    elif case in ("a float64 weight that float32 would round", "a float64 weight beyond float32's range",
                  "a NaN in a float64 weight"):
        value = {"a float64 weight beyond float32's range": 1e300, "a NaN in a float64 weight": float("nan")}.get(case)
        model = ElmoModel.from_pretrained(folder).double()  # (saved so, its config.json says float64)
        with torch.no_grad():
            model.layers[1].bias[0, 3] = model.layers[1].bias[0, 3] + 1e-12 if value is None else value
        model.save_pretrained(folder)
    elif case == "one float64 layer, in a float32 model":
        model = ElmoModel.from_pretrained(folder)
        model.layers[1].double()  # (config.json says float32: loading rounded the layer before it was checked)
        with torch.no_grad():
            model.layers[1].bias[0, 3] += 1e-12
        model.save_pretrained(folder)
        assert json.loads((folder / "config.json").read_text())["dtype"] == "float32"


TO_ORIGINAL_BAD_INPUTS = {
    "no folder": ["model: not found"],
    "a file, not a folder": ["model: is a file, not a checkpoint folder"],
    "no config.json": ["model: no config.json"],
    "config.json not JSON": ["config.json: not a JSON config file"],
    "config.json a list": ["config.json: not a config file: it holds a JSON list"],
    "config.json with a string flag": ["config.json: ElmoConfig.use_skip_connections must be true or false, got 'false'"],
    "no weights": ["model: no model.safetensors"],
    "truncated weights": ["model.safetensors: not a readable safetensors file"],
    "a tensor missing": ["model: not a complete ElmoModel: it lacks the tensor char_encoder.highway.0.transform.weight"],
    "fewer highway layers in config.json": ["which its config.json has no place for"],
    # (transformers' error pointed to its load report, which the command silences)
    "a tensor of another shape": ["model: not a complete ElmoModel: it holds the tensor layers.0.bias of shape [2, 252], "
                                  "where its config.json needs [2, 256]"],
    # (the read-back of weights.hdf5 refused it, naming the staging folder, gone by then, and the dataset)
    "a NaN in a weight": ["model: tensor layers.1.bias holds 1 non-finite value (NaN or infinity)"],
    # (what it is, not a value that float32 would round)
    "a NaN in a float64 weight": ["model: tensor layers.1.bias holds 1 non-finite value (NaN or infinity)"],
    # (written rounded, and read back equal to what was written; 1e300 became infinity, refused naming the staging)
    "a float64 weight that float32 would round": [
        "model: tensor layers.1.bias is float64, with values that float32 (the original format's) would round"],
    "a float64 weight beyond float32's range": [
        "model: tensor layers.1.bias is float64, with values that float32 (the original format's) would round"],
    "one float64 layer, in a float32 model": [
        "model: tensor layers.1.bias is float64, with values that float32 (the original format's) would round"],
}


@pytest.mark.parametrize("case", TO_ORIGINAL_BAD_INPUTS)
def test_to_original_refuses_a_broken_checkpoint(converted, tmp_path, capsys, monkeypatch, case):
    folder = tmp_path / "model"
    shutil.copytree(converted["allennlp-elmo"], folder)
    damage_checkpoint(folder, case)
    capsys.readouterr()  # (the progress bars of a damage that loads and saves the model)
    monkeypatch.chdir(tmp_path)  # paths as a user types them, relative
    code, _, err = run_main(capsys, "--to-original", "--model-dir", "model", "--output-dir", "back")
    assert_only_an_error_line(code, err, *TO_ORIGINAL_BAD_INPUTS[case])
    assert not (tmp_path / "back").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".back")]


def test_to_original_of_a_float64_checkpoint_that_float32_holds_is_exact(converted, tmp_path):
    """A checkpoint saved in float64 whose values float32 holds (as the way back refuses the others) is written back
    with the original's very values."""
    folder = tmp_path / "model"
    ElmoModel.from_pretrained(converted["allennlp-elmo"]).double().save_pretrained(folder)
    back = read_datasets(convert_hf_to_original(folder, tmp_path / "back") / "weights.hdf5")
    original = read_datasets(FIXTURE_SETS["allennlp-elmo"].weight_file)
    assert back.keys() == original.keys() and all(np.array_equal(back[key], original[key]) for key in original)


def test_to_original_reads_a_sharded_checkpoint_and_names_a_broken_index_or_shard(converted, tmp_path, capsys):
    """A checkpoint saved in shards (model.safetensors.index.json and the files it names) converts back exactly; an
    index that does not read or names what is not a file beside it, or a shard cut short, is one error line naming
    the file, and nothing is written."""
    folder = tmp_path / "model"
    ElmoModel.from_pretrained(converted["allennlp-elmo"]).save_pretrained(folder, max_shard_size="20KB")
    shards = sorted(folder.glob("model-*.safetensors"))
    assert len(shards) > 1 and not (folder / "model.safetensors").exists()
    back = read_datasets(convert_hf_to_original(folder, tmp_path / "back") / "weights.hdf5")
    original = read_datasets(FIXTURE_SETS["allennlp-elmo"].weight_file)
    assert back.keys() == original.keys() and all(np.array_equal(back[key], original[key]) for key in original)
    index = folder / "model.safetensors.index.json"
    whole_index, whole_shard = index.read_text(), shards[-1].read_bytes()
    capsys.readouterr()  # (the progress bars of the saving and loading above)
    weight_map = json.loads(whole_index)["weight_map"]
    for damage, message in [(lambda: index.write_text('{"metadata": {}}'), f"{index}: not a safetensors index"),
                            *[(lambda name=name: index.write_text(json.dumps({"weight_map": {**weight_map, "x": name}})),
                               f"{index}: not a safetensors index (its weight_map names {name!r}, not a file name)")
                              for name in (1, "", "../model.safetensors")],
                            (lambda: shards[-1].write_bytes(whole_shard[:100]),
                             f"{shards[-1]}: not a readable safetensors file")]:
        damage()
        code, _, err = run_main(capsys, "--to-original", "--model-dir", folder, "--output-dir", tmp_path / "out")
        assert_only_an_error_line(code, err, message)
        index.write_text(whole_index)
        shards[-1].write_bytes(whole_shard)
    assert not (tmp_path / "out").exists()


def test_each_direction_needs_its_inputs(tmp_path, capsys):
    """--to-original needs --model-dir, the other direction --options-file and --weight-file: argparse's usage
    error (exit code 2) says which, before anything is read or written."""
    for arguments, message in [(["--to-original"], "--to-original needs --model-dir"),
                               (["--options-file", "options.json"],
                                "converting original weights needs --options-file and --weight-file")]:
        with pytest.raises(SystemExit) as raised:
            main([*arguments, "--output-dir", str(tmp_path / "out")])
        assert raised.value.code == 2 and capsys.readouterr().err.strip().endswith(f"error: {message}")
    assert list(tmp_path.iterdir()) == []


def test_output_folders_that_cannot_be_written_fail_before_the_work(original, converted, tmp_path, capsys):
    """Both directions: checked before the input is read (the input named here does not exist)."""
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    cases = {
        a_file: "file.txt: is a file, not a folder",
        a_file / "out": "file.txt: is a file, so",
        unwritable_folder(tmp_path) / "out": "cannot write there",
    }
    for output, expected in cases.items():
        for args in (["--options-file", original / "options.json", "--weight-file", tmp_path / "none.hdf5"],
                     ["--to-original", "--model-dir", tmp_path / "no-model"]):
            code, _, err = run_main(capsys, *args, "--output-dir", output)
            assert_only_an_error_line(code, err, expected)
    assert a_file.read_text() == "x"


def test_an_empty_output_dir_is_refused_and_the_current_folder_kept(original, converted, tmp_path, monkeypatch, capsys):
    """An empty --output-dir (an unset shell variable) read as the current folder, which --overwrite replaced with the
    model, deleting what was there; both directions refuse it before any work."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_text("mine")
    monkeypatch.chdir(work)
    for args in (["--options-file", original / "options.json", "--weight-file", original / "lm_weights.hdf5"],
                 ["--to-original", "--model-dir", converted]):
        code, _, err = run_main(capsys, *args, "--output-dir", "", "--overwrite")
        assert_only_an_error_line(code, err, "the path of the folder to write is empty")
    assert [path.name for path in work.iterdir()] == ["notes.txt"]


def test_a_state_dict_passed_in_may_leave_weights_to_initialise():
    """transformers' own tests load `from_pretrained(None, config=..., state_dict={})`: the caller's weights."""
    model, info = ElmoModel.from_pretrained(None, config=ElmoConfig(**TINY), state_dict={}, output_loading_info=True)
    assert "char_encoder.char_embedding.weight" in info["missing_keys"] and type(model) is ElmoModel
