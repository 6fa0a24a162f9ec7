"""Approximate biLSTM modes: faster, but they change the numbers. Off by default; opt in per model with
`model.set_lstm_approximation(kind)` (an `ElmoModel` or a head), inference only. `benchmarks/RESULTS.md` gives each
one's measured speed-up and deviation.

* `"bf16"`: the three multiplies of every cell in bfloat16 with float32 accumulation, the weights stored in
  bfloat16 (a copy beside the float32 parameters); the gates, the cell and its state stay float32. On CPU
  only where the CPU computes bfloat16 natively (AVX512-BF16 or AMX-BF16): elsewhere it would be emulated,
  slower than the exact model, so it is refused. On a GPU, the CUDA graphs of `cuda_graphs.py`.
* `"int8"`: the three multiplies of every cell with int8 weights (per output row) and dynamically quantised
  int8 activations (fbgemm / oneDNN on CPU). Everything else stays float32.
* `"bf16"` and `"int8"` derive their weights from a float32 model: on a model in another dtype (bfloat16,
  float16, float64) they are refused.
* `"nn_lstm"`: `torch.nn.LSTM(proj_size=P)` (cuDNN on GPU, the fused ATen kernel on CPU). It cannot clip the
  cell or the projected state, so wherever the original clips (|c| > cell_clip, |h| > proj_clip) the
  numbers diverge; on the trained fixture model that reaches about 1 absolute.

`torch.autocast` around the model also works, but runs the plain path (no fast path, no cache), several
times slower than the exact model on CPU. `approximation_deviation` measures any mode on your own inputs.
"""

import functools
import warnings

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .cuda_graphs import GRAPHS_KIND, graphed_bilstm_layer
from .fast_bilstm import (ExactMultiplies, built_derived_weights, clear_derived_weights, derived_weights,
                          fast_bilstm_layer, forget_biased)
from .fast_linear import FastLinear, cpu_name, cpuinfo, onednn_bfloat16
from .token_cache import ElmoTokenCache

APPROXIMATIONS = ("bf16", "int8", "nn_lstm")


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

    gates = ExactMultiplies.gates  # (through this class's recurrent)

    def projection(self, direction, m):
        return torch.ops.quantized.linear_dynamic(m.contiguous(), self.projection_weight[direction])


def int8_layer(layer, inputs, step_mask, h, c):
    """`ElmoBiLstmLayer.forward` with int8 multiplies (CPU float32 only)."""
    multiplies = derived_weights(layer, "int8", Int8Multiplies)
    return fast_bilstm_layer(layer, inputs.float(), step_mask, h.float(), c.float(), multiplies=multiplies)


def cpu_flags() -> dict[str, bool]:
    """The CPU's extensions, by the kernel's names ("avx512_bf16", "avx512_vnni", "amx_int8", ...): torch's reading
    (`_get_cpu_capability`, torch 2.11 and later), else the kernel's flags in /proc/cpuinfo."""
    try:
        return torch._C._cpu._get_cpu_capability()
    except AttributeError:
        return {flag: True for flag in cpuinfo().get("flags", "").split()}


@functools.cache  # (asked for every layer of every batch in the bf16 mode)
def native_bfloat16_extension() -> str | None:
    """The CPU's extension that computes bfloat16 natively ("AMX-BF16" or "AVX512-BF16"), or None."""
    capability = cpu_flags()
    for flag, name in (("amx_bf16", "AMX-BF16"), ("avx512_bf16", "AVX512-BF16")):
        if capability.get(flag):
            return name
    return None


