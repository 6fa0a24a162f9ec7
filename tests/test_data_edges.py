"""modeling/data.py, what mutations showed no test held: sentence batches (`--batching sentence`) shared between
processes, and their shuffling from epoch to epoch; a compressed file whose Python package is missing is named with
that package."""

import importlib.util

import numpy as np
import pytest

from modeling.data import DataError, EncodedText, SentenceBatches, WordTable, load_sentences
from modeling.vocabulary import Vocabulary

from test_pretraining import datasets_cache, sentences_dataset, words_of  # noqa: F401 (datasets_cache: autouse)

SENTENCES = 23  # sentence i is its own word s{i}, said 1 to 3 times


def text_of_sentences():
    words = [f"s{i}" for i in range(SENTENCES)]
    vocabulary, table = Vocabulary(["<S>", "</S>", "<UNK>", *words]), WordTable(50)
    lines = [" ".join([word] * (1 + i % 3)) for i, word in enumerate(words)]
    return EncodedText.encode(sentences_dataset(lines), table, vocabulary), table, vocabulary


def sentences_read(batches, index) -> list[int]:
    """The sentences of a batch, row by row (each row `<S> s{i} .. </S>`)."""
    return [int(words_of(row[1:2])[0][1:]) for row in batches.batch(index)["input_ids"]]


def test_processes_read_disjoint_sentence_batches_that_make_one_epoch():
    """Two processes of 3 rows each: an epoch has 23 // 6 = 3 steps; at each step the processes read 6 different
    sentences, and over the epoch 18 different ones (none read twice, by either process)."""
    text, table, vocabulary = text_of_sentences()
    ranks = [SentenceBatches(text, table, vocabulary, batch_size=3, seed=4, num_processes=2, process_index=rank)
             for rank in (0, 1)]
    assert [rank.steps_per_epoch for rank in ranks] == [3, 3]
    read = [[sentences_read(rank, step) for step in range(3)] for rank in ranks]
    every = [s for rank in read for step in rank for s in step]
    assert len(every) == 18 and len(set(every)) == 18, read
    # The same epoch order cut into rows 0-2 (process 0) and 3-5 (process 1) of each step's 6.
    order = np.random.default_rng([4, 0]).permutation(SENTENCES)
    assert [read[0][step] + read[1][step] for step in range(3)] == order[:18].reshape(3, 6).tolist()


def test_sentence_batches_are_shuffled_anew_each_epoch_or_read_in_order():
    """Shuffled: each epoch its own order (the same for the same seed); --no-shuffle: the file's order, every epoch."""
    text, table, vocabulary = text_of_sentences()
    batches = SentenceBatches(text, table, vocabulary, batch_size=5, seed=1)
    steps = batches.steps_per_epoch
    assert steps == 4
    epochs = [[s for step in range(steps) for s in sentences_read(batches, epoch * steps + step)] for epoch in (0, 1)]
    assert epochs[0] != epochs[1] and sorted(epochs[0]) != epochs[0]
    again = SentenceBatches(text, table, vocabulary, batch_size=5, seed=1)
    assert [s for step in range(steps) for s in sentences_read(again, steps + step)] == epochs[1]
    in_order = SentenceBatches(text, table, vocabulary, batch_size=5, seed=1, shuffle=False)
    for epoch in (0, 1):
        assert [s for step in range(steps) for s in sentences_read(in_order, epoch * steps + step)] == list(range(20))


def test_a_compression_without_its_package_says_which_package(tmp_path):
    """A .zst (or .lz4) file where its package is not installed: one DataError naming the file and the package to
    install, not "cannot be read as compressed UTF-8 text" (the text may be fine)."""
    if importlib.util.find_spec("zstandard"):
        pytest.skip("zstandard is installed: datasets reads .zst files")
    file = tmp_path / "train.txt.zst"
    file.write_bytes(bytes.fromhex("28b52ffd0458010000"))  # (a zstd frame's start)
    with pytest.raises(DataError) as error:
        load_sentences([str(file)])
    message = str(error.value)
    assert message.startswith(f"--train-file {file}: cannot be read: this compression needs its Python package "
                              "(`pip install zstandard` or `lz4`) (ValueError: "), message
