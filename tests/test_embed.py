"""ElmoEmbedder and `hf-elmo embed`: the layout of `allennlp elmo`, the original stateful numbers, resuming, 2 processes."""

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from conftest import FIXTURE_SETS, assert_one_error, assert_only_an_error_line, run_two_processes, unreadable_file, unwritable_folder
from test_hub import fake_hub_snapshot
import hf_elmo
from hf_elmo import ElmoEmbedder, ElmoModel, ElmoTokenizer
from hf_elmo import embed_file as embed_module
from hf_elmo.cli import main
from hf_elmo.embed_file import plan_batches, read_sentences
from hf_elmo.embedder import SORT_WINDOW_BATCHES, length_sorted_batches
from hf_elmo.files import PROXY_VARIABLES

FIXTURE = FIXTURE_SETS["allennlp-elmo"]
HF_ELMO = [sys.executable, "-m", "hf_elmo.cli"]
# One thread per process: steadier on a small shared machine, and the same arithmetic in every run compared.
SUBPROCESS_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The tiny fixture model runs fastest on one thread, and a busy 2-core machine makes two threads crawl."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model_path(converted):
    return converted["allennlp-elmo"]


@pytest.fixture(scope="module")
def embedder(model_path):
    return ElmoEmbedder(model_path)


def fixture_lines() -> list[str]:
    """The fixture's 30 sentences in the order the original stateful test ran them: batch i = lines 3i..3i+2."""
    return [" ".join(words) for batch in FIXTURE.batches() for words in batch]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def read_all(path: Path) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as handle:
        return {key: handle[key][...] for key in handle}


@pytest.mark.parametrize("output_format", ["all", "top", "average", "mix"])
def test_a_batch_of_empty_sentences_gives_empty_embeddings_in_their_places(embedder, output_format):
    """Length-sorted batching puts the empty lines together: a batch of them alone is not run through the model,
    and each gets the empty embedding an empty sentence gets in any batch, in its own place."""
    sentences = ["", "a b c", "", "d", ""]
    results = list(embedder.embed_sentences(sentences, batch_size=2, output_format=output_format))
    (empty,) = embedder.embed_batch([[]], output_format)
    for sentence, result in zip(sentences, results):
        if sentence:
            (alone,) = embedder.embed_batch([sentence.split()], output_format)
            np.testing.assert_allclose(result, alone, rtol=0, atol=1e-6)
        else:
            assert result.shape == empty.shape and result.dtype == empty.dtype and empty.size == 0


def test_embed_sentences_gives_every_layer_in_order(embedder, model_path):
    sentences = fixture_lines()[:7] + ["", "one"]
    results = list(embedder.embed_sentences(sentences, batch_size=3))
    model, tokenizer = ElmoModel.from_pretrained(model_path).eval(), ElmoTokenizer.from_pretrained(model_path)
    for sentence, result in zip(sentences, results):
        words = sentence.split()
        assert result.dtype == np.float32 and result.shape == (3, len(words), 32)
        if words:
            with torch.no_grad():
                alone = model(**tokenizer([words], is_split_into_words=True, return_tensors="pt")).hidden_states
            assert np.allclose(result, torch.stack(alone)[:, 0].numpy(), atol=1e-6)
    assert np.allclose(embedder.embed_sentence("one"), results[-1], atol=1e-6)
    assert embedder.embed_sentence(["one"], output_format="top").shape == (1, 32)


def test_stateful_embed_reproduces_the_original_model(model_path, tmp_path):
    """`--stateful --batch-size 3` on the fixture sentences is the original TensorFlow run: row k of batch i."""
    source = write_lines(tmp_path / "sentences.txt", fixture_lines())
    assert main(["embed", str(source), str(tmp_path / "top.hdf5"), "--top", "--stateful", "--batch-size", "3",
                 "--model", str(model_path)]) == 0
    output = read_all(tmp_path / "top.hdf5")
    for i in range(10):
        for k in range(3):
            assert np.allclose(output[str(3 * i + k)], FIXTURE.expected_top_layer(k, i), rtol=0, atol=2e-6), (i, k)
    index = json.loads(output["sentence_to_index"][0])
    assert index[fixture_lines()[4]] == "4" and len(output) == 31
    # Stateless, only the first batch (which starts from zero state too) matches.
    assert main(["embed", str(source), str(tmp_path / "stateless.hdf5"), "--top", "--model", str(model_path)]) == 0
    stateless = read_all(tmp_path / "stateless.hdf5")
    assert np.allclose(stateless["0"], FIXTURE.expected_top_layer(0, 0), atol=1e-6)
    assert not np.allclose(stateless["3"], FIXTURE.expected_top_layer(0, 1), atol=1e-3)


def test_stateful_rows_beyond_a_smaller_batch_keep_their_state(model_path):
    """Batches of 3, 1 and 3 sentences: rows 1 and 2 of the third batch continue from the first batch's ends, row 0
    from the second's, as in the original (which keeps a state per row)."""
    sentences = [line.split() for line in fixture_lines()[:7]]
    batches = [sentences[0:3], sentences[3:4], sentences[4:7]]
    embedder = ElmoEmbedder(model_path, stateful=True)
    found = [embedder.embed_batch(batch) for batch in batches]
    model, tokenizer = ElmoModel.from_pretrained(model_path).eval(), ElmoTokenizer.from_pretrained(model_path)

    def run(batch, states):
        encoded = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")
        output = model(**encoded, initial_states=states)
        return torch.stack(output.hidden_states), output.final_states

    with torch.no_grad():
        _, (h1, c1) = run(batches[0], None)
        _, (h2, c2) = run(batches[1], (h1[:, :1], c1[:, :1]))
        expected, _ = run(batches[2], (torch.cat([h2, h1[:, 1:]], 1), torch.cat([c2, c1[:, 1:]], 1)))
        stateless, _ = run(batches[2], None)
    for row, words in enumerate(batches[2]):
        assert np.allclose(found[2][row], expected[:, row, : len(words)].numpy(), atol=1e-6), row
        assert not np.allclose(found[2][row], stateless[:, row, : len(words)].numpy(), atol=1e-3), row


def test_stateful_embed_sentences_reproduces_the_original_model(model_path):
    """The Python API's stateful mode is the original's too: `embed_sentences` runs batches of `batch_size`
    consecutive sentences, row k of batch i continuing row k of batch i - 1."""
    embedder = ElmoEmbedder(model_path, stateful=True)
    top = list(embedder.embed_sentences(fixture_lines(), batch_size=3, output_format="top"))
    for i in range(10):
        for k in range(3):
            assert np.allclose(top[3 * i + k], FIXTURE.expected_top_layer(k, i), atol=1e-6), (i, k)


def test_stateful_rows_a_batch_lacked_start_from_zeros_and_a_sentence_without_words_still_runs(model_path):
    """A batch of one sentence without words runs as `<S> </S>` (moving its row's state, as in the original); in the
    next batch of 3, row 0 continues from that state and rows 1 and 2, which the first batch lacked, start from
    zeros; after `reset_states` every row starts from zeros."""
    embedder = ElmoEmbedder(model_path, stateful=True)
    batch = [line.split() for line in fixture_lines()[:3]]
    model, tokenizer = ElmoModel.from_pretrained(model_path).eval(), ElmoTokenizer.from_pretrained(model_path)

    def run(sentences, states=None):
        encoded = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
        with torch.no_grad():
            output = model(**encoded, initial_states=states)
        return torch.stack(output.hidden_states), output.final_states

    assert embedder.embed_batch([[]])[0].shape == (3, 0, 32)
    _, (h, c) = run([[]])
    expected, _ = run(batch, (torch.cat([h, h.new_zeros(h.shape[0], 2, h.shape[2])], 1),
                              torch.cat([c, c.new_zeros(c.shape[0], 2, c.shape[2])], 1)))
    stateless, _ = run(batch)
    found = embedder.embed_batch(batch)
    for row, words in enumerate(batch):
        assert np.allclose(found[row], expected[:, row, : len(words)].numpy(), atol=1e-6), row
    assert not np.allclose(found[0], stateless[:, 0, : len(batch[0])].numpy(), atol=1e-3)
    embedder.reset_states()
    for row, (words, vectors) in enumerate(zip(batch, embedder.embed_batch(batch))):
        assert np.allclose(vectors, stateless[:, row, : len(words)].numpy(), atol=1e-6), row


def test_lines_end_at_every_kind_of_newline(embedder, tmp_path):
    """\\n, \\r\\n and a lone \\r (old Mac files) each end a line: two lines are never read as one."""
    source = tmp_path / "in.txt"
    source.write_bytes(b"a b\rc d\r\ne f\n")
    embedder.embed_file(source, tmp_path / "out.hdf5", output_format="top", progress=False)
    output = read_all(tmp_path / "out.hdf5")
    assert json.loads(output["sentence_to_index"][0]) == {"a b": "0", "c d": "1", "e f": "2"}
    assert [output[str(i)].shape[0] for i in range(3)] == [2, 2, 2]


def test_bad_arguments_are_refused_before_any_work(embedder, model_path, tmp_path, capsys):
    source = write_lines(tmp_path / "in.txt", ["a b"])
    for call, message in [
        (lambda: embedder.embed_file(source, tmp_path / "o.hdf5", output_format="best"), "output_format must be one of all, top, average, mix, got 'best'"),
        (lambda: embedder.embed_file(source, tmp_path / "o.hdf5", batch_size=0), "batch_size must be at least 1, got 0"),
        (lambda: embedder.embed_batch([["a"]], output_format="best"), "output_format must be one of all, top, average, mix, got 'best'"),
        (lambda: list(embedder.embed_sentences([["a"]], batch_size=0)), "batch_size must be at least 1, got 0"),
    ]:
        with pytest.raises(ValueError) as raised:
            call()
        assert str(raised.value) == message
    assert_only_an_error_line(*run_cli(capsys, "embed", source, tmp_path / "o.hdf5", "--batch-size", 0, "--model", model_path),
                     "error: --batch-size must be at least 1, got 0")
    assert not list(tmp_path.glob("o.hdf5*"))


def test_a_str_where_sentences_belong_and_a_bad_format_are_refused_at_the_call(embedder):
    """A str is one sentence (iterating it would give a sentence per character); the format is checked even when no
    sentence has a word (none reaches the model)."""
    for call in (embedder.embed_sentences, embedder.embed_batch):
        with pytest.raises(TypeError, match=r"^sentences must be a list of sentences, got a str \('hello world'\)"):
            call("hello world")
    with pytest.raises(ValueError, match="^output_format must be one of all, top, average, mix, got 'best'$"):
        embedder.embed_sentences(["", ""], output_format="best")  # (not even iterated)
    with pytest.raises(ValueError, match="^batch_size must be at least 1, got 0$"):
        embedder.embed_sentences(["a"], batch_size=0)


def test_what_is_no_sentence_is_refused_naming_it_at_the_call_or_where_a_generator_reaches_it(embedder):
    """embed_sentences(None) failed only once iterated ("'NoneType' object is not iterable"), a sentence that was an
    int or None failed deep inside ("'int' object is not iterable"), and bytes were read as a list of numbers ("every
    word must be a str, got [97, 32, 98]"). Refused at the call: what is no iterable of sentences, and each sentence of
    a list or tuple that is neither a str nor a list of words (str), naming its index and its type (bytes: decode
    them); a generator's sentence where it is reached. Sentences as str, lists and tuples of words still embed."""
    for value in (None, 3):
        for call in (embedder.embed_sentences, embedder.embed_batch, embedder.tokenize_batch):
            with pytest.raises(TypeError, match=rf"^sentences must be a list of sentences \(or any iterable of them\), "
                                                rf"got {type(value).__name__}$"):
                call(value)
    with pytest.raises(TypeError, match=r"^sentences must be a list of sentences, got bytes \(b'a b'\): decode it first"):
        embedder.embed_sentences(b"a b")
    each = r"each sentence must be a str or a list of words \(str\)$"
    for sentences, problem in ((["a", None], "sentence 1 is NoneType"), ([1, 2], "sentence 0 is int"),
                               ([b"a b"], r"sentence 0 is bytes \(decode it first\)"),
                               (("a", ["b", 3]), "sentence 1 holds a word that is int"),
                               ([["a", b"b"]], r"sentence 0 holds a word that is bytes \(decode it first\)")):
        for call in (embedder.embed_sentences, embedder.embed_batch):  # (embed_sentences: not even iterated)
            with pytest.raises(TypeError, match=rf"^{problem}: {each}"):
                call(sentences)
    with pytest.raises(TypeError, match=rf"^sentence 0 is NoneType: {each}"):
        embedder.embed_sentence(None)
    reached = embedder.embed_sentences(sentence for sentence in ["a b", None])
    with pytest.raises(TypeError, match=rf"^sentence 1 is NoneType: {each}"):
        next(reached)
    # Any other iterable of words is a sentence too (a NumPy array, a deque, a generator of words), as before.
    from collections import deque

    sentences = ["a b", ("c",), [], "", np.array(["d", "e"]), deque(["f"]), (word for word in ["g", "h"])]
    assert [array.shape[1] for array in embedder.embed_sentences(sentences)] == [2, 1, 0, 0, 2, 1, 2]
    with pytest.raises(TypeError, match=rf"^sentence 0 holds a word that is int: {each}"):
        list(embedder.embed_sentences([deque(["a", 1])]))
    with pytest.raises(TypeError, match=rf"^sentence 0 is ndarray: {each}"):  # (one str in an array of no axis)
        embedder.embed_sentences([np.array("a b")])


def test_the_token_cache_turned_off_embeds_the_same(model_path, embedder, tmp_path):
    """`token_cache.max_words = 0` is "off": nothing is pinned, every word is computed with its batch."""
    source = write_lines(tmp_path / "in.txt", fixture_lines()[:8])
    uncached = ElmoEmbedder(model_path)
    uncached.model.char_encoder.token_cache.max_words = 0
    uncached.embed_file(source, tmp_path / "off.hdf5", batch_size=3, progress=False)
    assert len(uncached.model.char_encoder.token_cache) == 0
    embedder.embed_file(source, tmp_path / "on.hdf5", batch_size=3, progress=False)
    off, on = read_all(tmp_path / "off.hdf5"), read_all(tmp_path / "on.hdf5")
    assert off.keys() == on.keys()
    assert all(np.allclose(off[key], on[key], atol=1e-6) for key in on if key != "sentence_to_index")


def test_a_folder_that_pads_on_the_left_embeds_the_same(model_path, embedder, tmp_path):
    """A model folder whose tokenizer pads on the left (tokenizer_config.json): the embedder, `embed_file` and the
    demo read each sentence's own words, as with the folder that pads on the right."""
    from hf_elmo.demo import run_demo

    left = tmp_path / "left"
    shutil.copytree(model_path, left)
    config = json.loads((left / "tokenizer_config.json").read_text())
    (left / "tokenizer_config.json").write_text(json.dumps({**config, "padding_side": "left"}))
    assert ElmoTokenizer.from_pretrained(left).padding_side == "left"
    left_embedder = ElmoEmbedder(left)
    sentences = [line.split() for line in fixture_lines()[:6]]  # (3 to 53 words)
    for ours, right in zip(left_embedder.embed_batch(sentences), embedder.embed_batch(sentences), strict=True):
        assert np.allclose(ours, right, atol=1e-6)
    source = write_lines(tmp_path / "in.txt", fixture_lines()[:6])
    left_embedder.embed_file(source, tmp_path / "left.hdf5", batch_size=3, progress=False)
    embedder.embed_file(source, tmp_path / "right.hdf5", batch_size=3, progress=False)
    ours, right = read_all(tmp_path / "left.hdf5"), read_all(tmp_path / "right.hdf5")
    assert ours.keys() == right.keys() and ours["sentence_to_index"] == right["sentence_to_index"]
    assert all(np.allclose(ours[key], right[key], atol=1e-6) for key in right if key != "sentence_to_index")
    assert run_demo(str(left), None)["nearest_sense"] == run_demo(str(model_path), None)["nearest_sense"]


