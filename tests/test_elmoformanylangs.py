"""ELMoForManyLangs models (conversion/convert_elmoformanylangs.py): equal to the package's outputs at every layer,
its carried state through initial_states, its spelling, the way back with identical files, and bad input.

The reference models and outputs were made with the package itself (conversion/make_elmoformanylangs_fixtures.py,
committed in tests/fixtures/elmoformanylangs)."""

import json
import pickle
import re
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from hf_elmo import ElmoModel, ElmoTokenizer
from hf_elmo.lexicon import read_dictionary

from conftest import (DEVICES, ELMOFORMANYLANGS, ELMOFORMANYLANGS_MODELS, README, assert_only_an_error_line,
                      readme_python_block, unreadable_file, unwritable_folder)
from conversion.convert_elmoformanylangs import convert_elmoformanylangs_to_hf, convert_hf_to_elmoformanylangs, main
from conversion.original_format import ConversionError

SENTENCES = json.loads((ELMOFORMANYLANGS / "sentences.json").read_text(encoding="utf-8"))
TOLERANCE = 2e-5


def expected_outputs(name: str) -> dict[str, np.ndarray]:
    with np.load(ELMOFORMANYLANGS / f"{name}_outputs.npz") as arrays:
        return {key: arrays[key] for key in arrays.files}


def every_layer(model: ElmoModel, tokenizer: ElmoTokenizer, sentences, path: str, **kwargs):
    """[B, L + 1, T, 2P] (on the CPU) and the model's output along `path`: "plain", the definition (autograd on);
    "fused", the fused training paths (autograd on); "fast", the inference path."""
    batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt").to(model.device)
    model.set_fast_path(path != "plain")
    try:
        with torch.set_grad_enabled(path != "fast"):
            output = model(**batch, **kwargs)
    finally:
        model.set_fast_path(True)
    return torch.stack(output.hidden_states, dim=1).detach().cpu(), output


def package_rows(sentences) -> list[int]:
    """The package's batch rows: the sentences sorted by length, longest first (a stable sort), which is also
    the row its carried state is kept in."""
    return sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))


@pytest.fixture(scope="module")
def loaded(converted_elmoformanylangs):
    return {name: (ElmoModel.from_pretrained(folder).eval(), ElmoTokenizer.from_pretrained(folder))
            for name, folder in converted_elmoformanylangs.items()}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("path", ["plain", "fused", "fast"])
@pytest.mark.parametrize("sentence_set", list(SENTENCES["sets"]))
@pytest.mark.parametrize("name", ELMOFORMANYLANGS_MODELS)
def test_every_layer_equals_the_package(loaded, name, sentence_set, path, device):
    """sents2elmo(output_layer=-2) at every layer and output_layer=-1 (their average), within 2e-5."""
    model, tokenizer = loaded[name]
    sentences = SENTENCES["sets"][sentence_set]
    expected = expected_outputs(name)
    try:
        layers, output = every_layer(model.to(device), tokenizer, sentences, path)
    finally:
        model.to("cpu")
    for i, words in enumerate(sentences):
        found = layers[i, :, : len(words)].numpy()
        assert found.shape == expected[f"{sentence_set}/{i}/all"].shape
        np.testing.assert_allclose(found, expected[f"{sentence_set}/{i}/all"], rtol=0, atol=TOLERANCE)
        np.testing.assert_allclose(found.mean(0), expected[f"{sentence_set}/{i}/average"], rtol=0, atol=TOLERANCE)
        assert not layers[i, :, len(words) :].any()  # padding is exactly zero


@pytest.mark.parametrize("name", ELMOFORMANYLANGS_MODELS)
def test_carried_state_through_initial_states(loaded, name):
    """The package carries its LSTM state from call to call, row by row: two sents2elmo calls without a reset
    are two batches here, the second given the first's final_states (rows in the package's order)."""
    model, tokenizer = loaded[name]
    expected = expected_outputs(name)
    states = None
    for call, sentences in enumerate(SENTENCES["stateful_calls"]):
        rows = package_rows(sentences)
        layers, output = every_layer(model, tokenizer, [sentences[i] for i in rows], path="fast", initial_states=states)
        for row, i in enumerate(rows):
            found = layers[row, :, : len(sentences[i])].numpy()
            np.testing.assert_allclose(found, expected[f"stateful/{call}/{i}/all"], rtol=0, atol=TOLERANCE)
        states = output.final_states
    # Stateless, the second call's sentences give other vectors: the state is what made them equal.
    layers, _ = every_layer(model, tokenizer, [sentences[i] for i in rows], path="fast")
    assert np.abs(layers[0, 1:, : len(sentences[rows[0]])].numpy() - expected[f"stateful/1/{rows[0]}/all"][1:]).max() > 1e-3


def test_every_parameter_matters(loaded):
    """The fixtures exercise every weight: changing any tensor of the converted model changes the outputs (so an
    exact match is no accident of unused weights), and the clipping is reached."""
    model, tokenizer = loaded["with_words"]
    sentences = [words for group in SENTENCES["sets"].values() for words in group]
    reference, _ = every_layer(model, tokenizer, sentences, path="plain")
    for name, parameter in model.named_parameters():
        if name.startswith("scalar_mixes"):
            continue
        with torch.no_grad():
            saved = parameter.clone()
            parameter.add_(0.05 * torch.randn_like(parameter))
            if name == "char_encoder.char_embedding.weight":
                parameter[0] = saved[0]  # the padding word's row: no real word reads it
            changed, _ = every_layer(model, tokenizer, sentences, path="plain")
            parameter.copy_(saved)
        assert (changed - reference).abs().max() > 1e-4, name
    # The package's <pad> rows are learned (its padding_idx only stops their gradient): the padding characters of
    # every word shorter than 48 characters read that row, so zeroing it changes their vectors.
    embedding = model.char_encoder.char_embedding.weight
    assert embedding[model.config.pad_char_id].abs().min() > 0
    with torch.no_grad():
        saved = embedding[model.config.pad_char_id].clone()
        embedding[model.config.pad_char_id] = 0.0
        changed, _ = every_layer(model, tokenizer, sentences, path="plain")
        embedding[model.config.pad_char_id] = saved
    short = torch.tensor([[len(word) < 48 for word in words] + [False] * (changed.shape[2] - len(words)) for words in sentences])
    assert (changed[:, 0] - reference[:, 0]).abs().amax(-1)[short].min() > 0
    for layer in model.layers:
        layer.cell_clip = layer.proj_clip = None
    try:
        unclipped, _ = every_layer(model, tokenizer, sentences, path="plain")
    finally:
        for layer in model.layers:
            layer.cell_clip = layer.proj_clip = model.config.cell_clip
    assert (unclipped - reference).abs().max() > 1e-3


