"""ElmoTokenizer: the reference character ids, word splitting, padding/truncation, and the transformers tooling."""

import errno
import json
import os
import pickle
import re
import shutil
import stat
import subprocess
import sys

import numpy as np
import pytest
import torch
from datasets import Dataset
from tokenizers import AddedToken
from transformers import DataCollatorForTokenClassification, DataCollatorWithPadding

from conftest import ELMOFORMANYLANGS, FIXTURES

import hf_elmo
from hf_elmo.lexicon import ElmoLexicon, LexiconError, read_dictionary, write_dictionary
from hf_elmo.tokenization_elmo import (
    BOS_CHAR_ID,
    BOW_CHAR_ID,
    EOS_CHAR_ID,
    EOW_CHAR_ID,
    PAD_CHAR_ID,
    ElmoTokenizer,
    char_ids_to_word,
    word_to_char_ids,
)


@pytest.fixture(scope="module")
def tok() -> ElmoTokenizer:
    return ElmoTokenizer()


def spelled(*byte_ids: int, length: int = 50) -> list[int]:
    """Expected ids of a word whose (already +1-shifted) characters are `byte_ids`."""
    ids = [259, *byte_ids, 260]
    return ids + [261] * (length - len(ids))


# ---- character ids (values asserted by AllenNLP's elmo_indexer_test.py) --------------------------------------


def test_reference_char_ids():
    assert word_to_char_ids("Second") == spelled(84, 102, 100, 112, 111, 101)
    assert word_to_char_ids("<S>") == [259, 257, 260] + [261] * 47
    assert word_to_char_ids("</S>") == [259, 258, 260] + [261] * 47
    assert word_to_char_ids("") == [259, 260] + [261] * 48
    assert (BOS_CHAR_ID, EOS_CHAR_ID, BOW_CHAR_ID, EOW_CHAR_ID, PAD_CHAR_ID) == (257, 258, 259, 260, 261)


def test_boundary_words_match_exactly():
    # Only the exact strings are sentence boundaries; anything else is spelled byte by byte.
    assert word_to_char_ids("<s>") == spelled(61, 116, 63)
    assert word_to_char_ids(" <S>")[1] == ord(" ") + 1


def test_long_word_is_cut_to_48_bytes_without_pad_chars():
    word = ("abcdefghijklmnopqrstuvwxyz" * 3)[:60]
    ids = word_to_char_ids(word)
    assert ids == [259] + [ord(c) + 1 for c in word[:48]] + [260]
    assert 261 not in ids


def test_cut_inside_a_multibyte_character():
    # "a" + 23 whole "é" (C3 A9) = 47 bytes; the 48th byte is the first half of the 24th "é".
    ids = word_to_char_ids("a" + "é" * 30)
    assert ids == [259, 0x61 + 1] + [0xC3 + 1, 0xA9 + 1] * 23 + [0xC3 + 1, 260]
    assert char_ids_to_word(ids) == "a" + "é" * 23 + "\ufffd"


def test_non_ascii_bytes():
    assert word_to_char_ids(chr(256) + "t") == spelled(197, 129, 117)


def test_lone_surrogates_are_refused_in_raw_text_and_in_words(tok):
    """A lone surrogate has no UTF-8 form: one clear error, whether it comes in raw text or in a pre-split word."""
    message = "lone surrogate U\\+D800 at character 1, which has no UTF-8 form"
    with pytest.raises(ValueError, match=f"the word 'a\\\\ud800b' holds a {message}"):
        word_to_char_ids("a\ud800b")
    with pytest.raises(ValueError, match=message):
        tok(["x", "a\ud800b"], is_split_into_words=True)
    with pytest.raises(ValueError, match="the text holds a lone surrogate U\\+D800 at character 4"):
        tok("xy a\ud800b")
    # With char.dic (code points, not bytes) too, as raw text with one is: never spelled as <oov>.
    folder = ELMOFORMANYLANGS / "with_words"
    chars = ElmoTokenizer(char_vocab_file=str(folder / "char.dic"), word_vocab_file=str(folder / "word.dic"))
    with pytest.raises(ValueError, match=f"the word 'a\\\\ud800b' holds a {message}"):
        chars(["x", "a\ud800b"], is_split_into_words=True)
    with pytest.raises(ValueError, match="the text holds a lone surrogate U\\+D800 at character 4"):
        chars("xy a\ud800b")


def test_max_characters_per_token():
    tok = ElmoTokenizer(max_characters_per_token=20)
    ids = tok.word_to_char_ids("x" * 30)
    assert ids == [259] + [ord("x") + 1] * 18 + [260]
    assert tok.word_to_char_ids("<S>") == [259, 257, 260] + [261] * 17
    with pytest.raises(ValueError, match="max_characters_per_token"):
        ElmoTokenizer(max_characters_per_token=2)
    # A number as a string (a hand-edited tokenizer_config.json) is named, not compared with 3 deep inside.
    for value, shown in (("50", "'50'"), (True, "True")):  # (a bool is no count, though Python's int takes it)
        with pytest.raises(ValueError, match=rf"^max_characters_per_token must be an integer, got {shown}\.$"):
            ElmoTokenizer(max_characters_per_token=value)


def test_fixture_vocabulary_round_trips(tok):
    words = (FIXTURES / "allennlp-elmo" / "vocab_test.txt").read_text(encoding="utf-8").splitlines()
    assert len(words) > 400 and {"<S>", "</S>", "•"} <= set(words)
    encoding = tok(words, is_split_into_words=True, return_tensors="np")
    ids = encoding["input_ids"][0]
    assert ids.shape == (len(words), 50)
    assert (ids[:, 0] == 259).all()
    assert tok.convert_ids_to_tokens(ids) == words
    assert tok.decode(ids) == " ".join(words)
    assert ids[words.index("<S>")].tolist() == word_to_char_ids("<S>")


# ---- word splitting --------------------------------------------------------------------------------------


def test_split_words(tok):
    assert tok.split_words("I eat an apple .") == ["I", "eat", "an", "apple", "."]
    assert tok.split_words("I eat an apple.") == ["I", "eat", "an", "apple", "."]
    assert tok.split_words("Don't stop, John's 3.5% U.S. e-mail") == [
        "Do", "n't", "stop", ",", "John", "'s", "3.5", "%", "U.S", ".", "e-mail"
    ]  # fmt: skip
    assert tok.split_words("  \t\n ") == []


def test_cjk_characters_are_separate_words(tok):
    text = "天气不错！小天你说是吗？"
    words = tok.split_words(text)
    assert words == ["天", "气", "不", "错", "！", "小", "天", "你", "说", "是", "吗", "？"]
    ids = tok(text)["input_ids"]
    assert ids[0] == ids[6] == spelled(*(b + 1 for b in "天".encode()))
    assert ids[0] != ids[1]
    # Japanese too, kana as well as kanji (the README says so); Korean, written with spaces, keeps its words.
    assert tok.split_words("東京へ行きます。カタカナ") == ["東", "京", "へ", "行", "き", "ま", "す", "。", "カ", "タ", "カ", "ナ"]
    assert tok.split_words("서울에 갑니다") == ["서울에", "갑니다"]


def test_emoji_are_kept_whole(tok):
    # Skin tones and ZWJ families are several code points but one word.
    assert tok.split_words("I love 🤗 ! 👍🏽 👨‍👩‍👧") == ["I", "love", "🤗", "!", "👍🏽", "👨‍👩‍👧"]
    ids = tok("so 👍🏽")["input_ids"][1]
    assert char_ids_to_word(ids) == "👍🏽"
    assert ids[1:9] == [b + 1 for b in "👍🏽".encode()]


def test_offsets_mapping(tok):
    text = "Hello, wörld 😀!"
    encoding = tok(text, return_offsets_mapping=True)
    words = tok.split_words(text)
    assert words == ["Hello", ",", "wörld", "😀", "!"]
    assert [text[start:end] for start, end in encoding["offset_mapping"]] == words
    split = tok(["ab", "c"], is_split_into_words=True, return_offsets_mapping=True)
    assert split["offset_mapping"] == [(0, 2), (0, 1)]


def test_words_are_never_split_further(tok):
    words = ["New York", "don't", "天气", ""]
    ids = tok(words, is_split_into_words=True)["input_ids"]
    assert [char_ids_to_word(word) for word in ids] == words


# ---- encoding shapes, padding, truncation ---------------------------------------------------------------------


def test_single_text_gives_unbatched_lists(tok):
    encoding = tok("I eat an apple.")
    assert len(encoding["input_ids"]) == 5 and all(len(word) == 50 for word in encoding["input_ids"])
    assert encoding["attention_mask"] == [1] * 5
    assert encoding["input_ids"][0] == spelled(ord("I") + 1)
    assert encoding.word_ids() == [0, 1, 2, 3, 4]
    assert tok.encode("I eat") == encoding["input_ids"][:2]
    assert tok("I eat", return_tensors="pt")["input_ids"].shape == (1, 2, 50)