def test_the_output_folder_is_made_when_missing(model_path, tmp_path):
    source = write_lines(tmp_path / "in.txt", ["a b", "c"])
    output = tmp_path / "new" / "sub" / "out.hdf5"
    assert main(["embed", str(source), str(output), "--top", "--model", str(model_path)]) == 0
    assert sorted(path.name for path in output.parent.iterdir()) == ["out.hdf5"]  # no lock, no batch folder left
    assert read_all(output)["0"].shape == (2, 32)


def test_a_file_at_the_output_is_replaced_when_the_run_finishes(model_path, tmp_path):
    """As the README says (and as `allennlp elmo` does): a file at OUTPUT that is no output of this job is replaced,
    in one step, by the finished output."""
    source = write_lines(tmp_path / "in.txt", ["a b", "c"])
    output = tmp_path / "out.hdf5"
    output.write_text("an earlier file")
    assert main(["embed", str(source), str(output), "--top", "--model", str(model_path)]) == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt", "out.hdf5"]
    assert read_all(output)["0"].shape == (2, 32)


def test_output_formats_and_keys(embedder, tmp_path, capsys):
    lines = ["EU rejects German call .", "", "Peter Blackburn", "EU rejects German call ."]
    source = write_lines(tmp_path / "in.txt", lines)
    outputs = {}
    for output_format in ("all", "top", "average", "mix"):
        summary = embedder.embed_file(source, tmp_path / f"{output_format}.hdf5", output_format=output_format, batch_size=2)
        assert summary["sentences"] == 4 and summary["computed"] == summary["batches"] == 2
        outputs[output_format] = read_all(tmp_path / f"{output_format}.hdf5")
    every = outputs["all"]
    assert sorted(every) == ["0", "1", "2", "3", "sentence_to_index"]
    assert every["0"].shape == (3, 5, 32) and every["1"].shape == (3, 0, 32) and every["2"].shape == (3, 2, 32)
    assert outputs["top"]["1"].shape == (0, 32)
    assert np.allclose(every["0"], every["3"], atol=1e-6)
    assert np.array_equal(outputs["top"]["2"], every["2"][-1])
    assert np.allclose(outputs["average"]["2"], every["2"].mean(0), atol=1e-6)
    assert np.allclose(outputs["mix"]["2"], every["2"].mean(0), atol=1e-6)  # a fresh mix is the plain average
    assert json.loads(every["sentence_to_index"][0]) == {lines[0]: "3", "": "1", lines[2]: "2"}
    with h5py.File(tmp_path / "all.hdf5") as handle:
        assert list(handle) == ["0", "1", "2", "3", "sentence_to_index"]  # written in line order

    embedder.embed_file(source, tmp_path / "forget.hdf5", forget_sentences=True)
    assert "sentence_to_index" not in read_all(tmp_path / "forget.hdf5")
    keyed_source = write_lines(tmp_path / "keyed.txt", ["EU rejects German call .", "Peter Blackburn"])
    embedder.embed_file(keyed_source, tmp_path / "keyed.hdf5", output_format="top", use_sentence_keys=True)
    keyed = read_all(tmp_path / "keyed.hdf5")
    assert sorted(keyed) == ["EU rejects German call .", "Peter Blackburn"]
    assert np.array_equal(keyed["Peter Blackburn"], outputs["top"]["2"])
    with pytest.raises(ValueError, match=r"in.txt: line 2 \(''\) cannot be an HDF5 key"):
        embedder.embed_file(source, tmp_path / "blank.hdf5", use_sentence_keys=True)
    for line in (".", "a/b", "a\0b"):  # (HDF5 would store "a\0b" as "a")
        with pytest.raises(ValueError, match=rf"bad.txt: line 2 \({re.escape(repr(line))}\) cannot be an HDF5 key"):
            embedder.embed_file(write_lines(tmp_path / "bad.txt", ["x", line]), tmp_path / "bad.hdf5", use_sentence_keys=True)
    duplicated = write_lines(tmp_path / "dup.txt", ["a b", "c", "a b"])
    with pytest.raises(ValueError, match=r"dup.txt: lines 1 and 3 are the same sentence"):
        embedder.embed_file(duplicated, tmp_path / "dup.hdf5", use_sentence_keys=True)
    assert not (tmp_path / "blank.hdf5").exists() and not (tmp_path / "dup.hdf5.partial").exists()
    assert not list(tmp_path.glob("bad.hdf5*"))
    # The command refuses them before the model loads (the model named here does not exist).
    capsys.readouterr()
    code, err = run_cli(capsys, "embed", duplicated, tmp_path / "dup.hdf5", "--use-sentence-keys", "--model",
                        tmp_path / "no-model")
    assert_only_an_error_line(code, err, "dup.txt: lines 1 and 3 are the same sentence")
    assert not (tmp_path / "dup.hdf5.partial").exists()


