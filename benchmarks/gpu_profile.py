"""Where a GPU's time goes (torch.profiler), for the figures of GPU_RESULTS.md that say so:

    python benchmarks/gpu_profile.py OUTPUT_DIR [PART ...]

PARTs: `train` (the `ptb-gpu` step as pretrain.py runs it on one GPU: recorded whole, `modeling/graphed_step.py`),
`train-layers` (each biLSTM layer recorded, the step otherwise launched kernel by kernel), `original` (the original
size's step, sampled softmax: not recordable), `inference` (exact, original size, 32 and 256 sentences, and bf16 at
256), `gemm` (the original size's per-step recurrent product in several layouts, float32 without TF32 and bf16).
Each prints its wall time and GPU kernel time a step on one line; the profiler's tables (top kernels by GPU time,
top operations by host time) go to OUTPUT_DIR/profile.txt. The training parts read `--train-file` (default data/ptb's,
from `make ptb-data`).
Without CUDA every part runs on the CPU with the tiny preset, to check the script (its figures mean nothing).
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from bench_common import check_output  # noqa: E402
from gpu_train_bench import PTB, preset_model, usual_step  # noqa: E402
from hf_elmo import ElmoConfig, ElmoModel, ElmoTokenizer, fused_bilstm  # noqa: E402
from modeling.graphed_step import GraphedTrainingStep  # noqa: E402
from modeling.presets import training_settings  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
PARTS = ("train", "train-layers", "original", "inference", "gemm")
DEFAULT_PARTS = ["train", "inference"]  # (without PARTs)


def synchronize() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


class Report:
    def __init__(self, folder: Path):
        self.file = open(folder / "profile.txt", "a", encoding="utf-8")

    def line(self, text: str) -> None:
        print(text, flush=True)
        self.file.write(text + "\n")
        self.file.flush()

    def profiled(self, title: str, run, repeats: int) -> tuple[float, float]:
        """Profile `repeats` calls of `run`: the GPU's kernel time and kernels per call; the tables to the file."""
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(repeats):
                run()
            synchronize()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        for sort in ("self_device_time_total", "self_cpu_time_total"):
            self.file.write(f"--- {title}, by {sort}\n")
            self.file.write(prof.key_averages().table(sort_by=sort, row_limit=22, max_name_column_width=60) + "\n")
        return sum(e.device_time_total for e in kernels) / repeats / 1e3, len(kernels) / repeats


def timed(run, calls: int) -> float:
    """Seconds a call over `calls` calls after as many warm-up ones, the host waiting for the GPU at the end only."""
    for _ in range(calls):
        run()
    synchronize()
    started = time.perf_counter()
    for _ in range(calls):
        run()
    synchronize()
    return (time.perf_counter() - started) / calls


def train(report: Report, part: str, text: Path) -> None:
    name = {"original": "original"}.get(part, "ptb-gpu") if DEVICE == "cuda" else "tiny"
    negatives = training_settings(name)["negative_samples"] if part == "original" else 0
    model, batches, words = preset_model(name, negatives, text)
    model.to(DEVICE)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    whole = part == "train"
    graphed = GraphedTrainingStep(model, optimizer, 5.0, torch.bfloat16, record=DEVICE == "cuda") if whole else None
    fused_bilstm.RECORD_CUDA_GRAPHS = True
    position, states = 0, None

    def step():
        nonlocal position, states
        batch = batches.batch(position)
        position += 1
        if graphed is not None:
            states = graphed.step(batch, states)[2]
        else:
            states = usual_step(model, optimizer, batch, states, DEVICE)

    seconds = timed(step, 10 if DEVICE == "cuda" else 2)
    gpu_ms, kernels = report.profiled(f"train {part}", step, 6 if DEVICE == "cuda" else 1)
    failure = f" (not recorded: {graphed.failure})" if graphed is not None and graphed.failure else ""
    report.line(f"== train {part} ({name}, bf16): {seconds * 1e3:.2f} ms a step, {words / seconds:,.0f} words/s; GPU "
                f"kernels {gpu_ms:.2f} ms a step ({kernels:.0f} kernels){failure}")


