"""What the benchmark scripts share: the JSON-lines channel to the driver, memory readings, timing, the CPU's caches
and its memory bandwidth, the sections of a results file, the checks of their options before any work.

Imported by `run.py` (and through it `train_bench.py`), `gpu_train_bench.py`, `hf_worker.py` and
`hf_train_worker.py` (the project's venv), `allennlp_worker.py`,
`allennlp_train_worker.py` and `elmoformanylangs_worker.py` (the peers' own venvs), so it uses only the standard
library (and torch and numpy, which every venv has, where named; hf_elmo in `check_output`, which only the project's
venv calls).
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path


# The peak resident memory before the last `outside_the_peak` measurement (NaN where its reset failed).
_PEAK_ASIDE = 0.0


def memory_mb() -> dict[str, float]:
    """Resident memory of this process from /proc: now (rss) and the peak so far (peak), in MiB; the peak leaves out
    what `outside_the_peak` measurements allocated."""
    fields = {"VmRSS": "rss", "VmHWM": "peak", "RssAnon": "anonymous", "RssFile": "file_backed"}
    found = {}
    with open("/proc/self/status") as status:
        for line in status:
            key = line.split(":", 1)[0]
            if key in fields:
                found[fields[key]] = int(line.split()[1]) / 1024
    found["peak"] = math.nan if math.isnan(_PEAK_ASIDE) else max(found["peak"], _PEAK_ASIDE)
    return found


def outside_the_peak(measure: Callable[[], dict]) -> dict:
    """`measure()`, a measurement of the machine whose buffers must not count in the library's peak memory (the
    bandwidth probe's 512 MiB: the worker that runs it showed a running peak 600 MiB above its peer's, which runs
    none). The peak so far is kept aside and the kernel's peak counter reset after it (`/proc/self/clear_refs`);
    where that cannot be written, the peak reads NaN from then on rather than a figure that holds the probe."""
    global _PEAK_ASIDE
    aside = memory_mb()["peak"]
    try:
        return measure()
    finally:
        try:
            with open("/proc/self/clear_refs", "w") as clear_refs:
                clear_refs.write("5")  # (Linux: the peak resident set becomes the current one)
            _PEAK_ASIDE = max(_PEAK_ASIDE, aside)
        except OSError:
            _PEAK_ASIDE = math.nan


def cpu0_caches() -> dict[str, str]:
    """CPU 0's data and unified caches by level, sizes as sysfs writes them: {"L1": "48K", "L2": "1024K", ...}."""
    caches = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind = (index / "level").read_text().strip(), (index / "type").read_text().strip()
            if kind != "Instruction":
                caches[f"L{level}"] = (index / "size").read_text().strip()
        except OSError:
            continue
    return caches


def last_level_cache(caches: dict[str, str]) -> tuple[str, int] | None:
    """The last level of `caches` (`cpu0_caches()`, or a results file's record of them): its name and size in bytes,
    ("L3", 33554432); None where none is recorded."""
    if not caches:
        return None
    level = max(caches, key=lambda name: int(name[1:]))
    size, units = caches[level], {"K": 2**10, "M": 2**20, "G": 2**30}
    return level, int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)


def bandwidth_buffer_bytes(caches: dict[str, str]) -> int:
    """The buffer the memory bandwidth is read from: 8 times the last level of `caches`, at least 512 MiB, so that
    what of it the cache keeps from one read to the next adds a few percent (on an AMD EPYC Zen 5 with a 32 MiB L3,
    2 threads: 5 times the L3 reads 11% faster than 16 times; the Intel Xeon here has a 260 MiB L3)."""
    last = last_level_cache(caches)
    return max(512 * 2**20, 8 * (last[1] if last else 0))


