"""Training on one CUDA GPU, run by `gpu.sh` after gpu_bench.py: writes a "Training" section into its output.

1. Checks (float32, TF32 off): the fused biLSTM layer, replayed from its CUDA graph recording, against the plain
   loop's gradients; a whole pretraining model (char CNN, both layers, the sampled softmax) fast against plain.
2. `modeling/pretrain.py` (Accelerate, one GPU): `ptb-gpu` in bf16 and in float32 (TF32 off) over the same steps,
   words/s and how far bf16's logged losses drift from float32's; the original size in bf16. Targets on one H200:
   `ptb-gpu` bf16 >= 60,000 words/s, original bf16 >= 25,000 words/s.
3. The `ptb-gpu` training step in this process, bf16: words/s with the whole step recorded as one CUDA graph
   (`modeling/graphed_step.py`), with each biLSTM layer recorded, with nothing recorded, and on the plain path.
4. `pytest -k cuda tests/test_fused_training.py tests/test_graphed_step.py`.

Each part reports its own failure instead of stopping the others; the script exits 1 if a check failed (or a part
raised), as gpu_bench.py does, so that `gpu.sh`'s status says so. Each line is printed as it comes; after each
part the section is written into the output in one step (a temporary file renamed into place), replacing every
earlier "Training" section there, so that the file never holds half a section or two, and a run stopped early
(`gpu.sh`'s `timeout`) leaves what it measured, marked as cut short. Needs torch with CUDA, transformers, datasets
and accelerate, and data/ptb (`make ptb-data`) for parts 2 and 3. `--smoke --device cpu` runs every part on the CPU with the tiny preset
and a few steps, to check the script itself where there is no GPU (its figures mean nothing).
"""

import argparse
import copy
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import torch  # noqa: E402

from bench_common import check_output, markdown_sections  # noqa: E402
from gpu_bench import run  # noqa: E402
from hf_elmo import ElmoConfig, ElmoForPreTraining, fused_bilstm  # noqa: E402
from hf_elmo.fast_linear import cpu_name  # noqa: E402
from hf_elmo.files import write_text_atomically  # noqa: E402
from hf_elmo.modeling_elmo import ElmoBiLstmLayer  # noqa: E402

TARGETS = {"ptb-gpu": 60_000, "original": 25_000}
PTB = ROOT / "data" / "ptb"
TRAIN_TEXT = PTB / "train.txt"  # --train-file: the text of the speed parts (the smoke test gives the fixture's)
DEVICE = "cuda"  # --device
SMOKE = False  # --smoke: the tiny preset and a few steps instead of ptb-gpu and the original size


def synchronize() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp(min=1e-30)).item()


def layer_check(cell: int, proj: int, batch: int, steps: int) -> str:
    """Fused (third call: replayed from the recording) against plain, float32, both clips active."""
    torch.manual_seed(0)
    layer = ElmoBiLstmLayer(ElmoConfig(cell_size=cell, projection_dim=proj, cell_clip=0.5, proj_clip=0.5)).to(DEVICE)
    for parameter in layer.parameters():
        torch.nn.init.uniform_(parameter, -0.3, 0.3)
    inputs = torch.randn(2, batch, steps, proj, device=DEVICE, requires_grad=True)
    h, c = torch.randn(2, batch, proj, device=DEVICE), torch.randn(2, batch, cell, device=DEVICE)
    mask = torch.ones(batch, steps, dtype=torch.bool, device=DEVICE)
    weights = torch.randn(2, batch, steps, proj, device=DEVICE)
    gradients = {}
    for name, fast, calls in (("plain", False, 1), ("fused", True, 3)):
        layer.use_fast_path = fast
        for _ in range(calls):
            layer.zero_grad(set_to_none=True)
            inputs.grad = None
            outputs, _, _ = layer(inputs, mask, h, c)
            (outputs * weights).sum().backward()
        gradients[name] = [inputs.grad] + [p.grad for p in layer.parameters()]
    recorded = len(fused_bilstm._CUDA_GRAPHS.get(layer, fused_bilstm.LayerGraphs(True)).recordings)
    expected = 1 if DEVICE == "cuda" else 0  # recordings are made on CUDA only
    error = max(relative_error(a, b) for a, b in zip(gradients["fused"], gradients["plain"]))
    verdict = "PASS" if error <= 1e-5 and recorded == expected else "FAIL"
    return (f"{verdict}: biLSTM layer {cell}/{proj}, {batch} x {steps} on {DEVICE}, fused ({recorded} CUDA graph "
            f"recording) against the plain loop: largest relative gradient difference {error:.1e} (limit 1e-5)")


