"""The inference fast paths against the plain computation they reorganise, the token cache, and the opt-in
approximate modes. The plain path is the definition; every exact fast path must match it within 1e-6."""

import copy
import gc
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
import weakref

import numpy as np
import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import tree_map
from transformers import pipeline

from conftest import DEVICES, FIXTURE_SETS, FIXTURES, unwritable_folder

from hf_elmo import (
    ElmoConfig,
    ElmoEmbedder,
    ElmoForPreTraining,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
    approximate,
    fast_bilstm,
    fast_linear,
)
from hf_elmo.approximate import Bf16Multiplies, approximation_deviation, native_bfloat16_extension
from hf_elmo.fast_bilstm import ExactMultiplies, built_derived_weights, derived_weights
from hf_elmo.fast_linear import FastLinear
from hf_elmo.fast_char_encoder import fast_char_encoder
from hf_elmo.fused_char_encoder import fused_char_encoder_fallback
from hf_elmo.modeling_elmo import ElmoHighway
from hf_elmo.tokenization_elmo import PAD_CHAR_ID


@pytest.fixture(scope="module")
def fixture_model(converted):
    folder = converted["allennlp-elmo"]
    return ElmoModel.from_pretrained(folder).eval(), ElmoTokenizer.from_pretrained(folder)


def plain(model: ElmoModel) -> ElmoModel:
    """A copy of `model` that runs only the plain computation."""
    model = copy.deepcopy(model)
    model.char_encoder.use_fast_path = False
    model.char_encoder.token_cache.max_words = 0
    for layer in model.layers:
        layer.use_fast_path = False
    return model


def largest_difference(first, second) -> float:
    return max((a - b).abs().max().item() for a, b in zip(first, second))


def outputs(output) -> list[torch.Tensor]:
    return list(output.hidden_states) + list(output.elmo_representations) + list(output.final_states)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", FIXTURE_SETS)
def test_fast_path_matches_plain_path_over_chained_batches(converted, name, device):
    """All 10 fixture batches, the state carried from batch to batch (so non-zero initial states too)."""
    model = ElmoModel.from_pretrained(converted[name]).to(device).eval()
    reference = plain(model)
    tokenizer = ElmoTokenizer.from_pretrained(converted[name])
    fast_states = plain_states = None
    with torch.no_grad():
        for sentences in FIXTURE_SETS[name].batches():
            batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt").to(device)
            fast, slow = model(**batch, initial_states=fast_states), reference(**batch, initial_states=plain_states)
            fast_states, plain_states = fast.final_states, slow.final_states
            for a, b in zip(outputs(fast), outputs(slow)):  # cell states reach the clip (3): 1e-6 relative
                assert torch.allclose(a, b, rtol=1e-6, atol=1e-6)
    assert len(model.char_encoder.token_cache) > 0  # the fast path really ran


def count_steps(layer) -> list[int]:
    """The LSTM steps (positions of the step mask) that each later call of the biLSTM layer `layer` runs."""
    steps_run = []
    layer.register_forward_pre_hook(lambda layer, args: steps_run.append(int(args[1].sum())))
    return steps_run


@pytest.mark.parametrize("do_layer_norm", [False, True])
@pytest.mark.parametrize("fast", [True, False])
def test_without_final_states_the_last_step_is_skipped_and_no_output_changes(fixture_model, fast, do_layer_norm):
    model, tokenizer = fixture_model
    model = copy.deepcopy(model) if fast else plain(model)
    for mix in model.scalar_mixes:
        mix.do_layer_norm = do_layer_norm
    steps_run = count_steps(model.layers[0])
    sentences = FIXTURE_SETS["allennlp-elmo"].batches()[2]
    batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        full, skipped = model(**batch), model(**batch, output_final_states=False)
    assert skipped.final_states is None
    words = sum(len(sentence) for sentence in sentences)
    # <S> words </S> per row; without final states each direction stops before its row's last position.
    assert steps_run == [words + 2 * len(sentences), words + (2 * len(sentences) if do_layer_norm else len(sentences))]
    for a, b in zip([*full.hidden_states, *full.elmo_representations], [*skipped.hidden_states, *skipped.elmo_representations]):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("user", ["token head", "sequence head", "feature pipeline", "token pipeline", "embedder",
                                  "stateful embedder"])
