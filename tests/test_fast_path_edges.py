"""Edges of the fast paths that no other test reached (each found by a mutation of the library that every other
test passed): a batch with an empty row in inference, the nn_lstm approximation's carried cell state, the gate cache
after a change of the first layer's bias alone, the shared first step read per direction and per state, int8's scale
per output row, a single row's bits wherever the weights sit, the fused sampled softmax at its extremes, per-word keys
of word ids past 16 bits; each weight changed in place seen by kernels that copy it, float64 inference, a layer
without a projection and a proj_clip, the kernel choice's margin and a stored choice that names no kernel."""

import copy
import json

import pytest
import torch

from hf_elmo import ElmoConfig, ElmoModel, ElmoTokenizer, fast_linear
from hf_elmo.approximate import Int8Multiplies
from hf_elmo.fast_bilstm import ExactMultiplies, derived_weights
from hf_elmo.fast_linear import MARGIN, FastLinear, blas_linear
from hf_elmo.fused_char_encoder import distinct_words
from hf_elmo.modeling_elmo import ElmoBiLstmLayer, ElmoForPreTraining, sample_log_uniform, sampled_softmax_loss
from hf_elmo.token_cache import ElmoTokenCache


# A pretraining batch may hold an empty row: inference (evaluation, no autograd) must run it, as the plain loop
# does, not pack a row of length 0 into the fast path.

def test_pretraining_evaluation_of_a_batch_with_an_empty_row():
    torch.manual_seed(0)
    config = ElmoConfig(num_lstm_layers=2, cell_size=32, projection_dim=16, char_embedding_dim=4,
                        char_cnn_filters=[[1, 8], [2, 8]], num_highway_layers=1, lm_vocab_size=20,
                        lm_negative_samples=0, max_characters_per_token=10)
    model = ElmoForPreTraining(config).eval()
    ids = torch.randint(1, 200, (3, 5, 10))
    ids[1] = 0  # an empty row
    ids[2, 3:] = 0
    labels = torch.randint(0, 20, (3, 5))
    with torch.no_grad():
        fast = model(input_ids=ids, labels=labels, backward_labels=labels)
        model.set_fast_path(False)
        plain = model(input_ids=ids, labels=labels, backward_labels=labels)
    assert torch.allclose(fast.loss, plain.loss, atol=1e-6)
    for a, b in zip(fast.final_states, plain.final_states):
        assert torch.allclose(a, b, atol=1e-6)


# The nn_lstm approximation starts from the given state: both h and c of a carried state.

def test_nn_lstm_mode_carries_the_initial_cell_state():
    torch.manual_seed(0)
    config = ElmoConfig(cell_size=64, projection_dim=16, num_highway_layers=1, char_cnn_filters=[[1, 8], [2, 8]],
                        cell_clip=None, proj_clip=None)
    model = ElmoModel(config).eval()
    batch = ElmoTokenizer()([["a", "short", "one"], ["and", "a", "longer", "sentence", "here"]],
                            is_split_into_words=True, padding=True, return_tensors="pt")
    states = (torch.randn(2, 2, 32) * 0.3, torch.randn(2, 2, 128))
    with torch.no_grad():
        exact = model(**batch, initial_states=states)
        model.set_lstm_approximation("nn_lstm")
        approximate = model(**batch, initial_states=states)
        model.set_lstm_approximation(None)
    for a, b in zip((*approximate.hidden_states, *approximate.final_states), (*exact.hidden_states, *exact.final_states)):
        assert (a - b).abs().max() < 1e-5


# The first layer's input-gate cache holds x W_in^T + bias: a change of the bias alone (bias-only fine-tuning, an
# in-place edit) must not leave stale gates.

