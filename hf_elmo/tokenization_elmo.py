"""ELMo tokenizer: text -> words -> one vector of `max_characters_per_token` character ids per word.

ELMo reads characters, so there is no word vocabulary and no unknown word: every word is spelled out as the
UTF-8 bytes the original biLM was trained on. The tokenizer only splits text into words and spells them;
the model adds the sentence boundaries `<S>` / `</S>` itself, as AllenNLP does.

ELMoForManyLangs' models spell words with a character vocabulary instead (char.dic), and may read each word's id
in a word vocabulary (word.dic) too: given those files, the tokenizer spells words as that package does
(`lexicon.py`) and returns the word ids as `input_word_ids`.

This file is copied into saved model folders as Hub remote code: it imports only stdlib, numpy, tokenizers
and transformers.
"""

import copy
import difflib
import json
import os
import re
import threading
from collections.abc import Mapping, Sequence

import numpy as np
from tokenizers import Regex, pre_tokenizers
from transformers import BatchEncoding, PreTrainedTokenizer
from transformers.tokenization_python import Trie
from transformers.tokenization_utils_base import TruncationStrategy
from transformers.utils import PaddingStrategy, logging, to_py_obj

from .lexicon import BOS, EOS, ElmoLexicon

# The character alphabet, after the references' +1 shift that frees 0 for padding words.
PAD_WORD_CHAR_ID = 0  # every character of a padding word: a padding word is the all-zero vector
# 1..256 are the bytes 0..255
BOS_CHAR_ID = 257  # the one character of the sentence start word "<S>"
EOS_CHAR_ID = 258  # the one character of the sentence end word "</S>"
BOW_CHAR_ID = 259  # begin of word
EOW_CHAR_ID = 260  # end of word
PAD_CHAR_ID = 261  # fills a word after its end-of-word
NUM_CHAR_IDS = 262

BOS_WORD = "<S>"
EOS_WORD = "</S>"

# ElmoTokenizer's own keywords, as saved in tokenizer_config.json.
_SETTINGS = ("max_characters_per_token", "char_vocab_file", "word_vocab_file", "alphabet")

logger = logging.get_logger(__name__)

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_BYTE_ORDER_MARK = "\ufeff"


def _check_encodable(text: str, what: str) -> None:
    """Refuse text with a lone surrogate (what `errors="surrogateescape"` decoding leaves): it has no UTF-8 form."""
    if (found := _LONE_SURROGATE.search(text)) is not None:
        raise ValueError(
            f"{what} holds a lone surrogate U+{ord(found.group()):04X} at character {found.start()}, which has no UTF-8 "
            f"form: decode the text with errors='replace', or remove it"
        )


def _warn_of_misspelt_settings(settings: Mapping) -> None:
    """Warn of each keyword that looks meant for one of ElmoTokenizer's settings (`max_chars_per_token`): transformers
    keeps a keyword that no tokenizer reads in `init_kwargs`, so the setting would stay at its default without a
    word."""
    for key in settings:
        if meant := difflib.get_close_matches(key, _SETTINGS, n=2, cutoff=0.8):
            logger.warning(f"ElmoTokenizer has no setting {key!r} (kept in init_kwargs, but never used): did you mean "
                           f"{' or '.join(map(repr, meant))}?")


def word_to_char_ids(word: str, max_characters_per_token: int = 50) -> list[int]:
    """
    Spell one word as `max_characters_per_token` character ids: `[BOW, byte+1, ..., EOW, PAD_CHAR, ...]`.

    The UTF-8 bytes are cut to `max_characters_per_token - 2`, even inside a multi-byte character, because the
    original model was trained that way. `"<S>"` and `"</S>"` (exact match) become the sentence boundary words.
    A word with a lone surrogate (no UTF-8 form) is refused with a ValueError.

    Example: `word_to_char_ids("Second")` -> `[259, 84, 102, 100, 112, 111, 101, 260, 261, ..., 261]` (50 ids).
    """
    if word == BOS_WORD:
        characters = [BOS_CHAR_ID]
    elif word == EOS_WORD:
        characters = [EOS_CHAR_ID]
    else:
        _check_encodable(word, f"the word {word!r}")
        characters = [byte + 1 for byte in word.encode("utf-8")[: max_characters_per_token - 2]]
    char_ids = [BOW_CHAR_ID, *characters, EOW_CHAR_ID]
    return char_ids + [PAD_CHAR_ID] * (max_characters_per_token - len(char_ids))


def char_ids_to_word(char_ids: Sequence[int]) -> str | None:
    """
    Read back the word spelled by one vector of character ids; `None` for a padding word (all zeros).

    Bytes cut inside a multi-byte character come back as U+FFFD.
    """
    char_ids = [int(char_id) for char_id in char_ids]
    if not any(char_ids):
        return None
    end = char_ids.index(EOW_CHAR_ID) if EOW_CHAR_ID in char_ids else len(char_ids)
    characters = char_ids[1:end]
    if characters == [BOS_CHAR_ID]:
        return BOS_WORD
    if characters == [EOS_CHAR_ID]:
        return EOS_WORD
    return bytes(char_id - 1 for char_id in characters if 1 <= char_id <= 256).decode("utf-8", errors="replace")


def _is_word_vector(ids) -> bool:
    """True for the character ids of one word (a flat, non-empty sequence of ints)."""
    return len(ids) > 0 and (isinstance(ids[0], (int, np.integer)) or getattr(ids[0], "ndim", None) == 0)


def _unless_a_list(ids):
    """A tensor or an array (a batch, an example, a word, an id) as lists (an int for an id); a list as it is, its items
    converted where decode meets them. transformers' to_py_obj tests every id of a list: batch_decode, which gives
    decode the lists it has made, spent most of its time there, once more per example."""
    return ids if isinstance(ids, (list, tuple)) else to_py_obj(ids)


def _refuse_what_holds_no_ids(ids, method: str) -> None:
    """Refuse text or None where character ids belong: decode would read a str as a batch of one-character
    batches, for ever."""
    if ids is None or isinstance(ids, (str, bytes, bytearray)):
        raise TypeError(
            f"{method} takes character ids (a word [chars], an example [words, chars] or a batch [batch, words, chars] "
            f"of ints, as the tokenizer gives them), got {type(ids).__name__} {str(ids)[:40]!r}"
        )