def test_heads_embedder_and_pipelines_skip_the_last_step(converted, user):
    """The task heads, the stateless embedder and the pipelines need no final states: each row's last LSTM step
    is skipped (a stateful embedder carries the state, so it runs every step)."""
    folder = converted["allennlp-elmo"]
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    texts = [" ".join(words) for words in FIXTURE_SETS["allennlp-elmo"].batches()[2]]
    words = [tokenizer.tokenize(text) for text in texts]
    if user.endswith("head"):
        head = ElmoForTokenClassification if user == "token head" else ElmoForSequenceClassification
        model = head.from_pretrained(folder, num_labels=3).eval()
        run = lambda: model(**tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt"))
        layer = model.elmo.layers[0]
    elif user.endswith("pipeline"):
        if user == "token pipeline":
            model = ElmoForTokenClassification.from_pretrained(folder, num_labels=3)
            task, layer = "token-classification", model.elmo.layers[0]
        else:
            model = ElmoModel.from_pretrained(folder)
            task, layer = "feature-extraction", model.layers[0]
        run = lambda: pipeline(task, model=model, tokenizer=tokenizer)(texts, batch_size=2)
    else:
        embedder = ElmoEmbedder(folder, stateful=user == "stateful embedder")
        run = lambda: list(embedder.embed_sentences(words, batch_size=2))
        layer = embedder.model.layers[0]
    steps_run = count_steps(layer)
    with torch.no_grad():
        run()
    # <S> words </S> per row; without final states each direction stops before its row's last position.
    last_steps = len(texts) * (2 if user == "stateful embedder" else 1)
    assert sum(steps_run) == sum(map(len, words)) + last_steps, steps_run


@pytest.fixture(scope="module")
def original_size_layer():
    """One biLSTM layer of the original size (4096 cells, 512 projection)."""
    torch.manual_seed(0)
    layer = ElmoModel(ElmoConfig(num_lstm_layers=1, num_highway_layers=0, char_cnn_filters=[[1, 4]])).layers[0].eval()
    return layer, torch.get_rng_state()  # (each test draws its inputs from here on)


KERNEL_CASES = [("measured", zero_start, repeat) for zero_start in (True, False) for repeat in (False, True)] + [
    (kernel, False, repeat) for kernel in fast_linear.float32_kernels() for repeat in (False, True)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernel, zero_start, inputs_repeat", KERNEL_CASES)
def test_original_size_layer_fast_path_matches_plain_with_every_kernel(
    original_size_layer, zero_start, inputs_repeat, device, kernel, monkeypatch
):
    """An original-size layer, with the kernels measured fastest and with each candidate alone (MKL's packed
    weights, oneDNN's reordered ones, plain BLAS). Ragged lengths, a row of one step, zero or random initial
    state; and inputs of a few distinct rows (as token vectors repeat), whose gates are computed once."""
    if kernel != "measured":
        only = {kernel: fast_linear.float32_kernels()[kernel]}
        monkeypatch.setattr(fast_linear, "float32_kernels", lambda: only)
    layer, random_state = original_size_layer
    layer = copy.deepcopy(layer).to(device)
    torch.set_rng_state(random_state)
    lengths = torch.tensor([9, 1, 5, 9, 2])
    step_mask = torch.arange(9) < lengths[:, None]
    if inputs_repeat:
        inputs = torch.randn(4, 512)[torch.randint(0, 4, (2, 5, 9))]
    else:
        inputs = torch.randn(2, 5, 9, 512)
    inputs = inputs * step_mask[None, :, :, None]
    h = torch.zeros(2, 5, 512) if zero_start else torch.randn(2, 5, 512) * 0.5
    c = torch.zeros(2, 5, 4096) if zero_start else torch.randn(2, 5, 4096)
    inputs, step_mask, h, c = (tensor.to(device) for tensor in (inputs, step_mask, h, c))
    with torch.no_grad():
        fast = layer(inputs, step_mask, h, c, inputs_repeat=inputs_repeat)
        slow = layer._plain_forward(inputs, step_mask, h, c)
        alone = layer(inputs[:, 2:3], step_mask[2:3], h[:, 2:3], c[:, 2:3], inputs_repeat=inputs_repeat)  # one sentence
    if device == "cpu":
        linears = list(derived_weights(layer, "exact", ExactMultiplies)._linears.values())
        assert linears and all(isinstance(linear, FastLinear) for linear in linears)
        if kernel != "measured":  # (the candidate alone is what ran)
            assert all(set(linear._prepared) == {kernel} for linear in linears)
    else:  # on a GPU the exact path is the CUDA graphs' static loop (cuda_graphs.py), not these multiplies
        assert built_derived_weights(layer, "exact") is None
        assert built_derived_weights(layer, "cuda_graphs") is not None
    # Unit-scale random inputs drive outputs and states up to the clip (3): hold them to 1e-6 relative, 3e-6 absolute
    # (sums of 4096 products in another order: MKL's packed kernel on AMD EPYC differs from the plain path by 2.5e-6).
    for a, b in zip(fast, slow):
        assert torch.allclose(a, b, rtol=1e-6, atol=3e-6)
    assert torch.all(fast[0][:, 1, 1:] == 0) and torch.all(fast[0][:, 2, 5:] == 0)
    for a, b in zip(alone, slow):
        assert torch.allclose(a, b[:, 2:3], rtol=1e-6, atol=3e-6)


@pytest.fixture
def kernel_choices(tmp_path, monkeypatch):
    """A file of kernel choices of the test's own."""
    path = tmp_path / "kernels.json"
    monkeypatch.setenv("HF_ELMO_KERNEL_CHOICES", str(path))
    return path


def test_fast_linear_takes_the_fastest_kernel_for_the_shape_and_keeps_only_its_weights(kernel_choices):
    """A kernel that is measurably slower loses, even listed first; every weight of the same shape then takes
    the winner without timing again, and holds no prepared copy for the loser."""
    prepared = []

    def kernel(name, pause):
        def prepare(weight):
            prepared.append(name)

            def run(x, bias):
                time.sleep(pause)
                return x @ weight.t() + (0 if bias is None else bias)

            return run
        return prepare

    kernels = {"slow": kernel("slow", 0.003), "quick": kernel("quick", 0.0)}
    torch.manual_seed(0)
    first, second = FastLinear(torch.randn(6, 5), kernels=kernels), FastLinear(torch.randn(6, 5), kernels=kernels)
    x = torch.randn(3, 5)
    assert torch.allclose(first(x), x @ first.weight.t())
    assert set(first._prepared) == {"quick"}
    prepared.clear()
    assert torch.allclose(second(x, torch.ones(6)), x @ second.weight.t() + 1)  # with a bias: its own timing
    second(x)
    assert prepared.count("quick") == 1 and set(second._prepared) == {"quick"}
    # Within the margin, the first in order of preference is kept (noise does not flip the choice).
    equal = {"first": kernel("first", 0.002), "second": kernel("second", 0.002)}
    assert FastLinear(torch.randn(7, 5), kernels=equal)(x).shape == (3, 7)
    assert fast_linear._FASTEST[(("first", "second"), (7, 5), False, torch.get_num_threads(), 4)] == "first"
    assert "first" in kernel_choices.read_text() and "quick" in kernel_choices.read_text()


def test_a_models_multiplies_choose_among_every_float32_kernel_of_this_build(fixture_model, kernel_choices, monkeypatch):
    """The README's "kernels chosen by measurement": a model's exact multiplies are measured among every float32
    candidate of this build of torch (MKL's packed weights, oneDNN's reordered ones, plain BLAS; at least two
    here), each choice recorded in the machine's file with the candidates it was made among."""
    model, tokenizer = fixture_model
    model = copy.deepcopy(model)
    monkeypatch.setattr(fast_linear, "_FASTEST", {})
    candidates = list(fast_linear.float32_kernels())
    assert len(candidates) >= 2 and "blas" in candidates
    batch = tokenizer(FIXTURE_SETS["allennlp-elmo"].batches()[0], is_split_into_words=True, padding=True,
                      return_tensors="pt")
    with torch.no_grad():
        model(**batch)
    linears = [linear for layer in model.layers
               for linear in derived_weights(layer, "exact", ExactMultiplies)._linears.values()]
    assert linears and all(list(linear.kernels) == candidates for linear in linears)
    choices = json.loads(kernel_choices.read_text())[fast_linear._this_machine()]
    assert choices and all(json.loads(key)[0] == candidates and chosen in candidates for key, chosen in choices.items())


def test_kernel_choices_are_shared_by_the_processes_of_a_machine(kernel_choices):
    """A choice in the file is what every process takes, without timing (so that runs give the same bits):
    here one no measurement would make, the plain BLAS call for a large weight and many rows."""
    key = json.dumps([list(fast_linear.float32_kernels()), [3000, 700], True, torch.get_num_threads(), 256])
    kernel_choices.write_text(json.dumps({fast_linear._this_machine(): {key: "blas"}}))
    program = ("import torch; from hf_elmo import fast_linear\n"
               "linear = fast_linear.FastLinear(torch.randn(3000, 700)); linear(torch.randn(300, 700), torch.zeros(3000))\n"
               "print(*linear._prepared)")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True,
                            env={**os.environ, "HF_ELMO_KERNEL_CHOICES": str(kernel_choices)})
    assert result.stdout.split() == ["blas"]
    linear = FastLinear(torch.randn(3000, 700))
    linear(torch.randn(300, 700), torch.zeros(3000))
    assert set(linear._prepared) == {"blas"}


def test_kernel_choices_are_kept_per_number_of_threads(kernel_choices, monkeypatch):
    """README: a choice is made per weight shape, number of rows and number of threads (where another kernel can be
    fastest, and rounds otherwise): one stored for another thread count is not taken, this count measures its own,
    and the stored one is what a run at that count takes."""
    monkeypatch.setattr(fast_linear, "_FASTEST", {})
    kernels = {"blas": fast_linear.blas_linear, "also_blas": fast_linear.blas_linear}
    threads = torch.get_num_threads()
    key = lambda count: json.dumps([list(kernels), [9, 5], False, count, 4])  # noqa: E731
    machine = fast_linear._this_machine()
    kernel_choices.write_text(json.dumps({machine: {key(threads + 1): "also_blas"}}))
    FastLinear(torch.randn(9, 5), kernels=kernels)(torch.randn(3, 5))
    stored = json.loads(kernel_choices.read_text())[machine]
    assert stored.keys() == {key(threads), key(threads + 1)} and stored[key(threads + 1)] == "also_blas"
    try:
        torch.set_num_threads(threads + 1)
        linear = FastLinear(torch.randn(9, 5), kernels=kernels)
        linear(torch.randn(3, 5))
    finally:
        torch.set_num_threads(threads)
    assert set(linear._prepared) == {"also_blas"}


def test_kernel_choices_are_this_machines_and_survive_a_damaged_file(kernel_choices, monkeypatch):
    """The file keeps choices per CPU and torch build: another machine's are neither used nor lost. A file that
    does not read (cut short, say) is measured afresh and written whole again, atomically."""
    monkeypatch.setattr(fast_linear, "_FASTEST", {})
    kernels = {"blas": fast_linear.blas_linear}
    machine = f"{fast_linear.cpu_name()}; torch {torch.__version__}"
    fields = fast_linear.cpuinfo()
    if "cpu family" in fields:  # kinds that share a model name ("AMD EPYC") keep choices of their own
        assert machine.startswith(f"{fields['model name']} (family {fields['cpu family']}, model {fields['model']}); ")
    key = json.dumps([["blas"], [9, 5], False, torch.get_num_threads(), 4])
    other = {"Another CPU; torch 0.0": {key: "onednn"}}
    kernel_choices.write_text(json.dumps(other))
    FastLinear(torch.randn(9, 5), kernels=kernels)(torch.randn(3, 5))
    stored = json.loads(kernel_choices.read_text())
    assert stored["Another CPU; torch 0.0"] == other["Another CPU; torch 0.0"]
    assert stored[machine] == {key: "blas"}
    monkeypatch.setattr(fast_linear, "_FASTEST", {})
    kernel_choices.write_text('{"half a fi')
    FastLinear(torch.randn(9, 5), kernels=kernels)(torch.randn(3, 5))
    assert json.loads(kernel_choices.read_text()) == {machine: {key: "blas"}}
    assert not [p.name for p in kernel_choices.parent.iterdir() if p.name.startswith(".kernels")]


@pytest.mark.parametrize("entry", [None, [], "blas", 3])
def test_kernel_choices_of_this_machine_that_are_no_dict_count_as_none(kernel_choices, monkeypatch, entry):
    """A file whose entry for this machine is null (or a list, a string...) is measured afresh, and the entry
    written again as a dict; the other machines' entries stay."""
    monkeypatch.setattr(fast_linear, "_FASTEST", {})
    machine = fast_linear._this_machine()
    kernel_choices.write_text(json.dumps({machine: entry, "Another CPU; torch 0.0": None}))
    x = torch.randn(3, 5)
    linear = FastLinear(torch.randn(9, 5), kernels={"blas": fast_linear.blas_linear})
    assert torch.allclose(linear(x), x @ linear.weight.t())
    key = json.dumps([["blas"], [9, 5], False, torch.get_num_threads(), 4])
    assert json.loads(kernel_choices.read_text()) == {machine: {key: "blas"}, "Another CPU; torch 0.0": None}


@pytest.mark.parametrize("choice", [["blas"], {"blas": 1}, 3, None, "no_such_kernel"])
def test_a_stored_choice_that_is_no_kernels_name_is_measured_again(kernel_choices, monkeypatch, choice):
    """A damaged or hand-edited file whose choice is a list (or another value that is no kernel's name) is measured
    afresh and the choice written again; a list ended the first multiply in "unhashable type: 'list'"."""
    monkeypatch.setattr(fast_linear, "_FASTEST", {})
    machine = fast_linear._this_machine()
    key = json.dumps([["blas"], [9, 5], False, torch.get_num_threads(), 4])
    kernel_choices.write_text(json.dumps({machine: {key: choice}}))
    x = torch.randn(3, 5)
    linear = FastLinear(torch.randn(9, 5), kernels={"blas": fast_linear.blas_linear})
    assert torch.allclose(linear(x), x @ linear.weight.t())
    assert json.loads(kernel_choices.read_text()) == {machine: {key: "blas"}}


def test_a_kernel_choices_path_that_is_a_folder_leaves_no_temporary_files(tmp_path, monkeypatch):
    """The choices then stay in the process; every measurement's temporary file is removed again."""
    monkeypatch.setattr(fast_linear, "_FASTEST", {})
    folder = tmp_path / "choices"
    folder.mkdir()
    monkeypatch.setenv("HF_ELMO_KERNEL_CHOICES", str(folder))
    for rows in (1, 3, 9):
        x = torch.randn(rows, 5)
        linear = FastLinear(torch.randn(9 + rows, 5), kernels={"blas": fast_linear.blas_linear})
        assert torch.allclose(linear(x), x @ linear.weight.t())
    assert sorted(path.name for path in tmp_path.iterdir()) == ["choices", "choices.lock"]
    assert not list(folder.iterdir())


def test_kernel_choices_where_no_file_can_be_made_stay_in_the_process(tmp_path, monkeypatch):
    """A place where neither the choices' file nor its lock can be made (a read-only folder): every product still
    runs, its kernel measured once and kept in the process, and nothing is written."""
    monkeypatch.setattr(fast_linear, "_FASTEST", {})
    folder = unwritable_folder(tmp_path)
    before = sorted(folder.iterdir())
    monkeypatch.setenv("HF_ELMO_KERNEL_CHOICES", str(folder / "kernels.json"))
    x = torch.randn(3, 5)
    for _ in range(2):
        linear = FastLinear(torch.randn(9, 5), kernels={"blas": fast_linear.blas_linear})
        assert torch.allclose(linear(x), x @ linear.weight.t())
    assert list(fast_linear._FASTEST.values()) == ["blas"] and sorted(folder.iterdir()) == before


def test_kernel_choices_are_kept_in_the_users_cache_folder_unless_a_file_is_named(tmp_path, monkeypatch):
    """README: the choices are kept in ~/.cache/hf_elmo/kernels.json, in $XDG_CACHE_HOME/hf_elmo/kernels.json where that
    is set, or in the file $HF_ELMO_KERNEL_CHOICES names, which wins over both (an empty variable counts as unset)."""
    home, xdg, named = tmp_path / "home", tmp_path / "xdg", tmp_path / "named.json"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("HF_ELMO_KERNEL_CHOICES", raising=False)  # (conftest names a file of the tests' own)
    default = home / ".cache" / "hf_elmo" / "kernels.json"
    assert fast_linear.kernel_choices_path() == default
    monkeypatch.setattr(fast_linear, "_FASTEST", {})  # a measurement, written where the choices are kept
    linear = FastLinear(torch.randn(9, 5), kernels={"blas": fast_linear.blas_linear})
    linear(torch.randn(3, 5))
    assert list(json.loads(default.read_text())) == [fast_linear._this_machine()]
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    assert fast_linear.kernel_choices_path() == default
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    assert fast_linear.kernel_choices_path() == xdg / "hf_elmo" / "kernels.json"
    monkeypatch.setenv("HF_ELMO_KERNEL_CHOICES", "")
    assert fast_linear.kernel_choices_path() == xdg / "hf_elmo" / "kernels.json"
    monkeypatch.setenv("HF_ELMO_KERNEL_CHOICES", str(named))
    assert fast_linear.kernel_choices_path() == named
    monkeypatch.setattr(fast_linear, "_FASTEST", {})
    FastLinear(torch.randn(9, 5), kernels={"blas": fast_linear.blas_linear})(torch.randn(3, 5))
    assert named.is_file() and not xdg.exists()


@pytest.mark.parametrize("kernel", fast_linear.float32_kernels())
@pytest.mark.parametrize("rows", [1, 3, 300])
def test_every_float32_kernel_computes_the_exact_product(kernel, rows):
    """Each candidate is an exact float32 product: within the rounding bound that holds for any order of the
    additions, |error| <= K u sum_k |x_k w_k| (u = 2^-24, K = 512 terms, the bias one more)."""
    torch.manual_seed(0)
    weight, bias, x = torch.randn(1000, 512) / 23, torch.randn(1000), torch.randn(rows, 512)
    linear = FastLinear(weight, kernels={kernel: fast_linear.float32_kernels()[kernel]})
    exact = x.double() @ weight.double().t()
    bound = 513 * 2.0**-24 * (x.double().abs() @ weight.double().abs().t() + bias.double().abs())
    assert bool(((linear(x, bias).double() - (exact + bias.double())).abs() <= bound).all())
    assert bool(((linear(x).double() - exact).abs() <= bound).all())
    assert linear(x).dtype == torch.float32 and set(linear._prepared) == {kernel}


@pytest.mark.parametrize("inputs_repeat", [False, True])
def test_rows_that_start_alike_share_their_first_step(inputs_repeat, monkeypatch):
    """From the zero state every sentence first reads <S> (the backward half </S>): the fast path runs that
    step (its input multiply included), and the next step's recurrent multiply, for one row standing for all,
    with the plain path's results."""
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(num_lstm_layers=1, num_highway_layers=0, char_cnn_filters=[[1, 4]]))
    layer = model.layers[0].eval()
    lengths = torch.tensor([9, 1, 5, 9, 2])
    step_mask = torch.arange(9) < lengths[:, None]
    rows = torch.randn(4, 512)
    inputs = rows[torch.randint(0, 4, (2, 5, 9))] if inputs_repeat else torch.randn(2, 5, 9, 512)
    inputs[0, :, 0], inputs[1, :, 0] = rows[0], rows[1]  # per direction, every row's first input alike
    inputs = inputs * step_mask[None, :, :, None]
    h, c = torch.zeros(2, 5, 512), torch.zeros(2, 5, 4096)
    multiplies = derived_weights(layer, "exact", ExactMultiplies)
    recurrent_rows = []  # per call of the gates' multiply: rows of the recurrent input (0: none, all zeros)
    input_rows = []  # per call of the input multiply (made when the inputs do not repeat): its rows

    def gates(direction, previous, input_gates):
        if previous is None:
            recurrent_rows.append(0)
        return ExactMultiplies.gates(multiplies, direction, previous, input_gates)

    def recurrent(direction, previous):
        recurrent_rows.append(previous.shape[0])
        return ExactMultiplies.recurrent(multiplies, direction, previous)

    def input_gates(direction, x):
        input_rows.append(x.shape[0])
        return ExactMultiplies.input_gates(multiplies, direction, x)

    monkeypatch.setattr(multiplies, "gates", gates)
    monkeypatch.setattr(multiplies, "recurrent", recurrent)
    monkeypatch.setattr(multiplies, "input_gates", input_gates)
    with torch.no_grad():
        fast = layer(inputs, step_mask, h, c, inputs_repeat=inputs_repeat)
        slow = layer._plain_forward(inputs, step_mask, h, c)
    for a, b in zip(fast, slow):
        # Unit-scale random inputs drive the states up to the clip (3), as above: 1e-6 relative, 3e-6 absolute (MKL's
        # packed kernel, which the timing may choose, gives 1.4e-6; 1e-6 failed once under load)
        assert torch.allclose(a, b, rtol=1e-6, atol=3e-6)
    # Per direction: the first step for one row, its recurrent multiply for one row, then every running row.
    assert recurrent_rows == 2 * [0, 1, 3, 3, 3, 2, 2, 2, 2]
    # Without repeats, per direction: the first step's input multiply for one row, then one block of the rest.
    assert input_rows == ([] if inputs_repeat else 2 * [1, 21])

    with torch.no_grad():  # rows of that one step only
        fast = layer(inputs[:, :, :1], step_mask[:, :1], h, c, inputs_repeat=inputs_repeat)
        slow = layer._plain_forward(inputs[:, :, :1], step_mask[:, :1], h, c)
    for a, b in zip(fast, slow):
        assert torch.allclose(a, b, rtol=1e-6, atol=1e-6)