def test_empty_word_list(tok):
    encoding = tok([], is_split_into_words=True, return_tensors="pt")
    assert encoding["input_ids"].shape == (1, 0, 50)
    assert encoding["attention_mask"].shape == (1, 0)
    assert tok([], is_split_into_words=True)["input_ids"] == []
    batch = tok([[], ["a"]], is_split_into_words=True, padding=True, return_tensors="pt")
    assert batch["input_ids"].shape == (2, 1, 50)
    assert batch["attention_mask"].tolist() == [[0], [1]]
    assert batch.word_ids(0) == [None]
    # A batch of no sentences: every per-word output is [0, 0] (numpy made the masks [0]), the ids [0, 0, 50].
    nothing = tok([], return_special_tokens_mask=True, return_token_type_ids=True, return_tensors="pt")
    assert {key: tuple(value.shape) for key, value in nothing.items()} == {
        "input_ids": (0, 0, 50), "attention_mask": (0, 0), "special_tokens_mask": (0, 0), "token_type_ids": (0, 0)}


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_padding(tok, padding_side):
    batch = tok(
        [["a", "b", "c"], ["d"]], is_split_into_words=True, padding=True, padding_side=padding_side, return_tensors="pt"
    )
    ids, mask = batch["input_ids"], batch["attention_mask"]
    assert ids.shape == (2, 3, 50) and ids.dtype == torch.int64
    if padding_side == "right":
        assert mask.tolist() == [[1, 1, 1], [1, 0, 0]]
        assert batch.word_ids(1) == [0, None, None]
        assert ids[1, 0].tolist() == word_to_char_ids("d")
    else:
        assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
        assert batch.word_ids(1) == [None, None, 0]
        assert ids[1, 2].tolist() == word_to_char_ids("d")
    assert (ids[mask == 0] == 0).all()  # padding words are all-zero vectors
    assert (ids[mask == 1] != 0).any(-1).all()
    assert batch.sequence_ids(1).count(0) == 1


def test_padding_strategies(tok):
    texts = ["a b c", "d"]
    assert tok(texts, padding="max_length", max_length=6, return_tensors="np")["input_ids"].shape == (2, 6, 50)
    assert tok(texts, padding=True, pad_to_multiple_of=4, return_tensors="np")["input_ids"].shape == (2, 4, 50)
    unpadded = tok(texts)
    assert [len(ids) for ids in unpadded["input_ids"]] == [3, 1]
    assert isinstance(tok(texts, padding=True, return_tensors="np")["input_ids"], np.ndarray)


@pytest.mark.parametrize("return_tensors", ["pt", "np"])
def test_examples_of_different_lengths_make_a_tensor_only_once_padded(tok, return_tensors):
    """Unpadded examples of different numbers of words make no tensor, whichever comes first: torch read a batch whose
    first example has no words as input_ids [2, 0] (the other example's words gone), the other order failed with
    transformers' message, numpy made an array of lists. Refused alike, naming padding=True (and truncation=True, where
    max_length is shorter than an example); equal lengths, examples without words and no examples make their
    tensors."""
    for texts, options in ((["", "a b"], {}), (["a b", ""], {}), ([[], ["a", "b"]], {"is_split_into_words": True}),
                           ([["a", "b"], []], {"is_split_into_words": True})):
        with pytest.raises(ValueError, match=r"^input_ids: the examples have different numbers of words \(0, 2\), which "
                                             r"make no tensor: pass padding=True \(and truncation=True where max_length"):
            tok(texts, return_tensors=return_tensors, **options)
        assert tok(texts, padding=True, return_tensors=return_tensors, **options)["input_ids"].shape == (2, 2, 50)
    with pytest.raises(ValueError, match=r"different numbers of words \(2, 3\)"):  # (padded to 2, one has 3)
        tok(["a b c", "d"], padding="max_length", max_length=2, return_tensors=return_tensors)
    for texts, shape in ((["a b", "c d"], (2, 2, 50)), (["", " "], (2, 0, 50)), ([], (0, 0, 50))):
        encoding = tok(texts, return_tensors=return_tensors)
        assert encoding["input_ids"].shape == shape and encoding["attention_mask"].shape == shape[:2]
    # tokenizer.pad without padding, as a collator may call it: the same (it gave input_ids [2, 0, 50], no words)
    for texts in (["", "a b"], ["a b", ""]):
        features = tok(texts)
        for examples in (features, [dict(zip(features, values)) for values in zip(*features.values())]):
            for padding in (False, "max_length"):  # ("max_length" without one pads nothing, as False)
                with pytest.raises(ValueError, match=r"^input_ids: the examples have different numbers of words "
                                                     r"\(0, 2\), which make no tensor: pass padding=True, or"):
                    tok.pad(examples, padding=padding, return_tensors=return_tensors)
            assert tok.pad(examples, return_tensors=return_tensors)["input_ids"].shape == (2, 2, 50)
    assert tok.pad(tok(["", " "]), padding=False, return_tensors=return_tensors)["input_ids"].shape == (2, 0, 50)


def test_truncation_counts_words(tok):
    batch = tok(["a b c d e", "f g"], truncation=True, max_length=3, padding=True, return_tensors="pt")
    assert batch["input_ids"].shape == (2, 3, 50)
    assert tok.decode(batch["input_ids"]) == ["a b c", "f g"]
    left = ElmoTokenizer(truncation_side="left")
    encoding = left("a b c d e", truncation=True, max_length=2)
    assert left.decode(encoding["input_ids"]) == "d e"
    assert encoding.word_ids() == [3, 4]  # indices of the input words, not of the kept positions


def test_overflowing_tokens_are_the_words_cut_off(tok):
    """`overflowing_tokens`: the words cut off, with `stride` words of overlap, from either side, and how many were
    cut; as a tensor `[batch, words cut, chars]`, also where no word was cut."""
    options = dict(truncation=True, max_length=3, return_overflowing_tokens=True)
    right = tok("a b c d e", stride=1, **options)
    assert tok.convert_ids_to_tokens(right["overflowing_tokens"]) == ["c", "d", "e"] and right["num_truncated_tokens"] == 2
    left = ElmoTokenizer(truncation_side="left")("a b c d e", stride=1, **options)
    assert tok.decode(left["input_ids"]) == "c d e" and tok.convert_ids_to_tokens(left["overflowing_tokens"]) == ["a", "b", "c"]
    batch = tok(["a b c d", "e f g h"], padding=True, return_tensors="pt", **options)
    assert batch["overflowing_tokens"].shape == (2, 1, 50) and batch["num_truncated_tokens"].tolist() == [1, 1]
    for texts, shape in ((["a", "b c"], (2, 0, 50)), ("a", (1, 0, 50)), ([], (0, 0, 50))):
        uncut = tok(texts, padding=True, return_tensors="np", **options)
        assert uncut["overflowing_tokens"].shape == shape and not uncut["num_truncated_tokens"].any()
    # Examples that lost different numbers of words make no tensor: named (transformers' message spoke of a fast
    # tokenizer); as lists they come.
    with pytest.raises(ValueError, match=r"^overflowing_tokens: the examples lost different numbers of words \(1, 2\), "
                                         r"which make no tensor: pass return_tensors=None"):
        tok(["a b c d", "e f g h i"], padding=True, return_tensors="pt", **options)
    lists = tok(["a b c d", "e f g h i"], padding=True, **options)
    assert [len(words) for words in lists["overflowing_tokens"]] == [1, 2]


def test_optional_outputs(tok):
    batch = tok(
        ["a b", "c"], padding=True, return_length=True, return_special_tokens_mask=True, return_offsets_mapping=True
    )
    assert batch["length"] == [2, 1]
    assert batch["special_tokens_mask"] == [[0, 0], [0, 1]]
    assert batch["offset_mapping"] == [[(0, 1), (2, 3)], [(0, 1), (0, 0)]]
    assert "attention_mask" not in tok("a", return_attention_mask=False)
    with pytest.raises(ValueError, match="text_pair"):
        tok("a", "b")


# ---- pad, decode, vocabulary, save/load -----------------------------------------------------------------------


def test_pad_single_example_and_list(tok):
    single = tok("a b")
    padded = tok.pad(single, padding="max_length", max_length=4, return_tensors="pt")
    assert padded["input_ids"].shape == (4, 50)
    assert padded["attention_mask"].tolist() == [1, 1, 0, 0]
    assert padded.word_ids() == [0, 1, None, None]
    batch = tok.pad([tok("a b c"), tok("d")], return_tensors="pt")
    assert batch["input_ids"].shape == (2, 3, 50)
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch.word_ids(1) == [0, None, None]


@pytest.mark.parametrize("return_tensors", ["pt", "np"])
def test_padding_examples_without_words_keeps_the_character_axis(tok, return_tensors):
    """`pad` (what collators call) of examples that have no word gives `[batch, 0, chars]`, as encoding them does,
    not `[batch, 0]`, which the model refuses; `offset_mapping` is `[batch, words, 2]` in both, even then."""
    encoded = tok(["", " "], return_tensors=return_tensors, return_offsets_mapping=True)
    assert encoded["input_ids"].shape == (2, 0, 50) and encoded["offset_mapping"].shape == (2, 0, 2)
    for features in ([tok("", return_offsets_mapping=True), tok(" ", return_offsets_mapping=True)],
                     {"input_ids": [[], []], "offset_mapping": [[], []]}):
        padded = tok.pad(features, return_tensors=return_tensors)
        assert padded["input_ids"].shape == (2, 0, 50) and padded["attention_mask"].shape == (2, 0)
        assert padded["offset_mapping"].shape == (2, 0, 2)
        assert padded["input_ids"].dtype == encoded["input_ids"].dtype
    assert tok.pad(tok(""), return_tensors=return_tensors)["input_ids"].shape == (0, 50)
    if return_tensors == "pt":
        assert DataCollatorWithPadding(tok)([tok("")])["input_ids"].shape == (1, 0, 50)


