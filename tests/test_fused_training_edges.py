"""Edges of the fused training paths that no other test reached (each found by a mutation of the library that every
other test passed): a batch of no rows, states of another dtype, weights frozen one by one, a cell clip and a
projection clip of different values, float64 weights and a step mask with holes under autocast, a word that fills
every character position in static shapes, and the recordings' keys (which tensors train, the layer's settings,
where the weights are)."""

import pytest
import torch

from conftest import relative_error
from test_fused_training import calls_to, layer_run, random_layer

from hf_elmo import ElmoConfig, ElmoModel, ElmoTokenizer
from hf_elmo.fused_bilstm import LayerGraphs, _FusedBiLstm, fused_bilstm_layer, fused_training_fallback, multiply_dtype
from hf_elmo.fused_char_encoder import _CharFilters
from hf_elmo.static_shapes import static_shapes


# Three rows of 5 steps, of lengths 5, 3 and 1.
LENGTHS_MASK = torch.arange(5) < torch.tensor([5, 3, 1]).unsqueeze(1)


def test_a_batch_of_no_rows_trains_through_the_plain_loop():
    """"no rows or no steps" falls back: the fused Function cannot run B = 0 (its reshape of no elements is
    ambiguous); the plain loop gives the shapes and zero gradients."""
    layer = random_layer(16, 8, 0.5)
    inputs = torch.randn(2, 0, 5, 8, requires_grad=True)
    h, c = torch.zeros(2, 0, 8, requires_grad=True), torch.zeros(2, 0, 16, requires_grad=True)
    assert fused_training_fallback(layer, inputs, h, c) == "no rows or no steps"
    outputs, final_h, final_c = layer(inputs, torch.ones(0, 5, dtype=torch.bool), h, c)
    assert outputs.shape == (2, 0, 5, 8) and final_h.shape == (2, 0, 8) and final_c.shape == (2, 0, 16)
    (outputs.sum() + final_h.sum() + final_c.sum()).backward()
    for name, parameter in layer.named_parameters():
        assert parameter.grad is not None and not parameter.grad.any(), name


def test_inputs_or_either_state_of_another_dtype_fall_back():
    """Outside autocast, each of inputs, h and c of another dtype than the weights falls back to the plain loop (the
    fused Function would round a float64 state to float32 where the definition refuses the mix)."""
    layer = random_layer(8, 8, None)
    inputs, h, c = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 8), torch.randn(2, 3, 8)
    assert fused_training_fallback(layer, inputs, h, c) is None
    for name, args in {"inputs": (inputs.double(), h, c), "h": (inputs, h.double(), c),
                       "c": (inputs, h, c.double())}.items():
        assert "dtype" in (fused_training_fallback(layer, *args) or ""), name


GRADIENT_NAMES = ("inputs", "h", "c", "input_weight", "recurrent_weight", "bias", "projection_weight")


def gradients_of(layer, trained: set, fast: bool, monkeypatch) -> dict:
    """The gradients of the tensors in `trained` (the others need none) through one path."""
    generator = torch.Generator().manual_seed(1)
    tensors = {"inputs": torch.randn(2, 3, 5, 8, generator=generator), "h": torch.randn(2, 3, 8, generator=generator),
               "c": torch.randn(2, 3, 16, generator=generator)}
    for name, tensor in [*tensors.items(), *layer.named_parameters()]:
        tensor.requires_grad_(name in trained)
        tensor.grad = None
    layer.use_fast_path = fast
    with monkeypatch.context() as patch:
        calls = calls_to(patch, _FusedBiLstm)
        loss = layer_run(layer, tensors["inputs"], LENGTHS_MASK, tensors["h"], tensors["c"])
    assert len(calls) == (1 if fast else 0)
    loss.backward()
    every = {**tensors, **dict(layer.named_parameters())}
    return {name: every[name].grad for name in GRADIENT_NAMES if name in trained}