def test_input_blocks_are_released_before_the_next_is_computed(monkeypatch):
    """The input half of the gates comes in blocks of whole steps, none larger than the first, each released
    before the next is computed (so the allocator can hand its memory back), with the plain path's results."""
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(num_lstm_layers=1, num_highway_layers=0, char_cnn_filters=[[1, 4]]))
    layer = model.layers[0].eval()
    lengths = torch.tensor([9, 1, 5, 9, 2])
    step_mask = torch.arange(9) < lengths[:, None]
    inputs = torch.randn(2, 5, 9, 512) * step_mask[None, :, :, None]
    h, c = torch.zeros(2, 5, 512), torch.zeros(2, 5, 4096)
    multiplies = derived_weights(layer, "exact", ExactMultiplies)
    blocks = []  # per block: its rows, and a weak reference to its memory

    def input_gates(direction, x):
        assert all(memory.expired() for _, memory in blocks), "an earlier block is still held"
        block = ExactMultiplies.input_gates(multiplies, direction, x)
        blocks.append((block.shape[0], StorageWeakRef(block.untyped_storage())))
        return block

    monkeypatch.setattr(fast_bilstm, "INPUT_BLOCK_ROWS", 10)
    monkeypatch.setattr(multiplies, "input_gates", input_gates)
    with torch.no_grad():
        fast = layer(inputs, step_mask, h, c)
        slow = layer._plain_forward(inputs, step_mask, h, c)
    # Steps hold 5, 4, 3, 3, 3, 2, 2, 2, 2 rows: per direction, blocks of whole steps of at most 2 * 5 rows.
    assert [rows for rows, _ in blocks] == 2 * [9, 9, 8]
    for a, b in zip(fast, slow):  # (states near the clip, as in the test above)
        assert torch.allclose(a, b, rtol=1e-6, atol=3e-6)


def test_fast_char_encoder_matches_plain(fixture_model):
    model, tokenizer = fixture_model
    words = (FIXTURES / "allennlp-elmo" / "vocab_test.txt").read_text(encoding="utf-8").split("\n")
    char_ids = tokenizer([words], is_split_into_words=True, return_tensors="pt")["input_ids"][0]
    with torch.no_grad():
        fast = fast_char_encoder(model.char_encoder, char_ids)
        slow = model.char_encoder._plain_forward(char_ids)
        one = fast_char_encoder(model.char_encoder, char_ids[5:6])
    assert fast.shape == slow.shape == (458, 16)
    assert (fast - slow).abs().max().item() < 1e-6
    assert (one - slow[5:6]).abs().max().item() < 1e-6


def test_fast_char_encoder_cuts_only_padding(fixture_model):
    """The fast path cuts each block of words after its longest word (plus the widest filter): words with no
    padding at all, a word of padding only and a padded batch position (all ids 0) keep their plain values,
    in blocks of mixed and of equal lengths."""
    model, tokenizer = fixture_model
    words = ["a", "x" * 60, "ELMo", "representations", "z" * 48, "b"] * 30  # 180 words: three blocks
    char_ids = tokenizer([words], is_split_into_words=True, return_tensors="pt")["input_ids"][0]
    assert (char_ids[1] != PAD_CHAR_ID).all()  # truncated to fill every position
    char_ids = torch.cat([char_ids, torch.full_like(char_ids[:1], PAD_CHAR_ID), torch.zeros_like(char_ids[:1])])
    with torch.no_grad():
        fast = fast_char_encoder(model.char_encoder, char_ids)
        slow = model.char_encoder._plain_forward(char_ids)
        short = fast_char_encoder(model.char_encoder, char_ids[[0, 5, 6, 11]])  # one block of 1-letter words
    assert (fast - slow).abs().max().item() < 1e-6
    assert (short - slow[[0, 5, 6, 11]]).abs().max().item() < 1e-6


def test_fast_char_encoder_keeps_the_widest_filters_window_of_padding_only():
    """Where a word's maximum comes from a window of padding characters only, the cut keeps that window: the
    padding character's embedding is made the one direction the widest filter answers, so that window wins (the
    fixture's words never take their maximum there)."""
    torch.manual_seed(0)
    encoder = ElmoModel(ElmoConfig(char_cnn_filters=[[1, 4], [3, 4]], num_highway_layers=1, cell_size=16,
                                   projection_dim=8)).eval().char_encoder
    with torch.no_grad():
        encoder.char_embedding.weight.mul_(0.1)
        direction = torch.nn.functional.normalize(torch.randn(encoder.char_embedding.weight.shape[1]), dim=0)
        encoder.char_embedding.weight[encoder.pad_char_id] = 10 * direction
        widest = encoder.char_cnn[1]
        widest.weight.copy_(direction[None, :, None].expand_as(widest.weight))
    words = ["a", "ELMo", "representations", "b"]
    char_ids = ElmoTokenizer()([words], is_split_into_words=True, return_tensors="pt")["input_ids"][0]
    with torch.no_grad():
        fast = fast_char_encoder(encoder, char_ids)
        slow = encoder._plain_forward(char_ids)
    assert (fast - slow).abs().max().item() < 1e-5


def test_outputs_do_not_depend_on_where_the_weights_sit_in_memory(converted):
    """A loaded checkpoint is memory-mapped (weights at odd offsets); the same weights copied into fresh
    memory must give bit-identical outputs, one sentence alone included."""
    mapped = ElmoModel.from_pretrained(converted["allennlp-elmo"]).eval()
    fresh = ElmoModel(mapped.config).eval()
    fresh.load_state_dict({name: tensor.clone() for name, tensor in mapped.state_dict().items()})
    tokenizer = ElmoTokenizer.from_pretrained(converted["allennlp-elmo"])
    for sentences in (FIXTURE_SETS["allennlp-elmo"].batches()[0], [["one", "sentence", "alone"]], [["word"]]):
        batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
        with torch.no_grad():
            for a, b in zip(outputs(mapped(**batch)), outputs(fresh(**batch))):
                assert torch.equal(a, b)


def test_a_bfloat16_model_runs_inference_through_the_caches_and_the_embedder(converted):
    """A model loaded in bfloat16 (`dtype=torch.bfloat16`) takes the fast path, its caches keyed by the bytes of
    bfloat16 rows, and gives the float32 model's vectors to bfloat16 precision; so does `ElmoEmbedder`."""
    folder = converted["allennlp-elmo"]
    model = ElmoModel.from_pretrained(folder, dtype=torch.bfloat16).eval()
    reference = ElmoModel.from_pretrained(folder).eval()
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    batch = tokenizer(FIXTURE_SETS["allennlp-elmo"].batches()[0], is_split_into_words=True, padding=True,
                      return_tensors="pt")
    with torch.no_grad():
        found, again, expected = model(**batch), model(**batch), reference(**batch)
    assert found.last_hidden_state.dtype == torch.bfloat16
    assert len(model.char_encoder.token_cache) > 0 and len(model.layers[0].input_gate_cache) > 0
    assert model.layers[0].input_gate_cache.hits > 0
    assert all(torch.equal(a, b) for a, b in zip(outputs(found), outputs(again)))
    for a, b in zip(found.hidden_states, expected.hidden_states):
        assert (a.float() - b).abs().max().item() < 0.1
    sentence = "The cat sat on the mat ."
    vectors = ElmoEmbedder(folder, dtype=torch.bfloat16).embed_sentence(sentence)
    assert vectors.dtype == np.float32
    assert np.abs(vectors - ElmoEmbedder(folder).embed_sentence(sentence)).max() < 0.1


