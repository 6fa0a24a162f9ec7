"""hf_elmo inference on one GPU, measured and checked in one short run (`gpu.sh` starts it): words/s of the exact
float32 model (CUDA graphs, `hf_elmo/cuda_graphs.py`), of the bf16 mode and of the approximate cuDNN mode, each
mode's deviation, the exact GPU outputs against the CPU's, `hf-elmo embed --device cuda` end to end against the
model alone, and the tests that need a GPU. Writes its report, with a table of the GPU targets, to `--output`
(`gpu.sh` gives GPU_RESULTS.md; without it, only the figures printed as they come); exits 1 if a
check of correctness fails (a test, the GPU against the CPU), 0 otherwise, targets met or not.

Weights are random (bilm-tf's initialisation); inputs are synthetic sentences of 20-30 words drawn from a
Zipf-distributed vocabulary, so that words repeat as in running text. "warm": the same batch ran before (its
graphs are captured and its words cached); "cold": the caches of per-word results emptied first (the graphs,
which depend on shapes only, stay).
"""

import argparse
import copy
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402
from bench_common import at_least, check_output, size_names, torch_device, whole_numbers  # noqa: E402

from hf_elmo import ElmoConfig, ElmoEmbedder, ElmoModel, ElmoTokenizer  # noqa: E402
from hf_elmo.approximate import approximation_deviation  # noqa: E402
from hf_elmo.fast_linear import cpu_name  # noqa: E402
from hf_elmo.files import write_text_atomically  # noqa: E402

SIZES = {"original": {}, "small": {"cell_size": 1024, "projection_dim": 128, "num_highway_layers": 1}}
# Targets on one H200 (issue "Inference speed on every machine"), original size.
TARGETS = {("exact", 32): 50_000, ("exact", 256): 250_000, ("bf16", 32): 100_000, ("bf16", 256): 500_000}


