"""Approximate biLSTM modes: faster, but they change the numbers. Off by default; opt in per model with
`ElmoModel.set_lstm_approximation(kind)`, inference only. `benchmarks/RESULTS.md` gives each one's measured
speed-up and deviation.

* `"nn_lstm"`: `torch.nn.LSTM(proj_size=P)` (cuDNN on GPU, the fused ATen kernel on CPU). It cannot clip the
  cell or the projected state, so wherever the original clips (|c| > cell_clip, |h| > proj_clip) the
  numbers diverge; on the trained fixture model that reaches about 1 absolute.
* `"int8"`: the three multiplies of every cell with int8 weights (per output row) and dynamically quantised
  int8 activations (fbgemm / oneDNN on CPU). Everything else stays float32.

Mixed precision is `torch.autocast(device, dtype=torch.bfloat16)` (or float16) around the model; the model
then runs its plain path. `approximation_deviation` measures any of these on your own inputs.
"""

import warnings

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .fast_bilstm import derived_weights, fast_bilstm_layer, forget_biased

APPROXIMATIONS = ("nn_lstm", "int8")
# Mixed precision is not a mode of the model but `torch.autocast` around it; measured here all the same.
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _build_nn_lstms(layer) -> list[nn.LSTM]:
    """One unidirectional `nn.LSTM` per direction, sharing the layer's weights (only the bias is new)."""
    four_cells, proj = layer.input_weight.shape[1:]
    cell = four_cells // 4
    has_projection = layer.projection_weight is not None
    bias = forget_biased(layer)
    lstms = []
    for d in range(2):
        lstm = nn.LSTM(proj, cell, proj_size=proj if has_projection else 0, batch_first=True,
                       device=layer.input_weight.device, dtype=layer.input_weight.dtype)
        lstm.weight_ih_l0 = nn.Parameter(layer.input_weight[d].detach(), requires_grad=False)
        lstm.weight_hh_l0 = nn.Parameter(layer.recurrent_weight[d].detach(), requires_grad=False)
        lstm.bias_ih_l0 = nn.Parameter(bias[d], requires_grad=False)
        lstm.bias_hh_l0 = nn.Parameter(torch.zeros_like(bias[d]), requires_grad=False)
        if has_projection:
            lstm.weight_hr_l0 = nn.Parameter(layer.projection_weight[d].detach(), requires_grad=False)
        if lstm.weight_ih_l0.is_cuda:
            lstm.flatten_parameters()  # cuDNN wants one contiguous buffer: a copy, on the GPU only
        lstms.append(lstm)
    return lstms


def nn_lstm_layer(layer, inputs, step_mask, h, c):
    """`ElmoBiLstmLayer.forward` through `nn.LSTM`: the same cell without clipping."""
    lstms = derived_weights(layer, "nn_lstm", _build_nn_lstms)
    lengths = step_mask.sum(dim=1).cpu()
    outputs, final_h, final_c = [], [], []
    for d, lstm in enumerate(lstms):
        packed = pack_padded_sequence(inputs[d], lengths, batch_first=True, enforce_sorted=False)
        output, (h_n, c_n) = lstm(packed, (h[d].unsqueeze(0).contiguous(), c[d].unsqueeze(0).contiguous()))
        outputs.append(pad_packed_sequence(output, batch_first=True, total_length=inputs.shape[2])[0])
        final_h.append(h_n[0])
        final_c.append(c_n[0])
    return torch.stack(outputs), torch.stack(final_h), torch.stack(final_c)


class Int8Multiplies:
    """The cell's multiplies with int8 weights (symmetric, one scale per output row) and dynamic int8 inputs."""

    def __init__(self, layer):
        self.bias = forget_biased(layer)
        pack = torch.ops.quantized.linear_prepack
        self.input_weight = [pack(self._quantize(w), b) for w, b in zip(layer.input_weight, self.bias)]
        self.recurrent_weight = [pack(self._quantize(w), None) for w in layer.recurrent_weight]
        if layer.projection_weight is not None:
            self.projection_weight = [pack(self._quantize(w), None) for w in layer.projection_weight]

    @staticmethod
    def _quantize(weight: torch.Tensor) -> torch.Tensor:
        scale = (weight.detach().abs().amax(dim=1) / 127).clamp_min(1e-12).double()
        zero = torch.zeros(weight.shape[0], dtype=torch.long)
        with warnings.catch_warnings():  # quantized tensors are deprecated in favour of torchao
            warnings.simplefilter("ignore", UserWarning)
            return torch.quantize_per_channel(weight.detach().float(), scale, zero, 0, torch.qint8)

    def input_gates(self, direction, x):
        return torch.ops.quantized.linear_dynamic(x.contiguous(), self.input_weight[direction])

    def recurrent(self, direction, h):
        return torch.ops.quantized.linear_dynamic(h.contiguous(), self.recurrent_weight[direction])

    def gates(self, direction, h, input_gates):
        if h is None:
            return input_gates.clone()
        return self.recurrent(direction, h).add_(input_gates)

    def projection(self, direction, m):
        return torch.ops.quantized.linear_dynamic(m.contiguous(), self.projection_weight[direction])


def int8_layer(layer, inputs, step_mask, h, c):
    """`ElmoBiLstmLayer.forward` with int8 multiplies (CPU float32 only)."""
    if inputs.device.type != "cpu":
        raise ValueError(f"the 'int8' approximation runs on CPU only, got inputs on {inputs.device}")
    multiplies = derived_weights(layer, "int8", Int8Multiplies)
    return fast_bilstm_layer(layer, inputs.float(), step_mask, h.float(), c.float(), multiplies=multiplies)


def approximate_bilstm_layer(layer, inputs, step_mask, h, c):
    if layer.approximation == "nn_lstm":
        return nn_lstm_layer(layer, inputs, step_mask, h, c)
    return int8_layer(layer, inputs, step_mask, h, c)


def approximation_deviation(model, inputs: dict, kind: str) -> list[float]:
    """Largest |approximate - exact| of each layer of `hidden_states` on `inputs` (a tokenizer batch), for
    `kind` in `APPROXIMATIONS` or `"bf16"` / `"fp16"` (autocast). The model is left exact."""
    if kind not in APPROXIMATIONS and kind not in AUTOCAST_DTYPES:
        raise ValueError(f"unknown approximation {kind!r}: choose one of {APPROXIMATIONS + tuple(AUTOCAST_DTYPES)}")
    device = next(model.parameters()).device
    inputs = {name: value.to(device) for name, value in inputs.items()}
    with torch.no_grad():
        model.set_lstm_approximation(None)
        exact = model(**inputs).hidden_states
        try:
            if kind in AUTOCAST_DTYPES:
                with torch.autocast(device.type, dtype=AUTOCAST_DTYPES[kind]):
                    approximate = model(**inputs).hidden_states
            else:
                model.set_lstm_approximation(kind)
                approximate = model(**inputs).hidden_states
        finally:
            model.set_lstm_approximation(None)
    return [(a.float() - e).abs().max().item() if e.numel() else 0.0 for a, e in zip(approximate, exact)]
