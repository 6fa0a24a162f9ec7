"""What pinning the per-word caches costs `hf-elmo embed`, measured in one run, and what it buys (exact resumes).

    .venv/bin/python benchmarks/embed_pinned_caches.py [--model DIR] [--sentences 14041] [--rounds 3] [--threads 1]

`hf-elmo embed` fills the caches with the file's most frequent words before its first batch and keeps exactly
those (`hf_elmo/embed_file.py`), so that a batch's numbers depend on the file and the batch alone. The baseline is
the caches filling as they go, as everywhere else. The sentences are CoNLL-2003's training set (`make data`).
Without --model, a randomly initialised ELMo of the released "Small" size is used (the work depends on the sizes,
not on the weights). Prints, for both: the words each cache computed, the median time of interleaved rounds and
their ratio; then the largest difference between the second half of the batches computed after the first half
and computed alone (as a resumed run computes them): 0 when pinned.
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_common import at_least  # noqa: E402  (beside this file)
from hf_elmo import ElmoConfig, ElmoEmbedder, ElmoModel, ElmoTokenizer  # noqa: E402
from hf_elmo.embed_file import pin_frequent_words, plan_batches, unpin_words  # noqa: E402

CONLL_TRAIN = Path(__file__).resolve().parents[1] / "data" / "conll2003" / "train.txt"


def conll_sentences(path: Path) -> list[str]:
    sentences, words = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("-DOCSTART-"):
            continue
        if line.strip():
            words.append(line.split()[0])
        elif words:
            sentences.append(" ".join(words))
            words = []
    return sentences + ([" ".join(words)] if words else [])


def run(embedder: ElmoEmbedder, sentences, batches, pinned: bool, first: int = 0) -> tuple[float, list, tuple[int, int]]:
    """Embed batches[first:] from empty caches; returns the seconds, the embeddings and the words computed by the
    token cache and the first layer's gate cache."""
    token_cache, gate_cache = embedder.model.char_encoder.token_cache, embedder.model.layers[0].input_gate_cache
    embedder.model.clear_caches()
    token_cache.misses = gate_cache.misses = 0
    started = time.perf_counter()
    if pinned:
        pin_frequent_words(embedder, sentences)
    try:
        embeddings = [embedder.embed_batch([sentences[i] for i in batch]) for batch in batches[first:]]
    finally:
        unpin_words(embedder)
    return time.perf_counter() - started, embeddings, (token_cache.misses, gate_cache.misses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="an ELMo checkpoint folder (default: random weights, Small size)")
    parser.add_argument("--sentences", type=at_least(1), default=14041)
    parser.add_argument("--batch-size", type=at_least(1), default=64)
    parser.add_argument("--rounds", type=at_least(1), default=3)
    parser.add_argument("--threads", type=at_least(1), default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if not CONLL_TRAIN.is_file():
        sys.exit(f"{CONLL_TRAIN} not found: run `make data` first")
    sentences = conll_sentences(CONLL_TRAIN)[: args.sentences]
    batches = plan_batches(sentences, args.batch_size, stateful=False)
    with tempfile.TemporaryDirectory() as folder:
        model_path = args.model
        if model_path is None:
            ElmoModel(ElmoConfig(cell_size=1024, projection_dim=128, num_highway_layers=1)).save_pretrained(folder)
            ElmoTokenizer().save_pretrained(folder)
            model_path = folder
        embedder = ElmoEmbedder(model_path)
        seconds, work = {False: [], True: []}, {}
        for round_index in range(args.rounds):
            for pinned in (False, True) if round_index % 2 == 0 else (True, False):  # (in turns: neither always first)
                elapsed, _, work[pinned] = run(embedder, sentences, batches, pinned)
                seconds[pinned].append(elapsed)
        half = len(batches) // 2
        deviations = {}
        for pinned in (False, True):
            whole = run(embedder, sentences, batches, pinned)[1][half:]
            resumed = run(embedder, sentences, batches, pinned, first=half)[1]
            deviations[pinned] = max(float(np.abs(a - b).max(initial=0)) for x, y in zip(whole, resumed) for a, b in zip(x, y))
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown CPU") if Path("/proc/cpuinfo").is_file() else "unknown CPU"
    words = sum(len(sentence.split()) for sentence in sentences)
    print(f"{len(sentences)} CoNLL-2003 sentences, {words} words, {len(batches)} batches of {args.batch_size}, "
          f"{args.model or 'Small size, random weights'}, {args.threads} thread(s), {cpu}")
    base = statistics.median(seconds[False])
    for pinned, name in ((False, "caches filling as they go"), (True, "caches pinned (hf-elmo embed)")):
        print(f"{name:31s} char CNN {work[pinned][0]:7d} words, input gates {work[pinned][1]:7d} words, "
              f"median {statistics.median(seconds[pinned]):7.2f} s (rounds {', '.join(f'{t:.2f}' for t in seconds[pinned])}), "
              f"time ratio {statistics.median(seconds[pinned]) / base:.3f}")
        print(f"{'':31s} second half resumed alone vs after the first half: largest difference {deviations[pinned]:.3g}")


if __name__ == "__main__":
    main()
