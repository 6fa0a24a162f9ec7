"""Text for biLM pretraining: loading, encoding, and the batches bilm-tf trains and evaluates on.

A corpus is one sentence per line (text files, or a local `datasets` dataset with a text column). Each word is
read by the model as its character ids and predicted as its id in the softmax vocabulary.

Training batches (`StreamBatches`, bilm-tf's default): the sentences of an epoch, shuffled, form one stream per
direction. The forward stream holds each sentence as inputs `<S> w1 .. wn` with targets `w1 .. wn </S>`; the
backward stream holds each sentence reversed, inputs `</S> wn .. w1` with targets `wn .. w1 <S>`, in an order
of its own. Each stream is cut into `rows` equal parts (one per batch row, over all processes) that are read
`unroll_steps` words at a time, so there is no padding, and a row's LSTM state carries over to its next window.
`SentenceBatches` is the stateless alternative: whole sentences `<S> w1 .. wn </S>`, padded (and, to pad less,
optionally grouped by length as transformers' `group_by_length` groups them).

The model reads the backward LM's input from right to left, so backward windows are handed to it flipped into
left-to-right order (`backward_input_ids`, `backward_labels`).
"""

import errno
import glob
import hashlib
import logging
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers.trainer_pt_utils import get_length_grouped_indices

from hf_elmo.files import BYTE_ORDER_MARK, check_text_file
from hf_elmo.model_card import counted
from hf_elmo.tokenization_elmo import ElmoTokenizer

from .vocabulary import Vocabulary

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100
# Text files that `datasets` reads compressed (whatever the suffix's case: `compressed`).
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".lz4", ".zip")
# Word-table ids of the padding word (all-zero characters) and the two sentence boundaries.
PAD_TYPE, BOS_TYPE, EOS_TYPE = 0, 1, 2


class DataError(ValueError):
    """Input text that cannot be used; the message names the file, dataset or option."""


TEXT_COLUMN = "text"  # the column of a text file's lines in datasets, and --text-column's default


