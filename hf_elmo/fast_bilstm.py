"""The biLSTM layer's fast inference path: the computation of `ElmoBiLstmLayer._plain_forward`, reorganised.

What changes is the order and grouping of work, not what a cell computes:
* rows are sorted by length and packed time-major (`pack_padded_sequence`), so step t multiplies only the
  rows still running and no padded position is ever computed;
* the input half of every gate takes a few large multiplies (blocks of whole steps), with the forget gate's
  run-time bias (bilm-tf's +1.0) folded into the bias; on CPU, in the first layer, whose inputs are token vectors, one multiply over
  the distinct rows instead: every occurrence of a word shares it, and both directions read the same words,
  so it multiplies at most half as many rows, and in eval mode the layer's `input_gate_cache` keeps them
  for the words of later batches (see `token_cache.py`); from a zero initial state (the default) the first
  step's recurrent multiply, exactly 0, is skipped;
* where every row starts alike (each sentence's <S> from the default zero state), the first step (its input
  multiply included), and the second step's recurrent multiply, are computed for one row that stands for all;
* the recurrent state is never copied: a row's previous output is its recurrent input, and its cell state
  is updated in place;
* on CPU in float32, each weight is multiplied by the kernel measured fastest for its shape and number of
  rows (`fast_linear.py`: MKL's packed weights, oneDNN's reordered ones or the plain BLAS call; prepared once,
  rebuilt when a weight changes); and tanh is computed through sigmoid (see `_cell`).

On a GPU, exact float32 layers go to `cuda_graphs.py` instead, which records the whole time loop per shape.

Results equal the plain path to float32 rounding: the tests hold them within 1e-6 (relative, for the cell
states near the clip). Gradients are not supported: the layer takes this path only when autograd and
autocast are off.
"""

import threading
import weakref

import torch
from torch.nn.utils.rnn import pack_padded_sequence

from .fast_linear import exact_linear
from .token_cache import ElmoTokenCache, weights_fingerprint

# Per (layer, kind): (fingerprint of the layer's weights, derived tensors). Kept outside the module so that
# state_dict, deepcopy and pickling never see them.
_DERIVED: "weakref.WeakKeyDictionary[torch.nn.Module, dict]" = weakref.WeakKeyDictionary()


def derived_weights(module, kind: str, build, parameters=None) -> object:
    """`build(module)`, computed once per module and kind and rebuilt whenever one of `parameters` (default:
    the biLSTM layer's weights) changes."""
    if parameters is None:
        parameters = (module.input_weight, module.recurrent_weight, module.bias, module.projection_weight)
    fingerprint = weights_fingerprint(parameters)
    per_module = _DERIVED.setdefault(module, {})
    cached = per_module.get(kind)
    if cached is None or cached[0] != fingerprint:
        with torch.no_grad():
            cached = per_module[kind] = (fingerprint, build(module))
    return cached[1]


# Per module: the lock that its inference path holds (see `inference_lock`); kept outside it as _DERIVED is.
_LOCKS: "weakref.WeakKeyDictionary[torch.nn.Module, threading.RLock]" = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def inference_lock(module) -> threading.RLock:
    """The lock that a call of `module`'s inference path holds. That path reads and fills what belongs to the module
    (its caches, its derived weights and their kernel choices), so threads that run one model at once (a server's
    workers) take turns on each module, the character encoder and every biLSTM layer, while a call in one module and
    another call in the next still run at the same time."""
    lock = _LOCKS.get(module)
    if lock is not None:
        return lock
    with _LOCKS_GUARD:  # (the first call for the module: one lock, whichever thread makes it)
        lock = _LOCKS.get(module)
        if lock is None:
            lock = _LOCKS[module] = threading.RLock()
        return lock


def built_derived_weights(module, kind: str) -> object | None:
    """What `derived_weights(module, kind, ...)` last built for `module`, or None; builds nothing."""
    cached = _DERIVED.get(module, {}).get(kind)
    return None if cached is None else cached[1]


def clear_derived_weights(module, kinds: tuple[str, ...] | None = None) -> None:
    """Drop the derived copies of the weights of `module` of these `kinds` (default: every one); they are rebuilt
    when next needed."""
    if kinds is None:
        _DERIVED.pop(module, None)
        return
    per_module = _DERIVED.get(module, {})
    for kind in kinds:
        per_module.pop(kind, None)