# ---- the package's spelling ------------------------------------------------------------------------------------


def test_tokenizer_spells_words_as_the_package_does(loaded):
    _, tokenizer = loaded["with_words"]
    chars = read_dictionary(ELMOFORMANYLANGS / "with_words" / "char.dic")
    words = read_dictionary(ELMOFORMANYLANGS / "with_words" / "word.dic")
    padding = chars["<pad>"] + 1
    # Its code begins a word with the id of <eow> and ends it with the id of <bow>; every id is the package's + 1.
    assert tokenizer.word_to_char_ids("天气")[:4] == [chars["<eow>"] + 1, chars["天"] + 1, chars["气"] + 1, chars["<bow>"] + 1]
    assert tokenizer.word_to_char_ids("天气")[4:] == [padding] * 46
    # Code points, not bytes or UTF-16 units; unknown characters are <oov>.
    assert tokenizer.word_to_char_ids("𝔘天")[1:4] == [chars["<oov>"] + 1, chars["天"] + 1, chars["<bow>"] + 1]
    # Words are cut to 48 characters, and looked up in word.dic after the cut.
    long_word = "天" * 60
    assert tokenizer.word_to_char_ids(long_word) == [chars["<eow>"] + 1] + [chars["天"] + 1] * 48 + [chars["<bow>"] + 1]
    assert tokenizer.word_to_id("天气") == words["天气"] and tokenizer.word_to_id("天气很好") == words["<oov>"]
    # <bos> and <eos> given as words are the sentence boundaries, as the model adds them; raw text splits them as
    # any punctuation (the package's users pass words, not text).
    assert tokenizer.word_to_char_ids("<bos>")[:3] == [chars["<eow>"] + 1, chars["<bos>"] + 1, chars["<bow>"] + 1]
    assert tokenizer.word_to_id("<eos>") == words["<eos>"]
    boundary = tokenizer([["<bos>", "天气"]], is_split_into_words=True)
    assert boundary["input_ids"][0][0] == tokenizer.word_to_char_ids("<bos>")
    assert boundary["input_word_ids"][0][0] == words["<bos>"]
    assert tokenizer.tokenize("<bos> 天气") == ["<", "bos", ">", "天", "气"]
    # Segmented words stay whole; raw text is split as for any ELMo (each Chinese character a word).
    batch = tokenizer([["天气", "不错"]], is_split_into_words=True)
    assert batch["input_word_ids"] == [[words["天气"], words["不错"]]]
    assert tokenizer.tokenize("天气不错！Hi there.") == ["天", "气", "不", "错", "！", "Hi", "there", "."]
    assert tokenizer.decode(batch["input_ids"][0]) == "天气 不错"
    assert tokenizer.decode(tokenizer.word_to_char_ids("Ж天")) == "<oov>天"


def test_padding_and_word_ids_through_the_collator(loaded):
    model, tokenizer = loaded["with_words"]
    from transformers import DataCollatorWithPadding

    features = [tokenizer(words, is_split_into_words=True) for words in (["天气", "不错", "！"], ["你"])]
    batch = DataCollatorWithPadding(tokenizer)(features)
    assert batch["input_word_ids"].shape == (2, 3) and batch["input_ids"].shape == (2, 3, 50)
    assert batch["input_word_ids"][1, 1:].tolist() == [tokenizer.lexicon.pad_word_id] * 2
    with torch.no_grad():
        collated = model(**batch).hidden_states[-1]
        alone = model(**tokenizer([["你"]], is_split_into_words=True, return_tensors="pt")).hidden_states[-1]
    # (not bit for bit: a batch of 2 rows and one of 1 may take different kernels, fast_linear.py)
    assert torch.allclose(collated[1, :1], alone[0], atol=1e-6, rtol=0)
    _, chars_tokenizer = loaded["chars_only"]
    assert "input_word_ids" not in chars_tokenizer(["天气"], is_split_into_words=True)


def test_word_input_errors_are_clear(loaded):
    model, tokenizer = loaded["with_words"]
    batch = tokenizer([["天气"]], is_split_into_words=True, return_tensors="pt")
    with pytest.raises(ValueError, match="pass input_word_ids"):
        model(input_ids=batch["input_ids"])
    with pytest.raises(ValueError, match=r"outside word.dic \[0, 51\)"):
        model(input_ids=batch["input_ids"], input_word_ids=torch.tensor([[51]]))
    with pytest.raises(ValueError, match=r"input_word_ids must be \[1, 1\]"):
        model(input_ids=batch["input_ids"], input_word_ids=torch.tensor([[1, 2]]))
    chars_model, _ = loaded["chars_only"]
    with pytest.raises(ValueError, match="has no word input"):
        chars_model(**batch)


def test_word_id_is_part_of_the_cache_key(loaded):
    """Two words spelled alike but with different word ids get different vectors, also from the token cache."""
    model, tokenizer = loaded["with_words"]
    batch = tokenizer([["天气", "天气"]], is_split_into_words=True, return_tensors="pt")
    batch["input_word_ids"][0, 1] = tokenizer.lexicon.oov_word_id
    model.clear_caches()
    with torch.no_grad():
        first = model(**batch).hidden_states[0]
        again = model(**batch).hidden_states[0]  # from the cache
    assert not torch.equal(first[0, 0], first[0, 1]) and torch.equal(first, again)


# ---- the folder, the way back, bad input ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ELMOFORMANYLANGS_MODELS)
def test_way_back_gives_identical_tensors_and_dictionaries(converted_elmoformanylangs, tmp_path, name):
    """The exported folder holds the package's files with every tensor and dictionary as they were, so the package
    loads it and gives the same outputs (`make check-elmoformanylangs` runs the package on it); each tensor is saved
    with a storage of its own, as the package's are, not as a view into a larger one."""
    source = ELMOFORMANYLANGS / name
    back = convert_hf_to_elmoformanylangs(converted_elmoformanylangs[name], tmp_path / "back")
    assert sorted(p.name for p in back.iterdir()) == sorted(p.name for p in source.iterdir())
    for file_name in ("token_embedder.pkl", "encoder.pkl"):
        original = torch.load(source / file_name, weights_only=True)
        found = torch.load(back / file_name, weights_only=True)
        assert list(found) == list(original), file_name
        for tensor_name, tensor in original.items():
            assert found[tensor_name].dtype == tensor.dtype and torch.equal(found[tensor_name], tensor), tensor_name
            assert found[tensor_name].numpy().tobytes() == tensor.numpy().tobytes(), tensor_name  # (bits: -0.0 too)
            assert found[tensor_name].untyped_storage().nbytes() == found[tensor_name].nbytes, tensor_name
    for file_name in ("char.dic", "word.dic"):
        assert (back / file_name).read_bytes() == (source / file_name).read_bytes()
    architecture = json.loads((back / json.loads((back / "config.json").read_text())["config_path"]).read_text())
    original_architecture = json.loads((source / "architecture.json").read_text())
    for section in ("encoder", "token_embedder"):
        assert architecture[section] == original_architecture[section]