def test_decode(tok):
    batch = tok(["I eat an apple.", "Hi"], padding=True, return_tensors="pt")
    assert tok.decode(batch["input_ids"][0]) == "I eat an apple ."
    assert tok.decode(batch["input_ids"][1]) == "Hi"  # padding skipped
    assert tok.decode(batch["input_ids"]) == ["I eat an apple .", "Hi"]
    assert tok.batch_decode(batch["input_ids"]) == ["I eat an apple .", "Hi"]
    assert tok.convert_ids_to_tokens(batch["input_ids"][1]) == ["Hi", "<pad>", "<pad>", "<pad>", "<pad>"]
    assert tok.convert_ids_to_tokens(batch["input_ids"][1], skip_special_tokens=True) == ["Hi"]
    assert tok.convert_ids_to_tokens(word_to_char_ids("Hi")) == "Hi" and tok.convert_ids_to_tokens([0] * 50) == "<pad>"
    assert tok.decode(word_to_char_ids("<S>")) == "<S>"
    assert char_ids_to_word([0] * 50) is None
    # A batch of no examples is no strings (it was "", one example of no words), a batch of examples of no words is
    # empty strings.
    for empty in (torch.zeros(0, 3, 50, dtype=torch.long), np.zeros((0, 0, 50), dtype=np.int64)):
        assert tok.decode(empty) == [] and tok.batch_decode(empty) == []
    assert tok.decode(torch.zeros(2, 0, 50, dtype=torch.long)) == ["", ""]


def test_decode_takes_what_transformers_decode_takes(tok):
    """transformers' decode takes an int (one id), lists, tensors and numpy arrays; decode(5) raised TypeError
    ("object of type 'int' has no len()"). A plain int is a character id (a word is a vector of them): it gives the
    id's name, as transformers' decode gives `convert_tokens_to_string(convert_ids_to_tokens(id))`."""
    assert [tok.decode(char_id) for char_id in (5, 66, 0, 257)] == ["<0x04>", "<0x41>", "<pad>", "<S>"]
    assert tok.decode(torch.tensor(66)) == tok.decode(np.int64(66)) == tok.convert_ids_to_tokens(66) == "<0x41>"
    with pytest.raises(IndexError, match="^300 is neither a character id"):
        tok.decode(300)
    ids = tok(["I eat an apple.", "Hi"], padding=True, return_tensors="np")["input_ids"]
    for form in (ids, torch.from_numpy(ids), ids.tolist(), list(torch.from_numpy(ids)), list(ids)):
        assert tok.decode(form) == tok.batch_decode(form) == ["I eat an apple .", "Hi"]
        assert tok.decode(form[1]) == "Hi" and tok.decode(form[0][1]) == "eat"


def test_an_id_outside_the_alphabet_is_refused_inside_a_word_as_it_is_alone(tok):
    """decode([[259, 66, 300, 260]]) gave "A": an id outside the character alphabet (300, -5) vanished from its word,
    where decode(300) and convert_ids_to_tokens(300) refuse it; through a char.dic it read `<oov>`. Refused alike by
    decode, batch_decode and convert_ids_to_tokens, from lists and tensors; an added token's id, read alone as its
    word, is named as such inside a word; padding words and the boundary words read as before."""
    word = word_to_char_ids("Ab")
    for outside in (300, -5):
        bad = [*word[:2], outside, *word[3:]]  # (in place of the "b")
        for call, ids in ((tok.decode, bad), (tok.decode, [bad]), (tok.decode, torch.tensor([[bad]])),
                          (tok.batch_decode, [[bad, [0] * 50]]), (tok.convert_ids_to_tokens, bad),
                          (tok.convert_ids_to_tokens, [bad]), (tok.decode, outside)):
            with pytest.raises(IndexError, match=rf"^{outside} is neither a character id \(0\.\.261\) nor the id of an "
                                                 r"added token\.$"):
                call(ids)
    assert tok.decode([word, word_to_char_ids("</S>"), [0] * 50]) == "Ab </S>"
    added = ElmoTokenizer()
    added.add_tokens(["<URL>"])
    assert added.decode(262) == "<URL>"
    with pytest.raises(IndexError, match=r"^262 is the id of an added token, not a character id \(0\.\.261\)"):
        added.decode([[*word[:2], 262, *word[3:]]])
    folder = ELMOFORMANYLANGS / "with_words"
    chars = ElmoTokenizer(char_vocab_file=str(folder / "char.dic"), word_vocab_file=str(folder / "word.dic"))
    spelled = chars.word_to_char_ids("ab")
    assert chars.decode([spelled]) == "ab"
    outside = chars.vocab_size  # (one past the last id of char.dic's alphabet)
    for ids in ([[*spelled[:1], outside, *spelled[2:]]], outside):
        with pytest.raises(IndexError, match=rf"^{outside} is neither a character id \(0\.\.{outside - 1}\)"):
            chars.decode(ids)


def test_batch_decode_of_real_text_gives_its_words_from_every_input_form(tok):
    """batch_decode took about four times encode's time for the same batch, most of it in transformers' to_py_obj
    testing every id of the lists decode was given, once more per example; decode now converts only what is not a
    list (a tensor, an array), where it meets it. What it gives is unchanged: the fixtures' sentences come back word
    for word from tensors, arrays, lists, lists of tensors (of examples, words or ids), and through char.dic."""
    texts = json.loads((FIXTURES / "allennlp-elmo" / "sentences.json").read_text(encoding="utf-8"))
    sentences = [text.split() for row in texts for text in row]  # 30 sentences, 744 words, "•" among them
    expected = [" ".join(words) for words in sentences]
    ids = tok(sentences, is_split_into_words=True, padding=True, return_tensors="pt")["input_ids"]
    for form in (ids, ids.numpy(), ids.tolist(), list(ids), [list(example) for example in ids]):
        assert tok.batch_decode(form) == tok.decode(form) == expected
    assert tok.decode(list(ids[0, 0])) == tok.decode(ids[0, 0].tolist()) == sentences[0][0]  # 0-d tensors: one word
    folder = ELMOFORMANYLANGS / "with_words"
    chars = ElmoTokenizer(char_vocab_file=str(folder / "char.dic"), word_vocab_file=str(folder / "word.dic"))
    sets = json.loads((ELMOFORMANYLANGS / "sentences.json").read_text(encoding="utf-8"))["sets"]
    ids = chars([words for sentences in sets.values() for words in sentences], is_split_into_words=True, padding=True,
                return_tensors="np")["input_ids"]
    expected = [" ".join(chars.convert_ids_to_tokens(example, skip_special_tokens=True)) for example in ids]
    assert chars.batch_decode(torch.from_numpy(ids)) == chars.decode(ids.tolist()) == chars.decode(list(ids)) == expected
    assert expected[: len(sets["chinese"])] == [" ".join(words) for words in sets["chinese"]]


def test_decode_refuses_text_and_none_naming_what_it_takes(tok):
    """A str where ids belong read as a batch of one-character batches: decode("abc") and batch_decode(["hello"])
    recursed until RecursionError."""
    for call, ids, name in ((tok.decode, "abc", "decode"), (tok.decode, ["a", "b"], "decode"),
                            (tok.batch_decode, ["hello"], "decode"), (tok.decode, None, "decode"),
                            (tok.convert_ids_to_tokens, "abc", "convert_ids_to_tokens")):
        with pytest.raises(TypeError, match=rf"^{name} takes character ids \(a word \[chars\], an example"):
            call(ids)



def test_ids_that_do_not_begin_a_word_are_refused_not_read_from_their_second_id(tok):
    """A word's vector begins with the begin-of-word id (the byte alphabet's 259, char.dic's own); a list of ints
    that does not was read as a word whose first id was taken for that marker: `convert_ids_to_tokens([72, 105])`
    gave "h", silently. The padding word (all zeros) still reads as padding."""
    message = r"^\[72, 105\] are not a word's character ids, which begin with the begin-of-word id 259$"
    for call in (tok.convert_ids_to_tokens, tok.decode):
        with pytest.raises(ValueError, match=message):
            call([72, 105])
    with pytest.raises(ValueError, match=r"^\[1, 2, 3, 4, 5, 6, 7, 8\] \.\.\. are not a word's"):
        tok.decode([list(range(1, 51))])
    assert tok.convert_ids_to_tokens([0] * 50) == "<pad>" and tok.decode([[0] * 50, tok.word_to_char_ids("a")]) == "a"
    folder = ELMOFORMANYLANGS / "with_words"
    chars = ElmoTokenizer(char_vocab_file=str(folder / "char.dic"), word_vocab_file=str(folder / "word.dic"))
    spelled = chars.word_to_char_ids("ab")
    assert chars.decode([spelled]) == "ab" and spelled[0] == chars.lexicon.begin_id != BOW_CHAR_ID
    with pytest.raises(ValueError, match=rf"begin with the begin-of-word id {chars.lexicon.begin_id}$"):
        chars.decode([spelled[1:]])  # (its own alphabet's ids: "a" taken for the marker would give "b")


def test_convert_ids_to_tokens_reads_a_batch_as_decode_does(tok):
    """`[batch, words, chars]` ids (what a padded call returns) give a list of words per example, as their
    `batch_decode` gives a string per example; it failed with a TypeError from comparing a list with an int."""
    batch = tok(["The cat sat .", "A dog"], padding=True, return_tensors="pt")["input_ids"]
    assert tok.convert_ids_to_tokens(batch) == [["The", "cat", "sat", "."], ["A", "dog", "<pad>", "<pad>"]]
    assert tok.convert_ids_to_tokens(batch.tolist(), skip_special_tokens=True) == [["The", "cat", "sat", "."],
                                                                                    ["A", "dog"]]
    assert [" ".join(words) for words in tok.convert_ids_to_tokens(batch, True)] == tok.batch_decode(batch)


