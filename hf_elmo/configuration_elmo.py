"""ELMo configuration: every option of the original `options.json`, plus how the layers are mixed."""

import json
import os
from typing import Any

from transformers import PreTrainedConfig

from .pipelines import register_pipelines

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

# The one list of the Auto classes an ELMo folder loads through, and the class each names. Every ElmoConfig
# carries it as `auto_map`, so a folder saved from any ELMo class loads every class with trust_remote_code.
ELMO_AUTO_MAP = {
    "AutoConfig": "configuration_elmo.ElmoConfig",
    "AutoTokenizer": ["tokenization_elmo.ElmoTokenizer", None],
    "AutoModel": "modeling_elmo.ElmoModel",
    "AutoModelForSequenceClassification": "modeling_elmo.ElmoForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_elmo.ElmoForTokenClassification",
    "AutoModelForPreTraining": "modeling_elmo.ElmoForPreTraining",
}


class ElmoConfig(PreTrainedConfig):
    r"""
    Configuration of an ELMo model. The defaults are the original model (`2x4096_512_2048cnn_2xhighway`).

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
            match (ELMoForManyLangs always has both; bilm-tf builds each only where the widths differ).
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

    def __post_init__(self, **kwargs):
        self.char_cnn_filters = [[int(width), int(count)] for width, count in self.char_cnn_filters]
        # 0 means "no clip" in both reference implementations.
        self.cell_clip = float(self.cell_clip) if self.cell_clip else None
        self.proj_clip = float(self.proj_clip) if self.proj_clip else None
        self.dropout = float(self.dropout)
        self.forget_bias = float(self.forget_bias)
        self.lm_dropout = float(self.lm_dropout)
        self._check_values()
        super().__post_init__(**kwargs)
        # After the base class has set the loaded keys: entries a folder already names win over ours.
        self.auto_map = {**ELMO_AUTO_MAP, **(getattr(self, "auto_map", None) or {})}

    def _check_values(self):
        positive = {
            "char_embedding_dim": self.char_embedding_dim,
            "max_characters_per_token": self.max_characters_per_token,
            "cell_size": self.cell_size,
            "projection_dim": self.projection_dim,
            "num_lstm_layers": self.num_lstm_layers,
            "num_output_representations": self.num_output_representations,
        }
        for name, value in positive.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ElmoConfig.{name} must be a positive integer, got {value!r}")
        if isinstance(self.num_highway_layers, bool) or not isinstance(self.num_highway_layers, int) or self.num_highway_layers < 0:
            raise ValueError(f"ElmoConfig.num_highway_layers must be an integer >= 0, got {self.num_highway_layers!r}")
        if not self.char_cnn_filters:
            raise ValueError("ElmoConfig.char_cnn_filters must name at least one [width, count] filter")
        for width, count in self.char_cnn_filters:
            if width < 1 or count < 1 or width > self.max_characters_per_token:
                raise ValueError(
                    f"ElmoConfig.char_cnn_filters has [{width}, {count}]: widths must be 1..max_characters_per_token "
                    f"({self.max_characters_per_token}) and counts positive"
                )
        if self.max_characters_per_token < 3:
            raise ValueError("ElmoConfig.max_characters_per_token must be at least 3 (begin, end and one character)")
        if self.char_cnn_activation not in ("relu", "tanh"):
            raise ValueError(f"ElmoConfig.char_cnn_activation must be 'relu' or 'tanh', got {self.char_cnn_activation!r}")
        self._check_alphabet()
        if self.projection_dim > self.cell_size:
            raise ValueError(
                f"ElmoConfig.projection_dim ({self.projection_dim}) cannot exceed cell_size ({self.cell_size})"
            )
        for name in ("cell_clip", "proj_clip"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"ElmoConfig.{name} must be positive or None (no clipping), got {value!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"ElmoConfig.dropout must be in [0, 1), got {self.dropout!r}")
        if not isinstance(self.finetune_bilm, bool):
            raise ValueError(f"ElmoConfig.finetune_bilm must be True or False, got {self.finetune_bilm!r}")
        if isinstance(self.scalar_mix_l2_coef, bool) or not isinstance(self.scalar_mix_l2_coef, (int, float)) or not (
            self.scalar_mix_l2_coef >= 0
        ):
            raise ValueError(f"ElmoConfig.scalar_mix_l2_coef must be a number >= 0, got {self.scalar_mix_l2_coef!r}")
        if self.sequence_pooling not in SEQUENCE_POOLINGS:
            raise ValueError(
                f"ElmoConfig.sequence_pooling must be one of {', '.join(map(repr, SEQUENCE_POOLINGS))}, "
                f"got {self.sequence_pooling!r}"
            )
        if self.lm_vocab_size is not None and (isinstance(self.lm_vocab_size, bool) or self.lm_vocab_size < 3):
            raise ValueError(
                f"ElmoConfig.lm_vocab_size must be at least 3 (<S>, </S> and <UNK>) or None, got {self.lm_vocab_size!r}"
            )
        if not 0.0 <= self.lm_dropout < 1.0:
            raise ValueError(f"ElmoConfig.lm_dropout must be in [0, 1), got {self.lm_dropout!r}")
        if isinstance(self.lm_negative_samples, bool) or self.lm_negative_samples < 0:
            raise ValueError(f"ElmoConfig.lm_negative_samples must be an integer >= 0, got {self.lm_negative_samples!r}")

    def _check_alphabet(self):
        if self.alphabet not in ALPHABETS:
            raise ValueError(f"ElmoConfig.alphabet must be one of {', '.join(map(repr, ALPHABETS))}, got {self.alphabet!r}")
        special_ids = {name: getattr(self, name) for name in BYTE_ALPHABET_IDS}
        if self.alphabet == "bytes":
            if self.n_characters != 262:
                raise ValueError(
                    f"ElmoConfig.n_characters must be 262 (261 trained character ids plus the padding row), "
                    f"got {self.n_characters!r}; options.json files written for training say 261: use from_original_options"
                )
            for name, value in special_ids.items():
                if value != BYTE_ALPHABET_IDS[name]:
                    raise ValueError(f"ElmoConfig.{name} of the byte alphabet is {BYTE_ALPHABET_IDS[name]}, got {value!r}")
        else:
            if isinstance(self.n_characters, bool) or not isinstance(self.n_characters, int) or self.n_characters < 2:
                raise ValueError(f"ElmoConfig.n_characters must be an integer >= 2, got {self.n_characters!r}")
            for name, value in special_ids.items():
                if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < self.n_characters:
                    raise ValueError(
                        f"ElmoConfig.{name} must be a character id in 1..n_characters - 1 ({self.n_characters - 1}; "
                        f"0 is the padding word), got {value!r}"
                    )
            if len(set(special_ids.values())) != len(special_ids):
                raise ValueError(f"ElmoConfig's special character ids must differ, got {special_ids}")
        for name in ("word_vocab_size", "word_embedding_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"ElmoConfig.{name} must be an integer >= 0 (0: no word input), got {value!r}")
        if (self.word_vocab_size > 0) != (self.word_embedding_dim > 0):
            raise ValueError(
                f"ElmoConfig.word_vocab_size ({self.word_vocab_size}) and word_embedding_dim "
                f"({self.word_embedding_dim}) must both be 0 (no word input) or both positive"
            )
        if self.word_vocab_size:
            for name in ("bos_word_id", "eos_word_id"):
                value = getattr(self, name)
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < self.word_vocab_size:
                    raise ValueError(
                        f"ElmoConfig.{name} must be a word id in 0..word_vocab_size - 1 ({self.word_vocab_size - 1}), "
                        f"got {value!r}"
                    )
        if not isinstance(self.always_project, bool):
            raise ValueError(f"ElmoConfig.always_project must be True or False, got {self.always_project!r}")

    @property
    def num_char_filters(self) -> int:
        """F, the width of the character CNN's output (2048 for the released models)."""
        return sum(count for _, count in self.char_cnn_filters)

    @property
    def vocab_size(self) -> int:
        """The size of the character alphabet, `n_characters` (the tokenizer's `vocab_size`): ELMo has no word vocabulary."""
        return self.n_characters

    @property
    def hidden_size(self) -> int:
        """Width of every layer of `hidden_states`: forward and backward halves, 2P."""
        return 2 * self.projection_dim

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

        Training-only keys that bilm-tf writes are ignored; `n_characters` may be 261 (training) or 262.
        `kwargs` set the output options (`num_output_representations`, `do_layer_norm`, `dropout`).
        """
        source = "options"
        if not isinstance(options, dict):
            source = os.fspath(options)
            try:
                with open(source, encoding="utf-8") as f:
                    options = json.load(f)
            except FileNotFoundError:
                raise ValueError(f"{source}: options file not found") from None
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                raise ValueError(f"{source}: not a JSON options file ({error})") from None
        char_cnn = options.get("char_cnn")
        lstm = options.get("lstm")
        if not isinstance(char_cnn, dict):
            raise ValueError(
                f"{source}: no 'char_cnn' section; only character-input ELMo models can be converted"
            )
        if not isinstance(lstm, dict):
            raise ValueError(f"{source}: no 'lstm' section")

        def required(section: dict, name: str, key: str):
            if key not in section:
                raise ValueError(f"{source}: missing option '{name}.{key}'")
            return section[key]

        embedding = required(char_cnn, "char_cnn", "embedding")
        if not isinstance(embedding, dict) or "dim" not in embedding:
            raise ValueError(f"{source}: missing option 'char_cnn.embedding.dim'")
        n_characters = char_cnn.get("n_characters", 262)
        if n_characters not in (261, 262):
            raise ValueError(f"{source}: option 'char_cnn.n_characters' must be 261 or 262, got {n_characters!r}")
        return cls(
            char_embedding_dim=embedding["dim"],
            char_cnn_filters=required(char_cnn, "char_cnn", "filters"),
            num_highway_layers=char_cnn.get("n_highway", 0) or 0,
            char_cnn_activation=char_cnn.get("activation", "relu"),
            max_characters_per_token=char_cnn.get("max_characters_per_token", 50),
            n_characters=262,
            cell_size=required(lstm, "lstm", "dim"),
            projection_dim=required(lstm, "lstm", "projection_dim"),
            num_lstm_layers=required(lstm, "lstm", "n_layers"),
            cell_clip=lstm.get("cell_clip"),
            proj_clip=lstm.get("proj_clip"),
            use_skip_connections=bool(lstm.get("use_skip_connections", False)),
            **kwargs,
        )

    def to_original_options(self) -> dict[str, Any]:
        """The `options.json` content that bilm-tf and AllenNLP read for this model (inference form, 262)."""
        if self.alphabet != "bytes" or self.word_vocab_size or self.forget_bias != 1.0 or self.always_project:
            raise ValueError(
                "this model is not in bilm-tf's form (a character vocabulary, word input, a forget bias stored in the "
                "weights or projections of equal widths: an ELMoForManyLangs model): convert it back with "
                "conversion/convert_elmoformanylangs.py --to-elmoformanylangs"
            )
        return {
            "lstm": {
                "dim": self.cell_size,
                "projection_dim": self.projection_dim,
                "n_layers": self.num_lstm_layers,
                "cell_clip": self.cell_clip,
                "proj_clip": self.proj_clip,
                "use_skip_connections": self.use_skip_connections,
            },
            "char_cnn": {
                "activation": self.char_cnn_activation,
                "embedding": {"dim": self.char_embedding_dim},
                "filters": [list(f) for f in self.char_cnn_filters],
                "max_characters_per_token": self.max_characters_per_token,
                "n_characters": self.n_characters,
                "n_highway": self.num_highway_layers,
            },
        }


__all__ = ["ALPHABETS", "ELMO_AUTO_MAP", "ElmoConfig"]
