"""`x W^T + b` on CPU for a weight that inference multiplies many times, by the kernel measured fastest.

PyTorch offers several kernels for one float32 product on CPU, and which one is fastest depends on the CPU
(its vendor, its vector extensions, its caches), on the weight's shape and on the number of rows:
* `"mkl_packed"`: MKL with the weight packed once for its GEMM kernels (`cblas_sgemm_pack`, as
  `torch.ops.mkl._mkl_linear` uses it); on an Intel Xeon with AVX-512 the fastest at every row count;
* `"onednn"`: oneDNN with the weight reordered once into its blocked layout; on an AMD EPYC about twice
  as fast as plain BLAS for a few rows;
* `"blas"`: the plain BLAS call on the weight as it is (no copy), the best choice for small weights.
None is hard-coded. The first multiply of each weight shape, number of rows (in powers of two, up to 256)
and thread count times the candidates on its real inputs, and the fastest serves every later multiply of
that kind, for every weight of that shape. A candidate later in the order above is taken only where it is
faster by more than MARGIN, so that timing noise rarely flips a choice. The choices are kept in a file shared
by the processes that read it (`kernel_choices_path`, measured under a file lock: by default in the user's cache
folder), so that every run with that file takes the same kernels and gives the same numbers, bit for bit (a
resumed `hf-elmo embed` relies on it; a run with another file measures again, and may round otherwise); delete
the file to measure again. Each weight keeps the prepared copy of the kernels it uses only. All of
them compute the exact float32 product (they differ in the order of additions, as any two BLAS calls do).
The opt-in "bf16" mode (`approximate.py`) chooses the same way between `onednn_bfloat16` and the exact
product.
"""

import contextlib
import json
import os
import platform
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

from .files import write_text_atomically

try:
    import fcntl
except ImportError:  # (Windows) choices are then kept for the process only
    fcntl = None

# Rows per multiply, in classes of powers of two; from 256 rows on, one class (timed on 256 of them).
MAX_ROWS_CLASS = 256
# Timed calls per candidate (after one untimed call), interleaved, the fastest single call counting: at least
# MIN_TIMED_CALLS, more for quick multiplies, up to about MEASURE_SECONDS of calls per candidate.
MIN_TIMED_CALLS, MAX_TIMED_CALLS, MEASURE_SECONDS = 2, 10, 0.01
# A kernel later in the order of preference is chosen only where it is faster by more than this fraction.
MARGIN = 0.1
# (candidates, weight shape, bias or not, threads, rows class) -> the name of the fastest kernel, in this process.
_FASTEST: dict[tuple, str] = {}


def kernel_choices_path() -> Path:
    """The file of this machine's kernel choices: $HF_ELMO_KERNEL_CHOICES, else hf_elmo/kernels.json in the
    user's cache folder ($XDG_CACHE_HOME or ~/.cache)."""
    if os.environ.get("HF_ELMO_KERNEL_CHOICES"):
        return Path(os.environ["HF_ELMO_KERNEL_CHOICES"])
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "hf_elmo" / "kernels.json"


def cpuinfo() -> dict[str, str]:
    """The fields of the first CPU in /proc/cpuinfo ("model name", "cpu family", "model", "flags", ...); empty
    where there is no such file."""
    fields = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as lines:
            for line in lines:
                key, _, value = line.partition(":")
                if not key.strip():  # the blank line that ends the first CPU's entry
                    break
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_name() -> str:
    """The CPU's model name with its family and model numbers, which tell apart kinds that share a name ("AMD EPYC"
    is several generations): "AMD EPYC (family 23, model 49)"; without /proc/cpuinfo, what `platform` knows."""
    fields = cpuinfo()
    name = fields.get("model name") or platform.processor() or platform.machine() or "unknown"
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


def _this_machine() -> str:
    """What the file's choices hold for: this CPU and this build of PyTorch."""
    return f"{cpu_name()}; torch {torch.__version__}"


# The choices while this process holds the file's lock: a measurement that starts inside another (a kernel that
# runs FastLinear products itself) uses them, since a second lock of the same file by one process waits forever.
_HELD: dict | None = None


# One thread of this process at a time (the file's lock keeps other processes out); re-entrant, as _HELD is.
_CHOICES_LOCK = threading.RLock()


@contextlib.contextmanager
def _shared_choices():
    """This machine's stored choices {key: kernel}, under an exclusive lock; changes are written back
    (atomically). Where the file cannot be used, an empty dict that stays in memory."""
    with _CHOICES_LOCK, _choices_file() as choices:
        yield choices


@contextlib.contextmanager
def _choices_file():
    global _HELD
    if _HELD is not None:
        yield _HELD
        return
    path = kernel_choices_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.with_name(path.name + ".lock"), "a")
    except OSError:
        yield {}
        return
    with lock:
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(stored, dict):
                stored = {}
        except (OSError, ValueError):
            stored = {}
        machine = _this_machine()
        mine = stored.get(machine)  # (anything but a dict there, such as null, counts as no choices yet)
        choices = _HELD = dict(mine) if isinstance(mine, dict) else {}
        try:
            yield choices
        finally:
            _HELD = None
        if choices != mine:
            stored[machine] = choices
            with contextlib.suppress(OSError):  # (a folder in its place, a read-only place: they stay in memory)
                write_text_atomically(path, json.dumps(stored, indent=1, sort_keys=True))


def two_rows(product: Callable, x: torch.Tensor, *others: torch.Tensor) -> torch.Tensor:
    """`product(x, *others)` for row-wise products, with a single row computed as two identical ones.

    BLAS multiplies one row by a matrix-vector kernel whose rounding depends on the matrix's memory
    alignment, so a memory-mapped checkpoint (weights at odd offsets) and the same weights in fresh memory
    would differ in the last bit; two rows take the matrix-matrix kernel, which does not.
    """
    if x.shape[0] != 1:
        return product(x, *others)
    return product(x.expand(2, -1), *(o.expand(2, -1) for o in others))[:1]