def test_gate_cache_is_dropped_when_only_the_first_layers_bias_changes():
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(cell_size=64, projection_dim=16, num_highway_layers=1,
                                 char_cnn_filters=[[1, 8], [2, 8]])).eval()
    batch = ElmoTokenizer()([["the", "bias", "changes", "the"]], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        before = model(**batch).hidden_states[1]
        assert len(model.layers[0].input_gate_cache) > 0
        model.layers[0].bias.add_(0.5)
        after = model(**batch).hidden_states[1]
        reference = copy.deepcopy(model)
        reference.set_fast_path(False)
        expected = reference(**batch).hidden_states[1]
    assert (before - after).abs().max() > 1e-3
    assert (after - expected).abs().max() < 1e-5


# fast_bilstm.fast_bilstm_layer computes the first step once for all rows only where, per direction, every row's
# first input, h and c are alike. Each condition must be read for its own direction and state.

def small_layer():
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(num_lstm_layers=1, num_highway_layers=0, char_cnn_filters=[[1, 4]],
                                 cell_size=64, projection_dim=16))
    return model.layers[0].eval()


def inputs_and_mask(repeat: bool):
    lengths = torch.tensor([6, 1, 4, 6])
    step_mask = torch.arange(6) < lengths[:, None]
    rows = torch.randn(5, 16)
    inputs = rows[torch.randint(0, 5, (2, 4, 6))] if repeat else torch.randn(2, 4, 6, 16)
    return inputs * step_mask[None, :, :, None], step_mask


def assert_fast_is_plain(layer, inputs, step_mask, h, c, repeat):
    with torch.no_grad():
        fast = layer(inputs, step_mask, h, c, inputs_repeat=repeat)
        slow = layer._plain_forward(inputs, step_mask, h, c)
    for a, b in zip(fast, slow):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-5), (a - b).abs().max()


@pytest.mark.parametrize("repeat", [False, True])
def test_forward_rows_alike_backward_rows_not(repeat):
    """Every forward row starts with the same input (<S>), the backward rows each with their own: the backward
    direction must not take the forward direction's shortcut."""
    layer = small_layer()
    inputs, step_mask = inputs_and_mask(repeat)
    inputs[0, :, 0] = inputs[0, 0, 0]  # forward: every row's first input alike
    assert not bool((inputs[1, :, 0] == inputs[1, :1, 0]).all())  # backward: not
    h, c = torch.zeros(2, 4, 16), torch.zeros(2, 4, 64)
    assert_fast_is_plain(layer, inputs, step_mask, h, c, repeat)


@pytest.mark.parametrize("repeat", [False, True])
@pytest.mark.parametrize("differs", ["h", "c"])
def test_rows_alike_in_input_but_not_in_one_state(repeat, differs):
    """Every row's first input alike, and one of the two states alike while the other differs by row (an initial
    state given with h = 0, say): no row may stand for the others."""
    layer = small_layer()
    inputs, step_mask = inputs_and_mask(repeat)
    inputs[0, :, 0], inputs[1, :, 0] = inputs[0, 0, 0], inputs[1, 0, 0]
    h, c = torch.zeros(2, 4, 16), torch.zeros(2, 4, 64)
    if differs == "h":
        h = torch.randn(2, 4, 16) * 0.5
    else:
        c = torch.randn(2, 4, 64)
    assert_fast_is_plain(layer, inputs, step_mask, h, c, repeat)


# The int8 approximation quantises each output row of a weight with its own scale: a row of small weights keeps
# its precision beside rows of large ones.

def test_int8_weights_have_one_scale_per_output_row():
    torch.manual_seed(0)
    layer = ElmoModel(ElmoConfig(num_lstm_layers=1, cell_size=32, projection_dim=16, num_highway_layers=0,
                                 char_cnn_filters=[[1, 4]])).layers[0].eval()
    with torch.no_grad():
        scales = torch.logspace(-3, 0, layer.recurrent_weight.shape[1])  # rows from 1e-3 to 1
        layer.recurrent_weight.copy_(torch.randn_like(layer.recurrent_weight) * scales[None, :, None])
    multiplies = Int8Multiplies(layer)
    h = torch.randn(64, 16)
    exact = h @ layer.recurrent_weight[0].detach().t()
    approximate = multiplies.recurrent(0, h)
    relative = (approximate - exact).norm(dim=0) / exact.norm(dim=0)  # per output row of the weight
    assert relative.max() < 0.05, relative.max()


# One row is multiplied as two (fast_linear.two_rows), so that a weight at an odd address (a memory-mapped
# checkpoint) gives the bits that the same weight in fresh memory gives.