def model_check() -> str:
    """A small pretraining model: loss and every gradient, fast (on CUDA recorded, third step) against plain."""
    config = ElmoConfig(char_embedding_dim=4, char_cnn_filters=((1, 4), (2, 8), (3, 16)), num_highway_layers=1,
                        cell_size=64, projection_dim=16, lm_vocab_size=200, lm_negative_samples=50, lm_dropout=0.1)
    torch.manual_seed(0)
    model = ElmoForPreTraining(config).to(DEVICE).train()
    generator = torch.Generator().manual_seed(1)
    char_ids = torch.randint(1, 262, (8, 12, 50), generator=generator)
    char_ids[..., 8:] = 261
    batch = {"input_ids": char_ids, "labels": torch.randint(0, 200, (8, 12), generator=generator),
             "backward_labels": torch.randint(0, 200, (8, 12), generator=generator)}
    batch = {name: tensor.to(DEVICE) for name, tensor in batch.items()}
    results = {}
    for fast, steps in ((False, 1), (True, 3)):
        model.set_fast_path(fast)
        for _ in range(steps):
            model.zero_grad(set_to_none=True)
            torch.manual_seed(5)
            loss = model(**batch).loss
            loss.backward()
        results[fast] = (loss.item(), {n: p.grad for n, p in model.named_parameters()})
    loss_error = abs(results[True][0] - results[False][0]) / abs(results[False][0])
    errors = {n: relative_error(results[True][1][n], g) for n, g in results[False][1].items()}
    worst = max(errors, key=errors.get)
    verdict = "PASS" if loss_error <= 1e-5 and errors[worst] <= 1e-5 else "FAIL"
    return (f"{verdict}: pretraining model on {DEVICE}, fast against plain: loss {loss_error:.1e}, largest "
            f"gradient difference {errors[worst]:.1e} ({worst}) (limit 1e-5)")


def pytest_on_cuda() -> str:
    result = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "cuda",
                  "tests/test_fused_training.py", "tests/test_graphed_step.py"], timeout=120)
    # (the counts, and each failure's or error's line of -ra's short summary: its reason)
    summary = [line for line in result.stdout.splitlines()
               if " passed" in line or " failed" in line or line.startswith(("FAILED", "ERROR"))]
    verdict = "PASS" if result.returncode == 0 else "FAIL"
    return f"{verdict}: `pytest -k cuda tests/test_fused_training.py tests/test_graphed_step.py`: " + (
        "; ".join(summary) if summary else (result.stdout + result.stderr)[-800:])


def ptb_data(batch_size: int, unroll_steps: int, path: Path | None = None):
    """Stream batches of a text file (by default --train-file, PTB's training text) and its vocabulary's size."""
    path = path or TRAIN_TEXT
    from modeling.data import EncodedText, StreamBatches, WordTable, count_words, read_corpus
    from modeling.vocabulary import Vocabulary

    sentences = read_corpus([str(path)], "text", "whitespace", "train")
    vocabulary = Vocabulary.from_counts(count_words(sentences))
    table = WordTable(50)
    text = EncodedText.encode(sentences, table, vocabulary)
    return StreamBatches(text, table, vocabulary, batch_size, unroll_steps, seed=1, shuffle=False), len(vocabulary)


def preset_model(name: str, negatives: int, text: Path | None = None):
    """A preset's model (its size and dropout; `negatives` sampled words, 0 for the full softmax), seeded 0, on the
    CPU in train mode, with the stream batches of `text` and the words a step trains on."""
    from modeling.presets import PRESETS, training_settings

    training = training_settings(name)
    batches, vocab_size = ptb_data(training["batch_size"], training["unroll_steps"], text)
    config = ElmoConfig(**PRESETS[name]["model"], lm_vocab_size=vocab_size, lm_dropout=training["dropout"],
                        lm_negative_samples=negatives)
    torch.manual_seed(0)
    return ElmoForPreTraining(config).train(), batches, training["batch_size"] * training["unroll_steps"]


def usual_step(model, optimizer, batch: dict, states, device: str):
    """pretrain.py's step outside a recording (bf16 autocast, gradient norm clipped at 5, the optimizer's step) on a
    batch of CPU tensors; returns the final states to carry."""
    with torch.autocast(device, dtype=torch.bfloat16):
        output = model(**{k: v.to(device, non_blocking=True) for k, v in batch.items()}, initial_states=states)
    output.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return tuple(s.detach() for s in output.final_states)


