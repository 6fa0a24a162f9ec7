"""The biLSTM layer's fast training path: `ElmoBiLstmLayer._plain_forward` and its gradient as one autograd Function.

Autograd of the plain loop records a dozen operations per step and replays them one by one in backward, where
each step also multiplies its own share of every weight gradient. Here (cuDNN's and haste's design):
* forward runs the same cell and keeps what backward needs: each step's gates after their non-linearities, the
  cell states, `tanh` of them, the cell outputs before the projection, and where the clipping stopped the
  gradient;
* backward runs only the recurrence step by step (the state gradients, and each step's gate gradients into one
  buffer for all steps), then every weight gradient and the input gradient as one large multiply over all steps
  and rows: the input and recurrent weights' together (their inputs sit side by side in one buffer), the
  projection's, and the bias as a sum.

The gradients are autograd's of the plain loop, to float32 rounding: the tests hold the loss and every
parameter's gradient within 1e-5 of it, and a float64 gradcheck holds the layer to finite differences. Under
autocast (bf16 or fp16 mixed precision) the multiplies run in the autocast dtype and the cell in the weights'
dtype. On CUDA, where a layer sees the same shapes twice in a row (stream batching: every step), its forward and
backward are recorded as CUDA graphs and replayed (`_Recording`), one launch instead of a dozen per time step.
First-order gradients only: double backward through this path raises (the plain path supports it).
"""

import weakref
from collections import OrderedDict

import torch

from .cuda_graphs import capture
from .static_shapes import has_static_shapes, static_batch_is_full

# Whether CUDA tensors go through the layers' CUDA graph recordings (`LayerGraphs`); False runs the fused path
# unrecorded, which benchmarks/gpu_train_bench.py measures against.
RECORD_CUDA_GRAPHS = True


def multiply_dtype(weight: torch.Tensor) -> torch.dtype:
    """The dtype the fused paths multiply in: autocast's where it is on and the weights are float32, else the
    weights' own."""
    device = weight.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) and weight.dtype == torch.float32 else weight.dtype


def uncovered_dtype(weight: torch.Tensor) -> str | None:
    """Why the fused training paths do not cover `weight`'s dtype, or None where they do."""
    if weight.dtype not in (torch.float32, torch.float64):
        return f"{weight.dtype} weights (float32 and float64 are covered)"
    return None