# ---- the token cache -----------------------------------------------------------------------------------


def test_cache_computes_each_distinct_word_once_and_hits_later(fixture_model):
    model, tokenizer = fixture_model
    model = copy.deepcopy(model)
    model.clear_caches()
    cache, gates = model.char_encoder.token_cache, model.layers[0].input_gate_cache
    sentences = [["the", "cat", "saw", "the", "dog"], ["the", "dog", "ran"]]
    batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        first = model(**batch)
        assert cache.misses == 7 and cache.hits == 0  # <S>, </S>, the, cat, saw, dog, ran
        assert gates.misses == 7 and gates.hits == 0  # the first layer's input gates of the same 7 words
        second = model(**batch)
        assert cache.misses == 7 and cache.hits == 7
        assert gates.misses == 7 and gates.hits == 7
        reference = plain(model)(**batch)
    assert len(cache) == len(gates) == 7
    assert len(model.layers[1].input_gate_cache) == 0  # later layers' inputs depend on the context
    model.clear_caches()
    assert len(cache) == len(gates) == 0
    for a, b in zip(outputs(first), outputs(second)):
        assert torch.equal(a, b)
    assert largest_difference(outputs(first), outputs(reference)) < 1e-6


def test_cache_is_bounded_and_evicts_the_least_recently_used(fixture_model):
    model, tokenizer = fixture_model
    model = copy.deepcopy(model)
    reference = plain(model)
    model.clear_caches()
    cache, gates = model.char_encoder.token_cache, model.layers[0].input_gate_cache
    cache.max_words = gates.max_words = 5
    # (sentence, new char CNN runs): <S> and </S> are words too, used by every sentence.
    steps = [(["a", "b"], 4), (["c"], 1), (["a", "d"], 1),  # full now: b is the least recently used ...
             (["b"], 1),  # ... so b was evicted; bringing it back evicts c
             (["c"], 1),  # c was evicted; bringing it back evicts a
             (["d"], 0), (["a"], 1),
             (["e", "f", "g", "h", "i", "j"], 8)]  # 8 distinct words cannot fit: computed, not stored
    with torch.no_grad():
        for words, new in steps:
            batch = tokenizer([words], is_split_into_words=True, return_tensors="pt")
            misses, gate_misses = cache.misses, gates.misses
            found, expected = model(**batch), reference(**batch)
            assert largest_difference(outputs(found), outputs(expected)) < 1e-6
            assert cache.misses - misses == gates.misses - gate_misses == new, words
            assert len(cache) <= 5 and len(gates) <= 5
    assert len(cache) == len(gates) == 5


def test_cache_is_dropped_when_the_weights_change(fixture_model):
    model, tokenizer = fixture_model
    model = copy.deepcopy(model)
    cache = model.char_encoder.token_cache
    batch = tokenizer([["the", "weights", "change"]], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        before = model(**batch).hidden_states[0]
        assert len(cache) == 5
        model.char_encoder.highway[0].transform.bias.add_(0.5)  # an in-place update, as an optimizer makes
        after = model(**batch).hidden_states[0]
        expected = plain(model)(**batch).hidden_states[0]
    assert not torch.allclose(before, after, atol=1e-3)
    assert (after - expected).abs().max().item() < 1e-6
    # Loading other weights also empties it.
    state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    state["char_encoder.projection.bias"] += 1.0
    model.load_state_dict(state)
    with torch.no_grad():
        reloaded = model(**batch).hidden_states[0]
    assert (reloaded - expected).abs().max().item() > 0.5


def test_weights_written_through_data_are_used_after_weights_changed(fixture_model):
    """A write through `.data` advances no version counter: the caches and the fast paths' reordered copies of the
    weights keep the old values (clear_caches alone left those copies: 2 to 6 off) until `weights_changed()`."""
    model, tokenizer = fixture_model
    model = copy.deepcopy(model)
    batch = tokenizer([["the", "weights", "change"], ["under", "it"]], is_split_into_words=True, padding=True,
                      return_tensors="pt")
    with torch.no_grad():
        model(**batch)  # (the caches filled, the copies of the weights made)
        for parameter in (model.layers[0].bias, model.layers[1].recurrent_weight, model.char_encoder.highway[0].transform.bias,
                          model.char_encoder.char_cnn[0].weight):
            parameter.data.add_(0.25)
        model.weights_changed()
        found, expected = model(**batch), plain(model)(**batch)
    assert largest_difference(outputs(found), outputs(expected)) < 1e-5


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("setting", ["forget_bias", "cell_clip", "proj_clip", "activation"])
def test_a_setting_changed_after_a_call_is_read_by_the_next(fixture_model, setting, device):
    """The fast paths bake the layers' forget bias into their copy of the gate bias, the clips into their CUDA graphs,
    and the char CNN's activation into the cached word vectors: a setting changed after a call was not seen (1.13 off
    the plain path after forget_bias = 0, 2.93 after a tanh activation, until weights_changed())."""
    if device == "cpu" and setting.endswith("_clip"):
        pytest.skip("only the GPU's CUDA graphs keep the clips; the CPU path reads them at each step")
    model, tokenizer = fixture_model
    model = copy.deepcopy(model).to(device)
    batch = tokenizer([["the", "settings", "change"], ["under", "it"]], is_split_into_words=True, padding=True,
                      return_tensors="pt").to(device)
    new_value = {"forget_bias": 0.0, "cell_clip": 0.5, "proj_clip": 0.25, "activation": torch.tanh}[setting]
    with torch.no_grad():
        before = model(**batch)  # (the caches filled, the derived weights made)
        for module in model.layers if setting != "activation" else [model.char_encoder]:
            setattr(module, setting, new_value)
        found, expected = model(**batch), plain(model)(**batch)
    assert largest_difference(outputs(found), outputs(expected)) < 1e-5
    assert largest_difference(outputs(found), outputs(before)) > 0.1  # (the change matters)
    # Before it is first set, such a setting is missing as any attribute is (not a KeyError).
    bare = torch.nn.Module.__new__(type(model.layers[0]))
    torch.nn.Module.__init__(bare)
    assert not hasattr(bare, "forget_bias") and getattr(bare, "cell_clip", None) is None


def test_hooks_on_the_character_encoders_modules_run(fixture_model):
    """A forward hook on a convolution, a highway layer or the projection (an adapter, a probe) runs: the fast paths,
    which never call those modules, step aside for it, in inference and in training (its output was ignored)."""
    model, tokenizer = fixture_model
    model = copy.deepcopy(model)
    batch = tokenizer([["a", "hooked", "word"]], is_split_into_words=True, return_tensors="pt")
    for module in (model.char_encoder.char_cnn[0], model.char_encoder.highway[0], model.char_encoder.projection):
        with torch.no_grad():
            unhooked = model(**batch).hidden_states[0]
        handle = module.register_forward_hook(lambda module, inputs, output: output * 2)
        try:
            with torch.no_grad():
                expected = plain(model)(**batch).hidden_states[0]
                found = model(**batch).hidden_states[0]
            model.train()
            trained = model(**batch).hidden_states[0]  # (autograd on: the fused training path's choice)
            model.eval()
        finally:
            handle.remove()
        assert not torch.allclose(expected, unhooked, atol=1e-3), module
        assert (found - expected).abs().max().item() < 1e-6 and (trained - expected).abs().max().item() < 1e-5, module


class _Adapter(torch.nn.Linear):
    """A linear map with an addition of its own (as a LoRA adapter adds one): another forward than nn.Linear's."""

    def forward(self, x):
        return super().forward(x) + 0.5 * x.sum(-1, keepdim=True)


class _SameLinear(torch.nn.Linear):
    """A subclass that keeps nn.Linear's forward."""


def _replaced(model, name: str, replacement: torch.nn.Module) -> ElmoModel:
    model = copy.deepcopy(model)
    parent_name, _, child = f"char_encoder.{name}".rpartition(".")
    setattr(model.get_submodule(parent_name), child, replacement)
    return model


def _linear_like(cls, linear: torch.nn.Linear) -> torch.nn.Linear:
    made = cls(linear.in_features, linear.out_features)
    made.load_state_dict(linear.state_dict())
    return made


@pytest.mark.parametrize("name", ["projection", "highway.0.transform", "highway.0.carry"])
def test_a_module_replaced_in_the_character_encoder_is_called(fixture_model, name):
    """A linear map of the character encoder replaced by a module with its own forward (an adapter) is called, in
    inference and in training: the fast paths, which compute nn.Linear's product from the weight instead of calling
    the module, step aside (the adapter's output was ignored); a subclass that keeps nn.Linear's forward leaves them
    running. The training path's choice says which module it was."""
    model, tokenizer = fixture_model
    model = copy.deepcopy(model)  # (its caches' counts stay as the other tests expect them)
    batch = tokenizer([["a", "replaced", "word"], ["another"]], is_split_into_words=True, padding=True,
                      return_tensors="pt")
    original = model.get_submodule(f"char_encoder.{name}")
    adapted = _replaced(model, name, _linear_like(_Adapter, original))
    same = _replaced(model, name, _linear_like(_SameLinear, original))
    with torch.no_grad():
        unreplaced = model(**batch).hidden_states[0]
        expected = plain(adapted)(**batch).hidden_states[0]
        found = adapted(**batch).hidden_states[0]
        assert torch.equal(same(**batch).hidden_states[0], unreplaced)
    assert not torch.allclose(expected, unreplaced, atol=1e-3)
    assert (found - expected).abs().max().item() < 1e-6
    adapted.train()
    trained = adapted(**batch).hidden_states[0]  # (autograd on: the fused training path's choice)
    assert (trained - expected).abs().max().item() < 1e-5
    assert fused_char_encoder_fallback(adapted.char_encoder) == (
        f"its {name} is a _Adapter, not the Linear it was built as")
    assert fused_char_encoder_fallback(same.char_encoder) is None


class _HalfHighway(ElmoHighway):
    """A highway layer that halves its output: another forward than ElmoHighway's."""

    def forward(self, x):
        return 0.5 * super().forward(x)


def test_a_forward_set_on_a_module_or_a_replaced_highway_layer_is_called(fixture_model):
    """Accelerate's offloading hooks and patches set `forward` on the module itself, and a highway layer may be
    replaced whole: each is called, in inference and training, and the training path's reason names it."""
    model, tokenizer = fixture_model
    model = copy.deepcopy(model)  # (its caches' counts stay as the other tests expect them)
    batch = tokenizer([["a", "patched", "word"], ["another"]], is_split_into_words=True, padding=True,
                      return_tensors="pt")
    patched = copy.deepcopy(model)
    projection = patched.char_encoder.projection
    projection.forward = lambda x, linear=projection: 2 * torch.nn.functional.linear(x, linear.weight, linear.bias)
    halved = copy.deepcopy(model)
    halved.char_encoder.highway[0] = _HalfHighway(model.char_encoder.highway[0].transform.in_features)
    halved.char_encoder.highway[0].load_state_dict(model.char_encoder.highway[0].state_dict())
    with torch.no_grad():
        unchanged = model(**batch).hidden_states[0]
    reasons = {"its projection has a forward of its own, set on the module (Accelerate's hooks, a patch)": patched,
               "its highway.0 is a _HalfHighway, not the ElmoHighway it was built as": halved}
    for reason, changed in reasons.items():
        with torch.no_grad():
            expected = plain(changed)(**batch).hidden_states[0]
            found = changed(**batch).hidden_states[0]
        assert not torch.allclose(expected, unchanged, atol=1e-3), reason
        assert (found - expected).abs().max().item() < 1e-6, reason
        changed.train()
        assert (changed(**batch).hidden_states[0] - expected).abs().max().item() < 1e-5, reason
        assert fused_char_encoder_fallback(changed.char_encoder) == reason


@pytest.mark.filterwarnings("ignore:torch.ao.quantization is deprecated:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")
def test_dynamic_quantization_of_the_linear_layers_runs(converted):
    """`torch.ao.quantization.quantize_dynamic(model, {nn.Linear})`, PyTorch's recipe for int8 inference on CPU,
    on the model and on both heads: the quantized highway layers, projection and classifier are called (the fast
    paths read weights, which a quantized Linear does not have), so the outputs are the plain computation of the
    quantized model and within int8 rounding of the float model's."""
    folder = converted["allennlp-elmo"]
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    batch = tokenizer([["EU", "rejects", "German", "call"], ["Peter", "Blackburn"]], is_split_into_words=True,
                      padding=True, return_tensors="pt")
    heads = (ElmoForSequenceClassification, ElmoForTokenClassification)
    torch.manual_seed(0)  # (the heads' new classifiers: small logits, against which int8's error is 0.5-6% by draw)
    models = [ElmoModel.from_pretrained(folder)] + [head.from_pretrained(folder, num_labels=3) for head in heads]
    for model in models:
        model.eval()
        quantized = torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8)
        assert type(quantized.base_model.char_encoder.projection).__name__ == "Linear"  # (the quantized one)
        assert not isinstance(quantized.base_model.char_encoder.projection, torch.nn.Linear)
        with torch.no_grad():
            found, unquantized = quantized(**batch), model(**batch)
            for layer in quantized.base_model.layers:
                layer.use_fast_path = False
            reference = quantized(**batch)
        key = "last_hidden_state" if isinstance(model, ElmoModel) else "logits"
        assert (found[key] - reference[key]).abs().max().item() < 1e-5, type(model).__name__
        deviation = (found[key] - unquantized[key]).abs().max().item()
        assert 0 < deviation < 0.05 * unquantized[key].abs().max().item(), (type(model).__name__, deviation)
    # The pretraining model's softmax is quantized too: the full softmax calls it, the sampled one refuses it.
    pretraining = ElmoForPreTraining.from_pretrained(folder, lm_vocab_size=10, lm_negative_samples=4).eval()
    quantized = torch.ao.quantization.quantize_dynamic(pretraining, {torch.nn.Linear}, dtype=torch.qint8)
    labels = torch.tensor([[1, 2, 3, 4], [5, 6, -100, -100]])
    inputs = dict(batch, labels=labels, backward_labels=labels.flip(1))
    with torch.no_grad():
        assert torch.isfinite(quantized(**inputs).loss)
    with pytest.raises(ValueError, match=r"and its softmax is a torch\.ao\.nn\.quantized\.dynamic\..*\.Linear, not "
                                         r"the Linear it was built as: train with the full softmax"):
        quantized.train()(**inputs)


