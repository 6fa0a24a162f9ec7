"""The biLSTM layer's inference on a GPU without the time loop's launch overhead: CUDA graphs over bucketed
shapes.

The fast path of `fast_bilstm.py` issues a dozen small kernels per step, each launched from Python, and
synchronises with the host to pack rows by length; on a GPU the launches, not the arithmetic, then set the
pace (for 32 sentences of the original size, about 1/27 of an H200's float32 compute bound). Here a layer's
whole time loop is recorded once per shape as a CUDA graph and replayed as one launch:
* `static_bilstm_layer` is the loop at a fixed shape with no host synchronisation: every row runs every
  step, both directions in one batched multiply, and rows past their end are masked exactly as the plain
  path (`ElmoBiLstmLayer._plain_forward`) masks them; it is that computation, so it runs eagerly on CPU
  too, where the tests hold it to the plain path;
* a batch of B rows and S steps runs at the next bucketed shape (`bucket`: 3 significant bits, at most 25%
  more, typically 10%), so that each bucket is captured once; padded rows and steps are masked;
* exact float32 means no TF32: it is turned off, explicitly, while a graph is captured (cuBLAS fixes its
  kernels then) and while the rest of the model runs on the GPU (`exact_float32_matmul`);
* in the opt-in "bf16" mode the multiplies are bfloat16 (cuBLAS, float32 accumulation) and the rest float32.

`GraphedBiLstm(..., capture=False)` runs the same padded, static computation without a graph, on any device.
"""

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable

import torch

from .fast_bilstm import _cell, derived_weights, forget_biased

# Positions per input multiply inside the loop: bounds the input gates held at once ([2, rows, 4C]).
BLOCK_ROWS = 2048
# Graphs kept per layer and mode (the least recently used is dropped beyond).
MAX_GRAPHS = 16


# One CUDA graph capture at a time in the process, as PyTorch requires (threads may run two layers at once).
_CAPTURE_LOCK = threading.Lock()


def capture(run: Callable, pool=None) -> tuple["torch.cuda.CUDAGraph", object]:
    """`run()` recorded as a CUDA graph (in the memory pool `pool`), after two warm-up runs on a side stream (library
    handles, workspaces), as CUDA graphs require: the graph, and what `run` returned while it was recorded (the
    tensors that each replay writes)."""
    with _CAPTURE_LOCK:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # (thread_local: another thread that runs the model's other modules meanwhile, see README "Threads", may
        # allocate or synchronise without breaking this capture)
        with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
            outputs = run()
    return graph, outputs