def test_converted_folder_is_complete(converted_elmoformanylangs):
    folder = converted_elmoformanylangs["with_words"]
    names = {path.name for path in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer_config.json", "char.dic", "word.dic", "README.md",
            "configuration_elmo.py", "modeling_elmo.py", "tokenization_elmo.py", "lexicon.py"} <= names
    config = json.loads((folder / "config.json").read_text())
    assert config["alphabet"] == "vocabulary" and config["forget_bias"] == 0.0 and config["word_embedding_dim"] == 6
    assert config["auto_map"]["AutoModel"] == "modeling_elmo.ElmoModel"
    card = (folder / "README.md").read_text()
    assert "language: zh" in card and "ELMoForManyLangs model `with_words`" in card and "${" not in card
    # (the counts are of the files' entries, the special ones among them: 55 characters and 6 special entries)
    lexicon = ElmoTokenizer.from_pretrained(folder).lexicon
    assert len(lexicon.chars) == 61 and len(lexicon.words) == 51
    assert "char.dic: 61 entries, the special `<bos>`, `<eos>`, `<oov>`, `<pad>`, `<bow>` and `<eow>` among them" in card
    assert "word.dic: 51 entries, the special `<oov>`, `<bos>`, `<eos>` and `<pad>` among them" in card


def test_released_models_name_the_packages_own_architecture(converted_elmoformanylangs, tmp_path):
    """A released model's config.json names configs/cnn_50_100_512_4096_sample.json, a file of the package."""
    from conversion.elmoformanylangs_format import read_architecture

    folder = tmp_path / "zhs.model"
    shutil.copytree(ELMOFORMANYLANGS / "with_words", folder)
    (folder / "architecture.json").unlink()
    (folder / "config.json").write_text(json.dumps({"config_path": "../configs/cnn_50_100_512_4096_sample.json"}))
    architecture, source = read_architecture(folder)
    assert source == "elmoformanylangs/configs/cnn_50_100_512_4096_sample.json"
    assert architecture["encoder"]["dim"] == 4096 and architecture["token_embedder"]["word_dim"] == 100
    assert architecture["token_embedder"]["filters"][-1] == [7, 1024]
    # A folder that has a file of that name is read as it says, before the package's own.
    mine = json.loads((ELMOFORMANYLANGS / "with_words" / "architecture.json").read_text())
    (folder / "cnn_50_100_512_4096_sample.json").write_text(json.dumps(mine))
    architecture, source = read_architecture(folder)
    assert source == str(folder / "cnn_50_100_512_4096_sample.json") and architecture == mine


def test_options_the_package_reads_with_defaults_may_be_missing(tmp_path):
    """word_dim, activation, cell_clip and proj_clip may be missing or null in the architecture json, as the package
    reads them with defaults: no word input, relu, no clipping."""
    folder = tmp_path / "model"
    shutil.copytree(ELMOFORMANYLANGS / "chars_only", folder)

    def drop_the_defaults(architecture):
        del architecture["token_embedder"]["word_dim"], architecture["token_embedder"]["activation"]
        del architecture["encoder"]["proj_clip"]
        architecture["encoder"]["cell_clip"] = None

    _edit_json(folder / "architecture.json", drop_the_defaults)
    config = ElmoModel.from_pretrained(convert_elmoformanylangs_to_hf(folder, tmp_path / "out")).config
    assert (config.word_embedding_dim, config.char_cnn_activation, config.cell_clip, config.proj_clip) == (0, "relu", None, None)


class _RunsCode:
    """A pickle that would create a file when unpickled: torch.load(weights_only=True) must refuse it."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _edit_json(path: Path, change) -> None:
    content = json.loads(path.read_text())
    change(content)
    path.write_text(json.dumps(content))


def _edit_state(path: Path, change) -> None:
    state = torch.load(path, weights_only=True)
    change(state)
    torch.save(state, path)


def _damage_an_entry(path: Path, entry: str) -> None:
    """Change 4 bytes in the middle of a zip entry's stored data, leaving its recorded CRC-32 as it was."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(entry)
    data = bytearray(path.read_bytes())
    name_length, extra_length = struct.unpack_from("<HH", data, info.header_offset + 26)  # the local header's
    start = info.header_offset + 30 + name_length + extra_length
    assert info.compress_type == zipfile.ZIP_STORED and info.file_size >= 8
    data[start + 4:start + 8] = bytes(255 - byte for byte in data[start + 4:start + 8])
    path.write_bytes(bytes(data))


def _unknown_compression(path: Path, entry: str) -> None:
    """Mark a zip entry as stored with compression method 99 in the central directory (zipfile cannot read it)."""
    data = bytearray(path.read_bytes())
    name = entry.encode()
    at = data.find(b"PK\x01\x02")
    while at != -1:
        name_length = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46:at + 46 + name_length] == name:
            struct.pack_into("<H", data, at + 10, 99)
            break
        at = data.find(b"PK\x01\x02", at + 4)
    assert at != -1
    path.write_bytes(bytes(data))