@pytest.mark.parametrize("trained", [
    {"recurrent_weight", "bias", "projection_weight"},  # the input weight frozen
    {"input_weight", "bias"},  # the recurrent weight and the projection frozen
    {"recurrent_weight"},
    {"input_weight"},
    {"h", "bias"},
    {"c", "projection_weight"},
    {"inputs"},
], ids=lambda trained: "+".join(sorted(trained)))
def test_frozen_weights_leave_the_others_gradients_as_the_plain_loops(trained, monkeypatch):
    """The fused backward computes only the gradients asked for (with the input weight frozen, the recurrent
    weight's gradient is the last P columns of a multiply over the recurrent half only): each pattern of frozen
    weights, states and inputs gives the trained ones the plain loop's gradients."""
    layer = random_layer(16, 8, 0.5)
    expected = gradients_of(layer, trained, fast=False, monkeypatch=monkeypatch)
    found = gradients_of(layer, trained, fast=True, monkeypatch=monkeypatch)
    assert found.keys() == expected.keys() == trained
    for name in trained:
        assert found[name] is not None and found[name].shape == expected[name].shape, name
        assert relative_error(found[name], expected[name]) <= 1e-5, name


def clipped_layer_and_inputs():
    """cell_clip 0.4 and proj_clip 0.25, both of which clip these inputs (every other test gives the two the same
    value, so a path that read one in the other's place passed)."""
    layer = random_layer(16, 8, 0.4)
    layer.proj_clip = 0.25
    inputs = torch.randn(2, 3, 6, 8, generator=torch.Generator().manual_seed(1))
    step_mask = torch.arange(6) < torch.tensor([6, 4, 1]).unsqueeze(1)
    h, c = torch.zeros(2, 3, 8), torch.zeros(2, 3, 16)
    with torch.no_grad():
        outputs, _, final_c = layer._plain_forward(inputs, step_mask, h, c)
    assert (outputs.abs() == 0.25).any() and (final_c.abs() == 0.4).any() and (final_c.abs() > 0.25).any()
    return layer, inputs, step_mask, h, c


def test_the_fused_training_path_reads_each_clip(monkeypatch):
    layer, inputs, step_mask, h, c = clipped_layer_and_inputs()
    inputs.requires_grad_()

    def run(fast: bool):
        layer.use_fast_path = fast
        layer.zero_grad(set_to_none=True)
        inputs.grad = None
        outputs, final_h, final_c = layer(inputs, step_mask, h, c)
        loss = outputs.pow(2).sum() + final_h.sum() + final_c.sum()
        loss.backward()
        return [loss, inputs.grad] + [p.grad for p in layer.parameters()]

    expected = run(fast=False)
    calls = calls_to(monkeypatch, _FusedBiLstm)
    found = run(fast=True)
    assert calls == [1]
    assert all(relative_error(a, b) <= 1e-5 for a, b in zip(found, expected))


def test_the_inference_fast_path_reads_each_clip():
    layer, inputs, step_mask, h, c = clipped_layer_and_inputs()
    layer.eval()
    with torch.no_grad():
        fast = layer(inputs, step_mask, h, c)
        plain = layer._plain_forward(inputs, step_mask, h, c)
    for a, b in zip(fast, plain):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-6)