def at_offset(tensor: torch.Tensor, offset: int) -> torch.Tensor:
    storage = torch.empty(tensor.numel() + offset, dtype=tensor.dtype)
    moved = storage[offset:].view(tensor.shape)
    moved.copy_(tensor)
    return moved


@pytest.mark.parametrize("with_bias", [False, True])
def test_blas_single_row_does_not_depend_on_the_weights_address(with_bias):
    torch.manual_seed(0)
    for out_features, in_features in [(128, 16), (2048, 512)]:
        weight = torch.randn(out_features, in_features) / in_features**0.5
        bias = torch.randn(out_features) if with_bias else None
        x = torch.randn(1, in_features)
        expected = blas_linear(weight.clone())(x, bias)
        for offset in range(1, 16):
            assert torch.equal(blas_linear(at_offset(weight, offset))(x, bias), expected), (out_features, offset)


def test_one_word_with_blas_kernels_does_not_depend_on_where_the_weights_sit(monkeypatch):
    monkeypatch.setattr(fast_linear, "float32_kernels", lambda: {"blas": blas_linear})
    torch.manual_seed(0)
    config = ElmoConfig(cell_size=128, projection_dim=16, num_highway_layers=1, char_cnn_filters=[[1, 8], [2, 8]])
    fresh = ElmoModel(config).eval()
    mapped = ElmoModel(config).eval()
    with torch.no_grad():
        for (name, parameter), offset in zip(mapped.named_parameters(), range(1, 1000)):
            parameter.data = at_offset(dict(fresh.named_parameters())[name].detach(), offset % 15 + 1)
    batch = ElmoTokenizer()([["word"]], is_split_into_words=True, return_tensors="pt")
    one = batch["input_ids"][0, 1:2]  # the word alone, as the token cache computes a batch's one new word
    with torch.no_grad():
        assert torch.equal(mapped.char_encoder(one), fresh.char_encoder(one))
        mapped.clear_caches()
        fresh.clear_caches()
        a, b = mapped(**batch), fresh(**batch)
    for x, y in zip((*a.hidden_states, *a.final_states), (*b.hidden_states, *b.final_states)):
        assert torch.equal(x, y)


# The fused sampled softmax shifts by the largest logit, the true word's included: a true logit far above every
# negative, or a row whose only negative is its own target (one negative, an accidental hit), give the plain loss.

def both_losses(hidden, targets, weight, bias, num_sampled, seed):
    results = []
    for fused in (False, True):
        h, w, b = (t.clone().requires_grad_() for t in (hidden, weight, bias))
        torch.manual_seed(seed)
        loss = sampled_softmax_loss(h, targets, w, b, num_sampled, fused=fused)
        loss.sum().backward()
        results.append((loss.detach(), w.grad))
    return results


def test_a_true_logit_far_above_the_negatives():
    torch.manual_seed(0)
    vocab, dim = 50, 4
    hidden = torch.ones(3, dim) * 10
    weight = torch.zeros(vocab, dim)
    targets = torch.tensor([40, 41, 42])
    weight[targets] = 5.0  # true logits 200, negatives 0
    (plain, _), (fused, fused_grad) = both_losses(hidden, targets, weight, torch.zeros(vocab), 8, seed=1)
    assert torch.isfinite(fused).all() and torch.isfinite(fused_grad).all()
    assert torch.allclose(fused, plain, atol=1e-5)


def test_one_negative_that_is_the_target():
    vocab, dim = 50, 4
    torch.manual_seed(3)
    (sampled,), _ = sample_log_uniform(1, vocab)
    targets = torch.tensor([sampled.item(), sampled.item(), (sampled.item() + 1) % vocab])
    torch.manual_seed(0)
    hidden, weight = torch.randn(3, dim), torch.randn(vocab, dim)
    (plain, _), (fused, fused_grad) = both_losses(hidden, targets, weight, torch.randn(vocab), 1, seed=3)
    assert torch.isfinite(fused).all() and torch.isfinite(fused_grad).all()
    assert torch.allclose(fused, plain, atol=1e-5)
    assert plain[0].item() == 0.0  # (nothing to tell the target from)


