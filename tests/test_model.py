"""ElmoModel's outputs, scalar mix, states and input checks, on the converted fixture model."""

import json
import math
import os
import re
import subprocess

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer

from hf_elmo import (ElmoConfig, ElmoForPreTraining, ElmoForSequenceClassification, ElmoForTokenClassification,
                     ElmoModel, ElmoTokenizer)
from hf_elmo.configuration_elmo import VALUE_RULES
from hf_elmo.modeling_elmo import ElmoLmDropout, _SentenceLayout
from hf_elmo.token_cache import _OPTIMIZER_STEPS

from conftest import FIXTURES

SEEDS = [["I", "eat", "an", "apple", "."], ["Apple", "is", "a", "company", "."]]


@pytest.fixture(scope="module")
def fixture_model(converted):
    return ElmoModel.from_pretrained(converted["allennlp-elmo"]).eval(), ElmoTokenizer.from_pretrained(converted["allennlp-elmo"])


def test_outputs_have_every_layer(fixture_model):
    model, tokenizer = fixture_model
    batch = tokenizer(SEEDS, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        output = model(**batch)
    assert len(output.hidden_states) == 3
    for layer in output.hidden_states:
        assert layer.shape == (2, 5, 32)
    assert output.last_hidden_state is output.hidden_states[-1]
    assert len(output.elmo_representations) == 1 and output.elmo_representations[0].shape == (2, 5, 32)
    assert output.final_states[0].shape == (2, 2, 32) and output.final_states[1].shape == (2, 2, 128)
    # Fresh scalar mix = plain average of the layers.
    average = sum(output.hidden_states) / 3
    assert torch.allclose(output.elmo_representations[0], average, atol=1e-6)
    # The same word gets the same context-free vector whatever the sentence, and contextual ones that differ.
    with torch.no_grad():
        alone = model(**tokenizer([["apple"]], is_split_into_words=True, return_tensors="pt"))
    assert torch.allclose(output.hidden_states[0][0, 3], alone.hidden_states[0][0, 0], atol=1e-6)
    assert not torch.allclose(output.hidden_states[2][0, 3], alone.hidden_states[2][0, 0], atol=1e-2)


def test_tuple_output_and_auto_classes(converted):
    config = AutoConfig.from_pretrained(converted["allennlp-elmo"])
    assert type(config) is ElmoConfig
    model = AutoModel.from_pretrained(converted["allennlp-elmo"]).eval()
    tokenizer = AutoTokenizer.from_pretrained(converted["allennlp-elmo"])
    assert type(model) is ElmoModel and type(tokenizer) is ElmoTokenizer
    batch = tokenizer(SEEDS, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        as_tuple = model(**batch, return_dict=False)
        as_output = model(**batch)
    assert torch.equal(as_tuple[0], as_output.last_hidden_state)


def test_learned_scalar_mix(converted):
    model = ElmoModel.from_pretrained(converted["allennlp-elmo"], num_output_representations=2).eval()
    tokenizer = ElmoTokenizer.from_pretrained(converted["allennlp-elmo"])
    with torch.no_grad():
        model.scalar_mixes[1].scalar_parameters.copy_(torch.tensor([0.1, 0.3, 0.5]))
        model.scalar_mixes[1].gamma.fill_(1.1)
        output = model(**tokenizer(SEEDS + [["short"]], is_split_into_words=True, padding=True, return_tensors="pt"))
    weights = torch.softmax(torch.tensor([0.1, 0.3, 0.5]), 0)
    expected = 1.1 * sum(w * layer for w, layer in zip(weights, output.hidden_states))
    assert torch.allclose(output.elmo_representations[1], expected, atol=1e-6)
    assert torch.allclose(output.elmo_representations[0], sum(output.hidden_states) / 3, atol=1e-6)
    assert torch.all(output.elmo_representations[1][2, 1:] == 0)


def test_layer_norm_uses_batch_statistics_with_sentence_boundaries(converted):
    """AllenNLP's layer norm: one mean and variance over every real position of the batch, <S>/</S> included."""
    model = ElmoModel.from_pretrained(converted["allennlp-elmo"], do_layer_norm=True).eval()
    tokenizer = ElmoTokenizer.from_pretrained(converted["allennlp-elmo"])
    with torch.no_grad():
        model.scalar_mixes[0].scalar_parameters.copy_(torch.tensor([-1e4, -1e4, 0.0]))  # the top layer alone
        output = model(**tokenizer([SEEDS[0]], is_split_into_words=True, return_tensors="pt"))
    top, normalised = output.hidden_states[2][0].flatten(), output.elmo_representations[0][0].flatten()
    # normalised = (top - mean) / std for one scalar mean and std: solve for them by least squares.
    solution = torch.linalg.lstsq(torch.stack([normalised, torch.ones_like(normalised)], 1), top[:, None]).solution
    std, mean = solution[:, 0].tolist()
    assert torch.allclose(normalised * std + mean, top, atol=1e-5)
    # Statistics over the words alone would differ: the boundaries took part.
    assert abs(std - top.std(unbiased=False).item()) > 1e-3 or abs(mean - top.mean().item()) > 1e-3


def test_layer_norm_statistics_are_the_whole_batchs_without_its_padding(converted):
    """Two sentences of different lengths: one mean and variance for both (per-sentence statistics fit no single
    pair), and the padding takes no part (more of it changes nothing)."""
    model = ElmoModel.from_pretrained(converted["allennlp-elmo"], do_layer_norm=True).eval()
    tokenizer = ElmoTokenizer.from_pretrained(converted["allennlp-elmo"])
    sentences = [SEEDS[0] + SEEDS[1], SEEDS[1][:2]]  # 10 and 2 words
    with torch.no_grad():
        model.scalar_mixes[0].scalar_parameters.copy_(torch.tensor([-1e4, -1e4, 0.0]))  # the top layer alone
        output = model(**tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt"))
        padded = model(**tokenizer(sentences, is_split_into_words=True, padding="max_length", max_length=30,
                                   return_tensors="pt"))
    assert torch.allclose(padded.elmo_representations[0][:, :10], output.elmo_representations[0], atol=1e-6)
    top = torch.cat([output.hidden_states[2][0].flatten(), output.hidden_states[2][1, :2].flatten()])
    normalised = torch.cat([output.elmo_representations[0][0].flatten(), output.elmo_representations[0][1, :2].flatten()])
    solution = torch.linalg.lstsq(torch.stack([normalised, torch.ones_like(normalised)], 1), top[:, None]).solution
    std, mean = solution[:, 0].tolist()
    assert torch.allclose(normalised * std + mean, top, atol=1e-5)


def test_dropout_only_in_training(converted):
    model = ElmoModel.from_pretrained(converted["allennlp-elmo"], dropout=0.5)
    tokenizer = ElmoTokenizer.from_pretrained(converted["allennlp-elmo"])
    batch = tokenizer(SEEDS, is_split_into_words=True, padding=True, return_tensors="pt")
    model.eval()
    with torch.no_grad():
        first, second = model(**batch), model(**batch)
    assert torch.equal(first.elmo_representations[0], second.elmo_representations[0])
    model.train()
    with torch.no_grad():
        dropped = model(**batch)
    assert torch.equal(dropped.hidden_states[2], first.hidden_states[2])  # the layers themselves are not dropped
    zeroed = (dropped.elmo_representations[0] == 0) & (first.elmo_representations[0] != 0)
    assert 0.3 < zeroed.float().mean().item() < 0.7


def test_empty_and_blank_inputs(fixture_model):
    model, tokenizer = fixture_model
    batch = tokenizer([[]], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        output = model(**batch)
    assert batch["input_ids"].shape == (1, 0, 50)
    assert all(layer.shape == (1, 0, 32) for layer in output.hidden_states)
    assert output.final_states[0].shape == (2, 1, 32)
    # An empty row inside a batch is run as "<S> </S>", and gives zeros at every padded position.
    batch = tokenizer([[], ["hello", "world"]], is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        output = model(**batch)
    assert torch.all(output.last_hidden_state[0] == 0)
    assert torch.any(output.final_states[0][:, 0] != 0)


def test_gradients_reach_every_parameter(fixture_model):
    model, tokenizer = fixture_model
    model = ElmoModel(model.config)
    batch = tokenizer(SEEDS, is_split_into_words=True, padding=True, return_tensors="pt")
    output = model(**batch)
    output.elmo_representations[0].sum().backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    # Row 0 of the character embedding is the padding row, never used for a real character.
    assert missing == []
    assert torch.all(model.char_encoder.char_embedding.weight.grad[0] == 0)


def test_bad_inputs_name_the_problem(fixture_model):
    model, tokenizer = fixture_model
    with pytest.raises(ValueError, match=r"input_ids must be \[batch, words, 50\].*\[2, 5\]"):
        model(torch.zeros(2, 5, dtype=torch.long))
    batch = tokenizer(SEEDS, is_split_into_words=True, padding=True, return_tensors="pt")
    with pytest.raises(ValueError, match=r"attention_mask must be \[2, 5\]"):
        model(batch["input_ids"], attention_mask=torch.ones(2, 4))
    h, c = torch.zeros(2, 3, 32), torch.zeros(2, 2, 128)
    with pytest.raises(ValueError, match=r"initial_states h must be \[2, 2, 32\].*\[2, 3, 32\]"):
        model(**batch, initial_states=(h, c))


def test_initial_states_that_are_not_two_tensors_are_refused_naming_them(fixture_model):
    """initial_states is (h, c): one state alone, an extra one, a stacked tensor, lists, or the whole previous output
    are refused in one line naming initial_states and what it must be, not by a bare unpacking error or an
    AttributeError (`'list' object has no attribute 'shape'`); ElmoForPreTraining reads it the same way."""
    model, tokenizer = fixture_model
    batch = tokenizer(SEEDS, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        output = model(**batch)
    h, c = output.final_states
    expected = r"^initial_states must be \(h \[2, 2, 32\], c \[2, 2, 128\]\), two tensors .*got "
    for states, got in [((h,), r"1 values \(\[2, 2, 32\]\)$"), ((h, c, c), "3 values"),
                        (torch.stack([h, h]), r"\[2, 2, 2, 32\]$"), ((h.tolist(), c.tolist()), r"2 values \(list, list\)$"),
                        (output, "ElmoModelOutput$")]:
        with pytest.raises(ValueError, match=expected + got):
            model(**batch, initial_states=states)
    with torch.no_grad():  # a list of the two tensors is read as the tuple
        assert torch.equal(model(**batch, initial_states=[h, c]).last_hidden_state,
                           model(**batch, initial_states=(h, c)).last_hidden_state)
    config = ElmoConfig(char_embedding_dim=4, char_cnn_filters=[[1, 4]], num_highway_layers=0, cell_size=16,
                        projection_dim=8, num_lstm_layers=1, lm_vocab_size=10)
    with pytest.raises(ValueError, match=r"^initial_states must be \(h \[1, 2, 16\], c \[1, 2, 32\]\).*1 values"):
        ElmoForPreTraining(config)(batch["input_ids"], initial_states=(torch.zeros(1, 2, 16),))


def test_initial_states_on_another_device_or_not_floating_point_are_refused(fixture_model):
    """initial_states on another device than the model (here the meta device; a GPU state given to a CPU model is the
    same) gave a deep torch error, and integer states were cast silently: both are refused in one line naming them,
    as transformers refuses a cache on another device rather than moving it. A floating-point state of another dtype
    (float64 for a float32 model) is read in the model's dtype, as the same values."""
    model, tokenizer = fixture_model
    batch = tokenizer(SEEDS, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        h, c = model(**batch).final_states
        carried = model(**batch, initial_states=(h, c)).last_hidden_state
        assert torch.equal(model(**batch, initial_states=(h.double(), c.double())).last_hidden_state, carried)
    with pytest.raises(ValueError, match=r"^initial_states h is on meta, the model on cpu: move it there "):
        model(**batch, initial_states=(h.to("meta"), c))
    with pytest.raises(ValueError, match=r"^initial_states c must be floating-point .*got torch.int64$"):
        model(**batch, initial_states=(h, c.long()))


# One value of the right type that each rule of VALUE_RULES refuses.
OUT_OF_RANGE = {
    "char_embedding_dim": 0, "char_cnn_filters": [[2, 0]], "num_highway_layers": -1, "char_cnn_activation": "gelu",
    "max_characters_per_token": 2, "n_characters": 1, "alphabet": "unicode", "word_vocab_size": -1,
    "word_embedding_dim": -1, "forget_bias": math.nan, "cell_size": 0, "projection_dim": 0, "num_lstm_layers": 0,
    "cell_clip": -1.0, "proj_clip": -0.5, "num_output_representations": 0, "dropout": 1.0,
    "initializer_range": math.inf, "scalar_mix_l2_coef": -0.1, "sequence_pooling": "attention",
    "problem_type": "single_label", "lm_vocab_size": 2,
    "lm_dropout": -0.1, "lm_negative_samples": -1,
}


def test_a_pooling_set_after_the_classifier_was_built_is_refused_naming_it():
    """sequence_pooling "mean" -> "mean_max" on a built model doubles what the classifier would read: torch's "mat1
    and mat2 shapes cannot be multiplied" before."""
    from hf_elmo import ElmoForSequenceClassification

    model = ElmoForSequenceClassification(ElmoConfig(char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 4]],
                                                     num_highway_layers=1, cell_size=16, projection_dim=8, num_labels=2,
                                                     sequence_pooling="mean"))
    model.config.sequence_pooling = "mean_max"
    ids = torch.zeros(1, 2, 50, dtype=torch.long)
    ids[:, :, 0] = 259
    with pytest.raises(ValueError, match=r"^ElmoConfig.sequence_pooling is 'mean_max', but the classifier was built for "
                                         r"16 inputs: set it before the model is built$"):
        model(input_ids=ids)


def test_words_of_up_to_1000_characters_and_no_more():
    """max_characters_per_token has an upper bound as well: an options.json's 10**9 padded every word of the
    converter's probe to a billion ids, until the memory ran out."""
    assert ElmoConfig(max_characters_per_token=1000).max_characters_per_token == 1000
    with pytest.raises(ValueError, match=r"^ElmoConfig.max_characters_per_token must be from 3 .* to 1000, got 1000000000$"):
        ElmoConfig(max_characters_per_token=10**9)


def test_up_to_64_highway_and_lstm_layers_and_no_more(tmp_path):
    """The layer counts have upper bounds too: an options.json's `n_highway` of 10**7 took the converter 95 s and
    7 GB to refuse (it lists every layer's datasets first), an `n_layers` of 10**30 filled the memory; now one
    line, naming the option, at once."""
    assert ElmoConfig(num_highway_layers=64, num_lstm_layers=64).num_lstm_layers == 64
    options = json.loads((FIXTURES / "allennlp-elmo" / "options.json").read_text())
    for section, option, value in [("char_cnn", "n_highway", 10**7), ("lstm", "n_layers", 10**30)]:
        changed = json.loads(json.dumps(options))
        changed[section][option] = value
        with pytest.raises(ValueError, match=rf"^options: option '{section}.{option}' must be from [01] to 64, got {value}$"):
            ElmoConfig.from_original_options(changed)


@pytest.mark.parametrize("field", OUT_OF_RANGE)
def test_config_refuses_every_value_out_of_its_range(field):
    """Every rule of VALUE_RULES, at construction: one line naming the field, its requirement and the value."""
    assert OUT_OF_RANGE.keys() == VALUE_RULES.keys()
    value, requirement = OUT_OF_RANGE[field], VALUE_RULES[field][1]
    with pytest.raises(ValueError, match=f"^{re.escape(f'ElmoConfig.{field} must be {requirement}, got {value!r}')}$"):
        ElmoConfig(**{field: value})
    aliases = {name: alias for alias, name in ElmoConfig.attribute_map.items()}
    if field in aliases:  # (transformers' standard name, set after the check: accepted)
        with pytest.raises(ValueError, match=f"^{re.escape(f'ElmoConfig.{field} must be {requirement}, got {value!r}')}$"):
            ElmoConfig(**{aliases[field]: value})


@pytest.mark.parametrize("field", ["dropout", "sequence_pooling", "num_output_representations", "cell_size",
                                   "scalar_mix_l2_coef", "lm_negative_samples", "problem_type"])
def test_values_given_after_construction_are_refused_as_at_construction(field, tmp_path):
    """transformers sets the keyword arguments of `from_pretrained(path, dropout=0.5)` (README: how the options are
    set) on the config after building it: a value out of range is refused there, naming the field, as at
    construction, not by torch's dropout or torch.cat at the first batch, nor silently kept (a negative L2 penalty).
    A field set on a config by hand is refused by the model built on it."""
    from hf_elmo import ElmoForSequenceClassification

    value, requirement = OUT_OF_RANGE[field], VALUE_RULES[field][1]
    message = f"^{re.escape(f'ElmoConfig.{field} must be {requirement}, got {value!r}')}$"
    tiny = dict(char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 4]], num_highway_layers=1, cell_size=16,
                projection_dim=8)
    ElmoModel(ElmoConfig(**tiny)).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=message):
        AutoConfig.from_pretrained(tmp_path, **{field: value})
    with pytest.raises(ValueError, match=message):
        ElmoForSequenceClassification.from_pretrained(tmp_path, **{field: value})
    config = ElmoConfig(**tiny)
    setattr(config, field, value)
    with pytest.raises(ValueError, match=message):
        ElmoModel(config)
    if field in ("sequence_pooling", "scalar_mix_l2_coef"):  # (read at each forward: set on a built model too)
        model = ElmoForSequenceClassification(ElmoConfig(**tiny, num_labels=2))
        setattr(model.config, field, value)
        ids = torch.zeros(1, 2, 50, dtype=torch.long)
        ids[:, :, 0] = 259
        with pytest.raises(ValueError, match=message):
            model(input_ids=ids, labels=torch.tensor([1]))


def test_a_clip_of_0_given_after_construction_means_no_clip(tmp_path):
    """The docstring: a clip of 0 means None, as at construction (`ElmoConfig(cell_clip=0)`). Given to
    `from_pretrained` or set on the config, it was kept as 0, and the model clamped every memory cell (or
    projected state) to 0: every biLSTM output was 0. It now reads as no clip, as the saved config does too."""
    tiny = dict(char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 4]], num_highway_layers=1, cell_size=16,
                projection_dim=8, cell_clip=None, proj_clip=None)
    torch.manual_seed(0)
    ElmoModel(ElmoConfig(**tiny)).save_pretrained(tmp_path)
    batch = ElmoTokenizer()(SEEDS, is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        expected = ElmoModel.from_pretrained(tmp_path).eval()(**batch).last_hidden_state
        for clip in ("cell_clip", "proj_clip"):
            model = ElmoModel.from_pretrained(tmp_path, **{clip: 0}).eval()
            assert getattr(model.config, clip) is None
            torch.testing.assert_close(model(**batch).last_hidden_state, expected, rtol=0, atol=0)
            config = ElmoConfig(**tiny)
            setattr(config, clip, 0)
            model = ElmoModel(config).eval()
            model.load_state_dict(ElmoModel.from_pretrained(tmp_path).state_dict())
            torch.testing.assert_close(model(**batch).last_hidden_state, expected, rtol=0, atol=0)


def test_config_rejects_invalid_values():
    for field, value in [("projection_dim", "x"), ("n_characters", 261)]:
        with pytest.raises(ValueError, match=field):
            ElmoConfig(**{field: value})
    with pytest.raises(ValueError, match="char_cnn_filters"):
        ElmoConfig(char_cnn_filters=[[60, 4]])
    with pytest.raises(ValueError, match="projection_dim"):
        ElmoConfig(cell_size=16, projection_dim=32)


def test_original_options_are_read_as_bilm_tf_writes_them_and_refused_where_they_cannot_be(tmp_path):
    """ElmoConfig.from_original_options: a file that starts with a byte order mark, the training form's
    n_characters 261 (read as 262), and one error, naming the source, for a missing section or options that only
    contradict each other."""
    options = {"char_cnn": {"embedding": {"dim": 4}, "filters": [[1, 4], [2, 8]], "n_characters": 261},
               "lstm": {"dim": 16, "projection_dim": 8, "n_layers": 1}}
    path = tmp_path / "options.json"
    path.write_text(json.dumps(options), encoding="utf-8-sig")
    config = ElmoConfig.from_original_options(path)
    assert (config.n_characters, config.cell_size, config.num_char_filters, config.to_original_options()["lstm"]) == (
        262, 16, 12, {"dim": 16, "projection_dim": 8, "n_layers": 1, "cell_clip": None, "proj_clip": None,
                      "use_skip_connections": False})
    for broken, message in [
        ({"lstm": options["lstm"]},
         "options: no 'char_cnn' section (only character-input ELMo models can be converted)"),
        ({**options, "lstm": [16, 8]}, "options: no 'lstm' section (an object)"),
        # (named as the file names them, not as ElmoConfig's fields)
        ({**options, "lstm": {**options["lstm"], "projection_dim": 32}},
         "options: option 'lstm.projection_dim' (32) cannot exceed 'lstm.dim' (16): bilm-tf projects a cell only to "
         "a narrower width"),
        ({**options, "char_cnn": {**options["char_cnn"], "max_characters_per_token": 3, "filters": [[1, 4], [4, 8]]}},
         "options: 'char_cnn.filters' has [4, 8]: no filter can be wider than 'char_cnn.max_characters_per_token' "
         "(3)"),
    ]:
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            ElmoConfig.from_original_options(broken)
    # Keyword arguments set the output options; one that the file sets is refused (a TypeError before).
    assert ElmoConfig.from_original_options(options, do_layer_norm=True, dropout=0.25).dropout == 0.25
    # So are an alias of one (num_hidden_layers was taken over the file's lstm.n_layers) and a field of bilm-tf's
    # format (always_project turned off the check of the widths).
    for keywords, named in [({"cell_clip": 0}, "cell_clip is"), ({"num_hidden_layers": 5}, "num_hidden_layers is"),
                            ({"always_project": True, "forget_bias": 0.0}, "always_project, forget_bias are")]:
        with pytest.raises(ValueError, match=rf"^options: {named} set by the options file or bilm-tf's format \(the "
                                             r"file's default where it leaves an option out\); keyword arguments set "
                                             r"the other options \(num_output_representations, do_layer_norm, dropout, "
                                             r"the heads' and the pretraining softmax's\)$"):
            ElmoConfig.from_original_options(options, **keywords)
    assert ElmoConfig.from_original_options(options, num_labels=3, lm_vocab_size=10).lm_vocab_size == 10


def test_a_configs_auto_map_is_elmos_with_the_entries_a_folder_names(tmp_path):
    """Every ElmoConfig names every ELMo class of ELMO_AUTO_MAP; an entry the folder's config.json already has (a
    class of its own, say) wins over ELMo's, and an Auto class ELMo does not name is kept."""
    from hf_elmo import ELMO_AUTO_MAP

    assert ElmoConfig().auto_map == ELMO_AUTO_MAP
    ElmoConfig(cell_size=32, projection_dim=8).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    own = {"AutoModel": "my_code.MyElmo", "AutoModelForMaskedLM": "my_code.MyMaskedElmo"}
    (tmp_path / "config.json").write_text(json.dumps({**saved, "auto_map": {**saved["auto_map"], **own}}))
    assert ElmoConfig.from_pretrained(tmp_path).auto_map == {**ELMO_AUTO_MAP, **own}


def test_config_round_trips_and_maps_standard_names(tmp_path):
    config = ElmoConfig(cell_size=32, projection_dim=8, num_lstm_layers=3, cell_clip=0, proj_clip=None)
    assert config.num_hidden_layers == 3 and config.hidden_size == 16
    assert config.cell_clip is None and config.proj_clip is None
    config.save_pretrained(tmp_path)
    assert ElmoConfig.from_pretrained(tmp_path).to_dict() == config.to_dict()


def test_hidden_size_and_vocab_size_are_refused_naming_the_field_to_set(tmp_path):
    """config.hidden_size (2 * projection_dim) and config.vocab_size (n_characters) follow from other fields. Setting
    one (an attribute, a keyword of the constructor or of from_pretrained) raised AttributeError "property has no
    setter", after transformers had logged the whole config: now one line names the field to set instead. Setting a
    field to the value it has changes nothing (generic code that copies it back)."""
    config = ElmoConfig(cell_size=32, projection_dim=8)
    config.save_pretrained(tmp_path)
    hidden = r"^ElmoConfig.hidden_size is 2 \* projection_dim \(16\), the width of every layer: set projection_dim "
    vocab = r"^ElmoConfig.vocab_size is n_characters \(262\), the size of the character alphabet: set n_characters "
    for name, value, expected in (("hidden_size", 32, hidden), ("vocab_size", 30000, vocab)):
        expected += rf"instead \(got {name}={value}\)"
        for set_it in (lambda: setattr(config, name, value),
                       lambda: ElmoConfig(cell_size=32, projection_dim=8, **{name: value}),
                       lambda: ElmoConfig.from_pretrained(tmp_path, **{name: value}),
                       lambda: AutoConfig.from_pretrained(tmp_path, **{name: value})):
            with pytest.raises(ValueError, match=expected):
                set_it()
    config.hidden_size, config.vocab_size = 16, 262
    loaded = AutoConfig.from_pretrained(tmp_path, hidden_size=16, vocab_size=262)
    assert config.to_dict() == ElmoConfig(cell_size=32, projection_dim=8).to_dict()
    assert loaded.to_dict() == AutoConfig.from_pretrained(tmp_path).to_dict()
    assert (loaded.hidden_size, loaded.vocab_size) == (16, 262)


@pytest.mark.parametrize("model_class", [ElmoModel, ElmoForPreTraining])
def test_resizing_the_token_embeddings_is_refused_and_changes_nothing(converted, model_class):
    """The character alphabet is fixed: transformers' resize would swap the embedding, then fail on the read-only
    `config.vocab_size`, leaving a broken model. Refused before anything changes."""
    model = model_class.from_pretrained(converted["allennlp-elmo"], lm_vocab_size=10).eval()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    embedding = model.get_input_embeddings()
    with pytest.raises(ValueError, match=rf"^{model_class.__name__} cannot resize its token embeddings to 300: it "
                       r"reads each word as characters.*262 ids.*tokenizer\.add_tokens"):
        model.resize_token_embeddings(300)
    with pytest.raises(ValueError, match="cannot resize its token embeddings to 320:"):  # (262 rounded up to 64s)
        model.resize_token_embeddings(pad_to_multiple_of=64)
    assert model.get_input_embeddings() is embedding and model.config.vocab_size == 262
    assert model.state_dict().keys() == before.keys()
    assert all(torch.equal(tensor, before[name]) for name, tensor in model.state_dict().items())
    # Without a new size (or with the alphabet's own), transformers' no-op: the embedding itself.
    assert model.resize_token_embeddings() is embedding and model.resize_token_embeddings(262) is embedding
    # (a multiple that 262 already is changes nothing either: it was refused, "to None")
    assert model.resize_token_embeddings(pad_to_multiple_of=2) is embedding
    assert model.resize_token_embeddings(262, pad_to_multiple_of=131) is embedding
    tokenizer = ElmoTokenizer.from_pretrained(converted["allennlp-elmo"])
    batch = tokenizer(SEEDS, is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        assert model(**batch).last_hidden_state.shape == (2, 5, 32)


def test_an_attention_mask_may_mask_out_a_real_word(fixture_model):
    """A real word masked out is read as padding, as if the sentence lacked it (the mask that reads padding as words
    is refused: test_input_checks.py)."""
    model, tokenizer = fixture_model
    batch = tokenizer([SEEDS[0], ["short", "one"]], is_split_into_words=True, padding=True, return_tensors="pt")
    mask = batch["attention_mask"].clone()
    mask[0, 4] = 0
    with torch.no_grad():
        masked = model(batch["input_ids"], attention_mask=mask)
        shorter = model(**tokenizer([SEEDS[0][:4]], is_split_into_words=True, return_tensors="pt"))
    assert torch.allclose(masked.last_hidden_state[0, :4], shorter.last_hidden_state[0], atol=1e-6)


def outputs_of_a_fresh_copy(model, batch):
    """What `model`'s weights give now, computed by a new model (no cache, no derived weights)."""
    fresh = type(model)(model.config).eval()
    fresh.load_state_dict(model.state_dict())
    with torch.no_grad():
        return fresh(**batch)


def assert_the_step_is_seen(after, expected, before) -> None:
    """Every layer after the step (`after`) is what a fresh copy gives (`expected`), which differs from `before`."""
    for found, want, old in zip(after.hidden_states, expected.hidden_states, before.hidden_states):
        assert not torch.allclose(want, old, atol=1e-3)  # (the step changed every layer)
        assert torch.allclose(found, want, atol=1e-6)


def test_caches_see_an_optimizer_step_taken_in_evaluation_mode(converted):
    """A fused AdamW step writes the weights without advancing their version counters; from_pretrained returns the
    model in evaluation mode, where the caches and the fast paths' derived weights are used."""
    model = ElmoModel.from_pretrained(converted["allennlp-elmo"])
    assert not model.training
    tokenizer = ElmoTokenizer.from_pretrained(converted["allennlp-elmo"])
    batch = tokenizer(SEEDS, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        before = model(**batch)  # fills the caches
    assert len(model.char_encoder.token_cache) > 0
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, fused=True)
    model(**batch).last_hidden_state.sum().backward()
    optimizer.step()
    with torch.no_grad():
        after = model(**batch)
    assert_the_step_is_seen(after, outputs_of_a_fresh_copy(model, batch), before)


def test_an_optimizer_over_other_parameters_leaves_the_step_counter_alone(converted):
    """Every torch optimizer's step runs the caches' step hook, which counts only the parameters that a cache has
    seen: an optimizer of other parameters adds none, and a group of ELMo weights added to it later is counted."""
    model = ElmoModel.from_pretrained(converted["allennlp-elmo"])
    tokenizer = ElmoTokenizer.from_pretrained(converted["allennlp-elmo"])
    batch = tokenizer(SEEDS, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        before = model(**batch)  # fills the caches, which watch their weights
    watched = len(_OPTIMIZER_STEPS)
    others = [torch.nn.Parameter(torch.randn(3)) for _ in range(2000)]
    for parameter in others:
        parameter.grad = torch.ones(3)
    optimizer = torch.optim.AdamW(others, lr=0.05, fused=True)
    optimizer.step()
    optimizer.step()
    assert len(_OPTIMIZER_STEPS) == watched and not any(parameter in _OPTIMIZER_STEPS for parameter in others)
    assert all(parameter in _OPTIMIZER_STEPS for parameter in model.char_encoder.parameters())
    optimizer.add_param_group({"params": list(model.parameters())})
    model(**batch).last_hidden_state.sum().backward()
    optimizer.step()  # fused: no version counter advances
    with torch.no_grad():
        after = model(**batch)
    assert_the_step_is_seen(after, outputs_of_a_fresh_copy(model, batch), before)



def test_the_step_counter_sees_parameters_replaced_in_a_group_in_place(converted):
    """A group's list of params edited in place (same list, same length, other tensors: ELMo's weights where other
    parameters were) is noticed at the next step, which then counts the fused step on those weights."""
    model = ElmoModel.from_pretrained(converted["allennlp-elmo"])
    tokenizer = ElmoTokenizer.from_pretrained(converted["allennlp-elmo"])
    batch = tokenizer(SEEDS, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        before = model(**batch)  # fills the caches, which watch their weights
    weights = list(model.parameters())
    others = [torch.nn.Parameter(torch.randn(3)) for _ in weights]
    for parameter in others:
        parameter.grad = torch.ones(3)
    optimizer = torch.optim.AdamW(others, lr=0.05, fused=True)
    optimizer.step()  # (the counter learns this optimizer's parameters: none of them watched)
    optimizer.param_groups[0]["params"][:] = weights
    model(**batch).last_hidden_state.sum().backward()
    optimizer.step()  # fused: no version counter advances
    with torch.no_grad():
        after = model(**batch)
    assert_the_step_is_seen(after, outputs_of_a_fresh_copy(model, batch), before)

REMOTE_COPIES = """
import json, sys
import torch
import torch.optim.optimizer as optimizer_module
import transformers

results = {"hooks": [len(optimizer_module._global_optimizer_post_hooks)], "copies": [], "seen": []}
counters = []
for folder in sys.argv[1:]:
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    batch = tokenizer([["I", "eat", "an", "apple", "."]], is_split_into_words=True, return_tensors="pt")
    model = transformers.AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    copy = sys.modules[type(model).__module__.rpartition(".")[0] + ".token_cache"]
    results["hooks"].append(len(optimizer_module._global_optimizer_post_hooks))
    results["copies"].append(copy.__name__)
    counters.append(copy._OPTIMIZER_STEPS)
    with torch.no_grad():
        model(**batch)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, fused=True)
    model(**batch).last_hidden_state.sum().backward()
    optimizer.step()
    with torch.no_grad():
        after = model(**batch).last_hidden_state
    fresh = type(model)(model.config).eval()
    fresh.load_state_dict(model.state_dict())
    with torch.no_grad():
        results["seen"].append(torch.allclose(after, fresh(**batch).last_hidden_state, atol=1e-6))
results["shared"] = counters[0] is counters[1]
print(json.dumps(results))
"""


def test_copies_of_the_code_share_one_optimizer_step_hook(converted, python_without_hf_elmo, tmp_path):
    """Each model folder (and revision) loaded with trust_remote_code imports a copy of token_cache.py: the first
    registers the step hook, every later copy uses its counter, and each copy's caches see a fused step."""
    folders = [tmp_path / "first", tmp_path / "revised"]
    model = ElmoModel.from_pretrained(converted["allennlp-elmo"])
    for folder in folders:
        model.save_pretrained(folder)
        ElmoTokenizer.from_pretrained(converted["allennlp-elmo"]).save_pretrained(folder)
    with open(folders[1] / "token_cache.py", "a", encoding="utf-8") as code:
        code.write("\n# a later revision\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules"), "PYTHONPATH": ""}
    result = subprocess.run([python_without_hf_elmo, "-c", REMOTE_COPIES, *map(str, folders)], cwd=tmp_path, env=env,
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(set(found["copies"])) == 2 and all(name.startswith("transformers_modules.") for name in found["copies"])
    first = found["hooks"][0]
    assert found["hooks"] == [first, first + 1, first + 1]
    assert found["shared"] and found["seen"] == [True, True]


def test_word_ids_must_be_an_integer_tensor(converted_elmoformanylangs):
    """Float word ids would be truncated (12.7 read as 12), bools read as ids 0 and 1: refused, as for input_ids."""
    folder = converted_elmoformanylangs["with_words"]
    model, tokenizer = ElmoModel.from_pretrained(folder).eval(), ElmoTokenizer.from_pretrained(folder)
    batch = tokenizer(["天气不错", "你"], padding=True, return_tensors="pt")
    word_ids = batch["input_word_ids"]
    for wrong in (word_ids.float() + 0.7, word_ids.bool()):
        with pytest.raises(ValueError, match=rf"^input_word_ids must hold integer word ids .*got {wrong.dtype}$"):
            model(batch["input_ids"], attention_mask=batch["attention_mask"], input_word_ids=wrong)
    with pytest.raises(ValueError, match=r"^input_word_ids must be \[2, 4\], got list$"):
        model(batch["input_ids"], attention_mask=batch["attention_mask"], input_word_ids=word_ids.tolist())
    with pytest.raises(ValueError, match=r"^word_ids must hold integer word ids"):
        model.char_encoder(batch["input_ids"][0], word_ids[0].float())
    with torch.no_grad():
        as_int32 = model(batch["input_ids"], attention_mask=batch["attention_mask"], input_word_ids=word_ids.int())
        assert torch.equal(as_int32.last_hidden_state, model(**batch).last_hidden_state)


def test_word_ids_at_padding_are_ignored(converted_elmoformanylangs):
    """ElmoModel.forward: input_word_ids are read at the words only; any value at padding, word.dic's or not, gives
    the same outputs."""
    folder = converted_elmoformanylangs["with_words"]
    model, tokenizer = ElmoModel.from_pretrained(folder).eval(), ElmoTokenizer.from_pretrained(folder)
    batch = tokenizer(["天气不错", "你"], padding=True, return_tensors="pt")
    padding = batch["attention_mask"] == 0
    assert padding.any()
    with torch.no_grad():
        expected = model(**batch)
        for value in (-7, model.config.word_vocab_size, 10**6):
            found = model(**{**batch, "input_word_ids": batch["input_word_ids"].masked_fill(padding, value)})
            assert all(torch.equal(a, b) for a, b in zip(found.hidden_states, expected.hidden_states)), value


@pytest.mark.parametrize("name", ["with_words", "chars_only"])
def test_the_char_encoder_alone_takes_word_ids_exactly_when_its_model_reads_them(converted_elmoformanylangs, name):
    """The character encoder run alone (as embed_file.pin_frequent_words runs it): one error for word ids it lacks or
    does not read."""
    folder = converted_elmoformanylangs[name]
    model, tokenizer = ElmoModel.from_pretrained(folder).eval(), ElmoTokenizer.from_pretrained(folder)
    batch = tokenizer(["天气不错"], return_tensors="pt")
    char_ids, word_ids = batch["input_ids"][0], torch.zeros(batch["input_ids"].shape[1], dtype=torch.long)
    if name == "with_words":
        with pytest.raises(ValueError, match=r"^this model reads each word's id in word.dic as well as its characters: "
                                             r"pass input_word_ids$"):
            model.char_encoder(char_ids)
        vectors = model.char_encoder(char_ids, word_ids)
    else:
        with pytest.raises(ValueError, match=r"^this model has no word input: it reads characters only, not "
                                             r"input_word_ids$"):
            model.char_encoder(char_ids, word_ids)
        vectors = model.char_encoder(char_ids)
    assert vectors.shape == (char_ids.shape[0], model.config.projection_dim)


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_lm_dropout_keeps_each_value_with_probability_1_minus_p_scaled_as_nn_dropout_scales(p):
    """ElmoLmDropout draws its mask another way than nn.Dropout: the same distribution, the same scaled values (in
    float32 and bf16), the mask's values as the gradient, and no change in evaluation mode."""
    torch.manual_seed(0)
    x = (torch.rand(1_000_000) + 1).requires_grad_()
    dropout = ElmoLmDropout(p).train()
    y = dropout(x)
    y.backward(torch.ones_like(y))
    kept = y != 0
    assert abs(kept.double().mean().item() - (1 - p)) < 0.002  # (4 standard deviations of the mean)
    scale = torch.tensor(1 / (1 - p))
    assert torch.equal(y[kept], x[kept] * scale) and torch.equal(x.grad, kept * scale)
    for dtype in (torch.float32, torch.bfloat16):
        constant = torch.full((10_000,), 3.0, dtype=dtype)
        ours, theirs = dropout(constant), torch.nn.Dropout(p).train()(constant)
        assert set(ours.unique().tolist()) == set(theirs.unique().tolist()) == {0.0, (3.0 * scale).to(dtype).item()}
    assert dropout.eval()(x) is x


def test_lm_dropout_is_the_pretraining_models_and_active_in_training_only(converted):
    """ElmoForPreTraining drops each LSTM layer's input and the softmax's in training mode only; ElmoModel loaded
    with its config has no LM dropout."""
    folder = converted["allennlp-elmo"]
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    batch = tokenizer([["<S>", *SEEDS[0], "</S>"]], is_split_into_words=True, return_tensors="pt")
    labels = torch.zeros(batch["input_ids"].shape[:2], dtype=torch.long)
    inputs = dict(batch, labels=labels, backward_labels=labels)
    pretraining = ElmoForPreTraining.from_pretrained(folder, lm_vocab_size=10, lm_dropout=0.5, lm_negative_samples=0,
                                                     output_hidden_states=True)
    body = ElmoModel.from_pretrained(folder, lm_dropout=0.5)
    assert body.config.lm_dropout == 0.5 and body.lstm_dropout is None
    with torch.no_grad():
        for training in (True, False):
            pretraining.train(training)
            body.train(training)
            (first, first_body), (second, second_body) = [(pretraining(**inputs), body(**batch)) for _ in range(2)]
            assert torch.equal(first.hidden_states[0], second.hidden_states[0])  # (the token layer is not dropped)
            assert torch.equal(first.hidden_states[-1], second.hidden_states[-1]) != training
            assert torch.equal(first.loss, second.loss) != training
            assert torch.equal(first_body.last_hidden_state, second_body.last_hidden_state)
        pretraining.elmo.lstm_dropout = None  # the softmax's dropout alone: the same top layer, another loss
        first, second = pretraining.train()(**inputs), pretraining(**inputs)
    assert torch.equal(first.hidden_states[-1], second.hidden_states[-1]) and not torch.equal(first.loss, second.loss)


def test_lm_dropout_drops_every_lstm_layers_input_and_the_residual_adds_the_dropped_input():
    """bilm-tf wraps each layer's cell in DropoutWrapper(ResidualWrapper(cell)): every biLSTM layer reads a dropped
    input, and the second layer's residual adds that dropped input, not the undropped one."""
    torch.manual_seed(0)
    config = ElmoConfig(char_embedding_dim=4, char_cnn_filters=[[1, 8], [2, 8]], num_highway_layers=1, cell_size=32,
                        projection_dim=16, num_lstm_layers=2, use_skip_connections=True, lm_vocab_size=10,
                        lm_dropout=0.5)
    model = ElmoForPreTraining(config).train()
    batch = ElmoTokenizer()([["<S>", "a", "b", "c", "d", "</S>"]], is_split_into_words=True, return_tensors="pt")
    seen = {}
    for index, layer in enumerate(model.elmo.layers):  # (inputs and outputs: directions x rows x steps x 16)
        layer.register_forward_pre_hook(lambda module, args, index=index: seen.__setitem__(("in", index), args[0]))
        layer.register_forward_hook(
            lambda module, args, output, index=index: seen.__setitem__(("out", index), output[0]))
    with torch.no_grad():
        top = model(**batch, output_hidden_states=True).hidden_states[-1][0]
    for index in range(2):
        assert 0.3 < (seen[("in", index)] == 0).float().mean().item() < 0.7, index
    assert torch.allclose(top[:, :16], seen[("out", 1)][0, 0] + seen[("in", 1)][0, 0], atol=1e-6)


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("cell_clip, proj_clip", [(0.05, 50.0), (50.0, 0.05)])
def test_each_clip_bounds_its_own_state(cell_clip, proj_clip, fast):
    """cell_clip bounds the memory cells and proj_clip the projected states, each its own, on both paths (every
    fixture has 3 and 3, so swapped clips passed every exactness test): with weights scaled up, both states would
    pass the small clip unclipped."""
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 8]], num_highway_layers=1,
                                 cell_size=16, projection_dim=8, cell_clip=cell_clip, proj_clip=proj_clip)).eval()
    with torch.no_grad():
        for layer in model.layers:
            for weight in (layer.input_weight, layer.recurrent_weight, layer.projection_weight):
                weight.mul_(20)
    model.set_fast_path(fast)
    batch = ElmoTokenizer()([["the", "cat", "sat", "on", "the", "mat"]], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        h, c = model(**batch).final_states
    assert c.abs().max().item() <= cell_clip + 1e-6 and h.abs().max().item() <= proj_clip + 1e-6
    small = min(cell_clip, proj_clip)
    assert (c if cell_clip > proj_clip else h).abs().max().item() > 2 * small  # (the other is not held to it)


def test_dummy_inputs_are_a_batch_every_class_reads():
    """`model.dummy_inputs` (transformers' default is [3, 5] token ids, which ELMo refuses): spelled words of the
    model's width and alphabet, word ids for a model with word input, one padded position."""
    sizes = dict(char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 8]], num_highway_layers=1, cell_size=16,
                 projection_dim=8, lm_vocab_size=10)
    configs = [ElmoConfig(**sizes), ElmoConfig(max_characters_per_token=20, **sizes),
               ElmoConfig(alphabet="vocabulary", n_characters=7, bos_char_id=1, eos_char_id=2, bow_char_id=3,
                          eow_char_id=4, pad_char_id=5, word_vocab_size=9, word_embedding_dim=4, bos_word_id=1,
                          eos_word_id=2, forget_bias=0.0, **sizes)]
    for config in configs:
        for model_class in (ElmoModel, ElmoForPreTraining, ElmoForSequenceClassification, ElmoForTokenClassification):
            model = model_class(config).eval()
            inputs = model.dummy_inputs
            assert inputs["input_ids"].shape == (2, 3, config.max_characters_per_token)
            assert ("input_word_ids" in inputs) == (config.word_vocab_size > 0)
            with torch.no_grad():
                output = model(**inputs)
            if model_class is ElmoModel:
                assert output.last_hidden_state.shape == (2, 3, 16)
                assert torch.equal(output.last_hidden_state[1, 2], torch.zeros(16))


def test_the_sentence_layout_is_the_stable_sort_of_each_row_words_first():
    """`_SentenceLayout` computes the stable sort of each row by "not a word" from running counts (so that the
    model exports to ONNX, which has no stable sort): `order` is that sort, `restore` its inverse, on masks with the
    words anywhere, right or left padded, every word and none."""
    torch.manual_seed(0)
    masks = [torch.rand(6, 11) < share for share in (0.3, 0.7)]
    masks += [torch.arange(11) < torch.tensor([[0], [1], [5], [11]]), torch.arange(11) >= torch.tensor([[0], [4]])]
    masks += [torch.ones(2, 11, dtype=torch.bool), torch.zeros(2, 11, dtype=torch.bool)]
    masks.append(torch.zeros(0, 11, dtype=torch.bool))
    for mask in masks:
        layout = _SentenceLayout(mask)
        expected = torch.argsort((~mask).to(torch.uint8), dim=1, stable=True)
        assert torch.equal(layout.order, expected), mask
        assert torch.equal(layout.restore, torch.argsort(expected, dim=1)), mask
