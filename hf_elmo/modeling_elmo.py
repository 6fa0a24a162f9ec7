"""ELMo (Peters et al. 2018): a character CNN, a biLSTM language model and a learned scalar mix of its layers.

The computation follows the original TensorFlow model (bilm-tf) exactly, so converted weights give the
original numbers. Shapes: B = batch, T = words, K = characters per word, P = projection_dim,
C = cell_size, L = num_lstm_layers.
"""

import contextlib
import functools
import inspect
import logging
import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import parametrize
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import SequenceClassifierOutput, TokenClassifierOutput
from transformers.utils import ModelOutput, can_return_tuple

from .approximate import (APPROXIMATIONS, approximate_bilstm_layer, check_approximation, clear_approximation_caches,
                          drop_approximation)
from .configuration_elmo import VALUE_RULES, ElmoConfig, check_value
from .cuda_graphs import runs_graphed
from .fast_bilstm import clear_derived_weights, fast_bilstm_layer, inference_lock
from .fast_char_encoder import fast_char_encoder
from .files import atomic_file
from .fused_char_encoder import distinct_words, fused_char_encoder, fused_char_encoder_fallback
from .fused_bilstm import clear_training_graphs, fused_bilstm_layer, fused_training_fallback
from .fused_softmax import fused_sampled_softmax_loss, fused_softmax_fallback
from .static_shapes import has_static_shapes, static_batch_is_full
from .token_cache import DEFAULT_GATE_CACHE_BYTES, DEFAULT_MAX_WORDS, ElmoTokenCache
from .tokenization_elmo import ElmoTokenizer  # noqa: F401 - a saved model folder carries the tokenizer's code too


@dataclass
class ElmoModelOutput(ModelOutput):
    r"""
    last_hidden_state (`torch.FloatTensor` [B, T, 2P]):
        The top biLSTM layer, forward and backward halves concatenated.
    hidden_states (`tuple(torch.FloatTensor)`, L + 1 tensors of [B, T, 2P]):
        Every layer: the context-free token vector duplicated `[x; x]` (layer 0), then each biLSTM layer.
    elmo_representations (`tuple(torch.FloatTensor)`, `num_output_representations` tensors of [B, T, 2P]):
        The learned scalar mixes `gamma * sum_j softmax(s)_j * h_j` of `hidden_states`.
    attention_mask (`torch.LongTensor` [B, T]):
        1 at real words, 0 at padding (the tokenizer's convention). Every output is exactly zero at padding.
    final_states (`tuple(torch.FloatTensor)`, (h [L, B, 2P], c [L, B, 2C])):
        LSTM state after each row's `</S>` (forward half) and after its `<S>` (backward half), in AllenNLP's
        layout. Pass it as `initial_states` of the next batch to reproduce the original stateful model.
    """

    last_hidden_state: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    elmo_representations: tuple[torch.FloatTensor, ...] | None = None
    attention_mask: torch.LongTensor | None = None
    final_states: tuple[torch.FloatTensor, torch.FloatTensor] | None = None


def _check_character_ids(input_ids, config: ElmoConfig, name: str = "input_ids") -> None:
    """One clear error for what the character embedding cannot read: another shape, a non-integer dtype, or ids
    outside the alphabet (a word vocabulary's ids, say)."""
    chars = config.max_characters_per_token
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 3 or input_ids.shape[-1] != chars:
        raise ValueError(f"{name} must be [batch, words, {chars}] character ids, got {_shape_of(input_ids)}")
    _check_integer_ids(input_ids, name, "character")
    if input_ids.numel() and not _reads_no_values():
        low, high = torch.aminmax(input_ids)
        if bool((low < 0) | (high >= config.n_characters)):  # (one read of the device's result)
            outside = (low if low < 0 else high).item()
            raise ValueError(
                f"{name} holds {outside}, outside the character alphabet [0, {config.n_characters}): character ids "
                f"come from ElmoTokenizer (a word's spelling), not from a word vocabulary"
            )


def _check_inputs_embeds(inputs_embeds, config: ElmoConfig, dtype: torch.dtype) -> None:
    """What the char CNN cannot read in place of character ids: another shape, or another dtype than the model's
    character embedding gives."""
    shape = [config.max_characters_per_token, config.char_embedding_dim]
    if not isinstance(inputs_embeds, torch.Tensor) or inputs_embeds.dim() != 4 or list(inputs_embeds.shape[2:]) != shape:
        raise ValueError(f"inputs_embeds must be [batch, words, {shape[0]}, {shape[1]}] embedded characters, as "
                         f"model.get_input_embeddings()(input_ids) gives them, got {_shape_of(inputs_embeds)}")
    if inputs_embeds.dtype != dtype:
        raise ValueError(f"inputs_embeds is {inputs_embeds.dtype}, and the model's character embedding {dtype}: "
                         "pass them in the model's dtype")


def _check_one_input(input_ids, inputs_embeds) -> None:
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("pass input_ids (character ids) or inputs_embeds (their embeddings), not both"
                         if input_ids is not None else "pass input_ids (character ids) or inputs_embeds")


def _shape_of(value) -> list[int] | str:
    """A tensor's shape, or the type of what is not a tensor (a list, say), for an error message."""
    return list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__


def _check_integer_ids(ids: torch.Tensor, name: str, what: str) -> None:
    """Ids index a table: a float (12.7 would be read as 12) or a bool is refused rather than truncated."""
    if ids.dtype not in (torch.long, torch.int):
        raise ValueError(f"{name} must hold integer {what} ids (torch.long or torch.int), got {ids.dtype}")


def _word_mask(input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None, right_padded: bool = False,
               inputs_embeds: torch.Tensor | None = None) -> torch.Tensor:
    """[B, T] bool, True at the words the model reads: `attention_mask`, or by default the words that are not all
    zeros. A mask that is 1 at an all-zero word (an all-ones mask over a padded batch) would make the model read
    padding as a word and change the real words' vectors: refused. `right_padded`: the words must be a prefix of
    each row (ElmoForPreTraining). In place of `input_ids`, `inputs_embeds` [B, T, K, D], which show no padding:
    `attention_mask` is needed."""
    if input_ids is None:
        if attention_mask is None:
            raise ValueError("inputs_embeds need an attention_mask: embedded characters do not show which words are "
                             "padding (pass the tokenizer's, or all ones for unpadded rows)")
        words, shape, device = None, list(inputs_embeds.shape[:2]), inputs_embeds.device
    else:
        words = (input_ids > 0).any(-1)
        shape, device = list(words.shape), words.device
    mask = words
    if attention_mask is not None:
        if not isinstance(attention_mask, torch.Tensor) or list(attention_mask.shape) != shape:
            raise ValueError(f"attention_mask must be {shape}, got {_shape_of(attention_mask)}")
        attention_mask = attention_mask.to(device)
        mask = attention_mask.bool()
    if _reads_no_values() or (attention_mask is None and not right_padded):  # (the default mask cannot read
        return mask  # padding, and nothing else is to be checked)
    # Every check is read from the device at once; which one failed is worked out only for the message.
    reads_padding = (mask & ~words) if attention_mask is not None and words is not None else torch.zeros_like(mask)
    not_a_prefix = not_binary = torch.zeros((), dtype=torch.bool, device=mask.device)
    if attention_mask is not None and attention_mask.dtype != torch.bool:  # 2, 0.5, -1 or NaN would read as 1
        not_binary = ((attention_mask != 0) & (attention_mask != 1)).any()
    if right_padded:
        prefix = torch.arange(mask.shape[1], device=mask.device) < mask.sum(1, keepdim=True)
        not_a_prefix = (mask != prefix).any()
    if bool(not_binary | not_a_prefix | reads_padding.any()):
        if not_binary:
            values = attention_mask[(attention_mask != 0) & (attention_mask != 1)].unique().tolist()
            shown = ", ".join(dict.fromkeys(f"{value:g}" for value in values[:5]))
            raise ValueError(f"attention_mask must hold only 0 (padding) and 1 (a word), got {shown} "
                             f"({attention_mask.dtype})")
        if not_a_prefix:
            raise ValueError("ElmoForPreTraining reads right-padded rows: attention_mask must be 1 on a prefix of each row")
        row, position = reads_padding.nonzero()[0].tolist()
        raise ValueError(
            f"attention_mask is 1 at row {row}, position {position}, an all-zero (padding) word: it must be 0 at "
            "padding (pass the tokenizer's attention_mask, or none)"
        )
    return mask


def _check_class_ids(labels, shape, num_classes: int, name: str = "labels", classes: str = "the label ids",
                     padding: torch.Tensor | None = None, padding_counted: bool = False) -> None:
    """Targets of a cross-entropy: integer ids [shape] in [0, num_classes), -100 = no target. One clear error for
    another shape, a dtype that is not an integer (a float would be truncated) or an id outside the classes.
    `padding` [shape] bool: positions whose label is not read; `padding_counted`: they must hold -100 all the same,
    since the caller's count of labels counts the others (Trainer's `num_items_in_batch`)."""
    if not isinstance(labels, torch.Tensor) or labels.shape != shape:
        raise ValueError(f"{name} must be {list(shape)}, got {_shape_of(labels)}")
    _check_integer_ids(labels, name, "class")
    if _reads_no_values():
        return
    # One read of the device's result (no boolean indexing, whose result's size the host must wait for): bit 1 an
    # id outside the classes, bit 2 a labelled padding position. The first wrong id is looked up only for the message.
    outside = ((labels < 0) & (labels != -100)) | (labels >= num_classes)
    labelled_padding = None
    if padding is not None:
        padding = padding.to(labels.device)
        outside &= ~padding
        labelled_padding = (padding & (labels != -100)).any() if padding_counted else None
    found = outside.any().int() if labelled_padding is None else outside.any().int() + 2 * labelled_padding.int()
    found = int(found)
    if found & 1:
        raise ValueError(
            f"{name} holds {labels[outside][0].item()}, outside {classes} [0, {num_classes}) (-100 = no target)"
        )
    if found & 2:
        raise ValueError(f"{name}: padding positions hold labels other than -100, which Trainer counts in "
                         "num_items_in_batch (the loss would be divided by them too): pad labels with -100, as "
                         "DataCollatorForTokenClassification does")


def _is_exporting() -> bool:
    """True while torch.export traces the model. The fast paths and the per-word caches decide on data (which
    words repeat, what is cached, whether rows start together), which an exported graph cannot hold: the plain
    computation is exported."""
    # The flag that torch.compiler.is_exporting() returns, read directly for torch 2.10, whose TorchDynamo answered
    # that call with True under torch.compile as well (2.13's reads the flag); read directly, it is False there.
    flag = getattr(torch.compiler, "_is_exporting_flag", None)
    return torch.compiler.is_exporting() if flag is None else flag


def _eager_under_compile(forward):
    """`forward` as eager code inside `torch.compile`: a compiled model (`torch.compile(model)`, Trainer's
    `torch_compile`) runs hf-elmo's computation as eager mode runs it, fast paths and caches included, with the same
    numbers, and compiles what surrounds it. Those paths decide on data (which words repeat, what is cached, whether
    rows start together) and read it on the host, which a compiled graph cannot hold (TorchDynamo cannot trace the
    caches at all). torch.export still traces `forward` itself, which then takes the plain computation."""
    eager = torch.compiler.disable(forward, reason=(
        "hf-elmo's fast paths and per-word caches run eagerly inside a compiled model; for one graph of the whole "
        "model (fullgraph=True), export it: torch.export traces the plain computation"
    ))

    @functools.wraps(forward)
    def run(*args, **kwargs):
        compiling = torch.compiler.is_compiling() and not _is_exporting()  # (eager mode: one flag read, no detour)
        return (eager if compiling else forward)(*args, **kwargs)

    return run


# The options of the modules as the model builds them, which the fast paths assume: one swapped in with others
# computes something else from the same weights (a padding_idx stops a row's gradient, a dilation spreads a filter).
_BUILT_OPTIONS = {
    nn.Embedding: {"padding_idx": None, "max_norm": None, "scale_grad_by_freq": False, "sparse": False},
    nn.Conv1d: {"stride": (1,), "padding": (0,), "dilation": (1,), "groups": 1, "padding_mode": "zeros"},
}


def _why_it_must_be_called(module: nn.Module, built_as: type, name: str) -> str | None:
    """Why a fast path, which computes from `module`'s weights what `built_as` (nn.Linear, ...) computes instead of
    calling it, must call it: another class's forward (a quantized Linear, an adapter such as LoRA's, a subclass with
    its own), a forward set on the module itself (Accelerate's offloading hooks, a patch) or a hook of the module's
    (forward or backward) would not run, options other than the model builds it
    with (an embedding's padding_idx, a convolution's dilation, no bias) would be left out, and a weight of a tensor
    subclass (torchao's quantized tensors) cannot be multiplied as a plain one. None where nothing stands in the
    way. (One hook needs no output: transformers' enable_input_require_grads, which makes the embedding's output
    require gradients.)"""
    for key, parameter in module.named_parameters(recurse=False):
        if type(parameter) not in (torch.Tensor, nn.Parameter):
            return f"its {name}.{key} is a {type(parameter).__name__} (a tensor subclass), not a plain tensor"
    if type(module).forward is not built_as.forward:
        found = type(module).__name__
        if found == built_as.__name__:  # (a quantized Linear is a Linear too, of another module)
            found = f"{type(module).__module__}.{found}"
        return f"its {name} is a {found}, not the {built_as.__name__} it was built as"
    if "forward" in vars(module):
        return f"its {name} has a forward of its own, set on the module (Accelerate's hooks, a patch)"
    for option, built in _BUILT_OPTIONS.get(built_as, {}).items():
        if getattr(module, option, built) != built:
            return f"its {name} has {option}={getattr(module, option)!r}, which the model does not build it with"
    if built_as in (nn.Linear, nn.Conv1d) and getattr(module, "bias", None) is None:
        return f"its {name} has no bias, which the model builds it with"
    hooks = [*module._forward_hooks.values(), *module._forward_pre_hooks.values()]
    if any(getattr(hook, "__name__", None) != "make_inputs_require_grads" for hook in hooks):
        return f"a forward hook on its {name}"
    if module._backward_hooks or module._backward_pre_hooks:
        return f"a backward hook on its {name}"
    return None