def blas_linear(weight: torch.Tensor):
    """x [n, in] -> x W^T (+ bias) by the plain BLAS call on `weight` [out, in] as it is (any device)."""

    def run(x, bias=None):
        if bias is None:
            return two_rows(lambda rows: rows @ weight.t(), x)
        return two_rows(lambda rows: torch.addmm(bias, rows, weight.t()), x)

    return run


def exact_linear(weight: torch.Tensor):
    """x [n, in] -> x W^T (+ bias), exact: a float32 weight on CPU by the kernel measured fastest (`FastLinear`),
    any other by the plain BLAS call."""
    weight = weight.detach()
    if weight.device.type == "cpu" and weight.dtype == torch.float32:
        return FastLinear(weight)
    return blas_linear(weight)


def _mkl_packed(weight: torch.Tensor):
    # Packed for many rows: measured as fast for a few rows as a pack for those, unlike the reverse.
    packed = torch.ops.mkl._mkl_reorder_linear_weight(weight.contiguous(), MAX_ROWS_CLASS)

    def run(x, bias):  # (the last argument says the pack suits these rows, so MKL's packed GEMM runs)
        return torch.ops.mkl._mkl_linear(x.contiguous(), packed, weight, bias, x.shape[0])

    return run


def _onednn(weight: torch.Tensor):
    reordered = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous())

    def run(x, bias):
        return torch.ops.mkldnn._linear_pointwise(x, reordered, bias, "none", [], "")

    return run


def onednn_bfloat16(weight: torch.Tensor):
    """x [n, in] -> x W^T (+ bias) in bfloat16 by oneDNN (float32 accumulation, rounded to bfloat16), the weight
    stored in bfloat16 and reordered once. The result comes back in float32, as the exact candidates' does: the
    conversions both ways are part of what the choice between them measures."""
    run_bfloat16 = _onednn(weight.to(torch.bfloat16))

    def run(x, bias=None):
        return run_bfloat16(x.to(torch.bfloat16), None if bias is None else bias.to(torch.bfloat16)).float()

    return run


def float32_kernels() -> dict[str, Callable]:
    """The exact float32 candidates this build of PyTorch has, by name."""
    kernels = {}
    if torch.backends.mkl.is_available() and hasattr(torch.ops.mkl, "_mkl_linear"):
        kernels["mkl_packed"] = _mkl_packed
    if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        kernels["onednn"] = _onednn
    kernels["blas"] = blas_linear
    return kernels


def rows_class(rows: int) -> int:
    """1, 2, 4, ... MAX_ROWS_CLASS: the power of two at or above `rows`, at most MAX_ROWS_CLASS."""
    return min(1 << max(rows - 1, 0).bit_length(), MAX_ROWS_CLASS)


class FastLinear:
    """`x [n, in] -> x W^T (+ bias) [n, out]` for one CPU weight `W` [out, in] (float32), by the fastest
    kernel for its shape and `n` (see the module docstring). `kernels` (name -> preparation of the weight,
    in order of preference) defaults to every float32 candidate."""

    def __init__(self, weight: torch.Tensor, kernels: dict | None = None):
        self.weight = weight.detach()
        self.kernels = float32_kernels() if kernels is None else kernels
        self._key = (tuple(self.kernels), tuple(self.weight.shape))
        self._prepared: dict[str, Callable] = {}  # kernel name -> its run(x, bias)
        self._by_rows: dict[tuple, Callable] = {}  # (rows, bias or not, threads) -> run, found in _FASTEST before

    def __call__(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        local = (x.shape[0], bias is not None, torch.get_num_threads())
        run = self._by_rows.get(local)
        if run is None:
            key = self._key + (bias is not None, local[2], rows_class(x.shape[0]))
            if key not in _FASTEST:
                with _shared_choices() as choices:  # (another process may be measuring the same: one at a time)
                    stored = json.dumps([list(key[0]), *key[1:]])
                    # (a choice that is no kernel's name, of any type, from a damaged or hand-edited file: measured)
                    if not isinstance(choices.get(stored), str) or choices[stored] not in self.kernels:
                        choices[stored] = self._measure(x[:MAX_ROWS_CLASS], bias)
                    _FASTEST[key] = choices[stored]
            run = self._by_rows[local] = self._run(_FASTEST[key])
        return run(x, bias)

    def _run(self, name: str) -> Callable:
        if name not in self._prepared:
            self._prepared[name] = self.kernels[name](self.weight)
        return self._prepared[name]

    def _measure(self, x: torch.Tensor, bias: torch.Tensor | None) -> str:
        """The name of the candidate that computes `x W^T + bias` fastest, timed here and now: the first in
        order of preference that is within MARGIN of the fastest (so that timing noise rarely flips a choice)."""
        in_use = set(self._prepared)
        runs = {name: self._run(name) for name in self.kernels}
        best = {}
        for run in runs.values():
            run(x, bias)  # (first calls set kernels up)
        calls = 0
        while calls < MIN_TIMED_CALLS or (calls < MAX_TIMED_CALLS and calls * min(best.values()) < MEASURE_SECONDS):
            for name, run in runs.items():
                start = time.perf_counter()
                run(x, bias)
                best[name] = min(best.get(name, float("inf")), time.perf_counter() - start)
            calls += 1
        fastest = min(best.values())
        chosen = next(name for name in runs if best[name] <= (1 + MARGIN) * fastest)
        for name in runs:  # keep only the prepared weights of the kernels in use
            if name != chosen and name not in in_use:
                del self._prepared[name]
        return chosen
