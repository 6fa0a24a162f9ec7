"""The fused training paths (fused_bilstm.py, fused_char_encoder.py, fused_softmax.py) against autograd of the plain
computation that defines the model: the loss and every parameter's gradient, the options they cover and the ones
that fall back to the plain path, and 50 steps of pretraining on each path.

Gradients are compared as ||fast - reference|| / ||reference|| per parameter. The fast path runs in float32; the
reference is autograd of the plain path in float64 on a float64 copy of the same weights, with the same random
draws (dropout masks and negative samples do not depend on the dtype): the plain path's own float32 gradients
carry up to 1e-5 of rounding in the char CNN (oneDNN's convolution backward), so a float32 reference would
measure that more than the fast path. The biLSTM layer on its own is also held to the plain path in float32.
"""

import copy

import pytest
import torch

from conftest import DEVICES, ELMOFORMANYLANGS, ELMOFORMANYLANGS_MODELS, FIXTURE_SETS, FIXTURES, relative_error
from hf_elmo import ElmoConfig, ElmoForPreTraining, ElmoForTokenClassification, ElmoModel, ElmoTokenizer, fused_bilstm
from hf_elmo.fused_bilstm import LayerGraphs, _FusedBiLstm, fused_bilstm_layer, fused_training_fallback
from hf_elmo.fused_char_encoder import _CharFilters, distinct_words, fused_char_encoder_fallback
from hf_elmo.fused_softmax import _SampledSoftmax, fused_softmax_fallback
from hf_elmo.modeling_elmo import ElmoBiLstmLayer, sampled_softmax_loss
from modeling.data import EncodedText, StreamBatches, WordTable, load_sentences
from modeling.presets import TINY_MODEL
from modeling.pretrain import make_optimizer
from modeling.vocabulary import Vocabulary

TOLERANCE = 1e-5
TRAIN_TEXT = FIXTURES / "bilm-tf" / "train" / "data.txt"


def relative_errors(fast: dict, reference: dict) -> dict:
    assert fast.keys() == reference.keys()
    return {name: relative_error(fast[name], reference[name]) for name in reference}


def loss_and_gradients(model, run, fast: bool, seed: int = 0) -> tuple[float, dict]:
    """Loss and gradients of `run(model)` on the fast or the plain path, the random generator seeded first."""
    model.set_fast_path(fast)
    model.zero_grad(set_to_none=True)
    torch.manual_seed(seed)
    loss = run(model)
    loss.backward()
    gradients = {name: p.grad.double() for name, p in model.named_parameters() if p.grad is not None}
    return loss.item(), gradients


def assert_fast_matches_plain(model, run, tolerance=TOLERANCE) -> dict:
    """The fast path (float32) against the plain path in float64: the loss within `tolerance`, and every gradient
    within `tolerance` or, where cancellation makes a gradient's float32 value itself uncertain (a scalar summed
    over the whole batch, say), no further than twice the plain path's own float32 gradient. Returns the errors."""
    reference_model = copy.deepcopy(model).double()
    plain_loss, plain_gradients = loss_and_gradients(reference_model, run, fast=False)
    fast_loss, fast_gradients = loss_and_gradients(model, run, fast=True)
    _, plain32_gradients = loss_and_gradients(model, run, fast=False)
    assert abs(fast_loss - plain_loss) <= tolerance * abs(plain_loss)
    errors = relative_errors(fast_gradients, plain_gradients)
    plain32_errors = relative_errors(plain32_gradients, plain_gradients)
    too_far = {name: f"{error:.1e} (plain float32 {plain32_errors[name]:.1e})" for name, error in errors.items()
               if error > max(tolerance, 2 * plain32_errors[name])}
    assert not too_far, too_far
    return errors


def calls_to(monkeypatch, function_class) -> list:
    """Counts calls of an autograd Function's apply."""
    calls = []
    original = function_class.apply

    def counted(*args):
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(function_class, "apply", counted)
    return calls


# ---- the biLSTM layer ---------------------------------------------------------------------------------------


def random_layer(cell: int, proj: int, clip: float | None, seed: int = 0, dtype=torch.float32) -> ElmoBiLstmLayer:
    torch.manual_seed(seed)
    layer = ElmoBiLstmLayer(ElmoConfig(cell_size=cell, projection_dim=proj, cell_clip=clip, proj_clip=clip))
    for parameter in layer.parameters():
        torch.nn.init.uniform_(parameter, -0.6, 0.6)
    return layer.to(dtype)


def layer_inputs(batch=4, steps=6, proj=8, cell=16, dtype=torch.float32, seed=1):
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(2, batch, steps, proj, generator=generator, dtype=dtype).requires_grad_()
    h = torch.randn(2, batch, proj, generator=generator, dtype=dtype).requires_grad_()  # carried state
    c = (2 * torch.randn(2, batch, cell, generator=generator, dtype=dtype)).requires_grad_()
    lengths = torch.tensor([steps, steps - 2, 1, 0][:batch])  # full, padded, one step, an empty row
    mask = torch.arange(steps) < lengths.unsqueeze(1)
    return inputs, mask, h, c