def forget_biased(layer) -> torch.Tensor:
    """The gate bias [2, 4C] with the run-time forget bias (bilm-tf's +1.0, `layer.forget_bias`) added to the
    forget block."""
    cell = layer.recurrent_weight.shape[1] // 4
    bias = layer.bias.detach().clone()
    bias[:, cell : 2 * cell] += layer.forget_bias
    return bias


# Positions per input multiply: large enough for an efficient multiply, small enough to stay in cache.
INPUT_BLOCK_ROWS = 256


class ExactMultiplies:
    """The three matrix multiplies of a cell, exact: on CPU in float32 each weight by the kernel measured
    fastest for it (`fast_linear.py`), elsewhere the plain BLAS call."""

    def __init__(self, layer):
        # Weakly: this object is the value of its layer's entry in _DERIVED, whose key a strong reference here would
        # keep alive, and with it every layer ever run (and its weights).
        self._layer = weakref.ref(layer)
        self.bias = forget_biased(layer)
        self._linears = {}

    @property
    def layer(self):
        return self._layer()

    def linear(self, kind: str, direction: int = 0):
        """x [n, in] -> x W^T (+ bias) for the weight `kind` of `direction`: "input", "recurrent", "projection",
        or "both_input" (both directions' input weights stacked, [8C, P])."""
        key = (kind, direction)
        if key not in self._linears:
            weight = self.weight(kind, direction)
            self._linears[key] = exact_linear(weight)
        return self._linears[key]

    def weight(self, kind: str, direction: int = 0) -> torch.Tensor:
        """The layer's weight [out, in] that `linear(kind, direction)` multiplies by."""
        layer = self.layer
        if kind == "both_input":
            return layer.input_weight.detach().reshape(-1, layer.input_weight.shape[-1])
        return {"input": layer.input_weight, "recurrent": layer.recurrent_weight,
                "projection": layer.projection_weight}[kind][direction].detach()

    def input_gates(self, direction: int, x: torch.Tensor) -> torch.Tensor:
        """x [N, P] -> x W_in^T + bias (forget bias included) [N, 4C], a new tensor."""
        return self.linear("input", direction)(x, self.bias[direction])

    def both_input_gates(self, x: torch.Tensor) -> torch.Tensor:
        """x [N, P] -> the input gates of both directions [N, 2, 4C], in one multiply (the first layer's inputs
        are read by both directions)."""
        return self.linear("both_input")(x, self.bias.view(-1)).view(x.shape[0], 2, -1)

    def recurrent(self, direction: int, h: torch.Tensor) -> torch.Tensor:
        """h [n, P] -> h W_rec^T [n, 4C], a new tensor."""
        return self.linear("recurrent", direction)(h)

    def gates(self, direction: int, h: torch.Tensor | None, input_gates: torch.Tensor) -> torch.Tensor:
        """h [n, P] (None: all zeros), input_gates [n, 4C] -> every gate's pre-activation [n, 4C], a new tensor."""
        if h is None:  # 0 W_rec^T is exactly 0
            return input_gates.clone()
        return self.recurrent(direction, h).add_(input_gates)

    def projection(self, direction: int, m: torch.Tensor) -> torch.Tensor:
        """m [n, C] -> m W_proj^T [n, P], a new tensor."""
        return self.linear("projection", direction)(m)


def _cell(gates: torch.Tensor, c: torch.Tensor, cell_clip: float | None) -> torch.Tensor:
    """In place on `gates` [..., 4C] (forget bias included) and `c` [..., C]; returns o * tanh(c) [..., C].

    Both tanh are computed through sigmoid, tanh(x) = 1 - 2 sigmoid(-2x) (within about 1e-7 of `torch.tanh`),
    so that one sigmoid covers all four gates and the products fold into `addcmul`: 9 operations a step
    instead of 13. On CPU `torch.tanh` is also MKL's vector tanh, several times slower than ATen's sigmoid and
    split across threads from 2048 elements on, so that a busy machine stalls every call for a scheduler tick.
    """
    input_gate, forget_gate, cell_input, output_gate = gates.split(c.shape[-1], dim=-1)
    cell_input.mul_(-2.0)
    torch.sigmoid_(gates)
    torch.addcmul(input_gate, input_gate, cell_input, value=-2.0, out=cell_input)  # i * tanh(g)
    c.mul_(forget_gate).add_(cell_input)
    if cell_clip is not None:
        c.clamp_(-cell_clip, cell_clip)
    torch.sigmoid_(torch.mul(c, -2.0, out=cell_input))
    return torch.addcmul(output_gate, output_gate, cell_input, value=-2.0)  # o * tanh(c)