def load_sentences(paths: list[str], text_column: str = TEXT_COLUMN, word_splitting: str = "whitespace", role: str = "train",
                   option: str | None = None, split: str | None = None):
    """The sentences of text files (globs allowed) or of a local `datasets` dataset, as a `datasets.Dataset` with a
    `words` column; empty lines are dropped.

    word_splitting: "whitespace" for pre-tokenised text (bilm-tf's format), "tokenizer" to split raw text with
    `ElmoTokenizer.split_words`. option: the command-line option that named `paths`, for errors (default
    `--{role}-file`). split: the split of a saved DatasetDict to read, that one only (default: the role's: train,
    or validation, else valid, else test).
    """
    import datasets

    if word_splitting not in ("whitespace", "tokenizer"):
        raise DataError(f"--word-splitting must be 'whitespace' or 'tokenizer', got {word_splitting!r}")
    option = option or f"--{role}-file"
    if names_saved_dataset(paths):
        dataset = _load_saved_dataset(Path(paths[0]), role, option, split)
    elif split:
        raise no_splits(split, f"{option} names text files")
    else:
        files, first_named = [], {}  # (each file once: a name given twice, overlapping globs, a link)
        for pattern in paths:
            for file in input_files(pattern, option):
                real = os.path.realpath(file)
                if real in first_named:
                    first, first_pattern = first_named[real]
                    logger.warning(f"{option} {pattern}: names {file}, the file {first} that {first_pattern!r} named "
                                   "before; it is read once")
                else:
                    first_named[real] = (file, pattern)
                    files.append(file)
        what = "training file" if role == "train" else f"{role} file"
        for file in files:
            if Path(file).is_dir():
                raise DataError(f"{option} {file}: a folder can only be given alone, as a saved datasets dataset")
            if not Path(file).is_file():  # (read here, a pipe would be empty for datasets, which reads it again)
                raise DataError(f"{option} {file}: is no regular file (a pipe?), which is read once only: give a file")
            if not compressed(file):  # (datasets decompresses those: a bad one fails below)
                try:
                    check_text_file(file, what, error=DataError)
                except DataError as error:
                    raise DataError(f"{option} {error}") from None
            elif os.path.getsize(file) == 0:
                raise DataError(f"{option} {file}: the {what} is empty")
        try:
            # utf-8-sig: a byte-order mark at the start of a file is not part of its first word (datasets decodes a
            # compressed file past it: its mark is taken off below). The names are escaped: datasets expands each
            # as a glob again, and `data[1].txt` would name `data1.txt`.
            dataset = datasets.load_dataset("text", data_files=[glob.escape(file) for file in files], split="train",
                                            encoding="utf-8-sig")
        except datasets.exceptions.DatasetGenerationError as error:  # (the other files were checked above)
            if _disk_full(error) is not None:
                raise  # (the cache's disk, not the file: read_corpus says so)
            cause = _root_cause(error)
            packed = [file for file in files if compressed(file)]
            if type(cause).__name__ == "SchemaInferenceError" and packed:  # (no line: each decompresses to nothing)
                raise DataError(f"{option} {' '.join(packed)}: the {what} is empty (once decompressed)") from None
            problem = "cannot be read as compressed UTF-8 text" if packed else "cannot be read"
            if "not supported" in str(cause) and packed:  # (zstd, lz4: datasets reads them with a package of each)
                problem = "cannot be read: this compression needs its Python package (`pip install zstandard` or `lz4`)"
            raise DataError(f"{option} {' '.join(packed or files)}: {problem} ({type(cause).__name__}: {cause})") from None
        text_column = TEXT_COLUMN  # (--text-column names a saved dataset's)
    if text_column not in dataset.column_names:
        raise DataError(f"{option} {paths[0]}: no column {text_column!r} (columns: {', '.join(dataset.column_names)}); pass --text-column")
    feature = dataset.features[text_column]
    if not (isinstance(feature, datasets.Value) and feature.dtype in ("string", "large_string")):
        raise DataError(f"{option} {paths[0]}: column {text_column!r} holds {feature}, not text (a string per sentence); "
                        f"pass --text-column with a column of strings")
    if word_splitting == "whitespace":
        split = str.split
    else:
        split = ElmoTokenizer().split_words

    def split_batch(batch):
        return {"words": [split(text.removeprefix(BYTE_ORDER_MARK)) if text else [] for text in batch[text_column]]}

    dataset = dataset.map(split_batch, batched=True, remove_columns=dataset.column_names, desc=f"splitting {role} text")
    return dataset.filter(lambda batch: [len(words) > 0 for words in batch["words"]], batched=True, desc="dropping empty lines")


def input_files(pattern: str, option: str) -> list[str]:
    """What one path of an input option (`option`, for the error) names: itself where it is a file or a folder (a name
    is itself first, `data[1].txt` too), else its glob's matches, sorted; none is an error. Called before any work
    too, so that a missing input is said first."""
    matches = [pattern] if Path(pattern).is_file() else sorted(glob.glob(pattern))
    if not matches:
        raise DataError(f"{option} {pattern}: no such file")
    return matches


def names_saved_dataset(paths: list[str]) -> bool:
    """Whether an input option's `paths` name a saved `datasets` dataset (one folder) rather than text files."""
    return len(paths) == 1 and Path(paths[0]).is_dir()


def check_dataset_options(inputs: dict[str, list[str] | None], text_column: str | None = None,
                          split: str | None = None) -> None:
    """Before any work: refuse --text-column and --split (`text_column`, `split`; None where not given) where every
    input (option: its paths, None where not given) names text files, whose lines are the sentences: they choose a
    column and a split of a saved dataset, and a run read the files as if --text-column had not been given (but for
    "text", the name of a text file's lines). An input that names nothing is left to the reading, which says so."""
    given = {option: paths for option, paths in inputs.items() if paths}
    if (text_column in (None, TEXT_COLUMN) and split is None) or any(names_saved_dataset(paths) for paths in given.values()):
        return
    if not all(Path(pattern).exists() or glob.glob(pattern) for paths in given.values() for pattern in paths):
        return
    files = f"{' and '.join(given)} name{'s' if len(given) == 1 else ''} text files"
    if split is not None:
        raise no_splits(split, files)
    raise DataError(f"--text-column {text_column}: only a saved dataset folder has columns, and {files}, each line a "
                    "sentence; drop --text-column")