def test_get_special_tokens_mask_of_encoded_ids_is_the_mask_a_call_returns():
    """transformers' collators ask `get_special_tokens_mask(ids, already_has_special_tokens=True)` where a batch has
    no `special_tokens_mask`; it failed with a TypeError (ids are words of character ids here). It gives, per
    example, what the call's own mask says: 1 for padding words and added special tokens. Without
    `already_has_special_tokens`, 0 for every word (the tokenizer adds none); a second sequence is refused."""
    tokenizer = ElmoTokenizer()
    tokenizer.add_special_tokens({"additional_special_tokens": ["<URL>"]})
    encoded = tokenizer(["see <URL> now", "a b c d e"], padding=True, return_special_tokens_mask=True)
    assert encoded["special_tokens_mask"] == [[0, 1, 0, 1, 1], [0, 0, 0, 0, 0]]
    for ids, mask in zip(encoded["input_ids"], encoded["special_tokens_mask"]):
        assert tokenizer.get_special_tokens_mask(ids, already_has_special_tokens=True) == mask
        assert tokenizer.get_special_tokens_mask(torch.tensor(ids), already_has_special_tokens=True) == mask
        assert tokenizer.get_special_tokens_mask(ids) == [0] * 5
    with pytest.raises(ValueError, match="encodes single sentences; token_ids_1 is not supported"):
        tokenizer.get_special_tokens_mask(encoded["input_ids"][0], encoded["input_ids"][1])


