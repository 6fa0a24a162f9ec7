"""What a careless or demanding user gives the model and the tokenizer: one clear error for what cannot be read, and
transformers' tokenizer API where it means something for ELMo."""

import re

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from hf_elmo import ElmoConfig, ElmoForPreTraining, ElmoForSequenceClassification, ElmoForTokenClassification
from hf_elmo import ElmoModel, ElmoTokenizer
from hf_elmo import modeling_elmo
from hf_elmo.modeling_elmo import _check_character_ids, _check_class_ids, _word_mask
from hf_elmo.tokenization_elmo import word_to_char_ids

aten = torch.ops.aten

MODEL_CLASSES = (ElmoModel, ElmoForSequenceClassification, ElmoForTokenClassification, ElmoForPreTraining)
TINY = dict(char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 4]], num_highway_layers=1, cell_size=16,
            projection_dim=8, num_labels=3, lm_vocab_size=10)
WORD_INPUT = dict(TINY, word_vocab_size=20, word_embedding_dim=4, bos_word_id=1, eos_word_id=2)


@pytest.fixture(scope="module")
def tokenizer():
    return ElmoTokenizer()


@pytest.mark.parametrize("model_class", MODEL_CLASSES)
def test_character_ids_outside_the_alphabet_or_not_integers_are_refused(model_class, tokenizer):
    model = model_class(ElmoConfig(**TINY)).eval()
    ids = tokenizer(["a big word"], return_tensors="pt")["input_ids"]
    for value in (262, 300, -1):
        with pytest.raises(ValueError, match=rf"input_ids holds {value}, outside the character alphabet \[0, 262\)"):
            model(input_ids=ids.masked_fill(ids == 98, value))
    for dtype in (torch.float32, torch.bool):
        with pytest.raises(ValueError, match=rf"input_ids must hold integer character ids .*got {dtype}"):
            model(input_ids=ids.to(dtype))
    with pytest.raises(ValueError, match=r"input_ids must be \[batch, words, 50\] character ids, got \[1, 3\]"):
        model(input_ids=ids[..., 0])
    assert model(input_ids=ids.int())[0].shape[0] == 1  # int32 ids are read as well
    if model_class is ElmoForPreTraining:
        with pytest.raises(ValueError, match=r"backward_input_ids holds 300"):
            model(input_ids=ids, backward_input_ids=ids.masked_fill(ids == 98, 300))


@pytest.mark.parametrize("model_class", MODEL_CLASSES)
def test_an_embedding_set_in_another_shape_is_named_at_the_next_forward(model_class, tokenizer):
    """set_input_embeddings takes any module (transformers' common tests set a 10 x 10 one); an embedding of another
    width or fewer rows than the config's failed deep inside torch at the next forward ("cannot reshape tensor of 0
    elements", "index out of range in self"), in eval mode and in training. Named, with both shapes; the same
    shape runs."""
    from torch import nn

    ids = tokenizer(["a big word"], return_tensors="pt")["input_ids"]
    labels = {ElmoModel: {}, ElmoForSequenceClassification: {"labels": torch.tensor([1])},
              ElmoForTokenClassification: {"labels": torch.tensor([[1, 0, 2]])},
              ElmoForPreTraining: {"labels": torch.tensor([[1, 2, 3]]), "backward_labels": torch.tensor([[3, 2, 1]])}}
    for embedding in (nn.Embedding(262, 8), nn.Embedding(100, 4)):
        model = model_class(ElmoConfig(**TINY))
        model.set_input_embeddings(embedding)
        for training in (False, True):
            model.train(training)
            shape = list(embedding.weight.shape)
            with pytest.raises(ValueError, match=rf"^the model's char_embedding has a weight of shape {re.escape(str(shape))}, "
                                                 r"where its config needs \[262, 4\]: set_input_embeddings was given one"):
                model(input_ids=ids, **labels[model_class])
    model.set_input_embeddings(nn.Embedding(262, 4))
    assert model(input_ids=ids, **labels[model_class])[0] is not None