def _step_output(multiplies, layer, direction: int, gates: torch.Tensor, c: torch.Tensor, out: torch.Tensor) -> None:
    """One step's output into `out` [n, P] from its gates [n, 4C] (consumed), updating the cell state `c`
    [n, C] in place."""
    h = _cell(gates, c, layer.cell_clip)
    if layer.projection_weight is not None:
        h = multiplies.projection(direction, h)
    if layer.proj_clip is None or layer.projection_weight is None:
        out.copy_(h)
    else:
        torch.clamp(h, -layer.proj_clip, layer.proj_clip, out=out)


def _rows_alike(x: torch.Tensor) -> bool:
    """Whether `x` [n, ...] has at least two rows, all equal to the first."""
    return x.shape[0] > 1 and bool((x == x[:1]).all())


def _blocked_step_inputs(multiplies, direction: int, data: torch.Tensor, batch_sizes: list[int]):
    """The input half of the gates [n, 4C] of each step of `direction`, from packed rows `data` [N, 2, P]:
    blocks of whole steps, one multiply each, so that multiplies are large.

    No block has more rows than the first (INPUT_BLOCK_ROWS, or one step where a step has more), and each is
    released before the next is computed (the caller must drop each step's rows before asking for the next):
    so the allocator hands the same memory back, and a block's result is written to pages already mapped, not
    to fresh ones (a page fault per 4 KiB, about 4 us each here: 25,000 of them in a warm batch before).
    """
    limit = max(INPUT_BLOCK_ROWS // batch_sizes[0], 1) * batch_sizes[0]  # the first block's rows
    blocks = []  # [first step, last step + 1, rows]
    for t, n in enumerate(batch_sizes):
        if not blocks or blocks[-1][2] + n > limit:
            blocks.append([t, t, 0])
        blocks[-1][1], blocks[-1][2] = t + 1, blocks[-1][2] + n
    offset = 0
    for first, last, block_rows in blocks:
        block = multiplies.input_gates(direction, data[offset : offset + block_rows, direction])
        for n in batch_sizes[first:last]:
            step, block = block[:n], block[n:]
            yield step
        del step, block
        offset += block_rows


def _gathered_step_inputs(table: torch.Tensor, index: torch.Tensor, direction: int, batch_sizes: list[int]):
    """As `_blocked_step_inputs`, gathered from a table of the input half of the gates of distinct rows, both
    directions, [M, 2, 4C]: packed row i's is `table[index[i, direction], direction]` (index [N, 2])."""
    table, index = table[:, direction], index[:, direction]
    workspace = table.new_empty(batch_sizes[0], table.shape[-1])
    for n in batch_sizes:
        yield torch.index_select(table, 0, index[:n], out=workspace[:n])
        index = index[n:]


def fast_bilstm_layer(
    layer, inputs: torch.Tensor, step_mask: torch.Tensor, h: torch.Tensor, c: torch.Tensor, multiplies=None,
    gate_cache: ElmoTokenCache | None = None, use_cache: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Same contract as `ElmoBiLstmLayer.forward`: inputs [2, B, S, P], step_mask [B, S] (a prefix of each
    row, at least one step), h [2, B, P], c [2, B, C] -> outputs [2, B, S, P] (0 past each row's end),
    final h, final c. `multiplies` defaults to `ExactMultiplies` of the layer. `gate_cache`, for the first
    layer, whose rows are token vectors (a word's every occurrence has the same row): the input half of the
    gates is computed once per distinct row, through this cache, which keeps them for later batches when
    `use_cache`."""
    if multiplies is None and inputs.is_cuda:
        from .cuda_graphs import graphed_bilstm_layer, runs_graphed  # (it builds on this module)

        if runs_graphed(layer, inputs):
            return graphed_bilstm_layer(layer, inputs, step_mask, h, c)
    if multiplies is None:
        multiplies = derived_weights(layer, "exact", ExactMultiplies)
    directions, batch, steps, proj = inputs.shape
    lengths = step_mask.sum(dim=1).cpu()

    # Time-major packing of both directions at once: rows sorted by length, step t holds batch_sizes[t] rows.
    packed = pack_padded_sequence(
        inputs.permute(1, 2, 0, 3).reshape(batch, steps, directions * proj), lengths, batch_first=True,
        enforce_sorted=False,
    )
    data = packed.data.view(-1, directions, proj)
    order, restore = packed.sorted_indices, packed.unsorted_indices
    batch_sizes = packed.batch_sizes.tolist()

    outputs = inputs.new_empty(directions, data.shape[0], proj)
    c = c.index_select(1, order.to(c.device)).contiguous()  # sorted; each step updates its first rows in place
    h = h.index_select(1, order.to(h.device))
    zero_start = not bool(h.any())  # the default, stateless start: the first recurrent multiply is 0
    if gate_cache is not None:  # both directions read the same words: their rows are looked up together
        table, index = gate_cache.lookup(
            multiplies.both_input_gates, data.reshape(-1, proj), [layer.input_weight, layer.bias], use_cache
        )
        index = index.view(-1, directions)
    for d in range(directions):
        previous, offset, first_step = (None if zero_start else h[d]), 0, 0
        cell_state, output = c[d], outputs[d]
        shared = None  # the output of a step at which every row was alike: one row standing for all
        if _rows_alike(data[: batch_sizes[0], d]) and _rows_alike(h[d]) and _rows_alike(c[d]):
            # Every row starts alike (as every sentence starts with <S> from the default zero state): the first
            # step, its input multiply included, is computed for one row, and so is the next step's recurrent one.
            n = batch_sizes[0]
            if gate_cache is None:
                step_input = multiplies.input_gates(d, data[:1, d])
            else:
                step_input = table[index[:1, d], d]
            gates = multiplies.gates(d, None if previous is None else previous[:1], step_input)
            shared = output[:1]
            _step_output(multiplies, layer, d, gates, cell_state[:1], out=shared)
            cell_state[1:n] = cell_state[:1]
            output[1:n] = shared
            previous, offset, first_step = output[:n], n, 1
        if first_step == len(batch_sizes):  # (every row had that one step only)
            step_inputs = iter(())
        elif gate_cache is None:
            step_inputs = _blocked_step_inputs(multiplies, d, data[offset:], batch_sizes[first_step:])
        else:
            step_inputs = _gathered_step_inputs(table, index[offset:], d, batch_sizes[first_step:])
        for step_input in step_inputs:  # (not zipped with batch_sizes: zip would hold on to the last one)
            n = step_input.shape[0]
            if shared is not None:  # every row's recurrent input is the shared row: one multiply serves all
                gates, shared = step_input + multiplies.recurrent(d, shared), None
            else:
                gates = multiplies.gates(d, None if previous is None else previous[:n], step_input)
            previous = output[offset : offset + n]  # this step's output, the next step's state
            _step_output(multiplies, layer, d, gates, cell_state[:n], out=previous)
            offset += n
            del step_input  # (so that the block it came from can be released; see _blocked_step_inputs)

    # Back to [2, B, S, P] with zeros past each row's end, and the state after each row's last step.
    device, sizes = outputs.device, packed.batch_sizes
    step_index = torch.repeat_interleave(torch.arange(len(batch_sizes)), sizes).to(device)
    row_index = order.to(device)[torch.cat([torch.arange(n) for n in batch_sizes]).to(device)]
    padded = outputs.new_zeros(directions, batch, steps, proj)
    padded[:, row_index, step_index] = outputs
    starts = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])  # packed index of each step's first row
    final_index = (starts[lengths.index_select(0, order.cpu()) - 1] + torch.arange(batch)).to(device)
    final_h = outputs.index_select(1, final_index).index_select(1, restore.to(device))
    final_c = c.index_select(1, restore.to(c.device))
    return padded, final_h, final_c
