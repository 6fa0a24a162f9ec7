"""How much `ElmoEmbedder`'s length-sorted batching saves over batches in file order, measured in one run.

    .venv/bin/python benchmarks/embed_batching.py [--model DIR] [--sentences 2000] [--batch-size 64] [--threads 1]
                                                  [--rounds 3]

Without --model, a randomly initialised ELMo of the released "Small" size (cell 1024, projection 128, 2048
character filters, one highway layer) is used: the cost of padding depends on the sizes, not on the weights.
The sentences are the fixture sentences (3 to 53 words) in a seeded random order, like a real corpus.
Each round times both ways, in turns (the first way of one round is the second of the next), each from empty
caches: otherwise the second would find the word vectors that the first computed. Prints the medians and their
ratio with the CPU; the ratio is the result, the seconds depend on the machine.
"""

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_common import at_least  # noqa: E402  (beside this file)
from hf_elmo import ElmoConfig, ElmoEmbedder, ElmoModel, ElmoTokenizer  # noqa: E402
from hf_elmo.fast_linear import cpu_name  # noqa: E402

FIXTURE_SENTENCES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "allennlp-elmo" / "sentences.json"


def timed_rounds(ways: dict, rounds: int, before) -> dict[str, list[float]]:
    """Seconds of each of `ways` (name: call) per round, in turns; `before()` runs before each timed call."""
    seconds = {name: [] for name in ways}
    for round_index in range(rounds):
        for name in list(ways)[:: 1 if round_index % 2 == 0 else -1]:
            before()
            start = time.perf_counter()
            ways[name]()
            seconds[name].append(time.perf_counter() - start)
    return seconds


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="an ELMo checkpoint folder (default: random weights, Small size)")
    parser.add_argument("--sentences", type=at_least(1), default=2000)
    parser.add_argument("--batch-size", type=at_least(1), default=64)
    parser.add_argument("--threads", type=at_least(1), default=1)
    parser.add_argument("--rounds", type=at_least(1), default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        model_path = args.model
        if model_path is None:
            config = ElmoConfig(cell_size=1024, projection_dim=128, num_highway_layers=1)
            ElmoModel(config).save_pretrained(folder)
            ElmoTokenizer().save_pretrained(folder)
            model_path = folder
        embedder = ElmoEmbedder(model_path)
        pool = [sentence for rows in json.loads(FIXTURE_SENTENCES.read_text()) for sentence in rows]
        rng = random.Random(0)
        sentences = [rng.choice(pool) for _ in range(args.sentences)]
        list(embedder.embed_sentences(sentences[: args.batch_size], batch_size=args.batch_size))  # warm up
        ways = {
            "file order": lambda: [embedder.embed_batch(sentences[first : first + args.batch_size])
                                   for first in range(0, len(sentences), args.batch_size)],
            "length-sorted": lambda: list(embedder.embed_sentences(sentences, batch_size=args.batch_size)),
        }
        seconds = timed_rounds(ways, args.rounds, before=embedder.model.clear_caches)
    medians = {name: statistics.median(times) for name, times in seconds.items()}
    words = sum(len(sentence.split()) for sentence in sentences)
    print(f"{len(sentences)} sentences, {words} words, batch size {args.batch_size}, {args.threads} thread(s)")
    print(f"batches in file order:       {medians['file order']:8.2f} s")
    print(f"length-sorted batches:       {medians['length-sorted']:8.2f} s")
    print(f"speed-up of sorting:         {medians['file order'] / medians['length-sorted']:8.2f}x")
    print(f"(medians of {args.rounds} rounds, each way from empty caches; {cpu_name()}, torch {torch.__version__})")
    return medians


if __name__ == "__main__":
    main()