def check_approximation(kind: str | None, layer) -> None:
    """Refuse, with the reason, an approximation that cannot run on `layer` (a biLSTM layer, where its weights
    are): the 'bf16' and 'int8' modes read float32 weights, 'int8' runs on CPU only, `torch.nn.LSTM` ('nn_lstm')
    holds no projection as wide as the cell, and 'bf16' on a CPU without native bfloat16 would be slower than the
    exact model."""
    device, dtype = layer.input_weight.device, layer.input_weight.dtype
    if kind == "int8" and device.type != "cpu":
        raise ValueError(f"the 'int8' approximation runs on CPU only, and this model is on {device}: use 'bf16' or "
                         "'nn_lstm' there, or the exact model (set_lstm_approximation(None))")
    cells, projection = layer.input_weight.shape[1] // 4, layer.input_weight.shape[2]
    if kind == "nn_lstm" and layer.projection_weight is not None and projection >= cells:
        raise ValueError(f"the 'nn_lstm' approximation cannot run this model: torch.nn.LSTM needs a cell projection "
                         f"narrower than the cell, and this one projects {cells} cells to {projection}; use 'bf16' "
                         "or 'int8', or the exact model (set_lstm_approximation(None))")
    if kind in ("bf16", "int8") and dtype != torch.float32:
        raise ValueError(
            f"the {kind!r} approximation needs a float32 model, and this one is {dtype}: convert it with "
            "model.float() first, or use 'nn_lstm' (which runs in the model's dtype) or the exact model "
            "(set_lstm_approximation(None))"
        )
    if kind == "bf16" and device.type == "cpu" and native_bfloat16_extension() is None:
        raise ValueError(
            "the 'bf16' approximation needs a CPU that computes bfloat16 natively, with AVX512-BF16 or AMX-BF16; "
            f"this one ({cpu_name()}) has neither, so bfloat16 would be emulated and slower than the exact model. "
            "Use the exact model (set_lstm_approximation(None)) or 'int8'"
        )


class Bf16Multiplies(ExactMultiplies):
    """The cell's multiplies in bfloat16 (weights stored in bfloat16, float32 accumulation); the biases, the
    gates, the cell and its state stay float32. On CPU each product is bfloat16 where that is measured faster
    than the exact float32 product, and the exact product (the exact path's own, with its kernels) elsewhere:
    with AVX512-BF16 alone a CPU multiplies bfloat16 at the float32 rate and only reads half the bytes, which
    wins for a few rows (one sentence) but not for a batch; with AMX-BF16 it computes bfloat16 several times
    faster. The first layer's input gates of recent words are kept in a cache of their own (`gate_cache`),
    apart from the exact ones (so that the exact model never reads a bfloat16 result), which follows the settings
    of the layer's `input_gate_cache` (`max_words`, `add_new`) at every call and is emptied by `clear_caches()`."""

    def __init__(self, layer):
        super().__init__(layer)
        self.gate_cache = ElmoTokenCache()  # (its max_words and add_new are the layer's, set at every call)

    def linear(self, kind: str, direction: int = 0):
        key = (kind, direction)
        if key not in self._linears:
            weight = self.weight(kind, direction)
            if weight.device.type == "cpu":
                exact = derived_weights(self.layer, "exact", ExactMultiplies).linear(kind, direction)
                kernels = {"onednn_bfloat16": onednn_bfloat16, "float32": lambda weight: exact}
                self._linears[key] = FastLinear(weight, kernels=kernels)
            else:
                stored = weight.to(torch.bfloat16).t().contiguous()  # [in, out]
                self._linears[key] = lambda x, stored=stored: (x.to(torch.bfloat16) @ stored).float()
        return self._linears[key]

    # The bias is added in float32 after the product: passed to the bfloat16 kernel it would be rounded to bfloat16.
    def input_gates(self, direction: int, x: torch.Tensor) -> torch.Tensor:
        return torch.add(self.bias[direction], self.linear("input", direction)(x))

    def both_input_gates(self, x: torch.Tensor) -> torch.Tensor:
        return torch.add(self.bias.view(-1), self.linear("both_input")(x)).view(x.shape[0], 2, -1)


