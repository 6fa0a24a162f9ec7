"""The hf_elmo benchmark workers run for real (run.Worker, as run.py and train_bench.py drive them) on the tiny
trained fixture model: what a run reports and saves, and that one step's gradient is not added to the next's; and
bench_common's replies and memory readings."""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from benchmark_measurements import run  # (puts benchmarks/ on the path)
from conftest import REPO

from bench_common import memory_mb, run_batches, step_reply
SENTENCES = [["the", "cat", "sat", "on", "the", "mat"], ["a", "dog", "ran"], ["birds", "fly", "south", "now"]]


@pytest.fixture(scope="module")
def worker_files(converted, tmp_path_factory):
    """(a folder for the workers' logs and outputs, the converted allennlp-elmo fixture, the inputs file)."""
    folder = tmp_path_factory.mktemp("workers")
    inputs = folder / "inputs.json"
    inputs.write_text(json.dumps({"batch": [SENTENCES], "single": [[s] for s in SENTENCES * 3],
                                  "windows": [s[:3] for s in SENTENCES]}))
    return folder, converted["allennlp-elmo"], inputs


def worker(folder, script, model, inputs):
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return run.Worker(script, [sys.executable, script, str(model), str(inputs), "1"], env, folder / f"{script}.log")


def test_hf_worker_warm_runs_hit_the_caches_cold_runs_miss_and_saves_each_sentences_words(worker_files):
    folder, model, inputs = worker_files
    hf = worker(folder, "hf_worker.py", model, inputs)
    try:
        warm = hf.call("run", case="batch", mode="warm", save=str(folder / "warm.npz"))  # (its first run: caches empty)
        assert warm["cache_misses_last_batch"] == 0 and warm["words"] == 13
        cold = hf.call("run", case="batch", mode="cold", save=str(folder / "cold.npz"))
        assert cold["cache_misses_last_batch"] > 0
        assert 0 < cold["lstm_seconds"] <= cold["seconds"]
        for _ in range(2):  # (9 sentences one at a time: every batch's time counts, the biLSTM's part of it each run)
            single = hf.call("run", case="single", mode="cold")
            assert single["words"] == 39 and 0 < single["lstm_seconds"] <= single["seconds"], single
        saved = np.load(folder / "cold.npz")
        assert sorted(saved.files) == sorted(f"b0_r{r}_l{l}" for r in range(3) for l in range(3))
        for r, words in enumerate(SENTENCES):
            assert saved[f"b0_r{r}_l2"].shape[0] == len(words)  # (no padding rows)
        assert run.max_difference(folder / "cold.npz", folder / "warm.npz", 3) == [0.0, 0.0, 0.0]
    finally:
        hf.close()


def test_hf_train_worker_steps_do_not_accumulate_gradients(worker_files):
    folder, model, inputs = worker_files
    hf = worker(folder, "hf_train_worker.py", model, inputs)
    try:
        first, second = hf.call("step", mode="plain"), hf.call("step", mode="plain")
        assert first["words"] == 9
        a, b = np.asarray(first["char_embedding_grad"]), np.asarray(second["char_embedding_grad"])
        assert np.abs(a).max() > 0 and np.abs(a - b).max() <= 1e-3 * np.abs(a).max(), np.abs(a - b).max()
    finally:
        hf.close()


def test_memory_mb_peak_is_the_high_water_mark():
    block = bytearray(300 * 2**20)
    block[:: 4096] = b"x" * len(block[:: 4096])  # (touch every page)
    del block
    memory = memory_mb()
    assert memory["peak"] >= memory["rss"] + 200, memory


PEAK_PROBE = """
import builtins, sys
sys.path.insert(0, sys.argv[1])
import bench_common
block = bytearray(400 * 2**20)
block[:: 4096] = b"x" * len(block[:: 4096])  # (touch every page: a peak of the run before the probe)
del block
if sys.argv[2] == "unwritable":
    real_open = builtins.open
    builtins.open = lambda path, *args, **kwargs: (_ for _ in ()).throw(PermissionError(13, "read-only")) if str(
        path).endswith("clear_refs") else real_open(path, *args, **kwargs)
bench_common.outside_the_peak(lambda: {"bytes": len(bytearray(300 * 2**20))})  # (its buffer freed inside)
memory = bench_common.memory_mb()
print(memory["peak"] - memory["rss"])
"""


@pytest.mark.parametrize("clear_refs", ["writable", "unwritable"])
def test_a_measurement_outside_the_peak_keeps_the_peak_before_it_or_reads_nan(clear_refs):
    """The peak reached before a probe (400 MiB) is kept although the kernel's counter is reset after the probe (its
    300 MiB left out), which forgets it; where the counter cannot be reset, the peak reads NaN, not a figure that
    holds the probe's buffers."""
    result = subprocess.run([sys.executable, "-c", PEAK_PROBE, str(REPO / "benchmarks"), clear_refs],
                            capture_output=True, text=True, timeout=120)
    above_rss = float(result.stdout)
    assert math.isnan(above_rss) if clear_refs == "unwritable" else above_rss >= 350, (above_rss, result.stderr)


