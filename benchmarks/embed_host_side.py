"""What `hf-elmo embed` costs besides the model, measured in one run on any machine.

    .venv/bin/python benchmarks/embed_host_side.py [--sentences 6000] [--batch-size 256] [--folder /dev/shm]

On a GPU the model of the original size computes about 120,000 words/s (GPU_RESULTS.md), so everything else that
embed does (reading and hashing the file, tokenising, making the output's datasets, writing each batch's lines)
must run several times faster than that for embed to keep up with it. This runs `ElmoEmbedder.embed_file` as embed
on a GPU does (tokenising ahead, writing behind), `--top`, on the sentences of `gpu_bench.py` (20-30 words from a
Zipf-distributed vocabulary), with the model's computation replaced by zeros of its output's shape (width 1,024,
the original size's), made at once: its words/s is the most that the host side allows a model of any speed.
Timed on its second pass, as gpu_bench.py times embed. The files go to `--folder` (default: the system's temporary
folder); the output is 600 MB, written once, so on a slow disk the disk sets the figure: a folder in memory
(`/dev/shm`) leaves the computer's own work. Also the tokenizer alone on the same batches: the call
(`tokenizer(words, is_split_into_words=True, padding=True)`) against `encode_words`, which embed uses.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import at_least, check_output  # noqa: E402
from gpu_bench import sentences  # noqa: E402

from hf_elmo import ElmoConfig, ElmoEmbedder, ElmoModel, ElmoTokenizer  # noqa: E402
from hf_elmo.embed_file import plan_batches  # noqa: E402
from hf_elmo.embedder import split_sentence  # noqa: E402
from hf_elmo.fast_linear import cpu_name  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=at_least(1), default=6000)
    parser.add_argument("--batch-size", type=at_least(1), default=256)
    parser.add_argument("--folder", help="where the model, the text and the outputs go, in a temporary folder made "
                        "there (default: the system's temporary folder)")
    args = parser.parse_args()
    if args.folder is not None:  # (else found after the tokenizer's timing, a traceback)
        check_output(parser, "--folder", args.folder, "folder", writes_inside=True)
        if not Path(args.folder).is_dir():
            parser.error(f"--folder {args.folder}: no such folder")
    text = [" ".join(words) for words in sentences(args.sentences, seed=7)]
    words = sum(len(line.split()) for line in text)
    batches = [[split_sentence(text[line]) for line in batch] for batch in plan_batches(text, args.batch_size, False)]
    tokenizer = ElmoTokenizer()
    rates = {}
    for name, encode in (("call", lambda batch: tokenizer(batch, is_split_into_words=True, padding=True, return_tensors="pt")),
                         ("encode_words", tokenizer.encode_words)):
        for _ in range(2):  # (the second pass: encode_words' cache holds the file's words, as on a large file)
            start = time.perf_counter()
            for batch in batches:
                encode(batch)
            rates[name] = words / (time.perf_counter() - start)

    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        # A small model of the original size's output width (2 x 512): its weights only fill the caches embed pins.
        config = ElmoConfig(cell_size=512, projection_dim=512, char_cnn_filters=[[1, 32], [2, 32]])
        ElmoModel(config).save_pretrained(folder)
        ElmoTokenizer().save_pretrained(folder)
        source = Path(folder, "in.txt")
        source.write_text("\n".join(text) + "\n", encoding="utf-8")
        embedder = ElmoEmbedder(folder)

        def no_model(tokenized, output_format):
            return torch.zeros(len(tokenized[0]), tokenized[1]["input_ids"].shape[1], config.hidden_size)

        embedder.layers_tokenized = no_model
        for name in ("first.hdf5", "second.hdf5"):
            start = time.perf_counter()
            embedder.embed_file(source, Path(folder, name), output_format="top", batch_size=args.batch_size,
                                progress=False, tokenize_ahead=True, write_behind=True)
            host_rate = words / (time.perf_counter() - start)
    print(f"{cpu_name()}, {torch.get_num_threads()} threads; {len(text)} sentences, {words} words, batches of "
          f"{args.batch_size}; files in {args.folder or tempfile.gettempdir()}")
    print(f"tokenizer call:                       {rates['call']:12,.0f} words/s")
    print(f"encode_words:                         {rates['encode_words']:12,.0f} words/s "
          f"({rates['encode_words'] / rates['call']:.1f}x)")
    print(f"embed without the model (host side):  {host_rate:12,.0f} words/s")


if __name__ == "__main__":
    main()
