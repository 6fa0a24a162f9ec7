"""ELMo configuration: every option of the original `options.json`, plus how the layers are mixed."""

import difflib
import json
import logging
import math
import os
import re
import types
import typing
from collections.abc import Iterable
from typing import Any

import transformers
from transformers import PreTrainedConfig

# As remote code (a saved folder loaded without hf-elmo installed) this file is the first that transformers runs:
# the oldest release the code runs on there (5.12's PreTrainedModel has no is_custom_code; older releases leave
# lexicon.py's imports uncopied, and fail before this line). The package itself needs pyproject.toml's floor.
OLDEST_TRANSFORMERS = (5, 13)


def check_transformers_version(version: str) -> None:
    """One clear ImportError where `version` of transformers is older than this code runs on (a TypeError from deep
    inside transformers' weight initialisation, before). (Read without `packaging`, which remote code may not import.)"""
    release = re.match(r"(\d+)\.(\d+)", version)
    if release and tuple(map(int, release.groups())) < OLDEST_TRANSFORMERS:
        oldest = ".".join(map(str, OLDEST_TRANSFORMERS))
        raise ImportError(f"this ELMo model's code needs transformers {oldest} or later, and this Python has "
                          f"{version}: pip install -U 'transformers>={oldest}'")


check_transformers_version(transformers.__version__)

from .files import is_elmoformanylangs_config  # noqa: E402
from .pipelines import register_pipelines  # noqa: E402

logger = logging.getLogger(__name__)

# The config is the first file of a saved folder that `pipeline(task, model=folder, trust_remote_code=True)` imports,
# before it picks the task's pipeline class: registering here makes pipeline() read ELMo there too (pipelines.py).
register_pipelines()

# The released models' character CNN: (filter width, number of filters), 2048 filters in all.
ORIGINAL_CHAR_CNN_FILTERS = ((1, 32), (2, 32), (3, 64), (4, 128), (5, 256), (6, 512), (7, 1024))

# How words are spelled: "bytes", the UTF-8 bytes of bilm-tf's models; "vocabulary", the ids of a character
# vocabulary (char.dic, ELMoForManyLangs' models; see lexicon.py).
ALPHABETS = ("bytes", "vocabulary")
# The byte alphabet's special character ids (tokenization_elmo.py): <S>, </S>, begin and end of word, padding.
BYTE_ALPHABET_IDS = {"bos_char_id": 257, "eos_char_id": 258, "bow_char_id": 259, "eow_char_id": 260, "pad_char_id": 261}

# How ElmoForSequenceClassification pools the words of a sentence.
SEQUENCE_POOLINGS = ("mean", "max", "mean_max")
# The losses ElmoForSequenceClassification computes (transformers' `problem_type`; None: decided by the labels).
PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")

# The one list of the Auto classes an ELMo folder loads through, and the class each names. Every ElmoConfig
# carries it as `auto_map`, so a folder saved from any ELMo class loads every model class with trust_remote_code;
# transformers 5 takes the tokenizer's remote code from tokenizer_config.json, which a saved tokenizer writes.
ELMO_AUTO_MAP = {
    "AutoConfig": "configuration_elmo.ElmoConfig",
    "AutoTokenizer": ["tokenization_elmo.ElmoTokenizer", None],
    "AutoModel": "modeling_elmo.ElmoModel",
    "AutoModelForSequenceClassification": "modeling_elmo.ElmoForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_elmo.ElmoForTokenClassification",
    "AutoModelForPreTraining": "modeling_elmo.ElmoForPreTraining",
}


