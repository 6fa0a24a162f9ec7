"""How fast this CPU streams the biLSTM's weights: what bounds one sentence at a time (README, "Speed").

    python benchmarks/memory_rates.py [--threads 2]

Prints, with the CPU's model:
* the memory bandwidth as `make bench` measures it (`bench_common.memory_bandwidth`: a read of a buffer 8 times
  the last-level cache), and a vector times a 256 MiB matrix (from main memory), which `make bench` took for it
  before (MKL's product is no faster on 2 threads than on 1);
* one step of one layer and direction at the original size, its recurrent and projection products for one row
  (40 MiB of weights, read again at every step, so from the cache), by each exact float32 kernel of
  `hf_elmo/fast_linear.py`;
* the products read once a sentence (the highway layers, the first and the second layer's input weights) for
  about 20 rows, by each kernel, with the caches emptied before every call (from main memory) and without.

Each figure is the median of several calls. Random weights; the numbers are rates, not results.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_common import at_least, bandwidth_buffer_bytes, cpu0_caches, memory_bandwidth  # noqa: E402
from hf_elmo.fast_linear import cpu_name, float32_kernels  # noqa: E402

CELL, PROJECTION, FILTERS = 4096, 512, 2048


def median_seconds(call, repeats: int, before=None) -> float:
    call()
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=at_least(1), default=2)
    parser.add_argument("--repeats", type=at_least(1), default=15)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"CPU: {cpu_name()}; {args.threads} threads; torch {torch.__version__}")
    mib = 2**20

    bandwidth = memory_bandwidth()
    print(f"memory bandwidth, a read of {bandwidth['bandwidth_buffer_mib']:.0f} MiB (main memory): "
          f"{bandwidth['bandwidth_gbs']:.1f} GB/s")
    matrix, vector = torch.randn(512, 1 << 17), torch.randn(512)
    seconds = median_seconds(lambda: vector @ matrix, args.repeats)
    print(f"vector x 256 MiB matrix (main memory): {matrix.numel() * 4 / seconds / 1e9:.1f} GB/s")

    recurrent, projection = torch.randn(4 * CELL, PROJECTION) * 0.02, torch.randn(PROJECTION, CELL) * 0.02
    h, m = torch.randn(1, PROJECTION), torch.randn(1, CELL)
    step_bytes = (recurrent.numel() + projection.numel()) * 4
    for name, prepare in float32_kernels().items():
        run_recurrent, run_projection = prepare(recurrent), prepare(projection)
        seconds = median_seconds(lambda: (run_recurrent(h, None), run_projection(m, None)), args.repeats)
        print(f"one step of one direction, 1 row, {step_bytes / mib:.0f} MiB of weights, {name}: "
              f"{seconds * 1e3:.2f} ms, {step_bytes / seconds / 1e9:.1f} GB/s")

    # Written before a call that must read its weights from main memory: larger than the caches, as the probe's.
    evict = torch.empty(bandwidth_buffer_bytes(cpu0_caches()) // 4)
    once_a_sentence = [("a highway layer", 2 * FILTERS, FILTERS, 20),
                       ("the first layer's input, both directions", 8 * CELL, PROJECTION, 20),
                       ("the second layer's input, one direction", 4 * CELL, PROJECTION, 22)]
    for what, out, inputs, rows in once_a_sentence:
        weight, bias, x = torch.randn(out, inputs) * 0.02, torch.randn(out), torch.randn(rows, inputs)
        size = weight.numel() * 4
        for name, prepare in float32_kernels().items():
            run = prepare(weight)
            cold = median_seconds(lambda: run(x, bias), args.repeats, before=lambda: evict.add_(1.0))
            warm = median_seconds(lambda: run(x, bias), args.repeats)
            print(f"{what}, {rows} rows, {size / mib:.0f} MiB, {name}: main memory {cold * 1e3:.2f} ms "
                  f"({size / cold / 1e9:.1f} GB/s), cache {warm * 1e3:.2f} ms ({size / warm / 1e9:.1f} GB/s)")


if __name__ == "__main__":
    main()