def step_speed(steps: int = 60) -> list[str]:
    """The `ptb-gpu` training step (bf16 autocast, fused AdamW, clipping, carried state) in this process: recorded
    whole as one CUDA graph (`modeling/graphed_step.py`, what pretrain.py runs on one GPU), with only each biLSTM
    layer recorded, with nothing recorded, and on the plain path. Words/s over the last two thirds of the steps,
    timed as a run (the host waits for the GPU only at the end)."""
    from modeling.graphed_step import GraphedTrainingStep

    steps = 6 if SMOKE else steps
    name = "tiny" if SMOKE else "ptb-gpu"
    template, batches, words = preset_model(name, negatives=0)
    cases = [("whole step recorded", True, True, True), ("each biLSTM layer recorded", False, True, True),
             ("nothing recorded", False, True, False), ("plain path", False, False, False)]
    lines = []
    for label, whole, fast, layers in cases:
        model = copy.deepcopy(template).to(DEVICE)
        model.set_fast_path(fast)
        fused_bilstm.RECORD_CUDA_GRAPHS = layers
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        graphed = GraphedTrainingStep(model, optimizer, 5.0, torch.bfloat16, record=DEVICE == "cuda") if whole else None
        states, started = None, None
        for step in range(steps):
            if step == steps // 3:
                synchronize()
                started = time.perf_counter()
            if graphed is not None:
                _, _, states = graphed.step(batches.batch(step), states)
            else:
                states = usual_step(model, optimizer, batches.batch(step), states, DEVICE)
        synchronize()
        rate = words * (steps - steps // 3) / (time.perf_counter() - started)
        failure = f" (not recorded: {graphed.failure})" if graphed is not None and graphed.failure else ""
        lines.append(f"{label}: {rate:,.0f} words/s{failure}")
        del model, optimizer, graphed
    fused_bilstm.RECORD_CUDA_GRAPHS = True
    return [f"Training step of `{name}` in this process (bf16 autocast, fused AdamW, clipping, carried state; steps "
            f"{steps // 3 + 1}-{steps} timed as a run): " + "; ".join(lines) + "."]


def pretrain(preset: str, steps: int, mixed_precision: str, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        accelerate_config = "modeling/configs/gpu.yaml" if DEVICE == "cuda" else "modeling/configs/cpu.yaml"
        command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", accelerate_config,
                   "modeling/pretrain.py", "--preset", preset, "--train-file", str(TRAIN_TEXT),
                   "--output-dir", folder, "--max-steps", str(steps), "--max-train-minutes", "0", "--save-steps", "0",
                   "--logging-steps", "2" if SMOKE else "10", "--seed", "1", "--mixed-precision", mixed_precision]
        started = time.time()
        result = run(command, timeout)
        log = Path(folder, "log.jsonl")
        records = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    records = [r for r in records if "words_per_second" in r]
    if result.returncode != 0 or not records:
        raise RuntimeError(f"pretrain.py --preset {preset} --mixed-precision {mixed_precision} failed: "
                           f"{(result.stdout + result.stderr)[-1500:]}")
    rates = [r["words_per_second"] for r in records[2:]] or [records[-1]["words_per_second"]]
    return {"words_per_second": statistics.median(rates), "losses": {r["step"]: r["loss"] for r in records},
            "seconds": time.time() - started}


def pretrain_speed() -> list[str]:
    """ptb-gpu in bf16 and float32 over the same steps, then the original size in bf16 (with --smoke: tiny, 12 and 6
    steps)."""
    lines = []
    ptb, original_size, steps = ("tiny", "tiny", 12) if SMOKE else ("ptb-gpu", "original", 300)
    bf16 = pretrain(ptb, steps, "bf16", timeout=150)
    fp32 = pretrain(ptb, steps, "no", timeout=150)
    common = sorted(set(bf16["losses"]) & set(fp32["losses"]))
    drift = max(abs(bf16["losses"][s] - fp32["losses"][s]) for s in common)
    last = common[-1]
    met = "met" if bf16["words_per_second"] >= TARGETS["ptb-gpu"] else "NOT met"
    lines.append(f"`pretrain.py --preset {ptb}` (PTB train, {steps} steps, Accelerate on {DEVICE}): bf16 "
                 f"{bf16['words_per_second']:,.0f} words/s (target {TARGETS['ptb-gpu']:,}: {met}); float32 with TF32 off "
                 f"{fp32['words_per_second']:,.0f} words/s. bf16's logged losses (means over {2 if SMOKE else 10} steps) against "
                 f"float32's over the same steps: largest difference {drift:.4f}; at step {last} {bf16['losses'][last]:.4f} "
                 f"against {fp32['losses'][last]:.4f}.")
    original = pretrain(original_size, steps // 2 if SMOKE else 60, "bf16", timeout=150)
    met = "met" if original["words_per_second"] >= TARGETS["original"] else "NOT met"
    what = ("the smoke run's stand-in" if SMOKE
            else "the original size, 128 x 20 words per step, 8192 negatives of the PTB vocabulary, 60 steps")
    lines.append(f"`pretrain.py --preset {original_size}` ({what}): bf16 {original['words_per_second']:,.0f} words/s (target "
                 f"{TARGETS['original']:,}: {met}).")
    return lines


HEADING = "## Training"


# The last line of a section that a run is still writing (the file is rewritten after each part, so that a timeout
# or a crash leaves the parts measured so far, marked as cut short); the finished section ends with its time instead.
RUNNING = "- (cut short: the parts above were measured, the run stopped before the others finished)"


def with_section(text: str, section: str) -> str:
    """`text` (a results file) with `section` (starting with a blank line, then HEADING) in place of its sections of
    that heading (each up to the next `## ` heading; earlier versions of this script appended one a run), where the
    first of them was, or at its end."""
    head, tail, found = [], [], False  # (the other sections before the first Training section, after it)
    for heading, part in markdown_sections(text):
        found = found or heading == HEADING
        if heading != HEADING:
            (tail if found else head).append(part)
    head, tail = "".join(head), "".join(tail)
    head = head.rstrip("\n") + "\n" if head.strip() else ""
    tail = tail.rstrip("\n") + "\n" if tail.strip() else ""
    return head + section + ("\n" + tail if tail else "")


def write_section(path: Path, section: str) -> None:
    """Put `section` into the file `path` (made if missing) in one step: a temporary file beside it, renamed over it."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    write_text_atomically(path, with_section(text, section))


def main() -> int:
    global DEVICE, SMOKE, TRAIN_TEXT
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", help="the results file whose Training section this run writes (replacing an "
                                         "earlier one; default: benchmarks/GPU_RESULTS.md; with --smoke, whose figures "
                                         "only check the script, no file)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and a few steps: checks the script, not the speed")
    parser.add_argument("--train-file", type=Path, default=TRAIN_TEXT,
                        help="the text of the speed parts (default: PTB's training text, `make ptb-data`)")
    args = parser.parse_args()
    if args.output is None and not args.smoke:
        args.output = str(Path(__file__).parent / "GPU_RESULTS.md")
    if args.output:  # (else found when the first part's section is written, or, a folder, at the end)
        check_output(parser, "--output", args.output, "file")
    DEVICE, SMOKE, TRAIN_TEXT = args.device, args.smoke, args.train_file
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device visible to torch", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cache = tempfile.TemporaryDirectory()  # the datasets cache of the PTB text, for this run only
    os.environ["HF_DATASETS_CACHE"] = cache.name
    start = time.time()
    where = torch.cuda.get_device_name() if DEVICE == "cuda" else "the CPU"
    smoke = " --smoke: tiny sizes, a few steps, the figures check the script only" if SMOKE else ""
    section: list[str] = []

    def report(line: str) -> None:
        section.append(line)
        print(line, flush=True)

    def save(finished: bool) -> None:
        if args.output:
            write_section(Path(args.output), "\n".join(section if finished else [*section, RUNNING]) + "\n")

    for line in ["", HEADING, "", f"On {where} (host CPU: {cpu_name()}), torch {torch.__version__} (`benchmarks/gpu_train_bench.py`{smoke}).", ""]:
        report(line)
    small = SMOKE or DEVICE != "cuda"
    parts = [lambda: [layer_check(*((32, 16, 4, 6) if small else (650, 650, 20, 35)))],
             lambda: [layer_check(*((16, 16, 4, 6) if small else (256, 64, 16, 20)))], lambda: [model_check()]]
    has_datasets = importlib.util.find_spec("datasets") is not None  # (pretrain.py reads its text with it)
    if not has_datasets:
        report("- Speed and the CUDA tests: not run, the package datasets is not installed here (see gpu.sh).")
    elif TRAIN_TEXT.is_file():
        parts += [pretrain_speed, step_speed]
    else:
        report(f"- Speed: not measured, no {TRAIN_TEXT} (`make ptb-data`).")
    if DEVICE == "cuda" and has_datasets:
        parts.append(lambda: [pytest_on_cuda()])
    failed = False
    for part in parts:
        try:
            found = part()
        except Exception:
            found = [f"FAIL: {traceback.format_exc()[-1500:]}"]
        for line in found:
            report(f"- {line}")
        failed |= any(line.startswith("FAIL") for line in found)
        save(finished=False)
    report("")
    report(f"Training section: {time.time() - start:.0f} s.")
    save(finished=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