# Per-word keys hold every bit of a word id: ids that differ by 2**16 (or 2**15) are different words.

def test_token_cache_keys_word_ids_past_16_bits():
    cache, computed = ElmoTokenCache(10), []

    def encode(rows):
        computed.append(rows[:, -1].tolist())
        return rows.double() * 10

    small, large = [259, 66, 260, 7], [259, 66, 260, 7 + 2**16]
    rows = torch.tensor([small, large])
    assert torch.equal(cache.encode(encode, rows, []), rows.double() * 10)
    assert torch.equal(cache.encode(encode, rows[1:], []), rows[1:].double() * 10)  # from the cache
    cache = ElmoTokenCache(10)
    cache.encode(encode, rows[:1], [])
    assert torch.equal(cache.encode(encode, rows[1:], []), rows[1:].double() * 10)  # not the small id's row


def test_distinct_words_keeps_word_ids_past_16_bits():
    rows = torch.tensor([[259, 5, 260, 3], [259, 5, 260, 3 + 2**16], [259, 5, 260, 3 + 2**15], [259, 5, 260, 3]])
    distinct, inverse = distinct_words(rows)
    assert len(distinct) == 3 and torch.equal(distinct[inverse], rows)


# The inference fast paths keep copies derived from the weights (the char CNN's filter matrices and biases, the
# highway's stacked weights, each weight prepared for its kernel) and rebuild them when a weight they came from
# changes: each weight changed in place alone (bias-only fine-tuning, an edit) is seen. With plain BLAS, which reads a
# weight where it is, a weight missing from the fingerprint would go unseen; the kernels that copy it show it.
COPYING_KERNELS = [name for name in fast_linear.float32_kernels() if name != "blas"]
CHANGED_IN_PLACE = {
    "char CNN bias": lambda model: model.char_encoder.char_cnn[1].bias,
    "char projection weight": lambda model: model.char_encoder.projection.weight,
    "second layer bias": lambda model: model.layers[1].bias,
    "second layer projection weight": lambda model: model.layers[1].projection_weight,
    "second layer recurrent weight": lambda model: model.layers[1].recurrent_weight,
}


@pytest.mark.skipif(not COPYING_KERNELS, reason="no kernel of this torch build copies the weight")
@pytest.mark.parametrize("name", CHANGED_IN_PLACE)
def test_one_weight_changed_in_place_is_seen_by_the_inference_fast_path(name, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ELMO_KERNEL_CHOICES", str(tmp_path / "kernels.json"))
    kernel = COPYING_KERNELS[0]
    only = {kernel: fast_linear.float32_kernels()[kernel]}
    monkeypatch.setattr(fast_linear, "float32_kernels", lambda: only)
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(cell_size=32, projection_dim=16, num_highway_layers=1,
                                 char_cnn_filters=[[1, 8], [2, 8], [3, 16]])).eval()
    batch = ElmoTokenizer()([["the", "weight", "changes"], ["in", "place"]], is_split_into_words=True,
                            padding=True, return_tensors="pt")
    with torch.no_grad():
        before = model(**batch).hidden_states
        CHANGED_IN_PLACE[name](model).add_(0.5)  # (its version counter moves, nothing else changes)
        after = model(**batch).hidden_states
        reference = copy.deepcopy(model)
        reference.set_fast_path(False)
        expected = reference(**batch).hidden_states
    assert max((a - b).abs().max().item() for a, b in zip(before, after)) > 1e-3
    assert max((a - b).abs().max().item() for a, b in zip(after, expected)) < 1e-5