def sentences(count: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    vocabulary = [f"w{rng.randrange(10**6)}{chr(97 + i % 26)}" for i in range(5000)]
    weights = [1.0 / (rank + 1) for rank in range(len(vocabulary))]
    return [rng.choices(vocabulary, weights, k=rng.randint(20, 30)) for _ in range(count)]


def synchronized(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def words_per_second(model, batch, words: int, device, runs: int, cold: bool) -> float:
    def once() -> float:
        if cold:
            model.clear_caches()
        start = synchronized(device)
        with torch.no_grad():
            model(**batch, output_final_states=False)
        return synchronized(device) - start

    once()  # (captures the graphs of this shape, fills the caches)
    return words / statistics.median(once() for _ in range(runs))


def largest_difference(first, second) -> list[float]:
    return [(a.float().cpu() - b.float().cpu()).abs().max().item() for a, b in zip(first, second)]


# The script's own time limit (gpu.sh's `timeout`, passed as GPU_SCRIPT_SECONDS): a part's command gets at most what
# is left of it, less time for the report, so that a slow part times out as itself, said in the report, rather
# than the script being stopped in it with the parts after it.
STARTED = time.monotonic()


def run(command: list[str], timeout: float) -> subprocess.CompletedProcess:
    left = float(os.environ.get("GPU_SCRIPT_SECONDS", "inf")) - (time.monotonic() - STARTED) - 20
    timeout = max(1.0, min(timeout, left))
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    try:
        return subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as error:
        output = error.stdout.decode(errors="replace") if isinstance(error.stdout, bytes) else error.stdout or ""
        return subprocess.CompletedProcess(command, -1, output, f"timed out after {timeout:.0f} s")


def speed_table(device, args, failures: list[str], measured: dict, lines: list[str], measured_row) -> None:
    """words/s per size, batch and mode, each mode's deviation, and the exact GPU outputs against the CPU's: the
    table's rows appended to `lines` and the figures put in `measured` as they come, `measured_row()` called after
    each row (a run stopped in the middle keeps the rows before)."""
    lines += ["| size | sentences | exact warm words/s | exact cold words/s | bf16 warm words/s | nn_lstm warm words/s "
              "| bf16 deviation per layer | nn_lstm deviation | exact GPU - CPU per layer |",
              "|---|---|---|---|---|---|---|---|---|"]
    tokenizer = ElmoTokenizer()
    for size in args.sizes.split(","):
        overrides = SIZES[size]
        torch.manual_seed(0)
        cpu_model = ElmoModel(ElmoConfig(**overrides)).eval()
        model = ElmoModel(ElmoConfig(**overrides)).eval()
        model.load_state_dict(cpu_model.state_dict())
        model.to(device)
        for batch_size in args.batch_sizes:
            text = sentences(batch_size, seed=batch_size)
            words = sum(len(s) for s in text)
            batch = dict(tokenizer(text, is_split_into_words=True, padding=True, return_tensors="pt"))
            on_device = {key: value.to(device) for key, value in batch.items()}
            row = {"exact warm": words_per_second(model, on_device, words, device, args.runs, cold=False),
                   "exact cold": words_per_second(model, on_device, words, device, args.runs, cold=True)}
            for mode in ("bf16", "nn_lstm"):
                model.set_lstm_approximation(mode)
                row[f"{mode} warm"] = words_per_second(model, on_device, words, device, args.runs, cold=False)
                model.set_lstm_approximation(None)
            deviations = {mode: approximation_deviation(model, on_device, mode) for mode in ("bf16", "nn_lstm")}
            against_cpu = ""
            if batch_size == min(args.batch_sizes):
                # The user's TF32 switch on for the GPU's forward: the exact path must turn it off itself. (Not for
                # the CPU's references: in this torch it also lets oneDNN's CPU products use TF32.)
                torch.set_float32_matmul_precision("high")
                try:
                    with torch.no_grad():
                        gpu = model(**on_device).hidden_states
                finally:
                    torch.set_float32_matmul_precision("highest")
                with torch.no_grad():
                    cpu = cpu_model(**batch).hidden_states
                    exact = copy.deepcopy(cpu_model).double()(**batch).hidden_states  # float64: each one's rounding
                difference = largest_difference(gpu, cpu)
                gpu_rounding, cpu_rounding = largest_difference(gpu, exact), largest_difference(cpu, exact)
                measured[(size, "cpu")] = max(difference)
                measured[(size, "rounding")] = (max(gpu_rounding), max(cpu_rounding))
                against_cpu = (", ".join(f"{v:.2g}" for v in difference) + " (from float64: GPU "
                               + ", ".join(f"{v:.2g}" for v in gpu_rounding) + "; CPU "
                               + ", ".join(f"{v:.2g}" for v in cpu_rounding) + ")")
                # TF32 would be 1e-3 off; float32 summing in another order is as far from float64 as the CPU is.
                if max(gpu_rounding) > 2 * max(cpu_rounding) + 1e-6:
                    failures.append(f"{size}: exact GPU outputs {max(gpu_rounding):.2g} from float64, the CPU's "
                                    f"{max(cpu_rounding):.2g}")
            for mode in ("exact", "bf16"):
                measured[(size, mode, batch_size)] = row[f"{mode} warm"]
            lines.append(f"| {size} | {batch_size} | {row['exact warm']:.0f} | {row['exact cold']:.0f} | "
                         f"{row['bf16 warm']:.0f} | {row['nn_lstm warm']:.0f} | "
                         + " | ".join(", ".join(f"{v:.2g}" for v in deviations[m]) for m in ("bf16", "nn_lstm"))
                         + f" | {against_cpu} |")
            print(lines[-1], flush=True)
            measured_row()
        del model, cpu_model
        if device.type == "cuda":
            torch.cuda.empty_cache()


def embed_end_to_end(device, batch_size: int, count: int) -> tuple[list[str], float]:
    """`ElmoEmbedder.embed_file` (what `hf-elmo embed` runs: reading and hashing the file, tokenising, making the
    output's datasets, the model, writing each batch's lines) on `count` sentences of the original size, against the
    model alone on the same batches, tokenised in advance. Each is timed on its second pass over the file: what the
    first works out once for a process (the CUDA graphs of every shape, the digest of the weights) is out of both
    times, as it is from a large file's words/s."""
    from hf_elmo.embed_file import pin_frequent_words, plan_batches, unpin_words

    torch.manual_seed(0)
    text = [" ".join(s) for s in sentences(count, seed=7)]
    words = sum(len(line.split()) for line in text)
    with tempfile.TemporaryDirectory() as folder:
        ElmoModel(ElmoConfig()).save_pretrained(folder)
        ElmoTokenizer().save_pretrained(folder)
        source = Path(folder, "in.txt")
        source.write_text("\n".join(text) + "\n", encoding="utf-8")
        embedder = ElmoEmbedder(folder, device=device)
        for _ in range(2):  # (the second pass, as every figure here: encode_words' cache holds the words then)
            start = time.perf_counter()
            tokenized = [embedder.tokenize_batch([text[i] for i in batch])[1]
                         for batch in plan_batches(text, batch_size, False)]
            tokenizer_rate = words / (time.perf_counter() - start)
        pin_frequent_words(embedder, text)  # the caches as embed_file keeps them (its most frequent words, only)
        for _ in range(2):
            start = synchronized(device)
            with torch.no_grad():
                for batch in tokenized:
                    outputs = embedder.model(**batch.to(device), output_final_states=False)
                    outputs.last_hidden_state.float().cpu()
            model_rate = words / (synchronized(device) - start)
        unpin_words(embedder)
        for name in ("first.hdf5", "second.hdf5"):
            start = time.perf_counter()
            embedder.embed_file(source, Path(folder, name), output_format="top", batch_size=batch_size, progress=False)
            embed_rate = words / (synchronized(device) - start)
    lines = [f"- `hf-elmo embed --device {device.type}` end to end (`ElmoEmbedder.embed_file`, original size, {count} "
             f"sentences of 20-30 words, {words} words, batches of {batch_size}, `--top`): {embed_rate:.0f} words/s, "
             f"{embed_rate / model_rate:.0%} of the model's own {model_rate:.0f} words/s on the same batches (tokenised "
             f"in advance, the caches pinned as embed pins them, outputs copied to the host; each on its second pass); "
             f"`ElmoTokenizer` alone (`encode_words`, second pass), one process: {tokenizer_rate:.0f} words/s."]
    return lines, embed_rate / model_rate


def cuda_tests(failures: list[str]) -> list[str]:
    """The tests with a `cuda` parameter: fixture exactness, the fast paths, the CUDA graphs."""
    fixtures = ROOT.parent / "shared" / "fixtures"
    if not fixtures.is_dir():
        return [f"- Tests on CUDA: not run, no fixtures at {fixtures}."]
    result = run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-k", "cuda",
                  "tests/test_exactness.py", "tests/test_fast_inference.py", "tests/test_cuda_graphs.py"], timeout=150)
    found = [line for line in result.stdout.splitlines() if "largest difference" in line or " passed" in line
             or " failed" in line]
    if result.returncode != 0:
        failures.append("tests on CUDA failed")
        found.append(f"exit status {result.returncode}: {(result.stdout + result.stderr)[-1500:]}")
    return ["- Tests on CUDA (`pytest -k cuda tests/test_exactness.py tests/test_fast_inference.py "
            "tests/test_cuda_graphs.py`): " + "; ".join(line.strip().lstrip(".") for line in found) + "."]


