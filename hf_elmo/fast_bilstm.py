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
* on CPU in float32, large weights are reordered once for oneDNN (kept beside the layer, rebuilt when a
  weight changes), which multiplies a few rows by a large matrix up to twice as fast as the generic BLAS
  call, and a few hundred rows up to 1.4 times; and tanh is computed through sigmoid (see `_cell`).

Results equal the plain path to float32 rounding: the tests hold them within 1e-6 (relative, for the cell
states near the clip). Gradients are not supported: the layer takes this path only when autograd and
autocast are off.
"""

import weakref

import torch
from torch.nn.utils.rnn import pack_padded_sequence

from .token_cache import ElmoTokenCache

# Per (layer, kind): (fingerprint of the layer's weights, derived tensors). Kept outside the module so that
# state_dict, deepcopy and pickling never see them.
_DERIVED: "weakref.WeakKeyDictionary[torch.nn.Module, dict]" = weakref.WeakKeyDictionary()


def weights_fingerprint(parameters) -> tuple:
    """Changes whenever one of `parameters` is replaced, moved or modified in place."""
    return tuple(None if p is None else (p.data_ptr(), p._version, p.dtype, p.device) for p in parameters)


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


def clear_derived_weights(module) -> None:
    """Drop every derived copy of the weights of `module` (they are rebuilt when next needed)."""
    _DERIVED.pop(module, None)


def forget_biased(layer) -> torch.Tensor:
    """The gate bias [2, 4C] with the run-time forget bias (bilm-tf's +1.0, `layer.forget_bias`) added to the
    forget block."""
    cell = layer.recurrent_weight.shape[1] // 4
    bias = layer.bias.detach().clone()
    bias[:, cell : 2 * cell] += layer.forget_bias
    return bias


# Positions per input multiply: large enough for an efficient multiply, small enough to stay in cache.
INPUT_BLOCK_ROWS = 256

# oneDNN's reordered weights pay off for large matrices only; below this many elements BLAS is as fast.
ONEDNN_MIN_WEIGHT_ELEMENTS = 1 << 21


def _onednn_weights(weights: torch.Tensor) -> list[torch.Tensor] | None:
    """Per direction, `weights[d]` reordered for oneDNN, or None where plain BLAS is the better choice."""
    if not (
        weights.device.type == "cpu"
        and weights.dtype == torch.float32
        and weights[0].numel() >= ONEDNN_MIN_WEIGHT_ELEMENTS
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    ):
        return None
    return [torch.ops.mkldnn._reorder_linear_weight(w.detach()) for w in weights]


def two_rows(product, x: torch.Tensor, *others: torch.Tensor) -> torch.Tensor:
    """`product(x, *others)` for row-wise products, with a single row computed as two identical ones.

    BLAS multiplies one row by a matrix-vector kernel whose rounding depends on the matrix's memory
    alignment, so a memory-mapped checkpoint (weights at odd offsets) and the same weights in fresh memory
    would differ in the last bit; two rows take the matrix-matrix kernel, which does not.
    """
    if x.shape[0] != 1:
        return product(x, *others)
    return product(x.expand(2, -1), *(o.expand(2, -1) for o in others))[:1]


class ExactMultiplies:
    """The three matrix multiplies of a cell, exact: oneDNN with reordered weights for large float32 CPU
    weights, BLAS otherwise."""

    def __init__(self, layer):
        self.layer = layer
        self.bias = forget_biased(layer)
        self.recurrent_onednn = _onednn_weights(layer.recurrent_weight)
        self.projection_onednn = None if layer.projection_weight is None else _onednn_weights(layer.projection_weight)
        self._input_onednn = {}  # "directions" or "both" (see both_input_gates): each reordered on first use

    def input_onednn(self, kind: str) -> list[torch.Tensor] | None:
        """The input weights reordered for oneDNN (None where BLAS is used): per direction ("directions"), or
        both stacked into one [8C, P] matrix ("both")."""
        if kind not in self._input_onednn:
            weights = self.layer.input_weight.detach()
            if kind == "both":
                weights = weights.reshape(1, -1, weights.shape[-1])
            self._input_onednn[kind] = _onednn_weights(weights)
        return self._input_onednn[kind]

    @property
    def input_gates_use_out(self) -> bool:
        """Whether `input_gates` computes into the `out` it is given (BLAS does; oneDNN allocates its result)."""
        return self.input_onednn("directions") is None

    def input_gates(self, direction: int, x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
        """x [N, P] -> x W_in^T + bias (forget bias included) [N, 4C], in `out` where BLAS computes it."""
        onednn = self.input_onednn("directions")
        if onednn is not None:
            return torch.ops.mkldnn._linear_pointwise(x, onednn[direction], self.bias[direction], "none", [], "")
        weight = self.layer.input_weight[direction].t()
        if x.shape[0] == 1:
            out = None  # computed as two rows (see two_rows); small
        return two_rows(lambda rows: torch.addmm(self.bias[direction], rows, weight, out=out), x)

    def both_input_gates(self, x: torch.Tensor) -> torch.Tensor:
        """x [N, P] -> the input gates of both directions [N, 2, 4C], in one multiply (the first layer's inputs
        are read by both directions)."""
        onednn, bias = self.input_onednn("both"), self.bias.view(-1)
        if onednn is not None:
            gates = torch.ops.mkldnn._linear_pointwise(x, onednn[0], bias, "none", [], "")
        else:
            weight = self.layer.input_weight.detach().reshape(-1, x.shape[-1]).t()
            gates = two_rows(lambda rows: torch.addmm(bias, rows, weight), x)
        return gates.view(x.shape[0], 2, -1)

    def gates(self, direction: int, h: torch.Tensor | None, input_gates: torch.Tensor) -> torch.Tensor:
        """h [n, P] (None: all zeros), input_gates [n, 4C] -> every gate's pre-activation [n, 4C], a new tensor."""
        if h is None:  # 0 W_rec^T is exactly 0
            return input_gates.clone()
        if self.recurrent_onednn is not None:  # (the same numbers as oneDNN's fused add, which is slower)
            weight = self.recurrent_onednn[direction]
            return torch.ops.mkldnn._linear_pointwise(h, weight, None, "none", [], "").add_(input_gates)
        weight = self.layer.recurrent_weight[direction].t()
        return two_rows(lambda rows, added: torch.addmm(added, rows, weight), h, input_gates)

    def projection(self, direction: int, m: torch.Tensor) -> torch.Tensor:
        """m [n, C] -> m W_proj^T [n, P], a new tensor."""
        if self.projection_onednn is not None:
            return torch.ops.mkldnn._linear_pointwise(m, self.projection_onednn[direction], None, "none", [], "")
        weight = self.layer.projection_weight[direction].t()
        return two_rows(lambda rows: rows @ weight, m)


def _cell(gates: torch.Tensor, c: torch.Tensor, cell_clip: float | None) -> torch.Tensor:
    """In place on `gates` [n, 4C] (forget bias included) and `c` [n, C]; returns o * tanh(c) [n, C].

    On CPU tanh is computed as 2 sigmoid(2x) - 1 (within 2 float32 ulps of `torch.tanh`), so that one sigmoid
    covers all four gates: `torch.tanh` is MKL's vector tanh there, several times slower than ATen's sigmoid
    and split across threads from 2048 elements on, so a busy machine stalls every call for a scheduler tick.
    """
    cell = c.shape[-1]
    input_gate, forget_gate, cell_input, output_gate = gates.split(cell, dim=1)
    on_cpu = c.device.type == "cpu"
    if on_cpu:
        cell_input.mul_(2.0)
        torch.sigmoid_(gates)
        cell_input.mul_(2.0).sub_(1.0)
    else:
        torch.sigmoid_(gates[:, : 2 * cell])
        torch.tanh_(cell_input)
        torch.sigmoid_(output_gate)
    c.mul_(forget_gate).addcmul_(input_gate, cell_input)
    if cell_clip is not None:
        c.clamp_(-cell_clip, cell_clip)
    if on_cpu:
        return torch.sigmoid_(c * 2.0).mul_(2.0).sub_(1.0).mul_(output_gate)
    return torch.tanh(c).mul_(output_gate)


def _step_output(multiplies, layer, direction: int, gates: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """One step's output [n, P] from its gates [n, 4C] (consumed), updating the cell state `c` [n, C] in place."""
    h = _cell(gates, c, layer.cell_clip)
    if layer.projection_weight is not None:
        h = multiplies.projection(direction, h)
        if layer.proj_clip is not None:
            h.clamp_(-layer.proj_clip, layer.proj_clip)
    return h


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
    workspace = None  # one reused buffer, where the multiply computes into one
    if multiplies.input_gates_use_out:
        workspace = data.new_empty(limit, multiplies.bias.shape[-1])
    offset = 0
    for first, last, block_rows in blocks:
        out = None if workspace is None else workspace[:block_rows]
        block = multiplies.input_gates(direction, data[offset : offset + block_rows, direction], out)
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
        shared = None  # the output of a step at which every row was alike: one row standing for all
        if _rows_alike(data[: batch_sizes[0], d]) and _rows_alike(h[d]) and _rows_alike(c[d]):
            # Every row starts alike (as every sentence starts with <S> from the default zero state): the first
            # step, its input multiply included, is computed for one row, and so is the next step's recurrent one.
            n = batch_sizes[0]
            if gate_cache is None:
                step_input = multiplies.input_gates(d, data[:1, d], None)
            else:
                step_input = table[index[:1, d], d]
            gates = multiplies.gates(d, None if previous is None else previous[:1], step_input)
            shared = _step_output(multiplies, layer, d, gates, c[d, :1])
            c[d, 1:n] = c[d, :1]
            previous, offset, first_step = outputs[d, :n], n, 1
            previous.copy_(shared.expand(n, -1))
        if first_step == len(batch_sizes):  # (every row had that one step only)
            step_inputs = iter(())
        elif gate_cache is None:
            step_inputs = _blocked_step_inputs(multiplies, d, data[offset:], batch_sizes[first_step:])
        else:
            step_inputs = _gathered_step_inputs(table, index[offset:], d, batch_sizes[first_step:])
        for step_input in step_inputs:  # (not zipped with batch_sizes: zip would hold on to the last one)
            n = step_input.shape[0]
            if shared is not None:  # every row's recurrent input is the shared row: one multiply serves all
                recurrent = multiplies.gates(d, shared, step_input.new_zeros(1, step_input.shape[1]))
                gates, shared = step_input + recurrent, None
            else:
                gates = multiplies.gates(d, None if previous is None else previous[:n], step_input)
            new_h = _step_output(multiplies, layer, d, gates, c[d, :n])
            previous = outputs[d, offset : offset + n]  # the next step's state
            previous.copy_(new_h)
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