def _global_hooks() -> tuple[dict, ...]:
    """The hooks registered for every module (a profiler's, a FLOP counter's): torch keeps them module-wide."""
    from torch.nn.modules import module as torch_module

    return tuple(getattr(torch_module, name, {}) for name in (
        "_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks", "_global_backward_pre_hooks"))


def _under_function_transforms(*tensors: torch.Tensor | None) -> bool:
    """Whether torch.func's transforms (grad, vmap, jvp) or forward-mode AD are at work on `tensors`: the fast paths
    read values on the host and are autograd Functions without their rules, so the plain computation runs there."""
    from torch.autograd import forward_ad

    if getattr(forward_ad, "_current_level", -1) >= 0:
        return True
    return any(tensor is not None and torch._C._functorch.is_functorch_wrapped_tensor(tensor) for tensor in tensors)


def _parametrized_for_one_call(module: nn.Module) -> bool:
    """Whether a parametrization that PEFT registers for the length of one call (its LoRA over parameters,
    `target_parameters`) is on `module`. One that stays (weight_norm's, a user's) is there when a recomputation runs."""
    return parametrize.is_parametrized(module) and any(
        type(parametrization).__module__.split(".")[0] == "peft"
        for parametrizations in module.parametrizations.values() for parametrization in parametrizations
    )


def _reads_no_values() -> bool:
    """Neither an exported program nor a CUDA graph recording (`static_shapes.py`) can read the device's values:
    there the inputs' values go unchecked (the caller of a recording checks them on the host)."""
    return _is_exporting() or has_static_shapes()


def _check_card_and_tags(model_card, tags) -> None:
    """`save_hub_folder`'s and `push_to_hub`'s `model_card` must be text and `tags` a list of strings."""
    if model_card is not None and not isinstance(model_card, str):
        hint = "Path(...).read_text(encoding='utf-8')" if isinstance(model_card, os.PathLike) else "str(card)"
        raise ValueError(f"model_card must be the card's text (a str), got {type(model_card).__name__}: pass {hint}")
    if tags is not None and (not isinstance(tags, (list, tuple)) or not all(isinstance(tag, str) for tag in tags)):
        hint = f": pass [{tags!r}]" if isinstance(tags, str) else ""
        raise ValueError(f"tags must be a list of strings, got {tags!r}{hint}")


def _card_bytes(model_card: str, tags) -> bytes:
    """The card's text with `tags` added to its own, as UTF-8: a ValueError where its header does not read as
    YAML (with tags to add) or the text is not UTF-8."""
    from transformers.utils.hub import ModelCard

    if tags:
        try:
            card = ModelCard(model_card)
        except Exception as error:  # noqa: BLE001 (yaml's errors among them: the header is not YAML)
            reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise ValueError(f"model_card: its header cannot be read to add the tags ({reason})") from None
        own = list(card.data.tags or [])
        card.data.tags = own + [tag for tag in dict.fromkeys(tags) if tag not in own]  # each once, in order
        model_card = str(card)
    try:
        return model_card.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"model_card is not UTF-8 text ({error.reason} at character {error.start})") from None


def _for_the_loss(logits: torch.Tensor) -> torch.Tensor:
    """Logits as a loss reads them: in float32 at least (half-precision logits would round the loss's small
    differences away), in float64 for a float64 model (whose loss and gradients keep its precision)."""
    return logits if logits.dtype == torch.float64 else logits.float()


def _tokenizer_from_config(config: ElmoConfig) -> ElmoTokenizer | None:
    """The tokenizer of a model spelled in UTF-8 bytes without word input, made from its config alone (it reads no
    files); None where the tokenizer needs its char.dic or word.dic, which only the tokenizer holds."""
    if config.alphabet != "bytes" or config.word_vocab_size:
        return None
    return ElmoTokenizer(max_characters_per_token=config.max_characters_per_token)


class _BakedSetting:
    """A module setting that the fast inference paths bake into what they keep (the gate bias with the forget bias
    added, the CUDA graphs' clips, the caches of per-word results): setting it again after construction drops what
    was kept (`module.setting_changed()`), as a change of a weight does, so that the next call reads the new value."""

    def __set_name__(self, owner, name: str) -> None:
        self.stored = "_" + name

    def __get__(self, module, owner=None):
        if module is None:
            return self
        try:
            return module.__dict__[self.stored]
        except KeyError:  # (not set yet: what any attribute that is missing gives, for hasattr and getattr)
            raise AttributeError(f"{type(module).__name__} has no {self.stored[1:]} yet") from None

    def __set__(self, module, value) -> None:
        was_set = self.stored in module.__dict__  # (the first time, in __init__, nothing is derived yet)
        module.__dict__[self.stored] = value
        if was_set:
            module.setting_changed()


class ElmoHighway(nn.Module):
    """One highway layer, in bilm-tf's form: `y = g * relu(W_t x + b_t) + (1 - g) * x`, `g = sigmoid(W_c x + b_c)`.

    The non-linearity is always ReLU, whatever `char_cnn_activation` says: both references hard-code it.
    """

    def __init__(self, width: int):
        super().__init__()
        self.transform = nn.Linear(width, width)
        self.carry = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.carry(x))
        return gate * F.relu(self.transform(x)) + (1 - gate) * x