def test_a_model_max_length_that_is_no_number_of_words_is_refused_when_the_tokenizer_is_made(tmp_path):
    """`model_max_length` (a keyword, or tokenizer_config.json's) that is not a whole number of words >= 1 is refused
    when the tokenizer is made; a str was accepted and failed at the first call with a TypeError (comparing it with
    a sentence's length), 1.5 and -3 at the call with a message about max_length. Left out, it is transformers'
    "no limit"."""
    for value in ("abc", 1.5, -3, 0, True):
        with pytest.raises(ValueError, match=rf"^model_max_length must be a number of words >= 1, got {value!r}\.$"):
            ElmoTokenizer(model_max_length=value)
    assert len(ElmoTokenizer(model_max_length=4)("a b c d e", truncation=True)["input_ids"]) == 4
    assert ElmoTokenizer().model_max_length > 10**20
    ElmoTokenizer().save_pretrained(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": "512"}))
    with pytest.raises(ValueError, match=r"^model_max_length must be a number of words >= 1, got '512'\.$"):
        ElmoTokenizer.from_pretrained(tmp_path)

def test_a_batch_may_begin_with_an_example_without_words(tok):
    """A batch's first example may be empty (a word never is): decode still reads the ids as a batch."""
    batch = tok([[], ["a", "b"]], is_split_into_words=True)["input_ids"]
    assert batch[0] == [] and tok.decode(batch) == tok.batch_decode(batch) == ["", "a b"]


def test_an_encoding_keeps_the_index_of_its_first_word_through_pickle():
    """`word_ids()` after truncation from the left counts from the first input word, in a pickled copy too (as
    datasets and DataLoader workers pass encodings); a single example has no batch_index 1."""
    left = ElmoTokenizer(truncation_side="left")
    encoding = left(["a b c d e", "f g h"], truncation=True, max_length=2)
    copied = pickle.loads(pickle.dumps(encoding))
    assert copied.word_ids(0) == encoding.word_ids(0) == [3, 4] and copied.word_ids(1) == [1, 2]
    # Padding adds no words: the padded encoding still counts from the first kept word (it restarted at 0).
    right = left.pad(encoding, padding="max_length", max_length=3)
    assert right.word_ids(0) == [3, 4, None] and right.word_ids(1) == [1, 2, None]
    on_the_left = left.pad(encoding, padding="max_length", max_length=3, padding_side="left")
    assert on_the_left.word_ids(0) == [None, 3, 4] and on_the_left.word_ids(1) == [None, 1, 2]
    with pytest.raises(IndexError, match=r"^This encoding holds a single example, got batch_index=1\.$"):
        left("a b").word_ids(1)


def test_a_dataset_column_or_array_encodes_as_its_list(tok):
    """A datasets Column (what dataset["text"] returns) and numpy arrays of str are batches like the list they hold."""
    texts = ["I eat an apple .", "Apple is a company ."]
    expected = tok(texts, padding=True)["input_ids"]
    column = Dataset.from_dict({"text": texts, "words": [t.split() for t in texts]})
    assert tok(column["text"], padding=True)["input_ids"] == expected
    assert tok(np.array(texts), padding=True)["input_ids"] == expected
    assert tok(column["words"], is_split_into_words=True, padding=True)["input_ids"] == expected
    assert tok(np.array(texts[0].split()), is_split_into_words=True)["input_ids"] == tok(texts[0])["input_ids"]


def test_arguments_it_cannot_read_are_refused_naming_them(tok):
    with pytest.raises(TypeError, match=r"^Example 1 is of type int, not str \(lists of words need is_split_into_words=True\)\.$"):
        tok(["a b", 3])
    for text, name in ((3, "int"), (b"a b", "bytes"), ({"a": 1}, "dict")):
        with pytest.raises(TypeError, match=rf"^ElmoTokenizer encodes a str, a list of words .*; got {name}\.$"):
            tok(text)
    with pytest.raises(TypeError, match=r"^With is_split_into_words=True, every word must be a str, got \['a', 3\]\.$"):
        tok([["a", 3]], is_split_into_words=True)
    for batch, index, name in (([1, 2], 0, "int"), ([["a"], None], 1, "NoneType")):
        with pytest.raises(TypeError, match=rf"^With is_split_into_words=True, each example is a list of words; "
                                            rf"example {index} is of type {name} "):
            tok(batch, is_split_into_words=True)
    for call in (tok.tokenize, tok.split_words):
        with pytest.raises(TypeError, match=r"^tokenize and split_words take raw text, a str; got list \(a list of "):
            call(["a", "b"])
    with pytest.raises(ValueError, match=r"^padding_side must be 'left' or 'right', got 'middle'\.$"):
        tok(["a b", "c"], padding=True, padding_side="middle")
    with pytest.raises(ValueError, match=r"pad_token names it and cannot be None\.$"):
        ElmoTokenizer(pad_token=None)
    with pytest.raises(ValueError, match=r"^model_input_names names input_word_ids, which need a word.dic"):
        ElmoTokenizer(model_input_names=["input_ids", "input_word_ids", "attention_mask"])
    with pytest.raises(ValueError, match=r"^this tokenizer has no word vocabulary \(word.dic\)$"):
        tok.word_to_id("a")
    # Outside from_pretrained there is no folder to name: the file's own name.
    with pytest.raises(ValueError, match=r"^char.dic: not found; this tokenizer spells words with that character"):
        ElmoTokenizer(alphabet="vocabulary")


# ---- added tokens ----------------------------------------------------------------------------------------------


def test_every_way_of_adding_tokens_takes_effect_at_once(tmp_path):
    """add_tokens, add_special_tokens, the added_tokens_decoder setter and from_pretrained of a saved folder each
    change at once which words raw text is kept whole around and which are special: an id from
    convert_tokens_to_ids (of a list as of each word), marked in special_tokens_mask, dropped by
    decode(skip_special_tokens=True). Nothing is remembered from before a change."""
    words = ["a", "don't", "<URL>", "[SEP]", "[CLS]"]
    text = " ".join(words)

    def kept_whole_and_special(tokenizer) -> tuple[list[str], list[str]]:
        ids = tokenizer.convert_tokens_to_ids(words)
        assert ids == [tokenizer.convert_tokens_to_ids(word) for word in words]
        special = [word for word, word_ids in zip(words, ids) if isinstance(word_ids, int)]
        assert all(word_ids == word_to_char_ids(word) for word, word_ids in zip(words, ids) if word not in special)
        encoding = tokenizer(words, is_split_into_words=True, return_special_tokens_mask=True)
        assert [word for word, mark in zip(words, encoding["special_tokens_mask"]) if mark] == special
        kept = tokenizer.decode(encoding["input_ids"], skip_special_tokens=True).split()
        assert kept == [word for word in words if word not in special]
        return [word for word in tokenizer.tokenize(text) if word in words[1:]], special

    tokenizer = ElmoTokenizer()
    assert kept_whole_and_special(tokenizer) == ([], [])
    tokenizer.add_tokens(["don't"])
    assert kept_whole_and_special(tokenizer) == (["don't"], [])
    tokenizer.add_tokens(["<URL>"], special_tokens=True)
    assert kept_whole_and_special(tokenizer) == (["don't", "<URL>"], ["<URL>"])
    tokenizer.add_special_tokens({"additional_special_tokens": ["[SEP]"]})
    assert kept_whole_and_special(tokenizer) == (["don't", "<URL>", "[SEP]"], ["<URL>", "[SEP]"])
    dont = tokenizer.get_added_vocab()["don't"]
    tokenizer.added_tokens_decoder = {dont: AddedToken("don't", special=True), len(tokenizer): AddedToken("[CLS]", special=True)}
    assert kept_whole_and_special(tokenizer) == (words[1:], words[1:])
    tokenizer.save_pretrained(tmp_path)
    reloaded = ElmoTokenizer.from_pretrained(tmp_path)
    assert kept_whole_and_special(reloaded) == (words[1:], words[1:])
    reloaded.added_tokens_decoder = {dont: AddedToken("don't", special=False)}
    assert kept_whole_and_special(reloaded) == (words[1:], ["<URL>", "[SEP]", "[CLS]"])
    # Found wherever it occurs, inside a longer word too: AddedToken's single_word, lstrip and rstrip are not read.
    inside = ElmoTokenizer()
    inside.add_tokens([AddedToken("ab", single_word=True, lstrip=True, rstrip=True)])
    assert inside.tokenize("xaby ab") == ["x", "ab", "y", "ab"]


def test_split_special_tokens_splits_added_tokens_as_any_text(tmp_path):
    """transformers' `split_special_tokens`, in a call or as the tokenizer's (saved) setting: raw text is split as if
    no token had been added; by default added tokens are kept whole."""
    text = "I don't [SEP] ok"
    whole, plain = ["I", "don't", "[SEP]", "ok"], ["I", "do", "n't", "[", "SEP", "]", "ok"]
    tokenizer = ElmoTokenizer()
    tokenizer.add_tokens(["don't"])
    tokenizer.add_special_tokens({"additional_special_tokens": ["[SEP]"]})
    assert tokenizer.tokenize(text) == whole and tokenizer.tokenize(text, split_special_tokens=True) == plain
    encoding = tokenizer(text, split_special_tokens=True, return_special_tokens_mask=True)
    assert encoding["input_ids"] == tokenizer.encode(text, split_special_tokens=True) == ElmoTokenizer().encode(text)
    assert tokenizer.decode(encoding["input_ids"]) == " ".join(plain) and encoding["special_tokens_mask"] == [0] * 7
    splitting = ElmoTokenizer(split_special_tokens=True)
    splitting.add_tokens(["don't"])
    splitting.save_pretrained(tmp_path)
    reloaded = ElmoTokenizer.from_pretrained(tmp_path)
    assert reloaded.tokenize(text) == reloaded.split_words(text) == plain
    assert reloaded.decode(reloaded(text)["input_ids"]) == " ".join(plain)
    assert reloaded.tokenize(text, split_special_tokens=False)[:2] == ["I", "don't"]


def test_a_word_named_like_the_padding_word_is_spelled_as_any_word(tok):
    """`pad_token` only names id 0, the all-zero padding word: a word of that name in the input is a word. Raw text
    splits `<pad>` as any punctuation, a pre-split `<pad>` is spelled, kept by decode and not a special token; only
    `convert_tokens_to_ids("<pad>")` is 0, `pad_token_id`, as transformers needs."""
    text = "a <pad> b"
    encoding = tok(text, return_special_tokens_mask=True)
    assert tok.tokenize(text) == ["a", "<", "pad", ">", "b"]
    assert tok.convert_tokens_to_ids(tok.tokenize(text)) == encoding["input_ids"] == tok.encode(text)
    assert encoding["special_tokens_mask"] == [0] * 5
    assert tok.decode(encoding["input_ids"], skip_special_tokens=True) == "a < pad > b"
    words = tok(["a", "<pad>", "b"], is_split_into_words=True, return_special_tokens_mask=True)
    assert words["input_ids"][1] == word_to_char_ids("<pad>") and words["special_tokens_mask"] == [0, 0, 0]
    assert tok.decode(words["input_ids"], skip_special_tokens=True) == "a <pad> b"
    assert tok.convert_tokens_to_ids(tok.pad_token) == tok.pad_token_id == 0
    # A padding word is still marked and dropped.
    padded = tok([["a"], ["b", "c"]], is_split_into_words=True, padding=True, return_special_tokens_mask=True)
    assert padded["special_tokens_mask"][0] == [0, 1] and tok.decode(padded["input_ids"][0]) == "a"


def test_the_padding_word_keeps_its_id_and_name_once_made():
    """pad_token names id 0 when the tokenizer is made; renaming it later (as `add_special_tokens` or GPT's
    `pad_token = eos_token` would) is refused naming the way, with nothing changed: it made pad_token_id an added
    token's id (262), with which transformers' padding gave ids the model refuses."""
    tok = ElmoTokenizer()
    before = (tok.get_vocab(), tok.special_tokens_map, tok.bos_token)
    attempts = [lambda: setattr(tok, "pad_token", "[PAD]"), lambda: setattr(tok, "pad_token_id", 5),
                lambda: setattr(tok, "pad_token", tok.eos_token),
                lambda: tok.add_special_tokens({"bos_token": "[B]", "pad_token": "[PAD]"})]
    for attempt in attempts:
        with pytest.raises(ValueError, match=r"cannot become .*: ElmoTokenizer pads with id 0, the all-zero word, "
                                             r"named '<pad>'; to give it another name, make the tokenizer with it"):
            attempt()
    assert (tok.get_vocab(), tok.special_tokens_map, tok.bos_token) == before and tok.pad_token_id == 0
    tok.pad_token, tok.pad_token_id = "<pad>", 0  # (what it is already)
    named = ElmoTokenizer(pad_token="[PAD]")
    assert (named.pad_token, named.pad_token_id) == ("[PAD]", 0)
    padded = named(["a b", "c"], padding=True, return_tensors="pt")["input_ids"]
    assert (padded[1, 1] == 0).all()


def test_vocabulary(tok):
    vocab = tok.get_vocab()
    assert len(tok) == len(vocab) == tok.vocab_size == 262
    assert tok.pad_token_id == 0 and vocab["<pad>"] == 0
    assert vocab["<0x41>"] == ord("A") + 1
    assert [vocab[name] for name in ("<S>", "</S>", "<bow>", "<eow>", "<char_pad>")] == [257, 258, 259, 260, 261]
    assert tok.convert_ids_to_tokens(260) == "<eow>"


def test_a_character_vocabulary_names_its_ids_apart_from_words():
    """With char.dic, id 0 is `<pad_word>` and every character id has a name no word has: `<U+5929>` for 天, `<bos_char>`
    ... for the special entries (`<char_pad>` for char.dic's `<pad>`), `<char ab>` for an entry of several
    characters; a name gives its id and the id its name. (char.dic leaves no id out: ElmoLexicon refuses one that does.)"""
    folder = ELMOFORMANYLANGS / "with_words"
    tokenizer = ElmoTokenizer(char_vocab_file=str(folder / "char.dic"), word_vocab_file=str(folder / "word.dic"))
    chars, vocab = read_dictionary(folder / "char.dic"), tokenizer.get_vocab()
    assert tokenizer.pad_token == "<pad_word>" and vocab["<pad_word>"] == 0
    named = {"<U+5929>": "天", "<bos_char>": "<bos>", "<eos_char>": "<eos>", "<oov_char>": "<oov>", "<char_pad>": "<pad>"}
    for name, entry in named.items():
        assert vocab[name] == tokenizer.convert_tokens_to_ids(name) == chars[entry] + 1, name
        assert tokenizer.convert_ids_to_tokens(chars[entry] + 1) == name
    assert len(vocab) == len(tokenizer) == max(chars.values()) + 2
    specials = {token: 2 + index for index, token in enumerate(("<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>"))}
    lexicon = ElmoLexicon({"天": 0, "ab": 1, **specials}, None, 50)
    assert lexicon.char_names() == ["<U+5929>", "<char ab>", "<bos_char>", "<eos_char>", "<oov_char>", "<char_pad>",
                                    "<bow>", "<eow>"]


def test_save_and_load(tmp_path):
    tok = ElmoTokenizer(max_characters_per_token=20)
    assert tok.save_vocabulary(str(tmp_path)) == ()
    tok.save_pretrained(tmp_path)
    loaded = ElmoTokenizer.from_pretrained(tmp_path)
    assert loaded.max_characters_per_token == 20
    assert loaded.pad_token_id == 0
    ids = loaded(["a", "x" * 30], is_split_into_words=True, return_tensors="pt")["input_ids"]
    assert ids.shape == (1, 2, 20)
    assert ids[0, 1].tolist() == [259] + [ord("x") + 1] * 18 + [260]
    padded = loaded(["a", "b c"], padding=True, return_tensors="pt")["input_ids"]
    assert padded.shape == (2, 2, 20) and (padded[0, 1] == 0).all()


def test_a_saved_tokenizer_records_its_alphabet(tmp_path):
    """A tokenizer of char.dic reloaded from a folder without its char.dic fails, naming the file, instead of
    spelling UTF-8 bytes (ids the model reads as other characters); a folder saved before the alphabet was recorded
    loads as it did."""
    folder = ELMOFORMANYLANGS / "with_words"
    ElmoTokenizer(char_vocab_file=str(folder / "char.dic"), word_vocab_file=str(folder / "word.dic")).save_pretrained(tmp_path / "chars")
    ElmoTokenizer().save_pretrained(tmp_path / "bytes")
    config = json.loads((tmp_path / "chars" / "tokenizer_config.json").read_text())
    assert config["alphabet"] == "vocabulary"
    assert json.loads((tmp_path / "bytes" / "tokenizer_config.json").read_text())["alphabet"] == "bytes"
    assert ElmoTokenizer.from_pretrained(tmp_path / "chars").lexicon.chars == read_dictionary(folder / "char.dic")
    (tmp_path / "chars" / "char.dic").unlink()
    with pytest.raises(ValueError, match=f"^{re.escape(str(tmp_path / 'chars' / 'char.dic'))}: not found; this tokenizer"):
        ElmoTokenizer.from_pretrained(tmp_path / "chars")
    # Saved before the key existed: as before, the files that are there say what the tokenizer reads (a word.dic
    # without its char.dic is refused, naming both).
    del config["alphabet"]
    (tmp_path / "chars" / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=f"^{re.escape(str(tmp_path / 'chars' / 'word.dic'))} \\(word_vocab_file\\) needs a char"):
        ElmoTokenizer.from_pretrained(tmp_path / "chars")
    (tmp_path / "chars" / "word.dic").unlink()
    config["model_input_names"] = ["input_ids", "attention_mask"]
    (tmp_path / "chars" / "tokenizer_config.json").write_text(json.dumps(config))
    assert ElmoTokenizer.from_pretrained(tmp_path / "chars").lexicon is None
    # What contradicts itself is refused.
    with pytest.raises(ValueError, match="alphabet must be 'bytes' or 'vocabulary', got 'unicode'"):
        ElmoTokenizer(alphabet="unicode")
    with pytest.raises(ValueError, match="char.dic: a character vocabulary, for a tokenizer of alphabet 'bytes'"):
        ElmoTokenizer(alphabet="bytes", char_vocab_file=str(folder / "char.dic"))


def test_a_model_folder_saved_without_its_tokenizer_gives_the_tokenizer_its_config_describes(tmp_path):
    """From a model folder with no tokenizer files, `AutoTokenizer` (and so `pipeline` and `ElmoEmbedder`) builds
    the tokenizer the model's config describes: its characters per word, and for a character vocabulary an error
    naming the missing char.dic. It built the default, 50 UTF-8 bytes per word, whose ids such a model misreads."""
    from transformers import AutoModel, AutoTokenizer

    from hf_elmo import ElmoConfig, ElmoModel

    sizes = dict(char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 8]], num_highway_layers=1, cell_size=16,
                 projection_dim=8)
    ElmoModel(ElmoConfig(max_characters_per_token=20, **sizes)).save_pretrained(tmp_path / "bytes")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "bytes")
    assert tokenizer.max_characters_per_token == 20
    batch = tokenizer(["a longer sentence", "b"], padding=True, return_tensors="pt")
    assert batch["input_ids"].shape == (2, 3, 20)
    assert AutoModel.from_pretrained(tmp_path / "bytes")(**batch).last_hidden_state.shape == (2, 3, 16)
    assert ElmoTokenizer.from_pretrained(tmp_path / "bytes", max_characters_per_token=30).max_characters_per_token == 30
    tokenizer.save_pretrained(tmp_path / "bytes")  # (its own tokenizer_config.json now says what it reads)
    assert AutoTokenizer.from_pretrained(tmp_path / "bytes").max_characters_per_token == 20
    chars = ElmoConfig(alphabet="vocabulary", n_characters=5000, bos_char_id=1, eos_char_id=2, bow_char_id=3,
                       eow_char_id=4, pad_char_id=5, **sizes)
    ElmoModel(chars).save_pretrained(tmp_path / "chars")
    with pytest.raises(ValueError, match=f"^{re.escape(str(tmp_path / 'chars' / 'char.dic'))}: not found; this tokenizer"):
        AutoTokenizer.from_pretrained(tmp_path / "chars")
    # Another model's config.json (no ELMo's) says nothing of this tokenizer: the defaults hold.
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text(json.dumps({"model_type": "character_bert",
                                                                "max_characters_per_token": 20}))
    assert ElmoTokenizer.from_pretrained(tmp_path / "other").max_characters_per_token == 50


