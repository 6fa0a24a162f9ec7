"""hf_elmo against AllenNLP 2.10.1 on CPU: speed, memory and agreement, written to benchmarks/RESULTS.md.

    make bench        (or: .venv/bin/python benchmarks/run.py --allennlp-python build/allennlp-venv/bin/python)

Both libraries load the same random weights, written in the original HDF5 format (hf_elmo through its
converter), and embed the same words. Each library runs in its own process with the same thread count;
their runs alternate, several rounds, and every figure is the median over rounds (a speed ratio: the median of
the ratios within each round, as the machine's speed drifts). The machine's matrix
multiply rate and memory bandwidth are measured between the rounds, so the fractions of them refer to the
same conditions as the timings.
"""

import argparse
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench_common import (at_least, check_output, cpu0_caches, interpreter_problem, last_level_cache,  # noqa: E402
                          markdown_sections, size_names)
from hf_elmo.fast_linear import cpuinfo  # noqa: E402
from hf_elmo.files import write_text_atomically  # noqa: E402

FIXTURES = ROOT.parent / "shared" / "fixtures"
SEED = 1234


@dataclass(frozen=True)
class Size:
    name: str
    label: str
    config: dict


SIZES = [
    Size("original", "original (2x4096_512_2048cnn_2xhighway, 93.6M parameters)", {}),
    Size("small", "small (2x1024_128_2048cnn_1xhighway, 13.6M parameters)",
         {"cell_size": 1024, "projection_dim": 128, "num_highway_layers": 1}),
]


# --------------------------------------------------------------------------------------------- inputs


def make_inputs(path: Path) -> dict:
    """32 sentences of 20-30 words (25 on average) and 8 single sentences of 18-22 words, from real text.

    The text is the English news sentences and the training text of the reference fixtures, read as one
    stream of words, so word repetition within a batch is that of running text.
    """
    sentences = json.loads((FIXTURES / "allennlp-elmo" / "sentences.json").read_text(encoding="utf-8"))
    stream = [word for group in sentences for sentence in group for word in sentence.split()]
    stream += (FIXTURES / "bilm-tf" / "train" / "data.txt").read_text(encoding="utf-8").split()
    rng = random.Random(SEED)

    def take(count: int, low: int, high: int, start: int) -> list[list[str]]:
        chunks, position = [], start
        for _ in range(count):
            length = rng.randint(low, high)
            chunks.append([stream[(position + i) % len(stream)] for i in range(length)])
            position += length
        return chunks

    inputs = {"batch": [take(32, 20, 30, 0)], "single": [[sentence] for sentence in take(8, 18, 22, 401)]}
    path.write_text(json.dumps(inputs), encoding="utf-8")
    return inputs


# --------------------------------------------------------------------------------------------- models


def make_models(size: Size, folder: Path) -> tuple[Path, Path, Path]:
    """Random weights (bilm-tf's initialisation) in the original format, and their hf_elmo conversion."""
    import torch

    from conversion.convert_original_elmo import convert_original_to_hf
    from conversion.original_format import state_dict_to_original, write_original_weights
    from hf_elmo import ElmoConfig, ElmoModel

    options, weights, converted = folder / "options.json", folder / "weights.hdf5", folder / "hf"
    stamp = folder / "stamp.json"
    wanted = {"seed": SEED, "config": size.config}
    if stamp.is_file() and json.loads(stamp.read_text()) == wanted and (converted / "config.json").is_file():
        return options, weights, converted
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    config = ElmoConfig(**size.config)
    model = ElmoModel(config)
    options.write_text(json.dumps(config.to_original_options(), indent=2), encoding="utf-8")
    write_original_weights(state_dict_to_original(model.state_dict(), config), weights)
    del model
    convert_original_to_hf(options, weights, converted, overwrite=True)
    stamp.write_text(json.dumps(wanted))
    return options, weights, converted


# --------------------------------------------------------------------------------------------- workers