def layer_run(layer, inputs, mask, h, c):
    """A loss over every output of the layer (or of any callable with its arguments): its outputs and both final
    states, with fixed random weights."""
    outputs, final_h, final_c = layer(inputs, mask, h, c)
    generator = torch.Generator().manual_seed(7)
    weights = [torch.randn(t.shape, generator=generator).to(t.device, t.dtype) for t in (outputs, final_h, final_c)]
    return sum((t * w).sum() for t, w in zip((outputs, final_h, final_c), weights))


def layer_gradients(layer, tensors, fast: bool):
    layer.use_fast_path = fast
    layer.zero_grad(set_to_none=True)
    for t in tensors:
        t.grad = None
    loss = layer_run(layer, *tensors)
    loss.backward()
    named = {"inputs": tensors[0], "h": tensors[2], "c": tensors[3], **dict(layer.named_parameters())}
    return loss.item(), {name: t.grad.double() for name, t in named.items()}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("cell,proj", [(16, 8), (8, 8)], ids=["projection", "no-projection"])
@pytest.mark.parametrize("clip", [0.5, None], ids=["clipped", "no-clip"])
def test_fused_layer_matches_plain_layer(cell, proj, clip, device, monkeypatch):
    """Masked and padded rows (an empty one too), carried state, clipping that really clips, with and without a cell
    projection: the fused layer's loss and gradients against the plain loop's, in float32 and float64 (the fast
    side ran the fused Function once: a fallback to the plain loop would compare the plain loop with itself)."""
    for dtype, tolerance in ((torch.float32, TOLERANCE), (torch.float64, 1e-12)):
        layer = random_layer(cell, proj, clip, dtype=dtype).to(device)
        tensors = [t.to(device).detach().requires_grad_(t.dtype.is_floating_point) for t in
                   layer_inputs(proj=proj, cell=cell, dtype=dtype)]
        tensors[1] = tensors[1].detach()
        plain_loss, plain = layer_gradients(layer, tensors, fast=False)
        calls = calls_to(monkeypatch, _FusedBiLstm)
        fast_loss, fast = layer_gradients(layer, tensors, fast=True)
        monkeypatch.undo()
        assert len(calls) == 1, dtype
        assert abs(fast_loss - plain_loss) <= tolerance * abs(plain_loss)
        errors = relative_errors(fast, plain)
        assert max(errors.values()) <= tolerance, errors
    if clip is not None:  # both clips cut: the cell state and the projection both hit +-clip somewhere
        with torch.no_grad():
            layer.use_fast_path = False
            outputs, _, final_c = layer(*[t.detach() for t in tensors])
        assert (final_c.abs() == clip).any()
        if cell != proj:
            assert (outputs.abs() == clip).any()


def test_fused_layer_keeps_where_each_clip_stopped_the_gradient():
    """The masks that backward applies: some cell states and some projections clipped, not all."""
    from hf_elmo.fused_bilstm import _forward

    layer = random_layer(16, 8, 0.5)
    inputs, mask, h, c = (t.detach() for t in layer_inputs())
    settings = (layer.cell_clip, layer.proj_clip, layer.forget_bias, torch.float32, False)
    with torch.no_grad():
        _, saved = _forward(inputs, mask, h, c, layer.input_weight, layer.recurrent_weight, layer.bias,
                            layer.projection_weight, settings)
    c_pass, h_pass = saved[-2], saved[-1]
    assert 0 < c_pass.float().mean() < 1 and 0 < h_pass.float().mean() < 1


@pytest.mark.parametrize("cell,proj", [(4, 2), (2, 2)], ids=["projection", "no-projection"])
def test_fused_layer_gradcheck(cell, proj):
    """float64 finite differences through the fused Function: inputs, states and every weight, masked rows and
    clipping (values kept away from the clip's kink)."""
    layer = random_layer(cell, proj, clip=1.5, dtype=torch.float64)
    inputs, mask, h, c = layer_inputs(batch=3, steps=3, proj=proj, cell=cell, dtype=torch.float64)
    c = (c * 0.3).detach().requires_grad_()
    weights = [p.detach().requires_grad_() for p in
               (layer.input_weight, layer.recurrent_weight, layer.bias, layer.projection_weight) if p is not None]
    settings = (layer.cell_clip, layer.proj_clip, layer.forget_bias, torch.float64, False)

    def function(inputs, h, c, *weights):
        projection = weights[3] if len(weights) == 4 else None
        return _FusedBiLstm.apply(inputs, mask, h, c, *weights[:3], projection, settings, None)

    assert torch.autograd.gradcheck(function, (inputs, h, c, *weights), eps=1e-6, atol=1e-6)