BAD_INPUTS = {
    "missing config.json": (lambda f: (f / "config.json").unlink(), ["config.json", "not found"]),
    "config.json not JSON": (lambda f: (f / "config.json").write_text("{"), ["config.json", "not a JSON"]),
    "no config_path": (lambda f: _edit_json(f / "config.json", lambda c: c.pop("config_path")), ["config.json", "config_path"]),
    "a Hugging Face config.json": (
        lambda f: _edit_json(f / "config.json", lambda c: (c.pop("config_path"), c.update(model_type="elmo"))),
        ["config.json: no 'config_path' naming the architecture json: it is a Hugging Face checkpoint's; convert it "
         "back with --to-elmoformanylangs"],
    ),
    "unknown architecture file": (
        lambda f: _edit_json(f / "config.json", lambda c: c.update(config_path="/elsewhere/cnn.json")),
        ["config.json", "/elsewhere/cnn.json", "neither in the folder"],
    ),
    "lstm encoder": (
        lambda f: _edit_json(f / "architecture.json", lambda a: a["encoder"].update(name="lstm")),
        ["architecture.json", "encoder 'lstm'"],
    ),
    "lstm token embedder": (
        lambda f: _edit_json(f / "architecture.json", lambda a: a["token_embedder"].update(name="lstm")),
        ["architecture.json", "token_embedder 'lstm'"],
    ),
    "missing option": (
        lambda f: _edit_json(f / "architecture.json", lambda a: a["encoder"].pop("projection_dim")),
        ["architecture.json", "encoder.projection_dim", "missing"],
    ),
    "missing char.dic": (lambda f: (f / "char.dic").unlink(), ["char.dic", "not found"]),
    "char.dic without <bow>": (
        lambda f: (f / "char.dic").write_text("".join(l for l in (f / "char.dic").read_text().splitlines(True) if not l.startswith("<bow>"))),
        ["char.dic", "<bow>"],
    ),
    "bad dictionary line": (lambda f: (f / "word.dic").write_text("<oov>\t0\nnot a line\tx\n"), ["word.dic", "line 2"]),
    "dictionary ids with a gap": (
        lambda f: (f / "word.dic").write_text((f / "word.dic").read_text().replace("<pad>\t3", "<pad>\t99")),
        ["word.dic", "0 .. 50"],
    ),
    # (refused before the tokenizer is built, which would make a list of 10**10 names)
    "a char.dic id far past its entries": (
        lambda f: (f / "char.dic").write_text((f / "char.dic").read_text() + "新\t10000000000\n"),
        ["char.dic", "its ids must be 0 .. "],
    ),
    "missing weight file": (lambda f: (f / "encoder.pkl").unlink(), ["encoder.pkl", "not found"]),
    # (torch's message was cut after "you have two options", with terminal escape codes)
    "pickled module": (
        lambda f: torch.save(torch.nn.Linear(2, 2), f / "encoder.pkl"),
        ["encoder.pkl: not a torch state dict of tensors (it holds a pickled torch.nn.modules.linear.Linear, which is "
         "never unpickled; only tensors are read)"],
    ),
    "pickle that runs code": (
        lambda f: (f / "token_embedder.pkl").write_bytes(pickle.dumps({"x": _RunsCode(f / "ran")}, protocol=2)),
        ["token_embedder.pkl", "not a torch state dict"],
    ),
    "missing tensor": (
        lambda f: _edit_state(f / "encoder.pkl", lambda s: s.pop("backward_layer_1.state_linearity.bias")),
        ["encoder.pkl", "backward_layer_1.state_linearity.bias", "(96,)", "missing"],
    ),
    "extra tensor": (
        lambda f: _edit_state(f / "token_embedder.pkl", lambda s: s.update({"softmax.weight": torch.zeros(3, 8)})),
        ["token_embedder.pkl", "softmax.weight", "(3, 8)", "unexpected"],
    ),
    "wrong shape": (
        lambda f: _edit_state(f / "token_embedder.pkl", lambda s: s.update({"projection.weight": torch.zeros(8, 30)})),
        ["token_embedder.pkl", "projection.weight", "(8, 30)", "(8, 34)"],
    ),
    "char.dic larger than the embedding": (
        lambda f: (f / "char.dic").write_text((f / "char.dic").read_text() + "新\t61\n"),
        ["token_embedder.pkl", "char_emb_layer.embedding.weight", "(61, 5)", "(62, 5)"],
    ),
    "integer tensor": (
        lambda f: _edit_state(f / "encoder.pkl", lambda s: s.update({"forward_layer_0.state_linearity.bias": torch.zeros(96, dtype=torch.long)})),
        ["encoder.pkl", "forward_layer_0.state_linearity.bias", "int64"],
    ),
    "no model folder": (lambda f: shutil.rmtree(f), ["model: model folder not found"]),
    # (it said "model folder not found")
    "a file, not a model folder": (lambda f: (shutil.rmtree(f), f.write_text("not a model\n")),
                                   ["model: is a file, not a model folder"]),
    "a model of words only": (
        lambda f: _edit_json(f / "architecture.json", lambda a: a["token_embedder"].update(char_dim=0)),
        ["architecture.json", "token_embedder.char_dim is 0 (words only)"],
    ),
    "missing word.dic": (lambda f: (f / "word.dic").unlink(), ["word.dic", "not found"]),
    # torch.load does not check the archive's CRC-32s: a changed byte inside a tensor converted silently.
    "a tensor's bytes damaged": (lambda f: _damage_an_entry(f / "encoder.pkl", "encoder/data/0"),
                                 ["encoder.pkl: damaged: its entry encoder/data/0 fails its CRC-32 check"]),
    "a compression method zipfile cannot read": (lambda f: _unknown_compression(f / "encoder.pkl", "encoder/data/0"),
                                                  ["encoder.pkl: damaged: its zip archive does not read "
                                                   "(NotImplementedError: "]),
    "weights that are not a state dict": (lambda f: torch.save([torch.zeros(2)], f / "encoder.pkl"),
                                          ["encoder.pkl: not a state dict (a mapping of tensor names to tensors)"]),
    # Every option of the architecture is type-checked, named with its file.
    "encoder without a name": (
        lambda f: _edit_json(f / "architecture.json", lambda a: a["encoder"].update(name=None)),
        ["architecture.json: encoder None is not ELMo's biLM"],
    ),
    "word_dim a string": (
        lambda f: _edit_json(f / "architecture.json", lambda a: a["token_embedder"].update(word_dim="6")),
        ["architecture.json: option 'token_embedder.word_dim' must be an integer, got '6'"],
    ),
    "max_characters_per_token a string": (
        lambda f: _edit_json(f / "architecture.json", lambda a: a["token_embedder"].update(max_characters_per_token="50")),
        ["architecture.json: option 'token_embedder.max_characters_per_token' must be an integer, got '50'"],
    ),
    "max_characters_per_token too small": (
        lambda f: _edit_json(f / "architecture.json", lambda a: a["token_embedder"].update(max_characters_per_token=2)),
        ["architecture.json: option 'token_embedder.max_characters_per_token' must be from 3 (begin, end and one "
         "character) to 1000, got 2"],
    ),
    "a cell clip as a string": (
        lambda f: _edit_json(f / "architecture.json", lambda a: a["encoder"].update(cell_clip="3")),
        ["architecture.json: option 'encoder.cell_clip' must be a number or null, got '3'"],
    ),
    "char.dic a folder": (lambda f: ((f / "char.dic").unlink(), (f / "char.dic").mkdir()), ["char.dic: is a folder"]),
    # "²".isdigit() is true, but int() refuses it.
    "an id of non-ASCII digits": (lambda f: (f / "word.dic").write_text((f / "word.dic").read_text() + "<zz>\t\u00b2\n"),
                                  ["word.dic: line 52 is not token<TAB>id: '<zz>\\t\u00b2'"]),
    "float64 values that float32 would round": (
        lambda f: _edit_state(f / "encoder.pkl", lambda s: s.update(
            {"forward_layer_0.state_linearity.bias": s["forward_layer_0.state_linearity.bias"].double() + 1e-12})),
        ["encoder.pkl: tensor forward_layer_0.state_linearity.bias has type float64, with values that float32 cannot hold exactly"],
    ),
    "a NaN": (
        lambda f: _edit_state(f / "token_embedder.pkl", lambda s: s["projection.bias"].__setitem__(2, float("nan"))),
        ["token_embedder.pkl: tensor projection.bias holds 1 non-finite value (NaN or infinity)"],
    ),
    # These gave a TypeError from numpy or from sorting the names.
    "a sparse tensor": (
        lambda f: _edit_state(f / "encoder.pkl", lambda s: s.update(
            {"forward_layer_0.state_linearity.bias": s["forward_layer_0.state_linearity.bias"].to_sparse()})),
        ["encoder.pkl: tensor forward_layer_0.state_linearity.bias is a torch.sparse_coo tensor, expected a dense one"],
    ),
    "a meta tensor": (
        lambda f: _edit_state(f / "encoder.pkl", lambda s: s.update(
            {"forward_layer_0.state_linearity.bias": torch.empty(96, device="meta")})),
        ["encoder.pkl: tensor forward_layer_0.state_linearity.bias holds no values (a meta tensor)"],
    ),
    "a tensor name that is not a string": (
        lambda f: _edit_state(f / "encoder.pkl", lambda s: s.update({1: torch.zeros(2), "extra": torch.zeros(1)})),
        ["encoder.pkl: not a state dict (a mapping of tensor names to tensors)"],
    ),
}