class _PackedWeight(torch.Tensor):
    """A weight as torchao's int8 quantization makes one (`quantize_`, transformers' `TorchAoConfig`): a tensor
    subclass that implements the operations of a layer's forward and not the others (the fast paths' `torch.cat`
    failed on torchao's); its values are the plain weight's."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.cat:
            raise NotImplementedError("_PackedWeight implements no torch.cat")
        result = super().__torch_function__(func, types, args, kwargs)
        if func in (torch.Tensor.detach, torch.Tensor.requires_grad_):  # (what nn.Parameter needs of a subclass)
            return result
        with torch._C.DisableTorchFunctionSubclass():  # (results are plain tensors, as a quantized layer's are)
            return tree_map(lambda t: t.as_subclass(torch.Tensor) if isinstance(t, cls) else t, result)


def _pack_weight(module: torch.nn.Module) -> None:
    module.weight = torch.nn.Parameter(module.weight.detach().as_subclass(_PackedWeight), requires_grad=False)


def test_a_weight_of_a_tensor_subclass_is_multiplied_by_its_module(converted):
    """The highway layers' and the projection's weights, and the pretraining softmax's, as tensor subclasses that
    implement only a layer's forward (as torchao's quantized weights do): the character encoder calls its layers, with
    the reason, and gives the plain model's outputs, in inference and training; the full softmax calls the softmax,
    and the sampled one refuses it, saying to train with the full one."""
    folder = converted["allennlp-elmo"]
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    batch = tokenizer([["EU", "rejects", "German", "call"], ["Peter", "Blackburn"]], is_split_into_words=True,
                      padding=True, return_tensors="pt")
    model = ElmoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        expected = model(**batch).hidden_states
    for module in (*model.char_encoder.highway, model.char_encoder.projection):
        for linear in (module.transform, module.carry) if isinstance(module, ElmoHighway) else (module,):
            _pack_weight(linear)
    reason = model.char_encoder.modules_must_run()
    assert reason == "its highway.0.transform.weight is a _PackedWeight (a tensor subclass), not a plain tensor"
    with torch.no_grad():
        found = model(**batch).hidden_states
    for layer, expected_layer in zip(found, expected):
        torch.testing.assert_close(layer, expected_layer, rtol=1e-6, atol=1e-6)
    model.train()
    assert fused_char_encoder_fallback(model.char_encoder) == reason
    torch.testing.assert_close(model(**batch).hidden_states[0], expected[0], rtol=1e-5, atol=1e-5)

    pretraining = ElmoForPreTraining.from_pretrained(folder, lm_vocab_size=10, lm_negative_samples=4).eval()
    labels = torch.tensor([[1, 2, 3, 4], [5, 6, -100, -100]])
    inputs = dict(batch, labels=labels, backward_labels=labels.flip(1))
    with torch.no_grad():
        plain_loss = pretraining(**inputs).loss
        _pack_weight(pretraining.softmax)
        torch.testing.assert_close(pretraining(**inputs).loss, plain_loss)
    with pytest.raises(ValueError, match=r"its softmax\.weight is a _PackedWeight \(a tensor subclass\).*train with "
                                         r"the full softmax"):
        pretraining.train()(**inputs)


class _Doubled(torch.nn.Linear):
    """Twice nn.Linear's product, through a forward of its own: nn.Linear with twice the weights computes the same."""

    def forward(self, x):
        return 2 * super().forward(x)


def test_a_replaced_softmax_is_called_by_the_full_softmax_and_refused_by_the_sampled_one(converted):
    """ElmoForPreTraining's full softmax (evaluation, and training with lm_negative_samples 0) calls the softmax
    module, so a replaced one gives its own scores; the sampled softmax, which scores rows of the weight, refuses it
    and says what trains instead."""
    folder = converted["allennlp-elmo"]
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    batch = tokenizer([["EU", "rejects", "German", "call"], ["Peter", "Blackburn"]], is_split_into_words=True,
                      padding=True, return_tensors="pt")
    labels = torch.tensor([[1, 2, 3, 4], [5, 6, -100, -100]])
    inputs = dict(batch, labels=labels, backward_labels=labels.flip(1))
    model = ElmoForPreTraining.from_pretrained(folder, lm_vocab_size=10, lm_negative_samples=4).eval()
    doubled = copy.deepcopy(model)
    doubled.softmax = _linear_like(_Doubled, model.softmax)
    expected = copy.deepcopy(model)
    with torch.no_grad():
        expected.softmax.weight.mul_(2)
        expected.softmax.bias.mul_(2)
        assert not torch.allclose(model(**inputs).loss, expected(**inputs).loss)
        assert torch.allclose(doubled(**inputs).loss, expected(**inputs).loss, rtol=1e-6, atol=0)
    doubled.train()
    with pytest.raises(ValueError, match=r"^the sampled softmax scores rows of the softmax's weight without calling "
                       r"the module, and its softmax is a _Doubled, not the Linear it was built as: train with the "
                       r"full softmax \(lm_negative_samples=0\), which calls it$"):
        doubled(**inputs)
    hooked = copy.deepcopy(model).train()
    hooked.softmax.register_forward_hook(lambda module, inputs, output: output)
    with pytest.raises(ValueError, match=r"without calling the module, and a forward hook on its softmax: train with"):
        hooked(**inputs)
    doubled.config.lm_negative_samples = expected.config.lm_negative_samples = 0
    expected.train()
    torch.manual_seed(0)
    trained = doubled(**inputs).loss
    torch.manual_seed(0)
    assert torch.allclose(trained, expected(**inputs).loss, rtol=1e-6, atol=0)


def test_caches_are_dropped_when_the_model_is_converted(fixture_model, converted):
    """README: the caches empty themselves when a weight changes through `.to()`: after `model.half().float()` (the
    weights rounded to float16, in storage that may sit at the old addresses) and after `.double()`, every output
    equals that of a fresh model holding the same weights; a head's conversion reaches its biLM's caches."""
    model, tokenizer = fixture_model
    model = copy.deepcopy(model)
    batch = tokenizer(FIXTURE_SETS["allennlp-elmo"].batches()[3], is_split_into_words=True, padding=True,
                      return_tensors="pt")
    caches = (model.char_encoder.token_cache, model.layers[0].input_gate_cache)

    def fresh_like(model: ElmoModel) -> ElmoModel:
        fresh = ElmoModel(model.config).to(model.dtype).eval()
        fresh.load_state_dict({name: tensor.clone() for name, tensor in model.state_dict().items()})
        return fresh

    with torch.no_grad():
        before = outputs(model(**batch))
        assert all(len(cache) > 0 for cache in caches)
        model.half().float()
        assert all(len(cache) == 0 for cache in caches)
        rounded = outputs(model(**batch))
        assert largest_difference(before, rounded) > 1e-4  # (the rounding changed the numbers: what makes the case)
        assert all(torch.equal(a, b) for a, b in zip(rounded, outputs(fresh_like(model)(**batch))))
        model.double()
        doubled = outputs(model(**batch))
        assert all(tensor.dtype == torch.float64 for tensor in doubled) and len(caches[0]) > 0
        assert all(torch.equal(a, b) for a, b in zip(doubled, outputs(fresh_like(model)(**batch))))
        assert largest_difference(doubled, outputs(plain(model)(**batch))) < 1e-12
        head = ElmoForTokenClassification.from_pretrained(converted["allennlp-elmo"], num_labels=3).eval()
        head(**batch)
        head_caches = (head.elmo.char_encoder.token_cache, head.elmo.layers[0].input_gate_cache)
        assert all(len(cache) > 0 for cache in head_caches)
        head.half().float()
        assert all(len(cache) == 0 for cache in head_caches)