@pytest.mark.parametrize("name", ["with_words", "chars_only"])
def test_character_ids_outside_a_character_vocabulary_are_refused(converted_elmoformanylangs, name):
    """README: ids outside the alphabet of char.dic (an ELMoForManyLangs model: 61 characters and the padding id 0)
    are refused, one line naming the value; 261, a byte alphabet's id, is one of them. Its last id is read."""
    folder = converted_elmoformanylangs[name]
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    batch = dict(tokenizer([["天气", "不错"]], is_split_into_words=True, return_tensors="pt"))
    for model in (ElmoModel.from_pretrained(folder).eval(), ElmoForTokenClassification.from_pretrained(folder).eval()):
        alphabet = model.config.n_characters
        assert alphabet == 62 and int(batch["input_ids"].max()) < alphabet
        ids = batch["input_ids"]
        for value in (alphabet, 261, -1):
            message = rf"^input_ids holds {value}, outside the character alphabet \[0, 62\)"
            with pytest.raises(ValueError, match=message):
                model(**{**batch, "input_ids": ids.masked_fill(ids == ids[0, 0, 1], value)})
        with torch.no_grad():
            model(**{**batch, "input_ids": ids.masked_fill(ids == ids[0, 0, 1], alphabet - 1)})


@pytest.mark.parametrize("head", [ElmoForSequenceClassification, ElmoForTokenClassification])
def test_the_heads_refuse_keyword_arguments_they_do_not_read(head, tokenizer):
    """A head took **kwargs and read only Trainer's num_items_in_batch: `initial_states` (which only the biLM takes)
    or a misspelt argument was silently ignored. Now one error names them; what Trainer and transformers pass
    (num_items_in_batch, return_dict) is still read."""
    model = head(ElmoConfig(**TINY)).eval()
    batch = tokenizer(["a big word", "a"], padding=True, return_tensors="pt")
    with torch.no_grad():
        states = model.elmo(**batch).final_states
    name = head.__name__
    with pytest.raises(ValueError, match=rf"^{name} got unexpected keyword argument\(s\) 'initial_states' \(a head "
                                         r"starts every batch from the zero state; to carry the LSTM state, run"):
        model(**batch, initial_states=states)
    with pytest.raises(ValueError, match=rf"^{name} got unexpected keyword argument\(s\) 'atention_mask', 'lable': it "
                                         "takes input_ids, attention_mask, labels"):
        model(input_ids=batch["input_ids"], atention_mask=batch["attention_mask"], lable=torch.tensor([0, 1]))
    if head is ElmoForSequenceClassification:
        labels, counted = torch.tensor([0, 2]), 2
    else:
        labels, counted = torch.tensor([[0, 2, 1], [1, -100, -100]]), 4
    with torch.no_grad():
        loss, logits = model(**batch, labels=labels, num_items_in_batch=torch.tensor(2 * counted), return_dict=False)
        mean = model(**batch, labels=labels).loss
    assert torch.allclose(loss * 2, mean) and logits.shape[0] == 2  # (num_items_in_batch divides the summed loss)


@pytest.mark.parametrize("model_class", [ElmoModel, ElmoForPreTraining])
def test_the_bilm_refuses_keyword_arguments_it_does_not_read(model_class, tokenizer):
    """A misspelt `initial_state` would silently start from zeros on the very model that carries state: refused,
    naming it. `output_hidden_states`, which transformers passes, is read by ElmoForPreTraining and accepted by
    ElmoModel (which returns every layer anyway)."""
    model = model_class(ElmoConfig(**TINY)).eval()
    batch = tokenizer(["a big word", "a"], padding=True, return_tensors="pt")
    with torch.no_grad():
        states = ElmoModel(ElmoConfig(**TINY)).eval()(**batch).final_states
        with pytest.raises(ValueError, match=rf"^{model_class.__name__} got unexpected keyword argument\(s\) "
                                             r"'initial_state': it takes input_ids, attention_mask, .*initial_states"):
            model(**batch, initial_state=states)
        output = model(**batch, output_hidden_states=True)
    assert len(output.hidden_states) == 3