class Worker:
    """A library in its own process, driven over JSON lines (see bench_common.Channel)."""

    def __init__(self, name: str, argv: list[str], env: dict, log: Path):
        self.name, self.log = name, log
        self.process = subprocess.Popen(
            argv, cwd=Path(__file__).parent, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log.open("w"),
        )
        self.hello = self._read()

    def _read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name} worker stopped; its log is {self.log}:\n{self.log.read_text()[-3000:]}")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"{self.name} worker failed:\n{reply['error']}")
        return reply

    def call(self, cmd: str, **args) -> dict:
        self.process.stdin.write(json.dumps({"cmd": cmd, "args": args}) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> dict:
        reply = self.call("quit")
        self.process.wait(timeout=60)
        return reply


# --------------------------------------------------------------------------------------------- arithmetic


def flops_per_position(config) -> tuple[float, float]:
    """(char CNN + highway + projection, all biLSTM layers) floating point operations for one token."""
    dim, width, proj, cell = config.char_embedding_dim, config.num_char_filters, config.projection_dim, config.cell_size
    chars = config.max_characters_per_token
    cnn = sum(w * dim * n * (chars - w + 1) for w, n in config.char_cnn_filters)
    char = cnn + config.num_highway_layers * 2 * width * width + (width * proj if config.has_char_projection else 0)
    lstm = config.num_lstm_layers * 2 * (2 * proj * 4 * cell + (cell * proj if config.has_lstm_projection else 0))
    return 2.0 * char, 2.0 * lstm


def needed_positions(sentences: list[list[str]]) -> tuple[int, int]:
    """(token positions, biLSTM steps per direction) that the returned layers of `sentences` need: every word
    plus `<S>` and `</S>` through the char CNN; through the biLSTM every word plus one boundary per direction
    (forward: `<S>` to `</S>`, whose own step feeds only the final state; backward the other way)."""
    return sum(len(s) + 2 for s in sentences), sum(len(s) + 1 for s in sentences)


def lstm_weights(config) -> tuple[int, int, int]:
    """The weights of one layer and direction of the biLSTM: (input, recurrent, projection) counts."""
    proj, cell = config.projection_dim, config.cell_size
    return 4 * cell * proj, 4 * cell * proj, cell * proj if config.has_lstm_projection else 0


def weight_bytes(config, words: int, reader: str) -> float:
    """Bytes of weights (the matrices; their biases, a thousandth of them, left out) that `reader` reads for one
    sentence of `words` words alone (a batch of one):
    "allennlp": every step, `<S>` to `</S>` in each direction, multiplies each layer's input, recurrent and projection
    weights (the first step's recurrent ones by the zero state too); the char encoder's are read once.
    "hf-cold": hf_elmo's steps (each word and one boundary a direction: the last step's outputs are dropped) read the
    recurrent and projection weights, except the first step, from the zero state, the recurrent ones; each layer's
    input weights and the char encoder's are read once.
    "hf-warm": as cold, but every word's char encoding and first-layer input gates are cached: neither is read."""
    input_weight, recurrent, projection = lstm_weights(config)
    chains = 2 * config.num_lstm_layers  # (a layer and direction each)
    width = config.num_char_filters
    char = (sum(w * config.char_embedding_dim * n for w, n in config.char_cnn_filters)
            + config.num_highway_layers * 2 * width * width
            + ((width + config.word_embedding_dim) * config.projection_dim if config.has_char_projection else 0))
    if reader == "allennlp":
        return 4.0 * (chains * (words + 2) * (input_weight + recurrent + projection) + char)
    steps = chains * ((words + 1) * projection + words * recurrent)
    if reader == "hf-cold":
        return 4.0 * (steps + chains * input_weight + char)
    return 4.0 * (steps + (chains - 2) * input_weight)


def reread_bytes(config, reader: str) -> float:
    """Bytes of weights that one layer and direction reads at each of its steps (`reader` as in `weight_bytes`; the
    input weights only AllenNLP's). Both libraries run every step of one layer and direction before the next, so
    these are read again step after step: from the cache where it holds them, not from memory."""
    input_weight, recurrent, projection = lstm_weights(config)
    return 4.0 * (recurrent + projection + (input_weight if reader == "allennlp" else 0))


# Up to this many times the last-level cache, weights read over and over still come partly from it (on an AMD EPYC
# Zen 5 with a 32 MiB L3, 2 threads: a 40 MiB buffer is read at twice the rate of a 512 MiB one, 64 MiB at 1.5x).
PARTLY_CACHED = 4


def bandwidth_share(fraction: float, reread: float, caches: dict[str, str]) -> str:
    """`fraction` (weight bytes a second over the memory bandwidth) as RESULTS.md shows it, given `reread`
    (`reread_bytes`) and the CPU's `caches`: where the reread weights fit in the last-level cache they do not come
    from memory, and no share of its bandwidth is shown; up to PARTLY_CACHED times it, the share says so."""
    last = last_level_cache(caches)
    if last is not None and reread <= last[1]:
        return f"weights in the {last[0]} cache"
    if last is not None and reread <= PARTLY_CACHED * last[1]:
        return f"{fraction:.0%} of bandwidth, partly from the {last[0]} cache"
    return f"{fraction:.0%} of bandwidth"


def max_difference(first: Path, second: Path, layers: int) -> list[float]:
    import numpy as np

    a, b = np.load(first), np.load(second)
    largest = [0.0] * layers
    for key in a.files:
        layer = int(key.rsplit("_l", 1)[1])
        largest[layer] = max(largest[layer], float(np.abs(a[key] - b[key]).max()) if a[key].size else 0.0)
    return largest


def median(values: list[float]) -> float:
    return statistics.median(values)


# --------------------------------------------------------------------------------------------- the run


# The vector extensions that decide which kernels are fast, as /proc/cpuinfo names them.
EXTENSIONS = {"avx2": "AVX2", "fma": "FMA", "avx512f": "AVX-512", "avx512_vnni": "AVX512-VNNI",
              "avx512_bf16": "AVX512-BF16", "avx512_fp16": "AVX512-FP16", "amx_bf16": "AMX-BF16", "amx_int8": "AMX-INT8"}


def describe_cpu() -> dict:
    """The CPU's model name, vendor, family and model numbers (what tell one kind of CPU from another here),
    vector extensions, caches."""
    fields = cpuinfo()
    flags = fields.get("flags", "").split()
    return {"model": fields.get("model name", "unknown"), "vendor": fields.get("vendor_id", "unknown"),
            "family": fields.get("cpu family"), "model_number": fields.get("model"),
            "logical_cpus": os.cpu_count(), "extensions": [name for flag, name in EXTENSIONS.items() if flag in flags],
            "caches": cpu0_caches()}


def cpu_kind(cpu: dict) -> str:
    """`describe_cpu()`'s model name, vendor, family and model numbers: "AMD EPYC (AuthenticAMD, family 23, model 49)"."""
    numbers = f", family {cpu['family']}, model {cpu['model_number']}" if cpu.get("family") else ""
    return f"{cpu['model']} ({cpu['vendor']}{numbers})"


def cpu_summary(cpu: dict) -> str:
    """`describe_cpu()` as one line: the kind, logical CPUs, vector extensions, caches."""
    caches = ", ".join(f"{level} {size}" for level, size in cpu["caches"].items())
    return (f"{cpu_kind(cpu)}, {cpu['logical_cpus']} logical CPUs; vector extensions: "
            f"{', '.join(cpu['extensions']) or 'none recorded'}; caches: {caches or 'not recorded'}")


def settings(threads: int, allennlp_python: str) -> dict:
    env_keys = ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME",
                "OMP_PROC_BIND", "LD_PRELOAD", "MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"]
    cpu = describe_cpu()
    return {
        "threads": threads,
        "cpu": cpu,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "allocator": "glibc malloc " + os.confstr("CS_GNU_LIBC_VERSION").split()[-1]
        + (f" with LD_PRELOAD={os.environ['LD_PRELOAD']}" if os.environ.get("LD_PRELOAD") else " (default, no LD_PRELOAD)"),
        "environment": {key: os.environ.get(key, "unset") for key in env_keys},
        "allennlp_python": allennlp_python,
        "load_average_start": os.getloadavg(),
    }