def test_a_float64_layer_under_bf16_autocast_trains_in_float64(monkeypatch):
    """Autocast lowers float32 multiplies only, as torch's own does: a float64 layer under bf16 autocast runs its
    fused multiplies in float64 and equals the plain loop (which autocast leaves in float64) to float64 rounding."""
    layer = random_layer(16, 8, 0.5).double()
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(2, 3, 5, 8, generator=generator, dtype=torch.float64)
    h, c = torch.randn(2, 3, 8, dtype=torch.float64), torch.randn(2, 3, 16, dtype=torch.float64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert multiply_dtype(layer.input_weight) == torch.float64
        assert multiply_dtype(layer.input_weight.float()) == torch.bfloat16

    def run(fast: bool):
        layer.use_fast_path = fast
        layer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            outputs, final_h, final_c = layer(inputs, LENGTHS_MASK, h, c)
        (outputs.pow(2).sum() + final_h.sum() + final_c.sum()).backward()
        return [outputs, final_h, final_c] + [p.grad for p in layer.parameters()]

    expected = run(fast=False)
    calls = calls_to(monkeypatch, _FusedBiLstm)
    found = run(fast=True)
    assert calls == [1]
    for a, b in zip(found, expected):
        assert a.dtype == torch.float64 and torch.allclose(a, b, rtol=1e-10, atol=1e-10)


def test_autocast_with_holes_in_the_step_mask_keeps_the_state_across_them(monkeypatch):
    """`fused_bilstm_layer` takes any step mask (padding inside a pretraining row): under autocast the multiplies
    read h from a buffer of their own dtype, which must take each step's kept state (a masked step keeps the state
    before it), not the masked step's new h. Held to the float32 plain loop as closely as bf16 multiplies allow
    (about 1e-2; the masked step's h instead gave 0.14)."""
    layer = random_layer(16, 8, 3.0)
    inputs = (3 * torch.randn(2, 3, 6, 8, generator=torch.Generator().manual_seed(1))).requires_grad_()
    h, c = torch.zeros(2, 3, 8), torch.zeros(2, 3, 16)
    mask = torch.tensor([[True, True, False, False, True, True],
                         [True, False, True, False, True, False],
                         [True] * 6])

    def run(fast: bool, autocast: bool):
        layer.use_fast_path = fast
        layer.zero_grad(set_to_none=True)
        inputs.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            outputs, final_h, final_c = layer(inputs, mask, h, c)
        (outputs.float().pow(2).sum() + final_h.float().sum() + final_c.float().sum()).backward()
        return [outputs.float(), final_h.float(), final_c.float(), inputs.grad, layer.input_weight.grad,
                layer.recurrent_weight.grad]

    expected = run(fast=False, autocast=False)
    calls = calls_to(monkeypatch, _FusedBiLstm)
    found = run(fast=True, autocast=True)
    assert calls == [1]
    errors = [relative_error(a, b) for a, b in zip(found, expected)]
    assert max(errors) < 0.03, errors


def test_a_word_that_fills_every_character_position_in_static_shapes(monkeypatch):
    """Under `static_shapes()` each row is encoded in one block of all its characters: a word that fills all 50
    positions (longer words are cut to them) has windows reaching the last one, and its vector and gradients are the
    plain path's (the other static-shape tests spell short words, whose last positions repeat padding)."""
    torch.manual_seed(0)
    encoder = ElmoModel(ElmoConfig(cell_size=16, projection_dim=8, num_highway_layers=1,
                                   char_cnn_filters=[[1, 4], [2, 4], [3, 8]])).train().char_encoder
    char_ids = torch.tensor([ElmoTokenizer().word_to_char_ids(w) for w in ["a", "word", "x" * 30 + "yz" * 20]])
    assert bool((char_ids[2] != encoder.pad_char_id).all())

    def run(fast: bool):
        encoder.use_fast_path = fast
        encoder.zero_grad(set_to_none=True)
        with monkeypatch.context() as patch:
            calls = calls_to(patch, _CharFilters)
            if fast:
                with static_shapes():
                    vectors = encoder(char_ids)
            else:
                vectors = encoder(char_ids)
        assert len(calls) == (1 if fast else 0)
        vectors.pow(2).sum().backward()
        return [vectors] + [p.grad for p in encoder.parameters()]

    expected = run(fast=False)
    assert all(relative_error(a, b) <= 1e-5 for a, b in zip(run(fast=True), expected))


# ---- the recordings' keys, on CPU through LayerGraphs(record=False): the bookkeeping the CUDA graphs use --------

def recorded_step(layer, graphs, mask=LENGTHS_MASK) -> dict:
    """One forward and backward of the layer through `graphs` (None: no recordings), on fixed inputs; the outputs and
    each parameter's gradient."""
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(2, 3, 5, 8, generator=generator)
    h, c = torch.randn(2, 3, 8, generator=generator), torch.randn(2, 3, 16, generator=generator)
    layer.zero_grad(set_to_none=True)
    outputs, final_h, final_c = fused_bilstm_layer(layer, inputs, mask, h, c, graphs=graphs)
    (outputs.pow(2).sum() + final_h.sum() + final_c.sum()).backward()
    return {"outputs": outputs, "h": final_h, "c": final_c,
            **{name: parameter.grad for name, parameter in layer.named_parameters()}}


def assert_same_step(found: dict, expected: dict) -> None:
    assert found.keys() == expected.keys()
    for name, tensor in expected.items():
        assert found[name] is not None and torch.equal(found[name], tensor), name


def test_a_weight_unfrozen_after_its_shape_was_recorded_gets_its_gradient():
    """A recording holds the gradients its backward computes: a weight unfrozen between two steps of one shape
    (gradual unfreezing) must not replay the recording made while it was frozen."""
    layer, graphs = random_layer(16, 8, 0.5), LayerGraphs(record=False)
    layer.input_weight.requires_grad_(False)
    recorded_step(layer, graphs)
    recorded_step(layer, graphs)
    assert len(graphs.recordings) == 1 and recorded_step(layer, graphs)["input_weight"] is None
    layer.input_weight.requires_grad_(True)
    assert_same_step(recorded_step(layer, graphs), recorded_step(layer, None))


def test_a_padded_batch_after_full_ones_of_its_shape_is_masked():
    """A full batch's recording skips the masking: a padded batch of the same shape must get its own."""
    layer, graphs = random_layer(16, 8, 0.5), LayerGraphs(record=False)
    full = torch.ones(3, 5, dtype=torch.bool)
    recorded_step(layer, graphs, full)
    recorded_step(layer, graphs, full)
    assert len(graphs.recordings) == 1
    assert_same_step(recorded_step(layer, graphs), recorded_step(layer, None))


def test_a_parameter_replaced_after_its_shape_was_recorded_is_read():
    """A recording reads the weights it was made with (a CUDA graph, their addresses): parameters replaced by other
    tensors of the same shapes (load_state_dict(..., assign=True), FSDP's gather) must not replay it."""
    layer, graphs = random_layer(16, 8, 0.5), LayerGraphs(record=False)
    recorded_step(layer, graphs)
    recorded_step(layer, graphs)
    assert len(graphs.recordings) == 1
    layer.load_state_dict({name: tensor * 0.5 for name, tensor in layer.state_dict().items()}, assign=True)
    assert_same_step(recorded_step(layer, graphs), recorded_step(layer, None))


def _tiny_model(seed: int = 0) -> ElmoModel:
    torch.manual_seed(seed)
    return ElmoModel(ElmoConfig(char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 4], [3, 8]], num_highway_layers=1,
                                cell_size=16, projection_dim=8, max_characters_per_token=12))