# What each field's value must be, beyond its type (checked at construction): (test, requirement for the message).
AT_LEAST_ONE = (lambda value: value >= 1, "at least 1")
A_PROBABILITY = (lambda value: 0 <= value < 1, "in [0, 1)")
MAX_CHARACTERS_PER_TOKEN = 1000  # (the released models read 50)
MAX_LAYERS = 64  # (the released models have 1 or 2 of each)
VALUE_RULES = {
    "char_embedding_dim": AT_LEAST_ONE,
    "char_cnn_filters": (
        lambda filters: len(filters) > 0 and all(len(f) == 2 and min(f) >= 1 for f in filters),
        "one or more [width, count] pairs, each at least 1",
    ),
    # (upper bounds too: a converter lists each layer's tensors before it reads one, and an options.json's 10**7
    # highway layers took minutes and gigabytes to be refused)
    "num_highway_layers": (lambda value: 0 <= value <= MAX_LAYERS, f"from 0 to {MAX_LAYERS}"),
    "char_cnn_activation": (lambda value: value in ("relu", "tanh"), "'relu' or 'tanh'"),
    # (an upper bound too: every word is padded to it, and 10**9 from an options.json filled the memory)
    "max_characters_per_token": (lambda value: 3 <= value <= MAX_CHARACTERS_PER_TOKEN,
                                 f"from 3 (begin, end and one character) to {MAX_CHARACTERS_PER_TOKEN}"),
    "n_characters": (lambda value: value >= 2, "at least 2 (262 for the byte alphabet: see _check_alphabet)"),
    "alphabet": (lambda value: value in ALPHABETS, f"one of {', '.join(map(repr, ALPHABETS))}"),
    "word_vocab_size": (lambda value: value >= 0, "0 or more (0: no word input)"),
    "word_embedding_dim": (lambda value: value >= 0, "0 or more (0: no word input)"),
    "forget_bias": (lambda value: math.isfinite(value), "a finite number"),
    "cell_size": AT_LEAST_ONE,
    "projection_dim": AT_LEAST_ONE,
    "num_lstm_layers": (lambda value: 1 <= value <= MAX_LAYERS, f"from 1 to {MAX_LAYERS}"),
    "cell_clip": (lambda value: value is None or value >= 0, "0 or more (0 or None: no clipping)"),
    "proj_clip": (lambda value: value is None or value >= 0, "0 or more (0 or None: no clipping)"),
    "num_output_representations": AT_LEAST_ONE,
    "dropout": A_PROBABILITY,
    "initializer_range": (lambda value: 0 <= value < math.inf, "a finite number >= 0"),
    "scalar_mix_l2_coef": (lambda value: 0 <= value < math.inf, "a finite number >= 0"),
    "sequence_pooling": (lambda value: value in SEQUENCE_POOLINGS, f"one of {', '.join(map(repr, SEQUENCE_POOLINGS))}"),
    "problem_type": (lambda value: value is None or value in PROBLEM_TYPES,
                     f"one of {', '.join(map(repr, PROBLEM_TYPES))}, or None"),
    "lm_vocab_size": (lambda value: value is None or value >= 3, "at least 3 (<S>, </S> and <UNK>), or None"),
    "lm_dropout": A_PROBABILITY,
    "lm_negative_samples": (lambda value: value >= 0, "0 or more"),
}

# Where options.json (bilm-tf's and AllenNLP's) keeps each field, and the value a missing or null option means
# (bilm-tf reads the optional ones with `.get`); REQUIRED ones must be there.
REQUIRED = object()
ORIGINAL_OPTIONS = {
    "char_embedding_dim": (("char_cnn", "embedding", "dim"), REQUIRED),
    "char_cnn_filters": (("char_cnn", "filters"), REQUIRED),
    "num_highway_layers": (("char_cnn", "n_highway"), 0),
    "char_cnn_activation": (("char_cnn", "activation"), "relu"),
    "max_characters_per_token": (("char_cnn", "max_characters_per_token"), 50),
    "n_characters": (("char_cnn", "n_characters"), 262),
    "cell_size": (("lstm", "dim"), REQUIRED),
    "projection_dim": (("lstm", "projection_dim"), REQUIRED),
    "num_lstm_layers": (("lstm", "n_layers"), REQUIRED),
    "cell_clip": (("lstm", "cell_clip"), None),
    "proj_clip": (("lstm", "proj_clip"), None),
    "use_skip_connections": (("lstm", "use_skip_connections"), False),
}