def memory_bandwidth(seconds: float = 1.0) -> dict:
    """The machine's memory bandwidth now, on torch's threads: the best read of a `bandwidth_buffer_bytes()` buffer
    by `torch.amax`, which torch spreads over its threads. (A vector times a 256 MiB matrix, `make bench`'s probe
    before, is no faster on 2 threads than on 1 in MKL: on an AMD EPYC Zen 5, 28 GB/s where 2 threads read at 45 to
    65, so one sentence seemed to read its weights at 151% of it.)"""
    import torch

    buffer = torch.ones(bandwidth_buffer_bytes(cpu0_caches()) // 4)
    torch.amax(buffer)
    best, start = float("inf"), time.perf_counter()
    while time.perf_counter() - start < seconds:
        best = min(best, timed(lambda: torch.amax(buffer))[0])
    return {"bandwidth_gbs": buffer.numel() * 4 / best / 1e9, "bandwidth_buffer_mib": buffer.numel() * 4 / 2**20}


def markdown_sections(text: str) -> list[tuple[str | None, str]]:
    """`text` (a results file) cut before each "## " line: (None, what precedes the first), then for each section
    (its heading line, the section: that line and every line up to the next "## " line). Joined, they are `text`."""
    sections: list[tuple[str | None, list[str]]] = [(None, [])]
    for line in text.splitlines(keepends=True):
        if line.startswith("## "):
            sections.append((line.splitlines()[0], []))
        sections[-1][1].append(line)
    return [(heading, "".join(lines)) for heading, lines in sections]


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least `minimum` (a count of rounds, runs or threads; 0 rounds crashed
    at the end, in the median of nothing, after the whole benchmark had run)."""

    def whole_number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return whole_number


def check_output(parser: argparse.ArgumentParser, option: str, path, kind: str, writes_inside: bool = False) -> None:
    """Refuse, as the parser's error naming `option`, a `path` where a `kind` ("file" or "folder") cannot be written
    (`hf_elmo.files.check_output_location`; `writes_inside`: an existing folder is written into), before any work: an
    output under a file, or a folder given for a file, failed with a traceback once the benchmark had run."""
    from hf_elmo.files import check_output_location  # (here: the peers' venvs import this file without hf_elmo)

    try:
        check_output_location(path, kind, writes_inside=writes_inside)
    except ValueError as error:
        parser.error(f"{option}: {error}")


def interpreter_problem(path, library: str, made_by: str) -> str | None:
    """Why `path` cannot run as the Python of `library`'s venv ("AllenNLP", "ELMoForManyLangs": the peers'), with how
    to make it (`made_by`: what makes it too, "make bench does"); None where it runs. A file that is no program (not
    executable, or of no format the system runs) failed with "Exec format error" once the models were made: it is
    tried here (`python -c pass`, a few milliseconds)."""
    if not Path(path).is_file():
        problem = f"no {library} interpreter at {path}"
    elif not os.access(path, os.X_OK):
        problem = f"{path}: not executable, so no {library} interpreter"
    else:
        try:
            result = subprocess.run([path, "-c", "pass"], capture_output=True, timeout=120)
        except OSError as failure:
            problem = f"{path}: cannot be run ({failure.strerror}), so no {library} interpreter"
        except subprocess.TimeoutExpired:
            problem = f"{path} -c pass: still running after 120 s, so no {library} interpreter"
        else:
            if result.returncode == 0:
                return None
            problem = f"{path} -c pass: exit status {result.returncode}, so no working {library} interpreter"
    name = library.lower()
    return f"{problem}; run `bash ../shared/tools/peer-{name}-setup.sh build/{name}-venv` ({made_by})"


def whole_numbers(text: str) -> list[int]:
    """An argparse type: comma-separated whole numbers, each at least 1 ("32,256": batch sizes; one that is not
    failed inside the measurement, a failed check in the report)."""
    return [at_least(1)(item) for item in text.split(",")]


def torch_device(text: str):
    """An argparse type: a torch.device of the CPU or CUDA ("cpu", "cuda", "cuda:1"; another name was torch's
    RuntimeError, a traceback)."""
    import torch

    try:
        device = torch.device(text)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"takes cpu, cuda or cuda:N, got {text!r}")
    return device


def size_names(parser: argparse.ArgumentParser, text: str, known: list[str], others: tuple[str, ...] = ()) -> list[str]:
    """The sizes that `--sizes` names (comma-separated): each one of `known` or `others`, one of `known` at least (an
    unknown name ran nothing, then failed at the end); anything else is the parser's error, naming what it takes."""
    names = text.split(",")
    if not set(names) <= {*known, *others} or not set(names) & set(known):
        also = f" (one at least) and {', '.join(others)}" if others else ""
        parser.error(f"--sizes takes {', '.join(known)}{also}, got {text!r}")
    return names


def timed(function) -> tuple[float, object]:
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


class Channel:
    """Requests arrive as JSON lines on stdin; replies leave on the original stdout, one JSON line each.

    Everything else the libraries print goes to stderr, so it can never be mistaken for a reply.
    """

    def __init__(self):
        self._replies = os.fdopen(os.dup(1), "w", buffering=1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr

    def send(self, reply: dict) -> None:
        self._replies.write(json.dumps(reply) + "\n")

    def serve(self, handlers: dict) -> None:
        for line in sys.stdin:
            request = json.loads(line)
            if request["cmd"] == "quit":
                self.send({"memory": memory_mb()})
                return
            try:
                reply = handlers[request["cmd"]](**request.get("args", {}))
            except Exception:  # report it to the driver, which stops the benchmark with this traceback
                reply = {"error": traceback.format_exc()}
            self.send(reply)


def step_reply(seconds: float, loss: float, windows: list, char_embedding_grad) -> dict:
    """What a training-step worker sends back: its time, loss, word count, memory and the character embedding's
    gradient (a tensor, sent as nested lists), for `train_bench.py` to compare the libraries."""
    return {"seconds": seconds, "loss": loss, "words": sum(len(window) for window in windows), "memory": memory_mb(),
            "char_embedding_grad": char_embedding_grad.tolist()}


def run_batches(embed, batches: list, layers_of, save: str | None = None) -> dict:
    """Time `embed(batch)` over `batches` (without autograd); `layers_of(batch, output)` gives each sentence's layers,
    which `save` (a .npz path) keeps as `b{batch}_r{row}_l{layer}`."""
    import torch

    with torch.no_grad():
        seconds, outputs = timed(lambda: [embed(batch) for batch in batches])
    if save:
        import numpy as np

        arrays = {}
        for b, (batch, output) in enumerate(zip(batches, outputs)):
            for row, layers in enumerate(layers_of(batch, output)):
                for layer, values in enumerate(layers):
                    arrays[f"b{b}_r{row}_l{layer}"] = values
        np.savez(save, **arrays)
    words = sum(len(sentence) for batch in batches for sentence in batch)
    return {"seconds": seconds, "words": words, "memory": memory_mb()}


def load_inputs(path: str) -> dict[str, list[list[list[str]]]]:
    """The driver's inputs: {"batch": [[32 sentences]], "single": [[sentence], ...]}, words pre-split."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)