def test_a_change_of_mode_drops_the_caches_and_the_derived_weights(fixture_model):
    """`ElmoModel.train`: switching to training mode and back empties both caches and drops every derived copy of
    the weights; `eval()` on a model already in evaluation mode keeps them."""
    model, tokenizer = fixture_model
    model = copy.deepcopy(model)
    batch = tokenizer([["the", "mode", "changes"]], is_split_into_words=True, return_tensors="pt")
    caches = (model.char_encoder.token_cache, model.layers[0].input_gate_cache)

    def held() -> list[int]:
        """Words in each cache, and the modules that keep derived weights."""
        derived = [module for module in model.modules() if module in fast_bilstm._DERIVED]
        return [*map(len, caches), len(derived)]

    with torch.no_grad():
        model(**batch)
    filled = held()
    assert all(count > 0 for count in filled)
    model.eval()
    assert held() == filled
    model.train()
    assert held() == [0, 0, 0]
    with torch.no_grad():
        model.eval()(**batch)
    assert held() == filled
    model.train().eval()
    assert held() == [0, 0, 0]


def test_a_fused_optimizer_step_between_evaluations_is_seen(fixture_model):
    """torch's fused AdamW (Trainer's default) updates the weights without advancing their version counters: the
    caches and derived weights must still drop what they kept, here across the switch to training mode and back
    (test_model's test_caches_see_an_optimizer_step_taken_in_evaluation_mode takes the step in evaluation mode)."""
    model, tokenizer = fixture_model
    model = copy.deepcopy(model)
    batch = tokenizer([["the", "weights", "change"], ["in", "place"]], is_split_into_words=True, padding=True,
                      return_tensors="pt")
    with torch.no_grad():
        before = model(**batch).hidden_states
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, fused=True)
    model(**batch).last_hidden_state.pow(2).mean().backward()
    versions = [parameter._version for parameter in model.parameters()]
    optimizer.step()
    assert [parameter._version for parameter in model.parameters()] == versions  # (what makes the case)
    model.eval()
    with torch.no_grad():
        after = model(**batch).hidden_states
        expected = plain(model)(**batch).hidden_states
    assert largest_difference(before, after) > 1e-2
    assert largest_difference(after, expected) < 1e-5


