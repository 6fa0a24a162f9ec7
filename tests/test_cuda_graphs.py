"""The GPU path's static loop (`hf_elmo/cuda_graphs.py`): bucketing, masking and numbers, run eagerly on CPU (the
graph capture itself needs CUDA, where the same tests also run captured)."""

import subprocess
import sys

import pytest
import torch

from conftest import DEVICES
from hf_elmo import ElmoModel, ElmoTokenizer
from hf_elmo.cuda_graphs import GraphedBiLstm, bucket, exact_float32_matmul


def test_bucket_rounds_up_to_three_significant_bits():
    assert [bucket(n) for n in (1, 7, 8, 9, 10, 11, 17, 27, 32, 33, 100, 256, 257)] == [
        1, 7, 8, 10, 10, 12, 20, 28, 32, 40, 112, 256, 320]
    assert all(n <= bucket(n) <= 1.25 * n for n in range(1, 2000))
    assert len({bucket(n) for n in range(1, 257)}) == 28  # so few graphs cover every batch up to 256


@pytest.fixture(scope="module")
def trained_layers(converted):
    """The trained fixture model's biLSTM layers: their cells reach the clips (3)."""
    return ElmoModel.from_pretrained(converted["allennlp-elmo"]).eval().layers


def ragged(batch: int, steps: int, layer, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    proj, cell = layer.input_weight.shape[-1], layer.recurrent_weight.shape[1] // 4
    lengths = torch.randint(1, steps + 1, (batch,), generator=generator)
    lengths[0] = steps
    step_mask = torch.arange(steps) < lengths[:, None]
    inputs = torch.randn(2, batch, steps, proj, generator=generator) * step_mask[None, :, :, None]
    h = torch.randn(2, batch, proj, generator=generator) * 0.5
    c = torch.randn(2, batch, cell, generator=generator)
    return inputs, step_mask, h, c


@pytest.mark.parametrize("device", DEVICES)
def test_static_loop_at_bucketed_shapes_matches_the_plain_path(trained_layers, device):
    """9 ragged rows of 9 steps run at the bucket (10 steps, 10 rows): the padding is masked away, every output
    and final state is the plain path's, and a second batch of the same bucket reuses it without leaking the
    first batch's values. On CUDA the loop is a captured graph, without TF32 (within 2e-6 of the CPU)."""
    for index, layer in enumerate(trained_layers):
        layer = layer.to(device)
        runner = GraphedBiLstm(layer, capture=device == "cuda")
        for seed, batch in ((0, 9), (1, 10)):
            inputs, step_mask, h, c = (t.to(device) for t in ragged(batch, 9, layer, seed + 2 * index))
            with torch.no_grad():
                found = runner(inputs, step_mask, h, c)
                expected = layer._plain_forward(inputs, step_mask, h, c)
            for a, b in zip(found, expected):
                assert a.shape == b.shape
                assert torch.allclose(a, b, rtol=2e-6, atol=2e-6)
            assert torch.all(found[0][:, ~step_mask] == 0)
        assert list(runner.buckets) == [(10, 10)]
        layer.cpu()


@pytest.mark.parametrize("device", DEVICES)
def test_a_bucket_made_under_inference_mode_serves_calls_outside_it(trained_layers, device):
    """ElmoEmbedder computes under torch.inference_mode: a bucket's buffers made there were inference tensors, and
    the next call at the same bucket under torch.no_grad (the same model, so the same runner) failed writing them
    ("Inplace update to inference tensor outside InferenceMode"). Both calls give the plain path's numbers."""
    layer = trained_layers[0].to(device)
    runner = GraphedBiLstm(layer, capture=device == "cuda")
    inputs, step_mask, h, c = (t.to(device) for t in ragged(9, 9, layer))
    with torch.no_grad():
        expected = layer._plain_forward(inputs, step_mask, h, c)
    for mode in (torch.inference_mode, torch.no_grad, torch.inference_mode):
        with mode():
            found = runner(inputs, step_mask, h, c)
        assert all(torch.allclose(a, b, rtol=2e-6, atol=2e-6) for a, b in zip(found, expected)), mode
    assert list(runner.buckets) == [(10, 10)]
    layer.cpu()


def test_long_batches_in_input_blocks_and_the_bucket_limit(trained_layers, monkeypatch):
    """The input multiply in blocks of BLOCK_ROWS positions (here 8: blocks of 2 steps for 4 rows, the last one
    short), the outputs new tensors even for one row, and the least recently used bucket dropped beyond
    MAX_GRAPHS."""
    import hf_elmo.cuda_graphs as cuda_graphs

    layer = trained_layers[0]
    monkeypatch.setattr(cuda_graphs, "BLOCK_ROWS", 8)
    monkeypatch.setattr(cuda_graphs, "MAX_GRAPHS", 2)
    runner = GraphedBiLstm(layer, capture=False)
    with torch.no_grad():
        for batch, steps in ((4, 7), (1, 8), (4, 7), (3, 5)):
            inputs, step_mask, h, c = ragged(batch, steps, layer, seed=batch)
            found = runner(inputs, step_mask, h, c)
            expected = layer._plain_forward(inputs, step_mask, h, c)
            assert all(torch.allclose(a, b, rtol=2e-6, atol=2e-6) for a, b in zip(found, expected)), (batch, steps)
            # Not views of the bucket's results, which a captured graph's next replay overwrites in place.
            results = runner.buckets[(bucket(steps), bucket(batch))].results
            storage = {t.untyped_storage().data_ptr() for t in results}
            assert not storage & {t.untyped_storage().data_ptr() for t in found}, (batch, steps)
    # (8, 1) was the least recently used, though (7, 4) was made first.
    assert list(runner.buckets) == [(7, 4), (5, 3)]


def test_capturing_graphs_of_a_layer_off_the_gpu_is_refused_naming_capture_false(trained_layers):
    """capture=True (the default) on a CPU layer ended in torch's "Tried to instantiate dummy base class
    _graph_pool_handle" on a build without CUDA."""
    with pytest.raises(ValueError, match=r"^GraphedBiLstm\(capture=True\) records CUDA graphs, and the layer is on cpu: "
                                         r"move it to a GPU, or pass capture=False"):
        GraphedBiLstm(trained_layers[0])


def test_bf16_static_loop_stays_close_to_the_exact_one(trained_layers):
    layer = trained_layers[1]
    inputs, step_mask, h, c = ragged(5, 7, layer)
    with torch.no_grad():
        found = GraphedBiLstm(layer, torch.bfloat16, capture=False)(inputs, step_mask, h, c)
        expected = layer._plain_forward(inputs, step_mask, h, c)
    deviation = max((a - b).abs().max().item() for a, b in zip(found, expected))
    assert all(t.dtype == torch.float32 for t in found)
    assert 1e-4 < deviation < 0.2


@pytest.mark.parametrize("switch", ["legacy", "per-backend", "cuBLAS's only"])
def test_exact_float32_matmul_turns_tf32_off_and_restores_either_switch(switch):
    """Inside the block cuBLAS may not use TF32, whichever switch the caller set it with; after it, the caller's
    setting is back and still readable through that switch (PyTorch refuses reads that mix the two)."""
    set_tf32, read = {
        "legacy": ("torch.set_float32_matmul_precision('high')", "torch.get_float32_matmul_precision()"),
        "per-backend": ("torch.backends.cuda.matmul.fp32_precision = 'tf32'", "torch.backends.cuda.matmul.fp32_precision"),
        # (cuBLAS's alone: the restore through the legacy switch set oneDNN's CPU one to TF32 as well)
        "cuBLAS's only": ("torch.backends.cuda.matmul.allow_tf32 = True", "torch.backends.cuda.matmul.allow_tf32"),
    }[switch]
    program = "\n".join([
        "import torch", "from hf_elmo.cuda_graphs import exact_float32_matmul", set_tf32, f"before = {read}",
        "cpu = torch.backends.mkldnn.matmul.fp32_precision",
        "with exact_float32_matmul():", "    inside = torch.backends.cuda.matmul.fp32_precision",
        f"print(before, inside, {read}, cpu, torch.backends.mkldnn.matmul.fp32_precision)",
    ])
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    before, inside, after, cpu_before, cpu_after = result.stdout.split()
    assert inside == "ieee" and after == before and before in ("high", "tf32", "True") and cpu_after == cpu_before
    with exact_float32_matmul():  # the default (no TF32) is left alone
        assert torch.get_float32_matmul_precision() == "highest"


def test_exact_float32_matmul_in_two_threads_restores_the_switch_when_the_last_block_ends():
    """The switch is the process's: a thread that leaves its block first must not turn TF32 back on under another
    thread's block that still runs."""
    program = "\n".join([
        "import threading, torch", "from hf_elmo.cuda_graphs import exact_float32_matmul",
        "torch.set_float32_matmul_precision('high')",
        "first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()",
        "seen = []",
        "def first():",
        "    with exact_float32_matmul():",
        "        first_in.set(); second_in.wait()",
        "    first_out.set()",
        "def second():",
        "    first_in.wait()",
        "    with exact_float32_matmul():",
        "        second_in.set(); first_out.wait()",
        "        seen.append(torch.get_float32_matmul_precision())",
        "threads = [threading.Thread(target=first), threading.Thread(target=second)]",
        "[thread.start() for thread in threads]; [thread.join() for thread in threads]",
        "print(seen[0], torch.get_float32_matmul_precision())",
    ])
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.split() == ["highest", "high"]


@pytest.mark.parametrize("device", DEVICES)
def test_whole_model_through_the_static_loop_matches_the_fast_path(converted, device, monkeypatch):
    """The model with every biLSTM layer run by the static loop (eagerly on CPU, captured on CUDA), on the
    fixture's real sentences, against the CPU's fast path."""
    folder = converted["allennlp-elmo"]
    model, tokenizer = ElmoModel.from_pretrained(folder).eval(), ElmoTokenizer.from_pretrained(folder)
    batches = [tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt") for sentences in
               ([["a", "short", "one"], ["and", "a", "longer", "sentence", "here", "."]], [["The", "cat", "sat", "."]])]
    with torch.no_grad():
        expected = [model(**batch) for batch in batches]  # the CPU's fast path
    runners = {}

    def through_static_loop(layer, inputs, step_mask, h, c, **_):
        runner = runners.setdefault(id(layer), GraphedBiLstm(layer, capture=inputs.is_cuda))
        return runner(inputs, step_mask, h, c)

    monkeypatch.setattr("hf_elmo.modeling_elmo.fast_bilstm_layer", through_static_loop)
    model.to(device)
    with torch.no_grad():
        for batch, reference in zip(batches, expected):
            found = model(**batch.to(device))
            for a, b in zip([*found.hidden_states, *found.final_states],
                            [*reference.hidden_states, *reference.final_states]):
                assert torch.allclose(a.cpu(), b, rtol=2e-6, atol=2e-6)
    assert len(runners) == 2 and all(len(runner.buckets) == 2 for runner in runners.values())


@pytest.mark.parametrize("device", DEVICES)
def test_a_row_that_starts_late_is_masked_like_the_plain_loop(trained_layers, device):
    """On a GPU the layer reads no mask from the device before its graph runs (the host would wait for the layer
    before): the static loop takes any mask, here a row whose steps start at 3, and gives the plain loop's
    numbers; on CPU the packed loop refuses such a row and the plain loop runs."""
    layer = trained_layers[0].to(device)
    inputs, step_mask, h, c = (t.to(device) for t in ragged(4, 9, layer, seed=5))
    step_mask[1, :3] = False
    with torch.no_grad():
        found = layer(inputs, step_mask, h, c)
        expected = layer._plain_forward(inputs, step_mask, h, c)
    for a, b in zip(found, expected):
        assert torch.allclose(a, b, rtol=2e-6, atol=2e-6)
    assert torch.all(found[0][:, 1, :3] == 0)
    layer.cpu()


def test_a_shorter_call_at_the_same_bucket_gives_the_plain_paths_final_states(trained_layers):
    """10 steps, then 9 steps (both in the bucket of 10): the second call's final states are the plain path's, not
    those of one more step past each row's end (the first call's mask left there)."""
    layer = trained_layers[0]
    runner = GraphedBiLstm(layer, capture=False)
    with torch.no_grad():
        for steps, batch, seed in ((10, 10, 0), (9, 10, 1), (9, 9, 2)):
            inputs, step_mask, h, c = ragged(batch, steps, layer, seed=seed)
            step_mask[:] = True  # every row to its last step: the final state is the one after step `steps`
            found = runner(inputs, step_mask, h, c)
            expected = layer._plain_forward(inputs, step_mask, h, c)
            for a, b in zip(found, expected):
                assert a.shape == b.shape
                assert torch.allclose(a, b, rtol=2e-6, atol=2e-6), (steps, batch)
    assert list(runner.buckets) == [(10, 10)]