def fused_training_fallback(layer, inputs: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> str | None:
    """Why `layer` must train through the plain loop for these tensors, or None where this path covers them."""
    if not layer.use_fast_path:
        return "use_fast_path is False"
    if inputs.shape[1] == 0 or inputs.shape[2] == 0:
        return "no rows or no steps"
    if (reason := uncovered_dtype(layer.input_weight)) is not None:
        return reason
    autocast = torch.is_autocast_enabled(inputs.device.type)
    if not autocast and not inputs.dtype == h.dtype == c.dtype == layer.input_weight.dtype:
        return "inputs or states of another dtype than the weights, outside autocast"
    return None


def fused_bilstm_layer(
    layer, inputs: torch.Tensor, step_mask: torch.Tensor, h: torch.Tensor, c: torch.Tensor, graphs=None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`ElmoBiLstmLayer._plain_forward` with its gradient fused: inputs [2, B, S, P], step_mask [B, S] bool (any
    pattern), h [2, B, P], c [2, B, C] -> outputs [2, B, S, P] (0 at masked steps), final h, final c.

    graphs: where to keep recordings of the layer (`LayerGraphs`); by default CUDA graphs for CUDA tensors, none
    elsewhere."""
    # Where every row runs every step (stream batching), the per-step masking is skipped; `static_shapes()` reads no
    # device value: its caller says so (`full`), or every step is masked (the same numbers). A recording of the whole
    # step holds the layer's kernels there (a CUDA graph cannot record another).
    static = has_static_shapes()
    all_valid = static_batch_is_full() if static else bool(step_mask.all())
    if graphs is None and inputs.is_cuda and RECORD_CUDA_GRAPHS and not static:
        graphs = _CUDA_GRAPHS.get(layer)
        if graphs is None:
            graphs = _CUDA_GRAPHS[layer] = LayerGraphs(record=True)
    return _FusedBiLstm.apply(
        inputs, step_mask, h, c, layer.input_weight, layer.recurrent_weight, layer.bias, layer.projection_weight,
        (layer.cell_clip, layer.proj_clip, layer.forget_bias, multiply_dtype(layer.input_weight), all_valid), graphs,
    )


class _Multiplies:
    """The weights in the multiplies' dtype, and products that return the cell's dtype."""

    def __init__(self, weights: dict, dtype: torch.dtype, multiply_dtype: torch.dtype):
        self.dtype, self.multiply_dtype = dtype, multiply_dtype
        self.weights = {name: None if w is None else w.to(multiply_dtype) for name, w in weights.items()}

    def __call__(self, a: torch.Tensor, b: torch.Tensor, out=None) -> torch.Tensor:
        """`a @ b` (batched over directions) in the cell's dtype, multiplied in the multiplies' dtype."""
        if self.multiply_dtype == self.dtype:
            return torch.bmm(a, b, out=out)
        product = torch.bmm(a.to(self.multiply_dtype), b.to(self.multiply_dtype))
        return product.to(self.dtype) if out is None else out.copy_(product)

    def accumulate(self, target: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """`target += a @ b`, in place. (An out-of-place bmm and an add: in-place baddbmm runs one multiply per
        direction, each on both threads, about half as fast on CPU as bmm's one direction per thread.)"""
        return target.add_(torch.bmm(a.to(self.multiply_dtype), b))


def _cell_forward(
    gates: torch.Tensor, c_prev: torch.Tensor, c_out: torch.Tensor, tanh_c_out: torch.Tensor,
    m_out: torch.Tensor, clip_pass_out: torch.Tensor | None, cell_clip: float | None,
) -> None:
    """One step of the cell, in place on `gates` [2, B, 4C] (pre-activations, forget bias included; left holding
    the activations i, f, g, o) and into the `*_out` buffers: the new cell state [2, B, C], tanh of it, the cell
    output o * tanh(c), and where the cell clip let the gradient through (clamp's rule: min <= x <= max)."""
    cell = c_prev.shape[-1]
    torch.sigmoid_(gates[..., : 2 * cell])
    torch.tanh_(gates[..., 2 * cell : 3 * cell])
    torch.sigmoid_(gates[..., 3 * cell :])
    input_gate, forget_gate, cell_input, output_gate = gates.split(cell, dim=-1)
    new_c = torch.mul(forget_gate, c_prev).addcmul_(input_gate, cell_input)
    if cell_clip is not None:
        torch.clamp(new_c, -cell_clip, cell_clip, out=c_out)
        torch.eq(c_out, new_c, out=clip_pass_out)  # unchanged by the clamp (NaN is not, as clamp's gradient has it)
    else:
        c_out.copy_(new_c)
    torch.tanh(c_out, out=tanh_c_out)
    torch.mul(output_gate, tanh_c_out, out=m_out)


def _forward(inputs, step_mask, h, c, input_weight, recurrent_weight, bias, projection_weight, settings):
    """The forward pass: (outputs, final h, final c) and what backward needs.

    Buffers are direction-major and then time-major, [2, S, B, ...]: step t of both directions is `[:, t]`, and
    all steps of a direction are one [S * B, ...] matrix for the weight gradients. `inputs_and_h` [2, S + 1, B, 2P]
    holds each step's input and the h entering it side by side (in the multiplies' dtype), the two matrices that
    the input and the recurrent weights multiply.
    """
    cell_clip, proj_clip, forget_bias, multiply_dtype, all_valid = settings
    dtype = input_weight.dtype
    directions, batch, steps, proj = inputs.shape
    cell = recurrent_weight.shape[1] // 4
    multiply = _Multiplies(
        {"input": input_weight, "recurrent": recurrent_weight, "projection": projection_weight}, dtype, multiply_dtype
    )
    has_projection = projection_weight is not None
    clip_proj = has_projection and proj_clip is not None
    new = inputs.new_empty
    inputs_and_h = new(directions, steps + 1, batch, 2 * proj, dtype=multiply_dtype)
    inputs_and_h[:, :steps, :, :proj].copy_(inputs.transpose(1, 2))
    time_major = inputs_and_h[:, :steps, :, :proj].reshape(directions, steps * batch, proj)
    # The input half of every gate for all steps at once, into the buffer that then receives each step's recurrent
    # half and keeps the activations. The forget gate's run-time bias (bilm-tf's 1.0) is added here.
    biased = bias.detach().clone()
    biased[:, cell : 2 * cell] += forget_bias
    if multiply_dtype == dtype:
        gates = torch.baddbmm(biased.unsqueeze(1), time_major, multiply.weights["input"].transpose(1, 2))
    else:
        gates = multiply(time_major, multiply.weights["input"].transpose(1, 2)).add_(biased.unsqueeze(1))
    gates = gates.view(directions, steps, batch, 4 * cell)

    states_c = new(directions, steps + 1, batch, cell, dtype=dtype)  # c entering each step, then the last
    # h entering each step, then the last: in inputs_and_h itself where the multiplies take the cell's dtype.
    separate_h = multiply_dtype != dtype
    states_h = new(directions, steps + 1, batch, proj, dtype=dtype) if separate_h else inputs_and_h[..., proj:]
    tanh_c = new(directions, steps, batch, cell, dtype=dtype)
    cell_out = new(directions, steps, batch, cell, dtype=dtype)  # o * tanh(c), the projection's input
    c_pass = new(directions, steps, batch, cell, dtype=torch.bool) if cell_clip is not None else None
    h_pass = new(directions, steps, batch, proj, dtype=torch.bool) if clip_proj else None
    states_c[:, 0].copy_(c)
    states_h[:, 0].copy_(h)
    if separate_h:
        inputs_and_h[:, 0, :, proj:].copy_(h)
    valid = step_mask.t().reshape(1, steps, batch, 1)
    recurrent = multiply.weights["recurrent"].transpose(1, 2)
    projection = multiply.weights["projection"].transpose(1, 2) if has_projection else None
    for t in range(steps):
        multiply.accumulate(gates[:, t], inputs_and_h[:, t, :, proj:], recurrent)
        c_next = states_c[:, t + 1] if all_valid else torch.empty_like(states_c[:, t])
        _cell_forward(gates[:, t], states_c[:, t], c_next, tanh_c[:, t], cell_out[:, t],
                      None if c_pass is None else c_pass[:, t], cell_clip)
        h_next = states_h[:, t + 1] if all_valid else torch.empty_like(states_h[:, t])
        if has_projection:
            if clip_proj:
                projected = multiply(cell_out[:, t], projection)
                torch.clamp(projected, -proj_clip, proj_clip, out=h_next)
                torch.eq(h_next, projected, out=h_pass[:, t])
            else:
                multiply(cell_out[:, t], projection, out=h_next)
        else:
            h_next.copy_(cell_out[:, t])
        if not all_valid:  # rows past their end keep their state
            torch.where(valid[:, t], c_next, states_c[:, t], out=states_c[:, t + 1])
            torch.where(valid[:, t], h_next, states_h[:, t], out=states_h[:, t + 1])
        if separate_h:
            inputs_and_h[:, t + 1, :, proj:].copy_(states_h[:, t + 1])
    # A step's output is the new h where the step is valid, 0 elsewhere; written batch-major into a tensor of its
    # own, not returned as a transposed view (FSDP2 warns of a module that returns a view).
    outputs = states_h.new_empty(directions, batch, steps, states_h.shape[-1])
    torch.where(valid, states_h[:, 1:], states_h.new_zeros(()), out=outputs.transpose(1, 2))
    saved = (inputs_and_h, states_h if separate_h else None, states_c, gates, tanh_c, cell_out, c_pass, h_pass)
    return (outputs, states_h[:, steps].clone(), states_c[:, steps].clone()), saved


def _backward(step_mask, input_weight, recurrent_weight, projection_weight, saved, grads, settings, needs):
    """The backward pass: the gradients of (inputs, h, c, input weight, recurrent weight, bias, projection weight),
    None where `needs` says that none is needed."""
    _, _, _, multiply_dtype, all_valid = settings
    inputs_and_h, states_h, states_c, gates, tanh_c, cell_out, c_pass, h_pass = saved
    grad_outputs, grad_h, grad_c = grads
    dtype = input_weight.dtype
    directions, steps, batch, cell = tanh_c.shape
    proj = inputs_and_h.shape[-1] // 2
    if states_h is None:
        states_h = inputs_and_h[..., proj:]
    has_projection = projection_weight is not None
    multiply = _Multiplies(
        {"input": input_weight, "recurrent": recurrent_weight, "projection": projection_weight}, dtype, multiply_dtype
    )
    valid = step_mask.t().reshape(1, steps, batch, 1)
    grad_outputs = grad_outputs.to(dtype).transpose(1, 2)  # [2, S, B, P]
    dh = grad_h.to(dtype, copy=True)  # the gradient reaching the state h after step t, then before it
    dc = grad_c.to(dtype, copy=True)
    grad_gates = gates.new_empty(directions, steps, batch, 4 * cell)  # of the pre-activations
    grad_h_out = gates.new_empty(directions, steps, batch, proj) if has_projection else None
    sigmoid_backward = torch.ops.aten.sigmoid_backward.grad_input
    tanh_backward = torch.ops.aten.tanh_backward.grad_input
    for t in reversed(range(steps)):
        step_grad = grad_outputs[:, t]
        dh_out = grad_h_out[:, t] if has_projection else None
        if all_valid:
            dh_new = torch.add(step_grad, dh, out=dh_out)
            dc_new = dc
        else:  # a masked row's state passes its gradient on unchanged; its step gets none
            v = valid[:, t]
            dh_new = torch.mul(step_grad + dh, v, out=dh_out)
            dc_new = dc * v
            dh_pass, dc_pass = torch.where(v, 0.0, dh), torch.where(v, 0.0, dc)
        if has_projection:
            if h_pass is not None:
                dh_new.mul_(h_pass[:, t])
            dm = multiply(dh_new, multiply.weights["projection"])
        else:
            dm = dh_new
        input_gate, forget_gate, cell_input, output_gate = gates[:, t].split(cell, dim=-1)
        grad_input, grad_forget, grad_cell, grad_output = grad_gates[:, t].split(cell, dim=-1)
        sigmoid_backward(dm * tanh_c[:, t], output_gate, grad_input=grad_output)
        dc_step = torch.ops.aten.tanh_backward(dm * output_gate, tanh_c[:, t]).add_(dc_new)
        if c_pass is not None:
            dc_step.mul_(c_pass[:, t])
        sigmoid_backward(dc_step * states_c[:, t], forget_gate, grad_input=grad_forget)
        sigmoid_backward(dc_step * cell_input, input_gate, grad_input=grad_input)
        tanh_backward(dc_step * input_gate, cell_input, grad_input=grad_cell)
        dc = dc_step.mul_(forget_gate)
        dh = multiply(grad_gates[:, t], multiply.weights["recurrent"])
        if not all_valid:
            dc.add_(dc_pass)
            dh.add_(dh_pass)

    # Every weight's gradient, and the inputs', in one multiply over all steps and rows.
    flat_grad_gates = grad_gates.view(directions, steps * batch, 4 * cell)
    grad_inputs = grad_input_weight = grad_recurrent_weight = grad_bias = grad_projection = None
    if needs["inputs"]:
        grad_inputs = multiply(flat_grad_gates, multiply.weights["input"])
        grad_inputs = grad_inputs.view(directions, steps, batch, proj).transpose(1, 2)
    # [input; h entering the step] x gate gradients: both weights' gradients, transposed, in one multiply.
    columns = slice(0 if needs["input_weight"] else proj, 2 * proj if needs["recurrent_weight"] else proj)
    if columns.start < columns.stop:
        both = inputs_and_h[:, :steps, :, columns].reshape(directions, steps * batch, -1)
        products = multiply(both.transpose(1, 2), flat_grad_gates.to(multiply_dtype))
        if needs["input_weight"]:
            grad_input_weight = products[:, :proj].transpose(1, 2)
        if needs["recurrent_weight"]:
            grad_recurrent_weight = products[:, -proj:].transpose(1, 2)
    if needs["bias"]:
        grad_bias = flat_grad_gates.sum(1)
    if has_projection and needs["projection_weight"]:
        grad_projection = multiply(grad_h_out.view(directions, steps * batch, proj).transpose(1, 2),
                                   cell_out.view(directions, steps * batch, cell))
    return (grad_inputs, dh if needs["h"] else None, dc if needs["c"] else None, grad_input_weight,
            grad_recurrent_weight, grad_bias, grad_projection)


_NEEDS = ("inputs", "step_mask", "h", "c", "input_weight", "recurrent_weight", "bias", "projection_weight")


class _FusedBiLstm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inputs, step_mask, h, c, input_weight, recurrent_weight, bias, projection_weight, settings,
                graphs):
        needs = dict(zip(_NEEDS, ctx.needs_input_grad))
        weights = (input_weight, recurrent_weight, bias, projection_weight)
        with torch.autocast(inputs.device.type, enabled=False):
            recording = None if graphs is None else graphs.recording(inputs, step_mask, h, c, weights, settings, needs)
            if recording is None:
                results, saved = _forward(inputs, step_mask, h, c, *weights, settings)
            else:
                results, saved = recording.forward((inputs, step_mask, h, c))
        ctx.save_for_backward(step_mask, input_weight, recurrent_weight, projection_weight, *saved)
        ctx.settings, ctx.needs, ctx.recording = settings, needs, recording
        ctx.input_dtypes = (inputs.dtype, h.dtype, c.dtype)
        return results

    @staticmethod
    def backward(ctx, grad_outputs, grad_h, grad_c):
        if torch.is_grad_enabled():
            raise RuntimeError(
                "ElmoBiLstmLayer's fused training path computes first-order gradients only (create_graph=True "
                "was asked for); for double backward call model.set_fast_path(False) (or set use_fast_path = False "
                "on the biLSTM layers) so that the plain loop runs"
            )
        step_mask, input_weight, recurrent_weight, projection_weight, *saved = ctx.saved_tensors
        grads = (grad_outputs, grad_h, grad_c)
        with torch.autocast(grad_outputs.device.type, enabled=False):
            recording = ctx.recording
            if recording is None or not recording.reads((input_weight, recurrent_weight, projection_weight)):
                results = _backward(step_mask, input_weight, recurrent_weight, projection_weight, saved, grads,
                                    ctx.settings, ctx.needs)
            else:
                results = recording.backward(step_mask, (*saved, *grads))
        grad_inputs, grad_h0, grad_c0, *grad_weights = results
        input_dtype, h_dtype, c_dtype = ctx.input_dtypes
        return (None if grad_inputs is None else grad_inputs.to(input_dtype), None,
                None if grad_h0 is None else grad_h0.to(h_dtype), None if grad_c0 is None else grad_c0.to(c_dtype),
                *grad_weights, None, None)


class _Recording:
    """`body(*inputs)` recorded for inputs of fixed shapes and replayed for new values: on CUDA as a CUDA graph (one
    launch for every kernel of it), elsewhere by calling `body` on the same static buffers. Inputs are copied into
    the static buffers and outputs copied out, so that nothing a caller keeps is overwritten by the next replay.
    None inputs and outputs stay None."""

    def __init__(self, body, example_inputs, record: bool, pool=None):
        self.body = body
        self.static_inputs = [None if t is None else t.detach().clone() for t in example_inputs]
        self.graph = None
        if record:
            self.graph, self.static_outputs = capture(lambda: body(*self.static_inputs), pool)

    def pool(self):
        return None if self.graph is None else self.graph.pool()

    def __call__(self, inputs):
        for static, new in zip(self.static_inputs, inputs):
            if static is not None:
                static.copy_(new)
        if self.graph is None:
            outputs = self.body(*self.static_inputs)
        else:
            self.graph.replay()
            outputs = self.static_outputs
        return _map_tensors(outputs, torch.clone)


def _map_tensors(value, function):
    if isinstance(value, (tuple, list)):
        return type(value)(_map_tensors(v, function) for v in value)
    return None if value is None else function(value)


class _LayerRecording:
    """A layer's forward and backward recorded for one shape and setting."""

    def __init__(self, inputs, step_mask, h, c, weights, settings, needs, record: bool):
        def forward_body(inputs, step_mask, h, c):
            return _forward(inputs, step_mask, h, c, *weights, settings)

        self._forward = _Recording(forward_body, (inputs, step_mask, h, c), record)
        results, saved = self._forward((inputs, step_mask, h, c))
        input_weight, recurrent_weight, _, projection_weight = weights
        self.weight_pointers = _addresses((input_weight, recurrent_weight, projection_weight))
        count = len(saved)

        # The mask is an input of the backward's own: the forward's static one holds the latest forward's, which
        # is another call's when two forwards of this shape come before their backwards.
        def backward_body(step_mask, *tensors):
            return _backward(step_mask, input_weight, recurrent_weight, projection_weight, tensors[:count],
                             tensors[count:], settings, needs)

        example_grads = tuple(torch.zeros_like(r) for r in results)
        self._backward = _Recording(backward_body, (step_mask, *saved, *example_grads), record,
                                    pool=self._forward.pool())

    def forward(self, inputs):
        return self._forward(inputs)

    def backward(self, step_mask, tensors):
        return self._backward((step_mask, *tensors))

    def reads(self, weights) -> bool:
        """Whether the recorded backward reads these weights (`weights`: input, recurrent, projection, as saved for
        the backward): it holds the addresses they had at the forward, where FSDP's gather, for one, may have put
        them elsewhere by the backward."""
        return _addresses(weights) == self.weight_pointers


def _addresses(weights) -> tuple:
    """Where each weight's numbers are (None for a missing one)."""
    return tuple(None if w is None else w.data_ptr() for w in weights)


class LayerGraphs:
    """The recordings of one biLSTM layer: a shape and setting is recorded when it comes twice in a row (stream
    batching gives every step the same shapes; sentence batching rarely repeats one), and the latest few are kept.

    record=True records CUDA graphs (CUDA tensors only); record=False replays by running the same code on static
    buffers, which tests the bookkeeping on CPU."""

    KEEP = 2

    def __init__(self, record: bool):
        self.record = record
        self.recordings: OrderedDict = OrderedDict()
        self.previous = None

    def recording(self, inputs, step_mask, h, c, weights, settings, needs) -> _LayerRecording | None:
        key = (
            tuple((t.shape, t.dtype, t.device) for t in (inputs, step_mask, h, c)),
            tuple(None if w is None else (w.data_ptr(), w.shape, w.dtype) for w in weights),
            settings, tuple(needs.items()),
        )
        if key in self.recordings:
            self.recordings.move_to_end(key)
            return self.recordings[key]
        if key != self.previous:
            self.previous = key
            return None
        recording = self.recordings[key] = _LayerRecording(inputs, step_mask, h, c, weights, settings, needs,
                                                           self.record)
        while len(self.recordings) > self.KEEP:
            self.recordings.popitem(last=False)
        return recording


# Per layer, its CUDA graphs; outside the module so that state_dict, deepcopy and pickling never see them.
_CUDA_GRAPHS: "weakref.WeakKeyDictionary[torch.nn.Module, LayerGraphs]" = weakref.WeakKeyDictionary()


def clear_training_graphs(layer) -> None:
    """Drop the layer's recordings of the fused training path, and the GPU memory of their static buffers (the
    saved gates of a step, hundreds of MB at the original size); a shape is recorded again when it next comes
    twice in a row."""
    _CUDA_GRAPHS.pop(layer, None)