def assert_a_damaged_copy_is_refused(source: Path, damage, must_mention: list[str], tmp_path, capsys, *options) -> None:
    """Convert a copy of `source` (as tmp_path/model) damaged by `damage`: one line `error: ...` naming every text of
    `must_mention`, exit code 2, and no output folder."""
    folder = tmp_path / "model"
    shutil.copytree(source, folder)
    damage(folder)
    code = main([*options, "--model-dir", str(folder), "--output-dir", str(tmp_path / "out")])
    assert_only_an_error_line(code, capsys.readouterr().err, *must_mention)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_fails_clearly_and_writes_nothing(tmp_path, capsys, case):
    assert_a_damaged_copy_is_refused(ELMOFORMANYLANGS / "with_words", *BAD_INPUTS[case], tmp_path, capsys)
    assert not (tmp_path / "model" / "ran").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if case == "no model folder" else ["model"])


def test_weights_in_torchs_format_before_1_6_convert_exactly(converted_elmoformanylangs, tmp_path):
    """The released models were saved by torch 0.4, before torch's zip format: such .pkl files (no zip archive, so
    no CRC-32s to check) convert to the same model as the fixtures' zip files."""
    import zipfile

    folder = tmp_path / "model"
    shutil.copytree(ELMOFORMANYLANGS / "with_words", folder)
    for name in ("encoder.pkl", "token_embedder.pkl"):
        state = torch.load(folder / name, weights_only=True)
        torch.save(state, folder / name, _use_new_zipfile_serialization=False)
        assert not zipfile.is_zipfile(folder / name)
    expected = ElmoModel.from_pretrained(converted_elmoformanylangs["with_words"]).state_dict()
    found = ElmoModel.from_pretrained(convert_elmoformanylangs_to_hf(folder, tmp_path / "out")).state_dict()
    assert found.keys() == expected.keys() and all(torch.equal(found[name], expected[name]) for name in expected)


def test_tensors_of_other_float_types_that_float32_holds_convert_exactly(converted_elmoformanylangs, tmp_path):
    """float16, bfloat16, float8 and float64 tensors whose values are all float32 values convert to the same model;
    so do parameters, as `state_dict(keep_vars=True)` saves them (they require grad: numpy refused them)."""
    folder = tmp_path / "model"
    shutil.copytree(ELMOFORMANYLANGS / "with_words", folder)
    _edit_state(folder / "encoder.pkl", lambda s: s.update({name: t.double() for name, t in s.items()}))
    _edit_state(folder / "token_embedder.pkl", lambda s: s.update({
        "projection.bias": s["projection.bias"].half(), "convolutions.0.bias": s["convolutions.0.bias"].bfloat16(),
        "convolutions.1.bias": s["convolutions.1.bias"].to(torch.float8_e4m3fn),
        "projection.weight": torch.nn.Parameter(s["projection.weight"]),
        "convolutions.2.weight": torch.nn.Parameter(s["convolutions.2.weight"].half())}))
    expected = ElmoModel.from_pretrained(converted_elmoformanylangs["with_words"]).state_dict()
    found = ElmoModel.from_pretrained(convert_elmoformanylangs_to_hf(folder, tmp_path / "out")).state_dict()
    reduced = {"char_encoder.projection.bias": torch.float16, "char_encoder.char_cnn.0.bias": torch.bfloat16,
               "char_encoder.char_cnn.1.bias": torch.float8_e4m3fn, "char_encoder.char_cnn.2.weight": torch.float16}
    for name, tensor in expected.items():
        tensor = tensor.to(reduced[name]).float() if name in reduced else tensor
        assert found[name].dtype == torch.float32 and torch.equal(found[name], tensor), name


def _put_a_nan(folder: Path) -> None:
    from safetensors.torch import load_file, save_file

    state = load_file(folder / "model.safetensors")
    state["layers.1.bias"][0, 3] = float("nan")
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})


def _drop_alphabet(folder: Path) -> None:
    """A folder as saved before the tokenizer recorded its alphabet."""
    _edit_json(folder / "tokenizer_config.json", lambda c: c.pop("alphabet"))