def _is_single_example(input_ids) -> bool:
    """True for one example's ids `[words, chars]`, False for a batch `[batch, words, chars]`."""
    if hasattr(input_ids, "ndim"):
        return input_ids.ndim == 2
    if len(input_ids) == 0:  # one example without words
        return True
    first = input_ids[0]
    if hasattr(first, "ndim"):
        return first.ndim == 1
    # A batch's first example may be empty; a word never is.
    return _is_word_vector(first)


def _build_word_splitter() -> pre_tokenizers.PreTokenizer:
    """Split raw text into words and punctuation, close to the tokenization of ELMo's training data."""
    punctuation = r"[\p{P}\p{Sc}\p{Sm}^`]"  # Unicode punctuation plus the ASCII symbols; not emoji
    word_character = r"[\p{L}\p{M}\p{N}]"
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.WhitespaceSplit(),
            # Chinese and Japanese are written without spaces: one word per character, as BERT does for Chinese.
            pre_tokenizers.Split(Regex(r"[\p{Han}\p{Hiragana}\p{Katakana}]"), behavior="isolated"),
            # Punctuation is a word of its own unless it sits inside a word: "3.5", "U.S", "e-mail" stay whole.
            pre_tokenizers.Split(
                Regex(rf"(?<!{word_character}){punctuation}|{punctuation}(?!{word_character})"), behavior="isolated"
            ),
            # The 1B Word Benchmark splits clitics off as the Penn Treebank does: "don't" -> "do n't".
            pre_tokenizers.Split(Regex(r"(?i)n['’]t$|['’](?:s|re|ve|ll|m|d)$"), behavior="isolated"),
        ]
    )


class ElmoBatchEncoding(BatchEncoding):
    """
    A `BatchEncoding` with `word_ids()` and `sequence_ids()`, which Python tokenizers otherwise lack.

    Every input word is exactly one position, so the mapping follows from the ids: a position is a word unless
    its vector is all zeros. `first_word_index[i]` is the index of example i's first kept word (> 0 only after
    truncation from the left).
    """

    def __init__(self, data=None, tensor_type=None, prepend_batch_axis=False, first_word_index=None):
        super().__init__(data, tensor_type=tensor_type, prepend_batch_axis=prepend_batch_axis)
        self.first_word_index = first_word_index

    def __getstate__(self):
        return {**super().__getstate__(), "first_word_index": self.first_word_index}

    def __setstate__(self, state):
        super().__setstate__(state)
        self.first_word_index = state.get("first_word_index")

    def word_ids(self, batch_index: int = 0) -> list[int | None]:
        """For each position of example `batch_index`: the index of its input word, or `None` for padding."""
        input_ids = self.data["input_ids"]
        if _is_single_example(input_ids):
            if batch_index != 0:
                raise IndexError(f"This encoding holds a single example, got batch_index={batch_index}.")
        else:
            input_ids = input_ids[batch_index]
        word_index = self.first_word_index[batch_index] if self.first_word_index else 0
        word_ids = []
        for char_ids in to_py_obj(input_ids):
            if any(char_ids):
                word_ids.append(word_index)
                word_index += 1
            else:
                word_ids.append(None)
        return word_ids

    def sequence_ids(self, batch_index: int = 0) -> list[int | None]:
        """For each position: 0 for a word, `None` for padding (ELMo encodes single sentences, never pairs)."""
        return [None if word_id is None else 0 for word_id in self.word_ids(batch_index)]


class _SpelledWords:
    """
    A bounded cache of spelled words for `ElmoTokenizer.encode_words`: each word's character ids are one row of a
    table (row 0 is the padding word, all zeros), and its word id one entry of a vector, so that a batch is gathered
    with one index instead of being built from a list per word. Spelling a word in Python is most of the cost of
    encoding (150,000 words/s); words repeat (text is Zipfian), so most of a batch is found here.

    Full, it starts again empty. A copy (pickle, deepcopy) starts empty: the cache and its lock stay with their
    tokenizer. A lock keeps two threads that encode with one tokenizer from gathering rows that the other replaces.
    """

    def __init__(self, max_words: int = 1 << 15):
        self.max_words, self.lock = max_words, threading.Lock()
        self.clear(width=0)

    def __reduce__(self):
        return type(self), (self.max_words,)

    def clear(self, width: int) -> None:
        self.rows: dict[str, int] = {}
        self.size = 1  # rows in use, the padding word's included
        self.char_ids, self.word_ids = np.zeros((1024, width), dtype=np.int64), np.zeros(1024, dtype=np.int64)

    def lookup(self, words: list[str], spell, word_id) -> list[int]:
        """The rows of `words`, after spelling those not here (`spell(word)`; `word_id(word)`, or None)."""
        rows = self.rows
        found = [rows.get(word, 0) for word in words]
        if 0 not in found:
            return found
        new = list(dict.fromkeys(word for word, row in zip(words, found) if row == 0))
        if self.size - 1 + len(new) > self.max_words:  # (a batch of more words than that is kept until the next)
            self.clear(self.char_ids.shape[1])
            rows, new = self.rows, list(dict.fromkeys(words))
        first, end = self.size, self.size + len(new)
        if end > len(self.char_ids):
            capacity = max(end, min(2 * len(self.char_ids), self.max_words + 1))
            self.char_ids = np.concatenate([self.char_ids[:first], np.zeros((capacity - first, self.char_ids.shape[1]), np.int64)])
            self.word_ids = np.concatenate([self.word_ids[:first], np.zeros(capacity - first, np.int64)])
        self.char_ids[first:end] = [spell(word) for word in new]
        if word_id is not None:
            self.word_ids[first:end] = [word_id(word) for word in new]
        rows.update(zip(new, range(first, end)))
        self.size = end
        return [rows[word] for word in words]


def _model_config_settings(folder) -> dict:
    """`max_characters_per_token` and `alphabet` from the config.json of an ELMo in the local `folder` that holds no
    tokenizer_config.json (a model saved without its tokenizer, which `from_pretrained` then builds from nothing):
    without them a model of 20 characters per word, or one of a character vocabulary, got a tokenizer of UTF-8 bytes
    and 50 characters. Empty for any other folder or name."""
    if not isinstance(folder, (str, os.PathLike)) or not os.path.isdir(folder) or os.path.isfile(
            os.path.join(folder, "tokenizer_config.json")):
        return {}
    try:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as file:
            config = json.load(file)
    except (OSError, ValueError):  # (no config, or one that is no JSON: the model's loading names it)
        return {}
    if not isinstance(config, dict) or config.get("model_type") != "elmo":
        return {}
    return {name: config[name] for name in ("max_characters_per_token", "alphabet") if name in config}