@pytest.mark.parametrize("model_class", MODEL_CLASSES)
def test_an_attention_mask_that_reads_padding_is_refused(model_class, tokenizer):
    """All ones over a padded batch (a common habit) would run the padding as words and change the real words'
    vectors: refused, naming where; a mask that is not a tensor of the batch's shape is refused too."""
    model = model_class(ElmoConfig(**TINY)).eval()
    batch = tokenizer(["a big word", "a"], padding=True, return_tensors="pt")
    with pytest.raises(ValueError, match=r"^attention_mask is 1 at row 1, position 1, an all-zero \(padding\) word"):
        model(input_ids=batch["input_ids"], attention_mask=torch.ones_like(batch["attention_mask"]))
    with pytest.raises(ValueError, match=r"^attention_mask must be \[2, 3\], got list$"):
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"].tolist())
    if model_class is ElmoForPreTraining:  # its labels are read as the heads' are: integer ids
        labels = torch.zeros(2, 3, dtype=torch.long)
        with pytest.raises(ValueError, match=r"^labels must hold integer class ids .*got torch.float32$"):
            model(**batch, labels=labels.float(), backward_labels=labels)


@pytest.mark.parametrize("model_class", MODEL_CLASSES)
def test_an_attention_mask_of_values_other_than_0_and_1_is_refused(model_class, tokenizer):
    """A mask holding 2, 0.5, -1 or NaN was read as 1 (a word) wherever it was not 0: refused, naming attention_mask
    and the values. Masks of 0 and 1 as bools, integers or floats (transformers' forms) are read as the tokenizer's."""
    model = model_class(ElmoConfig(**TINY)).eval()
    batch = tokenizer(["a big word", "a"], padding=True, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    with torch.no_grad():
        expected = model(**batch)[0]
        for same in (mask.bool(), mask.int(), mask.to(torch.uint8), mask.float(), mask.double()):
            assert torch.equal(model(input_ids=ids, attention_mask=same)[0], expected), same.dtype
    nan = mask.float().masked_fill(mask == 0, float("nan"))
    for bad, shown in ((mask * 2, "2"), (mask * 0.5, "0.5"), (mask - 1, "-1"), (nan, "nan"), (mask * 3 - 1, "-1, 2")):
        with pytest.raises(ValueError, match=rf"^attention_mask must hold only 0 \(padding\) and 1 \(a word\), got "
                                             rf"{shown} \({bad.dtype}\)$"):
            model(input_ids=ids, attention_mask=bad)


@pytest.mark.parametrize("model_class", MODEL_CLASSES)
def test_a_batch_of_no_sentences_gives_empty_outputs(model_class, tokenizer):
    config = ElmoConfig(**TINY)
    model = model_class(config).eval()
    batch = tokenizer([], padding=True, return_tensors="pt")
    assert batch["input_ids"].shape == (0, 0, 50) and batch["attention_mask"].shape == (0, 0)
    words = torch.zeros(0, 4, 50, dtype=torch.long)  # and with a word axis, as a collator pads
    for inputs in (dict(batch), {"input_ids": words}):
        length = inputs["input_ids"].shape[1]
        with torch.no_grad():
            output = model(**inputs, output_hidden_states=True)
        if model_class is ElmoForSequenceClassification:
            assert output.logits.shape == (0, 3)
        elif model_class is ElmoForTokenClassification:
            assert output.logits.shape == (0, length, 3)
        else:
            assert output.last_hidden_state.shape == (0, length, 16)
            assert [tuple(h.shape) for h in output.hidden_states] == [(0, length, 16)] * 3
            assert output.final_states[0].shape == (2, 0, 16) and output.final_states[1].shape == (2, 0, 32)
    if model_class is ElmoForTokenClassification:  # training on an empty batch: a zero loss, not an error
        loss = model.train()(input_ids=words, labels=torch.zeros(0, 4, dtype=torch.long)).loss
        assert loss.item() == 0.0


def test_pretraining_rows_without_words_run_as_the_plain_path_does():
    """ElmoForPreTraining's rows need not start with a word: sentences of no words, alone ([2, 0, 50]: an IndexError
    on the fast path) or beside others (the approximations' packed loops refused an empty row), give the plain
    path's outputs."""
    torch.manual_seed(0)
    model = ElmoForPreTraining(ElmoConfig(**TINY)).eval()
    tokenizer = ElmoTokenizer()
    for sentences in ([[], []], [["a", "b"], []]):
        batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
        with torch.no_grad():
            model.elmo.set_fast_path(False)
            expected = model(**batch, output_hidden_states=True)
            model.elmo.set_fast_path(True)
            for approximation in (None, "nn_lstm", "int8"):
                model.elmo.set_lstm_approximation(approximation)
                found = model(**batch, output_hidden_states=True)
                for a, b in zip(found.hidden_states, expected.hidden_states):
                    assert a.shape == b.shape and torch.allclose(a, b, atol=1e-6 if approximation is None else 0.1)
            model.elmo.set_lstm_approximation(None)


def test_the_backward_text_of_pretraining_is_checked_against_the_forward_one(tokenizer):
    """backward_input_ids must have the shape of input_ids and its padding; a model with word input needs the backward
    text's word ids with it; word ids of a backward text that is not given are refused, not ignored."""
    batch = tokenizer(["a big word", "a"], padding=True, return_tensors="pt")
    ids, word_ids = batch["input_ids"], torch.tensor([[4, 5, 6], [7, 0, 0]])
    chars_only = ElmoForPreTraining(ElmoConfig(**TINY)).eval()
    words = ElmoForPreTraining(ElmoConfig(**WORD_INPUT)).eval()
    with pytest.raises(ValueError, match=r"^backward_input_ids must have the shape of input_ids \[2, 3, 50\], got "
                                         r"\[2, 2, 50\]$"):
        chars_only(input_ids=ids, backward_input_ids=ids[:, :2])
    padding_among_words = ids.clone()
    padding_among_words[0, 1] = 0  # (the same word of input_ids is refused: "reading padding")
    for backward in (padding_among_words, ids.flip(1)):  # (flipped: the second row's padding at its start)
        with pytest.raises(ValueError, match=r"^backward_input_ids must have its words where input_ids has words, and "
                                             r"padding \(all-zero words\) where it has padding$"):
            chars_only(input_ids=ids, backward_input_ids=backward)
    without_backward_text = r"^backward_input_word_ids are the word ids of backward_input_ids: pass both, or neither$"
    with pytest.raises(ValueError, match=without_backward_text):
        chars_only(input_ids=ids, backward_input_word_ids=word_ids)
    with pytest.raises(ValueError, match=without_backward_text):
        words(input_ids=ids, input_word_ids=word_ids, backward_input_word_ids=word_ids)
    with pytest.raises(ValueError, match=r"^this model reads each word's id in word.dic as well as its characters: "
                                         r"pass backward_input_word_ids \[batch, words\]"):
        words(input_ids=ids, input_word_ids=word_ids, backward_input_ids=ids)
    with torch.no_grad():
        words(input_ids=ids, input_word_ids=word_ids, backward_input_ids=ids, backward_input_word_ids=word_ids)


# Where ids can be put that the model is not on: the meta device (which holds no numbers) and, where this machine has
# one, the other of CPU and CUDA.
OTHER_DEVICES = [("cpu", "meta")] + ([("cpu", "cuda:0"), ("cuda:0", "cpu")] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("model_class", MODEL_CLASSES)
@pytest.mark.parametrize("model_device, ids_device", OTHER_DEVICES)
def test_ids_on_another_device_than_the_model_are_refused_naming_both(model_class, model_device, ids_device,
                                                                      tokenizer):
    """Character ids (and word ids, and pretraining's backward text) on another device gave a raw torch error (from
    reading their range back, `.item()` of a meta tensor, or deep in the embedding): one error naming the ids and
    both devices, before anything reads them. The attention mask alone may be elsewhere: it is moved to the ids."""
    batch = tokenizer(["a big word", "a"], padding=True, return_tensors="pt")
    model = model_class(ElmoConfig(**TINY)).to(model_device).eval()
    ids, mask = batch["input_ids"].to(model_device), batch["attention_mask"]
    message = rf"^{{}} is on {ids_device}, the model on {model_device}: move the batch there \(`batch.to\(model.device\)`\)$"
    with pytest.raises(ValueError, match=message.format("input_ids")):
        model(input_ids=ids.to(ids_device), attention_mask=mask)
    if model_class is ElmoForPreTraining:
        with pytest.raises(ValueError, match=message.format("backward_input_ids")):
            model(input_ids=ids, backward_input_ids=ids.to(ids_device))
    words = model_class(ElmoConfig(**WORD_INPUT)).to(model_device).eval()
    word_ids = torch.tensor([[4, 5, 6], [7, 0, 0]], device=model_device)
    with pytest.raises(ValueError, match=message.format("input_word_ids")):
        words(input_ids=ids, input_word_ids=word_ids.to(ids_device))
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask.to(model_device))
        if ids_device != "meta":
            model(input_ids=ids, attention_mask=mask.to(ids_device))


class HostReads(TorchDispatchMode):
    """The operations run inside the block that make the host wait for the device on a GPU: a tensor read as a
    Python value (`bool()`, `.item()`), and those whose result's size depends on the values (nonzero, boolean
    indexing)."""

    WAITS = (aten._local_scalar_dense.default, aten.nonzero.default, aten.masked_select.default, aten.equal.default)

    def __init__(self):
        super().__init__()
        self.reads = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        boolean_index = func is aten.index.Tensor and any(i is not None and i.dtype == torch.bool for i in args[1])
        if func in self.WAITS or boolean_index:
            self.reads.append(str(func))
        return func(*args, **(kwargs or {}))


def test_each_input_check_reads_the_device_once(tokenizer):
    """Every forward checks its inputs, and on a GPU each read of a result by the host waits for the device: a check
    of a valid input reads one boolean (no nonzero, no boolean indexing), and looks for where a value is wrong only
    to name it in the error."""
    config = ElmoConfig(**TINY)
    batch = tokenizer(["a big word", "a"], padding=True, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    padding = mask == 0  # row 1, positions 1 and 2
    labels = torch.tensor([[0, 2, 1], [1, 7, -5]])  # (the padding's labels are not read)
    words = ElmoModel(ElmoConfig(**WORD_INPUT))
    word_ids = torch.tensor([[4, 19, 3], [2, 25, -1]])
    classifier = ElmoForSequenceClassification(ElmoConfig(**TINY, problem_type="multi_label_classification"))
    logits, multi_labels = torch.zeros(2, 3), torch.tensor([[0.0, 1.0, 0.5], [1.0, 0.0, 0.0]])
    for name, check in [
        ("character ids", lambda: _check_character_ids(ids, config)),
        ("attention mask", lambda: _word_mask(ids, mask)),
        ("right-padded attention mask", lambda: _word_mask(ids, mask, right_padded=True)),
        ("float attention mask", lambda: _word_mask(ids, mask.float())),
        ("multi-label labels", lambda: classifier._summed_loss(logits, multi_labels)),
        ("token labels", lambda: _check_class_ids(labels, (2, 3), 3, padding=padding)),
        ("labels without padding", lambda: _check_class_ids(labels.masked_fill(padding, -100), (2, 3), 3)),
        ("token labels under Trainer", lambda: _check_class_ids(labels.masked_fill(padding, -100), (2, 3), 3,
                                                                padding=padding, padding_counted=True)),
        ("word ids", lambda: words._check_word_ids(word_ids, ~padding, "input_word_ids")),
    ]:
        with HostReads() as host:
            check()
        assert host.reads == ["aten._local_scalar_dense.default"], name
    # Wrong values are still found, the first one (in reading order) named, wherever padding is.
    with pytest.raises(ValueError, match=r"^labels holds 5, outside the label ids \[0, 3\)"):
        _check_class_ids(torch.tensor([[0, 5, 1], [9, 7, -5]]), (2, 3), 3, padding=padding)
    with pytest.raises(ValueError, match=r"^labels holds 7, outside the label ids \[0, 3\)"):
        _check_class_ids(labels, (2, 3), 3)
    with pytest.raises(ValueError, match=r"^input_word_ids holds ids outside word.dic \[0, 20\)"):
        words._check_word_ids(word_ids.masked_fill(word_ids == 19, 20), ~padding, "input_word_ids")
    with pytest.raises(ValueError, match=r"^attention_mask is 1 at row 1, position 2, an all-zero"):
        _word_mask(ids, mask.masked_fill(torch.tensor([[False, False, False], [False, False, True]]), 1))


def test_convert_tokens_to_ids_gives_what_encode_gives(tokenizer):
    text = "Hello world, it's me!"
    assert tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text)) == tokenizer.encode(text)
    assert tokenizer.convert_tokens_to_ids("Hello") == word_to_char_ids("Hello")
    assert [tokenizer.convert_tokens_to_ids(name) for name in ("<pad>", "<0x41>", "<S>", "<char_pad>")] == [0, 66, 257, 261]
    assert tokenizer.convert_ids_to_tokens(66) == "<0x41>"
    with pytest.raises(IndexError, match="300 is neither a character id"):
        tokenizer.convert_ids_to_tokens(300)