def library_workers(args, kind: str, models: tuple, inputs_file: Path, env: dict, work: Path, name: str):
    """The AllenNLP and the hf_elmo worker processes (`allennlp{kind}_worker.py`, `hf{kind}_worker.py`) on the same
    models (options, weights, converted folder), each logging to `work`."""
    options, weights, converted = models
    allennlp = Worker("allennlp", [args.allennlp_python, "-W", "ignore", f"allennlp{kind}_worker.py", str(options),
                                   str(weights), str(inputs_file), str(args.threads)], env,
                      work / f"allennlp{kind.replace('_', '-')}-{name}.log")
    hf = Worker("hf_elmo", [sys.executable, f"hf{kind}_worker.py", str(converted), str(inputs_file), str(args.threads)],
                env, work / f"hf{kind.replace('_', '-')}-{name}.log")
    return allennlp, hf


def bench_size(size: Size, args, inputs_file: Path, work: Path, env: dict) -> dict:
    from hf_elmo import ElmoConfig

    options, weights, converted = make_models(size, work / size.name)
    config = ElmoConfig.from_pretrained(converted)
    print(f"\n== {size.label}", flush=True)
    allennlp, hf = library_workers(args, "", (options, weights, converted), inputs_file, env, work, size.name)
    result = {"label": size.label, "load": {"allennlp": allennlp.hello, "hf_elmo": hf.hello}}
    saved = {name: work / f"{size.name}-{name}.npz" for name in
             ["allennlp-batch", "allennlp-single", "hf-batch-cold", "hf-batch-warm", "hf-single-cold", "hf-single-warm"]}
    # Warm-up (AllenNLP's first batch is several times slower than the rest); its outputs are the ones compared.
    for case in ("batch", "single"):
        allennlp.call("run", case=case, save=str(saved[f"allennlp-{case}"]))
        for mode in ("cold", "warm"):
            hf.call("run", case=case, mode=mode, save=str(saved[f"hf-{case}-{mode}"]))
    runs = {key: [] for key in ["ceiling"] + [f"{lib}-{case}" for lib in ("allennlp", "hf-cold", "hf-warm")
                                              for case in ("batch", "single")]}
    loads, batch_rows = [], len(json.loads(inputs_file.read_text(encoding="utf-8"))["batch"][0])
    for round_index in range(args.rounds):
        for case in ("batch", "single"):
            order = ["allennlp", "cold", "warm"] if round_index % 2 == 0 else ["cold", "warm", "allennlp"]
            for who in order:
                if who == "allennlp":
                    runs[f"allennlp-{case}"].append(allennlp.call("run", case=case))
                else:
                    runs[f"hf-{who}-{case}"].append(hf.call("run", case=case, mode=who))
        runs["ceiling"].append(hf.call("ceiling") | hf.call("step_rate", rows=batch_rows))
        loads.append(os.getloadavg()[0])
        batch = runs["hf-warm-batch"][-1]
        print(f"round {round_index + 1}/{args.rounds}: AllenNLP {runs['allennlp-batch'][-1]['words'] / runs['allennlp-batch'][-1]['seconds']:.0f} "
              f"words/s, hf_elmo warm {batch['words'] / batch['seconds']:.0f} words/s, "
              f"ceiling {runs['ceiling'][-1]['gflops']:.0f} GFLOP/s, load {loads[-1]:.2f}", flush=True)
    result["runs"] = runs
    result["load_average_during"] = loads
    # Peak memory of the exact runs, before the opt-in modes below add their own copies of the weights.
    result["memory_end"] = {"allennlp": allennlp.close()["memory"], "hf_elmo": hf.call("memory")["memory"]}

    # Opt-in modes with the caches warm (so that only the biLSTM differs), each run alternating with an exact one:
    # the speed-up is the median of the pairs' ratios. bf16 also one sentence at a time, where it pays most.
    approximations = {}
    cases = {"bf16": ("batch", "single"), "int8": ("batch",), "nn_lstm": ("batch",)}
    for mode, mode_cases in cases.items():
        if mode == "bf16" and hf.hello["native_bfloat16"] is None:
            approximations[mode] = {"not_offered": "this CPU has neither AVX512-BF16 nor AMX-BF16"}
            continue
        for case in mode_cases:
            path = work / f"{size.name}-approx-{mode}-{case}.npz"
            hf.call("run", case=case, mode="warm", save=str(path), approximation=mode)
            # (leaving a mode drops what it derived from the weights, and the exact runs between leave it: each
            # approximate run first runs the case once untimed, as a user who stays in the mode has them)
            pairs = [(hf.call("run", case=case, mode="kept")["seconds"],
                      hf.call("run", case=case, mode="warm", approximation=mode)["seconds"]) for _ in range(3)]
            approximations[f"{mode} {case}"] = {
                "mode": mode, "case": case, "seconds": median([p[1] for p in pairs]),
                "speedup": median([exact / approximate for exact, approximate in pairs]),
                "deviation": max_difference(saved[f"hf-{case}-warm"], path, config.num_lstm_layers + 1),
            }
    result["approximations"] = approximations
    result["kernels"] = hf.call("kernels")["kernels"]
    hf.close()

    layers = config.num_lstm_layers + 1
    result["agreement"] = {
        f"{case} {mode}": max_difference(saved[f"allennlp-{case}"], saved[f"hf-{case}-{mode}"], layers)
        for case in ("batch", "single") for mode in ("cold", "warm")
    }
    result["config"] = {"char_flops": flops_per_position(config)[0], "lstm_flops": flops_per_position(config)[1]}
    result["config_obj"] = config
    return result