def inference(report: Report, sentences: int, mode: str | None) -> None:
    torch.manual_seed(0)
    config = ElmoConfig() if DEVICE == "cuda" else ElmoConfig(cell_size=64, projection_dim=16)
    model = ElmoModel(config).eval().to(DEVICE)
    if mode:
        model.set_lstm_approximation(mode)
    generator = torch.Generator().manual_seed(0)
    text = [[f"w{int(i)}" for i in torch.randint(0, 3000, (25,), generator=generator)] for _ in range(sentences)]
    batch = ElmoTokenizer()(text, is_split_into_words=True, padding=True, return_tensors="pt").to(DEVICE)

    def forward():
        with torch.no_grad():
            model(**batch, output_final_states=False)

    seconds = timed(forward, 6)
    gpu_ms, kernels = report.profiled(f"inference {sentences} {mode or 'exact'}", forward, 4)
    report.line(f"== inference, original size, {sentences} sentences, {mode or 'exact'}: {seconds * 1e3:.2f} ms, "
                f"{25 * sentences / seconds:,.0f} words/s; GPU kernels {gpu_ms:.2f} ms ({kernels:.0f} kernels)")


def gemm(report: Report) -> None:
    """h [2, B, 512] x W [2, 512, 16384], the per-step recurrent product of the original size, in the layouts cuBLAS
    could run faster: which one is worth the static loop's while (cuda_graphs.py)."""
    if DEVICE != "cuda":
        report.line("== gemm: needs CUDA")
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    for dtype in (torch.float32, torch.bfloat16):
        weight = torch.randn(2, 16384, 512, device=DEVICE, dtype=dtype) * 0.02  # [2, out, in], as stored
        transposed = weight.transpose(1, 2)  # [2, in, out]: what StaticWeights multiplies by
        contiguous = transposed.contiguous()
        for rows in (32, 256):
            h = torch.randn(2, rows, 512, device=DEVICE, dtype=dtype)
            h_columns = h.transpose(1, 2).contiguous()
            candidates = {
                "bmm(h, W^T as a view)": lambda: torch.bmm(h, transposed),
                "bmm(h, W^T contiguous)": lambda: torch.bmm(h, contiguous),
                "one mm per direction": lambda: [h[d] @ transposed[d] for d in range(2)],
                "bmm(W, h^T): the gates transposed": lambda: torch.bmm(weight, h_columns),
            }
            for name, run in candidates.items():
                for _ in range(5):
                    run()
                times = []
                for _ in range(30):
                    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    run()
                    stop.record()
                    stop.synchronize()
                    times.append(start.elapsed_time(stop) / 1e3)
                seconds = statistics.median(times)
                report.line(f"== gemm {str(dtype)[6:]}, {rows} rows, {name}: {seconds * 1e6:.1f} us, "
                            f"{2 * 2 * rows * 512 * 16384 / seconds / 1e12:.1f} TFLOP/s, weights read at "
                            f"{weight.numel() * weight.element_size() / seconds / 1e12:.2f} TB/s")


def part_name(text: str) -> str:
    """An argparse type: one of PARTS. (Not `choices`: Python 3.11's argparse checks a "*" argument's list, given
    or default, against them, so that no PART at all, the usage above, was refused as "invalid choice: []".)"""
    if text not in PARTS:
        raise argparse.ArgumentTypeError(f"takes {', '.join(PARTS)}, got {text!r}")
    return text


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("output_dir", type=Path, metavar="OUTPUT_DIR", help="where profile.txt goes (made if missing)")
    parser.add_argument("parts", nargs="*", type=part_name, metavar="PART",
                        help=f"{', '.join(PARTS)} (default: {' '.join(DEFAULT_PARTS)})")
    parser.add_argument("--train-file", type=Path, default=PTB / "train.txt", help="the training parts' text")
    args = parser.parse_args()
    args.parts = args.parts or DEFAULT_PARTS
    check_output(parser, "OUTPUT_DIR", args.output_dir, "folder", writes_inside=True)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    report = Report(args.output_dir)
    failed = []
    for part in args.parts:
        try:  # (one part that fails, a missing package or data file, leaves the others to run)
            if part.startswith("train") or part == "original":
                train(report, part, args.train_file)
            elif part == "inference":
                for sentences, mode in ((32, None), (256, None), (256, "bf16")):
                    if mode is None or DEVICE == "cuda":  # (bf16 on a CPU needs AVX512-BF16)
                        inference(report, sentences, mode)
            else:
                gemm(report)
        except Exception as error:  # noqa: BLE001
            failed.append(part)
            report.line(f"== {part}: failed, {type(error).__name__}: {error}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