def test_added_tokens_are_kept_whole_and_spelled(tmp_path):
    tokenizer = ElmoTokenizer()
    assert tokenizer.tokenize("I don't know") == ["I", "do", "n't", "know"]
    assert tokenizer.add_tokens(["don't"]) == 1
    assert tokenizer.add_special_tokens({"additional_special_tokens": ["[SEP]"]}) == 1
    text = "I don't know [SEP] ok"
    assert tokenizer.tokenize(text) == ["I", "don't", "know", "[SEP]", "ok"]
    encoding = tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
    assert encoding["input_ids"][1] == word_to_char_ids("don't")  # spelled: no id outside the alphabet
    assert [text[start:end] for start, end in encoding["offset_mapping"]] == tokenizer.tokenize(text)
    assert encoding["special_tokens_mask"] == [0, 0, 0, 1, 0]
    assert tokenizer.decode(encoding["input_ids"]) == "I don't know [SEP] ok"
    assert tokenizer.decode(encoding["input_ids"], skip_special_tokens=True) == "I don't know ok"
    assert len(tokenizer) == 264 and tokenizer.convert_ids_to_tokens(262) == "don't"
    tokenizer.save_pretrained(tmp_path)
    reloaded = ElmoTokenizer.from_pretrained(tmp_path)
    assert reloaded(text, return_special_tokens_mask=True) == tokenizer(text, return_special_tokens_mask=True)
    model = ElmoModel(ElmoConfig(**TINY)).eval()
    assert model(**tokenizer([text], return_tensors="pt")).last_hidden_state.shape == (1, 5, 16)


