"""Benchmark worker for hf_elmo, run by `run.py` with the project's interpreter.

    python hf_worker.py MODEL_DIR INPUTS.json THREADS

Modes of a run: "cold" empties the caches of per-word results before every batch (each distinct word of a
batch goes through the char CNN and the first layer's input multiply once); "warm" first runs the same batches
untimed, so every word is in the caches; "kept" leaves the caches as the previous run left them.
"""

import functools
import sys
import time
from pathlib import Path

from bench_common import Channel, load_inputs, memory_bandwidth, memory_mb, outside_the_peak, timed

channel = Channel()
model_dir, inputs_file, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch  # noqa: E402

torch.set_num_threads(threads)
from hf_elmo import ElmoModel, ElmoTokenizer  # noqa: E402
from hf_elmo.approximate import native_bfloat16_extension  # noqa: E402

imported = memory_mb()
load_seconds, model = timed(lambda: ElmoModel.from_pretrained(model_dir).eval())
tokenizer = ElmoTokenizer.from_pretrained(model_dir)
loaded = memory_mb()
inputs = load_inputs(inputs_file)
config = model.config

# Time the biLSTM part of each forward by wrapping the model's own method.
lstm_seconds = 0.0
_run_bilstm = model._run_bilstm


def _timed_run_bilstm(*args, **kwargs):
    global lstm_seconds
    start = time.perf_counter()
    result = _run_bilstm(*args, **kwargs)
    lstm_seconds += time.perf_counter() - start
    return result


model._run_bilstm = _timed_run_bilstm


def embed(sentences):
    batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    return model(**batch, output_final_states=False).hidden_states


def run(case: str, mode: str = "cold", save: str | None = None, approximation: str | None = None) -> dict:
    global lstm_seconds
    batches = inputs[case]
    model.set_lstm_approximation(approximation)
    cache = model.char_encoder.token_cache
    with torch.no_grad():
        if mode == "warm":
            for batch in batches:
                embed(batch)
        lstm_seconds, outputs, seconds = 0.0, [], 0.0
        for batch in batches:
            if mode == "cold":
                model.clear_caches()
            misses = cache.misses
            batch_seconds, layers = timed(lambda: embed(batch))
            seconds += batch_seconds
            outputs.append(layers)
    model.set_lstm_approximation(None)
    if save:
        import numpy as np

        arrays = {}
        for b, (batch, layers) in enumerate(zip(batches, outputs)):
            for layer, values in enumerate(layers):
                for row, words in enumerate(batch):
                    arrays[f"b{b}_r{row}_l{layer}"] = values[row, : len(words)].numpy()
        np.savez(save, **arrays)
    words = sum(len(sentence) for batch in batches for sentence in batch)
    return {"seconds": seconds, "lstm_seconds": lstm_seconds, "words": words, "memory": memory_mb(),
            "cache_misses_last_batch": cache.misses - misses}


def ceiling(seconds: float = 1.0) -> dict:
    """The machine's fp32 matrix multiply rate and its memory bandwidth (`bench_common.memory_bandwidth`), now.

    The rate is the best 2048 x 2048 x 2048 product of `torch.mm` and of each float32 kernel that hf_elmo chooses
    among (`fast_linear.float32_kernels`): on some CPUs one of them is faster than `torch.mm` (oneDNN's AVX-512
    kernels on AMD EPYC, where MKL's `torch.mm` is not), and a ceiling below what the model's own kernels reach
    would put the model above 100% of it."""
    from hf_elmo.fast_linear import float32_kernels

    a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
    products = {"torch.mm": functools.partial(torch.mm, a, b)}
    products.update({name: functools.partial(kernel(b), a, None) for name, kernel in float32_kernels().items()})
    best = {}
    for name, product in products.items():
        product()
        best[name] = float("inf")
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for name, product in products.items():
            best[name] = min(best[name], timed(product)[0])
    fastest = min(best, key=best.get)
    gflops = 2 * 2048**3 / best[fastest] / 1e9
    return {"gflops": gflops, "ceiling_kernel": fastest, **memory_bandwidth(seconds)}


def step_rate(rows: int, steps: int = 20, repeats: int = 5) -> dict:
    """The rate of the biLSTM's per-step multiplies (recurrent and projection, `rows` sentences, the model's
    own weights and kernels), in the order the model runs them: every step of one layer and direction, then
    the next. They cannot be hoisted out of the time loop, and `rows` is small, so they run below the ceiling."""
    from hf_elmo.fast_bilstm import ExactMultiplies, derived_weights

    def one_pass():
        for layer in model.layers:
            multiplies = derived_weights(layer, "exact", ExactMultiplies)
            for direction in range(2):
                for _ in range(steps):
                    multiplies.gates(direction, h, input_gates)
                    multiplies.projection(direction, m)

    cell, proj = config.cell_size, config.projection_dim
    h, input_gates, m = torch.randn(rows, proj), torch.randn(rows, 4 * cell), torch.randn(rows, cell)
    with torch.no_grad():
        one_pass()
        best = min(timed(one_pass)[0] for _ in range(repeats))
    flops = len(model.layers) * 2 * steps * 2 * rows * (proj * 4 * cell + cell * proj)
    return {"step_gflops": flops / best / 1e9}


def kernels() -> dict:
    """The CPU kernel measured fastest for each kind of product this process ran (see hf_elmo/fast_linear.py)."""
    from hf_elmo import fast_linear

    return {"kernels": [{"candidates": list(key[0]), "weight": list(key[1]), "bias": key[2], "threads": key[3],
                         "rows": key[4], "kernel": name} for key, name in fast_linear._FASTEST.items()]}


channel.send({"imported": imported, "loaded": loaded, "load_seconds": load_seconds,
              "native_bfloat16": native_bfloat16_extension(),
              "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__}})
# (the ceiling's buffers are the benchmark's, not hf_elmo's: its peak memory leaves them out, as AllenNLP's never has them)
channel.serve({"run": run, "ceiling": lambda **options: outside_the_peak(lambda: ceiling(**options)),
               "step_rate": step_rate, "kernels": kernels,
               "memory": lambda: {"memory": memory_mb()}})