def test_an_empty_input_gives_an_output_of_no_lines_and_a_warning(embedder, model_path, tmp_path, caplog):
    """An empty input file (or one of only a byte-order mark) has no lines: its output has no line datasets, only
    sentence_to_index holding {} (what `allennlp elmo` wrote for it), or nothing with --forget-sentences or
    --use-sentence-keys, stateless or stateful; the input is named in a warning, on the command's stderr too (the
    output was made without a word)."""
    empty, bom_only = tmp_path / "empty.txt", tmp_path / "bom.txt"
    empty.write_bytes(b"")
    bom_only.write_bytes(b"\xef\xbb\xbf")
    for source in (empty, bom_only):
        caplog.clear()
        summary = embedder.embed_file(source, tmp_path / f"{source.stem}.hdf5", progress=False)
        assert (summary["sentences"], summary["batches"], summary["computed"]) == (0, 0, 0)
        output = read_all(tmp_path / f"{source.stem}.hdf5")
        assert list(output) == ["sentence_to_index"] and json.loads(output["sentence_to_index"][0]) == {}
        warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
        assert warnings == [f"{source}: the input file has no lines, so {tmp_path / f'{source.stem}.hdf5'} will hold "
                            "no sentences"]
    for option in ("forget_sentences", "use_sentence_keys"):
        embedder.embed_file(empty, tmp_path / f"{option}.hdf5", progress=False, **{option: True})
        assert read_all(tmp_path / f"{option}.hdf5") == {}
    result = subprocess.run([*HF_ELMO, "embed", empty, tmp_path / "stateful.hdf5", "--stateful", "--model", model_path],
                            env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert f"{empty}: the input file has no lines, so {tmp_path / 'stateful.hdf5'} will hold no sentences" in result.stderr
    assert "hf-elmo embed: 0 sentences in" in result.stderr
    assert list(read_all(tmp_path / "stateful.hdf5")) == ["sentence_to_index"]
    assert sorted(path.name for path in tmp_path.iterdir() if "hdf5" in path.name) == [
        "bom.hdf5", "empty.hdf5", "forget_sentences.hdf5", "stateful.hdf5", "use_sentence_keys.hdf5"]


MIX_WEIGHTS, MIX_GAMMA = [2.0, -1.0, 0.5], 1.7


@pytest.fixture(scope="module")
def trained_mix_path(model_path, tmp_path_factory):
    """The fixture model saved with a scalar mix as a task would have trained it (not the plain average)."""
    model = ElmoModel.from_pretrained(model_path)
    with torch.no_grad():
        model.scalar_mixes[0].scalar_parameters.copy_(torch.tensor(MIX_WEIGHTS))
        model.scalar_mixes[0].gamma.fill_(MIX_GAMMA)
    folder = tmp_path_factory.mktemp("trained-mix")
    model.save_pretrained(folder)
    ElmoTokenizer.from_pretrained(model_path).save_pretrained(folder)
    return folder


FLAG_LINES = ["EU rejects German call .", "Peter Blackburn"]


@pytest.fixture(scope="module")
def trained_mix_layers(trained_mix_path) -> list[np.ndarray]:
    """Every layer of FLAG_LINES from the trained-mix model, [3, words, 32] a sentence."""
    return list(ElmoEmbedder(trained_mix_path).embed_sentences(FLAG_LINES))


@pytest.mark.parametrize("flag", ["--all", "--top", "--average", "--mix", "--use-sentence-keys", "--forget-sentences"])
def test_each_command_line_flag_reaches_the_output(trained_mix_path, trained_mix_layers, tmp_path, flag):
    """`hf-elmo embed FLAG`: --mix is the model's own mix (gamma * softmax-weighted layers), not the average."""
    lines, layers = FLAG_LINES, trained_mix_layers
    source = write_lines(tmp_path / "in.txt", lines)
    assert main(["embed", str(source), str(tmp_path / "out.hdf5"), flag, "--model", str(trained_mix_path)]) == 0
    output = read_all(tmp_path / "out.hdf5")
    weights = torch.softmax(torch.tensor(MIX_WEIGHTS), dim=0).numpy()
    expected = {
        "--all": layers, "--top": [every[-1] for every in layers], "--average": [every.mean(0) for every in layers],
        "--mix": [MIX_GAMMA * np.tensordot(weights, every, axes=1) for every in layers],
    }.get(flag, layers)
    keys = lines if flag == "--use-sentence-keys" else ["0", "1"]
    index = [] if flag in ("--use-sentence-keys", "--forget-sentences") else ["sentence_to_index"]  # keys say it
    assert sorted(output) == sorted(keys + index)
    for key, vectors in zip(keys, expected):
        assert output[key].shape == vectors.shape and np.allclose(output[key], vectors, atol=1e-6), key
    if flag == "--mix":
        assert not np.allclose(output["0"], layers[0].mean(0), atol=1e-2)
    if index:
        assert json.loads(output["sentence_to_index"][0]) == {lines[0]: "0", lines[1]: "1"}


def test_clear_errors(model_path, tmp_path, capsys, monkeypatch):
    source = write_lines(tmp_path / "in.txt", ["a b"])
    # A path that names no model folder is said to be one (transformers calls it a malformed Hub id), relative or not.
    assert_only_an_error_line(*run_cli(capsys, "embed", source, tmp_path / "out.hdf5", "--model", tmp_path / "no-such-model"),
                              f"error: {tmp_path / 'no-such-model'}: no such folder")
    monkeypatch.chdir(tmp_path)
    assert_only_an_error_line(*run_cli(capsys, "embed", source, "out.hdf5", "--model", "./no-such-model"),
                              "error: ./no-such-model: no such folder")
    assert_only_an_error_line(*run_cli(capsys, "embed", source, "out.hdf5", "--model", source),
                              f"error: {source}: is a file, not a model folder")
    with pytest.raises(ValueError, match=r"^no/such/model: no such folder$"):
        ElmoEmbedder("no/such/model")
    assert main(["embed", str(tmp_path / "missing.txt"), str(tmp_path / "out.hdf5"), "--model", str(model_path)]) == 2
    assert "missing.txt: input file not found" in capsys.readouterr().err
    (tmp_path / "latin1.txt").write_bytes("fine\ncaf\xe9\n".encode("latin-1"))
    assert main(["embed", str(tmp_path / "latin1.txt"), str(tmp_path / "out.hdf5"), "--model", str(model_path)]) == 2
    assert "latin1.txt: line 2 is not UTF-8 text" in capsys.readouterr().err
    assert not (tmp_path / "out.hdf5").exists()


def run_until_killed(command: list[str], partial: Path, batches: int) -> None:
    """Start `command` and kill it (SIGKILL, no chance to clean up) once it has finished `batches` batches."""
    process = subprocess.Popen(command, env=SUBPROCESS_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if len(list(partial.glob("[0-9]*.hdf5"))) >= batches:
            break
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, process.stderr.read().decode()[-2000:]


def finished_batches(partial: Path) -> dict[str, int]:
    return {path.name: path.stat().st_mtime_ns for path in partial.glob("[0-9]*.hdf5")}


def assert_same_embeddings(found: Path, expected: Path, lines: int, same_bytes: bool = False) -> None:
    """The same datasets, bit for bit; with `same_bytes` (the same command), files of the same bytes too (an
    interrupted run resumes to exactly the bytes of an uninterrupted one)."""
    if same_bytes:
        assert found.read_bytes() == expected.read_bytes()
    found, expected = read_all(found), read_all(expected)
    assert found.keys() == expected.keys() and len(found) == lines + 1
    for key, value in expected.items():
        assert found[key].dtype == value.dtype and np.array_equal(found[key], value), key


def test_killed_stateful_run_resumes_without_losing_or_repeating_work(model_path, tmp_path):
    """SIGKILL (no chance to clean up) mid-run, then the same command: it finishes the rest, from the saved state."""
    lines = (fixture_lines() * 10)[:300] + [""]
    source = write_lines(tmp_path / "in.txt", lines)
    output, partial = tmp_path / "out.hdf5", tmp_path / "out.hdf5.partial"
    command = HF_ELMO + ["embed", str(source), str(output), "--top", "--stateful", "--batch-size", "2",
                         "--model", str(model_path)]
    run_until_killed(command, partial, batches=15)
    assert not output.exists()
    finished = finished_batches(partial)
    assert 15 <= len(finished) < 151

    result = subprocess.run(command, env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"{151 - len(finished)} computed by this process, {len(finished)} finished by an earlier run" in result.stderr
    assert "sentences/s" in result.stderr  # the progress bar
    assert not partial.exists()
    reference = ElmoEmbedder(model_path, stateful=True)
    reference.embed_file(source, tmp_path / "reference.hdf5", output_format="top", batch_size=2)
    assert_same_embeddings(output, tmp_path / "reference.hdf5", len(lines), same_bytes=True)
    # The same job again finds the finished file and computes nothing.
    again = ElmoEmbedder(model_path, stateful=True).embed_file(source, output, output_format="top", batch_size=2)
    assert (again["computed"], again["resumed"]) == (0, 151)


def test_interrupted_run_resumes(model_path, tmp_path):
    """Ctrl-C (SIGINT) in the middle of a stateless run, then the same call again."""
    lines = (fixture_lines() * 10)[:300] + ["", "last"]
    source = write_lines(tmp_path / "in.txt", lines)
    output, partial = tmp_path / "out.hdf5", tmp_path / "out.hdf5.partial"
    embedder = ElmoEmbedder(model_path)
    forward, calls = embedder.model.forward, []

    def forward_interrupted_at_batch_11(*args, **kwargs):
        calls.append(1)
        if len(calls) == 11:  # a real SIGINT, delivered while the 11th batch is being computed
            os.kill(os.getpid(), signal.SIGINT)
        return forward(*args, **kwargs)

    embedder.model.forward = forward_interrupted_at_batch_11
    # Python's own Ctrl-C handler, even where the test runner was started with SIGINT ignored (a background job).
    previous_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            embedder.embed_file(source, output, batch_size=2, progress=False)
    finally:
        signal.signal(signal.SIGINT, previous_handler)
        del embedder.model.forward  # back to the class's forward
    finished = finished_batches(partial)
    assert 10 <= len(finished) < 151 and not list(partial.glob(".*tmp*")) and not output.exists()

    summary = embedder.embed_file(source, output, batch_size=2, progress=False)
    assert (summary["computed"], summary["resumed"]) == (151 - len(finished), len(finished))
    embedder.embed_file(source, tmp_path / "reference.hdf5", batch_size=2, progress=False)
    assert_same_embeddings(output, tmp_path / "reference.hdf5", len(lines), same_bytes=True)


def test_two_processes_write_one_file(model_path, tmp_path):
    lines = fixture_lines() * 4 + ["", "last line"]
    source = write_lines(tmp_path / "in.txt", lines)
    result = run_two_processes(["-m", "hf_elmo.cli", "embed", source, tmp_path / "two.hdf5", "--batch-size", 4,
                                "--model", model_path], SUBPROCESS_ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "(31 batches: 16 computed by this process" in result.stderr  # rank 0's half of the batches
    ElmoEmbedder(model_path).embed_file(source, tmp_path / "one.hdf5", batch_size=4)
    two, one = read_all(tmp_path / "two.hdf5"), read_all(tmp_path / "one.hdf5")
    assert two.keys() == one.keys() and len(two) == len(lines) + 1
    for key, value in one.items():
        # Bit for bit: a batch's numbers depend on the file and the batch only, not on the process.
        assert np.array_equal(two[key], value), key
    # The carried state runs through the file in order: it cannot be shared out.
    result = run_two_processes(["-m", "hf_elmo.cli", "embed", source, tmp_path / "stateful.hdf5", "--stateful",
                                "--model", model_path], SUBPROCESS_ENV)
    assert result.returncode != 0 and not (tmp_path / "stateful.hdf5").exists()
    assert ("error: --stateful carries the LSTM state through the file in order, so it cannot be split across 2 "
            "processes: run it in a single process") in result.stderr


def test_two_processes_refuse_a_piped_input_and_a_device(model_path, tmp_path):
    """Under torchrun each process reads the input: a pipe gave its text to one of them, and the run ended with an
    output without the lines (exit code 0) or a traceback; a named pipe waited for ever; --device, for a single
    process, was dropped without a word (even --device bogus). Each is one error line in each process, before the
    model loads, and nothing is written."""
    output = tmp_path / "out.hdf5"
    result = run_two_processes(["-m", "hf_elmo.cli", "embed", "/dev/stdin", output, "--model", model_path],
                               SUBPROCESS_ENV, stdin_text="a b c\nthe dog ran\n")
    assert result.returncode != 0 and not output.exists() and not list(tmp_path.iterdir())
    assert result.stderr.count("error: /dev/stdin: not a regular file (a pipe, a terminal or a device gives its text "
                               "once), and each of the 2 processes reads the input: write it to a file first, or run "
                               "in one process") == 2, result.stderr[-3000:]
    source = write_lines(tmp_path / "in.txt", ["a b c"])
    result = run_two_processes(["-m", "hf_elmo.cli", "embed", source, output, "--model", model_path, "--device",
                                "bogus"], SUBPROCESS_ENV)
    assert result.returncode != 0 and not output.exists()
    assert result.stderr.count("error: --device bogus is for a single process: each of the 2 processes runs where "
                               "the launcher puts it (cpu); leave --device out") == 2, result.stderr[-3000:]


def test_a_refusal_by_the_first_process_stops_every_process(model_path, tmp_path):
    """Under torchrun the first process takes the lock and checks the batch folder, and the others learn what it
    found: when it refuses (here the folder of an interrupted run with other settings), every process stops with its
    error, and none computes a batch into that folder."""
    _, source, output, partial = interrupted_run(model_path, tmp_path, 3)
    finished = {path.name: path.read_bytes() for path in partial.iterdir()}
    result = run_two_processes(["-m", "hf_elmo.cli", "embed", source, output, "--batch-size", 4, "--model", model_path],
                               SUBPROCESS_ENV)
    assert result.returncode != 0 and not output.exists()
    assert result.stderr.count(f"error: {partial}: holds batches of an interrupted run with different batch_size") == 2
    assert {path.name: path.read_bytes() for path in partial.iterdir()} == finished


READ_DIFFERENTLY = """import os, sys
from hf_elmo import embed_file
from hf_elmo.cli import main

read_input = embed_file._read_input


def read_on_this_process(path):
    sentences, digest = read_input(path)
    if os.environ["RANK"] == "1":  # (the file changed between the processes' reads, or another machine's copy)
        return sentences[:-1], digest[::-1]
    return sentences, digest


embed_file._read_input = read_on_this_process
sys.exit(main(sys.argv[1:]))
"""


def test_processes_that_read_different_input_stop_in_one_line_each(model_path, tmp_path):
    """Each process reads the input itself: one that read other lines made the first write batches it had not planned
    (a KeyError's traceback) and the other end in gloo's; now every process says what differs, before any work."""
    source = write_lines(tmp_path / "in.txt", fixture_lines())
    script = tmp_path / "read_differently.py"
    script.write_text(READ_DIFFERENTLY)
    output = tmp_path / "out.hdf5"
    result = run_two_processes([script, "embed", source, output, "--batch-size", 2, "--model", model_path],
                               SUBPROCESS_ENV)
    said = f"error: {source}: the processes of this run read different input_sha256 (a file changed"
    assert result.returncode != 0 and result.stderr.count(said) == 2, result.stderr[-3000:]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt", "read_differently.py"]


def test_a_run_stopped_on_one_process_resumes_on_two_to_the_same_bytes(model_path, tmp_path):
    """The batch files do not depend on the process count: two processes finish a run that one process began,
    computing only the batches it had not finished, and write what one uninterrupted process writes."""
    lines = (fixture_lines() * 10)[:300] + [""]
    source = write_lines(tmp_path / "in.txt", lines)
    output, partial = tmp_path / "out.hdf5", tmp_path / "out.hdf5.partial"
    arguments = ["embed", source, output, "--batch-size", 2, "--model", model_path]
    run_until_killed(HF_ELMO + list(map(str, arguments)), partial, batches=15)
    finished = [int(Path(name).stem) for name in finished_batches(partial)]
    assert 15 <= len(finished) < 150  # (the blank line needs no batch: 150 batches of 2)

    result = run_two_processes(["-m", "hf_elmo.cli", *arguments], SUBPROCESS_ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    rank_0_finished = sum(1 for k in finished if k % 2 == 0)  # rank 0 has the even batches, 75 of the 150
    assert f"(150 batches: {75 - rank_0_finished} computed by this process, {rank_0_finished} finished by an earlier run" in result.stderr
    ElmoEmbedder(model_path).embed_file(source, tmp_path / "reference.hdf5", batch_size=2, progress=False)
    assert_same_embeddings(output, tmp_path / "reference.hdf5", len(lines))
    assert not partial.exists()

# ---- bad input and interruptions: one clear error, and nothing lost ------------------------------------------------


def run_cli(capsys, *args) -> tuple[int, str]:
    code = main([str(arg) for arg in args])
    return code, capsys.readouterr().err


def test_the_summary_counts_in_words_a_reader_expects(model_path, tmp_path, capsys):
    """`1 sentence`, `1 batch`; `2 sentences`, `2 batches`."""
    for lines, counts in ((["a b c"], "1 sentence in {} (1 batch: 1 computed"),
                          (["a b c", "d e"], "2 sentences in {} (2 batches: 2 computed")):
        output = tmp_path / f"{len(lines)}.hdf5"
        code, err = run_cli(capsys, "embed", write_lines(tmp_path / f"{len(lines)}.txt", lines), output,
                            "--batch-size", 1, "--model", model_path)
        assert code == 0 and f"hf-elmo embed: {counts.format(output)} by this process" in err, err


def test_the_input_is_never_the_output(model_path, tmp_path, capsys):
    """The same file, by the same path, through a symbolic or a hard link: refused, and the text is untouched."""
    source = write_lines(tmp_path / "in.txt", ["a b c", "d e"])
    text = source.read_bytes()
    (tmp_path / "symlink.hdf5").symlink_to(source)
    os.link(source, tmp_path / "hardlink.hdf5")
    for output in (source, tmp_path / "symlink.hdf5", tmp_path / "hardlink.hdf5", Path(os.path.relpath(source))):
        code, err = run_cli(capsys, "embed", source, output, "--model", model_path)
        assert_only_an_error_line(code, err, "is the input file", "give another output file")
    # Nor may the output's lock file be the input (it would be emptied).
    lock_named_input = write_lines(tmp_path / "out.hdf5.lock", ["a b"])
    code, err = run_cli(capsys, "embed", lock_named_input, tmp_path / "out.hdf5", "--model", model_path)
    assert_only_an_error_line(code, err, "is the input file")
    assert source.read_bytes() == text and lock_named_input.read_text() == "a b\n"
    # Nor may the input lie in the output's batch folder, which the run removes at its end.
    (tmp_path / "out.hdf5.partial").mkdir()
    inside = write_lines(tmp_path / "out.hdf5.partial" / "corpus.txt", ["a b"])
    code, err = run_cli(capsys, "embed", inside, tmp_path / "out.hdf5", "--model", model_path)
    assert_only_an_error_line(code, err, f"{inside}: is inside {tmp_path / 'out.hdf5.partial'}", "move the input")
    assert inside.read_text() == "a b\n"
    shutil.rmtree(tmp_path / "out.hdf5.partial")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["hardlink.hdf5", "in.txt", "out.hdf5.lock", "symlink.hdf5"]


def test_a_link_at_the_output_is_written_through(model_path, tmp_path, capsys):
    """`hf-elmo embed IN LINK`, LINK a symbolic link (to a file of an earlier run, or to none yet): the link stays,
    its target gets the embeddings (moving the finished file into place replaced the link with it), and the batch
    folder and lock were beside the target, gone at the end. Links in a loop are refused before the model loads."""
    source = write_lines(tmp_path / "in.txt", ["a b c", "d e"])
    ElmoEmbedder(model_path).embed_file(source, tmp_path / "reference.hdf5", progress=False)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "old.hdf5").write_bytes(b"an earlier run's output")
    for link, target in (("to-old.hdf5", "data/old.hdf5"), ("to-new.hdf5", "data/new.hdf5")):
        (tmp_path / link).symlink_to(target)
        code, err = run_cli(capsys, "embed", source, tmp_path / link, "--model", model_path)
        assert code == 0, err
        assert (tmp_path / link).is_symlink() and os.readlink(tmp_path / link) == target
        assert_same_embeddings(tmp_path / target, tmp_path / "reference.hdf5", 2)
    assert sorted(path.name for path in (tmp_path / "data").iterdir()) == ["new.hdf5", "old.hdf5"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["data", "in.txt", "reference.hdf5", "to-new.hdf5",
                                                                  "to-old.hdf5"]
    # Links in a loop lead to no file: refused in one line before the model loads (a file replaced the link).
    (tmp_path / "loop-a.hdf5").symlink_to("loop-b.hdf5")
    (tmp_path / "loop-b.hdf5").symlink_to("loop-a.hdf5")
    code, err = run_cli(capsys, "embed", source, tmp_path / "loop-a.hdf5", "--model", tmp_path / "no-model")
    assert_only_an_error_line(code, err, "Too many levels of symbolic links", str(tmp_path / "loop-a.hdf5"))
    assert (tmp_path / "loop-a.hdf5").is_symlink() and (tmp_path / "loop-b.hdf5").is_symlink()


def test_output_locations_that_cannot_be_written_fail_before_the_model_loads(tmp_path, capsys, monkeypatch):
    """Checked first: the model named here does not exist, and the error is about the output."""
    source = write_lines(tmp_path / "in.txt", ["a b"])
    (tmp_path / "folder").mkdir()
    a_file = write_lines(tmp_path / "file.txt", ["x"])
    os.mkfifo(tmp_path / "pipe")  # (the run waited for a reader forever; as root, a device such as /dev/null was
    monkeypatch.chdir(tmp_path / "folder")  # replaced by the file)
    cases = {
        tmp_path / "folder": "is a folder; give the path of the file to write",
        tmp_path / "pipe": "pipe: is no regular file (a device or a pipe), which writing would replace",
        Path("."): "folder: is a folder; give the path of the file to write",
        a_file / "out.hdf5": "file.txt: is a file, so",
        a_file / "deeper" / "out.hdf5": "file.txt: is a file, so",
        unwritable_folder(tmp_path) / "out.hdf5": "cannot write there",
        # (a name the file system takes, but not with ".partial" added: refused once the model had loaded)
        tmp_path / ("x" * 250): "its name is too long: the folder of its batches",
    }
    for output, message in cases.items():
        code, err = run_cli(capsys, "embed", source, output, "--model", tmp_path / "no-such-model")
        assert_only_an_error_line(code, err, message)
    write_lines(tmp_path / "out.hdf5.partial", ["in the way"])
    assert_only_an_error_line(*run_cli(capsys, "embed", source, tmp_path / "out.hdf5", "--model", tmp_path / "no-such-model"),
                     "out.hdf5.partial: is a file, where the batches")
    (tmp_path / "other.hdf5.lock").mkdir()  # (open() would fail on it only once the model had loaded)
    assert_only_an_error_line(*run_cli(capsys, "embed", source, tmp_path / "other.hdf5", "--model", tmp_path / "no-such-model"),
                              "other.hdf5.lock: is a folder, where the lock of")
    assert (tmp_path / "pipe").is_fifo() and not (tmp_path / "pipe.lock").exists()


def test_an_input_that_cannot_be_read_fails_before_the_model_loads(tmp_path, capsys):
    """Checked first, with the message that reading it gives: the model named here does not exist, and the error is
    about the input (it came only once the model had loaded). An empty input passes the check: it has no lines."""
    (tmp_path / "folder").mkdir()
    (tmp_path / "latin1.txt").write_bytes("fine\ncaf\xe9\n".encode("latin-1"))
    messages = {
        tmp_path / "missing.txt": "input file not found",
        tmp_path / "folder": "is a folder, not a file",
        tmp_path / "latin1.txt": "line 2 is not UTF-8 text (invalid continuation byte at byte 8)",
    }
    messages[unreadable_file(tmp_path)] = "cannot read the input file (Permission denied)"
    for source, message in messages.items():
        with pytest.raises(ValueError, match=f"^{re.escape(f'{source}: {message}')}$"):
            read_sentences(source)  # what the command said, once the model had loaded
        code, err = run_cli(capsys, "embed", source, tmp_path / "out.hdf5", "--model", tmp_path / "no-such-model")
        assert_only_an_error_line(code, err, f"error: {source}: {message}")
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    assert_only_an_error_line(*run_cli(capsys, "embed", empty, tmp_path / "out.hdf5", "--model", tmp_path / "no-such-model"),
                              "no-such-model: no such folder")
    assert not list(tmp_path.glob("out.hdf5*"))


def test_a_piped_input_is_read_once(model_path, tmp_path, capsys):
    """`hf-elmo embed <(zcat corpus.gz) OUT`: the check before the model loads leaves a pipe alone (reading it would
    use up its text, and the run would embed nothing)."""
    read_end, write_end = os.pipe()
    os.write(write_end, b"a b\nc d e\n")
    os.close(write_end)
    try:
        assert main(["embed", f"/dev/fd/{read_end}", str(tmp_path / "out.hdf5"), "--top", "--model", str(model_path)]) == 0
    finally:
        os.close(read_end)
    output = read_all(tmp_path / "out.hdf5")
    assert json.loads(output["sentence_to_index"][0]) == {"a b": "0", "c d e": "1"}
    assert output["0"].shape == (2, 32) and output["1"].shape == (3, 32)



def test_a_dash_reads_the_standard_input(model_path, tmp_path):
    """`zcat corpus.gz | hf-elmo embed - OUT`: `-` is the standard input, as for other commands (it was "-: input
    file not found"); the output is that of the same lines read from a file."""
    source = write_lines(tmp_path / "in.txt", fixture_lines()[:4])
    with source.open("rb") as lines:
        result = subprocess.run([*HF_ELMO, "embed", "-", tmp_path / "piped.hdf5", "--model", model_path],
                                stdin=lines, env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "hf-elmo embed: 4 sentences in" in result.stderr, result.stderr
    result = subprocess.run([*HF_ELMO, "embed", source, tmp_path / "file.hdf5", "--model", model_path],
                            env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    piped, read = read_all(tmp_path / "piped.hdf5"), read_all(tmp_path / "file.hdf5")
    assert piped.keys() == read.keys() and len(piped) == 5
    assert all(np.array_equal(piped[key], read[key]) for key in read)

def test_a_layer_normalised_mix_is_each_sentences_own_whatever_its_batch(model_path):
    """A mix that layer-normalises (`do_layer_norm`, as AllenNLP's: one mean and variance over the whole batch) gave
    a sentence a vector that depended on the sentences batched with it, so on the length sort and the batch size
    (0.075 off in a fine-tuned head's); the embedder mixes each sentence alone: what the model gives it alone."""
    embedder = ElmoEmbedder(model_path, do_layer_norm=True)
    lines = fixture_lines()[:7]
    alone = [embedder.embed_sentence(line, "mix") for line in lines]  # (one sentence: the model's own output)
    for batch_size in (2, 8):
        batched = list(embedder.embed_sentences([*lines, ""], batch_size=batch_size, output_format="mix"))
        assert batched[-1].shape == (0, embedder.hidden_size)
        assert max(float(np.abs(found - expected).max()) for found, expected in zip(batched, alone)) < 1e-6
    # (what the batch's own statistics give: the difference this test is about)
    with torch.no_grad():
        together = embedder.model(**embedder.tokenizer.encode_words([line.split() for line in lines[:2]]),
                                  return_dict=True).elmo_representations[0]
    assert float((together[0, : len(alone[0])] - torch.from_numpy(alone[0])).abs().max()) > 1e-3


def test_a_hub_id_on_a_machine_that_cannot_reach_the_hub_fails_at_once_or_loads_the_cached_copy(model_path, tmp_path):
    """Without network (and without HF_HUB_OFFLINE), a Hub id, or a folder name mistyped that reads as one, was tried
    for about a minute, each of 10 retries printed, before one line said so; where the Hub's host cannot be looked up,
    the Hub cache's copy loads at once and anything else fails at once, saying why. (`.invalid` names never
    resolve, with or without a network.)"""
    env = {name: value for name, value in SUBPROCESS_ENV.items()
           if name not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", *PROXY_VARIABLES)}
    env.update(HF_HOME=str(tmp_path / "hf_home"), HF_ENDPOINT="https://hub.invalid")
    source = write_lines(tmp_path / "in.txt", ["a b"])
    result = subprocess.run([*HF_ELMO, "embed", source, tmp_path / "out.hdf5", "--model", "someone/elmo"], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "Retry" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: someone/elmo: cannot load the model: no folder of that name here, and the Hub (hub.invalid) cannot be "
        "reached from this machine, whose Hub cache does not hold it")
    fake_hub_snapshot(tmp_path / "hf_home", "someone/elmo", model_path)
    result = subprocess.run([*HF_ELMO, "embed", source, tmp_path / "out.hdf5", "--model", "someone/elmo", "--top"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "Retry" not in result.stderr and read_all(tmp_path / "out.hdf5")["0"].shape == (2, 32)


def test_a_named_pipe_is_read_once_and_an_interrupted_piped_run_resumes(embedder, tmp_path):
    """The input is read once, for its lines and for the digest that the manifest keeps: a named pipe opened a
    second time would wait for a writer forever. A pipe's name (`/dev/fd/63`) is kept as given, so that the same
    command on the same text resumes an interrupted run (resolved, the name was another every run)."""
    lines = fixture_lines()[:6]
    text = ("\n".join(lines) + "\n").encode()
    reference = tmp_path / "reference.hdf5"
    embedder.embed_file(write_lines(tmp_path / "in.txt", lines), reference, batch_size=2, progress=False)
    fifo, results = tmp_path / "corpus.fifo", []
    os.mkfifo(fifo)
    feeder = threading.Thread(target=lambda: fifo.write_bytes(text))
    run = threading.Thread(target=lambda: results.append(
        embedder.embed_file(fifo, tmp_path / "fifo.hdf5", batch_size=2, progress=False)))
    feeder.start(), run.start()
    run.join(timeout=120)
    stuck = run.is_alive()
    if stuck:  # (waiting for a second writer: give it one, so that the test ends)
        fifo.write_bytes(b"")
        run.join()
    feeder.join()
    assert not stuck and results and results[0]["computed"] == 3
    assert_same_embeddings(tmp_path / "fifo.hdf5", reference, 6)

    def piped() -> int:
        read_end, write_end = os.pipe()
        os.write(write_end, text)
        os.close(write_end)
        return read_end

    first = piped()  # (closed after its run, so that the second pipe is /dev/fd/ of the same number, as bash's <(...) is)
    try:
        stop_after_batches(embedder, 1)
        with pytest.raises(KeyboardInterrupt):
            embedder.embed_file(f"/dev/fd/{first}", tmp_path / "piped.hdf5", batch_size=2, progress=False)
    finally:
        del embedder.model.forward
        os.close(first)
    second = piped()
    try:
        assert second == first
        summary = embedder.embed_file(f"/dev/fd/{second}", tmp_path / "piped.hdf5", batch_size=2, progress=False)
    finally:
        os.close(second)
    assert (summary["resumed"], summary["computed"]) == (1, 2)
    assert_same_embeddings(tmp_path / "piped.hdf5", reference, 6)


def test_a_run_resumes_only_with_the_number_of_threads_it_computed_with(embedder, tmp_path):
    """float32 sums split across threads differ in their last bits with the number of threads, so a run stopped
    with 1 thread (as torchrun sets for several processes) and resumed with 2 would mix the two: refused, naming
    both and how to finish; with the same number it resumes, to the bytes of an uninterrupted run."""
    source = write_lines(tmp_path / "in.txt", fixture_lines()[:6])
    embedder.embed_file(source, tmp_path / "reference.hdf5", batch_size=2, progress=False)
    stop_after_batches(embedder, 1)
    try:
        with pytest.raises(KeyboardInterrupt):
            embedder.embed_file(source, tmp_path / "out.hdf5", batch_size=2, progress=False)
    finally:
        del embedder.model.forward
    torch.set_num_threads(2)
    try:
        with pytest.raises(ValueError, match=r"computed with 1 threads per process, this run with 2, .*finish it with 1 "
                                             r"\(OMP_NUM_THREADS=1"):
            embedder.embed_file(source, tmp_path / "out.hdf5", batch_size=2, progress=False)
    finally:
        torch.set_num_threads(1)
    summary = embedder.embed_file(source, tmp_path / "out.hdf5", batch_size=2, progress=False)
    assert (summary["resumed"], summary["computed"]) == (1, 2)
    assert_same_embeddings(tmp_path / "out.hdf5", tmp_path / "reference.hdf5", 6)


def test_devices_that_this_machine_lacks_fail_clearly(tmp_path, capsys):
    """Checked before the model loads: the model named here does not exist, and the error is about the device."""
    source = write_lines(tmp_path / "in.txt", ["a b"])
    devices = [f"cuda:{torch.cuda.device_count()}", "gpu0", "meta"]
    if not torch.cuda.is_available():
        devices.append("cuda")
    for device in devices:
        code, err = run_cli(capsys, "embed", source, tmp_path / "out.hdf5", "--device", device,
                            "--model", tmp_path / "no-such-model")
        assert_only_an_error_line(code, err, f"device '{device}' cannot be used here", "this machine has cpu")
    assert not (tmp_path / "out.hdf5").exists()
    # The device number 0 is the first GPU, as in torch and transformers (it was taken for "no device": the CPU).
    from hf_elmo.embedder import usable_device

    if torch.cuda.is_available():
        assert usable_device(0) == torch.device("cuda:0")
    else:
        with pytest.raises(ValueError, match="device '(0|cuda:0)' cannot be used here"):  # (torch 2.13 | 2.10)
            usable_device(0)


def test_a_byte_order_mark_is_not_part_of_the_first_word(embedder, tmp_path):
    lines = ["EU rejects German call .", "Peter Blackburn"]
    plain = write_lines(tmp_path / "plain.txt", lines)
    (tmp_path / "bom.txt").write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    embedder.embed_file(plain, tmp_path / "plain.hdf5", output_format="top")
    embedder.embed_file(tmp_path / "bom.txt", tmp_path / "bom.hdf5", output_format="top")
    plain_output, bom_output = read_all(tmp_path / "plain.hdf5"), read_all(tmp_path / "bom.hdf5")
    assert np.array_equal(bom_output["0"], plain_output["0"])
    assert json.loads(bom_output["sentence_to_index"][0]) == {lines[0]: "0", lines[1]: "1"}


def stop_after_batches(embedder: ElmoEmbedder, batches: int):
    """Make `embedder` raise KeyboardInterrupt when its batch number `batches` + 1 starts (as Ctrl-C would)."""
    forward, calls = embedder.model.forward, []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) > batches:
            raise KeyboardInterrupt
        return forward(*args, **kwargs)

    embedder.model.forward = interrupted


def interrupted_run(model_path, tmp_path: Path, batches: int):
    """The first 20 fixture lines embedded 2 at a time, stopped (as Ctrl-C would) after `batches` batches: the
    embedder, the input, the output it was writing and its folder of finished batches."""
    source = write_lines(tmp_path / "in.txt", fixture_lines()[:20])
    output, partial = tmp_path / "out.hdf5", tmp_path / "out.hdf5.partial"
    embedder = ElmoEmbedder(model_path)
    stop_after_batches(embedder, batches)
    with pytest.raises(KeyboardInterrupt):
        embedder.embed_file(source, output, batch_size=2, progress=False)
    del embedder.model.forward
    return embedder, source, output, partial


def test_a_damaged_batch_file_is_named_and_computed_again(model_path, tmp_path, caplog):
    """A batch file cut short, and a file named as a batch this run does not have: each is named in a warning and
    removed, and the batch is computed again."""
    embedder, source, output, partial = interrupted_run(model_path, tmp_path, 6)
    damaged = partial / "00000003.hdf5"
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])  # as a full disk or a bad copy leaves it
    stray = partial / "00000099.hdf5"
    shutil.copyfile(partial / "00000000.hdf5", stray)
    summary = embedder.embed_file(source, output, batch_size=2, progress=False)
    assert (summary["computed"], summary["resumed"]) == (5, 5)
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert any(message.startswith(f"{damaged}: is damaged") for message in warnings), warnings
    assert f"{stray}: is no batch of this run; computing that batch again" in warnings
    embedder.embed_file(source, tmp_path / "reference.hdf5", batch_size=2, progress=False)
    assert_same_embeddings(output, tmp_path / "reference.hdf5", 20)


def damage_a_line(path: Path, key: str, damage: str) -> None:
    """Take a line's dataset out of an HDF5 file ("missing"), or make it one word "shorter", or a layer short."""
    with h5py.File(path, "r+") as handle:
        vectors = handle[key][...]
        del handle[key]
        if damage == "shorter":
            handle.create_dataset(key, data=vectors[..., :-1, :])
        elif damage == "a layer short":
            handle.create_dataset(key, data=vectors[:-1])


@pytest.mark.parametrize("damage", ["cut short", "missing", "shorter", "another run's"])
def test_a_damaged_output_being_written_is_named_and_its_batches_computed_again(model_path, tmp_path, caplog, damage):
    """OUTPUT.partial/output.hdf5 cut short, without a line's dataset, with a line of the wrong length, or made for
    another run: named in a warning and made again, and every batch is computed again (none is whole)."""
    embedder, source, output, partial = interrupted_run(model_path, tmp_path, 6)
    path = partial / "output.hdf5"
    if damage == "cut short":
        path.write_bytes(path.read_bytes()[:2000])
    elif damage == "another run's":
        with h5py.File(path, "r+") as handle:
            handle.attrs["hf_elmo_embed"] = json.dumps({"input": "another.txt"})
    else:
        damage_a_line(path, "7", damage)
    summary = embedder.embed_file(source, output, batch_size=2, progress=False)
    assert (summary["computed"], summary["resumed"]) == (10, 0)
    problem = {"cut short": "is damaged (", "missing": "has no dataset 7;",
               "shorter": "dataset 7 has type float32 and shape (3, 25, 32), not that of its line;",
               "another run's": "was made for another run;"}[damage]
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert [message for message in warnings if message.startswith(f"{path}: {problem}")], warnings
    assert all(message.endswith("; computing its batches again") for message in warnings), warnings
    embedder.embed_file(source, tmp_path / "reference.hdf5", batch_size=2, progress=False)
    assert_same_embeddings(output, tmp_path / "reference.hdf5", 20)


STOP_BEFORE_THE_OUTPUT_IS_FINISHED = """
import sys
from hf_elmo import embed_file as embed_module
from hf_elmo.cli import main

def stop(*args):
    raise KeyboardInterrupt  # (as Ctrl-C would, once every process has computed its batches)

embed_module._write_output = stop
sys.exit(main(sys.argv[1:]))
"""


def test_batches_another_process_computed_are_copied_in_and_damaged_ones_computed_again(model_path, tmp_path, caplog):
    """Under torchrun the second process writes its batches' lines into their batch files: a run stopped before
    the first process copied them into the output leaves them, one process finishes the run, and those of them
    that are damaged (a line missing, a line one word short, a line one layer short, one cut short) are named and
    computed again."""
    source = write_lines(tmp_path / "in.txt", fixture_lines()[:20])
    output, partial = tmp_path / "out.hdf5", tmp_path / "out.hdf5.partial"
    script = tmp_path / "stop.py"
    script.write_text(STOP_BEFORE_THE_OUTPUT_IS_FINISHED, encoding="utf-8")
    result = run_two_processes([script, "embed", source, output, "--batch-size", 2, "--model", model_path],
                               SUBPROCESS_ENV)
    assert result.returncode != 0 and not output.exists()
    assert len(finished_batches(partial)) == 10  # (the even ones in output.hdf5, the odd ones with their lines)
    lines_of = {k: batch for k, batch in enumerate(plan_batches(read_sentences(source), 2, False))}
    damage_a_line(partial / "00000001.hdf5", str(lines_of[1][0]), "missing")
    damage_a_line(partial / "00000003.hdf5", str(lines_of[3][1]), "shorter")
    damage_a_line(partial / "00000007.hdf5", str(lines_of[7][0]), "a layer short")
    cut = partial / "00000005.hdf5"
    cut.write_bytes(cut.read_bytes()[:1000])
    summary = ElmoEmbedder(model_path).embed_file(source, output, batch_size=2, progress=False)
    assert (summary["computed"], summary["resumed"]) == (4, 6) and not partial.exists()
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    for start in (f"{partial / '00000001.hdf5'}: has no dataset {lines_of[1][0]}",
                  f"{partial / '00000003.hdf5'}: dataset {lines_of[3][1]} has type float32 and shape",
                  f"{partial / '00000007.hdf5'}: dataset {lines_of[7][0]} has type float32 and shape (2,",
                  f"{cut}: is damaged"):
        assert any(message.startswith(start) for message in warnings), (start, warnings)
    ElmoEmbedder(model_path).embed_file(source, tmp_path / "reference.hdf5", batch_size=2, progress=False)
    assert_same_embeddings(output, tmp_path / "reference.hdf5", 20)


HOLD_OPEN = """
import sys, time, h5py
handle = h5py.File(sys.argv[2], sys.argv[1])
print("held", flush=True)
time.sleep(300)
"""


def test_a_file_of_the_run_that_another_program_holds_open_is_named_and_kept(model_path, tmp_path):
    """HDF5 locks the files it opens (unless HDF5_USE_FILE_LOCKING=FALSE, read when the library starts: the runs
    here are processes started without it). output.hdf5 or a batch file that another program holds open for
    writing, or output.hdf5 held for reading (which the run must write), stops the run with an error that names the
    file; the files are kept (taken for damaged, they were removed and every batch computed again), and once the
    other program lets go the same command finishes the run, computing only the batches missing."""
    locking = {name: value for name, value in SUBPROCESS_ENV.items() if name != "HDF5_USE_FILE_LOCKING"}
    embedder, source, output, partial = interrupted_run(model_path, tmp_path, 6)
    command = HF_ELMO + ["embed", str(source), str(output), "--batch-size", "2", "--model", str(model_path)]
    kept = sorted(path.name for path in partial.iterdir())
    output_being_written, batch_file = partial / "output.hdf5", partial / "00000002.hdf5"
    for mode, held in (("a", output_being_written), ("a", batch_file), ("r", output_being_written)):
        holder = subprocess.Popen([sys.executable, "-c", HOLD_OPEN, mode, str(held)], stdout=subprocess.PIPE,
                                  env=locking, text=True)
        try:
            assert holder.stdout.readline() == "held\n"
            result = subprocess.run(command, env=locking, capture_output=True, text=True, timeout=300)
        finally:
            holder.kill()
            holder.wait()
        assert result.returncode == 2, (mode, held, result.stderr[-2000:])
        assert f"error: {held}: cannot be opened (Unable to " in result.stderr, (mode, held, result.stderr[-2000:])
        assert "; if another program has it open, close it and run the same command again" in result.stderr
        assert sorted(path.name for path in partial.iterdir()) == kept and not output.exists()
    result = subprocess.run(command, env=locking, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "(10 batches: 4 computed by this process, 6 finished by an earlier run" in result.stderr
    embedder.embed_file(source, tmp_path / "reference.hdf5", batch_size=2, progress=False)
    assert_same_embeddings(output, tmp_path / "reference.hdf5", 20)


def test_a_batch_is_marked_done_only_once_its_lines_are_on_the_disk(model_path, tmp_path, monkeypatch):
    """output.hdf5 is sparse: lines that a power cut kept from the disk would read back as zeros, like lines never
    written. So each batch's lines are flushed to the disk (fsync), then its batch file, before that is moved into
    place; and the finished output's move is on the disk before the batch folder is removed. The manifest and
    output.hdf5 itself are on the disk before their moves too."""
    events, fsync, replace = [], os.fsync, os.replace

    def fsync_noted(descriptor):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{descriptor}")))
        fsync(descriptor)

    def replace_noted(source, destination, *args, **kwargs):
        events.append(("replace", str(destination)))
        return replace(source, destination, *args, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync_noted)
    monkeypatch.setattr(os, "replace", replace_noted)
    source, output = write_lines(tmp_path / "in.txt", fixture_lines()[:20]), tmp_path / "out.hdf5"
    ElmoEmbedder(model_path).embed_file(source, output, batch_size=2, progress=False)
    partial, batch_file = tmp_path / "out.hdf5.partial", re.compile(r"\d{8}\.hdf5")
    marked = [i for i, (kind, path) in enumerate(events) if kind == "replace" and batch_file.fullmatch(Path(path).name)]
    assert len(marked) == 10
    for i in marked:
        temporary = str(partial / f".{Path(events[i][1]).name}.tmp-{os.getpid()}")
        assert events[i - 2 : i] == [("fsync", str(partial / "output.hdf5")), ("fsync", temporary)], events
    assert events[-3:] == [("fsync", str(partial / "output.hdf5")), ("replace", str(output)), ("fsync", str(tmp_path))]
    made = [(kind, str(partial / name)) for name in ("manifest.json", "output.hdf5")
            for kind, name in (("fsync", f".{name}.tmp-{os.getpid()}"), ("replace", name))]
    assert events[:4] == made, events[:4]


def test_writing_a_batch_changes_only_the_bytes_of_its_lines(model_path, tmp_path):
    """What makes output.hdf5 safe to kill while it is written: once made, writing a batch writes its lines' bytes
    and nothing else of the file (HDF5's records of the file stay as they are on disk), so a run killed in the
    middle of a write leaves a file that opens, with every batch it finished whole."""
    embedder, source, output, partial = interrupted_run(model_path, tmp_path, 3)
    path = partial / "output.hdf5"
    before = np.frombuffer(path.read_bytes(), np.uint8)
    with h5py.File(path, "r") as handle:
        extents = {key: (handle[key].id.get_offset(), handle[key].id.get_storage_size()) for key in handle
                   if key != "sentence_to_index" and handle[key].size}
    stop_after_batches(embedder, 3)
    with pytest.raises(KeyboardInterrupt):
        embedder.embed_file(source, output, batch_size=2, progress=False)
    del embedder.model.forward
    changed = before != np.frombuffer(path.read_bytes(), np.uint8)
    written_now = {str(line) for batch in plan_batches(read_sentences(source), 2, False)[3:6] for line in batch}
    assert len(extents) == 20 and len(written_now) == 6
    for key, (offset, size) in extents.items():
        assert changed[offset : offset + size].any() == (key in written_now), key
        changed[offset : offset + size] = False
    assert not changed.any(), np.flatnonzero(changed)[:10]


def test_a_stateful_float64_run_resumes_to_the_same_bytes(model_path, tmp_path):
    """The state a stateful batch file keeps for the next batch gives back the model's own: a float64 model's state
    rounded to float32 made a resumed run differ (by 2.4e-7) from one never stopped."""
    source = write_lines(tmp_path / "in.txt", fixture_lines()[:12])
    ElmoEmbedder(model_path, stateful=True, torch_dtype=torch.float64).embed_file(
        source, tmp_path / "reference.hdf5", batch_size=2, progress=False)
    stopped = ElmoEmbedder(model_path, stateful=True, torch_dtype=torch.float64)
    stop_after_batches(stopped, 3)
    with pytest.raises(KeyboardInterrupt):
        stopped.embed_file(source, tmp_path / "out.hdf5", batch_size=2, progress=False)
    summary = ElmoEmbedder(model_path, stateful=True, torch_dtype=torch.float64).embed_file(
        source, tmp_path / "out.hdf5", batch_size=2, progress=False)
    assert (summary["computed"], summary["resumed"]) == (3, 3)
    assert_same_embeddings(tmp_path / "out.hdf5", tmp_path / "reference.hdf5", 12)


def test_a_damaged_stateful_batch_is_computed_again_with_every_batch_after_it(model_path, tmp_path, caplog):
    """Each stateful batch starts from the state the one before it ended with: with batch 3 of 6 finished ones
    damaged, batches 4 and 5 must be computed again too, so that batch 6 starts from batch 5's state (it started from
    the recomputed batch 3's, and its lines came out wrong by 0.36)."""
    source = write_lines(tmp_path / "in.txt", fixture_lines()[:20])
    output, partial = tmp_path / "out.hdf5", tmp_path / "out.hdf5.partial"
    reference = ElmoEmbedder(model_path, stateful=True)
    reference.embed_file(source, tmp_path / "reference.hdf5", batch_size=2, progress=False)
    stopped = ElmoEmbedder(model_path, stateful=True)
    stop_after_batches(stopped, 6)
    with pytest.raises(KeyboardInterrupt):
        stopped.embed_file(source, output, batch_size=2, progress=False)
    damaged = partial / "00000003.hdf5"
    damaged.write_bytes(damaged.read_bytes()[:1000])
    summary = ElmoEmbedder(model_path, stateful=True).embed_file(source, output, batch_size=2, progress=False)
    assert any(record.getMessage().startswith(f"{damaged}: is damaged") for record in caplog.records)
    assert (summary["computed"], summary["resumed"]) == (7, 3)
    assert_same_embeddings(output, tmp_path / "reference.hdf5", 20)


def test_an_interrupted_run_of_another_job_is_refused_and_kept(model_path, tmp_path):
    """A rerun with other settings, with another release of hf-elmo or torch, or on an input changed since, must not
    mix its batches with those of the run that was interrupted."""
    embedder, source, output, partial = interrupted_run(model_path, tmp_path, 3)
    finished = {path.name: path.read_bytes() for path in partial.glob("*.hdf5")}
    assert len(finished_batches(partial)) == 3 and "output.hdf5" in finished

    def assert_refused_and_kept(message: str, batch_size: int = 2) -> None:
        with pytest.raises(ValueError) as raised:
            embedder.embed_file(source, output, batch_size=batch_size, progress=False)
        assert str(raised.value) == f"{partial}: holds batches of an interrupted run {message}"
        assert {path.name: path.read_bytes() for path in partial.glob("*.hdf5")} == finished and not output.exists()

    assert_refused_and_kept("with different batch_size; rerun that command to finish it, or delete the folder to "
                            "start again", batch_size=4)
    # A run of another version, whose manifest holds a key this one does not write (and all of this one's alike):
    manifest = json.loads((partial / "manifest.json").read_text())
    (partial / "manifest.json").write_text(json.dumps({**manifest, "layout": 2}))
    assert_refused_and_kept("of another version of hf-elmo (its manifest.json has layout); finish it with that "
                            "version, or delete the folder to start again")
    # A run of another release of hf-elmo or torch (whose kernels, or batching, may differ in the last bits), and one
    # of a version that recorded none:
    versions = f"hf-elmo {hf_elmo.__version__} and torch {torch.__version__}"
    assert manifest["versions"] == {"hf_elmo": hf_elmo.__version__, "torch": torch.__version__}
    for earlier, named in [({"hf_elmo": "0.0.9", "torch": "2.12.0"}, "hf-elmo 0.0.9 and torch 2.12.0"),
                           (None, "an earlier version of hf-elmo")]:
        recorded = {key: value for key, value in manifest.items() if key != "versions"}
        if earlier is not None:
            recorded["versions"] = earlier
        (partial / "manifest.json").write_text(json.dumps(recorded))
        assert_refused_and_kept(f"with {named}, this run has {versions}, whose numbers may differ in their last bits: "
                                "finish it with the versions it began with, or delete the folder to start again")
    # The input changed since (a line added): that command cannot be run again, so the input is what is named.
    (partial / "manifest.json").write_text(json.dumps(manifest))
    with source.open("a", encoding="utf-8") as text:
        text.write("one more line\n")
    assert_refused_and_kept(f"on another content of {source} (it has changed since): restore it to finish that run, "
                            "or delete the folder to start again")


def test_a_finished_output_beside_another_jobs_interrupted_run_keeps_that_run(model_path, tmp_path):
    """An output that one job finished, and beside it the batches of another job on the same output, interrupted:
    running the first job again said it was done and deleted the other's batches. It is refused, and both are kept."""
    embedder, source, output, partial = interrupted_run(model_path, tmp_path, 3)  # (batches of 2)
    kept = {path.name: path.read_bytes() for path in partial.glob("*.hdf5")}
    partial.rename(tmp_path / "aside")
    embedder.embed_file(source, output, batch_size=4, progress=False)
    (tmp_path / "aside").rename(partial)
    written = output.read_bytes()
    with pytest.raises(ValueError, match=f"^{re.escape(str(partial))}: holds batches of an interrupted run with "
                                         "different batch_size"):
        embedder.embed_file(source, output, batch_size=4, progress=False)
    assert {path.name: path.read_bytes() for path in partial.glob("*.hdf5")} == kept and output.read_bytes() == written


def test_a_run_stopped_before_its_manifest_was_written_whole_is_started_afresh(model_path, embedder, tmp_path):
    """A kill between making OUTPUT.partial and writing its manifest leaves the folder empty, or (before the
    manifest was written in one step) with half a manifest: no batch is lost there, so the next run starts afresh
    (it was refused as "an interrupted run with different" everything, which no rerun could finish). Batch files
    without a manifest are refused as what they are, and kept."""
    source = write_lines(tmp_path / "in.txt", fixture_lines()[:6])
    output, partial = tmp_path / "out.hdf5", tmp_path / "out.hdf5.partial"
    embedder.embed_file(source, tmp_path / "reference.hdf5", batch_size=2, progress=False)
    for left in ("", '{"input": "/tm', "[]"):  # nothing yet, a manifest cut short, one that is no manifest
        partial.mkdir()
        if left:
            (partial / "manifest.json").write_text(left, encoding="utf-8")
        summary = embedder.embed_file(source, output, batch_size=2, progress=False)
        assert (summary["computed"], summary["resumed"]) == (3, 0) and not partial.exists()
        assert_same_embeddings(output, tmp_path / "reference.hdf5", 6)
        output.unlink()
    _, source, output, partial = interrupted_run(model_path, tmp_path, 3)
    (partial / "manifest.json").unlink()
    finished = {path.name: path.read_bytes() for path in partial.glob("*.hdf5")}
    with pytest.raises(ValueError) as raised:
        embedder.embed_file(source, output, batch_size=2, progress=False)
    assert str(raised.value) == (f"{partial}: holds batch files but no manifest.json that says which run they belong "
                                 "to; delete the folder to start again")
    assert {path.name: path.read_bytes() for path in partial.glob("*.hdf5")} == finished
    assert len(finished_batches(partial)) == 3


def test_a_run_stopped_after_writing_its_output_leaves_nothing_to_compute(model_path, tmp_path):
    """A run stopped between writing OUTPUT and removing its batch folder: the same job again computes nothing,
    removes the folder and leaves the output as it was. The output keeps the run's settings and the releases of
    hf-elmo and torch that computed it (its `hf_elmo_embed` attribute), by which it is known."""
    embedder, source, output, partial = interrupted_run(model_path, tmp_path, 3)
    shutil.copytree(partial, tmp_path / "kept")
    embedder.embed_file(source, output, batch_size=2, progress=False)
    written = output.read_bytes()
    with h5py.File(output, "r") as handle:
        recorded = json.loads(handle.attrs["hf_elmo_embed"])
    assert recorded == json.loads((tmp_path / "kept" / "manifest.json").read_text())
    assert recorded["batch_size"] == 2 and recorded["output_format"] == "all"
    assert recorded["versions"] == {"hf_elmo": hf_elmo.__version__, "torch": torch.__version__}
    shutil.copytree(tmp_path / "kept", partial)  # its batches back, as a run stopped before removing them left them
    summary = embedder.embed_file(source, output, batch_size=2, progress=False)
    assert (summary["computed"], summary["resumed"]) == (0, 10) and not partial.exists()
    assert output.read_bytes() == written


def test_the_next_run_removes_the_temporary_files_a_killed_run_left(model_path, tmp_path):
    """`.NAME.tmp-PID`, what a kill in the middle of a write leaves in OUTPUT.partial/, is removed when the next run
    starts (here that run is stopped too, after one batch, so the removal of the folder cannot be what removed it)."""
    embedder, source, output, partial = interrupted_run(model_path, tmp_path, 3)
    leftovers = [partial / ".00000003.hdf5.tmp-4242", partial / ".output.hdf5.tmp-4242"]
    for leftover in leftovers:
        leftover.write_bytes(b"half a file")
    stop_after_batches(embedder, 1)
    with pytest.raises(KeyboardInterrupt):
        embedder.embed_file(source, output, batch_size=2, progress=False)
    assert not any(leftover.exists() for leftover in leftovers) and len(finished_batches(partial)) == 4


def test_a_run_resumes_with_the_model_folder_spelled_another_way(model_path, tmp_path, monkeypatch):
    """The manifest names the model folder by its resolved path: `--model elmo` and `--model ./elmo` are one model."""
    _, source, output, partial = interrupted_run(model_path, tmp_path, 3)
    monkeypatch.chdir(model_path.parent)
    summary = ElmoEmbedder(f"./{model_path.name}").embed_file(source, output, batch_size=2, progress=False)
    assert (summary["computed"], summary["resumed"]) == (7, 3) and not partial.exists()


def test_the_models_digest_is_hashed_once_and_again_after_any_change_of_a_weight(model_path, tmp_path, monkeypatch):
    """The manifest's model_sha256 keeps a run from resuming another model's batches. It is the sha256 of the
    state_dict that earlier versions wrote (their interrupted runs resume), hashed once per model (0.4 s of every run
    at the original size) and again after a weight changes: in place, by load_state_dict, by an optimizer step, by a
    move to another dtype. A run stopped, then resumed in the same process after a weight changed, is refused."""
    from hf_elmo import embed_file as embed_module

    embedder, source, output, partial = interrupted_run(model_path, tmp_path, 3)
    model = embedder.model

    def sha256_now() -> str:  # (as earlier versions hashed the weights)
        digest = hashlib.sha256()
        for name, tensor in model.state_dict().items():
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
        return digest.hexdigest()

    hash_state_dict, hashed = embed_module._state_dict_sha256, []

    def hash_noted(tensors):
        hashed.append(1)
        return hash_state_dict(tensors)

    monkeypatch.setattr(embed_module, "_state_dict_sha256", hash_noted)
    first, saved = embed_module._model_fingerprint(model), {k: v.clone() for k, v in model.state_dict().items()}
    assert first == sha256_now() == json.loads((partial / "manifest.json").read_text())["model_sha256"]
    assert embed_module._model_fingerprint(model) == first and not hashed  # (the run hashed them)
    weight = model.layers[0].recurrent_weight

    def in_place():
        with torch.no_grad():
            weight.mul_(2)

    def optimizer_step():
        weight.grad = torch.ones_like(weight)
        torch.optim.SGD([weight], lr=0.1).step()
        weight.grad = None

    changes = {"in place": in_place, "load_state_dict": lambda: model.load_state_dict(saved),
               "optimizer step": optimizer_step, "dtype": lambda: model.to(torch.float64)}
    for count, (change, make) in enumerate(changes.items(), start=1):
        make()
        digest = embed_module._model_fingerprint(model)
        assert len(hashed) == count and digest == sha256_now(), change
        assert embed_module._model_fingerprint(model) == digest and len(hashed) == count, change
        assert (digest == first) == (change == "load_state_dict"), change
    model.to(torch.float32).load_state_dict(saved)
    in_place()
    with pytest.raises(ValueError, match=r"holds batches of an interrupted run with different model_sha256"):
        embedder.embed_file(source, output, batch_size=2, progress=False)


KILL_BEFORE_THE_MOVE = """
import os, signal, sys
from hf_elmo.cli import main

replace = os.replace

def replace_then_die(source, destination, *args, **kwargs):
    if str(source).endswith("out.hdf5.partial/output.hdf5"):  # finished, about to be moved into place
        os.kill(os.getpid(), signal.SIGKILL)
    return replace(source, destination, *args, **kwargs)

os.replace = replace_then_die
sys.exit(main(sys.argv[1:]))
"""


def test_a_kill_before_the_output_is_moved_into_place_leaves_nothing_behind(model_path, tmp_path):
    lines = fixture_lines()[:12]
    source = write_lines(tmp_path / "in.txt", lines)
    output = tmp_path / "out.hdf5"
    command = ["embed", str(source), str(output), "--batch-size", "4", "--model", str(model_path)]
    killed = subprocess.run([sys.executable, "-c", KILL_BEFORE_THE_MOVE, *command], env=SUBPROCESS_ENV,
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not output.exists() and len(finished_batches(tmp_path / "out.hdf5.partial")) == 3
    # (on a file of millions of lines these take minutes: each has its progress bar)
    assert "hf-elmo embed: making output.hdf5" in killed.stderr and "hf-elmo embed: checking" not in killed.stderr
    result = subprocess.run(HF_ELMO + command, env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "0 computed by this process, 3 finished by an earlier run" in result.stderr
    assert "hf-elmo embed: checking output.hdf5" in result.stderr and "hf-elmo embed: making" not in result.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt", "out.hdf5"]
    ElmoEmbedder(model_path).embed_file(source, tmp_path / "reference.hdf5", batch_size=4, progress=False)
    assert_same_embeddings(output, tmp_path / "reference.hdf5", len(lines), same_bytes=True)


def test_kills_at_several_points_resume_to_the_same_bytes_and_a_second_run_is_refused(model_path, tmp_path):
    """Three runs killed (SIGKILL) at different points, then one that finishes: exactly the bytes of one run
    without interruption. While the first runs, a second run on the same output is refused; the killed runs
    leave no lock behind."""
    lines = (fixture_lines() * 10)[:300] + [""]
    source = write_lines(tmp_path / "in.txt", lines)
    output, partial = tmp_path / "out.hdf5", tmp_path / "out.hdf5.partial"
    command = HF_ELMO + ["embed", str(source), str(output), "--batch-size", "2", "--model", str(model_path)]

    first = subprocess.Popen(command, env=SUBPROCESS_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and first.poll() is None and len(finished_batches(partial)) < 5:
        time.sleep(0.02)
    first.send_signal(signal.SIGSTOP)  # holding its lock
    try:
        second = subprocess.run(command, env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=300)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert second.returncode == 2, second.stderr[-2000:]
    assert f"error: {output}: another run is writing it" in second.stderr
    counts = [len(finished_batches(partial))]
    for batches in (50, 100):
        run_until_killed(command, partial, batches)
        counts.append(len(finished_batches(partial)))
    assert 5 <= counts[0] < 50 <= counts[1] < 100 <= counts[2] < 150, counts
    assert (tmp_path / "out.hdf5.lock").is_file()  # (a killed run's lock file stays, unlocked, until a run ends)
    result = subprocess.run(command, env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"{150 - counts[2]} computed by this process, {counts[2]} finished by an earlier run" in result.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt", "out.hdf5"]
    ElmoEmbedder(model_path).embed_file(source, tmp_path / "reference.hdf5", batch_size=2, progress=False)
    assert_same_embeddings(output, tmp_path / "reference.hdf5", len(lines), same_bytes=True)


def test_pinned_caches_make_a_batch_depend_on_the_file_and_the_batch_alone(embedder):
    """What makes resumed runs exact: the caches hold the file's frequent words, computed once in a fixed order, and
    nothing else, so the words embedded before a batch do not change its numbers (they did by up to 1e-6)."""
    from hf_elmo.embed_file import pin_frequent_words, unpin_words

    lines = fixture_lines()
    token_cache = embedder.model.char_encoder.token_cache
    pin_frequent_words(embedder, lines[:20])
    try:
        pinned = len(token_cache)
        assert pinned == len({word for line in lines[:20] for word in line.split()}) + 2  # and <S>, </S>
        alone = embedder.embed_batch(lines[25:28])
        for history in (lines[20:25], lines[28:30] + ["entirely new words here"]):
            for other in history:
                embedder.embed_batch([other])
            assert len(token_cache) == pinned  # nothing new kept
            assert all(np.array_equal(a, b) for a, b in zip(embedder.embed_batch(lines[25:28]), alone))
    finally:
        unpin_words(embedder)
    assert token_cache.add_new and embedder.model.layers[0].input_gate_cache.add_new
    assert len(token_cache) == pinned  # the words stay


def test_a_pinned_batch_of_held_and_new_words_gives_the_uncached_models_numbers(model_path):
    """With the caches pinned (as `hf-elmo embed` runs), a batch of pinned words and words it has not seen takes
    the held words from the caches and computes the others: every layer as the model without caches gives it (the
    test above compares a batch with itself, both sides on that path)."""
    from hf_elmo.embed_file import pin_frequent_words, unpin_words

    embedder, uncached = ElmoEmbedder(model_path), ElmoEmbedder(model_path)
    uncached.model.char_encoder.token_cache.max_words = 0
    uncached.model.layers[0].input_gate_cache.max_words = 0
    token_cache = embedder.model.char_encoder.token_cache
    lines = fixture_lines()
    batch = lines[25:28] + ["entirely novel words here"]
    pin_frequent_words(embedder, lines[:20])
    try:
        hits, misses = token_cache.hits, token_cache.misses
        found = embedder.embed_batch(batch)
        assert token_cache.hits > hits and token_cache.misses > misses  # (held words and computed ones)
    finally:
        unpin_words(embedder)
    worst = max(np.abs(a - b).max() for a, b in zip(found, uncached.embed_batch(batch), strict=True))
    assert worst < 1e-5, worst


def test_a_run_stopped_while_pinning_leaves_the_caches_filling_as_they_go(embedder, tmp_path, monkeypatch):
    """embed_file pinned its frequent words before the block that unpins them: stopped there (Ctrl-C in the first
    layer's pass over the pinned words), it left the embedder's caches keeping no new word for the rest of the
    process. The lock goes too."""
    source = write_lines(tmp_path / "in.txt", fixture_lines()[:10])
    layer = embedder.model.layers[0]

    def stopped(*arguments, **options):
        raise KeyboardInterrupt

    monkeypatch.setattr(layer, "forward", stopped)
    with pytest.raises(KeyboardInterrupt):
        embedder.embed_file(source, tmp_path / "out.hdf5", progress=False)
    assert embedder.model.char_encoder.token_cache.add_new and layer.input_gate_cache.add_new
    assert not (tmp_path / "out.hdf5.lock").exists()


def test_pinning_fills_the_token_cache_to_its_size_with_the_most_frequent_words(model_path):
    """README: the token cache gets as many of the file's most frequent words as it holds, the sentence boundaries
    among them, and no more: with room for 10 and 30 words in the file, the boundaries and the 8 most frequent."""
    from hf_elmo.embed_file import pin_frequent_words, unpin_words

    embedder = ElmoEmbedder(model_path)
    token_cache = embedder.model.char_encoder.token_cache
    token_cache.max_words = 10
    sentences = [" ".join(f"w{i}" for i in range(30)), "w7 w3 w3 w12 w12 w12"]
    pin_frequent_words(embedder, sentences)
    try:
        assert len(token_cache) == 10
        with torch.inference_mode():  # (the pinned words are found: no new row is computed for them)
            hits = token_cache.hits
            embedder.model.char_encoder(torch.tensor([embedder.tokenizer.word_to_char_ids(word) for word in
                                                     ["<S>", "</S>", "w12", "w3", "w7", "w0", "w1", "w10", "w11", "w13"]]))
            assert token_cache.hits == hits + 10 and len(token_cache) == 10
    finally:
        unpin_words(embedder)


@pytest.mark.parametrize("gate_words", [None, 6])
def test_pinning_fills_the_gate_cache_with_the_first_layers_gates_of_the_frequent_words(model_path, gate_words):
    """README: `hf-elmo embed` fills both caches with the file's most frequent words and keeps exactly those: the first
    biLSTM layer's gate cache holds the input gates of the pinned words' vectors (as many as it has room for, the most
    frequent first: all of them at its default size), computed exactly, and adds no word while pinned."""
    from collections import Counter

    from hf_elmo.embed_file import pin_frequent_words, unpin_words
    from hf_elmo.fast_bilstm import forget_biased

    embedder = ElmoEmbedder(model_path)
    model, tokenizer = embedder.model, embedder.tokenizer
    token_cache, gate_cache, layer = model.char_encoder.token_cache, model.layers[0].input_gate_cache, model.layers[0]
    if gate_words is not None:
        gate_cache.max_words = gate_words
    lines = fixture_lines()
    counts = Counter(word for line in lines[:20] for word in line.split())
    ranked = sorted(counts, key=lambda word: (-counts[word], word))
    words = [*tokenizer.sentence_boundaries, *ranked][: gate_cache.max_words]
    pin_frequent_words(embedder, lines[:20])
    try:
        assert not gate_cache.add_new and len(gate_cache) == (len(token_cache) if gate_words is None else gate_words)
        assert len(gate_cache) == len(words)
        with torch.inference_mode():  # the pinned words' vectors, from the (pinned) token cache
            vectors = model.char_encoder(torch.tensor([tokenizer.word_to_char_ids(word) for word in words]))

            def not_pinned(rows):
                raise AssertionError(f"{rows.shape[0]} of the words are not in the gate cache")

            table, index = gate_cache.lookup(not_pinned, vectors, [layer.input_weight, layer.bias])
            gates = table.index_select(0, index)  # [words, 2 directions, 4C]
            expected = torch.stack([vectors @ layer.input_weight[d].T + forget_biased(layer)[d] for d in range(2)], 1)
        assert (gates - expected).abs().max().item() < 1e-5
        # A batch of pinned words and 2 new ones (no more distinct words than the cache holds, which it would skip).
        hits, misses = gate_cache.hits, gate_cache.misses
        probe, new = words[2 : len(words) - 2], ["entirely", "novel"]
        assert not set(new) & set(ranked)
        embedder.embed_batch([" ".join(probe), " ".join(new)])
        assert gate_cache.hits - hits == len(probe) + 2  # each pinned word (<S> and </S> included) once
        assert gate_cache.misses - misses == 2  # the new ones computed ...
        assert len(gate_cache) == len(words)  # ... and not kept
    finally:
        unpin_words(embedder)
    assert gate_cache.add_new


def spread(sentences: list[str], batches) -> int:
    """The largest difference in words between two lines of one batch."""
    lengths = [[len(sentences[line].split()) for line in batch] for batch in batches]
    return max(max(batch) - min(batch) for batch in lengths)


def test_batches_hold_lines_of_similar_length_or_consecutive_lines_when_stateful():
    """README: stateless, lines of similar length are batched together (blank lines, which need no model, in none);
    stateful, batches of `batch_size` consecutive lines in file order, blank lines included."""
    lengths = [5, 1, 3, 5, 1, 3, 0, 5, 1, 3]
    sentences = [" ".join(["word"] * length) for length in lengths]
    stateless = plan_batches(sentences, 3, stateful=False)
    assert sorted(sorted(batch) for batch in stateless) == [[0, 3, 7], [1, 4, 8], [2, 5, 9]]  # one length each
    assert plan_batches(sentences, 3, stateful=True) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    many = [" ".join(["word"] * (line * 7 % 50 + 1)) for line in range(200)]
    for batch_size in (1, 4, 64):
        batches = plan_batches(many, batch_size, stateful=False)
        assert sorted(line for batch in batches for line in batch) == list(range(200))
        assert all(1 <= len(batch) <= batch_size for batch in batches)
        in_file_order = [range(start, min(start + batch_size, 200)) for start in range(0, 200, batch_size)]
        if batch_size > 1:  # the longest batch's spread of lengths, against batches in file order
            assert spread(many, batches) < spread(many, in_file_order) / 2, (spread(many, batches), batch_size)


def test_stateless_batches_are_sorted_within_windows_of_consecutive_lines():
    """Each window of SORT_WINDOW_BATCHES * batch_size consecutive lines is sorted by length and cut into batches:
    no batch holds lines of two windows, however the lengths run (here the longest first, the reverse of a sort)."""
    window = SORT_WINDOW_BATCHES * 2
    batches = length_sorted_batches(list(range(300, 0, -1)), 2)
    assert sorted(line for batch in batches for line in batch) == list(range(300))
    assert [{line // window for line in batch} for batch in batches] == [{0}] * 64 + [{1}] * 64 + [{2}] * 22
    assert batches[0] == [window - 1, window - 2]  # the shortest lines of the first window


def test_embed_sentences_runs_batches_of_similar_length_and_yields_in_order(embedder):
    """`embed_sentences` (stateless) as its docstring says: lines of 1 and 9 words alternating run in batches of one
    length each (no padding computed), and the vectors come back in the input's order."""
    sentences = [("a b c d e f g h i" if k % 2 else "a") for k in range(8)]
    forward, widths = embedder.model.forward, []
    embedder.model.forward = lambda *args, **kwargs: widths.append(
        tuple(kwargs["attention_mask"].sum(dim=1).tolist())) or forward(*args, **kwargs)
    try:
        results = list(embedder.embed_sentences(sentences, batch_size=2, output_format="top"))
    finally:
        del embedder.model.forward
    assert sorted(widths) == [(1, 1)] * 2 + [(9, 9)] * 2
    assert [result.shape[0] for result in results] == [len(sentence.split()) for sentence in sentences]


def test_the_commands_batch_size_is_the_functions():
    """`hf-elmo embed` without --batch-size plans the batches that `embed_file` does without batch_size, so that a
    run started by one resumes by the other (the manifest records the size)."""
    import argparse
    import inspect

    from hf_elmo.cli import add_embed_parser

    parser = argparse.ArgumentParser()
    add_embed_parser(parser.add_subparsers(dest="command"))
    default = inspect.signature(embed_module.embed_file).parameters["batch_size"].default
    assert parser.parse_args(["embed", "in.txt", "out.hdf5"]).batch_size == default == 64


@pytest.mark.parametrize("stateful", [False, True])
def test_tokenising_ahead_in_a_thread_gives_the_same_bytes(model_path, tmp_path, stateful):
    """What `hf-elmo embed` does on a GPU (the next batch tokenised while the model computes this one), here on the
    CPU: every batch but the first is tokenised in another thread, and the file is the same, bit for bit."""
    lines = fixture_lines() + ["", "last"]
    source = write_lines(tmp_path / "in.txt", lines)
    embedder = ElmoEmbedder(model_path, stateful=stateful)
    tokenize, threads = embedder.tokenize_batch, []

    def tokenize_noting_the_thread(sentences):
        threads.append(threading.get_ident())
        return tokenize(sentences)

    embedder.tokenize_batch = tokenize_noting_the_thread
    embedder.embed_file(source, tmp_path / "ahead.hdf5", batch_size=4, progress=False, tokenize_ahead=True)
    assert len(threads) == len(plan_batches(lines, 4, stateful)) and threading.get_ident() not in threads
    threads.clear()
    embedder.embed_file(source, tmp_path / "in-turn.hdf5", batch_size=4, progress=False)  # (the CPU's default)
    assert set(threads) == {threading.get_ident()}
    assert_same_embeddings(tmp_path / "ahead.hdf5", tmp_path / "in-turn.hdf5", len(lines))


def test_two_runs_a_second_apart_give_the_same_bytes(embedder, tmp_path):
    """The output records no time: h5py before 3.16 (HDF5 1.14, `make test-floors`) wrote the root group's times,
    and outputs made in different seconds differed in them."""
    source = write_lines(tmp_path / "in.txt", fixture_lines())
    embedder.embed_file(source, tmp_path / "first.hdf5", batch_size=4, progress=False)
    time.sleep(1.1)
    embedder.embed_file(source, tmp_path / "second.hdf5", batch_size=4, progress=False)
    assert (tmp_path / "first.hdf5").read_bytes() == (tmp_path / "second.hdf5").read_bytes()


@pytest.mark.parametrize("stateful", [False, True])
def test_writing_behind_the_model_gives_the_same_bytes_and_holds_few_batches(model_path, tmp_path, stateful,
                                                                              monkeypatch):
    """What `hf-elmo embed` does on a GPU (each batch's file written in a thread while the model computes the next
    batch), here on the CPU with a slow disk: every batch file is written in another thread, never more than
    WRITES_WAITING + 1 computed batches wait for the writer, and the file is the same, byte for byte. A run stopped
    with writes waiting finishes them first (their batches are whole) and resumes to the same bytes."""
    from hf_elmo import embed_file as embed_module

    lines = fixture_lines() + ["", "last"]
    source = write_lines(tmp_path / "in.txt", lines)
    embedder, batches = ElmoEmbedder(model_path, stateful=stateful), len(plan_batches(lines, 3, stateful))
    embedder.embed_file(source, tmp_path / "in-turn.hdf5", batch_size=3, progress=False, write_behind=False)
    save_batch, forward = embed_module._save_batch, embedder.model.forward
    threads, written, waiting = set(), [], []

    def slow_save_batch(*args):
        threads.add(threading.get_ident())
        time.sleep(0.05)
        save_batch(*args)
        written.append(args[0].name)

    def forward_noting_the_batches_waiting(*args, **kwargs):
        waiting.append(len(waiting) - len(written))  # batches computed before this one and not yet written
        return forward(*args, **kwargs)

    monkeypatch.setattr(embed_module, "_save_batch", slow_save_batch)
    embedder.model.forward = forward_noting_the_batches_waiting
    embedder.embed_file(source, tmp_path / "behind.hdf5", batch_size=3, progress=False, write_behind=True)
    assert len(written) == batches and threading.get_ident() not in threads
    assert max(waiting) == embed_module.WRITES_WAITING + 1, waiting
    assert (tmp_path / "behind.hdf5").read_bytes() == (tmp_path / "in-turn.hdf5").read_bytes()

    output, partial = tmp_path / "stopped.hdf5", tmp_path / "stopped.hdf5.partial"
    stop_after_batches(embedder, 5)  # (writes queued then: batches 4 and 5 at least)
    with pytest.raises(KeyboardInterrupt):
        embedder.embed_file(source, output, batch_size=3, progress=False, write_behind=True)
    del embedder.model.forward
    assert len(finished_batches(partial)) == 5 and not list(partial.glob(".*tmp-*"))
    summary = embedder.embed_file(source, output, batch_size=3, progress=False, write_behind=True)
    assert (summary["computed"], summary["resumed"]) == (batches - 5, 5)
    assert_same_embeddings(output, tmp_path / "in-turn.hdf5", len(lines))


def test_a_write_that_fails_behind_the_model_is_the_runs_error_and_leaves_no_part_of_its_batch(model_path, tmp_path,
                                                                                                monkeypatch):
    """A batch that cannot be written (here the disk fills after the first of batch 3's lines) while the model
    computes the next batches stops the run within two batches with the write's own error, raised by embed_file:
    that batch is not marked done (its line written is no part of a finished batch), and the next run computes the
    batches missing, to the bytes of a run never stopped."""
    source = write_lines(tmp_path / "in.txt", fixture_lines()[:20])
    output, partial = tmp_path / "out.hdf5", tmp_path / "out.hdf5.partial"
    embedder = ElmoEmbedder(model_path)
    embedder.embed_file(source, tmp_path / "reference.hdf5", batch_size=2, progress=False)
    write, failed_in, batches_run = embed_module._PartialOutput.write, [], []
    batch_3 = plan_batches(read_sentences(source), 2, False)[3]

    def disk_full_in_batch_3(output, lines, arrays):
        if lines == batch_3:
            write(output, lines[:1], arrays[:1])
            failed_in.append(threading.get_ident())
            raise OSError(28, "No space left on device")
        write(output, lines, arrays)

    monkeypatch.setattr(embed_module._PartialOutput, "write", disk_full_in_batch_3)
    forward = embedder.model.forward
    embedder.model.forward = lambda *args, **kwargs: batches_run.append(1) or forward(*args, **kwargs)
    with pytest.raises(OSError) as raised:
        embedder.embed_file(source, output, batch_size=2, progress=False, write_behind=True)
    del embedder.model.forward
    assert failed_in and threading.get_ident() not in failed_in and len(batches_run) <= 4 + 2
    finished = finished_batches(partial)
    assert str(raised.value) == (
        f"{output}: could not be written (No space left on device); the {len(finished)} of 10 batches finished are "
        f"kept in {partial}, and the same command run again goes on from them")
    assert "00000003.hdf5" not in finished and {"00000000.hdf5", "00000001.hdf5", "00000002.hdf5"} <= finished.keys()
    assert not list(partial.glob(".*tmp-*")) and not output.exists()
    monkeypatch.undo()
    summary = embedder.embed_file(source, output, batch_size=2, progress=False, write_behind=True)
    assert (summary["computed"], summary["resumed"]) == (10 - len(finished), len(finished))
    assert_same_embeddings(output, tmp_path / "reference.hdf5", 20)



@pytest.mark.parametrize("lines", [1, 30])
def test_the_size_an_output_is_checked_for_is_never_below_the_file_written(embedder, tmp_path, lines):
    """The room a run asks for before it starts (`_output_bytes`) is at least the size of the output it then writes,
    and at most a little more (HDF5's records of the file, 6 kB, are counted at 16 kB): with and without
    sentence_to_index, with sentences as keys, every output format."""
    source = write_lines(tmp_path / "in.txt", [line for line in fixture_lines() if "/" not in line][:lines])
    sentences = read_sentences(source)
    for output_format in ("all", "top"):
        for use_sentence_keys, forget_sentences in [(False, False), (False, True), (True, False)]:
            output = tmp_path / f"{output_format}-{use_sentence_keys}-{forget_sentences}.hdf5"
            embedder.embed_file(source, output, output_format=output_format, use_sentence_keys=use_sentence_keys,
                                forget_sentences=forget_sentences, progress=False)
            keys = embed_module._line_keys(sentences, use_sentence_keys)
            shapes = embed_module._line_shapes(embedder, sentences, output_format)
            _, size = embed_module._output_bytes(keys, shapes, sentences, not (use_sentence_keys or forget_sentences))
            written = output.stat().st_size
            assert written <= size <= written * 1.01 + embed_module.FILE_RECORD_BYTES, (output.name, written, size)


def test_an_output_larger_than_the_file_size_limit_is_refused_before_any_work(model_path, tmp_path):
    """Under a limit on the size of a file (`ulimit -f`) below the output's, HDF5 could not extend the output.hdf5 it
    was making: the run ended with HDF5's own message (two lines long, in a child process here as there) and then
    crashed as it exited (SIGSEGV, exit 139 in a shell). It is refused now in one line that names the output, its
    size and the limit, before the folder of its batches is made; without the limit the same command runs."""
    source = write_lines(tmp_path / "in.txt", fixture_lines())
    output = tmp_path / "out.hdf5"
    sentences = read_sentences(source)
    _, size = embed_module._output_bytes(embed_module._line_keys(sentences, False),
                                         embed_module._line_shapes(ElmoEmbedder(model_path), sentences, "all"),
                                         sentences, True)
    limit = size // 2
    child = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"  # (a write past the limit then fails, EFBIG)
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, resource.RLIM_INFINITY))\n"
        "from hf_elmo.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    result = subprocess.run([sys.executable, "-c", child, "embed", source, output, "--model", model_path],
                            env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=300)
    assert_one_error(result.returncode, result.stderr,
                     f"error: {output}: would be a file of about {size / 1e6:,.1f} MB, and this process may write "
                     f"files of at most {limit / 1e6:,.1f} MB (`ulimit -f`)")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt"]
    result = subprocess.run([*HF_ELMO, "embed", source, output, "--model", model_path], env=SUBPROCESS_ENV,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and len(read_all(output)) == 31, result.stderr


def test_an_output_the_disk_has_no_room_for_is_refused_before_any_work(embedder, tmp_path, monkeypatch):
    """A disk with less room than the output needs is said before the model computes anything (the run stopped
    when the disk was full, perhaps hours in), in one error that names the output, the room it needs and the room
    there is, leaving nothing behind; with exactly that room the run goes on. (The free space the system reports
    is set here: a full disk cannot be made without privileges.)"""
    source = write_lines(tmp_path / "in.txt", fixture_lines())
    output, sentences = tmp_path / "out.hdf5", read_sentences(source)
    _, size = embed_module._output_bytes(embed_module._line_keys(sentences, False),
                                         embed_module._line_shapes(embedder, sentences, "all"), sentences, True)
    disk = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: disk._replace(free=size - 1))
    forward = embedder.model.forward
    embedder.model.forward = lambda *args, **kwargs: pytest.fail("the model ran")
    try:
        with pytest.raises(ValueError) as raised:
            embedder.embed_file(source, output, progress=False)
    finally:
        del embedder.model.forward
    assert str(raised.value) == (f"{output}: needs about {size / 1e6:,.1f} MB on the disk, and {tmp_path} has "
                                 f"{(size - 1) / 1e6:,.1f} MB free: make room, or write the output elsewhere")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt"]
    monkeypatch.setattr(shutil, "disk_usage", lambda path: disk._replace(free=size))
    assert embedder.embed_file(source, output, progress=False)["computed"] > 0 and len(read_all(output)) == 31
    assert forward == embedder.model.forward
    # Under torchrun, the lines of the processes but the first are also in their batch files until the end.
    numbers, _ = embed_module._output_bytes([], embed_module._line_shapes(embedder, sentences, "all"), [], False)
    monkeypatch.setattr(embed_module, "process_state", lambda: types.SimpleNamespace(num_processes=4))
    with pytest.raises(ValueError, match=f"needs about {(size + numbers * 3 // 4) / 1e6:,.1f} MB on the disk"):
        embed_module._check_room(tmp_path / "other.hdf5.partial", embed_module._line_keys(sentences, False),
                                 embed_module._line_shapes(embedder, sentences, "all"), sentences, True)


def file_size_limited(limit: int, skip_the_check: bool = False) -> str:
    """A Python program that runs `hf-elmo` with files limited to `limit` bytes, a write past it failing (EFBIG) rather
    than killing the process; `skip_the_check`: without embed's check of the room (as if the disk filled after it)."""
    return ("import resource, signal, sys\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, resource.RLIM_INFINITY))\n"
            "from hf_elmo import embed_file\n"
            + ("embed_file._check_room = lambda *args: None\n" if skip_the_check else "")
            + "from hf_elmo.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")


def test_a_write_that_fails_after_the_check_is_an_error_and_no_line_is_lost(model_path, tmp_path):
    """Where the disk fills after the check (here: the check skipped, and a file size limit below the output's size,
    on a resumed run whose sparse output.hdf5 is made), HDF5 had held each line's bytes in its buffer and written them
    when the line's dataset was released: h5py could only print that write's failure, the batch counted as done, and
    the next run ended "successfully" with lines of zeros (or crashed). Now the write fails as it is made: one error
    line, and the same command without the limit finishes with every line equal to an uninterrupted run's. Making
    output.hdf5 under the limit is one line that names the folder (it was HDF5's message alone)."""
    embedder, source, output, partial = interrupted_run(model_path, tmp_path, 3)
    reference = tmp_path / "reference.hdf5"
    embedder.embed_file(source, reference, batch_size=2, progress=False)
    command = ["embed", str(source), str(output), "--model", str(model_path), "--batch-size", "2"]
    limit = (partial / "output.hdf5").stat().st_size // 2
    result = subprocess.run([sys.executable, "-c", file_size_limited(limit, skip_the_check=True), *command],
                            env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=300)
    assert_one_error(result.returncode, result.stderr, f"error: {output}: could not be written (File too large); ",
                     "the same command run again goes on from them")
    assert main(command) == 0
    assert_same_embeddings(output, reference, 20)
    assert all(array.any() for key, array in read_all(output).items() if key != "sentence_to_index")

    other = tmp_path / "other.hdf5"
    result = subprocess.run([sys.executable, "-c", file_size_limited(limit, skip_the_check=True),
                             *[other if part == str(output) else part for part in command]],
                            env=SUBPROCESS_ENV, capture_output=True, text=True, timeout=300)
    assert_one_error(result.returncode, result.stderr,
                     f"error: {other}.partial: could not be made ready (File too large)")


def test_a_resumed_run_is_checked_for_the_room_it_still_needs(model_path, tmp_path):
    """The check of the output's size against the file size limit ran only where output.hdf5 was not yet made: a
    resumed run under a smaller `ulimit -f` went on until its writes failed. Now it is refused before any work."""
    embedder, source, output, partial = interrupted_run(model_path, tmp_path, 3)
    before = finished_batches(partial)
    size = (partial / "output.hdf5").stat().st_size
    result = subprocess.run([sys.executable, "-c", file_size_limited(size // 2), "embed", str(source), str(output), "--model",
                             str(model_path), "--batch-size", "2"], env=SUBPROCESS_ENV, capture_output=True,
                            text=True, timeout=300)
    assert_one_error(result.returncode, result.stderr, f"error: {output}: would be a file of about ",
                     "(`ulimit -f`)")
    assert finished_batches(partial) == before


def dataset_properties(path: Path) -> dict:
    """What a reader can see of each dataset of an HDF5 file, and of the file: names in order, attributes, and per
    dataset the character set of its name, its bytes, type, shape, layout, filters, fill value and times, and
    attributes (not when its space was allocated and filled)."""
    found = {}
    with h5py.File(path, "r") as handle:
        found[""] = (list(handle), dict(handle.attrs), handle.id.get_create_plist().get_link_creation_order())
        for name, dataset in handle.items():
            plist, fill = dataset.id.get_create_plist(), np.zeros(1, dataset.dtype)
            plist.get_fill_value(fill)
            data = dataset[...]
            data = data.tolist() if data.dtype.kind == "O" else data.tobytes()  # (strings: as themselves)
            found[name] = (handle.id.links.get_info(name.encode()).cset, data, dataset.dtype, dataset.shape,
                           dataset.chunks, plist.get_layout(),
                           plist.get_nfilters(), fill.tobytes(), plist.get_obj_track_times(),
                           plist.get_attr_creation_order(), dict(dataset.attrs))
    return found


def test_the_output_holds_what_h5py_writes_for_each_lines_array(embedder, tmp_path):
    """embed_file makes each line's dataset with HDF5's low-level calls, its space allocated before any batch: what
    a reader sees is what h5py's `handle[key] = array` writes for the same arrays, dataset by dataset (name and its
    character set, bytes, type, shape, layout, filters, fill value, times, attributes) and for the file (names in
    order, manifest), blank lines, sentence keys (one not ASCII: its name is marked UTF-8) and sentence_to_index
    included; and each line's array is `embed_batch`'s."""
    lines = ["EU rejects German call .", "", "Peter Blackburn", "Zürich ist schön .", "EU rejects German call"]
    source = write_lines(tmp_path / "in.txt", lines)
    keyed = write_lines(tmp_path / "keyed.txt", [line for line in lines if line])
    runs = {"all": (source, {}), "top": (source, {"output_format": "top"}),
            "forget": (source, {"forget_sentences": True}),
            "keys": (keyed, {"use_sentence_keys": True, "output_format": "mix"})}
    for name, (text, options) in runs.items():
        output, rewritten = tmp_path / f"{name}.hdf5", tmp_path / f"{name}-h5py.hdf5"
        embedder.embed_file(text, output, batch_size=2, progress=False, **options)
        with h5py.File(output, "r") as found, h5py.File(rewritten, "w", track_order=True) as written:
            written.attrs.update(found.attrs)
            for key, dataset in found.items():
                if dataset.dtype.kind == "O":  # (sentence_to_index, a string)
                    written.create_dataset(key, data=dataset[...], dtype=dataset.dtype)
                else:  # (h5py's create_dataset would mark every name ASCII, its `handle[key] = ` marks UTF-8)
                    written[key] = dataset[...]
        found = dataset_properties(output)
        assert found == dataset_properties(rewritten), name
        keys = [key for key in found[""][0] if key != "sentence_to_index"]
        sentences = read_sentences(text)
        assert keys == (sentences if options.get("use_sentence_keys") else [str(i) for i in range(len(sentences))])
        for key, sentence in zip(keys, sentences):
            expected = embedder.embed_batch([sentence.split()], options.get("output_format", "all"))[0]
            np.testing.assert_allclose(read_all(output)[key], expected, rtol=0, atol=1e-5)


def test_every_format_gives_float32_arrays_of_its_documented_shape(embedder, model_path):
    """embed_batch and empty_embedding: [L + 1, words, 2P] for "all", [words, 2P] for the others, float32 (of a
    float64 model too: model_kwargs reach from_pretrained), a sentence without words as 0 words; num_layers is L + 1
    and hidden_size 2P."""
    assert (embedder.num_layers, embedder.hidden_size) == (3, 32)
    wider = ElmoEmbedder(model_path, torch_dtype=torch.float64)
    assert wider.model.dtype == torch.float64
    sentences = ["EU rejects German call .", "", ["Peter", "Blackburn"]]
    for output_format in ("all", "top", "average", "mix"):
        per_sentence = (3,) if output_format == "all" else ()
        empty = embedder.empty_embedding(output_format)
        assert empty.shape == (*per_sentence, 0, 32) and empty.dtype == np.float32, output_format
        found, wide = embedder.embed_batch(sentences, output_format), wider.embed_batch(sentences, output_format)
        assert [array.shape for array in found] == [(*per_sentence, words, 32) for words in (5, 0, 2)], output_format
        for array, wide_array in zip(found, wide, strict=True):
            assert array.dtype == wide_array.dtype == np.float32 and np.allclose(array, wide_array, atol=1e-5)
        assert embedder.embed_sentence(sentences[0], output_format).shape == found[0].shape


def test_a_batch_size_that_is_not_a_whole_number_is_refused_at_the_call(embedder, tmp_path):
    """embed_sentences checks its arguments at the call: a batch_size of 1.5 failed only once the first batch was
    cut, and embed_file's when it planned the batches, each with a raw `range` TypeError that named no argument."""
    source = write_lines(tmp_path / "in.txt", ["a b"])
    for batch_size in (1.5, "8", True):
        with pytest.raises(TypeError, match=rf"^batch_size must be an integer, got {re.escape(repr(batch_size))}$"):
            embedder.embed_sentences(["a b"], batch_size=batch_size)
        with pytest.raises(TypeError, match=rf"^batch_size must be an integer, got {re.escape(repr(batch_size))}$"):
            embedder.embed_file(source, tmp_path / "out.hdf5", batch_size=batch_size)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt"]
    assert [array.shape for array in embedder.embed_sentences(["a b"], batch_size=np.int64(2))] == [(3, 2, 32)]


def _interrupted(model_path, tmp_path, **options):
    source = write_lines(tmp_path / "in.txt", fixture_lines()[:20])
    output, partial = tmp_path / "out.hdf5", tmp_path / "out.hdf5.partial"
    embedder = ElmoEmbedder(model_path)
    stop_after_batches(embedder, 3)
    with pytest.raises(KeyboardInterrupt):
        embedder.embed_file(source, output, batch_size=2, progress=False, **options)
    del embedder.model.forward
    return embedder, source, output, partial


@pytest.mark.parametrize("first, then", [("top", "average"), ("average", "mix"), ("mix", "top")])
def test_a_run_resumed_with_another_format_of_the_same_shape_is_refused(model_path, tmp_path, first, then):
    """--top, --average and --mix all give [words, 2P]: an interrupted run of one, rerun with another, must not mix
    the two in one file (as another --batch-size is refused, the manifest must name the format)."""
    embedder, source, output, partial = _interrupted(model_path, tmp_path, output_format=first)
    finished = {path.name: path.read_bytes() for path in partial.glob("*.hdf5")}
    with pytest.raises(ValueError, match="different output_format"):
        embedder.embed_file(source, output, batch_size=2, progress=False, output_format=then)
    assert {path.name: path.read_bytes() for path in partial.glob("*.hdf5")} == finished and not output.exists()


def test_a_run_resumed_with_forget_sentences_is_refused(model_path, tmp_path):
    """An interrupted run that writes sentence_to_index, rerun with --forget-sentences (or the other way round): the
    output would hold (or lack) an index that the command did not ask for."""
    embedder, source, output, partial = _interrupted(model_path, tmp_path)
    with pytest.raises(ValueError, match="different forget_sentences"):
        embedder.embed_file(source, output, batch_size=2, progress=False, forget_sentences=True)
    summary = embedder.embed_file(source, output, batch_size=2, progress=False)
    assert summary["resumed"] == 3 and "sentence_to_index" in read_all(output)


def test_a_file_named_as_the_batch_after_the_last_is_no_batch_of_this_run(model_path, tmp_path, caplog):
    """The run has batches 0 .. 9: a readable batch file 00000010.hdf5 is named and removed, not read as batch 10."""
    embedder, source, output, partial = _interrupted(model_path, tmp_path)
    stray = partial / "00000010.hdf5"
    shutil.copyfile(partial / "00000000.hdf5", stray)
    summary = embedder.embed_file(source, output, batch_size=2, progress=False)
    assert (summary["batches"], summary["computed"], summary["resumed"]) == (10, 7, 3)
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert f"{stray}: is no batch of this run; computing that batch again" in warnings
    embedder.embed_file(source, tmp_path / "reference.hdf5", batch_size=2, progress=False)
    assert_same_embeddings(output, tmp_path / "reference.hdf5", 20)


def test_mix_is_the_models_first_scalar_mix_when_it_has_several(model_path, tmp_path):
    """`output_format="mix"` is `elmo_representations[0]`, the first scalar mix, also for a model with two."""
    model = ElmoModel.from_pretrained(model_path, num_output_representations=2)
    with torch.no_grad():
        model.scalar_mixes[0].scalar_parameters.copy_(torch.tensor([2.0, -1.0, 0.5]))
        model.scalar_mixes[1].scalar_parameters.copy_(torch.tensor([-1.0, 0.0, 3.0]))
        model.scalar_mixes[1].gamma.fill_(0.3)
    folder = tmp_path / "two-mixes"
    model.save_pretrained(folder)
    ElmoTokenizer.from_pretrained(model_path).save_pretrained(folder)
    sentence = fixture_lines()[0].split()
    mixed = ElmoEmbedder(folder).embed_sentence(sentence, "mix")
    model = ElmoModel.from_pretrained(folder).eval()
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    with torch.no_grad():
        output = model(**tokenizer([sentence], is_split_into_words=True, return_tensors="pt"))
    first, second = (r[0].numpy() for r in output.elmo_representations)
    assert not np.allclose(first, second, atol=1e-3)
    assert np.allclose(mixed, first, atol=1e-5)


def test_a_run_resumes_with_the_input_file_spelled_another_way(model_path, tmp_path, monkeypatch):
    """The manifest names the input by its resolved path: `in.txt`, `./in.txt` and its absolute path are one
    input, so the rerun resumes the interrupted run rather than being refused."""
    embedder, source, output, partial = _interrupted(model_path, tmp_path)
    monkeypatch.chdir(tmp_path)
    for spelling in ("./in.txt",):
        summary = embedder.embed_file(spelling, output, batch_size=2, progress=False)
    assert (summary["computed"], summary["resumed"]) == (7, 3) and not partial.exists()


def test_lines_are_stripped_at_both_ends_as_allennlp_elmo_stripped_them(embedder, tmp_path):
    """Leading whitespace (an indented line, a tab) is not part of the sentence: sentence_to_index and
    --use-sentence-keys name it without, as `allennlp elmo` did (`line.strip()`)."""
    import json

    source = tmp_path / "in.txt"
    source.write_text("  a b\n\tc d  \n e\n", encoding="utf-8")
    embedder.embed_file(source, tmp_path / "out.hdf5", output_format="top", progress=False)
    output = read_all(tmp_path / "out.hdf5")
    assert json.loads(output["sentence_to_index"][0]) == {"a b": "0", "c d": "1", "e": "2"}
    embedder.embed_file(source, tmp_path / "keys.hdf5", output_format="top", use_sentence_keys=True, progress=False)
    assert sorted(read_all(tmp_path / "keys.hdf5")) == ["a b", "c d", "e"]


def test_the_input_checks_number_a_line_alike(tmp_path, capsys):
    """The UTF-8 check and the --use-sentence-keys checks name a line by the same number, an editor's (the keys'
    checks counted from 0, so that the second line was "line 1", the first in an editor)."""
    (tmp_path / "a.txt").write_bytes(b"good line\ncaf\xe9\n")
    (tmp_path / "b.txt").write_bytes(b"good line\n.\n")
    code, err = run_cli(capsys, "embed", tmp_path / "a.txt", tmp_path / "a.hdf5", "--model", tmp_path / "no-model")
    assert code == 2 and "a.txt: line 2 is not UTF-8 text" in err
    code, err = run_cli(capsys, "embed", tmp_path / "b.txt", tmp_path / "b.hdf5", "--use-sentence-keys", "--model",
                        tmp_path / "no-model")
    assert_only_an_error_line(code, err, "b.txt: line 2 ('.') cannot be an HDF5 key")


def test_ctrl_c_in_the_command_is_one_line_and_the_same_command_goes_on(model_path, tmp_path, capsys, monkeypatch):
    """Ctrl-C (KeyboardInterrupt) while `hf-elmo embed` works: one line saying what is kept and what to do, exit code
    130 (a shell's for SIGINT), not a traceback from inside torch; the same command then computes only the rest."""
    source = write_lines(tmp_path / "in.txt", fixture_lines()[:20])
    forward, calls = ElmoModel.forward, []

    def interrupted(self, *args, **kwargs):
        calls.append(1)
        if len(calls) > 3:
            raise KeyboardInterrupt
        return forward(self, *args, **kwargs)

    command = ("embed", source, tmp_path / "out.hdf5", "--batch-size", 2, "--model", model_path)
    with monkeypatch.context() as patch:
        patch.setattr(ElmoModel, "forward", interrupted)
        code, err = run_cli(capsys, *command)
    assert code == 130 and err.splitlines()[-1] == ("hf-elmo embed: interrupted; the batches finished are kept: run "
                                                    "the same command again to go on"), err
    assert "Traceback" not in err
    code, err = run_cli(capsys, *command)
    assert code == 0 and "(10 batches: 7 computed by this process, 3 finished by an earlier run" in err, err
