"""hf_elmo on a GPU: words/s of both sizes in fp32 and bf16 autocast, bf16's deviation from fp32, and the
approximate cuDNN mode (`nn.LSTM`, no clipping). Run by `gpu.sh`; needs torch with CUDA and transformers,
no network, and finishes in well under 5 minutes.

Weights are random (bilm-tf's initialisation); inputs are synthetic sentences of 20-30 words drawn from a
Zipf-distributed vocabulary, so that words repeat as in running text. "cold": token cache emptied before
every batch; "warm": the batch ran once before.
"""

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch  # noqa: E402

from hf_elmo import ElmoConfig, ElmoModel, ElmoTokenizer  # noqa: E402
from hf_elmo.approximate import approximation_deviation  # noqa: E402

SIZES = {"original": {}, "small": {"cell_size": 1024, "projection_dim": 128, "num_highway_layers": 1}}


def sentences(count: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    vocabulary = [f"w{rng.randrange(10**6)}{chr(97 + i % 26)}" for i in range(5000)]
    weights = [1.0 / (rank + 1) for rank in range(len(vocabulary))]
    return [rng.choices(vocabulary, weights, k=rng.randint(20, 30)) for _ in range(count)]


def words_per_second(model, batch, words: int, device, runs: int, cold: bool, autocast=None) -> float:
    def once() -> float:
        if cold:
            model.char_encoder.token_cache.clear()
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad(), torch.autocast(device.type, dtype=autocast, enabled=autocast is not None):
            model(**batch)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    once()
    return words / statistics.median(once() for _ in range(runs))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batch-sizes", default="32,256")
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device visible to torch", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    lines = [f"GPU benchmark on {name}, torch {torch.__version__}, random weights, sentences of 20-30 words.", "",
             "| size | sentences per batch | fp32 cold words/s | fp32 warm words/s | bf16 cold words/s | "
             "nn_lstm (cuDNN) warm words/s | bf16 max abs deviation per layer | nn_lstm deviation |",
             "|---|---|---|---|---|---|---|---|"]
    tokenizer = ElmoTokenizer()
    start = time.time()
    for size, overrides in SIZES.items():
        torch.manual_seed(0)
        model = ElmoModel(ElmoConfig(**overrides)).to(device).eval()
        for batch_size in (int(b) for b in args.batch_sizes.split(",")):
            text = sentences(batch_size, seed=batch_size)
            words = sum(len(s) for s in text)
            batch = tokenizer(text, is_split_into_words=True, padding=True, return_tensors="pt").to(device)
            fp32_cold = words_per_second(model, batch, words, device, args.runs, cold=True)
            fp32_warm = words_per_second(model, batch, words, device, args.runs, cold=False)
            bf16 = words_per_second(model, batch, words, device, args.runs, cold=True, autocast=torch.bfloat16)
            model.set_lstm_approximation("nn_lstm")
            cudnn = words_per_second(model, batch, words, device, args.runs, cold=False)
            model.set_lstm_approximation(None)
            bf16_deviation = approximation_deviation(model, dict(batch), "bf16")
            cudnn_deviation = approximation_deviation(model, dict(batch), "nn_lstm")
            lines.append(f"| {size} | {batch_size} | {fp32_cold:.0f} | {fp32_warm:.0f} | {bf16:.0f} | {cudnn:.0f} | "
                         + ", ".join(f"{v:.2g}" for v in bf16_deviation) + " | "
                         + ", ".join(f"{v:.2g}" for v in cudnn_deviation) + " |")
            print(lines[-1], flush=True)
        del model
    lines += ["", f"Whole run: {time.time() - start:.0f} s."]
    report = "\n".join(lines) + "\n"
    print("\n" + report)
    if args.output:
        Path(args.output).write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