def _gradients(model: ElmoModel, ids: torch.Tensor, fast: bool) -> tuple[torch.Tensor, dict]:
    model.set_fast_path(fast)
    model.zero_grad(set_to_none=True)
    output = model(input_ids=ids).last_hidden_state
    output.pow(2).sum().backward()
    return output.detach(), {name: p.grad.to_dense().clone() for name, p in model.named_parameters() if p.grad is not None}


SWAPPED_MODULES = {  # (a module of the class the model builds, with options the fast paths do not compute)
    "embedding padding_idx": ("char_encoder.char_embedding", lambda m: torch.nn.Embedding(262, 4, padding_idx=261)),
    "embedding max_norm": ("char_encoder.char_embedding", lambda m: torch.nn.Embedding(262, 4, max_norm=0.5)),
    "embedding scale_grad_by_freq": ("char_encoder.char_embedding",
                                     lambda m: torch.nn.Embedding(262, 4, scale_grad_by_freq=True)),
    "conv dilation": ("char_encoder.char_cnn.2", lambda m: torch.nn.Conv1d(4, 8, 3, dilation=2)),
    "conv padding": ("char_encoder.char_cnn.2", lambda m: torch.nn.Conv1d(4, 8, 3, padding=1)),
    "conv without bias": ("char_encoder.char_cnn.2", lambda m: torch.nn.Conv1d(4, 8, 3, bias=False)),
}