def bucket(n: int) -> int:
    """`n` rounded up to 3 significant bits: 1-8, 10, 12, 14, 16, 20, 24, 28, 32, 40, ... (at most 25% more)."""
    step = 1 << max(n.bit_length() - 3, 0)
    return -(-n // step) * step


# The switch is the process's: the first block to open (in any thread) turns TF32 off and the last to close turns it
# back, so that no thread's block ends while another's still runs.
_OPEN_BLOCKS = 0
_TURN_BACK: Callable[[], None] | None = None
_BLOCKS_GUARD = threading.Lock()


@contextlib.contextmanager
def exact_float32_matmul():
    """float32 products without TF32 inside the block, restored after, whichever of PyTorch's two switches
    (`torch.set_float32_matmul_precision` or `torch.backends.cuda.matmul.fp32_precision`) the caller uses. The
    switch is the process's: while threads are inside blocks at once, it is restored when the last one leaves."""
    global _OPEN_BLOCKS, _TURN_BACK
    with _BLOCKS_GUARD:
        if _OPEN_BLOCKS == 0:
            _TURN_BACK = _turn_tf32_off()
        _OPEN_BLOCKS += 1
    try:
        yield
    finally:
        with _BLOCKS_GUARD:
            _OPEN_BLOCKS -= 1
            if _OPEN_BLOCKS == 0:
                _TURN_BACK()


def _turn_tf32_off() -> Callable[[], None]:
    """Turn TF32 off for float32 products through the switch the caller uses; returns what turns it back (nothing
    where it was off: a switch the caller never set stays unset)."""
    matmul = torch.backends.cuda.matmul
    try:
        previous = torch.get_float32_matmul_precision()
    except RuntimeError:  # the caller set the newer, per-backend switch: use it too (mixing them is an error)
        previous = matmul.fp32_precision
        if previous == "ieee":
            return lambda: None
        matmul.fp32_precision = "ieee"
        return lambda: setattr(matmul, "fp32_precision", previous)
    if previous == "highest":
        return lambda: None
    # (the legacy switch sets oneDNN's CPU one too: where the caller set cuBLAS's alone, `allow_tf32 = True`, the
    # CPU's is put back as it was, not left at TF32)
    cpu = getattr(getattr(torch.backends, "mkldnn", None), "matmul", None)
    cpu_previous = getattr(cpu, "fp32_precision", None)
    torch.set_float32_matmul_precision("highest")

    def turn_back() -> None:
        torch.set_float32_matmul_precision(previous)
        if cpu_previous is not None and cpu.fp32_precision != cpu_previous:
            cpu.fp32_precision = cpu_previous
    return turn_back


class StaticWeights:
    """A layer's weights as the static loop multiplies them, both directions at once (batched products):
    float32 views of the parameters (exact), or bfloat16 copies (`dtype=torch.bfloat16`, the "bf16" mode)."""

    def __init__(self, layer, dtype: torch.dtype = torch.float32):
        self.dtype = dtype
        self.bias = forget_biased(layer).unsqueeze(1)  # [2, 1, 4C], float32
        weights = [layer.input_weight, layer.recurrent_weight, layer.projection_weight]
        self.input, self.recurrent, self.projection = (
            None if w is None else w.detach().transpose(1, 2).to(dtype) for w in weights  # [2, in, out]
        )
        self.cell_clip, self.proj_clip = layer.cell_clip, layer.proj_clip

    def _product(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return torch.bmm(x.to(self.dtype), weight)

    def input_gates(self, x: torch.Tensor) -> torch.Tensor:
        """x [2, N, P] -> x W_in^T + bias [2, N, 4C], float32."""
        if self.dtype == torch.float32:
            return torch.baddbmm(self.bias, x, self.input)
        return torch.add(self.bias, self._product(x, self.input))

    def gates(self, h: torch.Tensor, input_gates: torch.Tensor) -> torch.Tensor:
        """h [2, B, P], input_gates [2, B, 4C] -> every gate's pre-activation [2, B, 4C], float32, a new tensor."""
        if self.dtype == torch.float32:
            return torch.baddbmm(input_gates, h, self.recurrent)
        return torch.add(input_gates, self._product(h, self.recurrent))

    def output(self, m: torch.Tensor) -> torch.Tensor:
        """The cell's output m [2, B, C] -> the step's output [2, B, P] (projected and clipped), float32."""
        if self.projection is None:
            return m
        h = self._product(m, self.projection).float()
        return h if self.proj_clip is None else h.clamp_(-self.proj_clip, self.proj_clip)


def static_bilstm_layer(
    weights: StaticWeights, inputs: torch.Tensor, step_mask: torch.Tensor, h: torch.Tensor, c: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The plain path's loop at a fixed shape: inputs [2, S, B, P] (time-major, the backward half reversed
    within each row), step_mask [S, B] bool, h [2, B, P], c [2, B, C] -> outputs [2, S, B, P] (0 at masked
    steps), the state after each row's last unmasked step (h, c). No host synchronisation, no data-dependent
    shape, nothing written to the inputs: what a CUDA graph can record."""
    directions, steps, batch, proj = inputs.shape
    block = max(BLOCK_ROWS // batch, 1)
    outputs = []
    for start in range(0, steps, block):
        stop = min(start + block, steps)
        input_gates = weights.input_gates(inputs[:, start:stop].reshape(directions, -1, proj))
        input_gates = input_gates.view(directions, stop - start, batch, -1)
        for t in range(start, stop):
            gates = weights.gates(h, input_gates[:, t - start])
            new_c = c.clone()
            new_h = weights.output(_cell(gates, new_c, weights.cell_clip))
            valid = step_mask[t].view(1, batch, 1)
            c = torch.where(valid, new_c, c)
            h = torch.where(valid, new_h, h)
            outputs.append(torch.where(valid, new_h, 0.0))
    return torch.stack(outputs, dim=1), h, c


class _Bucket:
    """The static buffers of one bucketed shape (and its graph once captured)."""

    def __init__(self, steps: int, batch: int, like: torch.Tensor, cell: int):
        directions, proj = like.shape[0], like.shape[-1]
        # Ordinary tensors even when made under torch.inference_mode (ElmoEmbedder's): a later call outside it, at
        # the same bucket, writes them in place, which an inference tensor refuses (and a graph keeps their address).
        with torch.inference_mode(False):
            self.inputs = like.new_zeros(directions, steps, batch, proj)
            self.step_mask = torch.zeros(steps, batch, dtype=torch.bool, device=like.device)
            self.h = like.new_zeros(directions, batch, proj)
            self.c = like.new_zeros(directions, batch, cell)
        self.graph = None
        self.results = None  # (outputs, h, c) of the last run, or the graph's static outputs


class GraphedBiLstm:
    """One layer's static loop at bucketed shapes, each recorded as a CUDA graph on first use and replayed
    (`capture=True`, CUDA only), or run eagerly at those shapes (`capture=False`, any device). Same contract
    as `ElmoBiLstmLayer.forward`: inputs [2, B, S, P], step_mask [B, S], h [2, B, P], c [2, B, C] ->
    outputs [2, B, S, P], final h, final c (new tensors)."""

    def __init__(self, layer, dtype: torch.dtype = torch.float32, capture: bool = True):
        if capture and layer.recurrent_weight.device.type != "cuda":
            raise ValueError(f"GraphedBiLstm(capture=True) records CUDA graphs, and the layer is on "
                             f"{layer.recurrent_weight.device}: move it to a GPU, or pass capture=False, which runs "
                             "the same computation without graphs on any device")
        self.weights = StaticWeights(layer, dtype)
        self.cell = layer.recurrent_weight.shape[1] // 4
        self.capture = capture
        self.buckets: OrderedDict[tuple[int, int], _Bucket] = OrderedDict()
        self.pool = torch.cuda.graph_pool_handle() if capture else None

    def __call__(self, inputs: torch.Tensor, step_mask: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
        batch, steps = step_mask.shape
        entry = self._bucket(bucket(steps), bucket(batch), inputs)
        entry.inputs[:, :steps, :batch] = inputs.transpose(1, 2)
        entry.step_mask.zero_()
        entry.step_mask[:steps, :batch] = step_mask.t()
        entry.h[:, :batch], entry.c[:, :batch] = h, c
        with exact_float32_matmul():
            if not self.capture:
                entry.results = static_bilstm_layer(self.weights, entry.inputs, entry.step_mask, entry.h, entry.c)
            elif entry.graph is None:
                self._record(entry)
            else:
                entry.graph.replay()
        outputs, final_h, final_c = entry.results
        # Copies: the next run at this bucket overwrites its buffers (a transpose of one row is contiguous already,
        # so .contiguous() alone would hand them out).
        return (outputs[:, :steps, :batch].transpose(1, 2).clone(memory_format=torch.contiguous_format),
                final_h[:, :batch].clone(), final_c[:, :batch].clone())

    def _bucket(self, steps: int, batch: int, like: torch.Tensor) -> _Bucket:
        key = (steps, batch)
        if key in self.buckets:
            self.buckets.move_to_end(key)
        else:
            if len(self.buckets) >= MAX_GRAPHS:
                self.buckets.popitem(last=False)
            self.buckets[key] = _Bucket(steps, batch, like, self.cell)
        return self.buckets[key]

    def _record(self, entry: _Bucket) -> None:
        """Capture the static loop on `entry`'s buffers (after warm-up runs on a side stream, as CUDA graphs
        require), and replay it once for the current inputs."""
        arguments = (self.weights, entry.inputs, entry.step_mask, entry.h, entry.c)
        graph, results = capture(lambda: static_bilstm_layer(*arguments), self.pool)
        # Kept only once captured: a capture that raised (out of memory, say) leaves the bucket to record again at
        # its next call, not to replay a graph that holds nothing.
        entry.graph, entry.results = graph, results
        graph.replay()


# The `derived_weights` kind of a layer's graphed loop, per multiply dtype (the bf16 mode drops its own on leaving).
GRAPHS_KIND = {torch.float32: "cuda_graphs", torch.bfloat16: "cuda_graphs_bf16"}


def runs_graphed(layer, inputs: torch.Tensor) -> bool:
    """Whether the exact inference path of `layer` runs here (float32 weights, CUDA inputs): it masks any pattern of
    steps, so the caller need not read the mask from the device to check that every row starts at step 0."""
    return inputs.is_cuda and layer.recurrent_weight.dtype == torch.float32


def graphed_bilstm_layer(layer, inputs, step_mask, h, c, dtype: torch.dtype = torch.float32):
    """`ElmoBiLstmLayer.forward` on a GPU through the layer's CUDA graphs (kept beside the layer, rebuilt
    when a weight changes): exact float32, or bfloat16 multiplies with `dtype=torch.bfloat16`."""
    runner = derived_weights(layer, GRAPHS_KIND[dtype], lambda layer: GraphedBiLstm(layer, dtype))
    return runner(inputs.float(), step_mask, h.float(), c.float())
