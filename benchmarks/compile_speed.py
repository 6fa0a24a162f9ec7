"""A compiled ELMo against the eager one, in one run (the README's "With `torch.compile`" figures).

    .venv/bin/python benchmarks/compile_speed.py [--file data/ptb/valid.txt] [--rounds 15] [--threads 2]

The default model, `torch.compile(model)` with its default backend, on the first 32 sentences of `--file` (a line
each, 33 at least; the default is the repository's, from `make ptb-data`) at once and on the 33rd alone, caches warm
(both ran each batch before timing), eager and compiled alternating; prints the median seconds of each and their
ratio, with the CPU.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_common import at_least  # noqa: E402  (beside this file)
from hf_elmo import ElmoModel, ElmoTokenizer  # noqa: E402
from hf_elmo.default_model import default_model_path  # noqa: E402
from hf_elmo.fast_linear import cpu_name  # noqa: E402
from hf_elmo.files import read_text_file  # noqa: E402

BATCH = 32  # the sentences of the batch case; the one-sentence case takes the next
TEXT = ROOT / "data" / "ptb" / "valid.txt"  # (from the repository's root, wherever the script is started)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--file", type=Path, default=TEXT,
                        help=f"one sentence per line, {BATCH + 1} at least (default: data/ptb/valid.txt, from make "
                        "ptb-data)")
    parser.add_argument("--rounds", type=at_least(1), default=15)
    parser.add_argument("--threads", type=at_least(1), default=2)
    args = parser.parse_args(argv)
    try:
        sentences = [line for line in read_text_file(args.file).splitlines() if line.strip()]
    except ValueError as error:
        parser.error(f"--file: {error}" + ("; run `make ptb-data`" if args.file == TEXT else ""))
    if len(sentences) <= BATCH:  # (fewer timed a short or empty batch as if it were the cases named)
        parser.error(f"--file {args.file}: {len(sentences)} sentences (lines that are not blank); it needs {BATCH + 1}, "
                     f"{BATCH} for the batch case and one more for the one-sentence case")
    torch.set_num_threads(args.threads)
    tokenizer = ElmoTokenizer.from_pretrained(default_model_path())
    model = ElmoModel.from_pretrained(default_model_path()).eval()
    compiled = torch.compile(model)
    results = []
    with torch.no_grad():
        for name, batch in ((f"{BATCH} sentences", sentences[:BATCH]), ("1 sentence", sentences[BATCH : BATCH + 1])):
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