def bf16_layer(layer, inputs, step_mask, h, c, inputs_repeat: bool = False):
    """`ElmoBiLstmLayer.forward` with bfloat16 multiplies (the fast path's organisation of the work)."""
    if inputs.is_cuda:
        return graphed_bilstm_layer(layer, inputs, step_mask, h, c, dtype=torch.bfloat16)
    multiplies = derived_weights(layer, "bf16", Bf16Multiplies)
    gate_cache = None
    if inputs_repeat and inputs.device.type == "cpu":
        gate_cache, settings = multiplies.gate_cache, layer.input_gate_cache
        gate_cache.max_words, gate_cache.add_new = settings.max_words, settings.add_new  # (as set now, not at opt-in)
    return fast_bilstm_layer(layer, inputs.float(), step_mask, h.float(), c.float(), multiplies=multiplies,
                             gate_cache=gate_cache)


# What each approximation derives from a layer's weights (`fast_bilstm.derived_weights` kinds), for its own use only.
DERIVED_KINDS = {"bf16": ("bf16", GRAPHS_KIND[torch.bfloat16]), "int8": ("int8",), "nn_lstm": ("nn_lstm",)}


def drop_approximation(layer) -> None:
    """Drop what the layer's approximation derived from its weights (and the bf16 mode's gate cache with it): when
    the layer leaves that mode, so that an approximation measured once (`approximation_deviation`) or left does not
    keep its copies of the weights, up to a full copy of them (`nn_lstm` on a GPU), and its cache."""
    if layer.approximation is not None:
        clear_derived_weights(layer, DERIVED_KINDS[layer.approximation])


def clear_approximation_caches(layer) -> None:
    """Empty what the approximate modes keep per word for `layer` (the bf16 mode's gate cache)."""
    multiplies = built_derived_weights(layer, "bf16")
    if multiplies is not None:
        multiplies.gate_cache.clear()


def approximate_bilstm_layer(layer, inputs, step_mask, h, c, inputs_repeat: bool = False):
    if layer.approximation == "nn_lstm":
        return nn_lstm_layer(layer, inputs, step_mask, h, c)
    # (again here: the model may have been moved or converted since it opted in)
    check_approximation(layer.approximation, layer)
    if layer.approximation == "bf16":
        return bf16_layer(layer, inputs, step_mask, h, c, inputs_repeat)
    return int8_layer(layer, inputs, step_mask, h, c)


def approximation_deviation(model, inputs: dict, kind: str) -> list[float]:
    """Largest |approximate - exact| of each layer of `hidden_states` on `inputs` (a tokenizer batch), for
    `kind` in `APPROXIMATIONS`. `model`: an `ElmoModel` or a head, whose biLM (`model.elmo`) is measured, in eval
    mode (the approximations run in no other), against the exact biLSTM whatever approximation was set. The model is
    left exact, in the mode it was in."""
    if kind not in APPROXIMATIONS:
        raise ValueError(f"unknown approximation {kind!r}: choose one of {APPROXIMATIONS}")
    model = model.base_model  # (a head's ElmoModel; an ElmoModel is its own)
    check_approximation(kind, model._bilstm_layers()[0])  # refused here, before any work, where it cannot run
    device = next(model.parameters()).device
    inputs = {name: torch.as_tensor(value).to(device) for name, value in inputs.items()}  # (NumPy batches too)
    training = model.training
    try:
        model.eval()
        model.set_lstm_approximation(None)
        with torch.no_grad():
            exact = model(**inputs, return_dict=True).hidden_states
            model.set_lstm_approximation(kind)
            approximate = model(**inputs, return_dict=True).hidden_states
    finally:
        model.set_lstm_approximation(None)
        model.train(training)
    # (in float64: a float64 model's differences are not float32 rounding, nor a layer the approximation leaves alone)
    return [(a.double() - e.double()).abs().max().item() if e.numel() else 0.0 for a, e in zip(approximate, exact)]
