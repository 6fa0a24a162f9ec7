"""`ElmoEmbedder`: every layer of ELMo for lists of words, as AllenNLP's `ElmoEmbedder` gave them (removed in 1.0).

Each sentence becomes a float32 array [L + 1, words, 2P]: the token layer `[x; x]`, then each biLSTM layer.
Stateless by default: a sentence's vectors do not depend on what was embedded before. With `stateful=True` the
LSTM state is carried from batch to batch, row by row, as the original `ElmoEmbedder` and `allennlp elmo` did.
"""

import json
import numbers
import os
from collections.abc import Iterable, Iterator

import numpy as np
import torch
from transformers import BatchEncoding

from .default_model import default_model_path
from .files import check_model_location, hub_out_of_reach
from .modeling_elmo import ElmoModel
from .tokenization_elmo import ElmoTokenizer

# What `embed_*` returns per sentence: every layer, the top one, their plain average, or the model's scalar mix.
OUTPUT_FORMATS = ("all", "top", "average", "mix")
# Stateless batches are cut from windows of this many batches, sorted by length, so that little padding is run.
SORT_WINDOW_BATCHES = 64

Sentence = str | list[str]


def check_output_format(output_format: str) -> None:
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"output_format must be one of {', '.join(OUTPUT_FORMATS)}, got {output_format!r}")


def check_batch_size(batch_size) -> None:
    """A whole number of sentences, at least 1 (a float, 1.5 say, would fail only once the batches are cut)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral):
        raise TypeError(f"batch_size must be an integer, got {batch_size!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")


def check_sentences(sentences) -> None:
    """Sentences to embed: an iterable of them, not a str, which is one sentence (iterating it would give one sentence
    per character), nor bytes. The sentences of a list or tuple are checked here too (`check_sentence`); a lazy
    iterable's (a generator, a file) where each is read, by `split_sentence`."""
    if isinstance(sentences, str):
        raise TypeError(f"sentences must be a list of sentences, got a str ({sentences[:40]!r}): pass [sentence], "
                        "or use embed_sentence")
    if isinstance(sentences, (bytes, bytearray)):
        raise TypeError(f"sentences must be a list of sentences, got bytes ({sentences[:40]!r}): decode it first, then "
                        "pass [sentence], or use embed_sentence")
    if not isinstance(sentences, Iterable):
        raise TypeError("sentences must be a list of sentences (or any iterable of them), got "
                        f"{type(sentences).__name__}")
    if isinstance(sentences, (list, tuple)):
        for index, sentence in enumerate(sentences):
            check_sentence(sentence, index)


def check_sentence(sentence, index: int) -> None:
    """A sentence is a str or an iterable of words (a list, a tuple, a NumPy array, a pandas Series, ...), each a str;
    anything else is refused, naming the sentence by its `index` and what it is (else an int failed deep inside, and
    bytes were read as a list of numbers). The words of a list, tuple or array are checked here; another iterable's
    as `split_sentence` reads them (it may be read only once)."""
    if isinstance(sentence, str):
        return
    if isinstance(sentence, (bytes, bytearray)) or not isinstance(sentence, Iterable) or getattr(sentence, "ndim", 1) == 0:
        _refuse(sentence, f"sentence {index} is")
    if isinstance(sentence, (list, tuple, np.ndarray)):  # (an array of str holds np.str_, a str)
        _check_words(sentence, index)


def _check_words(words, index: int) -> None:
    for word in words:
        if not isinstance(word, str):
            _refuse(word, f"sentence {index} holds a word that is")


def _refuse(found, what: str):
    decode = " (decode it first)" if isinstance(found, (bytes, bytearray)) else ""
    raise TypeError(f"{what} {type(found).__name__}{decode}: each sentence must be a str or a list of words (str)")


def split_sentence(sentence: Sentence, index: int = 0) -> list[str]:
    """A sentence as words: a str is split on whitespace (as `allennlp elmo` did), an iterable of words is used as it
    is; anything else is refused (`check_sentence`, naming it as sentence `index`)."""
    check_sentence(sentence, index)
    if isinstance(sentence, str):
        return sentence.split()
    words = list(sentence)
    _check_words(words, index)
    return words


def length_sorted_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """
    Positions 0..len(lengths)-1 grouped into batches of at most `batch_size` with similar lengths: each window of
    `SORT_WINDOW_BATCHES * batch_size` consecutive positions is sorted by length and cut. Windows keep batches
    local, so results can be put back in order with little memory.
    """
    window = SORT_WINDOW_BATCHES * batch_size
    batches = []
    for start in range(0, len(lengths), window):
        positions = sorted(range(start, min(start + window, len(lengths))), key=lambda i: (lengths[i], i))
        batches += [positions[i : i + batch_size] for i in range(0, len(positions), batch_size)]
    return batches