def no_splits(split: str, inputs: str) -> DataError:
    """--split where the inputs (`inputs`: which options name text files) are text files, which have no splits."""
    return DataError(f"--split {split}: only a saved dataset folder has splits, and {inputs}")


def compressed(file: str) -> bool:
    """Whether `datasets` decompresses `file`: it knows the suffix in any case (TRAIN.TXT.GZ too)."""
    return file.lower().endswith(COMPRESSED_SUFFIXES)


def _error_chain(error: BaseException | None):
    """An error, the error it was raised from or while handling, and so on."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _disk_full(error: BaseException) -> OSError | None:
    """The OSError of a full disk (or quota, or file size limit) in `error`'s chain, or None."""
    return next((found for found in _error_chain(error) if isinstance(found, OSError)
                 and found.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)), None)


def datasets_cache_full(error: BaseException) -> str | None:
    """What to say of an error of `datasets` that a full disk caused (an OSError, or another error raised while
    handling it), where datasets was writing a text into its cache; None for any other error (the caller's to name)."""
    full = _disk_full(error)
    if full is None:
        return None
    import datasets

    return (f"could not be read into the datasets cache {datasets.config.HF_DATASETS_CACHE} ({type(full).__name__}: "
            f"{full}): make room there, or set HF_DATASETS_CACHE to a folder with room")


def _root_cause(error: BaseException) -> BaseException:
    """The first exception of the chain that ends in `error` (what `datasets` wraps)."""
    return list(_error_chain(error))[-1]


def _load_saved_dataset(folder: Path, role: str, option: str, split: str | None = None):
    import datasets

    try:
        dataset = datasets.load_from_disk(str(folder))
    except FileNotFoundError as error:
        raise DataError(f"{option} {folder}: not a dataset saved with save_to_disk ({error})") from None
    except Exception as error:  # (whatever its reader meets: a split saved without rows is an IndexError)
        raise DataError(f"{option} {folder}: the saved dataset does not load ({type(error).__name__}: {error})") from None
    if isinstance(dataset, datasets.DatasetDict):
        by_role = {"train": ("train",), "validation": ("validation", "valid", "test")}
        wanted = (split,) if split else by_role.get(role, (role,))
        found = next((name for name in wanted if name in dataset), None)
        if found is None:
            raise DataError(f"{option} {folder}: no split {' or '.join(wanted)} (splits: {', '.join(dataset)})")
        dataset = dataset[found]
    elif split:
        raise DataError(f"--split {split}: {folder} is a saved Dataset, which has no splits; leave out --split")
    return dataset


def count_words(sentences) -> Counter:
    """How often each word occurs in a dataset with a `words` column."""
    counts = Counter()
    for batch in sentences.iter(batch_size=10_000):
        for words in batch["words"]:
            counts.update(words)
    return counts