def test_token_type_ids_are_all_zero(tokenizer):
    batch = tokenizer(["a b c", "d"], padding=True, return_token_type_ids=True)
    assert batch["token_type_ids"] == [[0, 0, 0], [0, 0, 0]]
    assert "token_type_ids" not in tokenizer("a b")


def test_the_padding_word_can_have_another_name(tmp_path):
    tokenizer = ElmoTokenizer(pad_token="[PAD]")
    assert tokenizer.pad_token == "[PAD]" and tokenizer.pad_token_id == 0
    assert tokenizer(["a b", "c"], padding=True)["input_ids"][1][1] == [0] * 50
    tokenizer.save_pretrained(tmp_path)
    assert ElmoTokenizer.from_pretrained(tmp_path).pad_token == "[PAD]"
    with pytest.raises(ValueError, match="pad_token '<S>' names another character id"):
        ElmoTokenizer(pad_token="<S>")


def test_a_str_where_a_word_list_belongs_is_refused(tokenizer):
    with pytest.raises(TypeError, match="each example is a list of words; example 1 is a str \\('foo bar'\\)"):
        tokenizer([["a", "b"], "foo bar"], is_split_into_words=True)
    with pytest.raises(TypeError, match="pass a list of words"):
        tokenizer("foo bar", is_split_into_words=True)