def sentence_arrays(layers: np.ndarray, words: list[list[str]]) -> list[np.ndarray]:
    """One contiguous array per sentence, its own words only, from a batch's padded layers [B, ..., T, 2P]."""
    return [np.ascontiguousarray(layers[row, ..., : len(sentence), :]) for row, sentence in enumerate(words)]


def usable_device(device: str | torch.device | None) -> torch.device:
    """`device` (default CPU) as a `torch.device`, or a ValueError saying why this machine cannot run on it."""
    available = ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    try:
        device = torch.device("cpu" if device is None else device)  # (0 is the first GPU, as in torch)
        if device.type == "meta":
            raise RuntimeError("a meta tensor holds no numbers")
        torch.empty(1, device=device)
    except (RuntimeError, AssertionError, TypeError, ValueError) as error:
        reason = (str(error).strip() or type(error).__name__).splitlines()[0].split(". ")[0]
        raise ValueError(
            f"device {str(device)!r} cannot be used here ({reason}); this machine has {', '.join(available)}"
        ) from None
    return device


def load_model(model_name_or_path: str | os.PathLike, **model_kwargs) -> tuple[ElmoModel, ElmoTokenizer]:
    """The `ElmoModel` (in eval mode) and the tokenizer of a model folder or Hub id. A path that names no model
    folder is refused (ValueError) and a model that cannot be loaded (OSError), or is not an ELMo (ValueError), is
    named, with why: transformers' messages do not name a Hub id it cannot reach. Where the Hub cannot be looked up
    (no network), a Hub id loads from the Hub cache or fails at once, not after a minute of retries. The tokenizer
    pads on the right
    whatever the folder says: the embedder and the demo read each sentence's words from the start of its row."""
    check_model_location(model_name_or_path)
    # (a Hub id on a machine without network: the Hub cache's copy, or the error at once rather than after a minute)
    out_of_reach = hub_out_of_reach(model_name_or_path)
    offline = {"local_files_only": True} if out_of_reach else {}
    try:
        model = ElmoModel.from_pretrained(model_name_or_path, **offline, **model_kwargs).eval()
        tokenizer = ElmoTokenizer.from_pretrained(model_name_or_path, padding_side="right", **offline)
    except OSError as error:
        if out_of_reach:
            raise OSError(f"{model_name_or_path}: cannot load the model: {out_of_reach}") from None
        raise OSError(f"{model_name_or_path}: cannot load the model ({error})") from None
    except ValueError as error:  # (a config or a tokenizer file that is not an ELMo's: named, as above)
        message = str(error)
        if isinstance(error, json.JSONDecodeError):  # (json's message names no file)
            message = f"{_unreadable_json(model_name_or_path) or model_name_or_path}: not a JSON file ({message})"
        raise ValueError(message if message.startswith(str(model_name_or_path)) else f"{model_name_or_path}: {message}"
                         ) from None
    if misfit := tokenizer_misfit(model.config, tokenizer):  # (else the first batch fails, naming neither)
        raise ValueError(f"{model_name_or_path}: {misfit}")
    return model, tokenizer


def _unreadable_json(folder) -> str | None:
    """The path of the first tokenizer file in the local `folder` that is not JSON, or None."""
    for name in ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json"):
        path = os.path.join(folder, name)
        try:
            with open(path, encoding="utf-8") as file:
                json.load(file)
        except ValueError:
            return path
        except OSError:
            continue
    return None


def tokenizer_misfit(config, tokenizer: ElmoTokenizer) -> str | None:
    """Why the tokenizer does not fit the model, as "its tokenizer does not fit its model: " and what it gives that
    the model does not read (tokenizer_config.json against config.json: its characters per word, its alphabet, its
    word ids, its dictionaries' sizes and special ids); None where it fits. Every program that loads a model with its
    tokenizer asks this first and puts the model's name before it (else the first batch fails, naming neither the
    folder nor the file, or a smaller alphabet is read without a word)."""
    misfit = _what_does_not_fit(config, tokenizer)
    return None if misfit is None else f"its tokenizer does not fit its model: {misfit}"


def _what_does_not_fit(config, tokenizer: ElmoTokenizer) -> str | None:
    if tokenizer.max_characters_per_token != config.max_characters_per_token:
        return (f"the tokenizer spells words in {tokenizer.max_characters_per_token} characters, the model reads "
                f"{config.max_characters_per_token} (max_characters_per_token)")
    alphabet = "bytes" if tokenizer.lexicon is None else "vocabulary"
    if alphabet != config.alphabet:
        return f"the tokenizer's alphabet is {alphabet}, the model's {config.alphabet}"
    if tokenizer.returns_word_ids != bool(config.word_vocab_size):
        return ("the model reads word ids (word.dic), which the tokenizer does not give" if config.word_vocab_size
                else "the tokenizer gives word ids (input_word_ids), which the model does not read")
    # (another model's dictionaries: ids past the model's rows, or special ids where the model has others)
    if tokenizer.lexicon is not None and (mismatch := tokenizer.lexicon.config_mismatch(config)):
        source, field, value = mismatch
        return f"the tokenizer's {source} gives {field} {value}, the model's config {getattr(config, field)}"
    return None