@pytest.mark.parametrize("case", SWAPPED_MODULES)
def test_a_module_swapped_in_with_other_options_is_called_by_every_path(case):
    """The fast paths compute an embedding and a convolution from their weights with the options the model builds
    them with: a module swapped in with others (a padding_idx, max_norm, a dilation, padding, no bias) was computed
    without them: a padding row's gradient of 8.7 where the module gives 0, another loss, or a TypeError. Such a
    module is called now: the fast and the plain paths agree, in training and in inference."""
    name, make = SWAPPED_MODULES[case]
    model = _tiny_model()
    parent, attribute = name.rsplit(".", 1)
    torch.manual_seed(1)
    model.get_submodule(parent)._modules[attribute] = make(model)
    ids = ElmoTokenizer(max_characters_per_token=12)(["a dog , a cat", "the dog ran"], padding=True,
                                                     return_tensors="pt")["input_ids"]
    model.train()
    (fast_output, fast), (plain_output, plain) = _gradients(model, ids, True), _gradients(model, ids, False)
    assert torch.allclose(fast_output, plain_output, atol=1e-6)
    assert fast.keys() == plain.keys() and all(relative_error(fast[key], plain[key]) < 1e-5 for key in plain), case
    model.eval()
    with torch.no_grad():
        model.set_fast_path(True)
        inferred = model(input_ids=ids).last_hidden_state
    assert torch.allclose(inferred, plain_output, atol=1e-6)


def test_backward_and_every_module_hooks_make_the_encoder_call_its_modules():
    """A backward hook on the character embedding or a convolution, and a hook on every module (a profiler's), never
    ran on the fused path (which calls no module): a backward pre-hook that zeroes the embedding's gradient left it at
    8.2. Each makes the encoder call its modules now."""
    from torch.nn.modules.module import register_module_forward_hook

    ids = ElmoTokenizer(max_characters_per_token=12)(["a dog , a cat"], return_tensors="pt")["input_ids"]
    model = _tiny_model()
    handle = model.char_encoder.char_embedding.register_full_backward_pre_hook(
        lambda module, grad_output: tuple(torch.zeros_like(g) for g in grad_output))
    _, fast = _gradients(model, ids, True)
    handle.remove()
    assert "char_encoder.char_embedding.weight" not in fast or not fast["char_encoder.char_embedding.weight"].any()
    seen = []
    handle = register_module_forward_hook(lambda module, args, output: seen.append(type(module).__name__))
    try:
        _gradients(model, ids, True)
        # The sampled softmax, which never calls its module (with such a hook or without), still trains under it
        # (PyTorch's FlopCounterMode installs one): it was refused for a while.
        from hf_elmo import ElmoForPreTraining

        config = ElmoConfig(char_embedding_dim=4, char_cnn_filters=[[1, 4]], num_highway_layers=1, cell_size=16,
                            projection_dim=8, max_characters_per_token=12, lm_vocab_size=20, lm_negative_samples=4)
        pretraining, labels = ElmoForPreTraining(config).train(), torch.tensor([[1, 2, 3, 4, 5]])
        pretraining(input_ids=ids, labels=labels, backward_labels=labels).loss.backward()
    finally:
        handle.remove()
    assert seen.count("Embedding") == 2 and seen.count("Conv1d") == 4, seen