WAY_BACK_BAD_INPUTS = {
    "no model.safetensors": (lambda f: (f / "model.safetensors").unlink(), ["model: no model.safetensors"]),
    # (it said "no config.json of an ELMo, not a Hugging Face checkpoint folder")
    "a file, not a checkpoint folder": (lambda f: (shutil.rmtree(f), f.write_text("not a model\n")),
                                        ["model: is a file, not a checkpoint folder"]),
    "truncated model.safetensors": (
        lambda f: (f / "model.safetensors").write_bytes((f / "model.safetensors").read_bytes()[:20000]),
        ["model.safetensors: not a readable safetensors file"],
    ),
    "a config value of the wrong type": (
        lambda f: _edit_json(f / "config.json", lambda c: c.update(cell_size="abc")),
        ["config.json: ElmoConfig.cell_size must be an integer, got 'abc'"],
    ),
    "no char.dic": (lambda f: (f / "char.dic").unlink(), ["model/char.dic: not found"]),
    "no char.dic, saved before the alphabet was recorded": (
        lambda f: ((f / "char.dic").unlink(), _drop_alphabet(f)), ["model/char.dic: not found"],
    ),
    "char.dic a folder": (lambda f: ((f / "char.dic").unlink(), (f / "char.dic").mkdir()), ["model/char.dic: is a folder"]),
    "no word.dic": (lambda f: (f / "word.dic").unlink(), ["model/word.dic: not found"]),
    "a bad char.dic line": (lambda f: (f / "char.dic").write_text((f / "char.dic").read_text() + "x\ty\n"),
                            ["char.dic: line 62 is not token<TAB>id"]),
    # Dictionaries that are not the model's: the package builds one embedding row per entry, so the folder written
    # (with success reported) did not load there ("size mismatch for word_emb_layer.embedding.weight").
    "word.dic with a word more than the model": (
        lambda f: (f / "word.dic").write_text((f / "word.dic").read_text() + "新词\t51\n"),
        ["model/word.dic: its entries give word_vocab_size 52, but", "model/config.json says 51"],
    ),
    "char.dic with a character more than the model": (
        lambda f: (f / "char.dic").write_text((f / "char.dic").read_text() + "新\t61\n"),
        ["model/char.dic: its entries give n_characters 63, but", "model/config.json says 62"],
    ),
    "word.dic ids with a gap": (
        lambda f: (f / "word.dic").write_text((f / "word.dic").read_text().replace("<pad>\t3", "<pad>\t99")),
        ["model/word.dic: its ids must be 0 .. 50"],
    ),
    # (refused before the tokenizer is built, which would make a list of 10**10 names)
    "a char.dic id far past its entries": (
        lambda f: (f / "char.dic").write_text((f / "char.dic").read_text() + "新\t10000000000\n"),
        ["model/char.dic: its ids must be 0 .. 61"],
    ),
    "tokenizer_config.json not JSON": (lambda f: (f / "tokenizer_config.json").write_text("{"),
                                       ["model/tokenizer_config.json: not a JSON file"]),
    # (the read-back refused it, naming the staging folder, gone by then, and the package's tensor name)
    "a NaN in a weight": (_put_a_nan, ["model: tensor layers.1.bias holds 1 non-finite value (NaN or infinity)"]),
}


@pytest.mark.parametrize("case", WAY_BACK_BAD_INPUTS)
def test_way_back_refuses_a_broken_checkpoint(converted_elmoformanylangs, tmp_path, capsys, case):
    assert_a_damaged_copy_is_refused(converted_elmoformanylangs["with_words"], *WAY_BACK_BAD_INPUTS[case], tmp_path,
                                     capsys, "--to-elmoformanylangs")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


@pytest.mark.parametrize("damaged, entry", [("char.dic", "新\t61\n"), ("word.dic", "新词\t51\n")])
def test_way_back_read_back_errors_name_the_output_folder(converted_elmoformanylangs, tmp_path, monkeypatch, damaged,
                                                          entry):
    """The read-back check refuses either dictionary when it does not read back as the tokenizer's (an entry more on
    its way to the disk), naming the output folder (the staging folder beside it is gone when the user reads the
    message)."""
    from hf_elmo.lexicon import ElmoLexicon

    save = ElmoLexicon.save

    def damaged_save(self, char_file, word_file):
        save(self, char_file, word_file)
        path = Path(char_file if damaged == "char.dic" else word_file)
        path.write_text(path.read_text(encoding="utf-8") + entry, encoding="utf-8")

    monkeypatch.setattr(ElmoLexicon, "save", damaged_save)
    with pytest.raises(ValueError) as raised:
        convert_hf_to_elmoformanylangs(converted_elmoformanylangs["with_words"], tmp_path / "out")
    assert str(raised.value) == f"{tmp_path / 'out'}: the dictionaries did not read back identically"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["char.dic", "word.dic"])
def test_forward_read_back_refuses_a_dictionary_saved_wrong(tmp_path, monkeypatch, capsys, name):
    """The converted folder's tokenizer must read back with the source's dictionaries, entry for entry, not only for
    the probe sentences that the reload check embeds: two entries none of them meets, their ids swapped as the
    tokenizer saves them, make the conversion fail, naming the output folder, and leave nothing behind."""
    from conversion.convert_original_elmo import PROBE_SENTENCES
    from hf_elmo.lexicon import ElmoLexicon

    probed = {word for sentence in PROBE_SENTENCES for word in sentence}
    probed |= {char for word in probed for char in word}
    source = read_dictionary(ELMOFORMANYLANGS / "with_words" / name)
    first, second = [token for token in source if token not in probed and not token.startswith("<")][-2:]
    save = ElmoLexicon.save

    def damaged_save(self, char_file, word_file):
        save(self, char_file, word_file)
        path = Path(char_file if name == "char.dic" else word_file)
        entries = read_dictionary(path)
        entries[first], entries[second] = entries[second], entries[first]
        path.write_text("".join(f"{token}\t{index}\n" for token, index in entries.items()), encoding="utf-8")

    monkeypatch.setattr(ElmoLexicon, "save", damaged_save)
    output = tmp_path / "out"
    code = main(["--model-dir", str(ELMOFORMANYLANGS / "with_words"), "--output-dir", str(output)])
    message = capsys.readouterr().err.strip()
    assert code == 2, message
    assert message == (
        f"error: {output}: the saved tokenizer's {name} did not read back as {ELMOFORMANYLANGS / 'with_words' / name} "
        f"({first!r}: id {source[second]} saved, id {source[first]} in the source)"
    )
    assert list(tmp_path.iterdir()) == []


def test_way_back_read_back_refuses_a_tensor_saved_wrong(converted_elmoformanylangs, tmp_path, monkeypatch):
    """The way back reads its weight files back: a tensor that does not read back as it was written (here one value
    changed on its way to the disk) is refused, named in the output folder, and nothing is left behind."""
    save = torch.save

    def damaged_save(state, path):
        if Path(path).name == "encoder.pkl":
            state = {**state, "forward_layer_0.state_linearity.bias": state["forward_layer_0.state_linearity.bias"] + 1}
        save(state, path)

    monkeypatch.setattr(torch, "save", damaged_save)
    with pytest.raises(ValueError) as raised:
        convert_hf_to_elmoformanylangs(converted_elmoformanylangs["with_words"], tmp_path / "out")
    assert str(raised.value) == (f"{tmp_path / 'out' / 'encoder.pkl'}: tensor forward_layer_0.state_linearity.bias did "
                                 "not read back identically")
    assert list(tmp_path.iterdir()) == []