def _check_one_length(lengths: set[int], padding: str = "padding=True (and truncation=True where max_length is "
                      "shorter than an example)") -> None:
    """Unpadded examples make a tensor only with one number of words (torch read a batch whose first example has no
    words as [batch, 0]: no words at all, silently). `padding`: what to pass instead."""
    if len(lengths) > 1:
        raise ValueError(
            f"input_ids: the examples have different numbers of words ({', '.join(map(str, sorted(lengths)))}), "
            f"which make no tensor: pass {padding}, or return_tensors=None to get them as lists"
        )


class ElmoTokenizer(PreTrainedTokenizer):
    """
    Splits text into words and spells each word as `max_characters_per_token` character ids.

    Outputs:
        input_ids: `[batch, words, max_characters_per_token]` character ids (see `word_to_char_ids`); a padding
            word is all zeros, which is why `pad_token_id` is 0.
        attention_mask: `[batch, words]`, 1 for words and 0 for padding.
        offset_mapping (with `return_offsets_mapping=True`): `[batch, words, 2]` character spans of the words in
            the text; for words given with `is_split_into_words=True`, `(0, len(word))`.
        special_tokens_mask (with `return_special_tokens_mask=True`): `[batch, words]`, 1 for padding and for
            added special tokens.
        token_type_ids (with `return_token_type_ids=True`): `[batch, words]`, all 0 (ELMo reads one sentence).
        length (with `return_length=True`): the number of words of each example, before padding.
        input_word_ids (for a model with word input, see `char_vocab_file`): `[batch, words]`, each word's id in
            word.dic (`<oov>`'s for a word it does not have).
        overflowing_tokens, num_truncated_tokens (with `return_overflowing_tokens=True` and truncation): the words
            cut off (with `stride` words of overlap) and how many were cut, per example.
    A single example without `return_tensors` gives un-batched lists `[words][chars]`. `max_length` counts words.
    A byte-order mark (U+FEFF) at the start of raw text is not part of its first word; text with a lone surrogate
    is refused (it has no UTF-8 form).

    The "vocabulary" is the 262-entry character alphabet (`<pad>`, `<0x00>`..`<0xFF>`, `<S>`, `</S>`, `<bow>`,
    `<eow>`, `<char_pad>`), or char.dic's after the padding word `<pad_word>` (`<U+5929>` for 天, `<bos_char>`, ...,
    `<char_pad>` for char.dic's `<pad>`, the character that fills a word); it exists for the transformers machinery,
    not for encoding.
    `convert_tokens_to_ids` takes words, as `tokenize` gives them, to the character ids `encode` gives; a name of the
    alphabet (or an added special token) gives its id.

    `add_tokens` and `add_special_tokens` add words that raw text is split around, never inside (`tokenizer.add_tokens(
    ["don't", "<URL>"])` keeps them whole), wherever they occur, inside a longer word too (`AddedToken`'s
    `single_word`, `lstrip` and `rstrip` are not read); they are spelled as every word is, so the model needs no new
    embedding.
    Added special tokens are marked in `special_tokens_mask` and dropped by `decode(..., skip_special_tokens=True)`.
    With `split_special_tokens=True` (in a call, or as the tokenizer's setting) raw text is split as if no token had
    been added, as transformers does then.
    The padding word is always id 0, the all-zero word; `pad_token` only names it, when the tokenizer is made (setting
    `pad_token` or `pad_token_id` to anything else later is refused): a word of that name in the text is
    a word as any other (raw text splits `<pad>` into `<`, `pad`, `>`; a pre-split `"<pad>"` is spelled, kept by
    `decode` and 0 in `special_tokens_mask`), though `convert_tokens_to_ids(pad_token)` is `pad_token_id`, 0, as
    transformers needs.

    Args:
        max_characters_per_token (`int`, defaults to 50): characters per word, begin/end-of-word included. Must
            match the model's `max_characters_per_token`. `from_pretrained` of a model folder saved without its
            tokenizer (no tokenizer_config.json) takes it, and `alphabet`, from the folder's config.json.
        char_vocab_file (`str`, *optional*): an ELMoForManyLangs char.dic: spell words with its characters instead
            of UTF-8 bytes (the sentence boundaries are then the words `<bos>` and `<eos>`).
        word_vocab_file (`str`, *optional*): with `char_vocab_file`, its word.dic. Word ids are returned as
            `input_word_ids` when that name is in `model_input_names` (the default with a word.dic; the converter
            leaves it out for models that read characters only, whose word.dic is their language model's vocabulary).
        alphabet (`str`, *optional*): `"bytes"` or `"vocabulary"` (char.dic's), as the model's config says; by
            default, `"vocabulary"` exactly when a `char_vocab_file` is given. It is saved in tokenizer_config.json,
            so that a saved tokenizer of a character vocabulary whose char.dic is missing fails to load, naming the
            file, rather than spelling UTF-8 bytes (folders saved before it was recorded load as before).
    Any other keyword goes to transformers' `PreTrainedTokenizer` (`model_max_length`, `padding_side`, ...); one that
    looks meant for the four above (`max_chars_per_token=`, `vocab_file=`) is named in a warning with the setting.
    """

    model_input_names = ["input_ids", "attention_mask"]
    vocab_files_names = {"char_vocab_file": "char.dic", "word_vocab_file": "word.dic"}
    # Every saved tokenizer names its class in tokenizer_config.json's auto_map and carries this file, also where
    # this file runs as remote code: transformers 5 finds a tokenizer's remote code there, not in config.json.
    _auto_class = "AutoTokenizer"

    def __init__(
        self,
        max_characters_per_token: int | None = None,
        char_vocab_file: str | None = None,
        word_vocab_file: str | None = None,
        alphabet: str | None = None,
        **kwargs,
    ):
        _warn_of_misspelt_settings(kwargs)
        # A model folder saved without its tokenizer: the tokenizer the model's config describes, not the default.
        settings = _model_config_settings(kwargs.get("name_or_path"))
        if max_characters_per_token is None:
            max_characters_per_token = settings.get("max_characters_per_token", 50)
        alphabet = alphabet or settings.get("alphabet")
        if isinstance(max_characters_per_token, bool) or not isinstance(max_characters_per_token, int):
            raise ValueError(f"max_characters_per_token must be an integer, got {max_characters_per_token!r}.")
        if max_characters_per_token < 3:
            raise ValueError(
                f"max_characters_per_token must be at least 3 (begin, one byte, end), got {max_characters_per_token}."
            )
        alphabet = alphabet or ("bytes" if char_vocab_file is None else "vocabulary")
        if alphabet not in ("bytes", "vocabulary"):
            raise ValueError(f"alphabet must be 'bytes' or 'vocabulary', got {alphabet!r}.")
        if alphabet == "vocabulary" and char_vocab_file is None:
            # from_pretrained passes the files it found in the folder (name_or_path): char.dic is not there.
            folder = kwargs.get("name_or_path")
            missing = os.path.join(folder, self.vocab_files_names["char_vocab_file"]) if folder else "char.dic"
            raise ValueError(f"{missing}: not found; this tokenizer spells words with that character vocabulary "
                             "(alphabet 'vocabulary'), without it the ids would be wrong.")
        if alphabet == "bytes" and char_vocab_file is not None:
            raise ValueError(f"{char_vocab_file}: a character vocabulary, for a tokenizer of alphabet 'bytes' (UTF-8 "
                             "bytes); pass alphabet='vocabulary', or remove the file.")
        if word_vocab_file is not None and char_vocab_file is None:
            raise ValueError(f"{word_vocab_file} (word_vocab_file) needs a char.dic (char_vocab_file), which was not "
                             "given or found: words are always spelled too.")
        self.max_characters_per_token = max_characters_per_token
        self._word_splitter = _build_word_splitter()
        self._spelled_words = _SpelledWords()
        self.lexicon = None
        # Built before super().__init__, which looks the special tokens up in get_vocab().
        if char_vocab_file is not None:
            self.lexicon = ElmoLexicon.from_files(char_vocab_file, word_vocab_file, max_characters_per_token)
            if self.lexicon.words is not None:
                kwargs.setdefault("model_input_names", ["input_ids", "input_word_ids", "attention_mask"])
        default_pad_token = "<pad>" if self.lexicon is None else "<pad_word>"  # char.dic's <pad> is another id
        if kwargs.setdefault("pad_token", default_pad_token) is None:
            raise ValueError("ElmoTokenizer pads with the all-zero word, id 0: pad_token names it and cannot be None.")
        pad_token = str(kwargs["pad_token"])  # the name of id 0, the all-zero padding word
        if self.lexicon is None:
            character_names = [pad_token, *(f"<0x{byte:02X}>" for byte in range(256))]
            character_names += [BOS_WORD, EOS_WORD, "<bow>", "<eow>", "<char_pad>"]
        else:
            character_names = [pad_token, *self.lexicon.char_names()]
        if pad_token in character_names[1:]:
            raise ValueError(
                f"pad_token {pad_token!r} names another character id; choose a name of its own "
                f"(default {default_pad_token!r})."
            )
        self._vocab = {name: char_id for char_id, name in enumerate(character_names)}
        self._id_to_name = character_names
        super().__init__(
            max_characters_per_token=max_characters_per_token, char_vocab_file=char_vocab_file,
            word_vocab_file=word_vocab_file, alphabet=alphabet, **kwargs,
        )
        # (else a str failed at the first call, comparing it with a sentence's length)
        if isinstance(self.model_max_length, bool) or not isinstance(self.model_max_length, int) or self.model_max_length < 1:
            raise ValueError(f"model_max_length must be a number of words >= 1, got {self.model_max_length!r}.")
        if self.returns_word_ids and (self.lexicon is None or self.lexicon.words is None):
            folder = kwargs.get("name_or_path")  # (from_pretrained: word.dic is not in that folder)
            if self.lexicon is not None and folder:
                missing = os.path.join(folder, self.vocab_files_names["word_vocab_file"])
                raise ValueError(f"{missing}: not found; this tokenizer returns input_word_ids (model_input_names), "
                                 "the ids of that word vocabulary, which the model reads.")
            raise ValueError("model_input_names names input_word_ids, which need a word.dic (word_vocab_file).")
        self._padding_named = True

    def __setattr__(self, key, value):
        # Once made, the padding word keeps its id 0 and its name: transformers pads with pad_token_id, which
        # another name would make an added token's id (262 up), and the model refuses that id.
        if key in ("pad_token", "pad_token_id") and self.__dict__.get("_padding_named"):
            self._check_padding_unchanged(key, value)
        super().__setattr__(key, value)

    def add_special_tokens(self, special_tokens_dict, replace_extra_special_tokens=True) -> int:
        if isinstance(special_tokens_dict, Mapping) and "pad_token" in special_tokens_dict:
            self._check_padding_unchanged("pad_token", special_tokens_dict["pad_token"])  # (before any other key)
        return super().add_special_tokens(special_tokens_dict, replace_extra_special_tokens)

    def _check_padding_unchanged(self, key: str, value) -> None:
        name = self._id_to_name[PAD_WORD_CHAR_ID]
        if (value == PAD_WORD_CHAR_ID) if key == "pad_token_id" else (value is not None and str(value) == name):
            return
        raise ValueError(
            f"{key} cannot become {value!r}: ElmoTokenizer pads with id {PAD_WORD_CHAR_ID}, the all-zero word, named "
            f"{name!r}; to give it another name, make the tokenizer with it (`ElmoTokenizer.from_pretrained(path, "
            "pad_token=...)`)."
        )

    @property
    def returns_word_ids(self) -> bool:
        """Whether encoding returns `input_word_ids` (for a model with word input)."""
        return "input_word_ids" in self.model_input_names

    @property
    def sentence_boundaries(self) -> tuple[str, str]:
        """The words that begin and end a sentence for the model: `<S>`, `</S>` (`<bos>`, `<eos>` with char.dic)."""
        return (BOS_WORD, EOS_WORD) if self.lexicon is None else (BOS, EOS)

    # ---- vocabulary (the character alphabet) -------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return len(self._id_to_name)

    def get_vocab(self) -> dict[str, int]:
        return {**self._vocab, **self._added_tokens_encoder}

    def _convert_token_to_id(self, token: str) -> int:
        return self._vocab[token]

    def _convert_id_to_token(self, index: int) -> str:
        if index in self._added_tokens_decoder:
            return self._added_tokens_decoder[index].content
        if not 0 <= index < self.vocab_size:
            raise self._not_a_character_id(index)
        return self._id_to_name[index]

    def _not_a_character_id(self, index: int) -> IndexError:
        """The error for an id outside the character alphabet: one that names nothing, or, inside a word's vector, an
        added token's (a word holds characters only)."""
        if index in self._added_tokens_decoder:
            return IndexError(f"{index} is the id of an added token, not a character id (0..{self.vocab_size - 1}): a "
                              "word's vector holds character ids only.")
        return IndexError(f"{index} is neither a character id (0..{self.vocab_size - 1}) nor the id of an added token.")

    def convert_tokens_to_ids(self, tokens: str | list[str]):
        """
        Words (as `tokenize` gives them) -> their character ids, one vector per word, as `encode` spells them: a
        word -> `[max_characters_per_token]`, a list of words -> `[words, max_characters_per_token]`. A name of the
        character alphabet (`"<pad>"`, `"<0x41>"`, ...) or an added special token gives its id, an int, as
        transformers' special-token attributes (`pad_token_id`, `eos_token_id`, ...) need.
        """
        return self._tokens_to_ids(tokens, self._special_words())

    def _tokens_to_ids(self, tokens: str | list, special_words: set[str]):
        """`convert_tokens_to_ids` with the added special tokens looked up once per call, not once per word."""
        if isinstance(tokens, str):
            if tokens in self._vocab:
                return self._vocab[tokens]
            if tokens in special_words:
                return self._added_tokens_encoder[tokens]
            return self.word_to_char_ids(tokens)
        return [self._tokens_to_ids(token, special_words) for token in tokens]

    def _special_words(self) -> set[str]:
        """The added special tokens: words that `special_tokens_mask` marks and `skip_special_tokens` drops."""
        return {token.content for token in self._words_kept_whole().values() if token.special}

    def _words_kept_whole(self) -> dict:
        """The added tokens (id -> AddedToken), which raw text is split around. Not `pad_token` (id 0): it names the
        all-zero padding word, which no text holds, so a word of that name in the text is spelled as any other."""
        return {index: token for index, token in self._added_tokens_decoder.items() if index != PAD_WORD_CHAR_ID}

    @PreTrainedTokenizer.added_tokens_decoder.setter
    def added_tokens_decoder(self, value: dict) -> None:
        """transformers' setter, then the trie of the words that raw text is split around, which it leaves as it was
        (so that a token set here is kept whole, as one that `add_tokens` adds)."""
        PreTrainedTokenizer.added_tokens_decoder.fset(self, value)
        self._update_trie()

    def _update_trie(self, unique_no_split_tokens: list[str] | None = None):
        """The base class's trie of the words that raw text is split around, without `pad_token`."""
        self.tokens_trie = Trie()
        for token in [*(added.content for added in self._words_kept_whole().values()), *(unique_no_split_tokens or [])]:
            self.tokens_trie.add(token)

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple[str, ...]:
        # The byte alphabet is fixed; everything configurable lives in tokenizer_config.json.
        if self.lexicon is None:
            return ()
        prefix = f"{filename_prefix}-" if filename_prefix else ""
        char_file = os.path.join(save_directory, prefix + self.vocab_files_names["char_vocab_file"])
        word_file = os.path.join(save_directory, prefix + self.vocab_files_names["word_vocab_file"])
        self.lexicon.save(char_file, word_file)
        return (char_file,) if self.lexicon.words is None else (char_file, word_file)

    # ---- words ---------------------------------------------------------------------------------------------

    def split_words(self, text: str, split_special_tokens: bool | None = None) -> list[str]:
        """Split raw text into words: on whitespace, around punctuation, and around each Chinese/Japanese character;
        added tokens are kept whole, unless `split_special_tokens` (default: the tokenizer's setting of that name),
        which splits them as any text, as transformers does with every added token then."""
        return [word for word, _ in self._words_with_offsets(text, split_special_tokens)]

    def tokenize(self, text: str, **kwargs) -> list[str]:
        """The words of `text` (the tokens of this tokenizer are whole words); see `split_words`."""
        return self.split_words(text, kwargs.get("split_special_tokens"))

    def _words_with_offsets(self, text: str, split_special_tokens: bool | None = None
                            ) -> list[tuple[str, tuple[int, int]]]:
        """The words of raw text with their character spans in it."""
        if not isinstance(text, str):
            raise TypeError(f"tokenize and split_words take raw text, a str; got {type(text).__name__} (a list of "
                            "words is split already: encode it with is_split_into_words=True)")
        _check_encodable(text, "the text")
        start = 1 if text.startswith(_BYTE_ORDER_MARK) else 0  # a byte-order mark is not part of the first word
        if split_special_tokens is None:
            split_special_tokens = self.split_special_tokens
        kept_whole = set() if split_special_tokens else {token.content for token in self._words_kept_whole().values()}
        segments = self.tokens_trie.split(text[start:]) if kept_whole else [text[start:]]
        words = []
        for segment in segments:
            if segment in kept_whole:
                words.append((segment, (start, start + len(segment))))
            else:
                pieces = self._word_splitter.pre_tokenize_str(segment)
                words.extend((word, (start + begin, start + end)) for word, (begin, end) in pieces)
            start += len(segment)
        return words

    def word_to_char_ids(self, word: str) -> list[int]:
        """Spell one word as `max_characters_per_token` character ids (see the module function, or `lexicon.py`)."""
        if self.lexicon is not None:
            _check_encodable(word, f"the word {word!r}")  # (as raw text holding it is, and as the byte alphabet does)
            return self.lexicon.char_ids(word)
        return word_to_char_ids(word, self.max_characters_per_token)

    def word_to_id(self, word: str) -> int:
        """The word's id in word.dic (`<oov>`'s for a word it does not have); needs a word.dic."""
        if self.lexicon is None or self.lexicon.words is None:
            raise ValueError("this tokenizer has no word vocabulary (word.dic)")
        return self.lexicon.word_id(word)

    def encode_words(self, sentences: list[list[str]], return_tensors: str | None = "pt") -> ElmoBatchEncoding:
        """
        `self(sentences, is_split_into_words=True, padding=True, return_tensors=return_tensors)`, the same ids, mask
        and word ids, several times faster: words spelled before are gathered from a cache (`_SpelledWords`) with
        one index per batch. `hf-elmo embed` and `ElmoEmbedder` encode with it, so that a GPU does not wait for
        the tokenizer. A batch of no sentences, a word that is not a str, a lone surrogate, a sentence longer than
        `model_max_length` are encoded (or refused, with its message) by the call above.
        """
        def the_call():
            return self(sentences, is_split_into_words=True, padding=True, return_tensors=return_tensors)

        # What the call reads otherwise, warns of or refuses (with its message), and lists (the call's own): the call.
        if not hasattr(sentences, "__len__") or return_tensors is None or self.padding_side not in ("left", "right"):
            return the_call()
        lengths = [None if isinstance(sentence, str) or not hasattr(sentence, "__len__") else len(sentence)
                   for sentence in sentences]
        if not lengths or None in lengths or max(lengths) > self.model_max_length:
            return the_call()
        width = self.max_characters_per_token
        # (word ids are cached for every word.dic, not only where they are returned: `model_input_names` may change)
        has_words = self.lexicon is not None and self.lexicon.words is not None
        word_id = self.lexicon.word_id if has_words else None
        cache = self._spelled_words
        try:  # (a word that is not a str, or not encodable: the call names it)
            with cache.lock:
                if cache.char_ids.shape[1] != width:
                    cache.clear(width)
                rows = cache.lookup([word for sentence in sentences for word in sentence], self.word_to_char_ids, word_id)
                index = np.zeros((len(sentences), max(lengths)), dtype=np.int64)  # row 0: the padding word
                mask = np.arange(index.shape[1]) < np.array(lengths)[:, None]
                if self.padding_side == "left":
                    mask = mask[:, ::-1]
                index[mask] = rows
                data = {"input_ids": cache.char_ids[index]}
                if self.returns_word_ids and has_words:
                    data["input_word_ids"] = np.where(mask, cache.word_ids[index], self.lexicon.pad_word_id)
        except (TypeError, ValueError):
            return the_call()
        if "attention_mask" in self.model_input_names:
            data["attention_mask"] = mask.astype(np.int64)
        return ElmoBatchEncoding(data, tensor_type=return_tensors, first_word_index=[0] * len(sentences))

    def _read_word(self, char_ids) -> str | None:
        """The word spelled by one vector of character ids, `None` for the padding word. An id outside the alphabet is
        refused, as it is alone: the readers would drop it from the word (bytes) or read it as `<oov>` (char.dic); so
        is a vector that does not begin with the begin-of-word id."""
        if any(char_ids):  # (the padding word, most of a padded batch, is not looked through twice more)
            if not 0 <= min(char_ids) <= max(char_ids) < self.vocab_size:
                outside = next(char_id for char_id in char_ids if not 0 <= char_id < self.vocab_size)
                raise self._not_a_character_id(int(outside))
            begin = self.lexicon.begin_id if self.lexicon is not None else BOW_CHAR_ID
            if char_ids[0] != begin:  # (else its first character would be taken for the marker)
                shown = f"{[int(char_id) for char_id in char_ids[:8]]}{' ...' if len(char_ids) > 8 else ''}"
                raise ValueError(f"{shown} are not a word's character ids, which begin with the begin-of-word id {begin}")
        if self.lexicon is not None:
            return self.lexicon.char_ids_to_word([int(char_id) for char_id in char_ids])
        return char_ids_to_word(char_ids)

    # ---- encoding ------------------------------------------------------------------------------------------

    def _encode_plus(
        self,
        text,
        text_pair=None,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        truncation_strategy: TruncationStrategy = TruncationStrategy.DO_NOT_TRUNCATE,
        max_length: int | None = None,
        is_split_into_words: bool = False,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_tensors=None,
        return_attention_mask: bool | None = None,
        return_overflowing_tokens: bool = False,
        return_special_tokens_mask: bool = False,
        return_offsets_mapping: bool = False,
        return_length: bool = False,
        return_token_type_ids: bool | None = None,
        stride: int = 0,
        verbose: bool = True,
        split_special_tokens: bool | None = None,
        **kwargs,  # add_special_tokens, ...: nothing to do, ELMo puts no special tokens around words
    ) -> ElmoBatchEncoding:
        """Encode one text or word list, or a batch of them (the entry point of `__call__` and `encode`)."""
        if text_pair is not None:
            raise ValueError("ElmoTokenizer encodes single sentences; text_pair is not supported.")
        if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 0):
            raise ValueError(f"max_length must be a number of words >= 0, got {max_length!r}.")
        # Any sized, indexable batch is read as a list (a datasets Column, a numpy array of str); bytes and
        # mappings are indexable too but hold no words.
        sized = hasattr(text, "__len__") and hasattr(text, "__getitem__")
        if isinstance(text, (bytes, bytearray, Mapping)) or not sized:
            raise TypeError(
                "ElmoTokenizer encodes a str, a list of words (with is_split_into_words=True), or a list of either; "
                f"got {type(text).__name__}."
            )
        if not isinstance(text, str):
            text = list(text)
        if is_split_into_words:
            if isinstance(text, str):
                raise TypeError("With is_split_into_words=True, pass a list of words (or a batch of lists), not a str.")
            is_batched = len(text) > 0 and not isinstance(text[0], str)
        else:
            is_batched = not isinstance(text, str)
        examples = text if is_batched else [text]

        features = {"input_ids": [], "offset_mapping": [], "overflowing_tokens": [], "num_truncated_tokens": []}
        if self.returns_word_ids:
            features["input_word_ids"] = []
        first_word_index = []
        special_words = self._special_words()
        special_tokens_mask = []
        for index, example in enumerate(examples):
            if is_split_into_words:
                if isinstance(example, str):
                    raise TypeError(
                        f"With is_split_into_words=True, each example is a list of words; example {index} is a str "
                        f"({example[:40]!r}): split it, or pass it without is_split_into_words."
                    )
                if not isinstance(example, (list, tuple)) and not hasattr(example, "__array__"):
                    raise TypeError(
                        f"With is_split_into_words=True, each example is a list of words; example {index} is of type "
                        f"{type(example).__name__} ({str(example)[:40]!r})."
                    )
                words = list(example)
                if not all(isinstance(word, str) for word in words):
                    raise TypeError(f"With is_split_into_words=True, every word must be a str, got {words!r}.")
                offsets = [(0, len(word)) for word in words]
            else:
                if isinstance(example, tuple):
                    raise TypeError(
                        f"Example {index} is a tuple, a text pair? ElmoTokenizer encodes single sentences; "
                        "text_pair is not supported."
                    )
                if not isinstance(example, str):
                    raise TypeError(
                        f"Example {index} is of type {type(example).__name__}, not str (lists of words need "
                        "is_split_into_words=True)."
                    )
                pieces = self._words_with_offsets(example, split_special_tokens)
                words = [word for word, _ in pieces]
                offsets = [offset for _, offset in pieces]

            start, cut = 0, 0
            truncate = truncation_strategy != TruncationStrategy.DO_NOT_TRUNCATE and max_length is not None
            overflowing = []
            if truncate and len(words) > max_length:
                # truncation_side="left" keeps the last words; word_ids() still counts from the first input word.
                cut = len(words) - max_length
                left = self.truncation_side == "left"
                overflowing = words[: cut + stride] if left else words[max(0, max_length - stride) :]
                start = cut if left else 0
                words, offsets = words[start : start + max_length], offsets[start : start + max_length]
            elif not truncate:
                self._eventual_warn_about_too_long_sequence(words, max_length, verbose)
            features["input_ids"].append([self.word_to_char_ids(word) for word in words])
            if self.returns_word_ids:
                features["input_word_ids"].append([self.lexicon.word_id(word) for word in words])
            features["offset_mapping"].append(offsets)
            features["overflowing_tokens"].append([self.word_to_char_ids(word) for word in overflowing])
            features["num_truncated_tokens"].append(cut)
            special_tokens_mask.append([int(word in special_words) for word in words])
            first_word_index.append(start)

        num_words = [len(char_ids) for char_ids in features["input_ids"]]
        if return_special_tokens_mask:
            features["special_tokens_mask"] = special_tokens_mask
        if return_token_type_ids:
            features["token_type_ids"] = [[0] * length for length in num_words]
        if return_length:
            features["length"] = num_words
        if not return_offsets_mapping:
            del features["offset_mapping"]
        if not return_overflowing_tokens:
            del features["overflowing_tokens"], features["num_truncated_tokens"]

        padded = self.pad(
            features,
            padding=padding_strategy,
            max_length=max_length,
            pad_to_multiple_of=pad_to_multiple_of,
            padding_side=padding_side,
            return_attention_mask=return_attention_mask,
        )
        data = dict(padded)
        if return_tensors is not None:
            lengths = {len(char_ids) for char_ids in data["input_ids"]}
            _check_one_length(lengths)
            # Build the id tensor with its character axis even when there are no words ([batch, 0, chars]).
            words = lengths.pop() if lengths else 0
            data["input_ids"] = np.asarray(data["input_ids"], dtype=np.int64).reshape(
                len(examples), words, self.max_characters_per_token
            )
            if "input_word_ids" in data:
                data["input_word_ids"] = np.asarray(data["input_word_ids"], dtype=np.int64).reshape(len(examples), words)
            if "offset_mapping" in data:  # [batch, words, 2] even without words
                data["offset_mapping"] = np.asarray(data["offset_mapping"], dtype=np.int64).reshape(len(examples), words, 2)
            if not examples:  # a batch of no sentences: every per-word feature is [0, 0]
                for key in ("attention_mask", "special_tokens_mask", "token_type_ids"):
                    if key in data:
                        data[key] = np.zeros((0, 0), dtype=np.int64)
            cut = {len(char_ids) for char_ids in data.get("overflowing_tokens", [])}
            if len(cut) > 1:  # (transformers' own message spoke of a fast tokenizer, which ELMo has none of)
                raise ValueError(
                    f"overflowing_tokens: the examples lost different numbers of words ({', '.join(map(str, sorted(cut)))}), "
                    "which make no tensor: pass return_tensors=None to get them as lists"
                )
            if "overflowing_tokens" in data:  # [batch, words cut, chars], also where none was cut
                data["overflowing_tokens"] = np.asarray(data["overflowing_tokens"], dtype=np.int64).reshape(
                    len(examples), cut.pop() if cut else 0, self.max_characters_per_token
                )
        elif not is_batched:
            data = {key: value[0] for key, value in data.items()}
        return ElmoBatchEncoding(data, tensor_type=return_tensors, first_word_index=first_word_index)

    def pad(
        self,
        encoded_inputs,
        padding=True,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_attention_mask: bool | None = None,
        return_tensors=None,
        verbose: bool = True,
    ) -> ElmoBatchEncoding:
        """
        Pad one example or a batch (a dict of lists or a list of dicts, as collators pass) to a common number of
        words. `input_ids` `[words, chars]` per example; padding words are all-zero vectors.
        """
        pad_kwargs = dict(
            padding=padding,
            max_length=max_length,
            pad_to_multiple_of=pad_to_multiple_of,
            padding_side=padding_side,
            return_attention_mask=return_attention_mask,
            return_tensors=return_tensors,
            verbose=verbose,
        )
        single = isinstance(encoded_inputs, Mapping) and _is_single_example(encoded_inputs["input_ids"])
        # (the strategy padding comes to: "max_length" without a max_length the model has pads nothing, as False)
        strategy = self._get_padding_truncation_strategies(padding=padding, max_length=max_length, verbose=False)[0]
        if return_tensors is not None and not single and strategy == PaddingStrategy.DO_NOT_PAD:
            examples = encoded_inputs["input_ids"] if isinstance(encoded_inputs, Mapping) else [
                example.get("input_ids", ()) for example in encoded_inputs]
            _check_one_length({len(char_ids) for char_ids in examples}, "padding=True")
        # The base class would read one example's word vectors as a batch of examples: pad it as a batch of one.
        if single:
            padded = super().pad({key: [value] for key, value in encoded_inputs.items()}, **pad_kwargs)
            data = {key: value[0] for key, value in padded.items()}
        else:
            data = dict(super().pad(encoded_inputs, **pad_kwargs))
        # Examples without words give the base class empty lists, whose tensors lack the innermost axis:
        # input_ids [batch, 0] (or [0]), which the model refuses. Give it back, as encoding does: [batch, 0, chars]
        # (offset_mapping [batch, 0, 2]).
        for key, size in (("input_ids", self.max_characters_per_token), ("offset_mapping", 2)):
            value = data.get(key)
            if hasattr(value, "ndim") and value.shape[-1:] == (0,):
                data[key] = value.reshape(*value.shape, size)
        # Padding adds no words: an encoding truncated from the left keeps its examples' first word indices.
        return ElmoBatchEncoding(data, first_word_index=getattr(encoded_inputs, "first_word_index", None))

    def _pad(
        self,
        encoded_inputs: dict,
        max_length: int | None = None,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_attention_mask: bool | None = None,
    ) -> dict:
        """Pad one example's per-word lists to `max_length` words; the word axis is the only one padded."""
        if pad_to_multiple_of is not None and (
            isinstance(pad_to_multiple_of, bool) or not isinstance(pad_to_multiple_of, int) or pad_to_multiple_of < 1
        ):
            raise ValueError(f"pad_to_multiple_of must be a positive number of words, got {pad_to_multiple_of!r}.")
        if return_attention_mask is None:
            return_attention_mask = "attention_mask" in self.model_input_names
        num_words = len(encoded_inputs["input_ids"])
        if return_attention_mask and "attention_mask" not in encoded_inputs:
            encoded_inputs["attention_mask"] = [1] * num_words

        if padding_strategy == PaddingStrategy.LONGEST:
            max_length = num_words
        if padding_strategy == PaddingStrategy.DO_NOT_PAD or max_length is None:
            return encoded_inputs
        if pad_to_multiple_of is not None and max_length % pad_to_multiple_of != 0:
            max_length = (max_length // pad_to_multiple_of + 1) * pad_to_multiple_of
        difference = max_length - num_words
        if difference <= 0:
            return encoded_inputs

        padding_side = padding_side if padding_side is not None else self.padding_side
        if padding_side not in ("left", "right"):
            raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}.")
        padding_values = {
            "input_ids": [PAD_WORD_CHAR_ID] * self.max_characters_per_token,
            "input_word_ids": self.lexicon.pad_word_id if self.returns_word_ids else 0,
            "attention_mask": 0,
            "special_tokens_mask": 1,
            "token_type_ids": self.pad_token_type_id,
            "offset_mapping": (0, 0),
        }
        for key, padding_value in padding_values.items():
            if key in encoded_inputs:
                padding_words = [copy.copy(padding_value) for _ in range(difference)]
                values = list(encoded_inputs[key])
                encoded_inputs[key] = padding_words + values if padding_side == "left" else values + padding_words
        return encoded_inputs

    # ---- decoding ------------------------------------------------------------------------------------------

    def convert_ids_to_tokens(self, ids, skip_special_tokens: bool = False):
        """
        Word vectors back to words: `[chars]` -> one word, `[words, chars]` -> a list of words, `[batch, words,
        chars]` -> a list of them. Padding words read as `pad_token`, or are dropped with `skip_special_tokens=True`.
        A plain int is a character id and gives its name in the character alphabet.
        """
        _refuse_what_holds_no_ids(ids, "convert_ids_to_tokens")
        ids = to_py_obj(ids)
        if isinstance(ids, int):
            return self._convert_id_to_token(ids)
        if _is_word_vector(ids):
            word = self._read_word(ids)
            return self.pad_token if word is None else word
        if not _is_single_example(ids):
            return [self.convert_ids_to_tokens(example, skip_special_tokens) for example in ids]
        words = [self._read_word(char_ids) for char_ids in ids]
        if skip_special_tokens:
            special_words = self._special_words()
            return [word for word in words if word is not None and word not in special_words]
        return [self.pad_token if word is None else word for word in words]

    def get_special_tokens_mask(self, token_ids_0, token_ids_1=None,
                                already_has_special_tokens: bool = False) -> list[int]:
        """
        One example's `[words, chars]` ids -> per word 1 for a padding word or an added special token, else 0 (the
        `special_tokens_mask` that a call returns; transformers' collators ask for it where a batch lacks one).
        Without `already_has_special_tokens`, all 0: the tokenizer adds no words (the model adds the sentence
        boundaries).
        """
        if token_ids_1 is not None:
            raise ValueError("ElmoTokenizer encodes single sentences; token_ids_1 is not supported.")
        _refuse_what_holds_no_ids(token_ids_0, "get_special_tokens_mask")
        token_ids_0 = _unless_a_list(token_ids_0)
        if not already_has_special_tokens:
            return [0] * len(token_ids_0)
        special_words = self._special_words()
        return [int(word is None or word in special_words) for word in map(self._read_word, token_ids_0)]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return " ".join(tokens)

    def decode(self, token_ids, skip_special_tokens: bool = False, **kwargs) -> str | list[str]:
        """
        `[words, chars]` ids -> the words joined by single spaces; `[batch, words, chars]` -> one string per
        example; `[chars]` -> that word; an int, a character id -> its name in the alphabet (`convert_ids_to_tokens`,
        as transformers' decode reads an int). Padding words are always dropped; added special tokens with
        `skip_special_tokens=True`. An id outside the character alphabet, alone or in a word's vector, is refused
        (IndexError), as `convert_ids_to_tokens` refuses it, and so is a vector that does not begin with the
        begin-of-word id (ValueError).
        """
        if getattr(token_ids, "ndim", None) == 3 and len(token_ids) == 0:  # (as lists, an example of no words)
            return []
        token_ids = _unless_a_list(token_ids)
        if isinstance(token_ids, int):
            return self.convert_ids_to_tokens(token_ids)
        return self._decode_lists(token_ids, self._special_words() if skip_special_tokens else set())

    def _decode_lists(self, token_ids, dropped: set[str]) -> str | list[str]:
        """`decode` of a word, an example or a batch."""
        _refuse_what_holds_no_ids(token_ids, "decode")
        token_ids = _unless_a_list(token_ids)
        if _is_word_vector(token_ids):
            return self._read_word(token_ids) or ""
        if not _is_single_example(token_ids):
            return [self._decode_lists(example, dropped) for example in token_ids]
        words = [self._read_word(char_ids) for char_ids in token_ids]  # None for padding
        return self.convert_tokens_to_string([word for word in words if word is not None and word not in dropped])


__all__ = ["ElmoTokenizer"]