def embed_against_cpu(failures: list[str]) -> list[str]:
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
                failures.append(f"hf-elmo embed --device {device} failed")
                return [f"- `hf-elmo embed --device {device}` failed: {result.stderr[-1500:]}"]
        with h5py.File(outputs["cpu"], "r") as cpu, h5py.File(outputs["cuda"], "r") as cuda:
            largest = max(float(np.abs(cpu[key][...] - cuda[key][...]).max()) for key in ("0", "1", "2"))
    if largest > 5e-6:  # (each float32 output is about 2e-6 from float64, so the two may differ by about 4e-6)
        failures.append(f"hf-elmo embed: CUDA output {largest:.2g} from the CPU's")
    return [f"- `hf-elmo embed --device cuda` (default model, 3 sentences): largest difference from the CPU "
            f"output {largest:.2g}."]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", type=torch_device, default="cuda", help="cpu, cuda or cuda:N")
    parser.add_argument("--runs", type=at_least(1), default=5)
    parser.add_argument("--batch-sizes", type=whole_numbers, default="32,256")
    parser.add_argument("--sizes", default="original,small")
    parser.add_argument("--embed-sentences", type=at_least(1), default=10000)
    parser.add_argument("--output", default=None)
    parser.add_argument("--no-checks", action="store_true", help="words/s only: no tests, no embed runs")
    args = parser.parse_args()
    size_names(parser, args.sizes, list(SIZES))  # (an unknown one failed inside the speed table, the rest run)
    if args.output:  # (else found when the first part's report is written, after its measurement)
        check_output(parser, "--output", args.output, "file")
    device = args.device
    if device.type == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device visible to torch", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    start, failures, tracebacks = time.time(), [], []
    table, measured, checks, embed_ratio = [], {}, [], None

    def write_report(final: bool) -> str:
        """GPU_RESULTS.md from what is measured so far: written after each part, so that a run cut short by its
        time limit leaves the parts it finished (marked as cut short)."""
        targets = [(f"original, {mode} ({'CUDA graphs, no TF32' if mode == 'exact' else 'bfloat16 multiplies'}), "
                    f"{batch} sentences: >= {goal:,} words/s", f"{measured[('original', mode, batch)]:,.0f}",
                    measured[("original", mode, batch)] >= goal)
                   for (mode, batch), goal in TARGETS.items() if ("original", mode, batch) in measured]
        # (the 2e-6 between GPU and CPU; float32 rounding alone parts them by more at these sizes, which
        # the distances of each from float64 show: the row is read beside them)
        targets += [(f"{size}: exact GPU outputs within 2e-6 of the CPU's (TF32 switched on by the caller)",
                     f"{measured[(size, 'cpu')]:.2g} (from float64: GPU {measured[(size, 'rounding')][0]:.2g}, CPU "
                     f"{measured[(size, 'rounding')][1]:.2g})", measured[(size, "cpu")] <= 2e-6)
                    for size in SIZES if (size, "cpu") in measured]
        if embed_ratio is not None:
            targets.append(("`hf-elmo embed` end to end within 10% of the model's words/s", f"{embed_ratio:.0%}",
                            embed_ratio >= 0.9))
        lines = [f"GPU benchmark on {name} (host CPU: {cpu_name()}), torch {torch.__version__}, random weights, sentences of 20-30 words "
                 "(`bash benchmarks/gpu.sh`).", "",
                 "| target | measured | met |", "|---|---|---|",
                 *[f"| {t} | {m} | {'yes' if ok else '**no**'} |" for t, m, ok in targets], "", *table]
        if checks:
            lines += ["", "Checks on the same machine:", "", *checks]
        if failures:
            lines += ["", "**Failed checks**: " + "; ".join(failures) + "."]
        for trace in tracebacks:
            lines += ["", "```", trace.rstrip("\n"), "```"]
        lines += ["", f"Whole run: {time.time() - start:.0f} s." if final else
                  f"Cut short after {time.time() - start:.0f} s: the parts above are all it measured."]
        report = "\n".join(lines) + "\n"
        if args.output:  # (whole or not at all: gpu.sh's time limit may stop the script at any moment)
            write_text_atomically(args.output, report)
        return report

    def part(name: str, measure) -> None:
        """Run one part; an exception is a failed check (its message, and its traceback's end in the report), and
        the parts after it still run."""
        try:
            measure()
        except Exception as error:  # noqa: BLE001 (the GPU time is short: report it and go on)
            failures.append(f"{name} raised {type(error).__name__}: {error}")
            tracebacks.append(traceback.format_exc()[-3000:])
            print(failures[-1], flush=True)
        write_report(final=False)

    def speeds() -> None:
        speed_table(device, args, failures, measured, table, lambda: write_report(final=False))

    def embed_speed() -> None:
        nonlocal embed_ratio
        lines, embed_ratio = embed_end_to_end(device, max(args.batch_sizes), args.embed_sentences)
        checks.extend(lines)
        print(checks[-1], flush=True)

    def check(run_check):
        def measure() -> None:
            checks.extend(run_check(failures))
            print(checks[-1], flush=True)
        return measure

    part("the speed table", speeds)
    if not args.no_checks:
        part("embed end to end", embed_speed)
        part("the tests on CUDA", check(cuda_tests))
        part("embed against the CPU", check(embed_against_cpu))
    print("\n" + write_report(final=True))
    return 1 if failures else 0

if __name__ == "__main__":
    sys.exit(main())