def test_a_saved_tokenizer_of_word_ids_without_its_word_dic_names_the_file(tmp_path):
    """A saved tokenizer that returns input_word_ids, reloaded from a folder without its word.dic, fails naming that
    file, as it does for a missing char.dic."""
    folder = ELMOFORMANYLANGS / "with_words"
    ElmoTokenizer(char_vocab_file=str(folder / "char.dic"), word_vocab_file=str(folder / "word.dic")).save_pretrained(tmp_path)
    (tmp_path / "word.dic").unlink()
    with pytest.raises(ValueError, match=f"^{re.escape(str(tmp_path / 'word.dic'))}: not found; this tokenizer returns "
                                         r"input_word_ids \(model_input_names\)"):
        ElmoTokenizer.from_pretrained(tmp_path)


# ---- the character vocabulary's files (lexicon.py) -------------------------------------------------------------


def test_dictionaries_are_written_atomically_with_plain_modes(tmp_path):
    """write_dictionary goes through a temporary file that a failure removes, and gives the file the mode a plain
    open would (not a fixed 0644)."""
    entries = read_dictionary(ELMOFORMANYLANGS / "with_words" / "char.dic")
    umask = os.umask(0o027)
    try:
        write_dictionary(entries, tmp_path / "char.dic")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "char.dic").stat().st_mode) == 0o640
    assert read_dictionary(tmp_path / "char.dic") == entries
    (tmp_path / "taken").mkdir()  # a folder where the file belongs: the final rename fails
    with pytest.raises(OSError):
        write_dictionary(entries, tmp_path / "taken")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["char.dic", "taken"]
    # A write that fails part-way (a file size limit, as a full disk) leaves the old dictionary whole, and nothing
    # else (a plain open left the first 20,000 bytes of the new one in its place).
    script = (
        "import resource, signal, sys\n"
        "from hf_elmo.lexicon import write_dictionary\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (20000, resource.RLIM_INFINITY))\n"
        "try:\n"
        "    write_dictionary({chr(0x4E00 + i): i for i in range(10000)}, sys.argv[1])\n"
        "except OSError as error:\n"
        "    print(error.errno)\n"
    )
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path / "char.dic")], capture_output=True, text=True,
                            timeout=120)
    assert result.stdout.strip() == str(errno.EFBIG), result.stderr
    assert read_dictionary(tmp_path / "char.dic") == entries
    assert sorted(path.name for path in tmp_path.iterdir()) == ["char.dic", "taken"]


def test_a_dictionary_whose_ids_are_not_its_rows_is_refused(tmp_path):
    """The package's embedding has one row per entry: ids must be 0 .. N - 1. A char.dic with one stray large id (a
    count where the id belongs) loaded, and made a list of names as long as that id (3,000,000: 17 s and 1 GB)."""
    folder = ELMOFORMANYLANGS / "with_words"
    for name, extra in (("char.dic", "b\t3000000\n"), ("word.dic", "zz\t100\n"), ("word.dic", "zz\t4\n")):
        shutil.copy(folder / "char.dic", tmp_path / "char.dic")
        shutil.copy(folder / "word.dic", tmp_path / "word.dic")
        with open(tmp_path / name, "a", encoding="utf-8") as handle:
            handle.write(extra)
        with pytest.raises(LexiconError) as raised:
            ElmoTokenizer(char_vocab_file=str(tmp_path / "char.dic"), word_vocab_file=str(tmp_path / "word.dic"))
        assert str(raised.value).startswith(str(tmp_path / name)), (name, extra)


def test_entries_that_would_not_read_back_are_refused(tmp_path):
    """The package reads `line.strip().split("\\t")` from lines split as str.splitlines splits: an entry with a tab or
    line break, or that begins with whitespace (a lone U+001F becomes U+3000), would read back as another."""
    with pytest.raises(LexiconError, match=r"^the word 'a\\x1fb' has the character '\\x1f', which cannot be an entry of char.dic"):
        ElmoLexicon.build({"a\x1fb": 3}, 50, with_words=True)
    with pytest.raises(LexiconError, match=r"^the word ' a' cannot be an entry of word.dic"):
        ElmoLexicon.build({" a": 3}, 50, with_words=True)
    with pytest.raises(LexiconError, match=r"^the word '' cannot be an entry of word.dic"):
        ElmoLexicon.build({"": 3, "b": 1}, 50, with_words=True)
    with pytest.raises(LexiconError, match=r"^the word 'a\\ud800' cannot be an entry of word.dic"):  # (no UTF-8 for it)
        ElmoLexicon.build({"a\ud800": 3, "b": 1}, 50, with_words=True)
    lexicon = ElmoLexicon.build({"ab": 3}, 50, with_words=True)
    for token in ("x\u2028y", "x\ty", "x\ny", "\u00a0", "x\udc80"):
        with pytest.raises(LexiconError, match=f"^{re.escape(str(tmp_path / 'word.dic'))}: cannot hold the entry"):
            write_dictionary({**lexicon.words, token: len(lexicon.words)}, tmp_path / "word.dic")
    assert list(tmp_path.iterdir()) == []
    # What reads back is kept: an ideographic space alone (the package's stand-in for a stripped token), a space
    # inside or at the end of a word.
    lexicon = ElmoLexicon.build({"天气": 2, "\u3000": 1}, 50, with_words=True)
    lexicon.save(tmp_path / "char.dic", tmp_path / "word.dic")
    assert read_dictionary(tmp_path / "char.dic") == lexicon.chars and read_dictionary(tmp_path / "word.dic") == lexicon.words
    words = {**lexicon.words, "New York": len(lexicon.words), "x ": len(lexicon.words) + 1}
    write_dictionary(words, tmp_path / "word.dic")
    assert read_dictionary(tmp_path / "word.dic") == words
    # Lines are read as the package splits them, so what loads also saves: U+001C ends a line there too.
    (tmp_path / "split.dic").write_text("<oov>\t0\na\x1cb\t1\n", encoding="utf-8")
    with pytest.raises(LexiconError, match=r"split.dic: line 2 is not token<TAB>id: 'a'$"):
        read_dictionary(tmp_path / "split.dic")


def test_dictionaries_are_read_as_the_package_reads_them(tmp_path):
    """A repeated token takes the id of its last line (the package fills a dict line by line); a file that is not
    UTF-8 is refused, naming it and the line, numbered as every other line error numbers it (str.splitlines);
    a model with word input needs a word.dic."""
    (tmp_path / "word.dic").write_text("<oov>\t0\na\t1\n<pad>\t2\na\t3\n", encoding="utf-8")
    assert read_dictionary(tmp_path / "word.dic") == {"<oov>": 0, "a": 3, "<pad>": 2}
    (tmp_path / "latin1.dic").write_bytes("<oov>\t0\r\n天\t1\u2028<pad>\t2\rcaf\xe9\t3\n".encode("utf-8").replace(b"\xc3\xa9", b"\xe9"))
    with pytest.raises(LexiconError, match=f"^{re.escape(str(tmp_path / 'latin1.dic'))}: line 4 is not UTF-8 text "
                                           r"\(invalid continuation byte at byte 28\)$"):
        read_dictionary(tmp_path / "latin1.dic")
    with pytest.raises(LexiconError, match="^a model with word input needs word.dic$"):
        ElmoLexicon.build({"ab": 1}, 50, with_words=False).config_options(word_input=True)


