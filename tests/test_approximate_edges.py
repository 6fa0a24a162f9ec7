"""Behaviour of hf_elmo/approximate.py that no other test held (found by mutation testing)."""

import re

import pytest
import torch

from hf_elmo import ElmoConfig, ElmoModel, ElmoTokenizer
from hf_elmo.approximate import APPROXIMATIONS, approximation_deviation, native_bfloat16_extension

KINDS = [kind for kind in APPROXIMATIONS if kind != "bf16" or native_bfloat16_extension() is not None]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("sentences", [[[]], [[], []]])
def test_the_deviation_on_a_batch_without_words_is_zero_for_every_layer(kind, sentences):
    """A batch of empty sentences runs the model to empty outputs: its deviation is 0 for each layer (there is no
    difference to take the largest of), not torch's error for the maximum of an empty tensor."""
    model = ElmoModel(ElmoConfig(char_embedding_dim=4, char_cnn_filters=[[1, 8], [2, 8]], num_highway_layers=1,
                                 cell_size=32, projection_dim=8)).eval()
    batch = ElmoTokenizer()(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    assert batch["input_ids"].shape[1] == 0
    assert approximation_deviation(model, batch, kind) == [0.0, 0.0, 0.0]
    assert all(layer.approximation is None for layer in model.layers)


def test_the_deviation_of_an_unknown_approximation_is_refused_naming_the_choices():
    model = ElmoModel(ElmoConfig(char_embedding_dim=4, char_cnn_filters=[[1, 8]], num_highway_layers=1, cell_size=16,
                                 projection_dim=8)).eval()
    batch = ElmoTokenizer()([["a", "b"]], is_split_into_words=True, return_tensors="pt")
    choices = re.escape(str(APPROXIMATIONS))
    with pytest.raises(ValueError, match=rf"^unknown approximation 'fp8': choose one of {choices}$"):
        approximation_deviation(model, batch, "fp8")
    assert all(layer.approximation is None for layer in model.layers)


def test_the_deviation_of_an_approximation_that_cannot_run_is_refused_before_any_work():
    """int8 on a float64 model: refused with the approximation's own message before the model runs (else after a
    whole exact forward, which on a large batch is most of the work)."""
    model = ElmoModel(ElmoConfig(char_embedding_dim=4, char_cnn_filters=[[1, 8]], num_highway_layers=1, cell_size=16,
                                 projection_dim=8)).double().eval()
    batch = ElmoTokenizer()([["a", "b"]], is_split_into_words=True, return_tensors="pt")
    forwards = []
    model.register_forward_hook(lambda *args: forwards.append(1))
    with pytest.raises(ValueError, match="float32 model"):
        approximation_deviation(model, batch, "int8")
    assert forwards == [] and all(layer.approximation is None for layer in model.layers)


def test_int8_weights_use_the_whole_int8_range_of_each_row():
    """The int8 mode's weights are symmetric per output row: each row's largest magnitude maps to +-127, and every
    weight comes back within half a step (amax / 127 / 2) of its value, none clipped."""
    from hf_elmo.approximate import Int8Multiplies

    torch.manual_seed(0)
    weight = torch.randn(12, 40) * torch.logspace(-3, 1, 12).unsqueeze(1)
    quantized = Int8Multiplies._quantize(weight)
    step = weight.abs().amax(dim=1, keepdim=True) / 127
    assert quantized.int_repr().abs().amax(dim=1).tolist() == [127] * 12
    assert ((quantized.dequantize() - weight).abs() <= step / 2 * (1 + 1e-5)).all()


def _unclipped_model(**changes) -> ElmoModel:
    """A model that never clips, where nn.LSTM computes the exact cell: 'nn_lstm' must give its numbers."""
    torch.manual_seed(0)
    config = dict(char_embedding_dim=4, char_cnn_filters=[[1, 8], [2, 8]], num_highway_layers=1, cell_size=64,
                  projection_dim=16, cell_clip=None, proj_clip=None)
    return ElmoModel(ElmoConfig(**{**config, **changes})).eval()


def test_nn_lstm_mode_starts_from_the_initial_states_and_ends_at_each_rows_last_word():
    """The nn_lstm mode reads `initial_states` (the carried state of the stateful model) and gives `final_states`
    at each row's own last word, not after its padding: on a model that never clips, both equal the exact model's,
    a batch of sentences of different lengths and the next batch started from its final states."""
    model = _unclipped_model()
    tokenizer = ElmoTokenizer()
    first = tokenizer([["a", "short", "one"], ["and", "a", "longer", "sentence", "here", "too"]],
                      is_split_into_words=True, padding=True, return_tensors="pt")
    second = tokenizer([["then", "more"], ["words", "come", "next"]], is_split_into_words=True, padding=True,
                       return_tensors="pt")
    runs = {}
    for kind in (None, "nn_lstm"):
        model.set_lstm_approximation(kind)
        with torch.no_grad():
            one = model(**first)
            two = model(**second, initial_states=one.final_states)
        runs[kind] = (one, two)
    model.set_lstm_approximation(None)
    (exact_one, exact_two), (one, two) = runs[None], runs["nn_lstm"]
    for found, expected in zip(one.final_states, exact_one.final_states):
        torch.testing.assert_close(found, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(two.last_hidden_state, exact_two.last_hidden_state, rtol=0, atol=1e-5)
    with torch.no_grad():  # (the state made a difference: what the case needs)
        assert (model(**second).last_hidden_state - exact_two.last_hidden_state).abs().max() > 1e-3


def test_nn_lstm_mode_runs_a_model_without_a_cell_projection():
    """torch.nn.LSTM cannot hold a cell projection as wide as the cell, but a model of cell_size == projection_dim
    built without one (bilm-tf builds none where the widths match) needs none: nn_lstm runs it (proj_size 0), and
    gives the exact model's numbers where nothing clips."""
    model = _unclipped_model(cell_size=16, projection_dim=16)
    assert model.layers[0].projection_weight is None
    batch = ElmoTokenizer()([["a", "short", "one"], ["and", "a", "longer", "one", "here"]], is_split_into_words=True,
                            padding=True, return_tensors="pt")
    assert max(approximation_deviation(model, batch, "nn_lstm")) < 1e-5


@pytest.mark.parametrize("flags, expected", [({"avx512_bf16": True}, "AVX512-BF16"), ({"amx_bf16": True}, "AMX-BF16"),
                                             ({"amx_bf16": True, "avx512_bf16": True}, "AMX-BF16"),
                                             ({"avx512f": True, "avx512_bf16": False}, None), ({}, None)])
def test_native_bfloat16_is_found_through_either_extension(monkeypatch, flags, expected):
    """The bf16 mode runs where the CPU computes bfloat16 natively: with AMX-BF16, or with AVX512-BF16 alone (Zen 4,
    Cooper Lake); without either it is refused."""
    from hf_elmo import approximate

    monkeypatch.setattr(approximate, "cpu_flags", lambda: flags)
    assert approximate.native_bfloat16_extension.__wrapped__() == expected


def test_an_approximation_under_autograd_runs_the_exact_bilstm_and_says_so(caplog):
    """In eval mode with autograd on (no torch.no_grad()), the int8 approximation set was silently not run: exact
    numbers at exact speed. It still is not (no approximation gets gradients), but a warning says so and how to run
    it; under no_grad it runs (the numbers change)."""
    import logging

    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(char_embedding_dim=4, char_cnn_filters=[[1, 8], [2, 8]], num_highway_layers=1,
                                 cell_size=32, projection_dim=8)).eval()
    batch = ElmoTokenizer()([["I", "eat", "an", "apple", "."]], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        exact = model(**batch).last_hidden_state
    model.set_lstm_approximation("int8")
    caplog.clear()
    logging.Logger.warning_once.cache_clear()
    under_autograd = model(**batch).last_hidden_state
    assert torch.allclose(under_autograd, exact, atol=1e-6)
    assert [r.getMessage() for r in caplog.records if "approximation" in r.getMessage()] == [
        "the biLSTM approximation 'int8' runs without autograd and autocast only (under torch.no_grad() or "
        "torch.inference_mode()): this call runs the exact biLSTM"]
    with torch.no_grad():
        assert not torch.allclose(model(**batch).last_hidden_state, exact, atol=1e-4)


def test_the_deviation_of_a_float64_model_is_measured_in_float64():
    """approximation_deviation rounded the approximate layers to float32 before subtracting the float64 exact ones:
    layer 0, which no approximation touches, read 1e-7. It reads 0, the biLSTM layers their float64 difference;
    a NumPy batch (return_tensors="np") is read too."""
    model = _unclipped_model().double()
    batch = ElmoTokenizer()([["I", "eat", "an", "apple", "."]], is_split_into_words=True, return_tensors="np")
    deviation = approximation_deviation(model, batch, "nn_lstm")
    assert deviation[0] == 0.0 and all(0 < value < 1e-9 for value in deviation[1:]), deviation
