"""Training speed on CPU, written to benchmarks/TRAINING.md: hf_elmo's training step against AllenNLP 2.10.1's
trainable biLM, and `modeling/pretrain.py` with the fast and the plain path.

    make bench-train   (or: .venv/bin/python benchmarks/train_bench.py --allennlp-python build/allennlp-venv/bin/python)

1. One training step, Small and original sizes: the same random weights in the original format (as `run.py`
   makes them), the same 64 windows of 20 words of Penn Treebank training text, forward and backward through
   every layer (`hf_train_worker.py`, `allennlp_train_worker.py`); one process for AllenNLP and one for hf_elmo,
   which runs both of its paths, alternating, several rounds; the speed ratios are medians of the ratios
   within each round. The losses and the character embedding's gradients of the two libraries are compared.
2. `modeling/pretrain.py --preset ptb-cpu` on PTB train, runs of a few hundred steps with the fast path and with
   `--plain-path`, alternating: words/s as the script logs them (training steps only), and the largest
   difference between the two paths' logged losses.
Needs `make ptb-data` (PTB in data/ptb) and the AllenNLP venv (`make bench-train` makes it).
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_common import at_least, check_output, interpreter_problem, size_names
from run import (ROOT, SIZES, benchmark_parser, cpu_summary, library_workers, make_models, one_section_per_cpu,
                 section_heading, settings)
from hf_elmo.files import write_text_atomically  # noqa: E402  (run put the repository on the path)

# pretrain.py logs its rate every 10 steps; those of the first 20 steps include the start (first allocations, caches).
PTB_LOGGED_FROM = 20

TARGETS = {"small_vs_allennlp": 3.0, "ptb_fast_vs_plain": 2.5}


def make_windows(ptb_dir: Path, path: Path, rows: int = 64, words: int = 20) -> list[list[str]]:
    """The first rows x words words of PTB train, read as one stream, in windows of `words`."""
    stream = []
    with open(ptb_dir / "train.txt", encoding="utf-8") as text:
        for line in text:
            stream.extend(line.split())
            if len(stream) >= rows * words:
                break
    windows = [stream[i * words : (i + 1) * words] for i in range(rows)]
    path.write_text(json.dumps({"windows": windows}), encoding="utf-8")
    return windows


def largest_relative_difference(first: list, second: list) -> float:
    import numpy as np

    a, b = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def bench_steps(size, args, inputs_file: Path, work: Path, env: dict) -> dict:
    models = make_models(size, work / size.name)
    rounds = args.rounds if size.name == "small" else args.original_rounds
    print(f"\n== training step, {size.label}", flush=True)
    allennlp, hf = library_workers(args, "_train", models, inputs_file, env, work, size.name)
    call = {"allennlp": lambda: allennlp.call("step"), "fast": lambda: hf.call("step", mode="fast"),
            "plain": lambda: hf.call("step", mode="plain")}
    first = {who: run() for who, run in call.items()}  # warm-up; its losses and gradients are compared
    runs = {who: [] for who in call}
    for round_index in range(rounds):
        order = ["allennlp", "fast", "plain"] if round_index % 2 == 0 else ["plain", "fast", "allennlp"]
        for who in order:
            runs[who].append(call[who]())
        words = runs["fast"][-1]["words"]
        print(f"round {round_index + 1}/{rounds}: " + ", ".join(
            f"{who} {words / runs[who][-1]['seconds']:.0f} words/s" for who in call), flush=True)
    memory = {"allennlp": allennlp.close()["memory"], "hf_elmo": hf.close()["memory"]}
    ratio = {pair: statistics.median(runs[pair[1]][i]["seconds"] / runs[pair[0]][i]["seconds"] for i in range(rounds))
             for pair in [("fast", "allennlp"), ("fast", "plain"), ("plain", "allennlp")]}
    spread = {pair: (min(r), max(r)) for pair in ratio
              for r in [[runs[pair[1]][i]["seconds"] / runs[pair[0]][i]["seconds"] for i in range(rounds)]]}
    return {
        "label": size.label, "rounds": rounds, "words": first["fast"]["words"],
        "seconds": {who: statistics.median(r["seconds"] for r in runs[who]) for who in call},
        "ratio": ratio, "spread": spread, "memory": memory,
        "loss": {who: first[who]["loss"] for who in call},
        "grad_difference": {
            "fast vs allennlp": largest_relative_difference(first["fast"]["char_embedding_grad"],
                                                            first["allennlp"]["char_embedding_grad"]),
            "fast vs plain": largest_relative_difference(first["fast"]["char_embedding_grad"],
                                                         first["plain"]["char_embedding_grad"]),
        },
        "versions": {"allennlp": allennlp.hello["versions"], "hf_elmo": hf.hello["versions"]},
    }


def pretrain_run(args, work: Path, env: dict, plain: bool, index: int) -> list[dict]:
    output = work / f"ptb-{'plain' if plain else 'fast'}-{index}"
    shutil.rmtree(output, ignore_errors=True)
    command = [sys.executable, str(ROOT / "modeling" / "pretrain.py"), "--preset", "ptb-cpu",
               "--train-file", str(Path(args.ptb_dir) / "train.txt"), "--output-dir", str(output),
               "--max-steps", str(args.ptb_steps), "--max-train-minutes", "0", "--save-steps", "0",
               "--logging-steps", "10", "--seed", "1"] + (["--plain-path"] if plain else [])
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"pretrain.py failed:\n{result.stderr[-3000:]}")
    records = [json.loads(line) for line in (output / "log.jsonl").read_text().splitlines()]
    shutil.rmtree(output, ignore_errors=True)
    return [record for record in records if "words_per_second" in record]


def bench_pretrain(args, work: Path, env: dict) -> dict:
    print("\n== modeling/pretrain.py --preset ptb-cpu", flush=True)
    runs, first = {"fast": [], "plain": []}, PTB_LOGGED_FROM // 10  # (the first logged rate that counts)
    for index in range(args.ptb_runs):
        for plain in ((False, True) if index % 2 == 0 else (True, False)):
            records = pretrain_run(args, work, env, plain, index)
            runs["plain" if plain else "fast"].append(records)
            rates = [r["words_per_second"] for r in records[first:]]
            print(f"run {index + 1}/{args.ptb_runs}, {'plain' if plain else 'fast'}: median "
                  f"{statistics.median(rates):.0f} words/s over {len(rates)} intervals of 10 steps", flush=True)
    rate = {mode: statistics.median(r["words_per_second"] for records in runs[mode] for r in records[first:])
            for mode in runs}
    per_run = [statistics.median(r["words_per_second"] for r in fast[first:])
               / statistics.median(r["words_per_second"] for r in plain[first:])
               for fast, plain in zip(runs["fast"], runs["plain"])]
    loss_difference = max(abs(f["loss"] - p["loss"]) for fast, plain in zip(runs["fast"], runs["plain"])
                          for f, p in zip(fast, plain))
    return {"words_per_second": rate, "ratio": rate["fast"] / rate["plain"], "per_run_ratios": per_run,
            "loss_difference": loss_difference, "steps": args.ptb_steps, "runs": args.ptb_runs,
            "loss_first": runs["fast"][0][0]["loss"], "loss_last": runs["fast"][0][-1]["loss"]}


def render(steps: dict, pretrain: dict, setup: dict, seconds: float) -> str:
    """This run's section of TRAINING.md, under the heading of its CPU kind."""
    small_ratio = steps["small"]["ratio"][("fast", "allennlp")] if "small" in steps else None
    lines = [section_heading(setup["cpu"]), "",
             f"From one run of `make bench-train` on {time.strftime('%Y-%m-%d', time.gmtime())}, "
             f"{seconds / 60:.1f} minutes.", "", "### Targets", "",
             "| target | measured | met |", "|---|---|---|"]
    if small_ratio is not None:
        lines.append(f"| Small size, training step >= {TARGETS['small_vs_allennlp']:g}x AllenNLP | {small_ratio:.2f}x | "
                     f"{'yes' if small_ratio >= TARGETS['small_vs_allennlp'] else 'no'} |")
    if pretrain:
        lines.append(f"| `ptb-cpu` pretraining, fast path >= {TARGETS['ptb_fast_vs_plain']:g}x the plain path | "
                     f"{pretrain['ratio']:.2f}x | {'yes' if pretrain['ratio'] >= TARGETS['ptb_fast_vs_plain'] else 'no'} |")
    lines += ["", "### Settings", "",
              f"- CPU: {cpu_summary(setup['cpu'])}; {setup['threads']} threads (`torch.set_num_threads`, OMP_NUM_THREADS, "
              f"MKL_NUM_THREADS); {setup['platform']}; Python {setup['python']}; {setup['allocator']}.",
              f"- Load average at the start {setup['load_average_start'][0]:.2f}, at the end "
              f"{setup['load_average_end'][0]:.2f}."]
    if steps:
        versions = next(iter(steps.values()))["versions"]
        lines.append(f"- hf_elmo with torch {versions['hf_elmo']['torch']}, transformers "
                     f"{versions['hf_elmo']['transformers']}; AllenNLP {versions['allennlp']['allennlp']} with torch "
                     f"{versions['allennlp']['torch']}, in its own venv "
                     f"({interpreter_shown(setup['allennlp_python'])}).")
    lines += ["- Training step: 64 windows of 20 words, the first 1,280 words of Penn Treebank train; both libraries "
              "add `<S>` and `</S>` to each window (22 positions); random weights (bilm-tf's initialisation, seed "
              "1234) written in the original format and read by both; train mode; loss = the sum of every layer's "
              "outputs at the words; forward and backward through every layer (character embedding, CNN, highway, "
              "projection, both biLSTM layers); AllenNLP's LSTM state reset before each step. One process per "
              "library (hf_elmo runs both of its paths in one), alternating; the first step of each is a warm-up, "
              "whose losses and gradients are compared.", ""]
    if steps:
        lines += ["### One training step", "",
                  "| size | AllenNLP words/s | hf_elmo plain words/s | hf_elmo fast words/s | fast / AllenNLP | "
                  "fast / plain | plain / AllenNLP | peak memory AllenNLP, hf_elmo (MiB) |",
                  "|---|---|---|---|---|---|---|---|"]
        for name, result in steps.items():
            words, s, r, sp = result["words"], result["seconds"], result["ratio"], result["spread"]

            def cell(pair):
                return f"{r[pair]:.2f}x ({sp[pair][0]:.2f}-{sp[pair][1]:.2f})"

            lines.append(f"| {name} | {words / s['allennlp']:.0f} | {words / s['plain']:.0f} | {words / s['fast']:.0f} | "
                         f"{cell(('fast', 'allennlp'))} | {cell(('fast', 'plain'))} | {cell(('plain', 'allennlp'))} | "
                         f"{result['memory']['allennlp']['peak']:.0f}, {result['memory']['hf_elmo']['peak']:.0f} |")
        lines += ["", "Ratios: the median of the per-round ratios (their range in brackets), "
                  + ", ".join(f"{r['rounds']} rounds ({name})" for name, r in steps.items()) + ".", "",
                  "Agreement (first step): " + "; ".join(
                      f"{name}: loss AllenNLP {r['loss']['allennlp']:.6g}, hf_elmo fast {r['loss']['fast']:.6g}, "
                      f"plain {r['loss']['plain']:.6g}; character embedding gradient, largest difference relative to "
                      f"its largest value: fast vs AllenNLP {r['grad_difference']['fast vs allennlp']:.1e}, fast vs "
                      f"plain {r['grad_difference']['fast vs plain']:.1e}" for name, r in steps.items()) + ".", ""]
    if pretrain:
        rate = pretrain["words_per_second"]
        lines += ["### `modeling/pretrain.py --preset ptb-cpu`", "",
                  "| path | words/s |", "|---|---|",
                  f"| fast (the default) | {rate['fast']:.0f} |", f"| plain (`--plain-path`) | {rate['plain']:.0f} |",
                  f"| fast / plain | **{pretrain['ratio']:.2f}x** |", "",
                  f"{pretrain['runs']} runs of each, alternating, {pretrain['steps']} steps each (`--max-steps "
                  f"{pretrain['steps']} --max-train-minutes 0 --save-steps 0 --logging-steps 10 --seed 1`, PTB train, "
                  "no validation): words/s as the script logs them every 10 steps (forward target words over the "
                  "time of the training steps: batches, forward, backward, clipping, the optimizer), the first two "
                  "intervals of each run left out, median over the rest; per-run ratios "
                  + ", ".join(f"{x:.2f}" for x in pretrain["per_run_ratios"]) + ". The two paths train on the same "
                  f"batches with the same dropout: their logged losses differ by {pretrain['loss_difference']:.1e} "
                  f"at most (loss {pretrain['loss_first']:.3f} after 10 steps, {pretrain['loss_last']:.3f} after "
                  f"{pretrain['steps']}).", ""]
    return "\n".join(lines)