def fixture_deviations(work: Path) -> dict[str, list[float]]:
    """Each approximation's deviation on the trained tiny fixture model, whose cells do hit the clips
    (random weights rarely do, which flatters nn_lstm)."""
    import torch

    from conversion.convert_original_elmo import convert_original_to_hf
    from hf_elmo import ElmoModel, ElmoTokenizer
    from hf_elmo.approximate import approximation_deviation, native_bfloat16_extension

    folder = FIXTURES / "allennlp-elmo"
    converted = convert_original_to_hf(folder / "options.json", folder / "lm_weights.hdf5", work / "fixture-hf",
                                       overwrite=True)
    model, tokenizer = ElmoModel.from_pretrained(converted).eval(), ElmoTokenizer.from_pretrained(converted)
    sentences = json.loads((folder / "sentences.json").read_text(encoding="utf-8"))
    batch = tokenizer([s.split() for group in sentences for s in group], is_split_into_words=True, padding=True,
                      return_tensors="pt")
    torch.manual_seed(0)
    kinds = ["int8", "nn_lstm"] + (["bf16"] if native_bfloat16_extension() else [])
    return {kind: approximation_deviation(model, batch, kind) for kind in kinds}


def summarise(size_result: dict, inputs: dict) -> dict:
    """Medians, ratios and fractions of the ceilings for one size."""
    runs, config = size_result["runs"], size_result["config_obj"]
    char_flops, lstm_flops = flops_per_position(config)
    ceiling = median([r["gflops"] for r in runs["ceiling"]]) * 1e9
    bandwidth = median([r["bandwidth_gbs"] for r in runs["ceiling"]]) * 1e9
    kernels = [r.get("ceiling_kernel", "torch.mm") for r in runs["ceiling"]]
    out = {"ceiling_gflops": ceiling / 1e9, "bandwidth_gbs": bandwidth / 1e9,
           "ceiling_kernel": Counter(kernels).most_common(1)[0][0]}  # (the fastest in most rounds)
    for case in ("batch", "single"):
        sentences = [s for batch in inputs[case] for s in batch]
        positions, steps = needed_positions(sentences)
        words = sum(len(s) for s in sentences)
        flops = positions * char_flops + steps * lstm_flops
        row = {}
        for lib in ("allennlp", "hf-cold", "hf-warm"):
            seconds = median([r["seconds"] for r in runs[f"{lib}-{case}"]])
            row[lib] = {"words_per_s": words / seconds, "seconds": seconds, "flop_fraction": flops / seconds / ceiling}
            if lib != "allennlp":
                lstm_seconds = median([r["lstm_seconds"] for r in runs[f"{lib}-{case}"]])
                row[lib]["lstm_flop_fraction"] = steps * lstm_flops / lstm_seconds / ceiling
            if case == "single":
                need = sum(weight_bytes(config, len(s), lib) for s in sentences)
                row[lib]["bandwidth_fraction"] = need / seconds / bandwidth
        # The machine's speed drifts between rounds: each ratio is taken within a round, then the median over rounds.
        for mode in ("cold", "warm"):
            ratios = [allennlp["seconds"] / hf["seconds"]
                      for allennlp, hf in zip(runs[f"allennlp-{case}"], runs[f"hf-{mode}-{case}"])]
            row[f"ratio_{mode}"], row[f"ratio_{mode}_range"] = median(ratios), (min(ratios), max(ratios))
        out[case] = row
    # The fastest this exact biLSTM can run here: the input multiplies at the ceiling (the first layer's over
    # the distinct words and <S>, </S>, none when warm: they are cached), the per-step multiplies at their
    # measured rate (the first step of each row has no recurrent multiply, and the second's serves every row
    # from one shared row), the cell's own work free.
    sentences = [s for batch in inputs["batch"] for s in batch]
    steps, words = needed_positions(sentences)[1], sum(len(s) for s in sentences)
    distinct = len({word for sentence in sentences for word in sentence}) + 2
    proj, cell, layers = config.projection_dim, config.cell_size, config.num_lstm_layers
    shared_rows = len(sentences) - 1  # per chain, the first step of all but one row
    first_input_flops = 2 * 2 * proj * 4 * cell * distinct
    later_input_flops = 2 * 2 * proj * 4 * cell * (layers - 1) * (steps - shared_rows)
    step_flops = layers * 2 * 2 * (proj * 4 * cell * (steps - len(sentences) - shared_rows) + cell * proj * (steps - shared_rows))
    step_rate = median([r["step_gflops"] for r in runs["ceiling"]]) * 1e9
    bound = {"cold": (first_input_flops + later_input_flops) / ceiling + step_flops / step_rate,
             "warm": later_input_flops / ceiling + step_flops / step_rate}
    batch = out["batch"]
    char_seconds = {mode: batch[f"hf-{mode}"]["seconds"] - median([r["lstm_seconds"] for r in runs[f"hf-{mode}-batch"]])
                    for mode in ("cold", "warm")}
    out["bound"] = {
        "step_rate_gflops": step_rate / 1e9,
        "lstm_flop_fraction": steps * lstm_flops / bound["warm"] / ceiling,  # as measured: warm
        # The ratio to AllenNLP if the biLSTM ran at the bound and the rest of the batch took what it took.
        **{f"ratio_{mode}": words / (bound[mode] + char_seconds[mode]) / batch["allennlp"]["words_per_s"]
           for mode in ("cold", "warm")},
    }
    load = size_result["load"]
    out["memory"] = {
        lib: {"imported": load[lib]["imported"]["peak"], "load_peak": load[lib]["loaded"]["peak"],
              "load_rss": load[lib]["loaded"]["rss"], "load_file_backed": load[lib]["loaded"].get("file_backed", 0.0),
              "run_peak": size_result["memory_end"][lib]["peak"]}
        for lib in ("allennlp", "hf_elmo")
    }
    out["memory"]["load_ratio"] = out["memory"]["hf_elmo"]["load_peak"] / out["memory"]["allennlp"]["load_peak"]
    out["memory"]["run_ratio"] = out["memory"]["hf_elmo"]["run_peak"] / out["memory"]["allennlp"]["run_peak"]
    return out