def test_gate_cache_is_dropped_when_the_first_layer_changes(fixture_model):
    """Same token vectors, new first-layer weights: the cached input gates must not be reused."""
    model, tokenizer = fixture_model
    model = copy.deepcopy(model)
    gates = model.layers[0].input_gate_cache
    batch = tokenizer([["the", "weights", "change"]], is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        before = model(**batch).hidden_states[1]
        assert len(gates) == 5
        model.layers[0].input_weight.mul_(1.5)
        after = model(**batch).hidden_states[1]
        expected = plain(model)(**batch).hidden_states[1]
    assert not torch.allclose(before, after, atol=1e-3)
    assert (after - expected).abs().max().item() < 1e-6


def test_cache_is_not_used_in_training_or_with_autograd(fixture_model):
    model, tokenizer = fixture_model
    model = copy.deepcopy(model)
    model.clear_caches()
    cache, gates = model.char_encoder.token_cache, model.layers[0].input_gate_cache
    batch = tokenizer([["only", "inference", "fills", "it"]], is_split_into_words=True, return_tensors="pt")
    model.train()
    with torch.no_grad():
        model(**batch)
    assert len(cache) == len(gates) == 0 and cache.misses == gates.misses == 0
    model.eval()
    output = model(**batch)  # autograd on: the plain path, gradients reach the char CNN
    output.last_hidden_state.sum().backward()
    assert len(cache) == len(gates) == 0
    assert model.char_encoder.char_cnn[0].weight.grad is not None


# ---- opt-in approximate modes ------------------------------------------------------------------------------


# The bf16 mode runs on CPUs that compute bfloat16 natively; elsewhere it is refused (tested below) and not run.
CPU_BFLOAT16 = native_bfloat16_extension() is not None
APPROXIMATIONS_HERE = ("nn_lstm", "int8", "bf16") if CPU_BFLOAT16 else ("nn_lstm", "int8")
needs_cpu_bfloat16 = pytest.mark.skipif(not CPU_BFLOAT16, reason="this CPU has neither AVX512-BF16 nor AMX-BF16: the "
                                        "bf16 mode is refused here")


def force_bfloat16_products(monkeypatch) -> None:
    """The bf16 mode's bfloat16 products wherever they are candidates, whatever their speed: chosen afresh (no
    choice of this process or of the file is reused) with a margin that keeps the first candidate."""
    monkeypatch.setattr(fast_linear, "MARGIN", 1e9)
    monkeypatch.setattr(fast_linear, "_FASTEST", {})


def test_approximations_report_their_deviation(fixture_model, kernel_choices, monkeypatch):
    model, tokenizer = fixture_model
    model = copy.deepcopy(model)
    batch = tokenizer(FIXTURE_SETS["allennlp-elmo"].batches()[0], is_split_into_words=True, padding=True,
                      return_tensors="pt")
    force_bfloat16_products(monkeypatch)
    deviations = {kind: approximation_deviation(model, batch, kind) for kind in APPROXIMATIONS_HERE}
    assert all(layer.approximation is None for layer in model.layers)  # the model is left exact
    for kind, per_layer in deviations.items():
        assert len(per_layer) == 3, kind
        assert all(value == value and value < 10 for value in per_layer), kind  # finite
    # nn.LSTM cannot clip, and the trained fixture model clips: its biLSTM layers diverge visibly.
    assert deviations["nn_lstm"][0] < 1e-6 and deviations["nn_lstm"][2] > 1e-2
    # What the README gives for the trained fixture (int8 within 4.2e-2, bf16's chosen kernels 5.8e-3 and 7.2e-3;
    # bfloat16 forced into every product here: 1.0e-2 on an AMD EPYC Zen 4), with room for other CPUs; int8 where
    # the CPU lacks VNNI (AMD EPYC Zen 2: oneDNN's older int8 kernels round more) up to the README's 0.57.
    flags = approximate.cpu_flags()
    vnni = any(flags.get(flag) for flag in ("avx512_vnni", "avx_vnni", "amx_int8"))
    assert 1e-4 < deviations["int8"][2] < (0.06 if vnni else 0.6)
    if CPU_BFLOAT16:
        assert 1e-5 < deviations["bf16"][2] < 0.02
    # Switching back restores the exact model.
    model.set_lstm_approximation("int8")
    model.set_lstm_approximation(None)
    with torch.no_grad():
        assert largest_difference(outputs(model(**batch)), outputs(plain(model)(**batch))) < 1e-6
    with pytest.raises(ValueError, match="nn_lstm"):
        model.set_lstm_approximation("fp8")


@needs_cpu_bfloat16
@pytest.mark.parametrize("rows", [1, 32])
def test_the_bfloat16_candidate_returns_its_bfloat16_product_in_float32(rows):
    """`onednn_bfloat16` gives float32, as the exact candidates do (its choice measures the conversions), holding
    the product of the bfloat16-rounded operands rounded to bfloat16 once."""
    torch.manual_seed(0)
    weight, bias, x = torch.randn(1000, 512) / 23, torch.randn(1000), torch.randn(rows, 512)
    result = fast_linear.onednn_bfloat16(weight)(x, bias)
    assert result.dtype == torch.float32
    assert torch.equal(result, result.bfloat16().float())  # (one rounding to bfloat16, nothing added after)
    exact = x.bfloat16().double() @ weight.bfloat16().double().t() + bias.bfloat16().double()
    assert ((result.double() - exact).abs() <= 2.0**-8 * exact.abs() + 1e-6).all()


@needs_cpu_bfloat16
def test_bf16_mode_multiplies_in_bfloat16_and_leaves_the_exact_caches_alone(fixture_model, kernel_choices, monkeypatch):
    """With bfloat16 products forced (the first candidate, whatever their speed), the bf16 mode runs them
    (oneDNN's), gives float32 outputs a little off the exact ones, and fills a gate cache of its own: the
    exact model's outputs afterwards are bit for bit those from before."""
    model, tokenizer = fixture_model
    model = copy.deepcopy(model)
    force_bfloat16_products(monkeypatch)
    batch = tokenizer(FIXTURE_SETS["allennlp-elmo"].batches()[1], is_split_into_words=True, padding=True,
                      return_tensors="pt")
    with torch.no_grad():
        exact = outputs(model(**batch))
        model.set_lstm_approximation("bf16")
        bf16, again = outputs(model(**batch)), outputs(model(**batch))  # the second from its own gate cache
        multiplies = built_derived_weights(model.layers[0], "bf16")  # (leaving the mode drops it)
        model.set_lstm_approximation(None)
        after = outputs(model(**batch))
    assert all(torch.equal(a, b) for a, b in zip(exact, after))
    assert all(torch.equal(a, b) for a, b in zip(bf16, again))
    assert all(tensor.dtype == torch.float32 for tensor in bf16)
    assert 1e-4 < largest_difference(bf16, exact) < 0.5
    kernels = {name for linear in multiplies._linears.values() for name in linear._prepared}
    assert kernels == {"onednn_bfloat16"}
    assert len(multiplies.gate_cache) > 0 and multiplies.gate_cache.hits > 0


@needs_cpu_bfloat16
def test_bf16_mode_gate_cache_follows_the_layers_settings_and_clear_caches(fixture_model, kernel_choices, monkeypatch):
    """README: `model.clear_caches()` empties both caches, `model.layers[0].input_gate_cache.max_words = 0` turns the
    gate cache off, and with `add_new = False` it keeps exactly its words: in the bf16 mode too, whose gates go to a
    cache of its own, whatever was set after opting in and after that cache was made."""
    model, tokenizer = fixture_model
    model = copy.deepcopy(model)
    force_bfloat16_products(monkeypatch)
    batch = tokenizer(FIXTURE_SETS["allennlp-elmo"].batches()[1], is_split_into_words=True, padding=True,
                      return_tensors="pt")
    settings = model.layers[0].input_gate_cache
    model.set_lstm_approximation("bf16")
    with torch.no_grad():
        cached = outputs(model(**batch))
        bf16_gates = derived_weights(model.layers[0], "bf16", Bf16Multiplies).gate_cache
        words = len(bf16_gates)
        assert words > 0 and bf16_gates is not settings
        model.clear_caches()
        assert len(bf16_gates) == 0
        settings.max_words = 0
        off = outputs(model(**batch))
        assert len(bf16_gates) == 0
        settings.max_words, settings.add_new = words, False
        kept = outputs(model(**batch))
        assert len(bf16_gates) == 0  # (it held no words, and adds none)
        settings.add_new = True
        filled = outputs(model(**batch))
        assert len(bf16_gates) == words
        settings.max_words = words - 1  # (the batch alone would overflow it: computed, not kept)
        model.clear_caches()
        model(**batch)
        assert len(bf16_gates) == 0
    assert derived_weights(model.layers[0], "bf16", Bf16Multiplies).gate_cache is bf16_gates  # (the same cache)
    assert len(settings) == 0  # the exact model's cache was never used
    for found in (off, kept, filled):
        assert all(torch.equal(a, b) for a, b in zip(found, cached))


def test_builds_without_torchs_cpu_capability_read_the_kernels_flags_to_the_same_answer(monkeypatch):
    """cpu_flags falls back on /proc/cpuinfo's flags where torch cannot read the CPU's (before torch 2.11): on this
    CPU both give the same answer for bfloat16 and for VNNI."""
    if not hasattr(torch._C._cpu, "_get_cpu_capability"):
        pytest.skip(f"torch {torch.__version__} has no _get_cpu_capability: /proc/cpuinfo's flags are what every test "
                    "here reads")
    from_torch = approximate.native_bfloat16_extension.__wrapped__(), approximate.cpu_flags().get("avx512_vnni", False)
    monkeypatch.delattr(torch._C._cpu, "_get_cpu_capability")
    from_kernel = approximate.native_bfloat16_extension.__wrapped__(), approximate.cpu_flags().get("avx512_vnni", False)
    assert from_kernel == from_torch


@pytest.mark.parametrize("approximation", [None, *APPROXIMATIONS_HERE])
def test_a_model_that_ran_is_freed_with_its_derived_weights(fixture_model, approximation):
    """The derived copies of a layer's weights live beside it (`_DERIVED`, keyed weakly by the layer): nothing in
    them may hold the layer, or every model ever run stayed in memory with its weights (the exact multiplies held
    their layer)."""
    model, tokenizer = fixture_model
    model = copy.deepcopy(model)
    batch = tokenizer([["the", "model", "goes"], ["away"]], is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        model.set_lstm_approximation(approximation)
        model(**batch)
    modules = [weakref.ref(module) for module in model.modules() if module in fast_bilstm._DERIVED]
    assert len(modules) >= 3  # (the character encoder and both biLSTM layers)
    del model
    gc.collect()
    assert [module() for module in modules] == [None] * len(modules)


def test_leaving_an_approximation_drops_what_it_derived(fixture_model):
    """set_lstm_approximation(None) (and approximation_deviation, which ends there) kept every approximation's
    copies of the weights and the bf16 mode's gate cache (up to 128 MiB a layer) for the life of the model; the
    exact multiplies stay, and a mode chosen again is derived anew."""
    model, tokenizer = fixture_model
    model = copy.deepcopy(model)
    batch = tokenizer(FIXTURE_SETS["allennlp-elmo"].batches()[0], is_split_into_words=True, padding=True,
                      return_tensors="pt")
    for kind in APPROXIMATIONS_HERE:
        approximation_deviation(model, batch, kind)
        for layer in model.layers:
            assert layer.approximation is None
            assert built_derived_weights(layer, kind) is None, kind
            assert built_derived_weights(layer, "exact") is not None
    model.set_lstm_approximation(APPROXIMATIONS_HERE[-1])
    with torch.no_grad():
        model(**batch)
    assert all(built_derived_weights(layer, APPROXIMATIONS_HERE[-1]) is not None for layer in model.layers)
    model.set_lstm_approximation(APPROXIMATIONS_HERE[0])  # (one mode for another: the first one's go too)
    assert all(built_derived_weights(layer, APPROXIMATIONS_HERE[-1]) is None for layer in model.layers)


def test_bf16_mode_is_refused_where_the_cpu_would_emulate_bfloat16(fixture_model, monkeypatch):
    """On a CPU without AVX512-BF16 or AMX-BF16 (run as it is where CPU_BFLOAT16 is False; on a CPU that has one,
    with the detection made to answer None) opting in is one error naming the CPU, and the model stays exact."""
    model = copy.deepcopy(fixture_model[0])
    if CPU_BFLOAT16:
        monkeypatch.setattr(approximate, "native_bfloat16_extension", lambda: None)
    with pytest.raises(ValueError, match=rf"AVX512-BF16 or AMX-BF16; this one \({re.escape(fast_linear.cpu_name())}\)"):
        model.set_lstm_approximation("bf16")
    assert all(layer.approximation is None for layer in model.layers)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_bf16_and_int8_are_refused_on_a_model_that_is_not_float32(fixture_model, dtype):
    """Both derive their weights from float32 ones: one error naming the dtype, when opting in, when measuring, and
    at the next forward of a model converted after opting in. nn_lstm runs in the model's dtype."""
    model, tokenizer = fixture_model
    batch = tokenizer(FIXTURE_SETS["allennlp-elmo"].batches()[0], is_split_into_words=True, padding=True,
                      return_tensors="pt")
    converted = copy.deepcopy(model).to(dtype)
    for kind in ("bf16", "int8"):
        message = rf"^the '{kind}' approximation needs a float32 model, and this one is {dtype}: convert it with "
        with pytest.raises(ValueError, match=message + r"model.float\(\) first, or use 'nn_lstm'"):
            converted.set_lstm_approximation(kind)
        assert all(layer.approximation is None for layer in converted.layers)
        with pytest.raises(ValueError, match=message):
            approximation_deviation(converted, batch, kind)
        if kind not in APPROXIMATIONS_HERE:
            continue
        opted_in = copy.deepcopy(model)
        opted_in.set_lstm_approximation(kind)
        opted_in.to(dtype)
        with pytest.raises(ValueError, match=message), torch.no_grad():
            opted_in(**batch)
    converted.set_lstm_approximation("nn_lstm")
    with torch.no_grad():
        approximate = converted(**batch).hidden_states
    converted.set_lstm_approximation(None)
    with torch.no_grad():
        exact = converted(**batch).hidden_states
    assert all(layer.dtype == dtype for layer in approximate)
    assert 0 < largest_difference(approximate, exact) < 5  # (the fixture clips: nn.LSTM does not)
    assert all(0 <= value < 5 for value in approximation_deviation(converted, batch, "nn_lstm"))


@pytest.mark.parametrize("head", [ElmoForTokenClassification, ElmoForSequenceClassification, ElmoForPreTraining])
def test_the_heads_opt_in_to_an_approximation_of_their_bilm(converted, head, kernel_choices, monkeypatch):
    """set_lstm_approximation and approximation_deviation work on a head as on ElmoModel: its biLM's every layer."""
    folder = converted["allennlp-elmo"]
    model = head.from_pretrained(folder, num_labels=3, lm_vocab_size=10).eval()
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    batch = tokenizer(FIXTURE_SETS["allennlp-elmo"].batches()[0], is_split_into_words=True, padding=True,
                      return_tensors="pt")
    force_bfloat16_products(monkeypatch)
    with torch.no_grad():
        exact = model(**batch)[0]
        model.set_lstm_approximation("nn_lstm")
        assert [layer.approximation for layer in model.elmo.layers] == ["nn_lstm"] * 2
        approximate = model(**batch)[0]
        model.set_lstm_approximation(None)
        again = model(**batch)[0]
    assert (exact - approximate).abs().max() > 1e-5 and torch.equal(exact, again)
    bare = ElmoModel.from_pretrained(folder).eval()
    # (the head's caches hold words computed with its own batches, the pretraining head's without <S> and </S>,
    # whose float32 rounding differs in the last bit: both measure from empty caches)
    model.elmo.clear_caches()
    for kind in APPROXIMATIONS_HERE:
        assert approximation_deviation(model, batch, kind) == approximation_deviation(bare, batch, kind), kind
        assert all(layer.approximation is None for layer in model.elmo.layers)
    with pytest.raises(ValueError, match="unknown biLSTM approximation 'fp8'"):
        model.set_lstm_approximation("fp8")


@pytest.mark.parametrize("finetune_bilm", [False, True])
@pytest.mark.parametrize("kind", ["nn_lstm", "int8", pytest.param("bf16", marks=needs_cpu_bfloat16)])
def test_approximations_are_inference_only_training_is_exact(converted, kind, finetune_bilm, kernel_choices,
                                                             monkeypatch):
    """README: the approximations are inference only. A head that opted in, in training mode, gets the loss and the
    gradients of the same head without it, bit for bit: with its biLM frozen (the default), where nothing needs the
    biLSTM's gradient (the case that ran the approximation before), as with it fine-tuned (where the fused training
    path runs first: that case guards the order of the two). Back in eval mode it approximates again."""
    folder = converted["allennlp-elmo"]
    force_bfloat16_products(monkeypatch)
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    batch = tokenizer(FIXTURE_SETS["allennlp-elmo"].batches()[4], is_split_into_words=True, padding=True,
                      return_tensors="pt")
    labels = (batch["input_ids"][..., 1] % 3).masked_fill(batch["attention_mask"] == 0, -100)
    exact = ElmoForTokenClassification.from_pretrained(folder, num_labels=3, finetune_bilm=finetune_bilm, dropout=0.5)
    approximate = copy.deepcopy(exact)
    approximate.set_lstm_approximation(kind)
    steps = []
    for model in (exact, approximate):
        model.train()
        torch.manual_seed(0)  # (the same dropout masks)
        loss = model(**batch, labels=labels).loss
        loss.backward()
        steps.append((loss, {name: p.grad for name, p in model.named_parameters() if p.grad is not None}))
    (exact_loss, exact_grads), (loss, grads) = steps
    assert torch.equal(loss, exact_loss)
    assert grads.keys() == exact_grads.keys() and ("elmo.layers.0.input_weight" in grads) == finetune_bilm
    assert all(torch.equal(grads[name], exact_grads[name]) for name in grads)
    with torch.no_grad():
        assert (approximate.eval()(**batch).logits - exact.eval()(**batch).logits).abs().max() > 1e-6


def test_nn_lstm_mode_equals_exact_where_nothing_is_clipped():
    """Without clipping the cell is the same; so nn.LSTM must agree with the plain path when no clip fires."""
    torch.manual_seed(0)
    config = ElmoConfig(cell_size=64, projection_dim=16, num_highway_layers=1, char_cnn_filters=[[1, 8], [2, 8]],
                        cell_clip=None, proj_clip=None)
    model = ElmoModel(config).eval()
    tokenizer = ElmoTokenizer()
    batch = tokenizer([["a", "short", "one"], ["and", "a", "longer", "sentence", "here"]], is_split_into_words=True,
                      padding=True, return_tensors="pt")
    assert max(approximation_deviation(model, batch, "nn_lstm")) < 1e-6


def test_the_caches_default_sizes_and_turning_them_off(fixture_model):
    """README: the vectors of the last 20,000 distinct words, the input gates of the last 1,024 at the original size
    (128 KB a word, 128 MB in all; more words for smaller cells); max_words = 0 turns each off."""
    with torch.device("meta"):
        original = ElmoModel(ElmoConfig(cell_size=4096, projection_dim=512, num_highway_layers=2))
        small = ElmoModel(ElmoConfig(cell_size=1024, projection_dim=128, num_highway_layers=1))
    assert original.char_encoder.token_cache.max_words == 20_000
    assert original.layers[0].input_gate_cache.max_words == 1_024  # 2 directions x 4 gates x 4096 x 4 bytes a word
    assert small.layers[0].input_gate_cache.max_words == 4_096
    model, tokenizer = fixture_model
    model = copy.deepcopy(model)
    batch = tokenizer([["a", "test", "a", "test"], ["another", "test"]], is_split_into_words=True, padding=True,
                      return_tensors="pt")
    with torch.no_grad():
        cached = model(**batch).hidden_states
        caches = (model.char_encoder.token_cache, model.layers[0].input_gate_cache)
        assert all(len(cache) > 0 for cache in caches)
        model.clear_caches()
        for cache in caches:
            cache.max_words = 0
        uncached = model(**batch).hidden_states
        again = model(**batch).hidden_states
    assert all(len(cache) == 0 for cache in caches)
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(cached, uncached, again))


def test_approximations_that_cannot_run_are_refused_when_chosen(fixture_model):
    """int8's products are CPU kernels: a model on another device (here meta) is refused when it opts in, not by a
    kernel. torch.nn.LSTM holds no cell projection as wide as the cell: 'nn_lstm' on such a model (the `ptb-cpu`
    size with a character vocabulary, 300 cells projected to 300) was accepted, and then every call failed 19
    frames deep in torch; it is refused when chosen, and a narrower projection is accepted."""
    model = copy.deepcopy(fixture_model[0]).to("meta")
    with pytest.raises(ValueError, match=r"^the 'int8' approximation runs on CPU only, and this model is on meta: "):
        model.set_lstm_approximation("int8")
    small = {"char_cnn_filters": [[1, 4]], "num_highway_layers": 1, "always_project": True}
    square = ElmoModel(ElmoConfig(cell_size=16, projection_dim=16, **small)).eval()
    with pytest.raises(ValueError, match=r"^the 'nn_lstm' approximation cannot run this model: torch.nn.LSTM needs a "
                                         r"cell projection narrower than the cell, and this one projects 16 cells to 16"):
        square.set_lstm_approximation("nn_lstm")
    assert [layer.approximation for layer in square.layers] == [None, None]
    narrow = ElmoModel(ElmoConfig(cell_size=16, projection_dim=8, **small)).eval()
    narrow.set_lstm_approximation("nn_lstm")
    ids = ElmoTokenizer()(["a b c"], return_tensors="pt")
    assert torch.isfinite(narrow(**ids).last_hidden_state).all()


def test_an_approximation_chosen_runs_with_the_fast_path_off_too(fixture_model):
    """set_fast_path(False) is the plain definition everywhere but for an approximation opted into, which still runs
    in eval mode (as set_fast_path's docstring says); set_lstm_approximation(None) is the exact model."""
    model, tokenizer = copy.deepcopy(fixture_model[0]), fixture_model[1]
    batch = tokenizer(FIXTURE_SETS["allennlp-elmo"].batches()[0], is_split_into_words=True, padding=True,
                      return_tensors="pt")
    with torch.no_grad():
        exact = model(**batch).last_hidden_state
        model.set_lstm_approximation("int8")
        approximate = model(**batch).last_hidden_state
        model.set_fast_path(False)
        assert torch.equal(model(**batch).last_hidden_state, approximate)
        model.set_lstm_approximation(None)
        plain = model(**batch).last_hidden_state
    assert not torch.allclose(approximate, exact, atol=1e-3) and torch.allclose(plain, exact, atol=1e-6)


def test_under_autocast_inference_runs_the_plain_path_without_caches(fixture_model, monkeypatch):
    """approximate.py: torch.autocast around the model works, through the plain path (no fast path, no cache)."""
    import hf_elmo.modeling_elmo as modeling

    model, tokenizer = fixture_model
    model = copy.deepcopy(model)
    model.clear_caches()
    fast_calls = []
    fast = modeling.fast_bilstm_layer
    monkeypatch.setattr(modeling, "fast_bilstm_layer", lambda *args, **kwargs: fast_calls.append(1) or fast(*args, **kwargs))
    batch = tokenizer(FIXTURE_SETS["allennlp-elmo"].batches()[0], is_split_into_words=True, padding=True,
                      return_tensors="pt")
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = outputs(model(**batch))
        assert fast_calls == [] and len(model.char_encoder.token_cache) == len(model.layers[0].input_gate_cache) == 0
        exact = outputs(model(**batch))
    assert fast_calls and len(model.char_encoder.token_cache) > 0  # (without autocast, both are used)
    assert 0 < largest_difference([m.float() for m in mixed], exact) < 0.5


def _threaded_outputs(model, batches: list, threads: int = 4) -> tuple[list, list[str]]:
    """Each thread runs every batch through `model`, all threads at once (as a server's workers do); the outputs
    per thread and batch, and the errors raised."""
    results, errors = [[None] * len(batches) for _ in range(threads)], []
    start = threading.Barrier(threads)

    def work(thread: int):
        try:
            start.wait()
            order = range(len(batches)) if thread % 2 == 0 else range(len(batches) - 1, -1, -1)
            for index in order:
                with torch.no_grad():
                    results[thread][index] = model(**batches[index]).hidden_states
        except Exception as error:
            errors.append(f"{type(error).__name__}: {error}"[:200])

    workers = [threading.Thread(target=work, args=(thread,), daemon=True) for thread in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=300)
    assert not any(worker.is_alive() for worker in workers), "a thread hangs"
    return results, errors


@pytest.mark.parametrize("approximation", [None, "nn_lstm", "int8"])
def test_threads_running_one_model_at_once_get_what_one_thread_gets(monkeypatch, tmp_path, approximation):
    """The caches, the derived weights and their kernel choices are filled while threads run the model at once: from
    cold (no kernel measured yet, as in a new process, for the exact path), with caches small enough to evict words
    all along."""
    choices_file = tmp_path / "kernels.json"
    monkeypatch.setenv("HF_ELMO_KERNEL_CHOICES", str(choices_file))
    monkeypatch.setattr(fast_linear, "_FASTEST", {})
    model, batches = _small_model_and_batches()
    model.set_lstm_approximation(approximation)
    if approximation is None:
        reference = plain(model)  # (which measures no kernel)
    else:  # (an approximation's numbers depend on how rows are grouped, and on its kernels, which differ in rounding:
        # its own run in one thread is the reference, and the threads read the kernels it chose from the file)
        reference = copy.deepcopy(model)
    with torch.no_grad():
        expected = [reference(**batch).hidden_states for batch in batches]
    monkeypatch.setattr(fast_linear, "_FASTEST", {})
    model.char_encoder.token_cache.max_words = 40
    model.layers[0].input_gate_cache.max_words = 40

    results, errors = _threaded_outputs(model, batches)

    assert errors == []
    worst = max(largest_difference(got, want) for per_thread in results for got, want in zip(per_thread, expected))
    if approximation == "int8":
        # It quantizes each multiply's rows with a scale of their own: a word's input gates depend on the words computed
        # with it, which the cache's history decides, in one thread too (1.1e-3 here, against 1.2e-2 from exact).
        exact_model = plain(model)
        exact_model.set_lstm_approximation(None)
        with torch.no_grad():
            exact = [exact_model(**batch).hidden_states for batch in batches]
        gap = max(largest_difference(a, b) for a, b in zip(expected, exact))
        print(f"int8 threaded {worst:.3g}, int8 against exact {gap:.3g}")
        assert worst < 0.3 * gap
        return
    for per_thread in results:  # (the bar of the exact fast paths against the plain one; measured 4.8e-7 at most)
        for got, want in zip(per_thread, expected):
            assert all(torch.allclose(a, b, rtol=1e-6, atol=1e-6) for a, b in zip(got, want))
    # Every choice made is in the file, which later processes read (so that they multiply as this one did).
    stored = json.loads(choices_file.read_text())[fast_linear._this_machine()]
    assert {json.dumps([list(key[0]), *key[1:]]) for key in fast_linear._FASTEST} <= set(stored)


def _small_model_and_batches() -> tuple[ElmoModel, list]:
    """A small random model in eval mode, and 29 batches of 1 to 8 of the fixture's sentences."""
    torch.manual_seed(0)
    config = ElmoConfig(char_cnn_filters=((1, 16), (2, 32), (3, 48)), num_highway_layers=2, cell_size=96,
                        projection_dim=40, cell_clip=3.0, proj_clip=3.0)
    sentences = [sentence for batch in FIXTURE_SETS["allennlp-elmo"].batches() for sentence in batch]
    sizes = [1, 2, 3, 5, 7, 4, 6, 8]  # (a new number of rows takes a new kernel choice)
    tokenizer = ElmoTokenizer()
    batches = [tokenizer(sentences[start : start + size], is_split_into_words=True, padding=True, return_tensors="pt")
               for start in range(len(sentences) - 1) for size in [sizes[start % len(sizes)]]]
    return ElmoModel(config).eval(), batches


def test_caches_emptied_and_the_approximation_switched_while_threads_run_the_model():
    """clear_caches(), weights_changed() and set_lstm_approximation() called while three threads run the model: no
    call fails, and each runs each biLSTM layer in one mode or the other (the switch goes layer by layer)."""
    model, batches = _small_model_and_batches()
    references = []
    for kinds in itertools.product([None, "nn_lstm"], repeat=len(model.layers)):
        reference = copy.deepcopy(model)
        for layer, kind in zip(reference.layers, kinds):
            layer.approximation = kind
        with torch.no_grad():
            references.append([reference(**batch).hidden_states for batch in batches])
    stop = threading.Event()

    def switch():
        while not stop.is_set():
            model.set_lstm_approximation("nn_lstm")
            model.clear_caches()
            model.set_lstm_approximation(None)
            model.weights_changed()

    switcher = threading.Thread(target=switch)
    switcher.start()
    try:
        results, errors = _threaded_outputs(model, batches, threads=3)
    finally:
        stop.set()
        switcher.join()

    assert errors == []
    for per_thread in results:
        for index, got in enumerate(per_thread):
            assert any(all(torch.allclose(a, b, rtol=1e-6, atol=1e-6) for a, b in zip(got, reference[index]))
                       for reference in references)


def test_a_thread_waits_only_for_the_module_another_thread_is_in():
    """While one thread holds the character encoder (its inference lock), another runs a biLSTM layer, and one that
    calls the encoder waits for it."""
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(char_cnn_filters=((1, 8), (2, 16)), num_highway_layers=1, cell_size=32,
                                 projection_dim=16)).eval()
    batch = ElmoTokenizer()([["a", "short", "one"]], is_split_into_words=True, return_tensors="pt")
    inputs, step_mask = torch.randn(2, 1, 5, 16), torch.ones(1, 5, dtype=torch.bool)
    state = (torch.zeros(2, 1, 16), torch.zeros(2, 1, 32))
    done = {}

    def run(name, call):
        with torch.no_grad():
            done[name] = call()

    layer = threading.Thread(target=run, args=("layer", lambda: model.layers[0](inputs, step_mask, *state)))
    encoder = threading.Thread(target=run, args=("model", lambda: model(**batch)))
    with fast_bilstm.inference_lock(model.char_encoder):
        layer.start()
        layer.join(timeout=120)
        encoder.start()
        encoder.join(timeout=1)
        assert "layer" in done and "model" not in done
    encoder.join(timeout=120)
    assert "model" in done