# The fields that bilm-tf's format fixes, beyond those of ORIGINAL_OPTIONS: UTF-8 bytes, no word input, the forget
# bias added at run time, projections only where the widths differ.
ORIGINAL_FORMAT_FIELDS = ("alphabet", *BYTE_ALPHABET_IDS, "word_vocab_size", "word_embedding_dim", "bos_word_id",
                          "eos_word_id", "always_project", "forget_bias")


def _matches(value, annotation) -> bool:
    """Whether `value` is of the type `annotation` (int, float, bool, str, None, unions, list[X], tuple[X, ...],
    tuple[X, Y]); a bool is no number, and a list stands for a tuple (JSON has only lists)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in args)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(_matches(item, arg) for item, arg in zip(value, args))
        return all(_matches(item, args[0]) for item in value)
    if annotation in (None, type(None)):
        return value is None
    if annotation is float:
        return isinstance(value, float)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, annotation)


def _describe(annotation, plural: bool = False) -> str:
    """`annotation` in words, as the values of a JSON file: "an integer", "a list of integers", ..."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        # An int is also "a number"; a list also stands for a tuple.
        has_list = any(typing.get_origin(arg) is list for arg in args)
        shown = [arg for arg in args if not (arg is int and float in args)
                 and not (has_list and typing.get_origin(arg) is tuple)]
        return " or ".join(dict.fromkeys(_describe(arg, plural) for arg in shown))
    if origin in (list, tuple):
        if origin is tuple and args and args[-1] is not Ellipsis:  # of a fixed length
            items = f"{len(args)} {_describe(args[0], True)}"
            return f"lists of {items}" if plural else f"a list of {items}"
        return ("lists" if plural else "a list") + f" of {_describe(args[0], True)}"
    names = {int: ("an integer", "integers"), float: ("a number", "numbers"), bool: ("true or false", "booleans"),
             str: ("a string", "strings"), type(None): ("null", "nulls")}
    return names[annotation][plural]


def check_type(name: str, value, annotation) -> None:
    """A one-line ValueError naming `name` unless `value` is of the type `annotation`."""
    if not _matches(value, annotation):
        raise ValueError(f"{name} must be {_describe(annotation)}, got {value!r} ({type(value).__name__})")


def in_option_names(message: str, option_names: dict[str, str]) -> str:
    """`message` of ElmoConfig's checks with each field named as an options file names it (`option_names`: field to
    option, `cell_size` to `lstm.dim`), for an error about that file."""
    fields = r"\b(?:ElmoConfig\.)?(" + "|".join(re.escape(field) for field in option_names) + r")\b"
    return re.sub(fields, lambda match: f"'{option_names[match.group(1)]}'", message)


def check_value(name: str, value, allowed, requirement: str) -> None:
    """A one-line ValueError naming `name` unless `allowed(value)`."""
    if not allowed(value):
        raise ValueError(f"{name} must be {requirement}, got {value!r}")


def _warn_of_misspelt_fields(settings: dict[str, Any],
                             fate: str = "kept as an attribute that no ELMo model reads") -> None:
    """Warn of each setting that is no field of ElmoConfig but looks meant for one: an options.json name (`filters`,
    `n_highway`) or a near spelling (`cellsize`). transformers keeps unknown settings as attributes (and drops
    unknown keywords of from_pretrained: `fate` says which), so such a one would otherwise leave the field at its
    default without a word; nothing else changes."""
    fields = list(ElmoConfig.__annotations__)
    for key in settings:
        # (transformers' special tokens, `sep_token_id` say, are settings of their own, not a pad_token_id misspelt)
        if key in fields or hasattr(ElmoConfig, key) or key.endswith("_token_id"):
            continue
        meant = [field for field, (path, _) in ORIGINAL_OPTIONS.items() if path[-1] == key]
        meant += [field for field in difflib.get_close_matches(key, fields, n=2, cutoff=0.8) if field not in meant]
        if meant:
            logger.warning(f"ElmoConfig has no field {key!r} ({fate}): did you mean {' or '.join(map(repr, meant))}?")