def render(results: dict, summaries: dict, setup: dict, elapsed: float, inputs: dict, extra=None) -> str:
    """`extra`: another section's (Markdown lines, targets), e.g. elmoformanylangs_bench.render's."""
    cpu = setup["cpu"]
    lines = [section_heading(cpu), "",
             f"From one run of `make bench` on {time.strftime('%Y-%m-%d', time.localtime(setup['started']))}.", "",
             "### Settings", "",
             f"- CPU: {cpu_summary(cpu)}; {setup['platform']}; Python {setup['python']}",
             f"- Threads: {setup['threads']} for both libraries (`torch.set_num_threads`, `OMP_NUM_THREADS`, `MKL_NUM_THREADS`)",
             "- OpenMP/allocator environment: " + ", ".join(f"{k}={v}" for k, v in setup["environment"].items()),
             f"- Allocator: {setup['allocator']}",
             f"- torch {setup['versions']['hf_elmo']['torch']}, transformers {setup['versions']['hf_elmo']['transformers']}"
             f" (hf_elmo); torch {setup['versions']['allennlp']['torch']}, allennlp {setup['versions']['allennlp']['allennlp']}"
             " in its own venv (`../shared/tools/peer-allennlp-setup.sh`)",
             f"- Load average (1 min): {setup['load_average_start'][0]:.2f} at the start, "
             f"{min(setup['load_during']):.2f}-{max(setup['load_during']):.2f} between rounds, "
             f"{setup['load_average_end'][0]:.2f} at the end",
             f"- Rounds: {setup['rounds']} per case, libraries alternating (order flipped every round), medians reported, "
             "speed ratios as the median of each round's ratio; "
             f"whole run {elapsed / 60:.1f} min",
             "- Inputs: real English text (the fixtures' news sentences and training text as one word stream): "
             f"one batch of {len(inputs['batch'][0])} sentences of 20-30 words "
             f"({sum(len(s) for s in inputs['batch'][0])} words), and {len(inputs['single'])} single sentences of 18-22 "
             f"words ({sum(len(b[0]) for b in inputs['single'])} words), each its own batch. Timings include "
             "tokenisation (`batch_to_ids` / `ElmoTokenizer`) and return every layer without `<S>`/`</S>`.",
             "- Weights: random (bilm-tf's initialisation, seed 1234), written in the original HDF5 format; AllenNLP "
             "loads that file, hf_elmo its conversion (safetensors).",
             "- AllenNLP: `_ElmoBiLm` + `batch_to_ids` + `remove_sentence_boundaries`, LSTM state reset before every "
             "batch. hf_elmo: `ElmoModel` (stateless, `output_final_states=False`: no final state, so each row's last LSTM step, whose outputs are dropped, is skipped), exact path. \"cold\": caches of per-word results "
             "emptied before every batch (`clear_caches()`: each distinct word of the batch still goes through the "
             "char CNN and the first layer's input multiply once); \"warm\": the same batches ran once before, so "
             "every word is cached. Both libraries were warmed up before timing.",
             "- Ceilings, measured between rounds in the same run: fp32 matrix multiply = best 2048x2048x2048 "
             "product of `torch.mm` and of each float32 kernel hf_elmo chooses among in this build of torch "
             "(`fast_linear.float32_kernels`: MKL's packed weights, oneDNN's reordered weights, plain BLAS); memory bandwidth = best "
             "read (`torch.amax`, on the benchmark's threads) of a buffer 8 times the last-level cache, at least 512 MiB "
             "(`bench_common.memory_bandwidth`).",
             ""]
    targets = []
    for name, summary in summaries.items():
        result = results[name]
        memory = summary["memory"]
        lines += [f"### {result['label']}", "",
                  f"Ceilings: {summary['ceiling_gflops']:.0f} GFLOP/s fp32 matrix multiply (fastest: "
                  f"{summary['ceiling_kernel']}), "
                  f"{summary['bandwidth_gbs']:.1f} GB/s memory bandwidth. Model FLOPs per token: "
                  f"{(result['config']['char_flops'] + result['config']['lstm_flops']) / 1e6:.0f}M "
                  f"(char CNN + highway + projection {result['config']['char_flops'] / 1e6:.0f}M, biLSTM "
                  f"{result['config']['lstm_flops'] / 1e6:.0f}M).", "",
                  "Words per second are medians over the rounds; a ratio is the median of the ratios within each round.", "",
                  "| case | AllenNLP words/s | hf_elmo cold words/s | hf_elmo warm words/s | cold ratio | warm ratio |",
                  "|---|---|---|---|---|---|"]
        spread = []
        for case, label in (("batch", "32 sentences"), ("single", "1 sentence at a time")):
            row = summary[case]
            lines.append(f"| {label} | {row['allennlp']['words_per_s']:.0f} | {row['hf-cold']['words_per_s']:.0f} | "
                         f"{row['hf-warm']['words_per_s']:.0f} | {row['ratio_cold']:.2f}x | {row['ratio_warm']:.2f}x |")
            (cold_low, cold_high), (warm_low, warm_high) = row["ratio_cold_range"], row["ratio_warm_range"]
            spread.append(f"{label}: cold {cold_low:.2f}x to {cold_high:.2f}x, warm {warm_low:.2f}x to {warm_high:.2f}x")
        lines += ["", f"Ratios within single rounds: {'; '.join(spread)}."]
        lines += ["", "Fraction of the measured ceilings (model FLOPs that the returned layers need, per second, over "
                  "the matrix multiply ceiling: every token, `<S>`/`</S>` included, through the char CNN; every word "
                  "and one boundary per sentence and direction through the biLSTM, the step from `</S>` forward and "
                  "from `<S>` backward only giving the final state; hf_elmo computes less where words repeat or are "
                  "cached, so its fractions can pass 100%):", "",
                  "| case | AllenNLP | hf_elmo cold | hf_elmo warm | hf_elmo biLSTM part (warm) |", "|---|---|---|---|---|"]
        for case, label in (("batch", "32 sentences, FLOP ceiling"), ("single", "1 sentence, FLOP ceiling")):
            row = summary[case]
            lines.append(f"| {label} | {row['allennlp']['flop_fraction']:.0%} | {row['hf-cold']['flop_fraction']:.0%} | "
                         f"{row['hf-warm']['flop_fraction']:.0%} | {row['hf-warm']['lstm_flop_fraction']:.0%} |")
        row, config = summary["single"], result["config_obj"]
        share = {lib: bandwidth_share(row[lib]["bandwidth_fraction"], reread_bytes(config, lib), cpu["caches"])
                 for lib in ("allennlp", "hf-cold", "hf-warm")}
        lines.append(f"| 1 sentence, weight bytes streamed / bandwidth | {share['allennlp']} | {share['hf-cold']} | "
                     f"{share['hf-warm']} | |")
        bound = summary["bound"]
        lines += ["", f"What the exact computation allows here (32 sentences): the recurrent and projection multiplies of "
                  f"each step take {len(inputs['batch'][0])} rows at a time and cannot leave the time loop; measured "
                  f"with the model's own weights and kernels they run at {bound['step_rate_gflops']:.0f} GFLOP/s "
                  f"({bound['step_rate_gflops'] / summary['ceiling_gflops']:.0%} of the ceiling). With the input "
                  "multiplies at the full ceiling (the first layer's over distinct words, as hf_elmo computes them, "
                  "and none when warm, as they are cached), those at that rate and the cell's own work free, the "
                  "biLSTM part (warm) would "
                  f"reach {bound['lstm_flop_fraction']:.0%} of the ceiling, and the batch (the rest of it as measured) "
                  f"{bound['ratio_cold']:.2f}x AllenNLP cold and {bound['ratio_warm']:.2f}x warm: an upper bound "
                  "for this way of computing the exact model, on this machine and run."]
        last = last_level_cache(cpu["caches"])
        lines += ["", "For one sentence every step must read the recurrent and projection weights of every layer and "
                  "direction (AllenNLP also re-reads the input weights at every step), so this case is bound by "
                  "the rate they are read at; the last row is the weight traffic each library needs over the measured "
                  "memory bandwidth. Both run a layer and direction's steps in turn, reading its weights again at "
                  f"every step ({reread_bytes(config, 'hf-cold') / 2**20:.3g} MiB; AllenNLP's "
                  f"{reread_bytes(config, 'allennlp') / 2**20:.3g} MiB)"
                  + (f": against the {last[1] / 2**20:.3g} MiB {last[0]} cache, weights that fit come from it, not "
                     f"from memory (no share of the bandwidth is shown), and up to {PARTLY_CACHED} times its size part "
                     "of them still do, as the row says." if last else "."), "",
                  "| memory (MiB, peak resident) | AllenNLP | hf_elmo | ratio |", "|---|---|---|---|",
                  f"| after imports | {memory['allennlp']['imported']:.0f} | {memory['hf_elmo']['imported']:.0f} | |",
                  f"| after loading the checkpoint | {memory['allennlp']['load_peak']:.0f} | {memory['hf_elmo']['load_peak']:.0f} | {memory['load_ratio']:.2f}x |",
                  f"| while running | {memory['allennlp']['run_peak']:.0f} | {memory['hf_elmo']['run_peak']:.0f} | {memory['run_ratio']:.2f}x |",
                  "", "hf_elmo's weights are memory-mapped from `model.safetensors`: they become resident (as file-backed, "
                  "shared pages) when first used, so they count in the running peak, not in the loading one.", "",
                  "Largest |difference| between the two libraries' outputs, per layer (token layer, biLSTM layers):", ""]
        for key, values in result["agreement"].items():
            lines.append(f"- {key}: " + ", ".join(f"{v:.2g}" for v in values))
        lines += ["", "Opt-in modes (off by default; the caches warm and the mode's copies of the weights made, by running "
                  "the case once in the mode before timing it; each run alternating with an exact one, the speed-up "
                  "the median of the three pairs' ratios; deviation: largest |difference| from the exact outputs per "
                  "layer, token layer first):", "",
                  "| mode | case | seconds | speed-up over exact | largest |difference| per layer |", "|---|---|---|---|---|"]
        for mode, values in result["approximations"].items():
            if "not_offered" in values:
                lines.append(f"| {mode} | | | not offered: {values['not_offered']} | |")
                continue
            case = "32 sentences" if values["case"] == "batch" else "1 sentence at a time"
            lines.append(f"| {values['mode']} | {case} | {values['seconds']:.2f} | {values['speedup']:.2f}x | "
                         + ", ".join(f"{v:.2g}" for v in values["deviation"]) + " |")
        lines += ["", "Kernels measured fastest in this run (`hf_elmo/fast_linear.py`), per product (weight out x in, "
                  "+b with a bias) and rows class:", ""]
        for label, among in (("exact float32", "blas"), ("bf16 mode", "onednn_bfloat16")):
            chosen = {}
            for entry in sorted(result["kernels"], key=lambda e: (e["weight"], e["bias"], e["rows"])):
                if among in entry["candidates"]:
                    product = f"{entry['weight'][0]}x{entry['weight'][1]}{'+b' if entry['bias'] else ''}"
                    chosen.setdefault(entry["kernel"], {}).setdefault(product, []).append(str(entry["rows"]))
            if chosen:
                lines.append(f"- {label}: " + "; ".join(
                    f"{kernel} for " + ", ".join(f"{product} at {'/'.join(rows)}" for product, rows in products.items())
                    for kernel, products in chosen.items()))
        lines.append("")
        worst = max(max(v) for v in result["agreement"].values())
        if name == "original":
            targets += [
                ("original, 32 sentences, cold: >= 3x AllenNLP", f"{summary['batch']['ratio_cold']:.2f}x", summary["batch"]["ratio_cold"] >= 3),
                ("original, 32 sentences, cache warm: >= 4x", f"{summary['batch']['ratio_warm']:.2f}x", summary["batch"]["ratio_warm"] >= 4),
                ("original, biLSTM part >= 70% of the FLOP ceiling", f"{summary['batch']['hf-warm']['lstm_flop_fraction']:.0%}",
                 summary["batch"]["hf-warm"]["lstm_flop_fraction"] >= 0.7),
                ("original, 1 sentence: >= 1.8x AllenNLP", f"{summary['single']['ratio_cold']:.2f}x ({share['hf-cold']})",
                 summary["single"]["ratio_cold"] >= 1.8),
                ("original, peak RSS of loading <= 0.75x AllenNLP", f"{memory['load_ratio']:.2f}x", memory["load_ratio"] <= 0.75),
            ]
        if name == "small":
            targets.append(("small, 32 sentences, cache warm: >= 5x", f"{summary['batch']['ratio_warm']:.2f}x",
                            summary["batch"]["ratio_warm"] >= 5))
        targets.append((f"{name}: every layer within 1e-5 of AllenNLP", f"{worst:.2g}", worst <= 1e-5))
    if extra is not None:
        lines += extra[0]
        targets += extra[1]
    busiest = max(setup["load_during"] + [setup["load_average_start"][0], setup["load_average_end"][0]])
    if busiest > setup["threads"] + 0.5:
        lines[lines.index("### Settings"):lines.index("### Settings")] = [
            f"**Warning: the machine was busy during this run** (1-minute load average up to {busiest:.1f} with "
            f"{setup['threads']} threads benchmarked on {os.cpu_count()} CPUs): other processes competed for the "
            "cores, so the timings, ratios and fractions below are noisy and not representative. Re-run "
            "`make bench` on a quiet machine.", ""]
    lines[lines.index("### Settings"):lines.index("### Settings")] = [
        "### Targets", "", "| target | measured | met |", "|---|---|---|",
        *[f"| {t} | {m} | {'yes' if ok else '**no**'} |" for t, m, ok in targets], ""]
    lines += ["### Approximate modes on a trained model", "",
              "Random weights rarely drive the cell to its clips, so the deviations above flatter `nn_lstm`. On the "
              "trained tiny fixture model (`../shared/fixtures/allennlp-elmo`, its 30 sentences in one batch), the "
              "largest |difference| from the exact model per layer:", ""]
    for kind, values in setup["fixture_deviations"].items():
        lines.append(f"- {kind}: " + ", ".join(f"{v:.2g}" for v in values))
    return "\n".join(lines).rstrip() + "\n"