def test_the_ceilings_buffers_stay_out_of_the_hf_workers_peak_memory(worker_files):
    """The machine's ceiling (a 512 MiB bandwidth buffer and the multiply probe), which only the hf_elmo worker
    measures, counted in its running peak: RESULTS.md's "while running" row held about 600 MiB that AllenNLP's
    never had. The peak of the runs before it is kept; the probe's own is left out."""
    folder, model, inputs = worker_files
    hf = worker(folder, "hf_worker.py", model, inputs)
    try:
        hf.call("run", case="batch", mode="cold")
        before = hf.call("memory")["memory"]
        ceiling = hf.call("ceiling", seconds=0.1)
        after = hf.call("memory")["memory"]
        assert ceiling["bandwidth_buffer_mib"] >= 256  # (what the peak would hold)
        assert before["peak"] <= after["peak"] < before["peak"] + ceiling["bandwidth_buffer_mib"] / 2, (before, after)
    finally:
        hf.close()


def test_run_batches_and_step_reply_count_words_not_sentences(tmp_path):
    batches = [[["a", "b"], ["c"]], [["d", "e", "f"]]]
    reply = run_batches(lambda batch: [np.ones((len(s), 2)) for s in batch], batches,
                        lambda batch, output: [[values] for values in output], save=str(tmp_path / "out.npz"))
    assert reply["words"] == 6 and sorted(np.load(tmp_path / "out.npz").files) == ["b0_r0_l0", "b0_r1_l0", "b1_r0_l0"]
    assert step_reply(1.0, 2.0, [["a", "b"], ["c"]], torch.zeros(2))["words"] == 3


def test_the_cpu_model_and_its_extensions_are_read_from_cpuinfo(monkeypatch):
    # (an AMD Bulldozer: FMA4 but not FMA)
    monkeypatch.setattr(run, "cpuinfo", lambda: {"model name": "AMD Opteron(TM) Processor 6234",
                                                 "vendor_id": "AuthenticAMD",
                                                 "cpu family": "21", "model": "1", "flags": "fpu sse4_2 avx fma4 xop"})
    cpu = run.describe_cpu()
    assert cpu["model"] == "AMD Opteron(TM) Processor 6234" and cpu["model_number"] == "1" and cpu["extensions"] == []
    assert run.section_heading(cpu) == "## CPU: AMD Opteron(TM) Processor 6234 (AuthenticAMD, family 21, model 1)"


def test_hf_train_worker_runs_the_path_each_mode_names(worker_files):
    """The fused (fast) and the plain path round differently (a few 1e-6 of the gradient's size): the worker's
    "fast" step is the fused path's gradient, its "plain" step the plain path's, as this process computes them."""
    from hf_elmo import ElmoModel, ElmoTokenizer

    folder, model_dir, inputs = worker_files
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # (as the worker runs: OMP_NUM_THREADS=1)
    model, tokenizer = ElmoModel.from_pretrained(model_dir).train(), ElmoTokenizer.from_pretrained(model_dir)
    batch = tokenizer([s[:3] for s in SENTENCES], is_split_into_words=True, padding=True, return_tensors="pt")

    def gradient(fast: bool) -> np.ndarray:
        model.set_fast_path(fast)
        sum(layer.sum() for layer in model(**batch, output_final_states=False).hidden_states).backward()
        grad = model.char_encoder.char_embedding.weight.grad.numpy().copy()
        model.zero_grad(set_to_none=True)
        return grad

    try:
        expected = {"fast": gradient(True), "plain": gradient(False)}
    finally:
        torch.set_num_threads(threads)
    assert np.abs(expected["fast"] - expected["plain"]).max() > 0
    hf = worker(folder, "hf_train_worker.py", model_dir, inputs)
    try:
        for mode, other in (("fast", "plain"), ("plain", "fast")):
            got = np.asarray(hf.call("step", mode=mode)["char_embedding_grad"])
            assert np.abs(got - expected[mode]).max() < np.abs(got - expected[other]).max(), mode
    finally:
        hf.close()


CHANNEL = """
import sys
sys.path.insert(0, sys.argv[1])
import bench_common

def fails():
    raise RuntimeError("a kernel failed")

bench_common.Channel().serve({"fails": fails, "works": lambda: {"ok": 1}})
"""


def test_a_workers_error_is_sent_to_the_driver_and_the_worker_goes_on():
    """A request that raises is answered with its traceback (the driver stops the benchmark with it, rather than with
    "worker stopped" and a log's tail), and the worker answers the next request."""
    result = subprocess.run([sys.executable, "-c", CHANNEL, str(REPO / "benchmarks")], capture_output=True, text=True,
                            input='{"cmd": "fails"}\n{"cmd": "works"}\n{"cmd": "quit"}\n', timeout=120)
    replies = [json.loads(line) for line in result.stdout.splitlines()]
    assert result.returncode == 0 and len(replies) == 3, result.stderr
    assert replies[0]["error"].strip().splitlines()[-1] == "RuntimeError: a kernel failed"
    assert replies[1] == {"ok": 1} and "memory" in replies[2]
