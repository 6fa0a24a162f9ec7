"""The biLSTM layer's fast inference path: the computation of `ElmoBiLstmLayer._plain_forward`, reorganised.

What changes is only the order and grouping of work, never the arithmetic of a cell:
* rows are sorted by length and packed time-major (`pack_padded_sequence`), so step t multiplies only the
  rows still running and no padded position is ever computed;
* the input half of every gate is one multiply over all packed positions, with the forget gate's +1.0
  folded into its bias;
* the recurrent state is never copied: a row's previous output is its recurrent input, and its cell state
  is updated in place;
* on CPU in float32 the recurrent and projection weights are reordered once for oneDNN (kept beside the
  layer, rebuilt when a weight changes), which multiplies a few rows by a large matrix about twice as fast
  as the generic BLAS call.

Results equal the plain path to float32 rounding (the tests hold them within 1e-6). Gradients are not
supported: the layer uses this path only when autograd is off.
"""

import weakref

import torch
from torch.nn.utils.rnn import pack_padded_sequence

# Per layer: (fingerprint of its weights, derived tensors). Kept outside the module so that state_dict,
# deepcopy and pickling never see it.
_DERIVED: "weakref.WeakKeyDictionary[torch.nn.Module, tuple]" = weakref.WeakKeyDictionary()


def _uses_onednn(weight: torch.Tensor) -> bool:
    return (
        weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    )


def _fingerprint(layer) -> tuple:
    params = (layer.input_weight, layer.recurrent_weight, layer.bias, layer.projection_weight)
    return tuple(None if p is None else (p.data_ptr(), p._version, p.dtype, p.device) for p in params)


def _derived_weights(layer) -> dict:
    """The forget-biased gate bias and, on CPU, oneDNN-ordered weights; rebuilt when any weight changes."""
    fingerprint = _fingerprint(layer)
    cached = _DERIVED.get(layer)
    if cached is not None and cached[0] == fingerprint:
        return cached[1]
    cell = layer.recurrent_weight.shape[1] // 4
    with torch.no_grad():
        bias = layer.bias.detach().clone()
        bias[:, cell : 2 * cell] += 1.0  # the original's forget bias, added at run time there
        derived = {"bias": bias, "onednn": _uses_onednn(layer.recurrent_weight)}
        if derived["onednn"]:
            reorder = torch.ops.mkldnn._reorder_linear_weight
            derived["recurrent"] = [reorder(w.detach()) for w in layer.recurrent_weight]
            if layer.projection_weight is not None:
                derived["projection"] = [reorder(w.detach()) for w in layer.projection_weight]
    _DERIVED[layer] = (fingerprint, derived)
    return derived


def clear_derived_weights(layer) -> None:
    """Forget the reordered weights of `layer` (they are rebuilt on the next fast forward)."""
    _DERIVED.pop(layer, None)


def _cell(gates: torch.Tensor, c: torch.Tensor, cell_clip: float | None) -> torch.Tensor:
    """In place on `gates` [n, 4C] (forget bias included) and `c` [n, C]; returns o * tanh(c) [n, C]."""
    cell = c.shape[-1]
    torch.sigmoid_(gates[:, : 2 * cell])  # input and forget gates
    torch.tanh_(gates[:, 2 * cell : 3 * cell])
    torch.sigmoid_(gates[:, 3 * cell :])
    c.mul_(gates[:, cell : 2 * cell]).addcmul_(gates[:, :cell], gates[:, 2 * cell : 3 * cell])
    if cell_clip is not None:
        c.clamp_(-cell_clip, cell_clip)
    return torch.tanh(c).mul_(gates[:, 3 * cell :])


def fast_bilstm_layer(
    layer, inputs: torch.Tensor, step_mask: torch.Tensor, h: torch.Tensor, c: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Same contract as `ElmoBiLstmLayer.forward`: inputs [2, B, S, P], step_mask [B, S] (a prefix per row),
    h [2, B, P], c [2, B, C] -> outputs [2, B, S, P] (0 past each row's end), final h, final c."""
    directions, batch, steps, proj = inputs.shape
    cell = c.shape[-1]
    lengths = step_mask.sum(dim=1).cpu()
    weights = _derived_weights(layer)
    onednn = weights["onednn"]

    # Time-major packing of both directions at once: rows sorted by length, step t holds batch_sizes[t] rows.
    packed = pack_padded_sequence(
        inputs.permute(1, 2, 0, 3).reshape(batch, steps, directions * proj), lengths, batch_first=True,
        enforce_sorted=False,
    )
    data = packed.data.view(-1, directions, proj)
    order, restore = packed.sorted_indices, packed.unsorted_indices
    batch_sizes = packed.batch_sizes.tolist()
    total = data.shape[0]

    outputs = inputs.new_empty(directions, total, proj)
    c = c.index_select(1, order.to(c.device)).contiguous()  # sorted, updated in place
    h_sorted = h.index_select(1, order.to(h.device))
    for d in range(directions):
        # The input half of every gate for every packed position: one large multiply.
        input_gates = torch.addmm(weights["bias"][d], data[:, d], layer.input_weight[d].t())
        previous = h_sorted[d]
        offset = 0
        for n in batch_sizes:
            step_input = input_gates[offset : offset + n]
            if onednn:
                gates = torch.ops.mkldnn._linear_pointwise.binary(
                    previous[:n], step_input, weights["recurrent"][d], None, "add"
                )
            else:
                gates = torch.addmm(step_input, previous[:n], layer.recurrent_weight[d].t())
            new_h = _cell(gates, c[d, :n], layer.cell_clip)
            if layer.projection_weight is not None:
                if onednn:
                    new_h = torch.ops.mkldnn._linear_pointwise(new_h, weights["projection"][d], None, "none", [], "")
                else:
                    new_h = new_h @ layer.projection_weight[d].t()
                if layer.proj_clip is not None:
                    new_h.clamp_(-layer.proj_clip, layer.proj_clip)
            previous = outputs[d, offset : offset + n]
            previous.copy_(new_h)
            offset += n
        del input_gates

    # Back to [2, B, S, P] with zeros past each row's end, and the state after each row's last step.
    device = outputs.device
    sizes = packed.batch_sizes
    step_index = torch.repeat_interleave(torch.arange(len(batch_sizes)), sizes).to(device)
    row_index = order[torch.cat([torch.arange(n) for n in batch_sizes]).to(order.device)].to(device)
    padded = outputs.new_zeros(directions, batch, steps, proj)
    padded[:, row_index, step_index] = outputs
    starts = torch.cat([sizes.new_zeros(1), sizes.cumsum(0)[:-1]])  # packed index of each step's first row
    final_index = (starts[lengths.index_select(0, order.cpu()) - 1] + torch.arange(batch)).to(device)
    final_h = outputs.index_select(1, final_index).index_select(1, restore.to(device))
    final_c = c.index_select(1, restore.to(c.device))
    return padded, final_h, final_c