def test_a_float64_model_runs_inference_on_exact_float64_products(tmp_path, monkeypatch):
    """Only float32 weights go to FastLinear (its kernels are float32 ones); a float64 model's inference fast path
    takes the plain products and equals its plain path to float64 rounding."""
    monkeypatch.setenv("HF_ELMO_KERNEL_CHOICES", str(tmp_path / "kernels.json"))
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(cell_size=32, projection_dim=16, num_highway_layers=1,
                                 char_cnn_filters=[[1, 8], [2, 8]])).double().eval()
    batch = ElmoTokenizer()([["a", "float64", "model"], ["of", "it"]], is_split_into_words=True, padding=True,
                            return_tensors="pt")
    reference = copy.deepcopy(model)
    reference.set_fast_path(False)
    with torch.no_grad():
        found, expected = model(**batch), reference(**batch)
    linears = list(derived_weights(model.layers[0], "exact", ExactMultiplies)._linears.values())
    assert linears and not any(isinstance(linear, FastLinear) for linear in linears)
    for a, b in zip(found.hidden_states, expected.hidden_states):
        assert a.dtype == torch.float64 and torch.allclose(a, b, rtol=1e-12, atol=1e-12)


def test_a_proj_clip_without_a_projection_clips_nothing_on_the_inference_fast_path():
    """The plain loop clips a projection's output only: a layer without one (cell_size == projection_dim) whose
    config names a proj_clip is not clipped on the fast path either."""
    torch.manual_seed(0)
    layer = ElmoBiLstmLayer(ElmoConfig(cell_size=8, projection_dim=8, cell_clip=3.0, proj_clip=0.1)).eval()
    assert layer.projection_weight is None and layer.proj_clip == 0.1
    for parameter in layer.parameters():
        torch.nn.init.uniform_(parameter, -0.6, 0.6)
    inputs = torch.randn(2, 3, 5, 8)
    step_mask = torch.arange(5) < torch.tensor([5, 2, 4]).unsqueeze(1)
    h, c = torch.zeros(2, 3, 8), torch.zeros(2, 3, 8)
    with torch.no_grad():
        fast = layer(inputs, step_mask, h, c)
        plain = layer._plain_forward(inputs, step_mask, h, c)
    assert plain[0].abs().max() > 0.1  # (outputs past the clip value: a clip would show)
    for a, b in zip(fast, plain):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("first_cost, chosen, outputs", [(1.05, "first", 9), (1.2, "second", 10)])
def test_a_later_kernel_must_be_faster_by_more_than_the_margin(first_cost, chosen, outputs, tmp_path, monkeypatch):
    """"A candidate later in the order is taken only where it is faster by more than MARGIN" (10%), on a clock of
    the test's own (each call of a kernel advances it by the kernel's cost): a later kernel 5% faster loses to the
    first, one 20% faster wins."""
    assert MARGIN == 0.1
    monkeypatch.setenv("HF_ELMO_KERNEL_CHOICES", str(tmp_path / "kernels.json"))
    clock = [0.0]
    monkeypatch.setattr(fast_linear.time, "perf_counter", lambda: clock[0])

    def kernel(cost):
        def prepare(weight):
            def run(x, bias):
                clock[0] += cost
                return x @ weight.t() + (0 if bias is None else bias)
            return run
        return prepare

    torch.manual_seed(0)
    weight, x = torch.randn(outputs, 5), torch.randn(3, 5)  # (a shape of its own: choices are kept per shape)
    linear = FastLinear(weight, kernels={"first": kernel(first_cost * 1e-3), "second": kernel(1e-3)})
    assert torch.allclose(linear(x), x @ weight.t())
    assert fast_linear._FASTEST[(("first", "second"), (outputs, 5), False, torch.get_num_threads(), 4)] == chosen
    assert set(linear._prepared) == {chosen}


def test_a_stored_choice_that_names_no_candidate_is_measured_again(tmp_path, monkeypatch):
    """A choice in the machine's file naming no candidate of this FastLinear (an edited file, a kernel this build
    lacks) is measured again and stored anew, not looked up (a KeyError at the first multiply)."""
    path = tmp_path / "kernels.json"
    monkeypatch.setenv("HF_ELMO_KERNEL_CHOICES", str(path))
    weight, x = torch.randn(11, 5), torch.randn(3, 5)
    stored = json.dumps([["blas"], [11, 5], False, torch.get_num_threads(), 4])
    path.write_text(json.dumps({fast_linear._this_machine(): {stored: "no_such_kernel"}}))
    assert torch.allclose(FastLinear(weight, kernels={"blas": blas_linear})(x), x @ weight.t())
    assert json.loads(path.read_text())[fast_linear._this_machine()][stored] == "blas"