class ElmoEmbedder:
    """
    Embed sentences with every ELMo layer.

    Args:
        model_name_or_path: a converted ELMo checkpoint folder or Hub id; default: the default model that ships
            with hf-elmo (`hf_elmo.default_model`).
        device: where to run, e.g. `"cuda"`; CPU by default.
        stateful: carry the LSTM state from batch to batch, row r continuing row r (the original behaviour).
        model_kwargs: passed to `ElmoModel.from_pretrained`.
    """

    def __init__(
        self,
        model_name_or_path: str | os.PathLike | None = None,
        device: str | torch.device | None = None,
        stateful: bool = False,
        **model_kwargs,
    ):
        self.device = usable_device(device)  # before the model loads
        if model_name_or_path is None:
            model_name_or_path = default_model_path()
        self.model_name_or_path = str(model_name_or_path)
        self.model, self.tokenizer = load_model(model_name_or_path, **model_kwargs)
        self.model.to(self.device)
        self.stateful = stateful
        self.states: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def num_layers(self) -> int:
        """L + 1: the token layer and each biLSTM layer."""
        return self.model.config.num_lstm_layers + 1

    @property
    def hidden_size(self) -> int:
        """2P, the width of every layer."""
        return self.model.config.hidden_size

    def reset_states(self) -> None:
        """Forget the carried LSTM state (stateful mode): the next batch starts from zeros."""
        self.states = None

    def empty_embedding(self, output_format: str = "all") -> np.ndarray:
        """The embedding of a sentence without words: [L + 1, 0, 2P], or [0, 2P] for a single-layer format."""
        check_output_format(output_format)
        shape = (self.num_layers, 0, self.hidden_size) if output_format == "all" else (0, self.hidden_size)
        return np.zeros(shape, dtype=np.float32)

    def embed_batch(self, sentences: list[Sentence], output_format: str = "all") -> list[np.ndarray]:
        """
        Embed sentences in one batch. Returns one float32 array per sentence: [L + 1, words, 2P] for `"all"`,
        [words, 2P] for `"top"`, `"average"` (of the layers) and `"mix"` (the model's first scalar mix; stateless,
        a mix that layer-normalises mixes each sentence alone, as its statistics are the batch's).

        In stateful mode, row r starts from the state that row r of the previous batch ended with (zeros for rows
        it did not have), and a sentence without words still runs as `<S> </S>`, as in the original.
        """
        return self.embed_tokenized(self.tokenize_batch(sentences), output_format)

    def tokenize_batch(self, sentences: list[Sentence]) -> tuple[list[list[str]], BatchEncoding | None]:
        """The words of each sentence and their character ids on the CPU (None for no sentences): the part of
        `embed_batch` that needs no model, so that it can run ahead of it (`hf-elmo embed` on a GPU does)."""
        check_sentences(sentences)
        words = [split_sentence(sentence, index) for index, sentence in enumerate(sentences)]
        if not words:
            return words, None
        return words, self.tokenizer.encode_words(words)

    def embed_tokenized(self, tokenized: tuple[list[list[str]], BatchEncoding | None], output_format: str = "all"
                        ) -> list[np.ndarray]:
        """`embed_batch` of what `tokenize_batch` returned."""
        layers = self.layers_tokenized(tokenized, output_format)
        return [] if layers is None else sentence_arrays(layers.cpu().numpy(), tokenized[0])

    @torch.inference_mode()
    def layers_tokenized(self, tokenized: tuple[list[list[str]], BatchEncoding | None], output_format: str = "all"
                         ) -> torch.Tensor | None:
        """`embed_tokenized` before its numbers leave the model's device: float32 [B, L + 1, T, 2P] for `"all"`,
        [B, T, 2P] for the others, padded to the longest sentence (None for no sentences). `hf-elmo embed` copies
        them to the host while the model goes on to the next batch."""
        check_output_format(output_format)
        words, batch = tokenized
        if not words:
            return None
        batch = batch.to(self.device)
        if output_format == "mix" and self.model.scalar_mixes[0].do_layer_norm and not self.stateful and len(words) > 1:
            return self._mix_sentence_by_sentence(words, batch)
        output = self.model(**batch, initial_states=self._initial_states(len(words)), output_final_states=self.stateful,
                            return_dict=True)
        if self.stateful:
            self._keep_states(output.final_states)
        if output_format == "all":
            layers = torch.stack(output.hidden_states, dim=1)  # [B, L + 1, T, 2P]
        elif output_format == "top":
            layers = output.hidden_states[-1]
        elif output_format == "average":
            layers = torch.stack(output.hidden_states).mean(dim=0)
        else:
            layers = output.elmo_representations[0]
        return layers.float()

    def _mix_sentence_by_sentence(self, words: list[list[str]], batch: BatchEncoding) -> torch.Tensor:
        """The mix of a layer-normalising model, [B, T, 2P], each sentence run alone: its layer norm takes one mean
        and variance over the whole batch, so that in a batch a sentence's vector would depend on the sentences
        beside it (on the length sort and the batch size)."""
        width = max(len(sentence) for sentence in words)
        rows = []
        for row, sentence in enumerate(words):
            if sentence:
                alone = BatchEncoding({name: value[row : row + 1, : len(sentence)] for name, value in batch.items()})
                mix = self.layers_tokenized(([sentence], alone), "mix")
            else:  # (no words: nothing of this row is read)
                mix = torch.zeros(1, 0, self.hidden_size, device=self.device)
            rows.append(torch.nn.functional.pad(mix, (0, 0, 0, width - len(sentence))))
        return torch.cat(rows)

    def embed_sentence(self, sentence: Sentence, output_format: str = "all") -> np.ndarray:
        """One sentence: [L + 1, words, 2P] (or [words, 2P], see `embed_batch`)."""
        return self.embed_batch([sentence], output_format)[0]

    def embed_sentences(
        self, sentences: Iterable[Sentence], batch_size: int = 64, output_format: str = "all"
    ) -> Iterator[np.ndarray]:
        """
        Embed any number of sentences, yielding one array per sentence in the input's order. Stateless, they run in
        batches of similar length; stateful, in batches of `batch_size` consecutive sentences. The arguments are
        checked at the call, before the first sentence is asked for (each sentence of a generator, or of any other
        lazy iterable, where it is reached).
        """
        check_sentences(sentences)
        check_batch_size(batch_size)
        check_output_format(output_format)
        return self._embed_sentences(sentences, batch_size, output_format)

    def _embed_sentences(self, sentences: Iterable[Sentence], batch_size: int, output_format: str
                         ) -> Iterator[np.ndarray]:
        pending = []
        for index, sentence in enumerate(sentences):
            pending.append(split_sentence(sentence, index))
            if len(pending) == (batch_size if self.stateful else SORT_WINDOW_BATCHES * batch_size):
                yield from self._embed_window(pending, batch_size, output_format)
                pending = []
        yield from self._embed_window(pending, batch_size, output_format)

    def embed_file(self, input_file: str | os.PathLike, output_file: str | os.PathLike, **options) -> dict:
        """Embed every line of `input_file` into an HDF5 file laid out as `allennlp elmo` wrote it.

        See `hf_elmo.embed_file.embed_file` for the options and the layout; an interrupted run resumes.
        """
        from .embed_file import embed_file

        return embed_file(self, input_file, output_file, **options)

    def _embed_window(self, words: list[list[str]], batch_size: int, output_format: str) -> Iterator[np.ndarray]:
        if self.stateful:
            for start in range(0, len(words), batch_size):
                yield from self.embed_batch(words[start : start + batch_size], output_format)
            return
        results = [None] * len(words)
        for positions in length_sorted_batches([len(sentence) for sentence in words], batch_size):
            if len(words[positions[-1]]) == 0:  # sorted by length: the whole batch is empty
                embeddings = [self.empty_embedding(output_format) for _ in positions]
            else:
                embeddings = self.embed_batch([words[i] for i in positions], output_format)
            for position, embedding in zip(positions, embeddings):
                results[position] = embedding
        yield from results

    def _initial_states(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        if not self.stateful or self.states is None:
            return None
        h, c = self.states
        if h.shape[1] < batch_size:  # a larger batch than any before: the new rows start from zeros
            h = torch.cat([h, h.new_zeros(h.shape[0], batch_size - h.shape[1], h.shape[2])], dim=1)
            c = torch.cat([c, c.new_zeros(c.shape[0], batch_size - c.shape[1], c.shape[2])], dim=1)
            self.states = (h, c)
        return h[:, :batch_size], c[:, :batch_size]

    def _keep_states(self, final_states: tuple[torch.Tensor, torch.Tensor]) -> None:
        h, c = final_states
        if self.states is not None and self.states[0].shape[1] > h.shape[1]:
            # Rows beyond this batch keep the state they had, as in the original.
            rows = h.shape[1]
            h = torch.cat([h, self.states[0][:, rows:]], dim=1)
            c = torch.cat([c, self.states[1][:, rows:]], dim=1)
        self.states = (h.detach(), c.detach())