class WordTable:
    """Every distinct word of the corpora and its character ids: the model's input, one row per word.

    Words are spelled by `tokenizer` (the byte alphabet by default; a model's character vocabulary otherwise), and
    for a model with word input each also has its id in word.dic. The sentence boundaries are the tokenizer's.
    """

    def __init__(self, max_characters_per_token: int, tokenizer: ElmoTokenizer | None = None):
        self.max_characters_per_token = max_characters_per_token
        self.tokenizer = tokenizer or ElmoTokenizer(max_characters_per_token=max_characters_per_token)
        if self.tokenizer.max_characters_per_token != max_characters_per_token:
            raise DataError(
                f"the tokenizer spells words with {self.tokenizer.max_characters_per_token} characters, the model reads "
                f"{max_characters_per_token}"
            )
        bos, eos = self.tokenizer.sentence_boundaries
        self.index = {bos: BOS_TYPE, eos: EOS_TYPE}
        self.has_word_ids = self.tokenizer.returns_word_ids
        self._rows, self._word_ids = [[0] * max_characters_per_token], [0]
        self._add(bos)
        self._add(eos)
        self._char_ids = None

    def _add(self, word: str) -> int:
        self._rows.append(self.tokenizer.word_to_char_ids(word))
        self._word_ids.append(self.tokenizer.word_to_id(word) if self.has_word_ids else 0)
        return len(self._rows) - 1

    def ids(self, words: list[str]) -> list[int]:
        ids = []
        for word in words:
            index = self.index.get(word)
            if index is None:
                index = self.index[word] = self._add(word)
                self._char_ids = None
            ids.append(index)
        return ids

    @property
    def char_ids(self) -> torch.Tensor:
        """[words, K] character ids (int16 for up to 2**15 ids); row 0 is the all-zero padding word."""
        if self._char_ids is None:
            dtype = torch.int16 if self.tokenizer.vocab_size <= 2**15 else torch.int32
            self._char_ids = torch.tensor(self._rows, dtype=dtype)
            self._word_id_table = torch.tensor(self._word_ids, dtype=torch.long)
        return self._char_ids

    def spell(self, types: np.ndarray) -> torch.Tensor:
        """Word-table ids [...] -> character ids [..., K], the model's input."""
        return self.char_ids[_index(types)].long()

    def model_inputs(self, types: np.ndarray, prefix: str = "") -> dict[str, torch.Tensor]:
        """Word-table ids [...] -> `{prefix}input_ids` [..., K] and, with word input, `{prefix}input_word_ids` [...]."""
        inputs = {f"{prefix}input_ids": self.spell(types)}
        if self.has_word_ids:
            self.char_ids  # (re)builds the word id table with the character one
            inputs[f"{prefix}input_word_ids"] = self._word_id_table[_index(types)]
        return inputs


def _index(types: np.ndarray) -> torch.Tensor:
    """`types` as an int64 tensor of its own: np.array copies where np.ascontiguousarray may not (NumPy counts a
    [1, 1] window flipped left to right as contiguous, with a negative stride, which torch refuses)."""
    return torch.from_numpy(np.array(types, dtype=np.int64))


def target_ids(words: list[str], vocabulary: Vocabulary, table: WordTable) -> np.ndarray:
    """The vocabulary ids of `words` as targets, `<UNK>`'s for words it lacks. With a character vocabulary
    (ELMoForManyLangs'), the model reads a word as its first K - 2 characters and word.dic holds words so cut: a
    longer word that the vocabulary lacks is its cut form's target, as in the package's training."""
    ids = vocabulary.ids(words)
    lexicon = table.tokenizer.lexicon
    if lexicon is not None:
        for position in np.flatnonzero(ids == vocabulary.unk_id):
            cut = lexicon.cut(words[position])
            if cut != words[position]:
                ids[position] = vocabulary.index.get(cut, vocabulary.unk_id)
    return ids