def test_fused_layer_gradcheck_through_a_projection_clip_that_clips():
    """float64 finite differences where the projection clip stops some gradients (the inputs above reach neither
    clip): a clip of 0.4 cuts some projections and not others, away from its kink."""
    from hf_elmo.fused_bilstm import _forward

    layer = random_layer(4, 2, clip=1.5, dtype=torch.float64)
    inputs, mask, h, c = layer_inputs(batch=3, steps=3, proj=2, cell=4, dtype=torch.float64)
    c, h = (c * 0.3).detach().requires_grad_(), (h * 0.2).detach().requires_grad_()
    weights = [p.detach().requires_grad_() for p in
               (layer.input_weight, layer.recurrent_weight, layer.bias, layer.projection_weight)]
    settings = (1.5, 0.4, layer.forget_bias, torch.float64, False)
    with torch.no_grad():
        _, saved = _forward(inputs.detach(), mask, h.detach(), c.detach(), *weights, settings)
    assert 0 < saved[-1].double().mean() < 1  # (where the projection passed the gradient: some, not all)

    def function(inputs, h, c, *weights):
        return _FusedBiLstm.apply(inputs, mask, h, c, *weights, settings, None)

    assert torch.autograd.gradcheck(function, (inputs, h, c, *weights), eps=1e-6, atol=1e-6)


def test_recorded_layer_replays_the_same_gradients():
    """The bookkeeping of the CUDA graph recordings (static inputs, copied outputs, one recording per shape that
    repeats), replayed on CPU by running the same code: the same gradients as the unrecorded path."""
    layer = random_layer(16, 8, 0.5)
    graphs = LayerGraphs(record=False)
    for seed in range(3):
        tensors = list(layer_inputs(seed=seed))
        gradients = []
        for recordings in (None, graphs):
            layer.zero_grad(set_to_none=True)
            for t in tensors:
                t.grad = None
            outputs, final_h, final_c = fused_bilstm_layer(layer, *tensors, graphs=recordings)
            (outputs.sum() + final_h.pow(2).sum() + final_c.sum()).backward()
            gradients.append([tensors[0].grad, tensors[2].grad, tensors[3].grad] + [p.grad for p in layer.parameters()])
        assert all(torch.equal(a, b) for a, b in zip(*gradients))
        assert len(graphs.recordings) == (0 if seed == 0 else 1)  # recorded once the shape came twice


def test_two_recorded_forwards_before_their_backwards_each_get_their_own_gradients(monkeypatch):
    """Two forwards of one recorded shape with other masks, then one backward through both: each backward replays
    with its own call's mask (it read the forward's static mask, the second call's: gradients 4-8% off). And a
    recording whose weights are no longer where the forward found them (FSDP gathers them anew for the backward)
    is not replayed: the backward runs unrecorded, with the same gradients."""
    layer = random_layer(16, 8, 0.5)
    graphs = LayerGraphs(record=False)
    first, second = layer_inputs(seed=1), layer_inputs(seed=2)
    second = (second[0], torch.arange(6) < torch.tensor([6, 6, 3, 1]).unsqueeze(1), second[2], second[3])
    for tensors in (first, first):  # (the shape comes twice: recorded)
        fused_bilstm_layer(layer, *tensors, graphs=graphs)
    assert len(graphs.recordings) == 1

    def gradients(run) -> list[torch.Tensor]:
        layer.zero_grad(set_to_none=True)
        for tensors in (first, second):
            for t in tensors:
                t.grad = None
        loss = sum(scale * layer_run(run, *tensors) for scale, tensors in ((1.0, first), (2.0, second)))
        loss.backward()
        return [t.grad for tensors in (first, second) for t in (tensors[0], tensors[2], tensors[3])] + [
            p.grad for p in layer.parameters()]

    expected = gradients(lambda *tensors: fused_bilstm_layer(layer, *tensors))
    found = gradients(lambda *tensors: fused_bilstm_layer(layer, *tensors, graphs=graphs))
    assert all(torch.equal(a, b) for a, b in zip(expected, found))

    # The weights moved between the forwards and their backward (as FSDP's gather may move them): the recorded
    # backward, which holds their old addresses on a GPU, is not replayed; the unrecorded one gives the gradients.
    (recording,) = graphs.recordings.values()
    replayed = []
    recorded_backward = type(recording).backward
    monkeypatch.setattr(type(recording), "backward", lambda self, *a: replayed.append(1) or recorded_backward(self, *a))

    left = []  # (the storages moved from stay alive: a freed one's address could come back for the next move)

    def moved_before_the_backward(*tensors):
        results = fused_bilstm_layer(layer, *tensors, graphs=graphs)
        left.append(layer.recurrent_weight.data)
        layer.recurrent_weight.data = layer.recurrent_weight.data.clone()  # (the same values, elsewhere)
        return results

    found = gradients(moved_before_the_backward)
    assert replayed == [] and all(torch.equal(a, b) for a, b in zip(expected, found))
    assert not recording.reads((layer.input_weight, layer.recurrent_weight, layer.projection_weight))