def test_torch_func_transforms_and_forward_mode_ad_run_the_plain_computation():
    """torch.func.grad over the parameters failed on the fast paths (a data pointer read on the host, autograd
    Functions without rules for the transforms), and forward-mode AD too: both run the plain computation, whose
    numbers they give."""
    from torch.autograd import forward_ad
    from torch.func import functional_call, grad

    model = _tiny_model().train()
    ids = ElmoTokenizer(max_characters_per_token=12)(["a dog , a cat", "the dog ran"], padding=True,
                                                     return_tensors="pt")["input_ids"]
    parameters = {name: p.detach() for name, p in model.named_parameters()}

    def loss(weights):
        return functional_call(model, weights, (ids,)).last_hidden_state.pow(2).sum()

    _, expected = _gradients(model, ids, False)
    model.set_fast_path(True)
    found = grad(loss)(parameters)
    assert all(relative_error(found[key], expected[key]) < 1e-5 for key in expected)
    layer = model.layers[0]
    inputs = torch.randn(2, 2, 5, 8)
    mask, zeros_h, zeros_c = torch.ones(2, 5, dtype=torch.bool), torch.zeros(2, 2, 8), torch.zeros(2, 2, 16)
    tangent = torch.randn(2, 2, 5, 8)
    tangents = {}
    for fast in (True, False):
        layer.use_fast_path = fast
        with forward_ad.dual_level():
            output = layer(forward_ad.make_dual(inputs, tangent), mask, zeros_h, zeros_c)[0]
            tangents[fast] = forward_ad.unpack_dual(output).tangent
    assert torch.allclose(tangents[True], tangents[False], atol=1e-6)


def test_a_softmax_without_a_bias_trains_with_the_full_softmax_and_the_sampled_one_says_so():
    """A softmax replaced by a Linear without a bias failed deep inside the sampled softmax ('NoneType' object has no
    attribute 'index_select'): it is one error naming the remedy; the full softmax calls the module, and trains."""
    from hf_elmo import ElmoForPreTraining

    torch.manual_seed(0)
    config = ElmoConfig(char_embedding_dim=4, char_cnn_filters=[[1, 4]], num_highway_layers=1, cell_size=16,
                        projection_dim=8, max_characters_per_token=12, lm_vocab_size=20, lm_negative_samples=4)
    model = ElmoForPreTraining(config).train()
    model.softmax = torch.nn.Linear(8, 20, bias=False)
    ids = ElmoTokenizer(max_characters_per_token=12)(["a dog ran"], return_tensors="pt")["input_ids"]
    labels = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match=r"^the sampled softmax scores rows of the softmax's weight without calling "
                                         r"the module, and its softmax has no bias, which the model builds it with: "
                                         r"train with the full softmax \(lm_negative_samples=0\), which calls it$"):
        model(input_ids=ids, labels=labels, backward_labels=labels)
    model.config.lm_negative_samples = 0
    model(input_ids=ids, labels=labels, backward_labels=labels).loss.backward()
    assert model.softmax.weight.grad.abs().sum() > 0


def test_the_fused_filters_gradients_have_their_weights_strides():
    """The width-1 filter's gradient came back with strides (4, 1, 4) where its weight has (4, 1, 1): contiguous by
    torch's rule (a dimension of size 1), but DDP's buckets compare strides exactly, copied it, and warned on every
    process ("Grad strides do not match bucket view strides"). Each filter's gradient has its weight's strides."""
    model = _tiny_model().train()
    ids = ElmoTokenizer(max_characters_per_token=12)(["a dog , a cat"], return_tensors="pt")["input_ids"]
    model(input_ids=ids).last_hidden_state.sum().backward()
    for conv in model.char_encoder.char_cnn:
        assert conv.weight.grad.stride() == conv.weight.stride(), (conv.weight.shape, conv.weight.grad.stride())