@dataclass
class EncodedText:
    """Sentences as flat arrays: sentence i is `[offsets[i], offsets[i + 1])` of `types` (word-table ids) and
    `targets` (vocabulary ids)."""

    types: np.ndarray
    targets: np.ndarray
    offsets: np.ndarray

    @property
    def num_sentences(self) -> int:
        return len(self.offsets) - 1

    @property
    def num_predictions(self) -> int:
        """Targets per direction: every word, plus `</S>` (forward) or `<S>` (backward) once per sentence."""
        return len(self.types) + self.num_sentences

    @classmethod
    def encode(cls, sentences, table: WordTable, vocabulary: Vocabulary) -> "EncodedText":
        """The corpus in memory: about 8 bytes per word."""
        types, targets, lengths = [np.zeros(0, dtype=np.int32)], [np.zeros(0, dtype=np.int32)], [0]
        for batch in sentences.iter(batch_size=10_000):
            words = [word for sentence in batch["words"] for word in sentence]
            types.append(np.asarray(table.ids(words), dtype=np.int32))
            targets.append(target_ids(words, vocabulary, table).astype(np.int32))
            lengths.extend(len(sentence) for sentence in batch["words"])
        return cls(types=np.concatenate(types), targets=np.concatenate(targets), offsets=np.cumsum(lengths))

    def digest(self, table: "WordTable") -> str:
        """sha256 of what batches are made of: each sentence's words, as characters and as softmax ids."""
        digest = hashlib.sha256()
        for array in (self.types, self.targets, self.offsets):
            digest.update(np.ascontiguousarray(array).tobytes())
        digest.update(table.char_ids[: int(self.types.max(initial=0)) + 1].numpy().tobytes())
        return digest.hexdigest()

    def stream(self, order: np.ndarray, vocabulary: Vocabulary, backward: bool) -> tuple[np.ndarray, np.ndarray]:
        """The sentences `order` as one stream of (input type, target id), in the direction's reading order.

        Forward: `<S> w1 .. wn` -> `w1 .. wn </S>`; backward: `</S> wn .. w1` -> `wn .. w1 <S>`.
        """
        lengths = np.diff(self.offsets)[order]
        starts = np.cumsum(lengths + 1) - (lengths + 1)
        total = int((lengths + 1).sum())
        within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)  # j of word j
        source = np.repeat(self.offsets[:-1][order], lengths) + within
        start = np.repeat(starts, lengths)
        place = np.repeat(lengths, lengths) - 1 - within if backward else within
        inputs = np.empty(total, dtype=np.int32)
        targets = np.empty(total, dtype=np.int32)
        inputs[starts] = EOS_TYPE if backward else BOS_TYPE
        inputs[start + 1 + place] = self.types[source]
        targets[start + place] = self.targets[source]
        targets[starts + lengths] = vocabulary.bos_id if backward else vocabulary.eos_id
        return inputs, targets


class StreamBatches:
    """bilm-tf's training batches: windows of `unroll_steps` words from per-row streams (see the module doc).

    `batch(index)` depends only on `index` (windows since the start of training), the seed and the process, so a
    resumed run reads exactly the windows an uninterrupted one would.
    """

    stateful = True

    def __init__(self, text: EncodedText, table: WordTable, vocabulary: Vocabulary, batch_size: int,
                 unroll_steps: int, seed: int, shuffle: bool = True, num_processes: int = 1, process_index: int = 0):
        self.text, self.table, self.vocabulary = text, table, vocabulary
        self.batch_size, self.unroll_steps, self.seed, self.shuffle = batch_size, unroll_steps, seed, shuffle
        self.rows = batch_size * num_processes
        self.my_rows = slice(process_index * batch_size, (process_index + 1) * batch_size)
        self.row_length = text.num_predictions // self.rows
        self.steps_per_epoch = self.row_length // unroll_steps
        if self.steps_per_epoch == 0:
            raise DataError(
                f"the training text has {counted(text.num_predictions, 'word')} per direction, too few for one window "
                f"of {counted(self.rows, 'row')} x {counted(unroll_steps, 'word')}; lower --batch-size or "
                "--unroll-steps"
            )
        self._epoch, self._streams = None, None

    def starts_row_streams(self, index: int) -> bool:
        """True where new streams begin (each epoch): the carried LSTM state must start from zero there."""
        return index % self.steps_per_epoch == 0

    def _order(self, epoch: int, direction: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.text.num_sentences)
        return np.random.default_rng([self.seed, epoch, direction]).permutation(self.text.num_sentences)

    def _epoch_streams(self, epoch: int):
        if epoch != self._epoch:
            streams = []
            for direction in (0, 1):
                inputs, targets = self.text.stream(self._order(epoch, direction), self.vocabulary, backward=direction == 1)
                size = self.rows * self.row_length
                streams.append((inputs[:size].reshape(self.rows, -1)[self.my_rows], targets[:size].reshape(self.rows, -1)[self.my_rows]))
            self._epoch, self._streams = epoch, streams
        return self._streams

    def batch(self, index: int) -> dict[str, torch.Tensor]:
        epoch, window = divmod(index, self.steps_per_epoch)
        (forward_inputs, forward_targets), (backward_inputs, backward_targets) = self._epoch_streams(epoch)
        columns = slice(window * self.unroll_steps, (window + 1) * self.unroll_steps)
        return window_batch(self.table, forward_inputs[:, columns], forward_targets[:, columns],
                            backward_inputs[:, columns], backward_targets[:, columns])


