"""How much `ElmoEmbedder`'s length-sorted batching saves over batches in file order, measured in one run.

    .venv/bin/python benchmarks/embed_batching.py [--model DIR] [--sentences 2000] [--batch-size 64] [--threads 1]

Without --model, a randomly initialised ELMo of the released "Small" size (cell 1024, projection 128, 2048
character filters, one highway layer) is used: the cost of padding depends on the sizes, not on the weights.
The sentences are the fixture sentences (3 to 53 words) in a seeded random order, like a real corpus.
Prints both timings and their ratio; the ratio is the result, the seconds depend on the machine.
"""

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hf_elmo import ElmoConfig, ElmoEmbedder, ElmoModel, ElmoTokenizer  # noqa: E402

FIXTURE_SENTENCES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "allennlp-elmo" / "sentences.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="an ELMo checkpoint folder (default: random weights, Small size)")
    parser.add_argument("--sentences", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
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

        start = time.perf_counter()
        for first in range(0, len(sentences), args.batch_size):
            embedder.embed_batch(sentences[first : first + args.batch_size])
        in_file_order = time.perf_counter() - start
        start = time.perf_counter()
        list(embedder.embed_sentences(sentences, batch_size=args.batch_size))
        sorted_by_length = time.perf_counter() - start
    words = sum(len(sentence.split()) for sentence in sentences)
    print(f"{len(sentences)} sentences, {words} words, batch size {args.batch_size}, {args.threads} thread(s)")
    print(f"batches in file order:       {in_file_order:8.2f} s")
    print(f"length-sorted batches:       {sorted_by_length:8.2f} s")
    print(f"speed-up of sorting:         {in_file_order / sorted_by_length:8.2f}x")


if __name__ == "__main__":
    main()