def test_bad_lengths_are_refused(tokenizer):
    with pytest.raises(ValueError, match="max_length must be a number of words >= 0, got -1"):
        tokenizer("a b c", max_length=-1, truncation=True)
    for multiple in (0, -2):
        with pytest.raises(ValueError, match=f"pad_to_multiple_of must be a positive number of words, got {multiple}"):
            tokenizer(["a b c", "a"], padding=True, pad_to_multiple_of=multiple)
        with pytest.raises(ValueError, match="pad_to_multiple_of must be a positive number"):
            tokenizer.pad(tokenizer(["a b c", "a"]), pad_to_multiple_of=multiple)
    assert tokenizer("a b c", max_length=0, truncation=True)["input_ids"] == []


def test_a_byte_order_mark_is_not_part_of_the_first_word(tokenizer):
    text = "\ufeffHello world"
    assert tokenizer.tokenize(text) == ["Hello", "world"]
    encoding = tokenizer(text, return_offsets_mapping=True)
    assert encoding["input_ids"] == tokenizer("Hello world")["input_ids"]
    assert [text[start:end] for start, end in encoding["offset_mapping"]] == ["Hello", "world"]


def test_overflowing_words_with_a_stride(tokenizer):
    text = "one two three four five six"
    right = tokenizer(text, max_length=4, truncation=True, stride=1, return_overflowing_tokens=True)
    assert tokenizer.decode(right["input_ids"]) == "one two three four"
    assert tokenizer.decode(right["overflowing_tokens"]) == "four five six" and right["num_truncated_tokens"] == 2
    tokenizer_left = ElmoTokenizer(truncation_side="left")
    left = tokenizer_left(text, max_length=4, truncation=True, stride=1, return_overflowing_tokens=True)
    assert tokenizer.decode(left["input_ids"]) == "three four five six"
    assert tokenizer.decode(left["overflowing_tokens"]) == "one two three"
    untouched = tokenizer(text, max_length=10, truncation=True, return_overflowing_tokens=True)
    assert untouched["overflowing_tokens"] == [] and untouched["num_truncated_tokens"] == 0