class SentenceBatches:
    """Stateless batches of whole sentences `<S> w1 .. wn </S>`, right-padded; both LMs read the same sentences.
    `group_by_length` (with `shuffle`): each step's sentences are of about the same length, as transformers'
    `group_by_length` makes them (shuffled, then sorted by length within groups of up to 50 steps' sentences), so that a
    batch is not padded to the one long sentence among short ones (positions 4.0 times the real words' on the default
    corpus, 1.14 times grouped)."""

    stateful = False

    def __init__(self, text: EncodedText, table: WordTable, vocabulary: Vocabulary, batch_size: int, seed: int,
                 shuffle: bool = True, num_processes: int = 1, process_index: int = 0, group_by_length: bool = False):
        if group_by_length and not shuffle:
            raise DataError("grouping the sentences by length reorders them, so it needs shuffling (not --no-shuffle)")
        self.text, self.table, self.vocabulary = text, table, vocabulary
        self.batch_size, self.seed, self.shuffle, self.group_by_length = batch_size, seed, shuffle, group_by_length
        self.rows = batch_size * num_processes
        self.first_row = process_index * batch_size
        self.steps_per_epoch = text.num_sentences // self.rows
        if self.steps_per_epoch == 0:
            raise DataError(f"the training text has {counted(text.num_sentences, 'sentence')}, fewer than one batch of "
                            f"{self.rows}")
        self._epoch, self._order = None, None

    def starts_row_streams(self, index: int) -> bool:
        return True

    def batch(self, index: int) -> dict[str, torch.Tensor]:
        epoch, step = divmod(index, self.steps_per_epoch)
        if epoch != self._epoch:
            self._order, self._epoch = self.order(epoch), epoch
        start = step * self.rows + self.first_row
        return sentence_batch(self.text, self._order[start : start + self.batch_size], self.table, self.vocabulary)

    def order(self, epoch: int) -> np.ndarray:
        """The sentences of `epoch` in the order they are read, `self.rows` a step."""
        count = self.text.num_sentences
        if not self.shuffle:
            return np.arange(count)
        if not self.group_by_length:
            return np.random.default_rng([self.seed, epoch]).permutation(count)
        generator = torch.Generator().manual_seed(int(np.random.default_rng([self.seed, epoch]).integers(2**62)))
        lengths = np.diff(self.text.offsets).tolist()
        return np.array(get_length_grouped_indices(lengths, self.rows, generator=generator), dtype=np.int64)


def sentence_batch(text: EncodedText, sentences, table: WordTable, vocabulary: Vocabulary) -> dict[str, torch.Tensor]:
    """Sentences `<S> w1 .. wn </S>` padded to a common length; labels = next word, backward_labels = previous."""
    lengths = [int(text.offsets[i + 1] - text.offsets[i]) for i in sentences]
    steps = max(lengths) + 2
    types = np.full((len(lengths), steps), PAD_TYPE, dtype=np.int64)
    labels = np.full((len(lengths), steps), IGNORE_INDEX, dtype=np.int64)
    backward_labels = np.full((len(lengths), steps), IGNORE_INDEX, dtype=np.int64)
    for row, (i, length) in enumerate(zip(sentences, lengths)):
        words = slice(text.offsets[i], text.offsets[i + 1])
        types[row, : length + 2] = [BOS_TYPE, *text.types[words], EOS_TYPE]
        labels[row, : length + 1] = [*text.targets[words], vocabulary.eos_id]
        backward_labels[row, 1 : length + 2] = [vocabulary.bos_id, *text.targets[words]]
    return {
        **table.model_inputs(types),
        "attention_mask": torch.from_numpy(types != PAD_TYPE).long(),
        "labels": torch.from_numpy(labels),
        "backward_labels": torch.from_numpy(backward_labels),
    }