@pytest.mark.parametrize("change", ["cpu", "eval", "weights_changed"])
def test_a_models_training_recordings_go_with_a_move_or_a_change_of_weights(change):
    """The fused path's recordings of a layer (CUDA graphs on a GPU, with their static buffers) were kept for as
    long as the layer lived, after training, `.cpu()` included. They go on `.to()`/`.cpu()` and `weights_changed()`,
    and stay across a change of mode (an evaluation during training makes two: recording again after each would
    cost a step or two each time). (On CPU the recordings of `LayerGraphs(record=False)` stand in for the CUDA
    ones, kept in the same place.)"""
    model = ElmoModel(ElmoConfig(cell_size=16, projection_dim=8, char_cnn_filters=[[1, 4]], num_highway_layers=1))
    for layer in model.layers:
        fused_bilstm._CUDA_GRAPHS[layer] = LayerGraphs(record=False)
    {"cpu": model.cpu, "eval": model.eval, "weights_changed": model.weights_changed}[change]()
    kept = [layer in fused_bilstm._CUDA_GRAPHS for layer in model.layers]
    assert kept == [change == "eval"] * len(model.layers)


def test_a_shape_is_recorded_when_it_comes_twice_in_a_row_and_the_latest_are_kept():
    """LayerGraphs: a shape that alternates with another is never recorded; one that comes twice in a row is, and
    only the LayerGraphs.KEEP latest recordings are kept."""
    layer = random_layer(16, 8, 0.5)
    graphs = LayerGraphs(record=False)

    def run(batch: int) -> None:
        outputs, final_h, final_c = fused_bilstm_layer(layer, *layer_inputs(batch=batch), graphs=graphs)
        (outputs.sum() + final_h.sum() + final_c.sum()).backward()

    def recorded_batches() -> list[int]:
        return [key[0][0][0][1] for key in graphs.recordings]  # (the inputs' shape [2, B, S, P])

    for batch in (2, 3, 2, 3):
        run(batch)
    assert recorded_batches() == []
    for batch in (2, 2, 3, 3, 4, 4):
        run(batch)
    assert LayerGraphs.KEEP == 2 and recorded_batches() == [3, 4]
    run(3)  # (a kept recording is replayed, and becomes the latest)
    run(2)
    run(2)
    assert recorded_batches() == [3, 2]


def test_double_backward_fails_clearly_and_works_on_the_plain_path():
    layer = random_layer(16, 8, 0.5)
    inputs, mask, h, c = layer_inputs()
    outputs, _, _ = layer(inputs, mask, h, c)
    with pytest.raises(RuntimeError, match=r"first-order gradients only.*set_fast_path\(False\)"):
        torch.autograd.grad(outputs.pow(2).sum(), inputs, create_graph=True)
    layer.use_fast_path = False
    outputs, _, _ = layer(inputs, mask, h, c)
    (gradient,) = torch.autograd.grad(outputs.pow(2).sum(), inputs, create_graph=True)
    gradient.sum().backward()
    assert layer.input_weight.grad is not None


# ---- the char CNN and the sampled softmax -------------------------------------------------------------------


def test_char_filters_gradcheck():
    torch.manual_seed(0)
    words = [ElmoTokenizer().word_to_char_ids(w)[:12] for w in ["a", "tree", "trees", "seeds", "<S>"]]
    char_ids = torch.tensor(words)
    embedding = torch.randn(262, 3, dtype=torch.float64, requires_grad=True)
    filters = [torch.randn(count, 3, width, dtype=torch.float64, requires_grad=True) for width, count in [(1, 2), (3, 4)]]
    blocks = ((0, 3, 12), (3, 5, 12))
    assert torch.autograd.gradcheck(lambda e, *f: _CharFilters.apply(char_ids, blocks, torch.float64, e, *f),
                                    (embedding, *filters), eps=1e-6, atol=1e-6)