def section_heading(cpu: dict) -> str:
    """The heading of a CPU kind's section of RESULTS.md: the model name, vendor, family and model numbers tell the
    kinds apart ("AMD EPYC" is several generations)."""
    return f"## CPU: {cpu_kind(cpu)}"


def other_cpu_sections(previous: str, heading: str) -> list[str]:
    """The sections of a results file (`previous`, as it was) for every CPU kind but `heading`'s: each a
    "## CPU: " line and what follows it up to the next "## " line, in their order. A heading without family and
    model numbers (as runs wrote them before they were recorded) is of the kind whose name and vendor it gives."""
    this_kind = {heading, re.sub(r", family [^,]*, model [^)]*\)$", ")", heading)}
    return [text.rstrip() for other, text in markdown_sections(previous)
            if other is not None and other.startswith("## CPU: ") and other not in this_kind]


def one_section_per_cpu(title: str, about: str, section: str, previous: str) -> list[str]:
    """The lines of a results file kept by CPU kind: `title`, `about`, `section` (this run's CPU kind) first, then
    every other CPU kind's section kept from `previous` (the file as it was)."""
    lines = [title, "", about, "", section.rstrip(), ""]
    for other in other_cpu_sections(previous, section.split("\n", 1)[0]):
        lines += [other, ""]
    return lines


