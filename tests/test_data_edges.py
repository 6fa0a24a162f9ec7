"""modeling/data.py and modeling/vocabulary.py, what mutations showed no test held: sentence batches (`--batching
sentence`) shared between processes, their shuffling from epoch to epoch and their grouping by length; a compressed
file whose Python package is missing is named with that package; the vocabulary's smallest size and least count, a
word.dic in any line order or holding bilm-tf's special words, blanks around a word in a vocabulary file."""

import importlib.util
from collections import Counter

import numpy as np
import pytest

from modeling.data import DataError, EncodedText, SentenceBatches, WordTable, load_sentences
from modeling.vocabulary import Vocabulary, VocabularyError

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


def test_sentence_batches_grouped_by_length_pad_less_and_still_read_each_sentence_once():
    """--group-by-length: 240 sentences of 1 to 40 words, 2 processes of 4 rows. Each epoch still reads every
    sentence at most once, in an order of its own that the seed repeats, the processes disjoint; a step's rows are of
    about the same length, so the batches hold far fewer padding positions than shuffled ones (the longest step comes
    first, as transformers orders them)."""
    lengths = [1 + (i * 17) % 40 for i in range(240)]
    words = [f"s{i}" for i in range(240)]
    vocabulary, table = Vocabulary(["<S>", "</S>", "<UNK>", *words]), WordTable(50)
    text = EncodedText.encode(sentences_dataset([" ".join([w] * n) for w, n in zip(words, lengths)]), table, vocabulary)

    def epoch_read(group_by_length: bool, epoch: int, seed: int = 3) -> list[list[int]]:
        ranks = [SentenceBatches(text, table, vocabulary, batch_size=4, seed=seed, num_processes=2, process_index=rank,
                                 group_by_length=group_by_length) for rank in (0, 1)]
        steps = ranks[0].steps_per_epoch
        return [sentences_read(ranks[0], epoch * steps + step) + sentences_read(ranks[1], epoch * steps + step)
                for step in range(steps)]

    grouped, shuffled = epoch_read(True, 0), epoch_read(False, 0)
    every = [s for step in grouped for s in step]
    assert len(grouped) == 30 and sorted(every) == list(range(240))
    assert epoch_read(True, 1) != grouped and epoch_read(True, 0) == grouped and epoch_read(True, 0, seed=4) != grouped

    def padding(steps) -> int:  # positions of padding words over the epoch
        return sum(len(step) * max(lengths[s] for s in step) - sum(lengths[s] for s in step) for step in steps)

    assert padding(grouped) < padding(shuffled) / 4, (padding(grouped), padding(shuffled))
    assert max(lengths[s] for s in grouped[0]) == 40
    with pytest.raises(DataError, match="grouping the sentences by length reorders them, so it needs shuffling"):
        SentenceBatches(text, table, vocabulary, batch_size=4, seed=3, shuffle=False, group_by_length=True)


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


BILM_TF_SPECIALS = ["<S>", "</S>", "<UNK>"]


def test_the_smallest_vocab_size_is_the_special_words_and_one_more():
    """--vocab-size 4 (the least the error message asks for) gives <S> </S> <UNK> and the most frequent word; 3 is
    refused. --min-count 1 keeps a word seen once; 0 is refused by the vocabulary itself, not only by pretrain.py's
    option check (a Counter can hold counts of 0 and below)."""
    counts = Counter({"b": 3, "a": 3, "c": 5, "d": 1})
    assert Vocabulary.from_counts(counts, max_size=4).words == [*BILM_TF_SPECIALS, "c"]
    with pytest.raises(VocabularyError,
                       match=r"^--vocab-size must be at least 4 \(the 3 special words and one more\), got 3$"):
        Vocabulary.from_counts(counts, max_size=3)
    assert Vocabulary.from_counts(counts, min_count=1).words == [*BILM_TF_SPECIALS, "c", "a", "b", "d"]
    with pytest.raises(VocabularyError, match=r"^--min-count must be at least 1, got 0$"):
        Vocabulary.from_counts(Counter({"a": 2, "gone": 0}), min_count=0)


def test_a_word_dictionary_in_any_line_order_is_its_ids_order():
    """word.dic's lines need not be in id order (the package and read_dictionary take any order): the softmax rows,
    and so the vocabulary's words, follow the ids, not the lines."""
    vocabulary = Vocabulary.from_word_dictionary({"天": 4, "<eos>": 2, "<oov>": 0, "<pad>": 3, "<bos>": 1})
    assert vocabulary.words == ["<oov>", "<bos>", "<eos>", "<pad>", "天"]
    assert (vocabulary.unk_id, vocabulary.bos_id, vocabulary.eos_id) == (0, 1, 2)
    assert vocabulary.ids(["天", "never-seen"]).tolist() == [4, 0]


def test_a_word_dictionary_holding_one_of_bilm_tfs_special_words_keeps_its_own_specials():
    """A word.dic built from text that holds `<UNK>` or `<S>` as a word: that word is an ordinary softmax word, and
    `<bos>`, `<eos>`, `<oov>` remain the boundaries and the unknown word (it was refused as missing <S>, </S>)."""
    words = {"<oov>": 0, "<bos>": 1, "<eos>": 2, "<pad>": 3, "<UNK>": 4, "<S>": 5, "a": 6}
    vocabulary = Vocabulary.from_word_dictionary(words)
    assert (vocabulary.unk_id, vocabulary.bos_id, vocabulary.eos_id) == (0, 1, 2)
    assert vocabulary.ids(["<UNK>", "<S>", "a", "zz"]).tolist() == [4, 5, 6, 0]


def test_whitespace_around_a_word_on_its_line_is_not_part_of_it(tmp_path):
    """A vocabulary file's lines are stripped: blanks or tabs after a word (an editor's, or `word ` from a script)
    and before it leave the word itself, as bilm-tf's reader (`line.strip()`) read it."""
    (tmp_path / "vocab.txt").write_text("<S>\n</S>  \n\t<UNK>\nthe \n  of\t\n", encoding="utf-8")
    vocabulary = Vocabulary.from_file(tmp_path / "vocab.txt")
    assert vocabulary.words == [*BILM_TF_SPECIALS, "the", "of"]
    assert vocabulary.ids(["the", "of"]).tolist() == [3, 4]