def test_char_filters_compute_only_the_gradients_asked_for(monkeypatch):
    """A frozen embedding or filter gets no gradient computed (one einsum per gradient asked for, and a filter's
    table of what each character receives only where its own or the embedding's gradient is asked for), and the
    others are the same as with everything training."""
    torch.manual_seed(0)
    char_ids = torch.tensor([ElmoTokenizer().word_to_char_ids(w)[:12] for w in ["a", "tree", "trees", "<S>"]])
    embedding = torch.randn(262, 3, dtype=torch.float64)
    filters = [torch.randn(count, 3, width, dtype=torch.float64) for width, count in [(1, 2), (3, 4), (2, 3)]]
    blocks = ((0, 4, 12),)
    real_einsum, einsums = torch.einsum, []
    monkeypatch.setattr(torch, "einsum", lambda equation, *operands: einsums.append(equation) or real_einsum(equation, *operands))
    real_scatter_add, tables = torch.Tensor.scatter_add_, []
    monkeypatch.setattr(torch.Tensor, "scatter_add_", lambda self, *args: tables.append(1) or real_scatter_add(self, *args))

    def gradients(trained: list[bool]) -> list:
        weights = [tensor.clone().requires_grad_(train) for tensor, train in zip([embedding, *filters], trained)]
        pooled = _CharFilters.apply(char_ids, blocks, torch.float64, *weights)
        einsums.clear()
        tables.clear()
        pooled.pow(2).sum().backward()
        return [weight.grad for weight in weights]

    everything = gradients([True] * 4)
    assert len(einsums) == 6 and len(tables) == 3
    for trained in ([False, True, False, True], [True, False, False, False], [False, False, True, False]):
        found = gradients(trained)
        assert len(einsums) == trained[0] * len(filters) + sum(trained[1:]), (trained, einsums)
        assert len(tables) == (len(filters) if trained[0] else sum(trained[1:])), trained
        for grad, expected, train in zip(found, everything, trained):
            assert (grad is None) if not train else torch.equal(grad, expected)


