"""A compiled ELMo against the eager one, in one run (the README's "With `torch.compile`" figures).

    .venv/bin/python benchmarks/compile_speed.py [--file data/ptb/valid.txt] [--rounds 15] [--threads 2]

The default model, `torch.compile(model)` with its default backend, on 32 sentences of `--file` at once and on one
sentence, caches warm (both ran each batch before timing), eager and compiled alternating; prints the median seconds
of each and their ratio, with the CPU.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_common import at_least  # noqa: E402  (beside this file)
from hf_elmo import ElmoModel, ElmoTokenizer  # noqa: E402
from hf_elmo.default_model import default_model_path  # noqa: E402
from hf_elmo.fast_linear import cpu_name  # noqa: E402


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--file", default="data/ptb/valid.txt", help="one sentence per line (make ptb-data)")
    parser.add_argument("--rounds", type=at_least(1), default=15)
    parser.add_argument("--threads", type=at_least(1), default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sentences = [line for line in Path(args.file).read_text(encoding="utf-8").splitlines() if line.strip()]
    tokenizer = ElmoTokenizer.from_pretrained(default_model_path())
    model = ElmoModel.from_pretrained(default_model_path()).eval()
    compiled = torch.compile(model)
    results = []
    with torch.no_grad():
        for name, batch in (("32 sentences", sentences[:32]), ("1 sentence", sentences[32:33])):
            encoded = tokenizer(batch, return_tensors="pt", padding=True)
            model(**encoded), compiled(**encoded)  # (compiles, fills the caches)
            times = {"eager": [], "compiled": []}
            for _ in range(args.rounds):
                for label, run in (("eager", model), ("compiled", compiled)):
                    start = time.perf_counter()
                    run(**encoded)
                    times[label].append(time.perf_counter() - start)
            eager, fast = statistics.median(times["eager"]), statistics.median(times["compiled"])
            results.append({"case": name, "eager_s": eager, "compiled_s": fast, "ratio": fast / eager})
            print(f"{name}: eager {eager * 1e3:.1f} ms, compiled {fast * 1e3:.1f} ms, compiled / eager {fast / eager:.3f}")
    print(f"(medians of {args.rounds}; {cpu_name()}, {args.threads} threads, torch {torch.__version__})")
    return results


if __name__ == "__main__":
    main()
