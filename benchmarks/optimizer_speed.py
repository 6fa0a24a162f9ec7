"""pretrain.py's optimizers (`make_optimizer`: torch's fused kernels) against torch's loop over tensors, in one run
(the README's "Optimizer" figures).

    .venv/bin/python benchmarks/optimizer_speed.py [--steps 25] [--threads 2]

One optimizer step over the parameters of ElmoForPreTraining at two sizes, gradients random, with each preset's own
optimizer settings: the `default` preset's model with its 49,170-word softmax under AdamW (19.3M parameters), and the
`small` preset's with an 18,700-word softmax under Adagrad (16.0M), fused and loop alternating; prints the median
milliseconds of each (the first fifth of the steps left out) and their ratio, with the CPU.
"""

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_common import at_least, timed  # noqa: E402
from hf_elmo import ElmoConfig, ElmoForPreTraining  # noqa: E402
from hf_elmo.fast_linear import cpu_name  # noqa: E402
from modeling.presets import PRESETS, training_settings  # noqa: E402
from modeling.pretrain import make_optimizer  # noqa: E402

CASES = [("default", 49_170), ("small", 18_700)]  # preset, softmax words


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=at_least(1), default=25)
    parser.add_argument("--threads", type=at_least(1), default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    results = []
    for preset, vocabulary in CASES:
        settings = training_settings(preset)  # (its optimizer, learning rate and weight decay)
        config = ElmoConfig(**PRESETS[preset]["model"], lm_vocab_size=vocabulary)
        parameters = list(ElmoForPreTraining(config).parameters())
        for parameter in parameters:
            parameter.grad = torch.randn_like(parameter) * 1e-3
        optimizers = {name: make_optimizer(parameters, settings, "cpu", fused=name == "fused")
                      for name in ("fused", "loop")}
        assert optimizers["fused"].defaults["fused"] and not optimizers["loop"].defaults["fused"]
        times = {name: [] for name in optimizers}
        for _ in range(args.steps):
            for name, optimizer in optimizers.items():  # (alternating: the machine's drift falls on both)
                times[name].append(timed(optimizer.step)[0])
        kept = args.steps // 5
        medians = {name: statistics.median(found[kept:]) * 1000 for name, found in times.items()}
        count = sum(parameter.numel() for parameter in parameters)
        print(f"{preset} preset, {settings['optimizer']}, {count / 1e6:.1f}M parameters: fused {medians['fused']:.1f} ms, "
              f"loop {medians['loop']:.1f} ms, loop / fused {medians['loop'] / medians['fused']:.1f}")
        results.append({"preset": preset, "parameters": count, **medians})
    print(f"(medians of {args.steps - kept} steps; {args.threads} threads; {cpu_name()})")
    return results


if __name__ == "__main__":
    main()