class EvaluationStream:
    """A held-out text read once, in order, with the LSTM state carried (bilm-tf's `run_test`), every target counted.

    The sentences are split into `rows` contiguous parts of about equal size (over all processes); each part is read
    as a forward and a backward stream like the training ones, in windows of `unroll_steps`. Rows that end early are
    filled with `<S>` words without targets, after their text, so no prediction sees them. In one process the batch
    (`self.rows`) is the parts that hold text: more rows than the text fills (more than its sentences) give it no
    empty rows, and windows are at most the longest part (`self.unroll_steps`); the figures are those of `rows` parts.
    """

    def __init__(self, text: EncodedText, table: WordTable, vocabulary: Vocabulary, rows: int, unroll_steps: int,
                 num_processes: int = 1, process_index: int = 0):
        if text.num_sentences == 0:
            raise DataError("the held-out text has no sentences")
        rows_total = self.parts = rows * num_processes  # (the figure depends on them a little)
        ends = np.cumsum(np.diff(text.offsets) + 1)
        # Parts split at rows_total - 1 points of the text's ends[-1] targets; from ends[-1] parts on, each sentence (2
        # targets or more) is a part of its own, the same parts for any larger number: split at that many points then.
        points = min(rows_total, int(ends[-1]))
        bounds = np.searchsorted(ends, np.arange(1, points) * ends[-1] / points, side="right")
        parts = np.split(np.arange(text.num_sentences), bounds)
        if num_processes == 1:  # parts left empty (more rows than the text fills) are rows without targets: left out,
            # the figures the same (under several processes each keeps its rows, those past the parts without targets)
            parts = [part for part in parts if len(part)]
            rows = len(parts)
        self.rows = rows  # (the batch)
        streams = [(text.stream(part, vocabulary, False), text.stream(part, vocabulary, True)) for part in parts]
        length = max(len(forward[0]) for forward, _ in streams)
        # A window longer than the longest part reads nothing more: windows of any length give the same figures.
        self.table, self.unroll_steps = table, min(unroll_steps, length)
        length = -(-length // self.unroll_steps) * self.unroll_steps
        mine = streams[process_index * rows : (process_index + 1) * rows]
        self.arrays = []
        for direction in (0, 1):
            inputs = np.full((rows, length), BOS_TYPE, dtype=np.int64)
            targets = np.full((rows, length), IGNORE_INDEX, dtype=np.int64)
            for row, pair in enumerate(mine):
                row_inputs, row_targets = pair[direction]
                inputs[row, : len(row_inputs)] = row_inputs
                targets[row, : len(row_targets)] = row_targets
            self.arrays.append((inputs, targets))
        self.num_windows = length // self.unroll_steps

    def __iter__(self):
        (forward_inputs, forward_targets), (backward_inputs, backward_targets) = self.arrays
        for window in range(self.num_windows):
            columns = slice(window * self.unroll_steps, (window + 1) * self.unroll_steps)
            yield window_batch(self.table, forward_inputs[:, columns], forward_targets[:, columns],
                               backward_inputs[:, columns], backward_targets[:, columns])


def window_batch(table: WordTable, forward_inputs, forward_targets, backward_inputs, backward_targets) -> dict:
    """One window of both streams [rows, steps] -> model inputs; the backward window is flipped left to right."""
    return {
        **table.model_inputs(forward_inputs),
        "labels": torch.from_numpy(forward_targets.astype(np.int64)),
        **table.model_inputs(backward_inputs[:, ::-1], prefix="backward_"),
        "backward_labels": torch.from_numpy(backward_targets[:, ::-1].astype(np.int64)),
    }


def read_corpus(paths: list[str], text_column: str, word_splitting: str, role: str, option: str | None = None,
                split: str | None = None):
    """Load a corpus for `role` ("train" or "validation"), with a readable error for empty input (naming `option`,
    by default `--{role}-file`)."""
    option = option or f"--{role}-file"
    try:
        sentences = load_sentences(paths, text_column=text_column, word_splitting=word_splitting, role=role,
                                   option=option, split=split)
    except Exception as error:
        problem = datasets_cache_full(error)  # (datasets writes the text into its cache first)
        if problem is None:
            raise
        raise DataError(f"{option} {' '.join(map(os.fspath, paths))}: {problem}") from None
    if len(sentences) == 0:
        raise DataError(f"{option} {' '.join(map(os.fspath, paths))}: no sentences (every line is empty)")
    return sentences