def test_forward_reload_check_refuses_a_saved_weight_that_differs(tmp_path, monkeypatch, capsys):
    """The converted folder is reloaded before success: a saved weight that differs from the converted model's is one
    error line naming the output folder, and nothing is left behind."""
    from safetensors.torch import load_file, save_file

    save = ElmoModel.save_pretrained

    def damaged_save(self, folder, **kwargs):
        save(self, folder, **kwargs)
        state = load_file(Path(folder) / "model.safetensors")
        state["char_encoder.projection.weight"] += 1e-3
        save_file(state, Path(folder) / "model.safetensors", metadata={"format": "pt"})

    monkeypatch.setattr(ElmoModel, "save_pretrained", damaged_save)
    output = tmp_path / "out"
    code = main(["--model-dir", str(ELMOFORMANYLANGS / "chars_only"), "--output-dir", str(output)])
    assert_only_an_error_line(code, capsys.readouterr().err,
                              f"{output}: reloaded weight char_encoder.projection.weight differs from the converted one")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("direction", ["forward", "back"])
def test_a_non_empty_output_folder_is_replaced_only_with_overwrite(converted_elmoformanylangs, tmp_path, capsys,
                                                                   direction):
    """--output-dir must not exist or be empty; --overwrite replaces a non-empty one, both ways."""
    source = ELMOFORMANYLANGS / "chars_only" if direction == "forward" else converted_elmoformanylangs["chars_only"]
    options = [] if direction == "forward" else ["--to-elmoformanylangs"]
    output = tmp_path / "out"
    output.mkdir()
    (output / "keep.txt").write_text("mine")
    arguments = [*options, "--model-dir", str(source), "--output-dir", str(output)]
    assert_only_an_error_line(main(arguments), capsys.readouterr().err,
                              f"{output}: output folder exists and is not empty (pass --overwrite to replace it)")
    assert [path.name for path in output.iterdir()] == ["keep.txt"]
    assert main([*arguments, "--overwrite"]) == 0, capsys.readouterr().err
    assert not (output / "keep.txt").exists() and (output / "char.dic").is_file()


@pytest.mark.parametrize("direction", ["forward", "back"])
def test_overwrite_never_replaces_the_folder_being_converted(converted_elmoformanylangs, tmp_path, capsys, direction):
    """--overwrite with --output-dir the model folder itself deleted the model (the package's files, or the
    checkpoint converted back) and reported success."""
    folder = tmp_path / "model"
    source = ELMOFORMANYLANGS / "chars_only" if direction == "forward" else converted_elmoformanylangs["chars_only"]
    shutil.copytree(source, folder)
    names = sorted(path.name for path in folder.iterdir())
    options = [] if direction == "forward" else ["--to-elmoformanylangs"]
    code = main([*options, "--model-dir", str(folder), "--output-dir", str(folder), "--overwrite"])
    assert_only_an_error_line(code, capsys.readouterr().err,
                              f"{folder}: the output folder holds the input {folder}, which replacing it would delete")
    assert sorted(path.name for path in folder.iterdir()) == names


def test_output_folders_that_cannot_be_written_fail_before_the_work(tmp_path, capsys):
    """Both directions, as for the original format: checked before the model is read (the one named here does not
    exist), not after reading a released model's weights."""
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    cases = {a_file: "file.txt: is a file, not a folder", a_file / "out": "file.txt: is a file, so",
             unwritable_folder(tmp_path) / "out": "cannot write there"}
    for output, expected in cases.items():
        code = main(["--model-dir", str(tmp_path / "no-model"), "--output-dir", str(output)])
        assert_only_an_error_line(code, capsys.readouterr().err, expected)
        with pytest.raises(ConversionError, match=re.escape(expected)):
            convert_hf_to_elmoformanylangs(tmp_path / "no-model", output)
    assert a_file.read_text() == "x"


