"""What the library modules' docstrings promise, where no test of the module's own holds it: the approximations'
measure, the default model's absence, the dictionaries' read errors, the embedder given no sentences,
every public name in `from hf_elmo import *`, a config saved alone with its code."""

import inspect
import json

import numpy as np
import pytest

from conftest import assert_only_an_error_line, unreadable_file

import hf_elmo
from hf_elmo import ElmoEmbedder, ElmoModel, ElmoTokenizer, default_model
from hf_elmo.approximate import approximation_deviation
from hf_elmo.cli import main
from hf_elmo.lexicon import CHAR_SPECIALS, ElmoLexicon, LexiconError, read_dictionary


@pytest.fixture(scope="module")
def model_and_batch(converted):
    folder = converted["allennlp-elmo"]
    batch = ElmoTokenizer.from_pretrained(folder)(["I eat an apple .", "Apple is a big company ."], padding=True,
                                                  return_tensors="pt")
    return ElmoModel.from_pretrained(folder).eval(), dict(batch)


def test_approximation_deviation_measures_against_the_exact_model_in_eval_mode(model_and_batch):
    """approximation_deviation on a model that already runs the approximation, or is in training mode (where the
    approximations do not run), gave zeros: the approximation against itself, or the exact model against itself.
    It measures against the exact biLSTM in eval mode, and leaves the model exact, in the mode it was in."""
    model, batch = model_and_batch
    reference = approximation_deviation(model, batch, "nn_lstm")
    assert reference[0] == 0.0 and reference[2] > 1e-2  # (nn.LSTM cannot clip, and the fixture model clips)
    model.set_lstm_approximation("nn_lstm")
    assert approximation_deviation(model, batch, "nn_lstm") == pytest.approx(reference, abs=1e-6)
    assert all(layer.approximation is None for layer in model.layers) and not model.training
    model.train()
    try:
        assert approximation_deviation(model, batch, "nn_lstm") == pytest.approx(reference, abs=1e-6)
        assert model.training and all(layer.approximation is None for layer in model.layers)
    finally:
        model.eval()


def test_a_missing_default_model_is_one_clear_error(tmp_path, monkeypatch, capsys):
    """default_model_path's FileNotFoundError names the folder and how to get the model back; `hf-elmo embed` and
    `hf-elmo demo` without --model say so in one line, before any output is written."""
    gone = tmp_path / "default-model"
    monkeypatch.setattr(default_model, "DEFAULT_MODEL_DIR", gone)
    message = f"the default ELMo is missing from {gone}: reinstall hf-elmo, or train it with `make pretrain-default`"
    with pytest.raises(FileNotFoundError, match=f"^{message}"):
        default_model.default_model_path()
    with pytest.raises(FileNotFoundError, match=f"^{message}"):
        ElmoEmbedder()
    source = tmp_path / "in.txt"
    source.write_text("a b\n", encoding="utf-8")
    assert main(["embed", str(source), str(tmp_path / "out.hdf5")]) == 2
    assert_only_an_error_line(2, capsys.readouterr().err, message)
    assert main(["demo", "--plot", str(tmp_path / "senses.png")]) == 2
    assert_only_an_error_line(2, capsys.readouterr().err, message)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt"]


def test_a_dictionary_that_cannot_be_read_or_lacks_a_special_entry_is_named(tmp_path):
    """read_dictionary's errors name the file (missing, a folder, a line that is not UTF-8, by its number), and a
    lexicon without the special entries names the file and each missing entry."""
    for path, message in [(tmp_path / "char.dic", "dictionary file not found"),
                          (tmp_path, "is a folder, not a dictionary file"),
                          (unreadable_file(tmp_path), r"cannot read the dictionary file \(Permission denied\)")]:
        with pytest.raises(LexiconError, match=f"^{path}: {message}$"):
            read_dictionary(path)
    broken = tmp_path / "word.dic"
    broken.write_bytes("天\t0\ncaf".encode() + b"\xe9\t1\n")
    with pytest.raises(LexiconError, match=rf"^{broken}: line 2 is not UTF-8 text \(invalid continuation byte at byte "
                                           r"9\)$"):
        read_dictionary(broken)
    for data, line in ((b"a\t0\n\xff\t1\n", 2), (b"\xff\t0\n", 1)):  # (at a line's first byte: that line, not the one before)
        broken.write_bytes(data)
        with pytest.raises(LexiconError, match=rf"^{broken}: line {line} is not UTF-8 text \(invalid start byte"):
            read_dictionary(broken)
    chars = tmp_path / "chars.dic"
    chars.write_text("".join(f"{token}\t{index}\n" for index, token in enumerate(["a", "<bos>", "<eos>", "<pad>"])),
                     encoding="utf-8")
    with pytest.raises(LexiconError, match=rf"^{chars}: missing the special entries <oov>, <bow>, <eow>$"):
        ElmoLexicon.from_files(chars, None, 10)
    every_special = {token: index for index, token in enumerate(CHAR_SPECIALS)}
    with pytest.raises(LexiconError, match=r"^word.dic: missing the special entry <pad>$"):
        ElmoLexicon(every_special, {"<oov>": 0}, 10)


def test_embedder_given_no_sentences_gives_no_arrays_and_leaves_the_carried_state():
    """ElmoEmbedder with no sentences: an empty list in, an empty list out, without running the model."""
    embedder = ElmoEmbedder()  # the default model that ships with hf-elmo
    assert embedder.embed_batch([]) == [] and embedder.embed_batch([], "top") == []
    assert embedder.tokenize_batch([]) == ([], None)  # (documented: None for no sentences)
    assert embedder.embed_tokenized(([], None)) == []
    assert list(embedder.embed_sentences([], batch_size=2)) == []
    # Stateful: a batch of no sentences neither fails nor touches the state the next batch starts from.
    stateful = ElmoEmbedder(stateful=True)
    first = stateful.embed_batch(["I eat an apple .", "He sat ."])
    assert stateful.embed_batch([]) == []
    h, c = (tensor.clone() for tensor in stateful.states)
    assert stateful.embed_batch([]) == []
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip((h, c), stateful.states))
    assert len(first) == 2 and first[0].shape == (embedder.num_layers, 5, embedder.hidden_size)


def test_star_import_gives_every_public_name_of_the_package():
    public = {name for name, value in vars(hf_elmo).items() if not name.startswith("_") and not inspect.ismodule(value)}
    assert {"ElmoEmbedder", "ElmoModel", "ElmoTokenizer", "ElmoConfig", "ELMO_AUTO_MAP"} <= public
    assert sorted(hf_elmo.__all__) == sorted(public)
    namespace = {}
    exec("from hf_elmo import *", namespace)
    assert public <= namespace.keys()


def test_a_config_saved_alone_carries_its_code(tmp_path):
    """ElmoConfig registered for AutoConfig: a config saved without a model (config.save_pretrained) writes
    configuration_elmo.py beside config.json, which its auto_map names, so that it loads as remote code too."""
    hf_elmo.ElmoConfig().save_pretrained(tmp_path)
    assert {"config.json", "configuration_elmo.py"} <= {path.name for path in tmp_path.iterdir()}
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    assert auto_map["AutoConfig"] == "configuration_elmo.ElmoConfig"