def assemble(previous: str, section: str, gpu_results: Path) -> str:
    """RESULTS.md: one section per CPU kind (`one_section_per_cpu`), then the GPU results."""
    lines = one_section_per_cpu(
        "# hf_elmo against AllenNLP 2.10.1: CPU benchmark",
        "Written by `make bench` (`benchmarks/run.py`): one section per kind of CPU it has run on, each from one run "
        "of it (a run replaces the section of its own CPU kind and keeps the others), the latest first. The targets "
        "are the same on every kind; the README quotes each section.", section, previous)
    lines += ["## GPU", "",
              "`benchmarks/gpu.sh` measures the GPU path on a CUDA machine with torch installed and no network, "
              "and runs the checks that need a GPU. This machine has no GPU; the last run of `gpu.sh` on one wrote "
              "`benchmarks/GPU_RESULTS.md`:", ""]
    if gpu_results.is_file():
        lines += ["> " + line if line else ">" for line in gpu_results.read_text(encoding="utf-8").strip().splitlines()]
    else:
        lines.append("(no such file: `gpu.sh` has not been run yet)")
    return "\n".join(lines) + "\n"


def benchmark_parser(description: str) -> argparse.ArgumentParser:
    """The options every benchmark against AllenNLP takes: its interpreter and the thread count."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--allennlp-python", default=str(ROOT / "build" / "allennlp-venv" / "bin" / "python"),
                        help="interpreter of the venv made by ../shared/tools/peer-allennlp-setup.sh")
    parser.add_argument("--threads", type=at_least(1), default=2)
    return parser


def main(argv=None) -> int:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rounds", type=at_least(1), default=9)
    parser.add_argument("--sizes", default="original,small,elmoformanylangs",
                        help="original and small (one at least), each against AllenNLP; elmoformanylangs: against "
                        "ELMoForManyLangs at its released size (elmoformanylangs_bench.py)")
    parser.add_argument("--elmoformanylangs-python", default=str(ROOT / "build" / "elmoformanylangs-venv" / "bin" / "python"),
                        help="interpreter of the venv made by ../shared/tools/peer-elmoformanylangs-setup.sh")
    parser.add_argument("--work-dir", default=str(ROOT / "build" / "bench"))
    parser.add_argument("--output", default=str(Path(__file__).parent / "RESULTS.md"))
    args = parser.parse_args(argv)
    # (each section holds the AllenNLP comparison of at least one size)
    sizes = size_names(parser, args.sizes, [size.name for size in SIZES], others=("elmoformanylangs",))
    # Workers run inside benchmarks/; abspath, not resolve: a venv's python is a symlink that must stay one.
    args.allennlp_python = os.path.abspath(args.allennlp_python)
    args.work_dir, args.output = os.path.abspath(args.work_dir), os.path.abspath(args.output)
    problem = interpreter_problem(args.allennlp_python, "AllenNLP", "make bench does")
    if not problem and "elmoformanylangs" in sizes:  # (else after every round)
        problem = interpreter_problem(args.elmoformanylangs_python, "ELMoForManyLangs", "make bench does")
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    # (both written only at the end, after every round: a path that cannot take them failed with a traceback then)
    check_output(parser, "--work-dir", args.work_dir, "folder", writes_inside=True)
    check_output(parser, "--output", args.output, "file")
    start = time.time()
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
    os.environ.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    setup = settings(args.threads, args.allennlp_python)
    setup["started"] = start
    inputs_file = work / "inputs.json"
    inputs = make_inputs(inputs_file)
    results, summaries = {}, {}
    for size in SIZES:
        if size.name in sizes:
            results[size.name] = bench_size(size, args, inputs_file, work, env)
            summaries[size.name] = summarise(results[size.name], inputs)
    extra = None
    if "elmoformanylangs" in sizes:
        import elmoformanylangs_bench

        manylangs = elmoformanylangs_bench.run(os.path.abspath(args.elmoformanylangs_python), args.threads, args.rounds,
                                               inputs_file, work, env, Worker, median, max_difference)
        extra = elmoformanylangs_bench.render(manylangs)
    setup["fixture_deviations"] = fixture_deviations(work)
    first = next(iter(results.values()))
    setup.update(rounds=args.rounds, load_average_end=os.getloadavg(),
                 load_during=[v for r in results.values() for v in r["load_average_during"]],
                 versions={"hf_elmo": first["load"]["hf_elmo"]["versions"], "allennlp": first["load"]["allennlp"]["versions"]})
    section = render(results, summaries, setup, time.time() - start, inputs, extra)
    output = Path(args.output)
    previous = output.read_text(encoding="utf-8") if output.is_file() else ""
    report = assemble(previous, section, Path(__file__).parent / "GPU_RESULTS.md")
    write_text_atomically(output, report)
    raw = {name: {k: v for k, v in r.items() if k != "config_obj"} for name, r in results.items()}
    (work / "results.json").write_text(json.dumps({"setup": setup, "results": raw, "summaries": summaries}, indent=1))
    print("\n" + section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