def test_way_back_refuses_what_the_package_cannot_read(converted, tmp_path, capsys):
    code = main(["--to-elmoformanylangs", "--model-dir", str(converted["allennlp-elmo"]), "--output-dir", str(tmp_path / "out")])
    assert code == 2 and "bilm-tf's form" in capsys.readouterr().err
    code = main(["--to-elmoformanylangs", "--model-dir", str(ELMOFORMANYLANGS / "with_words"), "--output-dir", str(tmp_path / "out")])
    assert code == 2 and "not a Hugging Face checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    # A config.json that cannot be read is named as that, not as a folder of another kind.
    unreadable = shutil.copytree(converted["allennlp-elmo"], tmp_path / "unreadable")
    (unreadable / "config.json").unlink()
    (unreadable / "config.json").symlink_to(unreadable_file(tmp_path))
    code = main(["--to-elmoformanylangs", "--model-dir", str(unreadable), "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "Permission denied" in err and "not a Hugging Face checkpoint" not in err, err
    assert not (tmp_path / "out").exists()


def test_each_clip_converts_to_its_own_field_and_back(tmp_path):
    """The encoder's cell_clip and proj_clip read into and write back from the config's fields of those names (the
    test models have 3 and 3, so a swap passed every other test)."""
    folder = shutil.copytree(ELMOFORMANYLANGS / "chars_only", tmp_path / "model")
    architecture = json.loads((folder / "architecture.json").read_text())
    architecture["encoder"].update(cell_clip=2, proj_clip=1.5)
    (folder / "architecture.json").write_text(json.dumps(architecture))
    converted = convert_elmoformanylangs_to_hf(folder, tmp_path / "hf")
    config = ElmoModel.from_pretrained(converted).config
    assert (config.cell_clip, config.proj_clip) == (2.0, 1.5)
    back = convert_hf_to_elmoformanylangs(converted, tmp_path / "back")
    written = json.loads((back / json.loads((back / "config.json").read_text())["config_path"]).read_text())
    assert (written["encoder"]["cell_clip"], written["encoder"]["proj_clip"]) == (2, 1.5)
    # No clip (null, which the package reads as 0) is no clip after the way there and back: 0 written, None read.
    architecture["encoder"].update(cell_clip=None, proj_clip=None)
    (folder / "architecture.json").write_text(json.dumps(architecture))
    back = convert_hf_to_elmoformanylangs(convert_elmoformanylangs_to_hf(folder, tmp_path / "hf-none"), tmp_path / "none")
    written = json.loads((back / json.loads((back / "config.json").read_text())["config_path"]).read_text())
    assert (written["encoder"]["cell_clip"], written["encoder"]["proj_clip"]) == (0, 0)
    config = ElmoModel.from_pretrained(convert_elmoformanylangs_to_hf(back, tmp_path / "hf-again")).config
    assert (config.cell_clip, config.proj_clip) == (None, None)


def test_model_id_language_and_license_go_into_the_card(tmp_path, capsys):
    """--model-id, --language and --license name the model, its language and the weights' license in the card; by
    default the output folder's name, und and no license (it said apache-2.0, which nobody had said of the weights)."""
    code = main(["--model-dir", str(ELMOFORMANYLANGS / "chars_only"), "--output-dir", str(tmp_path / "out"),
                 "--model-id", "someone/elmo-zhs", "--language", "zh", "--license", "mit"])
    assert code == 0, capsys.readouterr().err
    card = (tmp_path / "out" / "README.md").read_text()
    assert 'AutoModel.from_pretrained("someone/elmo-zhs")' in card and "language: zh" in card
    assert "\nlicense: mit\n" in card
    # By default: the output folder's name, the language undetermined, no license.
    assert main(["--model-dir", str(ELMOFORMANYLANGS / "chars_only"), "--output-dir", str(tmp_path / "elmo-here")]) == 0
    card = (tmp_path / "elmo-here" / "README.md").read_text()
    assert 'AutoModel.from_pretrained("elmo-here")' in card and "language: und" in card and "license:" not in card
    for option, value in (("--model-id", "someone/elmo"), ("--language", "zh"), ("--license", "mit")):
        with pytest.raises(SystemExit):  # (the way back writes no card: these would do nothing there)
            main(["--to-elmoformanylangs", "--model-dir", str(tmp_path / "out"), "--output-dir", str(tmp_path / "back"),
                  option, value])
        assert f"{option} is the card's, which only converting to Hugging Face writes" in capsys.readouterr().err
    assert not (tmp_path / "back").exists()
    # A code that is none would go into the card's YAML header as it is: refused before anything is written.
    code = main(["--model-dir", str(ELMOFORMANYLANGS / "chars_only"), "--output-dir", str(tmp_path / "bad"),
                 "--language", "zh\nlicense: none"])
    assert code == 2 and not (tmp_path / "bad").exists()
    assert capsys.readouterr().err == ("error: --language 'zh\\nlicense: none' is not a language code: give ISO 639 "
                                       "codes such as en, zh or pt-BR\n")
    # An id that is none (it went into the card's code as from_pretrained("a\nb: c")), the other converter's too.
    from conversion import convert_original_elmo

    for convert, source in ((main, ["--model-dir", str(ELMOFORMANYLANGS / "chars_only")]),
                            (convert_original_elmo.main, ["--options-file", "unread", "--weight-file", "unread"])):
        code = convert([*source, "--output-dir", str(tmp_path / "bad"), "--model-id", "a\nb: c"])
        assert_only_an_error_line(code, capsys.readouterr().err, "--model-id 'a\\nb: c' is not a Hub model id")
        assert not (tmp_path / "bad").exists()


def test_way_back_refuses_a_model_without_skip_connections(converted_elmoformanylangs, tmp_path, capsys):
    folder = tmp_path / "model"
    shutil.copytree(converted_elmoformanylangs["with_words"], folder)
    _edit_json(folder / "config.json", lambda c: c.update(use_skip_connections=False))
    code = main(["--to-elmoformanylangs", "--model-dir", str(folder), "--output-dir", str(tmp_path / "out")])
    assert code == 2
    assert "error: ELMoForManyLangs' biLM always has skip connections; this model has none" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


VOCABULARY_ALPHABET = dict(alphabet="vocabulary", n_characters=62, bos_char_id=1, eos_char_id=2, bow_char_id=3,
                           eow_char_id=4, pad_char_id=5)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"bow_char_id": 12}, "bow_char_id must be 259 in the byte alphabet"),
        ({"alphabet": "unicode"}, "alphabet must be one of"),
        ({**VOCABULARY_ALPHABET, "pad_char_id": 62}, r"pad_char_id must be a character id in 1..n_characters - 1 \(61"),
        ({**VOCABULARY_ALPHABET, "eos_char_id": 1}, "special character ids must differ"),
        ({"word_vocab_size": 51}, r"must both be 0 \(no word input\) or both positive"),
        ({"word_vocab_size": 51, "word_embedding_dim": 6, "bos_word_id": 51, "eos_word_id": 2}, r"bos_word_id must be a word id in 0..word_vocab_size - 1 \(50\)"),
    ],
)
def test_config_checks_the_alphabet_and_word_input(options, message):
    from hf_elmo import ElmoConfig

    assert ElmoConfig(**VOCABULARY_ALPHABET).n_characters == 62
    with pytest.raises(ValueError, match=message):
        ElmoConfig(**options)


def test_bilm_tf_format_refuses_a_character_vocabulary(converted_elmoformanylangs, tmp_path, capsys):
    from conversion.convert_original_elmo import main as original_main

    code = original_main(["--to-original", "--model-dir", str(converted_elmoformanylangs["with_words"]),
                          "--output-dir", str(tmp_path / "out")])
    assert code == 2 and "--to-elmoformanylangs" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_readmes_tian_example(converted_elmoformanylangs, tmp_path, monkeypatch):
    """The 天 example of "Converting ELMoForManyLangs models" runs as written on the tests' model with word input,
    with the shapes and similarities the README gives."""
    marker = "the 天 example of the introduction reads:"
    section = README.read_text(encoding="utf-8").split(marker)[1]
    code = readme_python_block(marker)
    code = code.replace("\n[torch.cosine_similarity", "\nsimilarities = [torch.cosine_similarity")
    code = code.replace('"elmo-zhs"', repr(str(converted_elmoformanylangs["with_words"])))
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    batch, tokenizer = namespace["batch"], namespace["tokenizer"]
    assert list(batch["input_ids"].shape) == [1, 12, 50] and list(batch["input_word_ids"].shape) == [1, 12]
    stated = re.search(r"the figures only show the mechanics: `(\[[^]]*\])`", " ".join(section.split())).group(1)
    assert [round(value, 4) for value in namespace["similarities"]] == json.loads(stated)
    layer0 = namespace["output"].hidden_states[0][0]
    assert torch.equal(layer0[0], layer0[6])  # "identical vectors at the context-free layer 0"
    entries = re.search(r"a char\.dic of (\d+) entries and a word\.dic of (\d+)", " ".join(section.split())).groups()
    model = ELMOFORMANYLANGS / "with_words"
    assert [len(read_dictionary(model / name)) for name in ("char.dic", "word.dic")] == list(map(int, entries))
    segmented = tokenizer([["天气", "不错", "！", "小天", "你", "说", "是", "吗", "？"]], is_split_into_words=True,
                          return_tensors="pt")
    assert list(segmented["input_ids"].shape) == [1, 9, 50]