def test_sampled_softmax_gradcheck_and_hits():
    torch.manual_seed(0)
    hidden = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(20, 4, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(20, dtype=torch.float64, requires_grad=True)
    targets = torch.tensor([0, 1, 2, 1, 5, 19])
    words = torch.cat([targets, torch.tensor([1, 3, 0, 7])])
    log_q = torch.rand(10)
    hits = (torch.tensor([1, 3, 0]), torch.tensor([0, 0, 2]))  # rows whose target is one of the negatives
    assert torch.autograd.gradcheck(lambda h, w, b: _SampledSoftmax.apply(h, w, b, words, log_q, *hits, torch.float64),
                                    (hidden, weight, bias), eps=1e-6, atol=1e-6)
    def losses(fused: bool) -> torch.Tensor:  # (the same draws of targets and negatives for both)
        torch.manual_seed(3)
        return sampled_softmax_loss(hidden, torch.randint(0, 5, (6,)), weight, bias, 8, fused=fused)

    # The plain loss gives the same numbers (in float32: it rounds its logits to float32, the fused one keeps float64).
    assert torch.allclose(losses(fused=True), losses(fused=False).double(), rtol=1e-6)


def test_char_cnn_double_backward_fails_clearly_and_works_on_the_plain_path():
    encoder = tiny_model().char_encoder
    char_ids = tiny_batch()["input_ids"].flatten(0, 1)
    weight = encoder.char_embedding.weight
    with pytest.raises(RuntimeError, match=r"ElmoCharacterEncoder's fused .*first-order gradients only.*set_fast_path\(False\)"):
        torch.autograd.grad(encoder(char_ids).pow(2).sum(), weight, create_graph=True)
    encoder.use_fast_path = False
    (gradient,) = torch.autograd.grad(encoder(char_ids).pow(2).sum(), weight, create_graph=True)
    gradient.pow(2).sum().backward()
    assert weight.grad is not None and weight.grad.abs().sum() > 0


def test_sampled_softmax_double_backward_fails_clearly_and_works_on_the_plain_loss():
    torch.manual_seed(0)
    hidden = torch.randn(6, 4, requires_grad=True)
    weight, bias = torch.randn(20, 4, requires_grad=True), torch.randn(20, requires_grad=True)
    targets = torch.tensor([0, 1, 2, 1, 5, 19])
    losses = sampled_softmax_loss(hidden, targets, weight, bias, 8, fused=True)
    with pytest.raises(RuntimeError, match=r"fused sampled softmax .*first-order gradients only.*set_fast_path\(False\)"):
        torch.autograd.grad(losses.sum(), hidden, create_graph=True)
    (gradient,) = torch.autograd.grad(sampled_softmax_loss(hidden, targets, weight, bias, 8).sum(), hidden, create_graph=True)
    gradient.pow(2).sum().backward()
    assert weight.grad is not None and weight.grad.abs().sum() > 0


def test_distinct_words_inverse_gives_back_every_word():
    char_ids = torch.tensor([[259, 5, 260], [259, 6, 260], [259, 5, 260], [0, 0, 0], [259, 6, 260]])
    distinct, inverse = distinct_words(char_ids)
    assert len(distinct) == 3 and torch.equal(distinct[inverse], char_ids)


# ---- whole models ----------------------------------------------------------------------------------------------


def fixture_run(tokenizer, batches):
    """Two chained batches of the fixture sentences (padded rows; the second carries the first's state); a loss over
    every layer, the scalar mix and the final states."""

    def run(model):
        states = None
        for index, sentences in enumerate(batches):
            encoded = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
            if index == 0:
                with torch.no_grad():
                    states = model(**encoded).final_states
                continue
            output = model(**encoded, initial_states=states)
            weights = torch.Generator().manual_seed(index)
            loss = sum((t * torch.randn(t.shape, generator=weights).to(t.dtype)).sum()
                       for t in (*output.hidden_states, *output.elmo_representations, *output.final_states))
        return loss

    return run


@pytest.mark.parametrize("name", FIXTURE_SETS)
def test_fixture_models_fast_gradients_match_plain(converted, name):
    """Both real fixture models (skip connections on and off), in train mode, chained padded batches."""
    model = ElmoModel.from_pretrained(converted[name]).train()
    tokenizer = ElmoTokenizer.from_pretrained(converted[name])
    errors = assert_fast_matches_plain(model, fixture_run(tokenizer, FIXTURE_SETS[name].batches()[:2]))
    print(f"{name}: largest relative gradient difference {max(errors.values()):.1e}")


@pytest.mark.parametrize("name", ELMOFORMANYLANGS_MODELS)
def test_elmoformanylangs_models_fast_gradients_match_plain(converted_elmoformanylangs, name, monkeypatch):
    """ELMoForManyLangs' models: their own alphabet and forget bias, and (with_words) the word embedding concatenated
    in front of the highway's output before the projection, all through the fused paths, word embedding included."""
    import json

    folder = converted_elmoformanylangs[name]
    model = ElmoModel.from_pretrained(folder).train()
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    sentences = json.loads((ELMOFORMANYLANGS / "sentences.json").read_text(encoding="utf-8"))["sets"]
    batches = [group for group in sentences.values()][:2]
    layer_calls, char_calls = calls_to(monkeypatch, _FusedBiLstm), calls_to(monkeypatch, _CharFilters)
    errors = assert_fast_matches_plain(model, fixture_run(tokenizer, batches))
    assert len(char_calls) == 1 and len(layer_calls) == model.config.num_lstm_layers  # the one fast pass: fused
    assert ("char_encoder.word_embedding.weight" in errors) == (name == "with_words")


def test_token_classification_head_with_finetune_bilm_uses_the_fused_paths(converted, monkeypatch):
    folder = converted["allennlp-elmo"]
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    torch.manual_seed(0)  # the classifier's initialisation
    model = ElmoForTokenClassification.from_pretrained(folder, num_labels=3, finetune_bilm=True).train()
    encoded = tokenizer([["EU", "rejects", "German", "call"], ["Peter", "Blackburn"]], is_split_into_words=True,
                        padding=True, return_tensors="pt")
    labels = torch.tensor([[1, 0, 2, 0], [1, 1, -100, -100]])
    layer_calls, char_calls = calls_to(monkeypatch, _FusedBiLstm), calls_to(monkeypatch, _CharFilters)
    assert_fast_matches_plain(model, lambda m: m(**encoded, labels=labels).loss)
    assert len(layer_calls) == 2 and len(char_calls) == 1  # one fast pass: both layers and the char CNN fused


def stream_batches(rows=3, unroll=8):
    sentences = load_sentences([str(TRAIN_TEXT)])
    vocabulary = Vocabulary.from_file(FIXTURES / "bilm-tf" / "train" / "vocab.txt")
    table = WordTable(50)
    text = EncodedText.encode(sentences, table, vocabulary)
    return StreamBatches(text, table, vocabulary, rows, unroll, seed=1), len(vocabulary)


@pytest.fixture(scope="module")
def pretraining_data():
    return stream_batches()


@pytest.mark.parametrize("options", [
    {},
    {"cell_size": 16, "use_skip_connections": False},
    {"cell_clip": 0.05, "proj_clip": 0.05, "lm_dropout": 0.3},
], ids=["projection-skip-connections", "no-projection-no-skip", "tight-clips-and-dropout"])
def test_pretraining_fast_gradients_match_plain(pretraining_data, options):
    """ElmoForPreTraining: stream windows with carried state, both directions' own texts, the sampled softmax (with
    accidental hits), LM dropout with the same masks on both paths."""
    batches, vocab_size = pretraining_data
    config = ElmoConfig(**{**TINY_MODEL, "lm_vocab_size": vocab_size, "lm_negative_samples": 24, **options})
    torch.manual_seed(0)
    model = ElmoForPreTraining(config).train()

    def run(model):
        dtype = next(model.parameters()).dtype
        first = model(**batches.batch(0))
        states = tuple(s.detach() for s in first.final_states)
        return model(**batches.batch(1), initial_states=states).loss.to(dtype)

    assert_fast_matches_plain(model, run)


def test_fifty_pretraining_steps_give_the_same_losses_on_both_paths(pretraining_data):
    """AdamW, gradient clipping, carried state and LM dropout, as pretrain.py trains: 50 steps on each path."""
    batches, vocab_size = pretraining_data
    config = ElmoConfig(**{**TINY_MODEL, "lm_vocab_size": vocab_size, "lm_negative_samples": 24, "lm_dropout": 0.1})
    losses = {}
    for fast in (True, False):
        torch.manual_seed(0)
        model = ElmoForPreTraining(config).train()
        model.set_fast_path(fast)
        # pretrain.py's optimizer: torch's fused AdamW
        settings = {"optimizer": "adamw", "learning_rate": 3e-3, "weight_decay": 0.01}
        optimizer = make_optimizer(list(model.parameters()), settings, "cpu")
        assert optimizer.defaults["fused"]
        states, losses[fast] = None, []
        for step in range(50):
            output = model(**batches.batch(step), initial_states=states)
            output.loss.backward()
            states = tuple(s.detach() for s in output.final_states)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses[fast].append(output.loss.item())
    assert losses[True][-1] < losses[True][0] - 0.5  # it learns
    assert max(abs(a - b) for a, b in zip(losses[True], losses[False])) <= TOLERANCE, (losses[True], losses[False])


# ---- what falls back to the plain path ---------------------------------------------------------------------------


def tiny_model(**overrides) -> ElmoModel:
    torch.manual_seed(0)
    return ElmoModel(ElmoConfig(**{**TINY_MODEL, **overrides})).train()


def tiny_batch():
    return ElmoTokenizer()([["a", "small", "test"], ["another", "one", "of", "them"]], is_split_into_words=True,
                           padding=True, return_tensors="pt")


def paths_taken(monkeypatch, model, prepare=lambda: None, backward=True) -> dict:
    """Which training path each part takes for one step of `model`."""
    layer_calls, char_calls = calls_to(monkeypatch, _FusedBiLstm), calls_to(monkeypatch, _CharFilters)
    prepare()
    output = model(**tiny_batch())
    if backward and output.last_hidden_state.requires_grad:
        output.last_hidden_state.float().sum().backward()
    return {"biLSTM": "fused" if layer_calls else "plain", "char CNN": "fused" if char_calls else "plain"}


def test_which_options_fall_back_to_the_plain_path(monkeypatch):
    """The fused paths cover float32 and float64 weights, autocast, masks, states and checkpointing; these fall back
    to the plain path: use_fast_path = False, bf16/fp16 weights, inputs of another dtype outside autocast, no steps,
    and (char CNN only) forward hooks on its modules other than enable_input_require_grads' own."""
    assert paths_taken(monkeypatch, tiny_model()) == {"biLSTM": "fused", "char CNN": "fused"}
    assert paths_taken(monkeypatch, tiny_model().double()) == {"biLSTM": "fused", "char CNN": "fused"}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert paths_taken(monkeypatch, tiny_model(), backward=False) == {"biLSTM": "fused", "char CNN": "fused"}

    model = tiny_model()
    model.set_fast_path(False)
    assert paths_taken(monkeypatch, model) == {"biLSTM": "plain", "char CNN": "plain"}
    for half in (torch.bfloat16, torch.float16):
        model = tiny_model().to(half)
        assert paths_taken(monkeypatch, model) == {"biLSTM": "plain", "char CNN": "plain"}, half
        assert fused_char_encoder_fallback(model.char_encoder) == f"{half} weights (float32 and float64 are covered)"
    # The sampled softmax too (it had computed bf16 weights' logits in float32: 5e-3 off the plain definition's).
    config = ElmoConfig(**{**TINY_MODEL, "lm_vocab_size": 40, "lm_negative_samples": 8})
    batch = {**tiny_batch(), "labels": torch.randint(0, 40, (2, 4)), "backward_labels": torch.randint(0, 40, (2, 4))}
    for dtype, path in ((torch.float32, "fused"), (torch.bfloat16, "plain"), (torch.float16, "plain")):
        softmax_calls = calls_to(monkeypatch, _SampledSoftmax)
        model = ElmoForPreTraining(config).train().to(dtype)
        model(**batch).loss.backward()
        assert ("fused" if softmax_calls else "plain") == path, dtype
        assert fused_softmax_fallback(model.softmax.weight) == (
            None if path == "fused" else f"{dtype} weights (float32 and float64 are covered)")
    model = tiny_model()
    model.enable_input_require_grads()  # transformers' hook, which this path does not need
    assert paths_taken(monkeypatch, model) == {"biLSTM": "fused", "char CNN": "fused"}
    model.char_encoder.char_embedding.register_forward_hook(lambda module, inputs, output: output * 2)
    assert paths_taken(monkeypatch, model) == {"biLSTM": "fused", "char CNN": "plain"}
    assert fused_char_encoder_fallback(model.char_encoder) == "a forward hook on its char_embedding"
    model = tiny_model()
    model.char_encoder.highway[0].register_forward_pre_hook(lambda module, inputs: None)  # (any module's, pre too)
    assert paths_taken(monkeypatch, model) == {"biLSTM": "fused", "char CNN": "plain"}
    assert fused_char_encoder_fallback(model.char_encoder) == "a forward hook on its highway.0"

    layer = tiny_model().layers[0]
    inputs, h, c = torch.zeros(2, 2, 3, 16), torch.zeros(2, 2, 16), torch.zeros(2, 2, 64)
    assert fused_training_fallback(layer, inputs, h, c) is None
    assert "dtype" in fused_training_fallback(layer, inputs.double(), h, c)
    half_layer = tiny_model().to(torch.float16).layers[0]
    assert fused_training_fallback(half_layer, inputs.half(), h.half(), c.half()) == f"{torch.float16} weights (float32 and float64 are covered)"
    assert "no rows or no steps" == fused_training_fallback(layer, inputs[:, :, :0], h, c)
    assert fused_char_encoder_fallback(tiny_model().char_encoder) is None


def test_frozen_model_under_autograd_runs_the_inference_fast_path(monkeypatch):
    """Nothing needs a gradient (a frozen biLM inside a trained head): neither the fused nor the plain path runs."""
    model = tiny_model().requires_grad_(False)
    assert paths_taken(monkeypatch, model) == {"biLSTM": "plain", "char CNN": "plain"}  # not fused
    plain = copy.deepcopy(model)
    plain.set_fast_path(False)
    with torch.no_grad():
        expected = plain(**tiny_batch()).last_hidden_state
    calls = []
    monkeypatch.setattr(ElmoBiLstmLayer, "_plain_forward", lambda *args: calls.append(1))
    assert torch.allclose(model(**tiny_batch()).last_hidden_state, expected, atol=1e-6)
    assert not calls
    monkeypatch.undo()
    # transformers' enable_input_require_grads (frozen biLM, trained adapters, reentrant checkpointing): the token
    # vectors must then require gradients, which the plain char CNN gives, and the biLSTM layers train fused.
    model.enable_input_require_grads()
    assert paths_taken(monkeypatch, model) == {"biLSTM": "fused", "char CNN": "plain"}
    output = model(**tiny_batch()).last_hidden_state
    assert output.requires_grad and torch.allclose(output, expected, atol=1e-6)


def test_activation_checkpointing_with_the_fused_layers(monkeypatch):
    """Each biLSTM layer recomputed in backward through the fused Function: the same gradients."""
    model = tiny_model()
    run = lambda m: sum(t.sum() for t in m(**tiny_batch()).hidden_states)
    _, expected = loss_and_gradients(model, run, fast=True)
    model.activation_checkpointing_enable()
    assert all(layer.gradient_checkpointing for layer in model.layers)
    layer_calls = calls_to(monkeypatch, _FusedBiLstm)
    _, checkpointed = loss_and_gradients(model, run, fast=True)
    assert len(layer_calls) == 4  # each layer's forward, then again in backward
    assert max(relative_errors(checkpointed, expected).values()) < TOLERANCE


def test_bf16_autocast_gradients_are_near_float32_as_the_plain_paths_are():
    """Under bf16 autocast the fused paths multiply in bf16 and keep the cell in float32 (the plain path runs its
    cell in bf16 too): both approximate the float32 gradients, to the same order."""
    model = tiny_model()
    run = lambda m: sum(t.float().pow(2).sum() for t in m(**tiny_batch()).hidden_states)
    _, reference = loss_and_gradients(model, run, fast=False)
    errors = {}
    for fast in (True, False):
        model.set_fast_path(fast)
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = run(model)
        loss.backward()
        mixed = {name: p.grad.double() for name, p in model.named_parameters() if p.grad is not None}
        errors[fast] = relative_errors(mixed, reference)
    assert max(errors[True].values()) < 0.1, errors[True]
    assert sum(errors[True].values()) < 2 * sum(errors[False].values()), (errors[True], errors[False])


def test_float32_training_turns_tf32_off(tmp_path, monkeypatch):
    """pretrain.py without mixed precision: exact float32, no TF32 in CUDA's multiplies or cuDNN's convolutions,
    checked through a one-step run of pretrain.py's command line with both set on before (the settings are the
    process's: restored afterwards). Under bf16 they are left as they were."""
    from modeling import pretrain

    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        pretrain.set_float32_precision("bf16")
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        # (one run per process here: Accelerate keeps the first run's mixed precision for the process)
        arguments = ["--preset", "tiny", "--train-file", str(TRAIN_TEXT), "--max-steps", "1", "--save-steps", "0",
                     "--eval-steps", "0", "--mixed-precision", "no", "--output-dir", str(tmp_path / "run")]
        assert pretrain.main(arguments) == 0
        assert (tmp_path / "run" / "model.safetensors").is_file()
        assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def test_pretraining_keeps_freed_memory_for_the_next_step():
    """pretrain.py asks glibc to keep freed memory: a large buffer allocated again comes without page faults."""
    import resource

    from modeling.pretrain import keep_freed_memory

    def page_faults():
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(5):
            torch.empty(4 << 20).fill_(1.0)  # 16 MiB, freed at once
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    keep_freed_memory()
    page_faults()
    assert page_faults() < 100