def assemble(previous: str, section: str) -> str:
    """TRAINING.md: one section per CPU kind (`one_section_per_cpu`)."""
    return "\n".join(one_section_per_cpu(
        "# Training speed: hf_elmo against AllenNLP, and the fast path against the plain one",
        "Written by `make bench-train` (`benchmarks/train_bench.py`): one section per kind of CPU it has run on, each "
        "from one run of it (a run replaces the section of its own CPU kind and keeps the others). The targets are "
        "the same on every kind.", section, previous))


def interpreter_shown(path: str) -> str:
    """AllenNLP's interpreter as the results show it: inside this checkout, from its root (no machine's folders)."""
    resolved = Path(path)
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else path


def main(argv=None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rounds", type=at_least(1), default=7, help="rounds of the Small size's training step")
    parser.add_argument("--original-rounds", type=at_least(1), default=3, help="rounds of the original size's")
    parser.add_argument("--sizes", default="small,original")
    parser.add_argument("--ptb-dir", default=str(ROOT / "data" / "ptb"))
    parser.add_argument("--ptb-steps", type=int, default=150, help="steps of each pretrain.py run (0: none)")
    parser.add_argument("--ptb-runs", type=at_least(1), default=2, help="pretrain.py runs of each path")
    parser.add_argument("--work-dir", default=str(ROOT / "build" / "bench-train"))
    parser.add_argument("--output", default=str(Path(__file__).parent / "TRAINING.md"))
    args = parser.parse_args(argv)
    sizes = size_names(parser, args.sizes, [size.name for size in SIZES])
    if args.ptb_steps != 0 and args.ptb_steps < PTB_LOGGED_FROM + 10:  # (else a median of nothing, at the end)
        parser.error(f"--ptb-steps must be 0 (no pretrain.py runs) or at least {PTB_LOGGED_FROM + 10}: the rates of its "
                     f"first {PTB_LOGGED_FROM} steps include the start, got {args.ptb_steps}")
    args.allennlp_python = os.path.abspath(args.allennlp_python)
    problem = interpreter_problem(args.allennlp_python, "AllenNLP", "make bench-train does")
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if not (Path(args.ptb_dir) / "train.txt").is_file():
        print(f"error: no {args.ptb_dir}/train.txt; run `make ptb-data`", file=sys.stderr)
        return 2
    # (both written only at the end, after every run: a path that cannot take them failed with a traceback then)
    check_output(parser, "--work-dir", args.work_dir, "folder", writes_inside=True)
    check_output(parser, "--output", args.output, "file")
    start = time.time()
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1",
               HF_DATASETS_CACHE=str(work / "datasets-cache"))
    os.environ.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    setup = settings(args.threads, args.allennlp_python)
    inputs_file = work / "windows.json"
    make_windows(Path(args.ptb_dir), inputs_file)
    steps = {size.name: bench_steps(size, args, inputs_file, work, env)
             for size in sorted(SIZES, key=lambda s: s.name != "small") if size.name in sizes}
    pretrain = bench_pretrain(args, work, env) if args.ptb_steps else {}
    setup["load_average_end"] = os.getloadavg()
    output = Path(args.output)
    previous = output.read_text(encoding="utf-8") if output.is_file() else ""
    section = render(steps, pretrain, setup, time.time() - start)
    report = assemble(previous, section)
    write_text_atomically(output, report)
    raw = {name: {k: (v if k not in ("ratio", "spread") else {"/".join(p): x for p, x in v.items()})
                  for k, v in r.items()} for name, r in steps.items()}
    (work / "results.json").write_text(json.dumps({"setup": setup, "steps": raw, "pretrain": pretrain}, indent=1))
    print("\n" + section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
