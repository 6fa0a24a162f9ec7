"""hf_elmo on a GPU: words/s of both sizes in fp32 and bf16 autocast, bf16's deviation from fp32, and the
approximate cuDNN mode (`nn.LSTM`, no clipping); then the checks that need a GPU: the exactness tests on CUDA,
`hf-elmo embed --device cuda` against the CPU, and the training speed of the `ptb-gpu` preset. Run by
`gpu.sh`; needs torch with CUDA and transformers, no network, and finishes in under 5 minutes.

Weights are random (bilm-tf's initialisation); inputs are synthetic sentences of 20-30 words drawn from a
Zipf-distributed vocabulary, so that words repeat as in running text. "cold": caches of per-word results
emptied before every batch; "warm": the batch ran once before.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
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
            model.clear_caches()
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad(), torch.autocast(device.type, dtype=autocast, enabled=autocast is not None):
            model(**batch, output_final_states=False)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    once()
    return words / statistics.median(once() for _ in range(runs))


def run(command: list[str], timeout: float) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    try:
        return subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as error:
        output = error.stdout.decode(errors="replace") if isinstance(error.stdout, bytes) else error.stdout or ""
        return subprocess.CompletedProcess(command, -1, output, f"timed out after {timeout:.0f} s")


def cuda_tests() -> list[str]:
    """The fixture exactness tests and the fast-path tests, on the CUDA device (their `cuda` parameters)."""
    fixtures = ROOT.parent / "shared" / "fixtures"
    if not fixtures.is_dir():
        return [f"- Exactness tests on CUDA: not run, no fixtures at {fixtures}."]
    result = run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-k", "cuda",
                  "tests/test_exactness.py", "tests/test_fast_inference.py"], timeout=180)
    found = [line for line in result.stdout.splitlines() if "largest difference" in line or " passed" in line
             or " failed" in line]
    if result.returncode != 0:
        found.append(f"exit status {result.returncode}: {(result.stdout + result.stderr)[-1500:]}")
    return ["- Exactness tests on CUDA (`pytest -k cuda tests/test_exactness.py tests/test_fast_inference.py`): "
            + "; ".join(line.strip().lstrip(".") for line in found) + "."]


def embed_on_cuda() -> list[str]:
    """`hf-elmo embed` of a few sentences with the default model on the CPU and on CUDA."""
    import h5py
    import numpy as np

    with tempfile.TemporaryDirectory() as folder:
        text = Path(folder, "in.txt")
        text.write_text("I eat an apple .\nApple is a company .\nThe two sentences differ in length here , a lot .\n")
        outputs = {}
        for device in ("cpu", "cuda"):
            outputs[device] = Path(folder, f"{device}.hdf5")
            result = run([sys.executable, "-m", "hf_elmo.cli", "embed", str(text), str(outputs[device]),
                          "--device", device], timeout=120)
            if result.returncode != 0:
                return [f"- `hf-elmo embed --device {device}` failed: {result.stderr[-1500:]}"]
        with h5py.File(outputs["cpu"], "r") as cpu, h5py.File(outputs["cuda"], "r") as cuda:
            largest = max(float(np.abs(cpu[key][...] - cuda[key][...]).max()) for key in ("0", "1", "2"))
    return [f"- `hf-elmo embed --device cuda` (default model, 3 sentences): largest difference from the CPU "
            f"output {largest:.2g}."]


def pretraining_speed(steps: int = 400, config: str = "modeling/configs/gpu.yaml") -> list[str]:
    """A few hundred steps of the `ptb-gpu` preset (one GPU, bf16, `config`) on PTB."""
    data = ROOT / "data" / "ptb"
    if not (data / "train.txt").is_file():
        return [f"- Training speed of `ptb-gpu`: not run, no {data}/train.txt (`make ptb-data`)."]
    from modeling.presets import PRESETS

    training = PRESETS["ptb-gpu"]["training"]
    with tempfile.TemporaryDirectory() as folder:
        result = run([sys.executable, "-m", "accelerate.commands.launch", "--config_file", config,
                      "modeling/pretrain.py", "--preset", "ptb-gpu", "--train-file", str(data / "train.txt"),
                      "--output-dir", folder, "--max-steps", str(steps), "--save-steps", str(steps)], timeout=150)
        log = Path(folder, "log.jsonl")
        records = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    if result.returncode != 0 or not records:
        return [f"- Training speed of `ptb-gpu`: failed: {(result.stdout + result.stderr)[-1500:]}"]
    words_per_second = statistics.median(r["words_per_second"] for r in records[len(records) // 2 :])
    words_per_step = training["batch_size"] * training["unroll_steps"]
    epoch_steps = records[-1]["step"] / records[-1]["epoch"]
    hours = training["epochs"] * epoch_steps * words_per_step / words_per_second / 3600
    return [f"- Training speed of `ptb-gpu` ({steps} steps of {training['batch_size']} x {training['unroll_steps']} "
            f"words, bf16): {words_per_second:.0f} words/s ({words_per_second / words_per_step:.1f} steps/s), so its "
            f"{training['epochs']:.0f} epochs of {epoch_steps:.0f} steps take about {hours:.1f} h on this GPU; loss "
            f"{records[0]['loss']:.2f} after {records[0]['step']} steps, {records[-1]['loss']:.2f} after {steps}."]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batch-sizes", default="32,256")
    parser.add_argument("--output", default=None)
    parser.add_argument("--no-checks", action="store_true", help="words/s only: no tests, embed or training run")
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
    if not args.no_checks:
        lines += ["", "Checks on the same machine:", ""]
        for check in (cuda_tests, embed_on_cuda, pretraining_speed):
            lines += check()
            print(lines[-1], flush=True)
    lines += ["", f"Whole run: {time.time() - start:.0f} s."]
    report = "\n".join(lines) + "\n"
    print("\n" + report)
    if args.output:
        Path(args.output).write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