def test_build_counts_words_as_cut_to_the_characters_a_word_keeps():
    """Words are cut to K - 2 characters before they are counted and their characters collected: two long words that
    begin alike are one entry with both counts, and the characters cut off are in no dictionary."""
    lexicon = ElmoLexicon.build({"abcdef": 2, "abcdxy": 2, "zz": 3}, 6, with_words=True)
    assert list(lexicon.words)[4:] == ["abcd", "zz"] and lexicon.word_id("abcdzz") == lexicon.words["abcd"]
    assert list(lexicon.chars)[:5] == ["a", "b", "c", "d", "z"] and len(lexicon.chars) == 5 + 6


def test_build_counts_every_entry_in_max_words():
    """`max_words` entries in all, the four special ones included; fewer than those and a word is refused."""
    counts = {"a": 5, "b": 4, "c": 3, "d": 2}
    assert list(ElmoLexicon.build(counts, 50, with_words=True, max_words=6).words) == ["<oov>", "<bos>", "<eos>", "<pad>", "a", "b"]
    with pytest.raises(LexiconError, match=r"^max_words must be at least 5 \(word.dic's 4 special entries and one word\), got 2$"):
        ElmoLexicon.build(counts, 50, with_words=True, max_words=2)


# ---- transformers and datasets tooling ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ner_dataset(tok) -> Dataset:
    data = Dataset.from_dict(
        {
            "words": [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"], ["天气", "不错", "！"]],
            "tags": [[3, 0, 7, 0], [1, 2], [0, 0, 0]],
            "label": [1, 0, 1],
        }
    )
    return data.map(lambda batch: tok(batch["words"], is_split_into_words=True), batched=True)


def test_datasets_map(ner_dataset):
    assert ner_dataset.column_names == ["words", "tags", "label", "input_ids", "attention_mask"]
    assert [len(ids) for ids in ner_dataset["input_ids"]] == [4, 2, 3]
    assert ner_dataset[1]["input_ids"][0] == word_to_char_ids("Peter")
    assert ner_dataset[2]["attention_mask"] == [1, 1, 1]


def test_data_collator_with_padding(tok, ner_dataset):
    features = [{key: example[key] for key in ("input_ids", "attention_mask", "label")} for example in ner_dataset]
    batch = DataCollatorWithPadding(tok)(features)
    assert batch["input_ids"].shape == (3, 4, 50) and batch["input_ids"].dtype == torch.int64
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]]
    assert batch["labels"].tolist() == [1, 0, 1]
    assert (batch["input_ids"][1, 2:] == 0).all()
    assert DataCollatorWithPadding(tok, pad_to_multiple_of=8)(features)["input_ids"].shape == (3, 8, 50)


def test_data_collator_for_token_classification(tok, ner_dataset):
    features = [
        {"input_ids": example["input_ids"], "attention_mask": example["attention_mask"], "labels": example["tags"]}
        for example in ner_dataset
    ]
    batch = DataCollatorForTokenClassification(tok)(features)
    assert batch["input_ids"].shape == (3, 4, 50) and batch["input_ids"].dtype == torch.int64
    assert batch["attention_mask"].shape == (3, 4)
    assert batch["labels"].tolist() == [[3, 0, 7, 0], [1, 2, -100, -100], [0, 0, 0, -100]]
    assert tok.decode(batch["input_ids"][2]) == "天气 不错 ！"


def test_word_ids_align_labels(tok):
    # The usual token-classification recipe: one label per word, -100 on padding.
    words = [["EU", "rejects", "German"], ["Peter"]]
    tags = [[3, 0, 7], [1]]
    batch = tok(words, is_split_into_words=True, padding=True)
    aligned = [
        [-100 if word_id is None else tags[i][word_id] for word_id in batch.word_ids(i)] for i in range(len(words))
    ]
    assert aligned == [[3, 0, 7], [1, -100, -100]]


def _same_encoding(fast, slow) -> None:
    assert list(fast.keys()) == list(slow.keys())
    for key in slow:
        assert fast[key].dtype == slow[key].dtype and fast[key].shape == slow[key].shape, key
        assert torch.equal(fast[key], slow[key]), key
    assert fast.first_word_index == slow.first_word_index
    assert [fast.word_ids(i) for i in range(len(slow["input_ids"]))] == [slow.word_ids(i) for i in range(len(slow["input_ids"]))]


def test_encode_words_encodes_a_sentence_longer_than_model_max_length_whole_with_the_calls_warning():
    import transformers.tokenization_utils_base
    from transformers.testing_utils import CaptureLogger

    with CaptureLogger(transformers.utils.logging.get_logger(transformers.tokenization_utils_base.__name__)) as captured:
        assert ElmoTokenizer(model_max_length=3).encode_words([["a"] * 5])["input_ids"].shape == (1, 5, 50)
    assert "Token indices sequence length is longer than the specified maximum sequence length for this model (5 > 3)" \
        in captured.out


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_encode_words_gives_what_the_call_gives_from_its_cache_of_spelled_words(padding_side):
    """`encode_words` (what `hf-elmo embed` encodes with) gathers spelled words from a cache: every batch gives
    exactly the ids, mask and word ids of `tokenizer(words, is_split_into_words=True, padding=True)`, with bytes and
    with char.dic and word.dic, words seen before and new ones, a word over 48 bytes, `<S>` and `<bos>`, sentences
    without words, and after the cache was filled past its size and started again. What the call refuses, it
    refuses with the call's message."""
    texts = json.loads((FIXTURES / "allennlp-elmo" / "sentences.json").read_text(encoding="utf-8"))
    english = [text.split() for row in texts for text in row]
    sets = json.loads((ELMOFORMANYLANGS / "sentences.json").read_text(encoding="utf-8"))["sets"]
    others = [list(words) for sentences in sets.values() for words in sentences]
    batches = [english[:7], english[5:20], [["<S>", "x" * 60, "</S>", "<bos>", "天气"], [], ["a"]], others, english]
    folder = ELMOFORMANYLANGS / "with_words"
    for tokenizer in (ElmoTokenizer(padding_side=padding_side),
                      ElmoTokenizer(char_vocab_file=str(folder / "char.dic"), word_vocab_file=str(folder / "word.dic"),
                                    padding_side=padding_side)):
        tokenizer._spelled_words.max_words = 64  # (a fourth of the words: the cache starts again several times)
        for batch in batches + batches:
            slow = tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")
            _same_encoding(tokenizer.encode_words(batch), slow)
        # (the last batch alone holds more words than that: it is kept whole, the batch before it was let go)
        assert tokenizer._spelled_words.size - 1 == len({word for words in english for word in words}) > 64
        _same_encoding(tokenizer.encode_words([[], []]), tokenizer([[], []], is_split_into_words=True, padding=True,
                                                                     return_tensors="pt"))
        with pytest.raises(ValueError, match="the word 'a\\\\ud800b' holds a lone surrogate"):
            tokenizer.encode_words([["x"], ["a\ud800b"]])
        with pytest.raises(TypeError, match="every word must be a str"):
            tokenizer.encode_words([["x", 3]])
        with pytest.raises(TypeError, match="each example is a list of words; example 1 is a str"):
            tokenizer.encode_words([["x"], "a sentence"])
        _same_encoding(tokenizer.encode_words([]), tokenizer([], is_split_into_words=True, padding=True, return_tensors="pt"))
        tokenizer.padding_side = "middle"  # (set after loading, where nothing checks it)
        with pytest.raises(ValueError, match="^padding_side must be 'left' or 'right', got 'middle'.$"):
            tokenizer.encode_words(english[:3])
        tokenizer.padding_side = padding_side
    for return_tensors in (None, "np"):  # (lists as the call gives them; arrays)
        fast, slow = (tokenizer.encode_words(english[:3], return_tensors=return_tensors),
                      tokenizer(english[:3], is_split_into_words=True, padding=True, return_tensors=return_tensors))
        assert fast.keys() == slow.keys() and all(type(fast[key]) is type(slow[key]) for key in slow)
        assert all(np.array_equal(fast[key], slow[key]) for key in slow)
    copied = pickle.loads(pickle.dumps(tokenizer))  # (the cache and its lock are not carried: a copy starts empty)
    assert copied._spelled_words.size == 1 and copied._spelled_words.max_words == 64
    _same_encoding(copied.encode_words(others), tokenizer.encode_words(others))
    # Words cached while word ids were not returned have their word.dic ids once they are (they were all 0).
    tokenizer = ElmoTokenizer(char_vocab_file=str(folder / "char.dic"), word_vocab_file=str(folder / "word.dic"),
                              model_input_names=["input_ids", "attention_mask"])
    _same_encoding(tokenizer.encode_words(others), tokenizer(others, is_split_into_words=True, padding=True,
                                                             return_tensors="pt"))
    tokenizer.model_input_names = ["input_ids", "input_word_ids", "attention_mask"]
    slow = tokenizer(others, is_split_into_words=True, padding=True, return_tensors="pt")
    assert (slow["input_word_ids"] > tokenizer.lexicon.pad_word_id).sum() > 10
    _same_encoding(tokenizer.encode_words(others), slow)