class ElmoCharacterEncoder(nn.Module):
    """Char CNN, highway and projection: the context-free vector of each word, [N, K] char ids -> [N, P].

    Without autograd or autocast (and outside torch.export), each distinct word of a batch is computed once, by the
    faster equivalent in `fast_char_encoder.py` (unless `use_fast_path = False`); in eval mode `token_cache` also
    keeps the vectors of recently seen words for later batches (`token_cache.max_words = 0` turns it off; see
    `token_cache.py`). A word is its character ids and, with word input, its word id: the cache is keyed by both.
    When a weight needs a gradient, the fused training path of `fused_char_encoder.py` runs instead (unless
    `use_fast_path = False` or it does not cover the case), the same gradients faster.
    """

    activation = _BakedSetting()  # (the token cache holds vectors made with it)

    def __init__(self, config: ElmoConfig):
        super().__init__()
        # Row 0 is the padding row that inference adds in front of the trained character embeddings.
        self.char_embedding = nn.Embedding(config.n_characters, config.char_embedding_dim)
        self.char_cnn = nn.ModuleList(
            nn.Conv1d(config.char_embedding_dim, count, width) for width, count in config.char_cnn_filters
        )
        self.activation = torch.relu if config.char_cnn_activation == "relu" else torch.tanh
        width = config.num_char_filters
        self.highway = nn.ModuleList(ElmoHighway(width) for _ in range(config.num_highway_layers))
        self.word_embedding = (
            nn.Embedding(config.word_vocab_size, config.word_embedding_dim) if config.word_vocab_size else None
        )
        width += config.word_embedding_dim
        self.projection = nn.Linear(width, config.projection_dim) if config.has_char_projection else None
        self.pad_char_id = config.pad_char_id
        self.token_cache = ElmoTokenCache()
        self.use_fast_path = True
        # The embeddings' shapes that the ids and the CNN read (set_input_embeddings takes any, as transformers' does).
        self._embedding_shapes = {"char_embedding": [config.n_characters, config.char_embedding_dim],
                                  "word_embedding": [config.word_vocab_size, config.word_embedding_dim]}
        self._widest_filter = max(width for width, _ in config.char_cnn_filters)

    def _check_embedding_shapes(self) -> None:
        """One clear error for an embedding replaced by one of another shape (`set_input_embeddings`), which failed
        deep inside torch ("cannot reshape tensor of 0 elements", "index out of range in self")."""
        for name, needed in self._embedding_shapes.items():
            weight = getattr(getattr(self, name), "weight", None)
            if isinstance(weight, torch.Tensor) and list(weight.shape) != needed:
                raise ValueError(f"the model's {name} has a weight of shape {list(weight.shape)}, where its config "
                                 f"needs {needed}: set_input_embeddings was given one of another shape")

    def setting_changed(self) -> None:
        """Drop the cached word vectors (and derived weights), made with a setting that has changed."""
        with inference_lock(self):
            self.token_cache.clear()
            clear_derived_weights(self)

    @_eager_under_compile
    def forward(self, char_ids: torch.Tensor, word_ids: torch.Tensor | None = None) -> torch.Tensor:
        """char_ids [N, K] (and word_ids [N] with word input) -> [N, P]."""
        self._check_call(word_ids)
        # One row per word, everything the vectors depend on: [N, K] or [N, K + 1] (the word id last).
        rows = char_ids if word_ids is None else torch.cat([char_ids, word_ids.unsqueeze(1).to(char_ids.dtype)], 1)
        if _is_exporting() or _under_function_transforms(rows, *self.parameters()):
            return self._plain_forward(rows)
        if torch.is_grad_enabled() and any(parameter.requires_grad for parameter in self.parameters()):
            if fused_char_encoder_fallback(self) is None:
                return fused_char_encoder(self, rows)
            return self._plain_forward(rows)
        if has_static_shapes():  # the inference path's cache and word sorting read the device
            return self._plain_forward(rows)
        # Frozen under autograd, an embedding's hook (enable_input_require_grads') may make the output require
        # gradients, which the inference path (out= buffers, detached weights) cannot give; any other hook on a
        # module of the encoder, or a module that computes something else in its place (a quantized Linear), must
        # run, which only the plain computation does (uncached: it may change the output).
        hooked = self.modules_must_run() is not None or torch.is_grad_enabled() and any(
            module._forward_hooks or module._forward_pre_hooks
            for module in (self.char_embedding, self.word_embedding) if module is not None
        )
        if hooked or torch.is_autocast_enabled(char_ids.device.type):
            return self._plain_forward(rows)
        encode = self._fast_forward if self.use_fast_path else self._plain_forward
        with inference_lock(self):
            return self.token_cache.encode(encode, rows, list(self.parameters()), use_cache=not self.training)

    def modules_must_run(self) -> str | None:
        """Why the modules inside the encoder must be called (by the plain path), or None. The fast paths never call
        them: they compute from the weights what an embedding, a convolution, a highway layer and a linear map
        compute (see `_why_it_must_be_called`), and a hook on every module (a profiler's, a FLOP counter's) would not
        see them."""
        if any(_global_hooks()):
            return "a hook on every module (torch.nn.modules.module.register_module_forward_hook or its kin)"
        computed = [("char_embedding", self.char_embedding, nn.Embedding)]
        if self.word_embedding is not None:
            computed.append(("word_embedding", self.word_embedding, nn.Embedding))
        computed += [(f"char_cnn.{index}", conv, nn.Conv1d) for index, conv in enumerate(self.char_cnn)]
        for index, layer in enumerate(self.highway):
            computed.append((f"highway.{index}", layer, ElmoHighway))
            if type(layer).forward is ElmoHighway.forward:  # (its linear maps, where it is one)
                computed += [(f"highway.{index}.transform", layer.transform, nn.Linear),
                             (f"highway.{index}.carry", layer.carry, nn.Linear)]
        if self.projection is not None:
            computed.append(("projection", self.projection, nn.Linear))
        for name, module, built_as in computed:
            reason = _why_it_must_be_called(module, built_as, name)
            if reason is not None:
                return reason
        return None

    def split_rows(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Rows [N, K] or [N, K + 1] -> the character ids [N, K] and the word ids [N] (None without word input)."""
        if self.word_embedding is None:
            return rows, None
        return rows[:, :-1], rows[:, -1]

    def _fast_forward(self, rows: torch.Tensor) -> torch.Tensor:
        return fast_char_encoder(self, *self.split_rows(rows))

    def from_embeddings(self, chars: torch.Tensor, word_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Embedded characters [N, K, D], as `char_embedding` gives them for char ids [N, K] (and word_ids [N] with
        word input) -> [N, P]: the encoder after its character embedding (a model's `inputs_embeds`), computed as
        the plain path computes it."""
        self._check_call(word_ids)
        width = self._embedding_shapes["char_embedding"][1]  # (the config's: a wrapped embedding may not say it)
        widest = self._widest_filter
        if not isinstance(chars, torch.Tensor) or chars.dim() != 3 or chars.shape[-1] != width or chars.shape[1] < widest:
            raise ValueError(f"embedded characters must be [words, characters >= {widest}, {width}], got "
                             f"{_shape_of(chars)}")
        dtype = self.char_cnn[0].weight.dtype
        if chars.dtype != dtype:
            raise ValueError(f"embedded characters are {chars.dtype}, and the model {dtype}: pass them in its dtype")
        return self._from_embeddings(chars, word_ids)

    def _check_call(self, word_ids: torch.Tensor | None) -> None:
        self._check_embedding_shapes()
        if (word_ids is None) != (self.word_embedding is None):
            raise ValueError(
                "this model reads each word's id in word.dic as well as its characters: pass input_word_ids"
                if word_ids is None
                else "this model has no word input: it reads characters only, not input_word_ids"
            )
        if word_ids is not None:
            _check_integer_ids(word_ids, "word_ids", "word")

    def _plain_forward(self, rows: torch.Tensor) -> torch.Tensor:
        char_ids, word_ids = self.split_rows(rows)
        return self._from_embeddings(self.char_embedding(char_ids), word_ids)

    def _from_embeddings(self, chars: torch.Tensor, word_ids: torch.Tensor | None) -> torch.Tensor:
        chars = chars.transpose(1, 2)  # [N, D, K]
        # Max over every window, begin/end-of-word and padding characters included, as the original does.
        x = torch.cat([conv(chars).amax(dim=-1) for conv in self.char_cnn], dim=-1)
        return self.highway_and_projection(self.activation(x), word_ids)

    def highway_and_projection(self, x: torch.Tensor, word_ids: torch.Tensor | None) -> torch.Tensor:
        """The char CNN's output [N, F] (and the word ids [N]) -> the token vectors [N, P]."""
        for layer in self.highway:
            x = layer(x)
        if self.word_embedding is not None:
            x = torch.cat([self.word_embedding(word_ids), x], dim=-1)  # ELMoForManyLangs' order: word first
        if self.projection is not None:
            x = self.projection(x)
        return x


class ElmoBiLstmLayer(GradientCheckpointingLayer):
    """One layer of the forward and the backward LSTM, run together; the two never exchange information.

    The cell is TensorFlow's `LSTMCell` with projection and clipping, which `nn.LSTM` cannot express
    (it has no clipping). Parameters carry a leading direction axis: 0 = forward, 1 = backward. Gates are
    in torch's order (input, forget, cell, output).
    """

    forget_bias, cell_clip, proj_clip = _BakedSetting(), _BakedSetting(), _BakedSetting()

    def __init__(self, config: ElmoConfig):
        super().__init__()
        cell, proj = config.cell_size, config.projection_dim
        self.input_weight = nn.Parameter(torch.empty(2, 4 * cell, proj))  # [direction, 4C, P]
        self.recurrent_weight = nn.Parameter(torch.empty(2, 4 * cell, proj))  # [direction, 4C, P]
        # bilm-tf adds 1.0 to the forget gate at run time (config.forget_bias); its stored bias does not include it.
        self.bias = nn.Parameter(torch.empty(2, 4 * cell))  # [direction, 4C]
        self.forget_bias = config.forget_bias
        if config.has_lstm_projection:
            self.projection_weight = nn.Parameter(torch.empty(2, proj, cell))  # [direction, P, C]
        else:
            self.register_parameter("projection_weight", None)
        self.cell_clip = config.cell_clip
        self.proj_clip = config.proj_clip
        self.use_fast_path = True
        # The first layer's input gates per word, for inference (see fast_bilstm.py); `.max_words = 0` is off.
        gate_bytes = 2 * 4 * cell * 4  # both directions, float32
        self.input_gate_cache = ElmoTokenCache(min(DEFAULT_MAX_WORDS, DEFAULT_GATE_CACHE_BYTES // gate_bytes))
        self.approximation: str | None = None  # see ElmoPreTrainedModel.set_lstm_approximation

    def setting_changed(self) -> None:
        """Drop what the fast paths derived with a setting that has changed: the biased gate bias and the CUDA graphs
        (derived weights) and the cached input gates, the bf16 mode's too."""
        with inference_lock(self):
            self.input_gate_cache.clear()
            clear_approximation_caches(self)
            clear_derived_weights(self)

    def __call__(self, *args, **kwargs):
        # Checked here, where the caller's grad mode shows: transformers' checkpointing wraps `forward`, and reentrant
        # checkpointing runs it under no_grad.
        if (self.gradient_checkpointing and self.training and torch.is_grad_enabled()
                and _parametrized_for_one_call(self)):
            raise ValueError(
                "activation checkpointing would recompute a biLSTM layer in backward without PEFT's LoRA over its "
                "weights (target_parameters: PEFT adds it for the length of one call), which gives wrong gradients "
                "or none: turn activation checkpointing off, or put the adapters on the character encoder "
                "(target_modules) only"
            )
        if (self.gradient_checkpointing and self.training and torch.is_grad_enabled() and args
                and isinstance(args[0], torch.Tensor) and not args[0].requires_grad
                and any(parameter.requires_grad for parameter in self.parameters())):
            # Reentrant checkpointing gives the weights gradients only where an input requires one: transformers
            # arranges it by a hook on the character embedding, which embedded characters (inputs_embeds) skip.
            args = (args[0].detach().requires_grad_(), *args[1:])
        return super().__call__(*args, **kwargs)

    @_eager_under_compile
    def forward(
        self, inputs: torch.Tensor, step_mask: torch.Tensor, h: torch.Tensor, c: torch.Tensor,
        inputs_repeat: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """
        inputs: [2, B, S, P], the backward half already reversed within each row; step_mask: [B, S] bool,
        True for each row's first `length` steps; h: [2, B, P] and c: [2, B, C], the initial state;
        inputs_repeat: the inputs are token vectors (the first layer's), equal wherever a word repeats; the fast
        path then computes the input half of the gates once per distinct word, through `input_gate_cache` on CPU.
        Returns the outputs [2, B, S, P] (exactly 0 at masked steps) and the state after each row's last step.

        When nothing needs a gradient and autocast is off, the same computation runs reorganised for speed
        (`fast_bilstm.py`), or an opted-in approximation (`approximate.py`, in eval mode only: in training mode the
        exact computation runs, so that training never sees an approximation); when something needs one, the fused
        training path (`fused_bilstm.py`: the same gradients, one autograd Function), where it covers the case. With
        `use_fast_path = False` (and no approximation), under `torch.export`, in inference with parametrized weights
        (PEFT's LoRA, weight_norm), or where neither covers it, the plain loop below runs. It is the definition.
        """
        weights = (self.input_weight, self.recurrent_weight, self.bias, self.projection_weight)
        needs_grad = torch.is_grad_enabled() and any(
            tensor is not None and tensor.requires_grad for tensor in (inputs, h, c, *weights)
        )
        # torch.export traces the plain loop (the other paths have data-dependent shapes); torch.func's transforms
        # and forward-mode AD run it too (the other paths read values on the host, and have no jvp or vmap rules).
        if _is_exporting() or _under_function_transforms(inputs, h, c, *weights):
            return self._plain_forward(inputs, step_mask, h, c)
        autocast = torch.is_autocast_enabled(inputs.device.type)
        if self.approximation is not None and not self.training and (needs_grad or autocast):
            logger.warning_once(  # (in eval mode, the approximation was set to run: exact numbers would surprise)
                f"the biLSTM approximation {self.approximation!r} runs without autograd and autocast only (under "
                "torch.no_grad() or torch.inference_mode()): this call runs the exact biLSTM"
            )
        if needs_grad:
            if fused_training_fallback(self, inputs, h, c) is None:
                return fused_bilstm_layer(self, inputs, step_mask, h, c)
        elif (not autocast and inputs.shape[1] > 0 and inputs.shape[2] > 0
              and not has_static_shapes() and not parametrize.is_parametrized(self)):
            # (A parametrized weight, PEFT's LoRA over the layer's parameters or weight_norm's, is a new tensor at
            # every call: the paths below would derive their copies of it, or record their CUDA graphs, anew each time.)
            # The packed loops (the fast one's, the approximations') need every row to start at step 0 (ElmoModel's
            # rows start with <S>; a pretraining batch may hold an empty row); the GPU's graphed loop takes any
            # mask, and reading this one would make the host wait for the layer before.
            if self.approximation is None and not self.use_fast_path:
                return self._plain_forward(inputs, step_mask, h, c)  # (uses nothing the lock guards)
            with inference_lock(self):  # (the approximation too is read under it: set_lstm_approximation takes it)
                if self.approximation is not None and not self.training:
                    if bool(step_mask[:, 0].all()):
                        return approximate_bilstm_layer(self, inputs, step_mask, h, c, inputs_repeat)
                elif self.use_fast_path and (runs_graphed(self, inputs) or bool(step_mask[:, 0].all())):
                    # On a GPU the input multiply is cheap and the cache's lookup (keys on the host) is not.
                    gate_cache = self.input_gate_cache if inputs_repeat and inputs.device.type == "cpu" else None
                    return fast_bilstm_layer(
                        self, inputs, step_mask, h, c, gate_cache=gate_cache, use_cache=not self.training
                    )
        return self._plain_forward(inputs, step_mask, h, c)

    def _plain_forward(
        self, inputs: torch.Tensor, step_mask: torch.Tensor, h: torch.Tensor, c: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        directions, batch, steps, _ = inputs.shape
        # The input half of every gate, for all steps at once: one large multiply instead of one per step.
        input_gates = torch.baddbmm(
            self.bias.unsqueeze(1), inputs.reshape(directions, batch * steps, inputs.shape[-1]),
            self.input_weight.transpose(1, 2),
        ).view(directions, batch, steps, self.bias.shape[-1])
        recurrent_weight = self.recurrent_weight.transpose(1, 2)
        projection_weight = None if self.projection_weight is None else self.projection_weight.transpose(1, 2)
        outputs = []
        # unbind, not indexing: indexing one step at a time costs a full-size gradient buffer per step in backward.
        for t, step_input_gates in enumerate(input_gates.unbind(2)):
            gates = step_input_gates + torch.bmm(h, recurrent_weight)
            input_gate, forget_gate, cell_gate, output_gate = gates.chunk(4, dim=-1)
            new_c = torch.sigmoid(forget_gate + self.forget_bias) * c + torch.sigmoid(input_gate) * torch.tanh(cell_gate)
            if self.cell_clip is not None:
                new_c = new_c.clamp(-self.cell_clip, self.cell_clip)
            new_h = torch.sigmoid(output_gate) * torch.tanh(new_c)
            if projection_weight is not None:
                new_h = torch.bmm(new_h, projection_weight)
                if self.proj_clip is not None:
                    new_h = new_h.clamp(-self.proj_clip, self.proj_clip)
            # Rows past their end keep their state, so it ends as the state after their last step.
            valid = step_mask[:, t].view(1, batch, 1)
            c = torch.where(valid, new_c, c)
            h = torch.where(valid, new_h, h)
            outputs.append(torch.where(valid, new_h, 0.0))
        if not outputs:  # no steps at all (a batch of rows without words)
            return h.new_zeros(directions, batch, 0, h.shape[-1]), h, c
        return torch.stack(outputs, dim=2), h, c


class ElmoLmDropout(nn.Dropout):
    """bilm-tf's LM dropout (each LSTM layer's input and the softmax's): `nn.Dropout`'s inverted dropout, each value
    kept with probability 1 - p and scaled by 1 / (1 - p), with the mask drawn as `uniform >= p`. torch's CPU
    `bernoulli_` is slow: forward and backward of a [2, 64, 20, 300] input take 2.7 ms this way against 6.2 with
    `nn.Dropout` (AMD EPYC Zen 4, 2 threads), and pretraining draws three such masks a step."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        # Drawn and scaled in float32 whatever x's dtype: bf16 would round 1 / (1 - p) coarsely.
        mask = torch.rand_like(x, dtype=torch.float32).ge_(self.p).mul_(1 / (1 - self.p))
        return x * mask.to(x.dtype)


class ElmoScalarMix(nn.Module):
    """`gamma * sum_j softmax(s)_j * h_j` over the layers (Peters et al. 2018, eq. 1)."""

    def __init__(self, num_layers: int, do_layer_norm: bool):
        super().__init__()
        self.scalar_parameters = nn.Parameter(torch.zeros(num_layers))
        self.gamma = nn.Parameter(torch.ones(1))
        self.do_layer_norm = do_layer_norm

    def forward(self, layers: list[torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        """layers: L + 1 tensors [B, S, D]; mask: [B, S] bool. Returns [B, S, D]."""
        weights = torch.softmax(self.scalar_parameters, dim=0)
        if self.do_layer_norm:
            layers = [self._normalize(layer, mask) for layer in layers]
        return self.gamma * sum(weight * layer for weight, layer in zip(weights, layers))

    @staticmethod
    def _normalize(layer: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # AllenNLP's layer norm: one mean and variance over every unmasked value of the whole batch, in float32 at
        # least (in float16 the count alone passes its largest number, 65504, at 64 words of the released width).
        values = layer.to(torch.promote_types(layer.dtype, torch.float32))
        mask = mask.unsqueeze(-1).to(values.dtype)
        count = mask.sum() * layer.shape[-1]
        mean = (values * mask).sum() / count
        variance = (((values - mean) * mask) ** 2).sum() / count
        return ((values - mean) / torch.sqrt(variance + 1e-13)).to(layer.dtype)


# The biLM's own weights (in a head, under `elmo.`): a checkpoint must hold each of them, in the config's shape.
BILM_WEIGHT = re.compile(r"^(elmo\.)?(char_encoder|layers)\.")


logger = logging.getLogger(__name__)
# Where transformers logs its load report (a warning listing missing, unexpected and mis-shaped weights).
LOAD_REPORT_LOGGER = logging.getLogger("transformers.modeling_utils")


@contextlib.contextmanager
def _withheld_load_report():
    """Hold back transformers' load report while a model loads, yielding the list it is kept in: a load refused
    after it must not first print a report saying the weights were started afresh."""
    held = []

    def hold(record: logging.LogRecord) -> bool:
        if "LOAD REPORT" in record.getMessage():
            held.append(record)
            return False
        return True

    LOAD_REPORT_LOGGER.addFilter(hold)
    try:
        yield held
    finally:
        LOAD_REPORT_LOGGER.removeFilter(hold)


class HeadShapeMismatch(RuntimeError):
    """A checkpoint's head weight (a classifier saved for other labels) in another shape than the model's: a
    RuntimeError, as transformers raises for it, that names the tensor and both shapes."""

    def __init__(self, model: str, class_name: str, key: str, found: list[int], expected: list[int]):
        self.key, self.found, self.expected = key, found, expected
        super().__init__(f"{model}: holds the tensor {key} of shape {found}, where this {class_name} needs {expected}: "
                         "pass ignore_mismatched_sizes=True to start it afresh")


class ElmoPreTrainedModel(PreTrainedModel):
    config_class = ElmoConfig
    base_model_prefix = "elmo"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules = ["ElmoCharacterEncoder", "ElmoBiLstmLayer"]

    def __init__(self, config: ElmoConfig, *inputs, **kwargs):
        # A field set after the config was built (`config.cell_clip = 0`, `config.dropout = 1.5`) is checked and read
        # here as at construction: refused with the field's name, or a clip of 0 read as no clip.
        config.check_values()
        super().__init__(config, *inputs, **kwargs)

    @property
    def dummy_inputs(self) -> dict[str, torch.Tensor]:
        """A batch this model reads (transformers' default, [3, 5] token ids, is no ELMo input): 2 sentences of 3 and
        2 words, each word [begin-of-word, one character, end-of-word, padding...], the missing word all zeros;
        `input_word_ids` too (word id 0) for a model with word input."""
        config = self.config
        specials = {config.bos_char_id, config.eos_char_id, config.bow_char_id, config.eow_char_id, config.pad_char_id}
        letter = next((i for i in range(1, config.n_characters) if i not in specials), config.bow_char_id)
        word = [config.bow_char_id, letter, config.eow_char_id]
        word += [config.pad_char_id] * (config.max_characters_per_token - len(word))
        padding = [0] * config.max_characters_per_token
        inputs = {"input_ids": torch.tensor([[word] * 3, [word, word, padding]]),
                  "attention_mask": torch.tensor([[1, 1, 1], [1, 1, 0]])}
        if config.word_vocab_size:
            inputs["input_word_ids"] = torch.zeros(2, 3, dtype=torch.long)
        return inputs

    # Keyword arguments a forward takes beyond its own parameters and reads or may ignore (`return_dict` is taken by
    # `can_return_tuple` before `forward` sees it).
    _accepted_extra_kwargs: tuple[str, ...] = ()

    def _check_keywords(self, kwargs: dict) -> None:
        """One clear error for a keyword argument that `forward` does not read (a misspelt one, or `initial_states`
        given to a head, which only the biLM takes), rather than silently ignoring it."""
        # What transformers' wrappers pass every model unasked (PEFT's task models: output_attentions=None): read as
        # not asked for. Asked for, ELMo has no attentions.
        unknown = [name for name, value in kwargs.items() if name not in self._accepted_extra_kwargs
                   and not (name == "output_attentions" and (value is None or value is False))]
        if unknown:
            hint = ""
            if "initial_states" in unknown:
                hint = (" (a head starts every batch from the zero state; to carry the LSTM state, run its biLM, "
                        "model.elmo(..., initial_states=...), and apply the head yourself)")
            named = [name for name in inspect.signature(type(self).forward).parameters if name not in ("self", "kwargs")]
            raise ValueError(
                f"{type(self).__name__} got unexpected keyword argument(s) {', '.join(map(repr, unknown))}{hint}: it "
                f"takes {', '.join([*named, 'return_dict', *self._accepted_extra_kwargs])}"
            )

    def _check_input_devices(self, **ids) -> None:
        """One clear error for ids on another device than the model's character embedding, before anything reads
        them (they are not moved, as transformers does not move a batch). An embedding on the meta device is one
        that accelerate's offloading fills when it runs, and whose hook moves the ids there: nothing to check."""
        model_device = self.get_input_embeddings().weight.device
        if model_device.type == "meta":
            return
        for name, value in ids.items():
            if isinstance(value, torch.Tensor) and value.device != model_device:
                raise ValueError(f"{name} is on {value.device}, the model on {model_device}: move the batch there "
                                 "(`batch.to(model.device)`)")

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """`PreTrainedModel.from_pretrained`, refusing in a ValueError naming the tensor a checkpoint that lacks a
        weight of the biLM, holds one that the config has no place for (a highway layer more than it says), or holds
        one in another shape: transformers would start the first afresh and drop the second, saying so only in its load
        report, and refuse the third pointing to that report (which the project's commands silence). A head's weight in
        another shape (a classifier of other labels) is a `HeadShapeMismatch`, a RuntimeError as transformers raises,
        naming it and both shapes, unless `ignore_mismatched_sizes` lets it start afresh. A new head's weights (a task
        classifier, the pretraining softmax, a task's scalar mix) may be missing, and so may any weight of a
        `state_dict` passed in (the caller's own, which transformers completes by initialising the rest). A caller
        who asks for the load report (`output_loading_info=True`) gets it instead of the errors: it lists every
        missing, extra and mis-shaped weight (the model's mis-shaped weights started afresh, as
        `ignore_mismatched_sizes` would). A weights file that cannot be read (cut short by a copy or a download) is
        refused naming the model and what safetensors found. A refused load shows no load report (which would say the weights were started
        afresh); one that goes on shows it as transformers would."""
        wants_report = kwargs.pop("output_loading_info", False)  # (False given explicitly, as by default)
        reinitialise_heads = kwargs.pop("ignore_mismatched_sizes", False)
        try:
            if wants_report or kwargs.get("state_dict") is not None:
                # (asked for, the report lists a mis-shaped weight too, started afresh, where transformers would
                # raise its error pointing to that report)
                return super().from_pretrained(pretrained_model_name_or_path, *args, output_loading_info=wants_report,
                                               ignore_mismatched_sizes=reinitialise_heads or wants_report, **kwargs)
            # (every mis-shaped weight reaches the report, to be named below rather than in transformers' error)
            with _withheld_load_report() as report:
                model, info = super().from_pretrained(pretrained_model_name_or_path, *args, output_loading_info=True,
                                                      ignore_mismatched_sizes=True, **kwargs)
        except SafetensorError as error:
            raise ValueError(f"{pretrained_model_name_or_path}: its weights (.safetensors) cannot be read, the file is "
                             f"damaged or incomplete: {error}") from None
        problems = [f"lacks the tensor {key}" for key in sorted(info["missing_keys"]) if BILM_WEIGHT.match(key)]
        problems += [
            f"holds the tensor {key}, which its config.json has no place for"
            for key in sorted(info["unexpected_keys"]) if BILM_WEIGHT.match(key)
        ]
        problems += [
            f"holds the tensor {key} of shape {list(found)}, where its config.json needs {list(expected)}"
            for key, found, expected in sorted(info["mismatched_keys"]) if BILM_WEIGHT.match(key)
        ]
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ValueError(f"{pretrained_model_name_or_path}: not a complete {cls.__name__}: it {problems[0]}{more}")
        if not reinitialise_heads:
            weight_first = sorted(info["mismatched_keys"], key=lambda item: (item[0].endswith("bias"), item[0]))
            for key, found, expected in weight_first:  # (a weight's shape tells more than its bias's: the input width)
                if not BILM_WEIGHT.match(key):
                    raise HeadShapeMismatch(pretrained_model_name_or_path, cls.__name__, key, list(found), list(expected))
        for record in report:  # (a new head's weights, started afresh: transformers' report, as it would show it)
            LOAD_REPORT_LOGGER.handle(record)
        return model

    def _initialize_weights(self, module: nn.Module, is_custom_code: bool = False):
        # transformers skips a module of custom code that owns no parameter itself, as ElmoCharacterEncoder and
        # ElmoHighway (theirs are in child modules), lest in-place writes overwrite loaded weights. Every write of
        # `_init_weights` goes through `transformers.initialization`, which leaves loaded tensors alone: the module
        # is initialised as transformers' own models are.
        super()._initialize_weights(module, is_custom_code=False)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        """The initialisation of bilm-tf's training, so that a new model pretrains as the original did, and so that
        what a checkpoint lacks is initialised the same way.

        Character embedding U(-1, 1) with the padding row 0 at zero; CNN filters N(0, 1 / (width * D)) with relu
        (U(-0.05, 0.05) with tanh), biases 0; highway carry and transform N(0, 1 / F), carry bias -2, transform
        bias 0; projection N(0, 1 / its input width: F, or F + word_embedding_dim with word input), bias 0; word
        embedding (word input) N(0, 1 / dim); LSTM weights Glorot-uniform, biases 0 (the forget block
        1 - forget_bias, so that every cell starts with bilm-tf's forget bias of 1); scalar mixes s = 0, gamma = 1.
        The heads initialise their own classifier or softmax.
        """
        if isinstance(module, ElmoCharacterEncoder):
            embedding = module.char_embedding.weight
            init.uniform_(embedding, -1.0, 1.0)
            if not getattr(embedding, "_is_hf_initialized", False):
                init.zeros_(embedding[0])
            for conv in module.char_cnn:
                fan_in = conv.kernel_size[0] * conv.in_channels
                if self.config.char_cnn_activation == "relu":
                    init.normal_(conv.weight, std=math.sqrt(1.0 / fan_in))
                else:
                    init.uniform_(conv.weight, -0.05, 0.05)
                init.zeros_(conv.bias)
            if module.projection is not None:
                init.normal_(module.projection.weight, std=math.sqrt(1.0 / module.projection.in_features))
                init.zeros_(module.projection.bias)
            if module.word_embedding is not None:  # vectors of about unit length, as ELMoForManyLangs starts them
                init.normal_(module.word_embedding.weight, std=math.sqrt(1.0 / module.word_embedding.embedding_dim))
        elif isinstance(module, ElmoHighway):
            std = math.sqrt(1.0 / module.carry.in_features)
            init.normal_(module.carry.weight, std=std)
            init.constant_(module.carry.bias, -2.0)  # mostly carry the input through at the start
            init.normal_(module.transform.weight, std=std)
            init.zeros_(module.transform.bias)
        elif isinstance(module, ElmoBiLstmLayer):
            # Glorot-uniform over TensorFlow's kernel shape [input + hidden, 4C], TF's LSTMCell default.
            four_cells, proj = module.input_weight.shape[1:]
            bound = math.sqrt(6.0 / (2 * proj + four_cells))
            init.uniform_(module.input_weight, -bound, bound)
            init.uniform_(module.recurrent_weight, -bound, bound)
            init.zeros_(module.bias)
            if module.forget_bias != 1.0 and not getattr(module.bias, "_is_hf_initialized", False):
                # A forget bias stored in the weights (AllenNLP's cell) starts at 1.0 as bilm-tf's run-time one.
                cell = four_cells // 4
                init.constant_(module.bias[:, cell : 2 * cell], 1.0 - module.forget_bias)
            if module.projection_weight is not None:
                bound = math.sqrt(6.0 / sum(module.projection_weight.shape[1:]))
                init.uniform_(module.projection_weight, -bound, bound)
        elif isinstance(module, ElmoScalarMix):
            init.zeros_(module.scalar_parameters)
            init.ones_(module.gamma)

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        """Refused, before anything changes: ELMo spells every word in a fixed character alphabet, so there is no
        word vocabulary to resize (and transformers' resize would leave a broken model: `config.vocab_size` is the
        alphabet's size, read-only). Words added with `tokenizer.add_tokens` are spelled in that alphabet and need
        no new embedding. Without a new size, or with the alphabet's own (after rounding up to `pad_to_multiple_of`),
        returns the character embedding, as transformers does."""
        embedding = self.get_input_embeddings()
        size = embedding.num_embeddings if new_num_tokens is None else new_num_tokens
        if pad_to_multiple_of:  # (transformers rounds the size up to a multiple of it)
            size = -(-size // pad_to_multiple_of) * pad_to_multiple_of
        if size == embedding.num_embeddings:
            return embedding
        raise ValueError(
            f"{type(self).__name__} cannot resize its token embeddings to {size}: it reads each word as "
            f"characters, and its character embedding holds the fixed alphabet of {embedding.num_embeddings} ids, "
            "not a vocabulary. Words added with tokenizer.add_tokens([...]) are spelled in that alphabet and need no "
            "new embedding: do not resize"
        )

    def _bilstm_layers(self) -> list[ElmoBiLstmLayer]:
        """Every biLSTM layer of the model (of its biLM `.elmo` in a head), found by type: a wrapper (PEFT's LoRA over
        a layer's parameters) may stand in a layer's place in `ElmoModel.layers`."""
        return [module for module in self.modules() if isinstance(module, ElmoBiLstmLayer)]

    def set_lstm_approximation(self, kind: str | None) -> None:
        """Opt in to an approximate, faster biLSTM for inference, or back to the exact one with `None`: every
        biLSTM layer of the model (of its biLM `.elmo` in a head).

        `"bf16"` multiplies in bfloat16 (on a CPU with AVX512-BF16 or AMX-BF16, or a GPU); `"int8"` in int8 on
        CPU; both need a float32 model. `"nn_lstm"` runs `torch.nn.LSTM` (cuDNN on GPU) without the original's
        clipping, in the model's dtype. All change the numbers (see `approximate.py` and benchmarks/RESULTS.md).
        They run in eval mode without autograd or autocast only (under `torch.no_grad()` or
        `torch.inference_mode()`): in training mode the exact biLSTM runs, whatever is set, and so it does, with a
        warning, under autograd or autocast. Leaving a mode drops what it derived from the weights (their copies,
        the bf16 mode's cache of input gates).
        """
        if kind is not None and kind not in APPROXIMATIONS:
            raise ValueError(f"unknown biLSTM approximation {kind!r}: choose one of {APPROXIMATIONS} or None (exact)")
        layers = self._bilstm_layers()
        if layers:
            check_approximation(kind, layers[0])
        for layer in layers:
            with inference_lock(layer):  # (not while another thread's call runs the layer)
                if layer.approximation != kind:
                    drop_approximation(layer)
                layer.approximation = kind

    def set_fast_path(self, enabled: bool) -> None:
        """Run the fast paths (`use_fast_path` of the character encoder, of every biLSTM layer and of the pretraining
        softmax: for inference, and the fused training paths under autograd) or, with False, the plain definition
        everywhere, but for an approximation opted into with `set_lstm_approximation`, which still runs in eval
        mode (`set_lstm_approximation(None)` is the exact model)."""
        for module in self.modules():
            if isinstance(module, (ElmoCharacterEncoder, ElmoBiLstmLayer, ElmoForPreTraining)):
                module.use_fast_path = enabled

    def save_hub_folder(
        self,
        folder: str | os.PathLike,
        repo_id: str,
        *,
        model_card: str | None = None,
        tokenizer=None,
        tags: list[str] | None = None,
        max_shard_size: int | str | None = "50GB",
    ) -> None:
        """
        Write what `push_to_hub` uploads: `save_pretrained` (weights, config with the full `auto_map`, the model
        code), the tokenizer, and README.md = `model_card`.

        tokenizer (`ElmoTokenizer`, *optional*): saved into the folder. Default: for a model spelled in UTF-8 bytes
            without word input, the tokenizer its config describes (it needs no files), so that the repository loads
            its tokenizer as remote code too (transformers 5 looks for that code in tokenizer_config.json only); a
            model of a character vocabulary or with word input has none without it (char.dic and word.dic are the
            tokenizer's).

        model_card (`str`, *optional*): e.g. the card of a converted or fine-tuned folder
            (`hf_elmo.model_card.render_model_card`). Default: hf-elmo's card template filled with this model's
            sizes (transformers' generic card where only this file, not the hf-elmo package, is installed).
        tags (`list[str]`, *optional*): added to the card's tags, each once (those it has already are not repeated).
        A card that is not text (a Path, a ModelCard) or tags that are not a list of strings are refused before
        anything is written; README.md is written atomically.
        """
        from transformers.utils.hub import ModelCard

        # Checked before anything is written: a card that is no text would otherwise fail in the middle of the folder.
        _check_card_and_tags(model_card, tags)
        if model_card is None:
            try:  # the card template ships with the hf-elmo package, not with the Hub copy of this file
                from hf_elmo.model_card import default_model_card

                model_card = default_model_card(self, repo_id)
            except ImportError:
                model_card = str(ModelCard.from_template(ModelCard.card_data_class(library_name="transformers")))
        card_bytes = _card_bytes(model_card, tags)
        self.save_pretrained(folder, max_shard_size=max_shard_size)
        tokenizer = tokenizer if tokenizer is not None else _tokenizer_from_config(self.config)
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)
        with atomic_file(os.path.join(folder, "README.md"), "wb") as card_file:  # the old card or the whole new one
            card_file.write(card_bytes)

    def push_to_hub(
        self,
        repo_id: str,
        *,
        model_card: str | None = None,
        tokenizer=None,
        commit_message: str | None = None,
        commit_description: str | None = None,
        private: bool | None = None,
        token: bool | str | None = None,
        revision: str | None = None,
        create_pr: bool = False,
        max_shard_size: int | str | None = "50GB",
        tags: list[str] | None = None,
    ) -> str:
        """
        Upload the model to the Hub in one commit, as `PreTrainedModel.push_to_hub` does, except that README.md is
        hf-elmo's card (`model_card`) rather than one transformers generates, and that `tokenizer` can go in the same
        commit. See `save_hub_folder` for `model_card`, `tokenizer` and `tags`; the other arguments are those of
        `PreTrainedModel.push_to_hub`. Returns the commit's `huggingface_hub.CommitInfo` (a str: its address).
        """
        from huggingface_hub import CommitOperationAdd, HfApi
        from huggingface_hub.errors import HfHubHTTPError

        # huggingface_hub's public calls, in transformers' order: the repository, the branch, then one commit of
        # every file (`upload_folder` may split a large folder into several commits).
        _check_card_and_tags(model_card, tags)  # (before the repository is made, and the card given with its tags)
        if model_card is not None:
            _card_bytes(model_card, tags)
        api = HfApi(token=token)
        repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
        if commit_message is None:  # (transformers' default)
            name = type(self).__name__
            commit_message = "Upload model" if "Model" in name else f"Upload {name}"
        with tempfile.TemporaryDirectory() as folder:
            self.save_hub_folder(
                folder, repo_id, model_card=model_card, tokenizer=tokenizer, tags=tags, max_shard_size=max_shard_size
            )
            if revision is not None and not revision.startswith("refs/pr"):
                try:
                    api.create_branch(repo_id, branch=revision, exist_ok=True)
                except HfHubHTTPError as error:
                    # A pull request to a repository one cannot write to: its branch must exist already, and the
                    # commit says so if it does not.
                    if not (create_pr and error.response is not None and error.response.status_code == 403):
                        raise
            files = sorted(path for path in Path(folder).rglob("*") if path.is_file())
            return api.create_commit(
                repo_id,
                [CommitOperationAdd(path_in_repo=path.relative_to(folder).as_posix(), path_or_fileobj=str(path))
                 for path in files],
                commit_message=commit_message,
                commit_description=commit_description,
                revision=revision,
                create_pr=create_pr,
            )


class ElmoModel(ElmoPreTrainedModel):
    """The ELMo biLM: every layer for every word, and the learned scalar mixes of them.

    `ElmoForPreTraining` builds its body with `add_scalar_mix=False` (the language model does not use the mixes,
    and DDP must not see parameters without gradients) and with `lm_dropout`, bilm-tf's dropout on the input of
    every LSTM layer, active in training only. Loaded with `from_pretrained`, the model has its mixes and no LM
    dropout; the pretraining softmax of a pretraining checkpoint is dropped.
    """

    _keys_to_ignore_on_load_unexpected = [r"^softmax\."]
    _keys_to_ignore_on_load_missing = [r"^scalar_mixes\."]

    # transformers' tests and utilities pass output_hidden_states; every layer is returned whatever it says.
    _accepted_extra_kwargs = ("output_hidden_states",)

    def __init__(self, config: ElmoConfig, add_scalar_mix: bool = True, lm_dropout: float = 0.0):
        super().__init__(config)
        self.char_encoder = ElmoCharacterEncoder(config)
        self.layers = nn.ModuleList(ElmoBiLstmLayer(config) for _ in range(config.num_lstm_layers))
        self.scalar_mixes = nn.ModuleList(
            ElmoScalarMix(config.num_lstm_layers + 1, config.do_layer_norm)
            for _ in range(config.num_output_representations if add_scalar_mix else 0)
        )
        self.lstm_dropout = ElmoLmDropout(lm_dropout) if lm_dropout > 0 else None
        self.dropout = nn.Dropout(config.dropout)
        self.gradient_checkpointing = False
        self.post_init()

    def clear_caches(self) -> None:
        """Empty the inference caches of per-word results: the token cache (word vectors) and the first biLSTM
        layer's input gates. They empty themselves when their weights change (see `token_cache.py`); this is for
        timing a cold start or freeing their memory (after writing weights through `.data`, `weights_changed()`). The
        bf16 approximation's own cache of input gates (`approximate.py`) is emptied too. Each is emptied between
        other threads' calls, never during one."""
        with inference_lock(self.char_encoder):
            self.char_encoder.token_cache.clear()
        for layer in self._bilstm_layers():
            with inference_lock(layer):
                layer.input_gate_cache.clear()
                clear_approximation_caches(layer)

    def _apply(self, fn, *args, **kwargs):
        """`.to()`, `.half()`, `.float()`, `.double()`, `.cuda()`... (and a head's, which reach this module): the
        caches, the derived copies of the weights and the fused training path's recordings are dropped. Their
        fingerprints would see the new storage too, but not where the allocator hands a converted weight the very
        address of the old one (`.half().float()`)."""
        result = super()._apply(fn, *args, **kwargs)
        self._drop_inference_state(training_graphs=True)
        return result

    def weights_changed(self) -> None:
        """Say that the weights were written where the model cannot see it (through `.data`, or by code that swaps
        storages): the caches of per-word results and the copies of the weights that the fast inference paths
        derive (packed or reordered for the multiply kernels) are dropped, to be made again from the weights as they
        are. Writes through the parameters themselves (in place, an optimizer step, `load_state_dict`) are seen. The
        fused training path's recordings (CUDA graphs) are dropped too."""
        self._drop_inference_state(training_graphs=True)

    def _drop_inference_state(self, training_graphs: bool = False) -> None:
        """Empty the caches and drop the copies of the weights that the fast inference paths derive; with
        `training_graphs`, the fused training path's recordings too (kept across a change of mode, which an
        evaluation during training makes twice; they held their GPU memory after `.cpu()`)."""
        self.clear_caches()
        for module in self.modules():
            clear_derived_weights(module)
            if training_graphs:
                clear_training_graphs(module)

    def train(self, mode: bool = True) -> "ElmoModel":
        """Training (`mode=True`) or evaluation mode. A change of mode also drops the caches and the copies of the
        weights that the fast inference paths derive. (These also notice, in either mode, a weight changed in place
        or by an optimizer step, fused ones included: see `token_cache.weights_fingerprint`.)"""
        if mode != self.training:
            self._drop_inference_state()
        return super().train(mode)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.char_encoder.char_embedding

    def set_input_embeddings(self, value: nn.Embedding):
        self.char_encoder.char_embedding = value

    @_eager_under_compile
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        initial_states: tuple[torch.Tensor, torch.Tensor] | None = None,
        output_final_states: bool | None = True,
        input_word_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        **kwargs,
    ) -> ElmoModelOutput:
        r"""
        input_ids (`torch.LongTensor` [B, T, K]):
            Character ids of each word from `ElmoTokenizer`, without `<S>`/`</S>`: the model adds them.
            An all-zero word is padding, on either side. (Or `inputs_embeds` in their place.)
        attention_mask (`torch.Tensor` [B, T], *optional*):
            1 for words, 0 for padding (bools, integers or floats; any other value is refused). Defaults to the words
            that are not all zeros. A 1 at an all-zero (padding) word is refused: the model would read the padding as
            a word. Needed with `inputs_embeds`.
        inputs_embeds (`torch.FloatTensor` [B, T, K, D], *optional*):
            In place of `input_ids`, their embedded characters as `model.get_input_embeddings()(input_ids)` gives
            them (D = `config.char_embedding_dim`), in the model's dtype: for gradients with respect to the
            characters (attributions) or perturbed inputs. The char CNN then runs on the plain path, on these; `<S>`
            and `</S>` are embedded by the model. The `attention_mask` is trusted (embeddings show no padding);
            padding words are not read (their values do not matter).
        input_word_ids (`torch.LongTensor` [B, T], *optional*):
            Each word's id in word.dic, for a model with word input (`config.word_vocab_size`; its tokenizer
            returns them), integers (torch.long or torch.int); ignored at padding.
        initial_states (`tuple(torch.FloatTensor)`, (h [L, B, 2P], c [L, B, 2C]), *optional*):
            LSTM state to start from, usually the `final_states` of the previous batch, on the model's device (read
            in the model's dtype). Zeros when omitted, so the same sentence always gets the same vectors.
        output_final_states (`bool`, *optional*, defaults to `True`):
            None reads as the default (True), as transformers reads None for its `output_*` flags. False:
            `final_states` is None, and the LSTMs skip each row's last step (`</S>` forward, `<S>` backward), whose
            only results are the final state and outputs at `<S>`/`</S>`, which are not returned; every output is
            the same, to float rounding (the fast path's multiplies then cover fewer steps). (With `do_layer_norm`
            the scalar mixes' statistics include `<S>`/`</S>`: nothing is skipped.)
        Every layer is returned (`output_hidden_states` is accepted and has no effect); any other keyword argument is
        refused, naming it.
        """
        self._check_keywords(kwargs)
        _check_one_input(input_ids, inputs_embeds)
        self._check_input_devices(input_ids=input_ids, inputs_embeds=inputs_embeds, input_word_ids=input_word_ids)
        if inputs_embeds is None:
            _check_character_ids(input_ids, self.config)
        else:
            _check_inputs_embeds(inputs_embeds, self.config, self.get_input_embeddings().weight.dtype)
        if output_final_states is None:
            output_final_states = True
        word_mask = _word_mask(input_ids, attention_mask, inputs_embeds=inputs_embeds)
        self._check_word_ids(input_word_ids, word_mask, "input_word_ids")

        # Move each row's words to the front (this also handles left padding), in their order.
        layout = _SentenceLayout(word_mask)
        chars = input_ids if inputs_embeds is None else inputs_embeds
        boundaries = self.boundary_words(self.config.max_characters_per_token)
        if inputs_embeds is not None:
            boundaries = self.get_input_embeddings()(boundaries.to(inputs_embeds.device))
        chars, sequence_mask = self._add_sentence_boundaries(layout.pack(chars), layout.lengths, boundaries)
        word_ids = None
        if input_word_ids is not None:  # the same for the word ids, [B, T, 1]
            boundary_ids = torch.tensor([[self.config.bos_word_id], [self.config.eos_word_id]])
            word_ids = self._add_sentence_boundaries(layout.pack(input_word_ids)[..., None], layout.lengths, boundary_ids)
            word_ids = word_ids[0][..., 0]

        # Layer 0: the context-free token vectors, computed only for real positions, zero elsewhere.
        encode = self.char_encoder if inputs_embeds is None else self.char_encoder.from_embeddings
        token_vectors = encode(chars[sequence_mask], None if word_ids is None else word_ids[sequence_mask])
        token_layer = token_vectors.new_zeros(*sequence_mask.shape, token_vectors.shape[-1])
        token_layer = token_layer.masked_scatter(sequence_mask.unsqueeze(-1), token_vectors)

        # A layer-normalised mix takes its statistics over <S> and </S> too, so it needs their last step.
        skip_last_step = not output_final_states and not any(mix.do_layer_norm for mix in self.scalar_mixes)
        hidden_states, layers, final_states = self._run_bilstm(
            torch.cat([token_layer, token_layer], dim=-1), sequence_mask, initial_states,
            skip_last_step=skip_last_step, layout=layout,
        )
        mixes = [self.dropout(mix(layers, sequence_mask)) for mix in self.scalar_mixes]
        return ElmoModelOutput(
            last_hidden_state=hidden_states[-1],
            hidden_states=tuple(hidden_states),
            elmo_representations=tuple(layout.unpack(mix) for mix in mixes),
            attention_mask=word_mask.long(),
            final_states=final_states if output_final_states else None,
        )

    def _check_word_ids(self, word_ids: torch.Tensor | None, mask: torch.Tensor, name: str) -> None:
        """Word ids [B, T] are given exactly when the model reads them, and are in word.dic where `mask` is set."""
        vocab_size = self.config.word_vocab_size
        if (word_ids is None) != (vocab_size == 0):
            raise ValueError(
                f"this model reads each word's id in word.dic as well as its characters: pass {name} [batch, words] "
                "(its tokenizer returns them)" if word_ids is None else
                f"this model has no word input (config.word_vocab_size is 0): it does not read {name}"
            )
        if word_ids is None:
            return
        if not isinstance(word_ids, torch.Tensor) or word_ids.shape != mask.shape:
            raise ValueError(f"{name} must be [{mask.shape[0]}, {mask.shape[1]}], got {_shape_of(word_ids)}")
        _check_integer_ids(word_ids, name, "word")
        if _reads_no_values():
            return
        if bool((((word_ids < 0) | (word_ids >= vocab_size)) & mask.to(word_ids.device)).any()):
            raise ValueError(f"{name} holds ids outside word.dic [0, {vocab_size}) at words that are not padding")

    def boundary_words(self, chars: int) -> torch.Tensor:
        """The character ids of the sentence boundary words `<S>` and `</S>` (`<bos>`/`<eos>`): [2, chars]."""
        config = self.config
        words = torch.full((2, chars), config.pad_char_id, dtype=torch.long)
        words[:, 0], words[:, 2] = config.bow_char_id, config.eow_char_id
        words[0, 1], words[1, 1] = config.bos_char_id, config.eos_char_id
        return words

    @staticmethod
    def _add_sentence_boundaries(
        packed: torch.Tensor, lengths: torch.Tensor, boundaries: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, T, ...] left-aligned words (character ids [B, T, K], say) -> [B, T + 2, ...] `<S> words </S>` and its
        mask [B, T + 2]; `boundaries` [2, ...] are the `<S>` and `</S>` rows."""
        batch, words = packed.shape[:2]
        positions = torch.arange(words + 2, device=packed.device)
        sequence_mask = positions < (lengths + 2).unsqueeze(1)
        boundaries = boundaries.to(packed)
        sequences = packed.new_zeros(batch, words + 2, *packed.shape[2:])
        sequences[:, 1 : words + 1] = packed  # what padding holds is overwritten by `</S>` or masked out
        sequences[:, 0] = boundaries[0]
        sequences[torch.arange(batch, device=packed.device), lengths + 1] = boundaries[1]
        return sequences, sequence_mask

    def _run_bilstm(
        self,
        layer0: torch.Tensor,
        sequence_mask: torch.Tensor,
        initial_states: tuple[torch.Tensor, torch.Tensor] | None,
        skip_last_step: bool = False,
        layout: "_SentenceLayout | None" = None,
        return_hidden_states: bool = True,
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
        """layer0 [B, S, 2P]: what the forward LSTM reads (first half) and what the backward LSTM
        reads (second half; pretraining gives it a text of its own, as bilm-tf does), in reading order.

        Returns every layer (layer 0 included) as returned to the caller (`layout.unpack` of it, [B, T, 2P], or
        as computed, [B, S, 2P]), every layer as computed (for the scalar mixes), and the final states (h, c).
        With autograd and `return_hidden_states`, each layer the LSTMs read is rebuilt from the returned one
        (`layout.repack`, an exact copy), so the returned hidden states are the tensors the model used, and
        gradients reach each of them.
        `skip_last_step`: each direction stops one step before its row's end, so the layers hold no valid output
        at the row's two ends (`<S>`, `</S>`), and the final states are those of the step before.
        """
        batch, steps, width = layer0.shape
        proj = width // 2
        # The backward LSTM reads each row from its last position down to its first: reversing every row
        # within its length lets both directions share one left-to-right loop.
        lengths = sequence_mask.sum(dim=1, keepdim=True)
        positions = torch.arange(steps, device=layer0.device).unsqueeze(0)
        reverse = torch.where(sequence_mask, lengths - 1 - positions, positions).unsqueeze(-1).expand(-1, -1, proj)
        step_mask = sequence_mask & (positions < lengths - 1) if skip_last_step else sequence_mask
        h, c = self._split_states(initial_states, batch, layer0)

        # Rebuilding each layer's input from the returned tensor matters only to autograd, and only when returned.
        link = return_hidden_states and torch.is_grad_enabled()
        hidden_states, layers, final_h, final_c = [], [], [], []
        layer, output = layer0, None
        for index in range(len(self.layers) + 1):
            hidden = layer if layout is None else layout.unpack(layer)
            if link and layout is not None:
                layer = layout.repack(hidden, layer)
            hidden_states.append(hidden)
            layers.append(layer)
            if index == len(self.layers):
                break
            if link or output is None:
                forward_input, backward_input = layer.split(proj, dim=-1)
                x = torch.stack([forward_input, backward_input.gather(1, reverse)])
            else:
                x = output  # the previous layer's output, as the LSTMs read it (the same values)
            if self.lstm_dropout is not None:
                x = self.lstm_dropout(x)  # bilm-tf drops each layer's input; the residual adds the dropped input
            output, layer_h, layer_c = self.layers[index](x, step_mask, h[index], c[index], inputs_repeat=index == 0)
            if self.config.use_skip_connections and index > 0:
                output = output + x  # the carried state stays the pre-residual one, as in the original
            layer = torch.cat([output[0], output[1].gather(1, reverse)], dim=-1)
            final_h.append(torch.cat([layer_h[0], layer_h[1]], dim=-1))
            final_c.append(torch.cat([layer_c[0], layer_c[1]], dim=-1))
        return hidden_states, layers, (torch.stack(final_h), torch.stack(final_c))

    def _split_states(
        self, initial_states: tuple[torch.Tensor, torch.Tensor] | None, batch: int, like: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """AllenNLP's (h [L, B, 2P], c [L, B, 2C]) -> per direction (h [L, 2, B, P], c [L, 2, B, C])."""
        layers, proj, cell = self.config.num_lstm_layers, self.config.projection_dim, self.config.cell_size
        if initial_states is None:
            return like.new_zeros(layers, 2, batch, proj), like.new_zeros(layers, 2, batch, cell)
        if not (isinstance(initial_states, (tuple, list)) and len(initial_states) == 2
                and all(isinstance(state, torch.Tensor) for state in initial_states)):
            got = (f"{len(initial_states)} values ({', '.join(str(_shape_of(state)) for state in initial_states)})"
                   if isinstance(initial_states, (tuple, list)) else _shape_of(initial_states))
            raise ValueError(
                f"initial_states must be (h [{layers}, {batch}, {2 * proj}], c [{layers}, {batch}, {2 * cell}]), two "
                f"tensors (a previous output's final_states), got {got}"
            )
        h, c = initial_states
        for name, state, width in (("h", h, 2 * proj), ("c", c, 2 * cell)):
            if tuple(state.shape) != (layers, batch, width):
                raise ValueError(
                    f"initial_states {name} must be [{layers}, {batch}, {width}] "
                    f"(layers, batch, forward and backward halves), got {list(state.shape)}"
                )
            # Not moved (as transformers does not move a cache), nor an integer tensor cast: either is a caller's slip.
            if state.device != like.device:
                raise ValueError(f"initial_states {name} is on {state.device}, the model on {like.device}: move it there "
                                 f"(a previous output's final_states are there already)")
            if not state.is_floating_point():
                raise ValueError(f"initial_states {name} must be floating-point (a previous output's final_states), "
                                 f"got {state.dtype}")
        h = h.to(like.dtype).view(layers, batch, 2, proj).transpose(1, 2)
        c = c.to(like.dtype).view(layers, batch, 2, cell).transpose(1, 2)
        return h, c


class _SentenceLayout:
    """Where each row's words go in the LSTMs' input: `[B, T]` rows, words anywhere (left or right padding), become
    left-aligned sequences `<S> words </S>` of `S = T + 2` positions, and back."""

    def __init__(self, word_mask: torch.Tensor):
        self.words = word_mask.shape[1]
        self.rows = torch.arange(word_mask.shape[0], device=word_mask.device).unsqueeze(1)
        self.lengths = word_mask.sum(dim=1)
        # The stable sort of the rows by "not a word", from running counts (ONNX has no stable sort): `restore`
        # [B, T] is where each position goes, the words first in their order and the padding after them, and
        # `order` its inverse, the position that each place takes.
        is_word = word_mask.long()
        padding_place = self.lengths.unsqueeze(1) + (1 - is_word).cumsum(1) - 1
        self.restore = torch.where(word_mask, is_word.cumsum(1) - 1, padding_place)
        self.order = torch.zeros_like(self.restore).scatter(
            1, self.restore, torch.arange(self.words, device=word_mask.device).expand_as(self.restore)
        )
        positions = torch.arange(self.words + 2, device=word_mask.device)
        # True at the S positions that hold a word (not <S>, </S> or padding).
        self.word_positions = (positions >= 1) & (positions <= self.lengths.unsqueeze(1))

    # Indexing by [B, T] positions rather than gather: backward keeps those, not an index as large as the layer.
    def pack(self, rows: torch.Tensor) -> torch.Tensor:
        """[B, T, ...] -> the same rows, words first in their order, padding after."""
        return rows[self.rows, self.order]

    def unpack(self, layer: torch.Tensor) -> torch.Tensor:
        """[B, S, D] -> [B, T, D]: drop `<S>` and `</S>`, put every word back where it came from, 0 at padding."""
        words = layer[:, 1 : self.words + 1] * self.word_positions[:, 1 : self.words + 1].unsqueeze(-1)
        return words[self.rows, self.restore]

    def repack(self, words: torch.Tensor, layer: torch.Tensor) -> torch.Tensor:
        """`layer` [B, S, D] with its words taken from `words` = `unpack(layer)` [B, T, D]: the same values, computed
        from `words`."""
        moved = torch.cat([layer[:, :1], self.pack(words), layer[:, self.words + 1 :]], dim=1)
        return torch.where(self.word_positions.unsqueeze(-1), moved, layer)


class ElmoTaskModel(ElmoPreTrainedModel):
    """
    What the task heads share, as Peters et al. (2018) use ELMo: the body's scalar mix is the task's mix, learned with
    the head. By default (`finetune_bilm=False`, feature-based) the biLM is frozen: only the mix (weights and gamma)
    and the classifier train, and no gradient is computed below the mix. `finetune_bilm=True` trains everything.
    """

    # The loss divides by Trainer's `num_items_in_batch`, so Trainer must not divide again under accumulation.
    accepts_loss_kwargs = True
    # The fewest labels the head learns from, and why.
    min_labels, min_labels_reason = 1, "one label (num_labels=1 for regression)"

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        if config.num_output_representations != 1:
            raise ValueError(
                f"{type(self).__name__} learns one task mix: ElmoConfig.num_output_representations must be 1, "
                f"got {config.num_output_representations}"
            )
        if config.num_labels < self.min_labels:  # (num_labels=-1 gives none at all: transformers leaves id2label empty)
            raise ValueError(f"{type(self).__name__} needs at least {self.min_labels_reason}: config.num_labels is "
                             f"{config.num_labels}")
        self.num_labels = config.num_labels
        self.elmo = ElmoModel(config)

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        loaded = super().from_pretrained(*args, **kwargs)
        # Loading re-creates every parameter as trainable: freeze the biLM again unless it is fine-tuned.
        (loaded[0] if isinstance(loaded, tuple) else loaded).set_bilm_trainable()
        return loaded

    def set_bilm_trainable(self) -> None:
        """Make only the task mix and the head trainable, or everything with `config.finetune_bilm`.

        Frozen parameters get `requires_grad=False`, so that optimizers skip them and DDP does not wait for their
        gradients.
        """
        for name, parameter in self.elmo.named_parameters():
            parameter.requires_grad_(self.config.finetune_bilm or name.startswith("scalar_mixes."))

    def enable_input_require_grads(self):
        # Activation checkpointing asks for gradients at the character embedding; a frozen biLM needs none.
        if self.config.finetune_bilm:
            super().enable_input_require_grads()

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        super()._init_weights(module)
        if module is getattr(self, "classifier", None):
            init.normal_(module.weight, std=self.config.initializer_range)
            init.zeros_(module.bias)

    # What transformers passes a head besides its inputs: Trainer's count of the labels of the optimizer step (the
    # heads accept loss kwargs, above).
    _accepted_extra_kwargs = ("num_items_in_batch",)

    def _warn_of_a_loss_without_the_penalty(self, labels) -> None:
        """Training without labels, the loss is computed outside the head (Trainer's label smoothing, or its
        `compute_loss_func`, from the logits): the mix's L2 penalty, part of the head's own loss, is then left out."""
        if labels is None and self.training and torch.is_grad_enabled() and self.config.scalar_mix_l2_coef:
            logger.warning_once(
                f"{type(self).__name__} is training without labels, so its loss is computed outside it (by Trainer's "
                "label smoothing or compute_loss_func, say), without the L2 penalty on the mix that "
                f"scalar_mix_l2_coef={self.config.scalar_mix_l2_coef} asks for: it is part of the loss the head "
                "computes from labels"
            )

    def _task_loss(
        self, summed_loss: torch.Tensor, num_items: torch.Tensor, num_items_in_batch: torch.Tensor | int | None
    ) -> torch.Tensor:
        """
        The loss of this batch, `summed_loss` over its `num_items` labels, plus the L2 penalty on the mix weights.

        Under gradient accumulation Trainer passes `num_items_in_batch`, the labels of the whole optimizer step:
        dividing by it, and adding only this batch's share of the penalty, makes the accumulated gradient exactly
        that of one large batch.
        """
        if num_items_in_batch is None:
            denominator, share = num_items.clamp(min=1), 1.0
        else:
            # (at least 1: a whole accumulation window of labels all -100 has a loss of 0, not NaN)
            denominator = torch.as_tensor(num_items_in_batch, device=summed_loss.device).clamp(min=1)
            share = num_items / denominator
        loss = summed_loss / denominator
        # (set on the model's config after it was built, a negative one would be kept silently)
        check_value("ElmoConfig.scalar_mix_l2_coef", self.config.scalar_mix_l2_coef, *VALUE_RULES["scalar_mix_l2_coef"])
        if self.config.scalar_mix_l2_coef:
            weights = self.elmo.scalar_mixes[0].scalar_parameters
            loss = loss + self.config.scalar_mix_l2_coef * weights.pow(2).sum() * share
        return loss


class ElmoForSequenceClassification(ElmoTaskModel):
    """
    Sentence classification or regression: the task mix of every word, pooled over the sentence
    (`config.sequence_pooling`: mean, max or both), then a linear classifier.
    """

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        pooled_size = config.hidden_size * (2 if config.sequence_pooling == "mean_max" else 1)
        self.classifier = nn.Linear(pooled_size, config.num_labels)
        self.post_init()
        self.set_bilm_trainable()

    @_eager_under_compile
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        input_word_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput:
        r"""
        input_ids (`torch.LongTensor` [B, T, K]), attention_mask ([B, T], *optional*), input_word_ids ([B, T], for a
            model with word input) and inputs_embeds ([B, T, K, D], in place of input_ids): as for `ElmoModel`.
        labels (`torch.Tensor`, *optional*):
            [B] integer class ids in [0, num_labels) (-100 = ignore) for `num_labels > 1`, [B] numbers for
            regression (`num_labels == 1`), or [B, num_labels] 0/1 floats for multi-label classification
            (`problem_type` decides, as in transformers). Labels of another shape, dtype or range are refused.
        Returns logits [B, num_labels]. Any other keyword argument is refused (Trainer's `num_items_in_batch` aside).
        """
        self._check_keywords(kwargs)
        self._warn_of_a_loss_without_the_penalty(labels)
        outputs = self.elmo(  # (a dict whatever the shared config's return_dict: the head reads it by name)
            input_ids, attention_mask=attention_mask, input_word_ids=input_word_ids, inputs_embeds=inputs_embeds,
            output_final_states=False, return_dict=True,
        )
        pooled = self.pool(outputs.elmo_representations[0], outputs.attention_mask.bool())
        logits = self.classifier(pooled)
        loss = None
        if labels is not None:
            summed_loss, num_items = self._summed_loss(logits, labels)
            loss = self._task_loss(summed_loss, num_items, kwargs.get("num_items_in_batch"))
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        return SequenceClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states if output_hidden_states else None
        )

    def pool(self, words: torch.Tensor, word_mask: torch.Tensor) -> torch.Tensor:
        """words [B, T, 2P], word_mask [B, T] -> [B, 2P] (mean or max) or [B, 4P] (mean_max, mean first)."""
        pooling = self.config.sequence_pooling  # (set on the model's config after it was built: checked here)
        check_value("ElmoConfig.sequence_pooling", pooling, *VALUE_RULES["sequence_pooling"])
        if (pooling == "mean_max") != (self.classifier.in_features == 2 * words.shape[-1]):
            raise ValueError(f"ElmoConfig.sequence_pooling is {pooling!r}, but the classifier was built for "
                             f"{self.classifier.in_features} inputs: set it before the model is built")
        mask = word_mask.unsqueeze(-1)
        pooled = []
        if pooling in ("mean", "mean_max"):
            pooled.append((words * mask).sum(1) / mask.sum(1).clamp(min=1))
        if pooling in ("max", "mean_max"):
            if words.shape[1] == 0:
                pooled.append(words.new_zeros(words.shape[0], words.shape[2]))
            else:
                highest = words.masked_fill(~mask, float("-inf")).amax(1)
                pooled.append(torch.where(mask.any(1), highest, 0.0))  # a sentence without words pools to 0
        return torch.cat(pooled, dim=-1)

    def _summed_loss(self, logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss summed over the batch's labels, and how many labels counted (what Trainer counts, too)."""
        if not isinstance(labels, torch.Tensor):
            raise ValueError(f"labels must be a tensor, got {type(labels).__name__}")
        batch, problem_type = logits.shape[0], self.config.problem_type
        # (set on the model's config after it was built, a misspelt one would be read as multi-label below)
        check_value("ElmoConfig.problem_type", problem_type, *VALUE_RULES["problem_type"])
        if problem_type is None:  # as transformers decides it; kept in the config once the labels pass the checks
            if self.num_labels == 1:
                problem_type = "regression"
            elif labels.dtype in (torch.long, torch.int):
                problem_type = "single_label_classification"
            else:
                problem_type = "multi_label_classification"
        if problem_type == "single_label_classification" and self.num_labels < 2:
            # A config saved after a classification run keeps its problem_type; reloaded with num_labels=1 to be a
            # regressor, the head trained silently on a cross-entropy over one class. (A warning, not an error:
            # transformers' common tests run this combination.)
            logger.warning_once(
                f"{type(self).__name__} has problem_type 'single_label_classification' and num_labels "
                f"{self.num_labels}: the cross-entropy over one class is always 0, so nothing learns; for regression, "
                "set config.problem_type to 'regression' (or None) and pass the labels as numbers"
            )
        labels, logits = labels.to(logits.device), _for_the_loss(logits)
        if problem_type == "single_label_classification":
            labels = labels.view(batch) if labels.shape == (batch, 1) else labels  # transformers reads [B, 1] as [B]
            _check_class_ids(labels, (batch,), self.num_labels)
        else:  # a number per logit
            shapes = [(batch, self.num_labels)]
            if problem_type == "regression" and self.num_labels == 1:
                shapes.insert(0, (batch,))
            if labels.shape not in shapes:
                what = "numbers for regression" if problem_type == "regression" else (
                    "0/1 floats for multi-label classification (single-label class ids are int64 or int32)")
                expected = " or ".join(str(list(shape)) for shape in shapes)
                raise ValueError(f"labels must be {expected} {what}, got {labels.dtype} {list(labels.shape)}")
            if problem_type != "regression" and labels.numel() and not _reads_no_values():
                low, high = torch.aminmax(labels.float())
                if not bool((low >= 0) & (high <= 1)):  # (one read of the device's result; NaN fails both)
                    raise ValueError(f"labels holds {(low if not low >= 0 else high).item()}: multi-label classification "
                                     "reads a 0/1 (or a probability in [0, 1]) per label")
        self.config.problem_type = problem_type
        if problem_type == "single_label_classification":
            summed = F.cross_entropy(logits, labels.long(), ignore_index=-100, reduction="sum")
            return summed, labels.ne(-100).sum()
        if problem_type == "regression":
            summed = F.mse_loss(logits.view(batch, -1), labels.to(logits.dtype).view(batch, -1), reduction="sum")
        else:
            summed = F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype), reduction="sum")
        return summed, torch.tensor(labels.numel(), device=logits.device)


class ElmoForTokenClassification(ElmoTaskModel):
    """
    Word labelling (NER, POS, chunking): a linear classifier over the task mix of each word. Every input word is one
    position, so word-level labels line up with `input_ids` directly (`ElmoBatchEncoding.word_ids()`).
    """

    min_labels, min_labels_reason = 2, "two labels (the cross-entropy over one is always 0: nothing would learn)"

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()
        self.set_bilm_trainable()

    @_eager_under_compile
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        input_word_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        **kwargs,
    ) -> TokenClassifierOutput:
        r"""
        input_ids (`torch.LongTensor` [B, T, K]), attention_mask ([B, T], *optional*), input_word_ids ([B, T], for a
            model with word input) and inputs_embeds ([B, T, K, D], in place of input_ids): as for `ElmoModel`.
        labels (`torch.LongTensor` [B, T], *optional*):
            A label id in [0, num_labels) per word; -100 is ignored, and so is every padding position (which
            under Trainer must hold -100: Trainer counts the other labels in `num_items_in_batch`). Labels of
            another shape (one row for the whole batch, say), a float dtype or ids out of range are refused.
        Returns logits [B, T, num_labels]. Any other keyword argument is refused (Trainer's `num_items_in_batch`
        aside).
        """
        self._check_keywords(kwargs)
        self._warn_of_a_loss_without_the_penalty(labels)
        outputs = self.elmo(  # (a dict whatever the shared config's return_dict: the head reads it by name)
            input_ids, attention_mask=attention_mask, input_word_ids=input_word_ids, inputs_embeds=inputs_embeds,
            output_final_states=False, return_dict=True,
        )
        logits = self.classifier(outputs.elmo_representations[0])
        loss = None
        if labels is not None:
            padding = outputs.attention_mask == 0
            _check_class_ids(labels, logits.shape[:2], self.num_labels, padding=padding,
                             padding_counted=kwargs.get("num_items_in_batch") is not None)
            labels = labels.to(logits.device, torch.long).masked_fill(padding, -100)  # (cross_entropy: long ids)
            summed_loss = F.cross_entropy(
                _for_the_loss(logits).flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum"
            )
            loss = self._task_loss(summed_loss, labels.ne(-100).sum(), kwargs.get("num_items_in_batch"))
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states if output_hidden_states else None
        )


def log_uniform_probability(ids: torch.Tensor, range_max: int) -> torch.Tensor:
    """P(id) under the log-uniform (Zipfian) distribution over [0, range_max): log((id + 2) / (id + 1)) / log(range_max + 1).

    It assumes ids sorted by descending word frequency, which is why the vocabulary file is sorted that way.
    """
    ids = ids.to(torch.float64)
    return (torch.log(ids + 2) - torch.log(ids + 1)) / math.log(range_max + 1)


def sample_log_uniform(num_sampled: int, range_max: int) -> tuple[torch.Tensor, int]:
    """`num_sampled` distinct ids from the log-uniform distribution, as TensorFlow's
    `log_uniform_candidate_sampler(unique=True)` draws them: one draw at a time, repeats rejected, until that many
    are distinct. Returns the ids in drawing order and the number of draws it took. Uses torch's CPU generator,
    so a checkpoint's saved random state replays the same samples.
    """
    log_range = math.log(range_max + 1)
    draws = torch.empty(0, dtype=torch.long)
    while True:
        uniform = torch.rand(max(2 * num_sampled, 64), dtype=torch.float64)
        new = (torch.exp(uniform * log_range).floor().long() - 1).clamp_(0, range_max - 1)
        draws = torch.cat([draws, new])
        positions = torch.arange(len(draws))
        _, inverse = torch.unique(draws, return_inverse=True)
        first = torch.full((int(inverse.max()) + 1,), len(draws)).scatter_reduce(0, inverse, positions, "amin")
        is_first = first[inverse] == positions
        distinct = is_first.cumsum(0)
        if distinct[-1] >= num_sampled:
            num_tries = int(torch.searchsorted(distinct, num_sampled)) + 1
            return draws[:num_tries][is_first[:num_tries]], num_tries


def log_expected_count(ids: torch.Tensor, range_max: int, num_sampled: int, num_tries: int) -> torch.Tensor:
    """log of how often `ids` are expected among the samples: log Q in the sampled softmax."""
    probability = log_uniform_probability(ids, range_max)
    if num_tries == num_sampled:  # no draw was rejected
        expected = probability * num_sampled
    else:  # 1 - (1 - p) ** num_tries, computed stably
        expected = -torch.expm1(num_tries * torch.log1p(-probability))
    return torch.log(expected).float()


def sampled_softmax_loss(
    hidden: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, num_sampled: int,
    fused: bool = False,
) -> torch.Tensor:
    """Per-token loss of TensorFlow's `sampled_softmax_loss` with its defaults (bilm-tf's training loss).

    hidden [N, P], targets [N] -> [N]. One set of `num_sampled` distinct negatives (log-uniform) for the whole
    batch; each logit is corrected by the log of its expected count; a negative that is the token's own target
    (an accidental hit) is removed; the loss is the cross-entropy of the true word among [true, negatives].
    `fused`: the same loss and gradient from `fused_softmax.py` (fewer passes over the logits); this code defines it.
    """
    vocab_size, tokens = weight.shape[0], targets.shape[0]
    sampled, num_tries = sample_log_uniform(num_sampled, vocab_size)
    sampled = sampled.to(hidden.device)
    # One gather of the true words' and the negatives' rows: in backward, one scatter into a [V, P] gradient.
    words = torch.cat([targets, sampled])
    log_q = log_expected_count(words, vocab_size, num_sampled, num_tries)
    # Accidental hits: the negatives are distinct, so each token's target is at most one of them.
    position = torch.full((vocab_size,), -1, device=hidden.device)
    position[sampled] = torch.arange(num_sampled, device=hidden.device)
    hit = position[targets]
    hit_rows = (hit >= 0).nonzero().squeeze(1)
    if fused:
        return fused_sampled_softmax_loss(hidden, weight, bias, words, log_q, hit_rows, hit[hit_rows])
    rows, row_bias = weight[words], bias[words]
    true_logits = _for_the_loss((hidden * rows[:tokens]).sum(-1) + row_bias[:tokens]) - log_q[:tokens]
    sampled_logits = _for_the_loss(F.linear(hidden, rows[tokens:], row_bias[tokens:])) - log_q[tokens:]
    sampled_logits = sampled_logits.index_put((hit_rows, hit[hit_rows]), sampled_logits.new_tensor(float("-inf")))
    return torch.logaddexp(true_logits, torch.logsumexp(sampled_logits, dim=1)) - true_logits


def full_softmax_loss(hidden: torch.Tensor, targets: torch.Tensor, softmax: nn.Module, vocab_size: int) -> torch.Tensor:
    """Per-token cross-entropy over the whole vocabulary: hidden [N, P], targets [N] -> [N] (0 where the target is
    -100); `softmax` maps [n, P] to the logits [n, vocab_size].

    Computed in chunks of tokens so that the logits of a large vocabulary never fill memory.
    """
    chunk = max(1, 2**24 // vocab_size)
    losses = [
        F.cross_entropy(_for_the_loss(softmax(part)), part_targets, reduction="none")
        for part, part_targets in zip(hidden.split(chunk), targets.split(chunk))
    ]
    return torch.cat(losses) if losses else hidden.new_zeros(0)


@dataclass
class ElmoForPreTrainingOutput(ModelOutput):
    r"""
    loss (`torch.FloatTensor` []):
        `(forward_loss + backward_loss) / 2`, as bilm-tf trains.
    forward_loss, backward_loss (`torch.FloatTensor` []):
        Mean negative log-likelihood of each direction's targets: sampled softmax in training, the full softmax
        in evaluation. Perplexity is `exp` of the mean over a held-out text. Given Trainer's `num_items_in_batch`,
        this batch's summed negative log-likelihood over that count instead: its share of the optimizer step's mean.
    last_hidden_state (`torch.FloatTensor` [B, S, 2P]):
        The top biLSTM layer at every input position (forward half, backward half), the softmax's input.
    hidden_states (`tuple(torch.FloatTensor)`, L + 1 tensors of [B, S, 2P], with `output_hidden_states`):
        Every layer at every input position: the token vectors that the forward and the backward LSTM read
        (layer 0: `[x; x]`, or `[x; x_backward]` with `backward_input_ids`), then each biLSTM layer.
    final_states (`tuple(torch.FloatTensor)`, (h [L, B, 2P], c [L, B, 2C])):
        LSTM state after each row: pass it (detached) as `initial_states` of the row's next window.
    """

    loss: torch.FloatTensor | None = None
    forward_loss: torch.FloatTensor | None = None
    backward_loss: torch.FloatTensor | None = None
    last_hidden_state: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    final_states: tuple[torch.FloatTensor, torch.FloatTensor] | None = None


class ElmoForPreTraining(ElmoPreTrainedModel):
    """The biLM language model that pretrains ELMo: a forward and a backward LM over the body, one softmax over a
    word vocabulary shared by both directions, as in bilm-tf.

    Unlike `ElmoModel`, it reads its input exactly as given: a training window is part of a stream of sentences,
    so `<S>` and `</S>` are words of the input (spelled by `ElmoTokenizer.word_to_char_ids`), and the LSTM state
    is carried from window to window through `initial_states`.
    """

    _keys_to_ignore_on_load_unexpected = [r"scalar_mixes\."]
    # The loss divides by Trainer's `num_items_in_batch`, so Trainer must not divide again under accumulation.
    accepts_loss_kwargs = True
    _accepted_extra_kwargs = ("num_items_in_batch",)

    def __init__(self, config: ElmoConfig):
        super().__init__(config)
        if not config.lm_vocab_size:
            raise ValueError(
                "ElmoForPreTraining needs ElmoConfig.lm_vocab_size, the number of words of its softmax vocabulary "
                "(<S>, </S> and <UNK> included); pass lm_vocab_size=len(vocabulary)"
            )
        self.elmo = ElmoModel(config, add_scalar_mix=False, lm_dropout=config.lm_dropout)
        self.softmax = nn.Linear(config.projection_dim, config.lm_vocab_size)  # row i scores word i
        self.dropout = ElmoLmDropout(config.lm_dropout) if config.lm_dropout > 0 else None
        self.use_fast_path = True  # the fused sampled softmax (fused_softmax.py); see set_fast_path
        self.post_init()

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        super()._init_weights(module)
        if module is getattr(self, "softmax", None):  # bilm-tf's softmax initialisation
            init.normal_(module.weight, std=1.0 / math.sqrt(self.config.projection_dim))
            init.zeros_(module.bias)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.elmo.get_input_embeddings()

    def set_input_embeddings(self, value: nn.Embedding):
        self.elmo.set_input_embeddings(value)

    @_eager_under_compile
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        backward_labels: torch.LongTensor | None = None,
        backward_input_ids: torch.LongTensor | None = None,
        initial_states: tuple[torch.Tensor, torch.Tensor] | None = None,
        output_hidden_states: bool | None = None,
        input_word_ids: torch.LongTensor | None = None,
        backward_input_word_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        **kwargs,
    ) -> ElmoForPreTrainingOutput:
        r"""
        input_ids (`torch.LongTensor` [B, S, K]):
            Character ids of the words the LSTMs read, `<S>`/`</S>` included where the text has them; rows are
            right-padded with all-zero words. (Or `inputs_embeds` in their place.)
        attention_mask (`torch.Tensor` [B, S], *optional*):
            1 for words, 0 for padding (a prefix of each row). Defaults to the words that are not all zeros; needed
            with `inputs_embeds`.
        labels (`torch.LongTensor` [B, S], *optional*):
            The forward LM's targets: the vocabulary id of the word after each position; -100 = no target, as is
            every padding position, whatever its label.
        backward_labels (`torch.LongTensor` [B, S], *optional*):
            The backward LM's targets: the id of the word before each position; -100 = no target (and padding).
        backward_input_ids (`torch.LongTensor` [B, S, K], *optional*):
            A different text for the backward LM, in reading order left to right (it is read from its end), with
            the padding of `input_ids`. By default both directions read `input_ids`.
        initial_states (`tuple(torch.FloatTensor)`, (h [L, B, 2P], c [L, B, 2C]), *optional*):
            The LSTM state to start from, usually the previous window's `final_states`. Zeros when omitted.
        output_hidden_states (`bool`, *optional*): return `hidden_states`; defaults to `config.output_hidden_states`.
        input_word_ids, backward_input_word_ids (`torch.LongTensor` [B, S], *optional*):
            For a model with word input: the word.dic ids of the words of `input_ids` and `backward_input_ids`.
        inputs_embeds (`torch.FloatTensor` [B, S, K, D], *optional*):
            In place of `input_ids`, their embedded characters, with an `attention_mask`, as for `ElmoModel`; both
            directions read them (no `backward_input_ids`). The char CNN then runs on the plain path, at every
            position.
        Any other keyword argument is refused, naming it, but Trainer's `num_items_in_batch`: the `labels` of the
        whole optimizer step that are not -100 (as many as its backward targets in a stream window or a sentence
        batch). Each direction's loss is then its sum over this batch divided by that count, so that gradient
        accumulation gives the step of one large batch; padding positions must then hold -100 in both labels.
        """
        self._check_keywords(kwargs)
        self._check_input_devices(input_ids=input_ids, backward_input_ids=backward_input_ids,
                                  input_word_ids=input_word_ids, backward_input_word_ids=backward_input_word_ids,
                                  inputs_embeds=inputs_embeds)
        num_items_in_batch = kwargs.get("num_items_in_batch")
        mask = self.check_inputs(input_ids, attention_mask, labels, backward_labels, backward_input_ids,
                                 input_word_ids, backward_input_word_ids, padding_counted=num_items_in_batch is not None,
                                 inputs_embeds=inputs_embeds)
        if output_hidden_states is None:
            output_hidden_states = self.config.output_hidden_states

        if inputs_embeds is None:
            token_layer, backward_layer = self._token_layers(
                input_ids, backward_input_ids, mask, input_word_ids, backward_input_word_ids
            )
        else:
            token_layer, backward_layer = self._embedded_token_layer(inputs_embeds, mask, input_word_ids), None
        layer0 = torch.cat([token_layer, token_layer if backward_layer is None else backward_layer], dim=-1)
        hidden_states, _, final_states = self.elmo._run_bilstm(
            layer0, mask, initial_states, return_hidden_states=output_hidden_states
        )
        top = hidden_states[-1]
        loss = forward_loss = backward_loss = None
        if labels is not None:
            forward_top, backward_top = top.split(self.config.projection_dim, dim=-1)
            padding = ~mask.to(top.device)  # (no target there, whatever the labels hold: collators pad with anything)
            forward_loss = self._language_model_loss(forward_top, labels.to(top.device).masked_fill(padding, -100),
                                                     num_items_in_batch)
            backward_loss = self._language_model_loss(
                backward_top, backward_labels.to(top.device).masked_fill(padding, -100), num_items_in_batch
            )
            loss = 0.5 * (forward_loss + backward_loss)
        return ElmoForPreTrainingOutput(
            loss=loss,
            forward_loss=forward_loss,
            backward_loss=backward_loss,
            last_hidden_state=top,
            hidden_states=tuple(hidden_states) if output_hidden_states else None,
            final_states=final_states,
        )

    def check_inputs(
        self,
        input_ids: torch.LongTensor | None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        backward_labels: torch.LongTensor | None = None,
        backward_input_ids: torch.LongTensor | None = None,
        input_word_ids: torch.LongTensor | None = None,
        backward_input_word_ids: torch.LongTensor | None = None,
        padding_counted: bool = False,
        inputs_embeds: torch.FloatTensor | None = None,
    ) -> torch.Tensor:
        """What `forward` refuses in its inputs, on whatever device they are: shapes, dtypes, character ids outside
        the alphabet, a mask that is not right-padded, word and label ids outside their vocabularies, and with
        `padding_counted` (Trainer's count of the labels given) labels at padding positions. Returns the
        word mask [B, S]. In `static_shapes()` no value is checked (nothing may read the device there): a caller
        who records a step checks each batch with this first, on the host (`modeling/graphed_step.py`).
        `inputs_embeds` in place of `input_ids`: their shape and dtype are checked."""
        _check_one_input(input_ids, inputs_embeds)
        if inputs_embeds is not None:
            _check_inputs_embeds(inputs_embeds, self.config, self.get_input_embeddings().weight.dtype)
            if backward_input_ids is not None:
                raise ValueError("backward_input_ids go with input_ids: with inputs_embeds both directions read them")
        else:
            _check_character_ids(input_ids, self.config)
        if backward_input_ids is not None:
            _check_character_ids(backward_input_ids, self.config, "backward_input_ids")
            if backward_input_ids.shape != input_ids.shape:
                raise ValueError(
                    f"backward_input_ids must have the shape of input_ids {list(input_ids.shape)}, "
                    f"got {list(backward_input_ids.shape)}"
                )
            # (an all-zero word among the backward text's words would be read as a word, one of input_ids refused)
            if not _reads_no_values() and bool((backward_input_ids.ne(0).any(-1) != input_ids.ne(0).any(-1)).any()):
                raise ValueError("backward_input_ids must have its words where input_ids has words, and padding "
                                 "(all-zero words) where it has padding")
        mask = _word_mask(input_ids, attention_mask, right_padded=True, inputs_embeds=inputs_embeds)
        if (labels is None) != (backward_labels is None):
            raise ValueError("pass both labels (forward targets) and backward_labels, or neither")
        self.elmo._check_word_ids(input_word_ids, mask, "input_word_ids")
        if backward_input_ids is not None:
            self.elmo._check_word_ids(backward_input_word_ids, mask, "backward_input_word_ids")
        elif backward_input_word_ids is not None:
            raise ValueError("backward_input_word_ids are the word ids of backward_input_ids: pass both, or neither")
        for name, ids in (("labels", labels), ("backward_labels", backward_labels)):
            if ids is not None:
                _check_class_ids(ids, mask.shape, self.config.lm_vocab_size, name, "the vocabulary", padding=~mask,
                                 padding_counted=padding_counted)
        return mask

    def _token_layers(
        self,
        input_ids: torch.Tensor,
        backward_input_ids: torch.Tensor | None,
        mask: torch.Tensor,
        input_word_ids: torch.Tensor | None = None,
        backward_input_word_ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[B, S, K] char ids (of each direction) -> [B, S, P] context-free vectors at real positions, 0 elsewhere.

        Two savings that leave every vector exactly as `char_encoder` computes it on the full input: the char CNN
        runs once per distinct word of the batch (a vector depends on its word alone, and running text repeats
        its frequent words), and on the characters up to the longest word's end plus one window of the widest
        filter (the windows further right hold padding characters only, all alike, so the max over positions
        keeps its value). With word input, a word is its characters and its word id. Where shapes may not follow
        from data (torch.export, `static_shapes()`), every position is encoded, padding too (then set to 0).
        """
        streams = [input_ids] if backward_input_ids is None else [input_ids, backward_input_ids]
        word_streams = None
        if input_word_ids is not None:
            word_streams = [input_word_ids] if backward_input_ids is None else [input_word_ids, backward_input_word_ids]
        if has_static_shapes() or _is_exporting():
            word_streams = word_streams or [None] * len(streams)
            parts = [self.elmo.char_encoder(ids.flatten(0, 1), None if words is None else words.flatten())
                     for ids, words in zip(streams, word_streams)]
            layers = [part.view(*mask.shape, part.shape[-1]) for part in parts]
            if not static_batch_is_full():
                layers = [torch.where(mask.unsqueeze(-1), layer, 0.0) for layer in layers]
            return layers[0], layers[1] if len(layers) == 2 else None
        words = torch.cat([ids[mask] for ids in streams])
        if word_streams is not None:
            word_ids = torch.cat([ids[mask] for ids in word_streams])
            words = torch.cat([words, word_ids.unsqueeze(1).to(words.dtype)], dim=1)
        distinct, inverse = distinct_words(words)
        char_ids, word_ids = self.elmo.char_encoder.split_rows(distinct)
        # (the end of the longest word: after its last character that is not padding, wherever padding stands)
        positions = torch.arange(1, char_ids.shape[1] + 1, device=char_ids.device)
        padding_starts = ((char_ids != self.config.pad_char_id) * positions).amax() if len(distinct) else 0
        widest = max(width for width, _ in self.config.char_cnn_filters)
        char_ids = char_ids[:, : min(char_ids.shape[1], int(padding_starts) + widest)]
        parts = self.elmo.char_encoder(char_ids, word_ids).index_select(0, inverse).tensor_split(len(streams))
        full = bool(mask.all())  # no padding (stream batching): the vectors are the layer, in order
        layers = [
            part.view(*mask.shape, part.shape[-1]) if full
            else part.new_zeros(*mask.shape, part.shape[-1]).masked_scatter(mask.unsqueeze(-1), part)
            for part in parts
        ]
        return layers[0], layers[1] if len(layers) == 2 else None

    def _embedded_token_layer(self, inputs_embeds: torch.Tensor, mask: torch.Tensor,
                              word_ids: torch.Tensor | None) -> torch.Tensor:
        """Embedded characters [B, S, K, D] -> [B, S, P] context-free vectors at real positions, 0 elsewhere: the plain
        computation at every position (no shape follows from data), on zeros at padding: what padding holds (NaN,
        say) would reach the weights' gradients, as 0 x NaN."""
        padding = ~mask
        if word_ids is not None:  # (0 is in word.dic)
            word_ids = word_ids.masked_fill(padding, 0).flatten()
        chars = inputs_embeds.masked_fill(padding[..., None, None], 0.0)
        vectors = self.elmo.char_encoder.from_embeddings(chars.flatten(0, 1), word_ids)
        return torch.where(mask.unsqueeze(-1), vectors.view(*mask.shape, vectors.shape[-1]), 0.0)

    def _language_model_loss(
        self, hidden: torch.Tensor, labels: torch.Tensor, num_items_in_batch: torch.Tensor | int | None = None
    ) -> torch.Tensor:
        """Mean negative log-likelihood of one direction: hidden [B, S, P], labels [B, S] -> []; the mean over
        `num_items_in_batch` targets where given (Trainer's count for the whole optimizer step)."""
        vocab_size = self.config.lm_vocab_size
        labels = labels.to(hidden.device, torch.long)  # (torch.int is accepted; the losses index with long ids)
        keep = labels != -100
        negatives = self.config.lm_negative_samples
        sampled = self.training and 0 < negatives < vocab_size
        if has_static_shapes() and sampled:
            raise ValueError("the sampled softmax draws its negatives on the host, which a CUDA graph cannot record: "
                             "in static_shapes() only the full softmax (lm_negative_samples 0) trains")
        # Every position has a target (stream batching): a view, not a gather. In static_shapes() every position is
        # scored, and the full softmax's cross-entropy gives 0 where the label is -100.
        every = has_static_shapes() or (not _is_exporting() and bool(keep.all()))
        targets = labels.flatten() if every else labels[keep]
        hidden = hidden.flatten(0, 1) if every else hidden[keep]
        if self.dropout is not None:
            hidden = self.dropout(hidden)
        if sampled:
            reason = _why_it_must_be_called(self.softmax, nn.Linear, "softmax")
            if reason is not None:
                raise ValueError(
                    "the sampled softmax scores rows of the softmax's weight without calling the module, and "
                    f"{reason}: train with the full softmax (lm_negative_samples=0), which calls it"
                )
            fused = (self.use_fast_path and fused_softmax_fallback(self.softmax.weight) is None
                     and not _under_function_transforms(hidden, self.softmax.weight))
            losses = sampled_softmax_loss(hidden, targets, self.softmax.weight, self.softmax.bias, negatives, fused=fused)
        else:
            losses = full_softmax_loss(hidden, targets, self.softmax, vocab_size)
        if num_items_in_batch is None:
            return losses.sum() / keep.sum().clamp(min=1)
        # (at least 1: a whole accumulation window without targets has a loss of 0, not NaN)
        return losses.sum() / torch.as_tensor(num_items_in_batch, device=losses.device).clamp(min=1)


__all__ = [
    "ElmoForPreTraining",
    "ElmoForPreTrainingOutput",
    "ElmoForSequenceClassification",
    "ElmoForTokenClassification",
    "ElmoModel",
    "ElmoModelOutput",
    "ElmoPreTrainedModel",
    "ElmoTaskModel",
]