def warn_of_misspelt_options(options: dict, known_paths: Iterable[tuple[str, ...]], source: str) -> None:
    """Warn of each key in a section of an options file (`lstm`, `char_cnn.embedding`) that no model reads but that
    is a near spelling of an option missing there (`use_skip_connection`, `cellclip`): that option would otherwise
    keep its default without a word (a model with other numbers). `known_paths`: where the options are
    (`("lstm", "cell_clip")`); the top level is not checked, as it holds training options too."""
    sections: dict[tuple[str, ...], set[str]] = {}
    for path in known_paths:
        for depth in range(1, len(path)):
            sections.setdefault(path[:depth], set()).add(path[depth])
    for parent, names in sections.items():
        section = options
        for key in parent:
            section = section.get(key) if isinstance(section, dict) else None
        if not isinstance(section, dict):
            continue
        missing = sorted(name for name in names if name not in section)
        where = ".".join(parent)
        for key in section:
            meant = [] if key in names else difflib.get_close_matches(key, missing, n=1, cutoff=0.7)
            if meant:
                logger.warning(f"{source}: option '{where}.{key}' is none that ELMo reads: did you mean "
                               f"'{where}.{meant[0]}', which the file lacks (an optional one takes its default)?")


class ElmoConfig(PreTrainedConfig):
    r"""
    Configuration of an ELMo model. The defaults are the original model (`2x4096_512_2048cnn_2xhighway`).
    Every field is type-checked whenever it is set, and its value at construction (the keyword arguments of
    `from_pretrained` included) and whenever a model is built on the config, with an error that names it; nothing is
    converted silently (an integer is a number, a list stands for a tuple, a clip of 0 means None). A setting that is
    no field but looks meant for one (options.json's `filters`, `cellsize`) is named in a warning with the field.

    Character CNN (`char_cnn` in options.json):
        char_embedding_dim (`int`): size of a character embedding (`char_cnn.embedding.dim`).
        char_cnn_filters (`list[list[int]]`): `[width, count]` per convolution (`char_cnn.filters`).
        num_highway_layers (`int`): highway layers after the CNN (`char_cnn.n_highway`).
        char_cnn_activation (`str`): `"relu"` or `"tanh"`, applied after max-pooling (`char_cnn.activation`).
        max_characters_per_token (`int`): characters per word, begin/end-of-word included.
        n_characters (`int`): rows of the character embedding; 262 = 261 trained ids + the padding row 0.
    Alphabet (how a word is spelled; the default is bilm-tf's UTF-8 bytes):
        alphabet (`str`): `"bytes"` (UTF-8 bytes, n_characters 262) or `"vocabulary"` (the ids of a character
            vocabulary, ELMoForManyLangs' char.dic: `n_characters` is its size + 1, for the padding row 0).
        bos_char_id, eos_char_id (`int`): the one character of the sentence boundary words `<S>`/`</S>` (`<bos>`/`<eos>`).
        bow_char_id, eow_char_id (`int`): the characters that begin and end every word.
        pad_char_id (`int`): the character that fills a word after its end.
    Word input (ELMoForManyLangs' models may read each word's id in word.dic as well as its characters):
        word_vocab_size (`int`): rows of the word embedding; 0 = no word input.
        word_embedding_dim (`int`): its width; the word vector comes before the char CNN's (after its highway
            layers), and the projection reads both.
        bos_word_id, eos_word_id (`int`, *optional*): the word ids of the sentence boundaries.
        always_project (`bool`): keep the token projection and the LSTM cell projection where the widths already
            match, and let projection_dim exceed cell_size (ELMoForManyLangs always has both projections, of any
            widths; bilm-tf builds each only where the widths differ, and a cell projection only to a narrower one).
    biLSTM (`lstm` in options.json):
        cell_size (`int`): LSTM memory cell size C (`lstm.dim`).
        projection_dim (`int`): hidden size P of each direction and the token vector size (`lstm.projection_dim`).
        num_lstm_layers (`int`): stacked layers per direction (`lstm.n_layers`).
        cell_clip (`float`, *optional*): clip the memory cell to [-cell_clip, cell_clip]; `None` = no clip.
        proj_clip (`float`, *optional*): clip the projected hidden state; `None` = no clip.
        use_skip_connections (`bool`): residual connection around every layer but the first.
        forget_bias (`float`): added to the forget gate at run time: 1.0 in bilm-tf's LSTMCell, whose stored bias
            leaves it out; 0.0 for ELMoForManyLangs (AllenNLP's cell), whose stored bias includes it.
    Output:
        num_output_representations (`int`): how many learned scalar mixes of the layers to return.
        do_layer_norm (`bool`): normalise each layer over the whole batch before mixing (AllenNLP's option).
        dropout (`float`): dropout on the mixed representations, active in training only.
    Task heads (`ElmoForSequenceClassification`, `ElmoForTokenClassification`):
        finetune_bilm (`bool`): train the biLM with the head. False (the paper's feature-based use): the biLM is
            frozen and only the task's scalar mix (weights and gamma) and the classifier learn.
        scalar_mix_l2_coef (`float`): L2 penalty `coef * sum_j s_j^2` on the task mix's weights, added to the loss
            (the paper's lambda; AllenNLP suggests 0.001). 0 turns it off.
        sequence_pooling (`str`): how `ElmoForSequenceClassification` turns the words into one vector: `"mean"`,
            `"max"`, or `"mean_max"` (both concatenated, [4P]).
    Language-model pretraining (`ElmoForPreTraining` only; the base model ignores them):
        lm_vocab_size (`int`, *optional*): words in the softmax vocabulary, `<S>`, `</S>` and `<UNK>` included.
        lm_dropout (`float`): dropout on each LSTM layer's input and on the top layer before the softmax, in
            training only (bilm-tf's options.json `dropout`).
        lm_negative_samples (`int`): negative words drawn per batch and direction for the sampled softmax
            (bilm-tf: 8192); 0, or at least `lm_vocab_size`, trains with the full softmax.
    """

    model_type = "elmo"
    attribute_map = {"num_hidden_layers": "num_lstm_layers"}
    keys_to_ignore_at_inference = ["hidden_states", "elmo_representations", "final_states", "attention_mask"]

    char_embedding_dim: int = 16
    char_cnn_filters: list[list[int]] | tuple[tuple[int, int], ...] = ORIGINAL_CHAR_CNN_FILTERS
    num_highway_layers: int = 2
    char_cnn_activation: str = "relu"
    max_characters_per_token: int = 50
    n_characters: int = 262
    alphabet: str = "bytes"
    bos_char_id: int = BYTE_ALPHABET_IDS["bos_char_id"]
    eos_char_id: int = BYTE_ALPHABET_IDS["eos_char_id"]
    bow_char_id: int = BYTE_ALPHABET_IDS["bow_char_id"]
    eow_char_id: int = BYTE_ALPHABET_IDS["eow_char_id"]
    pad_char_id: int = BYTE_ALPHABET_IDS["pad_char_id"]
    word_vocab_size: int = 0
    word_embedding_dim: int = 0
    bos_word_id: int | None = None
    eos_word_id: int | None = None
    always_project: bool = False
    cell_size: int = 4096
    projection_dim: int = 512
    num_lstm_layers: int = 2
    cell_clip: float | int | None = 3.0
    proj_clip: float | int | None = 3.0
    use_skip_connections: bool = True
    forget_bias: float | int = 1.0
    num_output_representations: int = 1
    do_layer_norm: bool = False
    dropout: float | int = 0.0
    pad_token_id: int = 0
    initializer_range: float | int = 0.02
    finetune_bilm: bool = False
    scalar_mix_l2_coef: float | int = 0.0
    sequence_pooling: str = "mean"
    lm_vocab_size: int | None = None
    lm_dropout: float | int = 0.0
    lm_negative_samples: int = 8192

    def __setattr__(self, key, value):
        # Every field is type-checked when set (at construction and after), with nothing converted silently.
        name = self.attribute_map.get(key, key)
        if name in ElmoConfig.__annotations__:
            check_type(f"ElmoConfig.{name}", value, ElmoConfig.__annotations__[name])
        super().__setattr__(key, value)

    def __post_init__(self, **kwargs):
        for alias, name in self.attribute_map.items():  # (the base class would set them after the check)
            if alias in kwargs:
                setattr(self, name, kwargs.pop(alias))
        _warn_of_misspelt_fields(kwargs)
        self.check_values()
        super().__post_init__(**kwargs)
        # After the base class has set the loaded keys: entries a folder already names win over ours.
        self.auto_map = {**ELMO_AUTO_MAP, **(getattr(self, "auto_map", None) or {})}

    @classmethod
    def _dict_from_json_file(cls, json_file: str | os.PathLike):
        # (transformers reads a config.json of a JSON number, null or true on, and fails deep inside with a TypeError)
        config_dict = super()._dict_from_json_file(json_file)
        if not isinstance(config_dict, dict):
            raise ValueError(f"{json_file}: the config holds a JSON {type(config_dict).__name__}, not an object of "
                             "settings")
        if is_elmoformanylangs_config(config_dict):
            raise ValueError(f"{json_file}: an ELMoForManyLangs model's config, not converted: convert the folder with "
                             "conversion/convert_elmoformanylangs.py first")
        return config_dict

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs):
        if not isinstance(config_dict, dict):  # (a list given in code, say: the base class fails deep inside)
            raise ValueError(f"the config holds a JSON {type(config_dict).__name__}, not an object of settings")
        # Another model's config.json (transformers would only warn) fails on whichever ELMo field it lacks first.
        if config_dict.get("model_type", cls.model_type) != cls.model_type:
            raise ValueError(f"the config is of a {config_dict['model_type']} model, not an ELMo one (model_type "
                             f"{config_dict['model_type']!r})")
        # transformers sets the keyword arguments of `from_pretrained(path, dropout=0.5)` one by one after
        # construction: they are checked, and read, as the same values given at construction are. One that is no
        # field it drops (or hands to the model's class): a misspelt field is named here, as at construction.
        _warn_of_misspelt_fields(kwargs, "a keyword of from_pretrained that no ELMo config reads")
        loaded = super().from_dict(config_dict, **kwargs)
        (loaded[0] if isinstance(loaded, tuple) else loaded).check_values()
        return loaded

    def check_values(self) -> None:
        """Check every field's value, and the fields together, with an error naming the field, and bring them to
        their one form (a clip of 0 is None, the clips, dropouts and forget bias floats, filters lists). Run at
        construction, after the keyword arguments of `from_pretrained`, and by every ELMo model built on the config,
        so that fields set afterwards (`config.dropout = 1.5`) are refused there."""
        self.char_cnn_filters = [list(width_and_count) for width_and_count in self.char_cnn_filters]
        # 0 means "no clip" in both reference implementations.
        self.cell_clip = float(self.cell_clip) if self.cell_clip else None
        self.proj_clip = float(self.proj_clip) if self.proj_clip else None
        self.dropout = float(self.dropout)
        self.forget_bias = float(self.forget_bias)
        self.lm_dropout = float(self.lm_dropout)
        self._check_values()

    def _check_values(self):
        for name, (allowed, requirement) in VALUE_RULES.items():
            check_value(f"ElmoConfig.{name}", getattr(self, name), allowed, requirement)
        for width, count in self.char_cnn_filters:
            if width > self.max_characters_per_token:
                raise ValueError(
                    f"ElmoConfig.char_cnn_filters has [{width}, {count}]: no filter can be wider than "
                    f"max_characters_per_token ({self.max_characters_per_token})"
                )
        if self.projection_dim > self.cell_size and not self.always_project:  # (bilm-tf builds no wider projection)
            raise ValueError(
                f"ElmoConfig.projection_dim ({self.projection_dim}) cannot exceed cell_size ({self.cell_size}): only a "
                "model with always_project (ELMoForManyLangs') projects its cells to a wider width"
            )
        self._check_alphabet()

    def _check_alphabet(self):
        """What the alphabet's and the word input's fields must be together."""
        special_ids = {name: getattr(self, name) for name in BYTE_ALPHABET_IDS}
        if self.alphabet == "bytes":
            check_value(
                "ElmoConfig.n_characters", self.n_characters, lambda value: value == 262,
                "262 (261 trained character ids plus the padding row); options.json files written for training say "
                "261: use from_original_options",
            )
            for name, value in special_ids.items():
                check_value(f"ElmoConfig.{name}", value, lambda v, n=name: v == BYTE_ALPHABET_IDS[n],
                            f"{BYTE_ALPHABET_IDS[name]} in the byte alphabet")
        else:
            for name, value in special_ids.items():
                check_value(f"ElmoConfig.{name}", value, lambda v: 1 <= v < self.n_characters,
                            f"a character id in 1..n_characters - 1 ({self.n_characters - 1}; 0 is the padding word)")
            if len(set(special_ids.values())) != len(special_ids):
                raise ValueError(f"ElmoConfig's special character ids must differ, got {special_ids}")
        if (self.word_vocab_size > 0) != (self.word_embedding_dim > 0):
            raise ValueError(
                f"ElmoConfig.word_vocab_size ({self.word_vocab_size}) and word_embedding_dim "
                f"({self.word_embedding_dim}) must both be 0 (no word input) or both positive"
            )
        if self.word_vocab_size:
            for name in ("bos_word_id", "eos_word_id"):
                check_value(f"ElmoConfig.{name}", getattr(self, name), lambda v: v is not None and 0 <= v < self.word_vocab_size,
                            f"a word id in 0..word_vocab_size - 1 ({self.word_vocab_size - 1})")

    @property
    def num_char_filters(self) -> int:
        """F, the width of the character CNN's output (2048 for the released models)."""
        return sum(count for _, count in self.char_cnn_filters)

    @property
    def vocab_size(self) -> int:
        """The size of the character alphabet, `n_characters` (the tokenizer's `vocab_size`): words are spelled; a
        model with word input also has `word_vocab_size` words."""
        return self.n_characters

    @vocab_size.setter
    def vocab_size(self, value) -> None:
        self._refuse_derived("vocab_size", value, "n_characters", "the size of the character alphabet",
                             hint="; words are spelled, not looked up: the pretraining softmax's words are "
                             "lm_vocab_size, a word input's word_vocab_size")

    @property
    def hidden_size(self) -> int:
        """Width of every layer of `hidden_states`: forward and backward halves, 2P."""
        return 2 * self.projection_dim

    @hidden_size.setter
    def hidden_size(self, value) -> None:
        self._refuse_derived("hidden_size", value, "2 * projection_dim", "the width of every layer", field="projection_dim")

    def _refuse_derived(self, name: str, value, source: str, what: str, field: str | None = None, hint: str = "") -> None:
        """A size that follows from another field (transformers and users set `hidden_size` and `vocab_size`, as
        attributes or keywords of from_pretrained): its own value changes nothing; another is refused, naming the
        field to set (rather than "property has no setter")."""
        if value != getattr(self, name):
            raise ValueError(f"ElmoConfig.{name} is {source} ({getattr(self, name)}), {what}: set {field or source} "
                             f"instead (got {name}={value!r}){hint}")

    @property
    def has_char_projection(self) -> bool:
        # bilm-tf builds CNN_proj only when the CNN width differs from the LSTM input width.
        return self.always_project or self.num_char_filters + self.word_embedding_dim != self.projection_dim

    @property
    def has_lstm_projection(self) -> bool:
        # bilm-tf builds W_P_0 only when the cell is wider than the output.
        return self.always_project or self.cell_size != self.projection_dim

    @classmethod
    def from_original_options(cls, options: str | os.PathLike | dict[str, Any], **kwargs) -> "ElmoConfig":
        """Build a config from a bilm-tf / AllenNLP `options.json` (a path or the parsed dict).

        Every option is type-checked, with an error naming it (`lstm.use_skip_connections` must be true or false,
        not "false"). Training-only keys that bilm-tf writes are ignored; `n_characters` may be 261 (training) or
        262. `kwargs` set the other options (`num_output_representations`, `do_layer_norm`, `dropout`, the heads'
        and the pretraining softmax's); one the file or bilm-tf's format sets is refused.
        """
        source = "options"
        if not isinstance(options, dict):
            source = os.fspath(options)
            try:
                with open(source, encoding="utf-8-sig") as f:
                    options = json.load(f)
            except FileNotFoundError:
                raise ValueError(f"{source}: options file not found") from None
            except IsADirectoryError:
                raise ValueError(f"{source}: is a folder, not an options file") from None
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                raise ValueError(f"{source}: not a JSON options file ({error})") from None
        if not isinstance(options, dict):
            raise ValueError(f"{source}: not an options file: it holds a JSON {type(options).__name__}, not an object")
        for section in ("char_cnn", "lstm"):
            if not isinstance(options.get(section), dict):
                what = "only character-input ELMo models can be converted" if section == "char_cnn" else "an object"
                raise ValueError(f"{source}: no '{section}' section ({what})")
        warn_of_misspelt_options(options, [path for path, _ in ORIGINAL_OPTIONS.values()], source)
        values = {}
        for name, (path, default) in ORIGINAL_OPTIONS.items():
            option = ".".join(path)
            value = options
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            if value is None:
                if default is REQUIRED:
                    raise ValueError(f"{source}: missing option '{option}'")
                value = default
            check_type(f"{source}: option '{option}'", value, cls.__annotations__[name])
            if name == "n_characters":
                check_value(f"{source}: option '{option}'", value, lambda n: n in (261, 262), "261 or 262")
                value = 262  # the model always has the padding row
            elif name in VALUE_RULES:
                check_value(f"{source}: option '{option}'", value, *VALUE_RULES[name])
            values[name] = value
        # What the file and bilm-tf's format fix (an alias such as num_hidden_layers named as given): a keyword
        # would describe other weights than the file's (a TypeError for a repeated keyword before, and an alias or a
        # field of the format was taken silently).
        fixed = set(values) | set(ORIGINAL_FORMAT_FIELDS)
        clashing = sorted(name for name in kwargs if cls.attribute_map.get(name, name) in fixed)
        if values["projection_dim"] > values["cell_size"]:  # (ElmoConfig's own message names always_project)
            raise ValueError(f"{source}: option 'lstm.projection_dim' ({values['projection_dim']}) cannot exceed "
                             f"'lstm.dim' ({values['cell_size']}): bilm-tf projects a cell only to a narrower width")
        if clashing:
            raise ValueError(f"{source}: {', '.join(clashing)} {'is' if len(clashing) == 1 else 'are'} set by the "
                             "options file or bilm-tf's format (the file's default where it leaves an option out); "
                             "keyword arguments set the other options (num_output_representations, do_layer_norm, "
                             "dropout, the heads' and the pretraining softmax's)")
        try:
            return cls(**values, **kwargs)
        except ValueError as error:  # what only the options together contradict
            option_names = {name: ".".join(path) for name, (path, _) in ORIGINAL_OPTIONS.items()}
            raise ValueError(f"{source}: {in_option_names(str(error), option_names)}") from None

    def to_original_options(self) -> dict[str, Any]:
        """The `options.json` content that bilm-tf and AllenNLP read for this model (inference form, 262)."""
        if self.alphabet != "bytes" or self.word_vocab_size or self.forget_bias != 1.0 or self.always_project:
            raise ValueError(
                "this model is not in bilm-tf's form (a character vocabulary, word input, a forget bias stored in the "
                "weights or projections of equal widths: an ELMoForManyLangs model): convert it back with "
                "conversion/convert_elmoformanylangs.py --to-elmoformanylangs"
            )
        options: dict[str, Any] = {}
        for name, (path, _) in ORIGINAL_OPTIONS.items():
            section = options
            for key in path[:-1]:
                section = section.setdefault(key, {})
            value = getattr(self, name)
            section[path[-1]] = [list(f) for f in value] if name == "char_cnn_filters" else value
        return {"lstm": options["lstm"], "char_cnn": options["char_cnn"]}


__all__ = ["ALPHABETS", "ELMO_AUTO_MAP", "ElmoConfig"]