def test_encode_words_keeps_every_cached_word_when_its_cache_grows_past_1024_rows():
    """The cache starts with 1024 rows and grows (by concatenation) when more distinct words arrive: the rows (and word
    ids) of words cached before the growth must survive it. hf-elmo embed on any file of more than 1023 distinct
    words goes through this."""
    folder = ELMOFORMANYLANGS / "with_words"
    known = [word for word in (folder / "word.dic").read_text(encoding="utf-8").split("\n")[4:] if word]
    known = [line.split("\t")[0] for line in known]
    for tokenizer in (ElmoTokenizer(), ElmoTokenizer(char_vocab_file=str(folder / "char.dic"),
                                                     word_vocab_file=str(folder / "word.dic"))):
        assert tokenizer._spelled_words.max_words > 4096  # the default: growth is reached
        first = [known, ["the", "cat", "sat"]]
        _same_encoding(tokenizer.encode_words(first), tokenizer(first, is_split_into_words=True, padding=True, return_tensors="pt"))
        # 1000 + 1000 + 2000 new words: the table grows from 1024 rows twice
        for count, offset in ((1000, 0), (1000, 1000), (2000, 2000)):
            batch = [[f"w{i}" for i in range(offset, offset + count)], known[:3]]
            _same_encoding(tokenizer.encode_words(batch), tokenizer(batch, is_split_into_words=True, padding=True,
                                                         return_tensors="pt"))
        assert len(tokenizer._spelled_words.char_ids) > 1024
        # every word cached before (and at) each growth is still spelled, and word-numbered, as the call does
        again = [known, ["the", "cat", "sat"], [f"w{i}" for i in range(0, 4000, 7)],
                 [f"w{i}" for i in (998, 999, 1000, 1001, 1999, 2000, 3999)]]
        _same_encoding(tokenizer.encode_words(again), tokenizer(again, is_split_into_words=True, padding=True, return_tensors="pt"))


def test_pad_to_multiple_of_leaves_a_longest_example_already_a_multiple_as_it_is():
    """`pad_to_multiple_of=8` pads up to the next multiple of 8 only where the length is not one already (as
    transformers does): a batch whose longest example has 8 words stays 8 words, 9 becomes 16."""
    tokenizer = ElmoTokenizer()
    for longest, expected in ((8, 8), (9, 16), (16, 16), (1, 8)):
        batch = tokenizer([["a"] * longest, ["b"] * 3], is_split_into_words=True, padding=True, pad_to_multiple_of=8,
                          return_tensors="pt")
        assert batch["input_ids"].shape == (2, expected, 50), longest
        assert batch["attention_mask"].sum(1).tolist() == [longest, 3]
    single = tokenizer(["a"] * 8, is_split_into_words=True, padding="max_length", max_length=8, pad_to_multiple_of=4)
    assert len(single["input_ids"]) == 8


def test_offsets_after_an_added_token_point_at_the_words_in_the_text():
    """Raw text is split around added tokens; the words after one keep their spans in the whole text."""
    tokenizer = ElmoTokenizer()
    tokenizer.add_tokens(["<URL>"])
    text = "see <URL> now, ok <URL>x"
    encoding = tokenizer(text, return_offsets_mapping=True)
    words = tokenizer.tokenize(text)
    assert words == ["see", "<URL>", "now", ",", "ok", "<URL>", "x"]
    assert [text[start:end] for start, end in encoding["offset_mapping"]] == words
    assert encoding["offset_mapping"][2] == (10, 13)
    # and after a byte-order mark, which is not part of the first word
    encoding = tokenizer("\ufeff" + text, return_offsets_mapping=True)
    assert [("\ufeff" + text)[start:end] for start, end in encoding["offset_mapping"]] == words


def test_clitics_with_a_typographic_apostrophe_split_as_with_a_straight_one():
    """The 1B Word Benchmark's "do n't" split applies to U+2019 too: "don’t" -> "do n’t", "they’re" -> "they ’re"."""
    tokenizer = ElmoTokenizer()
    assert tokenizer.tokenize("I don’t know") == ["I", "do", "n’t", "know"]
    assert tokenizer.tokenize("I DON’T know") == ["I", "DO", "N’T", "know"]
    assert tokenizer.tokenize("they’re here, it’s John’s") == ["they", "’re", "here", ",", "it", "’s", "John", "’s"]
    assert tokenizer.tokenize("don't") == ["do", "n't"]


def test_a_character_vocabularys_sentence_boundaries_are_bos_then_eos_in_pretraining_batches():
    """`sentence_boundaries` is (begin, end): `<bos>`, `<eos>` with char.dic, whose spelling is the config's
    bos_char_id / eos_char_id; pretraining's word table puts the begin word at BOS_TYPE, which starts every forward
    sentence (and the end word at EOS_TYPE, which starts every backward one)."""
    from modeling.data import BOS_TYPE, EOS_TYPE, WordTable

    folder = ELMOFORMANYLANGS / "with_words"
    tokenizer = ElmoTokenizer(char_vocab_file=str(folder / "char.dic"), word_vocab_file=str(folder / "word.dic"))
    assert tokenizer.sentence_boundaries == ("<bos>", "<eos>")
    options = tokenizer.lexicon.config_options(word_input=True)
    begin, end = tokenizer.sentence_boundaries
    assert tokenizer.word_to_char_ids(begin)[1] == options["bos_char_id"]
    assert tokenizer.word_to_char_ids(end)[1] == options["eos_char_id"]
    assert tokenizer.word_to_id(begin) == options["bos_word_id"] and tokenizer.word_to_id(end) == options["eos_word_id"]
    table = WordTable(tokenizer.max_characters_per_token, tokenizer)
    assert table.char_ids[BOS_TYPE].tolist() == tokenizer.word_to_char_ids("<bos>")
    assert table.char_ids[EOS_TYPE].tolist() == tokenizer.word_to_char_ids("<eos>")
    inputs = table.model_inputs(np.array([[BOS_TYPE, EOS_TYPE]]))
    assert inputs["input_word_ids"].tolist() == [[options["bos_word_id"], options["eos_word_id"]]]
    # the byte alphabet's: <S>, </S>
    assert ElmoTokenizer().sentence_boundaries == ("<S>", "</S>")


def test_a_word_dic_without_bos_and_eos_gives_them_the_oov_id_as_the_package_does(tmp_path):
    """The package asserts only <oov> and <pad> in word.dic; <bos> and <eos> missing fall back to <oov>'s id."""
    from hf_elmo.lexicon import ElmoLexicon, read_dictionary

    chars = read_dictionary(ELMOFORMANYLANGS / "with_words" / "char.dic")
    words = {"<pad>": 0, "天气": 1, "<oov>": 2, "好": 3}
    lexicon = ElmoLexicon(chars, words, 50)
    assert (lexicon.bos_word_id, lexicon.eos_word_id) == (2, 2)
    assert lexicon.config_options(word_input=True)["bos_word_id"] == 2


def test_a_lexicon_built_with_min_count_keeps_the_words_seen_exactly_that_often():
    """`--alphabet vocabulary --min-count N`: word.dic holds the words seen at least N times (N times included)."""
    from hf_elmo.lexicon import ElmoLexicon

    counts = {"zeta": 6, "beta": 12, "alpha": 3, "delta": 3, "gamma": 2}
    lexicon = ElmoLexicon.build(counts, 50, with_words=True, min_count=3)
    assert sorted(lexicon.words, key=lexicon.words.get) == ["<oov>", "<bos>", "<eos>", "<pad>", "beta", "zeta",
                                                            "alpha", "delta"]
    lexicon = ElmoLexicon.build(counts, 50, with_words=True, min_count=6)
    assert [w for w in sorted(lexicon.words, key=lexicon.words.get)][4:] == ["beta", "zeta"]


def test_a_byte_order_mark_at_the_start_of_raw_text_is_not_part_of_its_first_word():
    """The class docstring: a byte-order mark (U+FEFF) at the start of raw text is not part of its first word; the
    spans still point into the text given (the mark is character 0)."""
    tokenizer = ElmoTokenizer()
    text = "\ufeffHello world"
    encoding = tokenizer(text, return_offsets_mapping=True)
    assert tokenizer.tokenize(text) == ["Hello", "world"]
    assert encoding["input_ids"] == tokenizer("Hello world")["input_ids"]
    assert encoding["offset_mapping"] == [(1, 6), (7, 12)]


def test_a_keyword_meant_for_a_setting_is_named_in_a_warning(tmp_path, caplog):
    """transformers keeps a keyword that no tokenizer reads in init_kwargs, so `max_chars_per_token=60` would leave
    words at 50 characters without a word: a keyword that looks meant for one of the four settings is named in a
    warning with it, made directly or through from_pretrained; transformers' own keywords and saved folders load
    without one."""
    def warnings() -> list[str]:
        found = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
        caplog.clear()
        return found

    folder = ELMOFORMANYLANGS / "with_words"
    words = str(folder / "word.dic")
    tokenizer = ElmoTokenizer(max_chars_per_token=60, vocab_file=words)
    assert warnings() == [
        "ElmoTokenizer has no setting 'max_chars_per_token' (kept in init_kwargs, but never used): did you mean "
        "'max_characters_per_token'?",
        "ElmoTokenizer has no setting 'vocab_file' (kept in init_kwargs, but never used): did you mean "
        "'word_vocab_file' or 'char_vocab_file'?",
    ]
    assert tokenizer.max_characters_per_token == 50 and tokenizer.lexicon is None  # (nothing else changes)

    made = ElmoTokenizer(char_vocab_file=str(folder / "char.dic"), word_vocab_file=words, max_characters_per_token=20,
                         model_max_length=64, padding_side="left", split_special_tokens=True)
    made.save_pretrained(tmp_path)
    loaded = ElmoTokenizer.from_pretrained(tmp_path, padding_side="right")
    ElmoTokenizer.from_pretrained(hf_elmo.__path__[0] + "/default-model")
    assert warnings() == []
    assert (loaded.max_characters_per_token, loaded.lexicon.words is not None) == (20, True)

    ElmoTokenizer.from_pretrained(tmp_path, alphabets="vocabulary")
    assert warnings() == ["ElmoTokenizer has no setting 'alphabets' (kept in init_kwargs, but never used): did you mean "
                          "'alphabet'?"]