def test_save_hub_folder_refuses_a_card_that_is_not_text_and_never_leaves_half_a_readme(tmp_path, monkeypatch):
    """save_hub_folder's model_card is the card's text: a Path (the README's `read_text()` forgotten), a ModelCard or
    text with a lone surrogate failed in `write()` after the weights were saved and README.md truncated, destroying
    the previous card; tags="sentiment" added the tags 's', 'e', 'n', ... Each is now refused before anything is
    written, naming it, and README.md is replaced atomically (the mode a plain open gives it)."""
    import os
    import stat

    from transformers.utils.hub import ModelCard

    model = ElmoModel(ElmoConfig(**TINY))
    folder, fresh = tmp_path / "staged", tmp_path / "fresh"
    model.save_hub_folder(folder, "someone/elmo", model_card="# first card\n")
    readme = folder / "README.md"
    for card, message in [(readme, r"got PosixPath: pass Path\(\.\.\.\)\.read_text"),
                          (ModelCard("# a card\n"), r"got ModelCard: pass str\(card\)"),
                          ("# a card \ud800\n", r"^model_card is not UTF-8 text \(surrogates not allowed at character 9\)$")]:
        for target in (folder, fresh):
            with pytest.raises(ValueError, match=message):
                model.save_hub_folder(target, "someone/elmo", model_card=card)
        assert readme.read_text(encoding="utf-8") == "# first card\n" and not fresh.exists()
    with pytest.raises(ValueError, match=r"^tags must be a list of strings, got 'sentiment': pass \['sentiment'\]$"):
        model.save_hub_folder(fresh, "someone/elmo", tags="sentiment")
    assert not fresh.exists()
    before = set(os.listdir(folder))
    model.save_hub_folder(folder, "someone/elmo", model_card="# second card\n")
    umask = os.umask(0)
    os.umask(umask)
    assert readme.read_text(encoding="utf-8") == "# second card\n" and set(os.listdir(folder)) == before
    assert stat.S_IMODE(readme.stat().st_mode) == 0o666 & ~umask
    # A write of the card that fails (as on a full disk: here, text where bytes belong) leaves the card before it.
    monkeypatch.setattr(modeling_elmo, "_card_bytes", lambda card, tags: card)
    with pytest.raises(TypeError):
        model.save_hub_folder(folder, "someone/elmo", model_card="# third card\n")
    assert readme.read_text(encoding="utf-8") == "# second card\n" and set(os.listdir(folder)) == before


@pytest.mark.parametrize("model_class", [ElmoModel, ElmoForTokenClassification])
def test_a_model_offloaded_by_accelerate_reads_a_batch_on_its_execution_device(model_class):
    """accelerate's `cpu_offload` keeps the weights on the meta device until each module runs, its hooks moving the
    ids: the device check steps aside (it compared the ids' device with meta's, refusing every batch), and the outputs
    are the model's before offloading."""
    from accelerate import cpu_offload

    torch.manual_seed(0)
    model = model_class(ElmoConfig(**TINY)).eval()
    batch = ElmoTokenizer()(["a big word", "a"], padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = model(**batch)[0]
    cpu_offload(model, execution_device=torch.device("cpu"))
    assert model.get_input_embeddings().weight.device.type == "meta"
    with torch.no_grad():
        found = model(**batch)[0]
    assert found.device.type == "cpu" and torch.allclose(found, expected, atol=1e-6)
