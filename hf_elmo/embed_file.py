"""`hf-elmo embed`: one sentence per line in, the HDF5 file of `allennlp elmo` out; resumable and multi-process.

Layout of the output (what `allennlp elmo` wrote, so that existing readers work unchanged):
    "0", "1", ...           one float32 dataset per input line, keyed by its line number (0-based), or by the
                            sentence itself with `use_sentence_keys`: [L + 1, words, 2P] for "all", [words, 2P]
                            for "top", "average" and "mix". A blank line gives a dataset with 0 words.
    "sentence_to_index"     shape (1,), a JSON string {sentence: "line number"}; left out with `forget_sentences`
                            or `use_sentence_keys`.
An empty input file has no lines, so its output has no line datasets: only `sentence_to_index`, holding {} (what
`allennlp elmo` wrote for it), or nothing with `forget_sentences` or `use_sentence_keys`. A warning names the
input: an empty one is more often a mistake than not.

How the work is kept: the output is written once, in place. When a run begins, `OUTPUT.partial/output.hdf5` is made
whole (atomically) with every line's dataset, its space allocated, `sentence_to_index` and the manifest, then
closed. From then on, writing a batch changes the bytes of its lines' datasets only, never HDF5's own records of the
file (what `_PartialOutput` relies on), so a kill in the middle of a write leaves a file that opens, and the batches
it finished are whole: after each batch is written (on a GPU by a thread of its own, while the model computes the
next batch) the file is flushed to the disk, and then a small batch file, `OUTPUT.partial/00000012.hdf5` for batch
12, says that it is done (made atomically: it is there whole or not at all; a stateful run's holds the LSTM state
after the batch). A run finds the batches that an earlier, interrupted run finished (a damaged batch file, or a
damaged `output.hdf5`, is named and its batches computed again; one that cannot be opened, as another program holds
it where HDF5 locks files, stops the run with an error that names it) and computes only the others; when all are
there, `output.hdf5` is moved to OUTPUT and the folder is removed. `OUTPUT.lock` keeps a second run off the same
output while one runs. Under `accelerate launch` or `torchrun`, batch k goes to process k mod N; the first process
writes `output.hdf5`, and every other process writes its batches' lines into their batch files, which the first
process copies into `output.hdf5` at the end (one HDF5 file has one writer).

Exactly the same bytes, however often a run was interrupted and however many processes ran it: float32 rounding
in a matrix multiply (MKL picks its kernel by the number of rows: a highway layer's row comes out differently from
a multiply of 2 rows than of 7) and in a vectorised sigmoid (a tensor's last elements take a scalar path) depends on
what else is computed with it, by up to 1e-6. The model's per-word caches keep results computed with the words of
earlier batches, so with caches that fill as they go, a batch's numbers would depend on what ran before it (and a
resumed run, starting cold, would differ). So a run first fills them with the file's most frequent words (as many
as they hold), computed together in a fixed order, and keeps exactly those: every other word is computed with its
own batch and not kept. A batch's numbers are then a function of the file and the batch alone, and of the number
of threads a process computes with on a CPU (sums split across threads round differently): the manifest records it,
and a run resumed with another is refused.
"""

import contextlib
import functools
import hashlib
import json
import logging
import math
import os
import re
import shutil
import stat
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

try:
    import resource
except ImportError:  # (Windows: no file size limit to read)
    resource = None

import h5py
import numpy as np
import torch
from accelerate import PartialState
from accelerate.utils import broadcast_object_list, gather_object, parse_flag_from_env
from tqdm.auto import tqdm

from .embedder import ElmoEmbedder, check_batch_size, check_output_format, length_sorted_batches, sentence_arrays
from .fast_bilstm import derived_weights
from .files import (OutputLock, check_output_location, check_text_file, decode_utf8, fsync_path, link_target,
                    read_file_bytes, read_text_file, sha256_tensors)

logger = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
OUTPUT_NAME = "output.hdf5"  # OUTPUT.partial/output.hdf5: the output as it is written
BATCH_FILE = re.compile(r"\d{8}\.hdf5")  # OUTPUT.partial/00000012.hdf5: batch 12 is done
IN_OUTPUT = "lines_in_output"  # attribute of a batch file whose lines are in output.hdf5, not in the batch file
STATE_GROUP = "_state"  # in a stateful run's batch files: the LSTM state after the batch
MANIFEST_ATTRIBUTE = "hf_elmo_embed"  # on a finished output file: the manifest of the run that wrote it
# Words per call when the caches are filled (bounds its memory; a fixed size, so always the same calls).
PIN_CHUNK_WORDS = 2048
# Computed batches that wait for the writer thread besides the one it writes (bounds their memory).
WRITES_WAITING = 1
# HDF5's records in output.hdf5 of the file and the manifest, and of one line's dataset besides its name and
# numbers (measured: 6 kB, and 330 to 370 bytes).
FILE_RECORD_BYTES, LINE_RECORD_BYTES = 16_384, 400


def process_state() -> PartialState:
    """This process's place among those that `accelerate launch` or `torchrun` started (one, run alone).

    Accelerate forms a group of CPU processes only when told to (`ACCELERATE_USE_CPU=1`); on a machine without an
    accelerator (CUDA, XPU, ...) there is no other kind, so it is asked for there too.
    """
    return PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU") or not torch.accelerator.is_available())


def read_sentences(path: str | os.PathLike) -> list[str]:
    """The lines of a UTF-8 text file, stripped of surrounding whitespace (`\\n`, `\\r\\n` and `\\r` end lines)."""
    return _lines(read_text_file(path, "input file"))


def _lines(text: str) -> list[str]:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines[-1] == "":  # the newline that ends the last line does not start another
        lines.pop()
    return [line.strip() for line in lines]


def _read_input(path: Path) -> tuple[list[str], str]:
    """`read_sentences(path)` and the sha256 of the file's bytes, from one read: a pipe gives its text once (a named
    pipe opened a second time would wait for a writer that never comes)."""
    data = read_file_bytes(path, "input file")
    return _lines(decode_utf8(data, path)), hashlib.sha256(data).hexdigest()


def _input_location(path: Path) -> str:
    """The input as the manifest names it: a file by its resolved path, however it was spelled; a pipe or a terminal
    as given (`/dev/fd/63` resolves to a name of its own for every run, so that a resumed run would not match)."""
    return str(path.resolve()) if path.is_file() else str(path)


def check_not_a_pipe(path: str | os.PathLike, num_processes: int) -> None:
    """Under `num_processes` > 1, each of which reads the input, refuse a pipe: one process would get its text and
    the others none (an output without the lines, or a wait for a writer that never comes)."""
    if num_processes < 2:
        return
    try:
        mode = os.stat(path).st_mode
    except OSError:
        if str(path).startswith("/dev/fd/"):  # (a <(...) of the shell that started torchrun, which it does not pass on)
            raise ValueError(f"{path}: a pipe of the shell (<(...)) does not reach the {num_processes} processes, "
                             "each of which reads the input: write it to a file first, or run in one process") from None
        return  # (missing or unreadable: the reading names why)
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise ValueError(f"{path}: not a regular file (a pipe, a terminal or a device gives its text once), and each "
                         f"of the {num_processes} processes reads the input: write it to a file first, or run in one "
                         "process")


def check_input_file(path: str | os.PathLike, use_sentence_keys: bool = False, num_processes: int = 1) -> None:
    """Fail as `read_sentences` would, with its message, unless `path` reads as UTF-8 text (an empty file does: it
    has no lines), so that the command names a bad input before the model loads; reads the file in blocks. With
    `use_sentence_keys`, also unless every line can be a key (as `embed_file` requires; it reads the lines). A pipe
    or a terminal (`<(zcat corpus.gz)`, `/dev/stdin`) is left to `read_sentences`: reading it here would use up
    its text. Under `num_processes` > 1 a pipe is refused (`check_not_a_pipe`)."""
    check_not_a_pipe(path, num_processes)
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None  # (missing or unreadable: check_text_file names why)
    if mode is None or stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        if use_sentence_keys:  # (the lines are needed: one read checks the text too, with the same messages)
            _check_sentence_keys(read_sentences(path), path)
        else:
            check_text_file(path, "input file", allow_empty=True)


def plan_batches(sentences: list[str], batch_size: int, stateful: bool) -> list[list[int]]:
    """
    The line numbers of each batch. Stateful: consecutive lines, as the original ran them. Stateless: lines of
    similar length together, and blank lines in no batch (they need no model).
    """
    if stateful:
        return [list(range(start, min(start + batch_size, len(sentences)))) for start in range(0, len(sentences), batch_size)]
    lines = [i for i, sentence in enumerate(sentences) if sentence]
    return [[lines[j] for j in batch] for batch in length_sorted_batches([len(sentences[i].split()) for i in lines], batch_size)]


def pin_frequent_words(embedder: ElmoEmbedder, sentences: list[str]) -> None:
    """Fill the model's inference caches with the most frequent words of `sentences` (and `<S>`, `</S>`, or the
    boundaries of the tokenizer's character vocabulary), computed in a fixed order, and keep exactly those until
    `unpin_words` (see the module docstring)."""
    model, tokenizer = embedder.model, embedder.tokenizer
    token_cache, gate_cache = model.char_encoder.token_cache, model.layers[0].input_gate_cache
    unpin_words(embedder)
    model.clear_caches()
    counts = Counter(word for sentence in sentences for word in sentence.split())
    ranked = sorted(counts, key=lambda word: (-counts[word], word))

    def encode(words: list[str]) -> torch.Tensor:
        """The words' vectors [N, P] from their character ids (and word ids, for a model with word input)."""
        chars = torch.tensor([tokenizer.word_to_char_ids(word) for word in words], device=embedder.device)
        word_ids = None
        if tokenizer.returns_word_ids:
            word_ids = torch.tensor([tokenizer.word_to_id(word) for word in words], device=embedder.device)
        return model.char_encoder(chars, word_ids)

    with torch.inference_mode():
        words = [*tokenizer.sentence_boundaries, *ranked[: max(token_cache.max_words - 2, 0)]]
        if token_cache.max_words >= 2:  # (0 is off; a call with more rows than the cache holds keeps none)
            chunk_words = min(PIN_CHUNK_WORDS, token_cache.max_words)
            for start in range(0, len(words), chunk_words):
                encode(words[start : start + chunk_words])
        token_cache.add_new = False
        # The first biLSTM layer's cache of input gates (used on CPU) is filled by that layer, run on the vectors of
        # the words that it holds room for, as sequences of one word (so the layer computes little else).
        words = words[: gate_cache.max_words] if embedder.device.type == "cpu" else []
        if words:
            vectors = encode(words)  # [N, P], the pinned ones
            layer, batch = model.layers[0], vectors.shape[0]
            layer(vectors.expand(2, -1, -1).unsqueeze(2), torch.ones(batch, 1, dtype=torch.bool, device=vectors.device),
                  vectors.new_zeros(2, batch, model.config.projection_dim), vectors.new_zeros(2, batch, model.config.cell_size),
                  inputs_repeat=True)
        gate_cache.add_new = False


def unpin_words(embedder: ElmoEmbedder) -> None:
    """The caches fill as they go again (their words stay)."""
    embedder.model.char_encoder.token_cache.add_new = True
    embedder.model.layers[0].input_gate_cache.add_new = True


def _model_location(model_name_or_path: str) -> str:
    """A model folder by its resolved path, however it was spelled (`elmo-original`, `./elmo-original`), so that
    the same folder resumes its run; a Hub id as it is."""
    path = Path(model_name_or_path)
    return str(path.resolve()) if path.is_dir() else model_name_or_path


def _model_fingerprint(model: torch.nn.Module) -> str:
    """The sha256 of the model's state_dict (names and bytes), worked out once per model and again whenever one of
    its tensors changes (replaced, moved, updated in place or by an optimizer step: `weights_fingerprint`). Hashing
    the original size's 374 MB took 0.4 s of every run, and on a GPU a copy of them to the host. A write through
    `.data` is not seen, here as in the model's caches of per-word results, which would serve stale vectors too."""
    tensors = model.state_dict(keep_vars=True)  # (the parameters themselves: the optimizer step count knows them)
    return derived_weights(model, "embed_sha256", lambda _: _state_dict_sha256(tensors), list(tensors.values()))


def _state_dict_sha256(tensors: dict[str, torch.Tensor]) -> str:
    return sha256_tensors(tensors.items()).hexdigest()


def _check_sentence_keys(sentences: list[str], input_file) -> None:
    seen = {}
    for line, sentence in enumerate(sentences, start=1):  # (numbered as an editor and the UTF-8 check number lines)
        # (HDF5 names end at a NUL: "a\0b" would be stored as "a", or clash with "a\0c" at the final write)
        if sentence in ("", ".") or "/" in sentence or "\0" in sentence:
            raise ValueError(
                f"{input_file}: line {line} ({sentence!r}) cannot be an HDF5 key: with --use-sentence-keys no line may "
                "be blank, '.' or contain '/' or a NUL character"
            )
        if sentence in seen:
            raise ValueError(
                f"{input_file}: lines {seen[sentence]} and {line} are the same sentence, which --use-sentence-keys "
                "cannot store twice; leave out --use-sentence-keys to key by line number"
            )
        seen[sentence] = line


def companion_paths(output_file: Path) -> tuple[Path, Path]:
    """Where a run on `output_file` keeps its finished batches, and its lock file."""
    return output_file.with_name(output_file.name + ".partial"), output_file.with_name(output_file.name + ".lock")


def check_paths(input_file: str | os.PathLike, output_file: str | os.PathLike) -> None:
    """Before any work: the output can be written, and writing it (or its batch folder or lock) cannot destroy
    the input. A link at the output is checked as its target (`embed_file` writes there); links in a loop: OSError."""
    input_file, output_file = Path(input_file), link_target(output_file)
    check_output_location(output_file, "file")
    partial, lock = companion_paths(output_file)
    name_max = _longest_name(output_file.parent)
    if len(os.fsencode(partial.name)) > name_max:  # (else refused by the file system once the model had loaded)
        raise ValueError(f"{output_file}: its name is too long: the folder of its batches, {partial.name!r}, would "
                         f"have {len(os.fsencode(partial.name))} bytes, where a name may have {name_max} here")
    for path in (output_file, partial, lock):
        if path.exists() and input_file.exists() and os.path.samefile(input_file, path):
            raise ValueError(
                f"{path}: is the input file {input_file} itself; writing the embeddings there would destroy the "
                "text: give another output file"
            )
    if partial.is_dir() and input_file.exists() and partial.resolve() in input_file.resolve().parents:
        raise ValueError(
            f"{input_file}: is inside {partial}, the folder of the batches of {output_file}, which the run removes "
            "when it ends: move the input elsewhere, or give another output file"
        )
    if partial.exists() and not partial.is_dir():
        raise ValueError(f"{partial}: is a file, where the batches of {output_file} are kept; move it away")
    if lock.is_dir():
        raise ValueError(f"{lock}: is a folder, where the lock of {output_file} is kept; move it away")


def _longest_name(folder: Path) -> int:
    """The most bytes a file name may have in `folder` (or the nearest folder above it that exists)."""
    while not folder.exists():
        folder = folder.parent
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):  # (not told: the common limit)
        return 255


@functools.cache  # (made once: every batch file is created with them)
def _file_property_lists():
    """The creation and access property lists of what h5py 3.16's File(path, "w", track_order=True) makes: the root
    group without times. Older h5py wrote them, and two runs a second apart gave other bytes."""
    creation, access = h5py.h5p.create(h5py.h5p.FILE_CREATE), h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    creation.set_link_creation_order(h5py.h5p.CRT_ORDER_TRACKED | h5py.h5p.CRT_ORDER_INDEXED)
    creation.set_attr_creation_order(h5py.h5p.CRT_ORDER_TRACKED | h5py.h5p.CRT_ORDER_INDEXED)
    creation.set_obj_track_times(False)
    access.set_libver_bounds(h5py.h5f.LIBVER_EARLIEST, h5py.h5f.LIBVER_LATEST)  # (h5py's default)
    # No sieve buffer: HDF5 held a small dataset's bytes in it and wrote them when the dataset was released, where
    # h5py can only print the failure of that write (a full disk), and the batch counted as done, its lines zeros.
    # Unbuffered, the write itself fails, as an OSError.
    access.set_sieve_buf_size(0)
    return creation, access


def _write_atomically(path: Path, write) -> None:
    """Run `write(h5py.File)` on a temporary file beside `path`, flush it to the disk, then move it to `path` in one
    step. The temporary name starts with a dot and holds `.tmp-`: a later run removes what a kill leaves."""
    temporary = path.parent / f".{path.name}.tmp-{os.getpid()}"
    creation, access = _file_property_lists()
    try:
        file_id = h5py.h5f.create(os.fsencode(temporary), h5py.h5f.ACC_TRUNC, fcpl=creation, fapl=access)
        with h5py.File(file_id) as handle:
            write(handle)
        fsync_path(temporary)  # (on the disk before its name says it is whole)
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()


class _NotOpenedError(ValueError):
    """A file of a run that could not be opened at all: another program holds HDF5's lock on it (where HDF5 locks
    files, its default), no permission, too many files open. Not damage: the file is kept, and the run stops with
    this error (a ValueError, as every refusal of embed_file)."""


def _open_hdf5(path: Path, mode: str = "r") -> h5py.File:
    """`h5py.File(path, mode)` ("r" or "r+", the second with `_file_property_lists`' access: no write is
    buffered); _NotOpenedError where the system refused to open it (HDF5 gives those an errno; what it cannot read in
    the file itself, cut short or not HDF5, has none, and is raised as it is, as is a missing file's
    FileNotFoundError)."""
    try:
        if mode == "r+":
            return h5py.File(h5py.h5f.open(os.fsencode(path), h5py.h5f.ACC_RDWR, fapl=_file_property_lists()[1]))
        return h5py.File(path, mode)
    except OSError as error:
        if error.errno is None or isinstance(error, FileNotFoundError):
            raise
        raise _NotOpenedError(f"{path}: cannot be opened ({error.strerror}); if another program has it open, close "
                             "it and run the same command again") from error


def _line_keys(sentences: list[str], use_sentence_keys: bool) -> list[str]:
    """Each line's dataset name in the output: its line number, or the sentence itself."""
    return list(sentences) if use_sentence_keys else [str(line) for line in range(len(sentences))]


def _line_shapes(embedder: ElmoEmbedder, sentences: list[str], output_format: str) -> list[tuple[int, ...]]:
    """Each line's dataset shape in the output: that of `empty_embedding` with the line's words."""
    *layers, _, width = embedder.empty_embedding(output_format).shape
    return [(*layers, len(sentence.split()), width) for sentence in sentences]


def _link_lists() -> dict[int, h5py.h5p.PropLCID]:
    """HDF5's link creation lists for a name marked ASCII and for one marked UTF-8, by character set."""
    link_lists = {}
    for encoding in (h5py.h5t.CSET_ASCII, h5py.h5t.CSET_UTF8):
        link_lists[encoding] = h5py.h5p.create(h5py.h5p.LINK_CREATE)
        link_lists[encoding].set_char_encoding(encoding)
    return link_lists


def _encoded_name(key: str) -> tuple[bytes, int]:
    """A dataset name and its character set as h5py's `handle[name] = array` writes it: ASCII where it is, else
    UTF-8 (its `create_dataset` marks every name ASCII)."""
    try:
        return key.encode("ascii"), h5py.h5t.CSET_ASCII
    except UnicodeEncodeError:
        return key.encode("utf-8"), h5py.h5t.CSET_UTF8


def _with_progress(keys: list[str], shapes: list[tuple[int, ...]], what: str, progress: bool):
    """(key, shape) of each line, iterated under a progress bar that says `what` is done to them (on a file of
    millions of lines, making or checking output.hdf5 takes minutes: about 25 and 40 microseconds a line)."""
    return tqdm(zip(keys, shapes), total=len(keys), unit=" lines", desc=f"hf-elmo embed: {what}", leave=False,
                disable=not progress, dynamic_ncols=True)


def _create_partial_output(path: Path, keys: list[str], shapes: list[tuple[int, ...]], sentences: list[str],
                           manifest: dict, sentence_index: bool, progress: bool) -> None:
    """Make `OUTPUT.partial/output.hdf5` whole, atomically: every line's float32 dataset in line order, its space
    allocated now (and never filled: each batch writes its lines), `sentence_to_index` and the manifest. Closed
    once made, so that HDF5 has written every record it keeps of the file (a file flushed while still open changed
    the end-of-file address on the next flush). Made with HDF5's low-level calls, the property lists and shapes
    made once: h5py's `create_dataset` took 5 times as long per dataset (100-120 against 23 microseconds)."""
    float32 = h5py.h5t.py_create(np.dtype("<f4"))
    creation = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    creation.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
    creation.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
    creation.set_obj_track_times(False)  # (as h5py makes datasets: no times, so the same run gives the same bytes)

    link_lists, spaces = _link_lists(), {}

    def write(handle):
        handle.attrs[MANIFEST_ATTRIBUTE] = json.dumps(manifest)
        for key, shape in _with_progress(keys, shapes, f"making {path.name}", progress):
            name, encoding = _encoded_name(key)
            if shape not in spaces:
                spaces[shape] = h5py.h5s.create_simple(shape)
            h5py.h5d.create(handle.id, name, float32, spaces[shape], dcpl=creation, lcpl=link_lists[encoding])
        if sentence_index:
            index = handle.create_dataset("sentence_to_index", (1,), dtype=h5py.string_dtype())
            index[0] = json.dumps({sentence: str(line) for line, sentence in enumerate(sentences)})

    _write_atomically(path, write)


def _partial_output_problem(path: Path, keys: list[str], shapes: list[tuple[int, ...]], manifest: dict,
                            progress: bool) -> str | None:
    """What is wrong with an `output.hdf5` that an interrupted run left (None: nothing): it must open, hold this
    run's manifest and every line's dataset with its type and shape."""

    def problem(handle):
        found = handle.attrs.get(MANIFEST_ATTRIBUTE)
        if found is None or json.loads(found) != manifest:
            return "was made for another run"
        for key, shape in _with_progress(keys, shapes, f"checking {path.name}", progress):
            name = key.encode()
            if not handle.id.links.exists(name):
                return f"has no dataset {key}"
            dataset = h5py.h5d.open(handle.id, name)
            if dataset.dtype != np.float32 or dataset.shape != shape:
                return _not_its_line(key, dataset)
        return None

    return _file_problem(path, problem)


def _file_problem(path: Path, problem) -> str | None:
    """`problem(h5py.File)` of the HDF5 file at `path`, or "is damaged (...)" where HDF5 cannot read it; a file that
    cannot be opened at all is no damage (_NotOpenedError is raised: the file is kept)."""
    try:
        with _open_hdf5(path) as handle:
            return problem(handle)
    except _NotOpenedError:
        raise
    except (OSError, ValueError, KeyError) as error:
        return f"is damaged ({error})"


def _not_its_line(name: str, dataset) -> str:
    return f"dataset {name} has type {dataset.dtype} and shape {dataset.shape}, not that of its line"


class _PartialOutput:
    """`OUTPUT.partial/output.hdf5` open for the batches' lines (made by `_create_partial_output`). Writing a batch
    writes the bytes of its lines' datasets, whose space was allocated when the file was made, and nothing else:
    HDF5's records of the file stay as they are on disk (a test compares every byte outside the datasets), so a run
    killed in the middle of a write leaves a file that opens, and the batches it finished are whole. Each write ends
    on the disk (fsync) before its batch is marked done: the file is sparse, so lines that a power cut kept from the
    disk would read back as zeros, and nothing would tell them from written ones."""

    def __init__(self, path: Path, keys: list[str]):
        self.path, self.keys = path, keys
        self.handle = _open_hdf5(path, "r+")

    def write(self, lines: list[int], arrays: list[np.ndarray]) -> None:
        """Write each line's float32 array into its dataset (`sync` then puts them on the disk)."""
        for line, array in zip(lines, arrays):
            dataset = h5py.h5d.open(self.handle.id, self.keys[line].encode())
            if dataset.shape != array.shape:  # (a defect: the shapes come from the lines, and batch files are checked)
                raise RuntimeError(f"{self.path}: line {line} has {array.shape} to write into {dataset.shape}")
            dataset.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(array, dtype=np.float32))

    def sync(self) -> None:
        self.handle.flush()
        os.fsync(self.handle.id.get_vfd_handle())

    def close(self) -> None:
        self.handle.close()


class _BatchFiles:
    """Read access to the finished batch files, a bounded number open at a time (they are read roughly in order)."""

    def __init__(self, folder: Path, max_open: int = 128):
        self.folder, self.max_open, self.open = folder, max_open, OrderedDict()

    def path(self, batch: int) -> Path:
        return self.folder / f"{batch:08d}.hdf5"

    def __getitem__(self, batch: int) -> h5py.File:
        if batch in self.open:
            self.open.move_to_end(batch)
        else:
            if len(self.open) >= self.max_open:
                self.open.popitem(last=False)[1].close()
            self.open[batch] = _open_hdf5(self.path(batch))
        return self.open[batch]

    def close(self) -> None:
        for handle in self.open.values():
            handle.close()
        self.open.clear()


def embed_file(
    embedder: ElmoEmbedder,
    input_file: str | os.PathLike,
    output_file: str | os.PathLike,
    output_format: str = "all",
    batch_size: int = 64,
    use_sentence_keys: bool = False,
    forget_sentences: bool = False,
    progress: bool = True,
    tokenize_ahead: bool | None = None,
    write_behind: bool | None = None,
) -> dict:
    """
    Embed every line of `input_file` (whitespace-separated words) into `output_file` (layout in the module
    docstring). Stateless or stateful as `embedder` is; stateful runs go through the file in order, `batch_size`
    lines at a time, row r carrying its state to row r of the next batch, as `allennlp elmo` did.

    `tokenize_ahead`: tokenise the next batch in a thread while the model computes this one (None: where the model
    is not on the CPU, so that a GPU never waits for the tokenizer; on a CPU the thread would take a core from the
    model). The output is the same either way.

    `write_behind`: copy each computed batch to the host and write its lines in a thread while the model computes
    the next one (None: where the model is not on the CPU). On an H200 it took embed from 29,500 to 36,700 words/s
    (original size, when each batch was written twice); on a CPU, where the model takes every core and the writes
    are a few percent of its time, it measured no faster (2 cores, original size: 1,240 words/s either way). The
    output is the same either way, and a batch is marked done only once its lines are written, either way.

    Returns a summary: `sentences`, `batches`, `computed` (batches this process computed), `resumed` (batches an
    earlier run had finished), `seconds`, `output`. Refusals are ValueErrors that name the file or option: among
    them a file of an interrupted run that another program holds open (where HDF5 locks files, its default).
    """
    started = time.perf_counter()
    check_output_format(output_format)
    check_batch_size(batch_size)
    state = process_state()
    if embedder.stateful and state.num_processes > 1:
        raise ValueError(
            "--stateful carries the LSTM state through the file in order, so it cannot be split across "
            f"{state.num_processes} processes: run it in a single process"
        )
    # A link at the output is written through, as a plain open writes: the file, its batch folder and its lock go
    # beside the link's target (the output is moved into place in one step, which would replace the link itself).
    input_file, output_file = Path(input_file), link_target(output_file)
    check_not_a_pipe(input_file, state.num_processes)
    sentences, input_sha256 = _read_input(input_file)
    check_paths(input_file, output_file)
    if not sentences and state.is_main_process:
        logger.warning(f"{input_file}: the input file has no lines, so {output_file} will hold no sentences")
    if use_sentence_keys:
        _check_sentence_keys(sentences, input_file)
    from . import library_versions  # (here: the package imports this module as it starts)

    manifest = {
        "input": _input_location(input_file),
        "input_sha256": input_sha256,
        "model": _model_location(embedder.model_name_or_path),
        "model_sha256": _model_fingerprint(embedder.model),
        "output_format": output_format,
        "batch_size": batch_size,
        "stateful": embedder.stateful,
        "use_sentence_keys": use_sentence_keys,
        "forget_sentences": forget_sentences,
        # float32 sums on the CPU split across threads differ in their last bits with the number of threads
        "cpu_threads": torch.get_num_threads() if embedder.device.type == "cpu" else None,
        # ... and with the kernels, which a release of either may change (and hf-elmo's batching with it)
        "versions": library_versions(),
    }
    if state.num_processes > 1:
        _check_same_job(manifest, input_file)
    batches = plan_batches(sentences, batch_size, embedder.stateful)
    keys, shapes = _line_keys(sentences, use_sentence_keys), _line_shapes(embedder, sentences, output_format)
    summary = {"sentences": len(sentences), "batches": len(batches), "computed": 0, "resumed": 0, "output": str(output_file)}
    partial, lock = companion_paths(output_file)
    with contextlib.ExitStack() as held:
        # The first process takes the lock and prepares the batch folder; the others learn whether it could.
        failure, finished_before = None, None
        if state.is_main_process:
            try:
                output_file.parent.mkdir(parents=True, exist_ok=True)  # (check_paths let a missing folder pass)
                held.enter_context(OutputLock(lock, output_file))
                finished_before = _finished_manifest(output_file) == manifest and _read_manifest(partial) in (None, manifest)
                if not finished_before:
                    _prepare_partial_folder(partial, manifest, sentences, keys, shapes, batches, embedder.stateful,
                                            not (use_sentence_keys or forget_sentences), progress)
            except (ValueError, OSError) as error:
                failure = str(error)
                if isinstance(error, OSError) and error.errno is not None and not error.filename:  # (HDF5's, which
                    # names no file: making output.hdf5 on a full disk, say)
                    failure = f"{partial}: could not be made ready ({os.strerror(error.errno)})"
        if state.num_processes > 1:
            failure, finished_before = broadcast_object_list([failure, finished_before], from_process=0)
        if failure is not None:
            raise ValueError(failure)
        if finished_before:  # an earlier run wrote exactly this (and maybe was stopped before removing its batches)
            if state.is_main_process:
                shutil.rmtree(partial, ignore_errors=True)
            summary.update(resumed=len(batches), seconds=time.perf_counter() - started)
            return summary
        if tokenize_ahead is None:
            tokenize_ahead = embedder.device.type != "cpu"
        if write_behind is None:
            write_behind = embedder.device.type != "cpu"
        try:
            _compute_batches(embedder, sentences, keys, batches, partial, output_format, state, summary, progress,
                             tokenize_ahead, write_behind)
            state.wait_for_everyone()
            if state.is_main_process:
                _write_output(batches, keys, partial, output_file)
        except OSError as error:
            if error.errno is None:  # (not the system's: a damaged file, which the error names)
                raise
            finished = sum(1 for path in partial.glob("[0-9]*.hdf5") if BATCH_FILE.fullmatch(path.name))
            raise OSError(f"{output_file}: could not be written ({os.strerror(error.errno)}); the {finished} of "
                          f"{len(batches)} batches finished are kept in {partial}, and the same command run again "
                          "goes on from them") from error
        state.wait_for_everyone()
    summary["seconds"] = time.perf_counter() - started
    return summary


def _tokenized_batches(embedder, sentences, batches, todo, ahead: bool) -> Iterator[tuple[int, tuple]]:
    """(k, `embedder.tokenize_batch` of batch k) for each batch k of `todo`; `ahead`: batch k + 1 is tokenised in a
    thread while the caller computes batch k (the model releases the interpreter while it computes)."""
    def tokenize(k):
        return embedder.tokenize_batch([sentences[line] for line in batches[k]])

    if not ahead:
        yield from ((k, tokenize(k)) for k in todo)
        return
    with ThreadPoolExecutor(max_workers=1) as pool:
        upcoming = pool.submit(tokenize, todo[0]) if todo else None
        for position, k in enumerate(todo):
            tokenized = upcoming.result()
            if position + 1 < len(todo):
                upcoming = pool.submit(tokenize, todo[position + 1])
            yield k, tokenized


def _compute_batches(embedder, sentences, keys, batches, partial, output_format, state, summary, progress,
                     tokenize_ahead: bool, write_behind: bool) -> None:
    """Compute and save every batch of this process that no earlier run finished (the first process into
    `output.hdf5`, the others into their batch files)."""
    files = _BatchFiles(partial)
    finished = {int(path.stem) for path in partial.glob("[0-9]*.hdf5") if BATCH_FILE.fullmatch(path.name)}
    mine = [k for k in range(len(batches)) if k % state.num_processes == state.process_index]
    todo = [k for k in mine if k not in finished]
    if embedder.stateful and todo:  # each batch starts from the state the one before it ended with: every batch
        todo = mine[mine.index(todo[0]) :]  # after one to compute (a damaged file removed) is computed again too
    summary["resumed"] = len(mine) - len(todo)
    if not todo:
        return
    embedder.reset_states()
    if embedder.stateful and todo[0] > 0:  # every batch before todo[0] is finished: start from the last one's state
        with _open_hdf5(files.path(todo[0] - 1)) as handle:
            embedder.states = tuple(
                torch.from_numpy(handle[STATE_GROUP][name][...]).to(embedder.device) for name in ("h", "c")
            )
    done = set(mine).difference(todo)
    output = _PartialOutput(partial / OUTPUT_NAME, keys) if state.is_main_process else None
    bar = tqdm(
        total=sum(len(batches[k]) for k in mine), initial=sum(len(batches[k]) for k in done),
        unit=" sentences", desc="hf-elmo embed", disable=not (progress and state.is_main_process), dynamic_ncols=True,
    )

    def save(k, words, on_host, copied) -> None:
        _save_batch(files.path(k), batches[k], words, on_host, copied, output)
        summary["computed"] += 1
        bar.update(len(batches[k]))

    try:  # (the pinning too: stopped midway, it would leave the caches keeping no new word)
        with bar:
            pin_frequent_words(embedder, sentences)
            with _Writer(write_behind) as writer:
                for k, tokenized in _tokenized_batches(embedder, sentences, batches, todo, tokenize_ahead):
                    layers = embedder.layers_tokenized(tokenized, output_format)
                    carried = [_kept_state(tensor) for tensor in embedder.states] if embedder.stateful else []
                    writer.submit(functools.partial(save, k, tokenized[0], *_copy_to_host([layers, *carried])))
    finally:
        unpin_words(embedder)
        if output is not None:
            output.close()


def _kept_state(state: torch.Tensor) -> torch.Tensor:
    """A carried LSTM state as numbers that give it back exactly: float64 as it is (float32 would round it, and a
    resumed run would differ), every narrower float type as float32 (which holds each of its values)."""
    return state.detach().to(torch.float64 if state.dtype == torch.float64 else torch.float32)


def _copy_to_host(tensors: list[torch.Tensor]) -> tuple[list[torch.Tensor], torch.cuda.Event | None]:
    """`tensors` on the host, and from a CUDA device the event after which they are there: the copies are queued
    into pinned memory behind the batch's kernels, so that this thread goes on to the next batch without waiting for
    them (the next batch's kernels, queued after the copies, cannot overwrite what they copy). From the CPU as they
    are (the model makes new tensors for every batch), from any other device copied at once."""
    if tensors[0].device.type != "cuda":
        return [tensor.cpu() for tensor in tensors], None
    copies = [torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True) for tensor in tensors]
    for copy, tensor in zip(copies, tensors):
        copy.copy_(tensor, non_blocking=True)
    copied = torch.cuda.Event()
    copied.record(torch.cuda.current_stream(tensors[0].device))
    return copies, copied


def _save_batch(path: Path, lines: list[int], words: list[list[str]], on_host: list[torch.Tensor],
                copied: torch.cuda.Event | None, output: _PartialOutput | None) -> None:
    """Save a computed batch, its layers [B, ..., T, 2P] and a stateful run's carried state (h, c): each line into
    `output` (flushed), then the batch file, in one step, with the state; or without `output` (a process other than
    the first) the lines into the batch file too, one dataset each."""
    if copied is not None:
        copied.synchronize()
    layers, *carried = (tensor.numpy() for tensor in on_host)
    arrays = sentence_arrays(layers, words)
    if output is not None:
        output.write(lines, arrays)
        output.sync()

    def write(handle):
        if output is None:
            for line, embedding in zip(lines, arrays):
                handle.create_dataset(str(line), data=embedding)
        else:
            handle.attrs[IN_OUTPUT] = True
        for name, state in zip(("h", "c"), carried):
            handle.create_dataset(f"{STATE_GROUP}/{name}", data=state)

    _write_atomically(path, write)


class _Writer:
    """Runs the batches' writes in order: each at once, or (`behind`) in a thread of its own while the caller goes
    on, at most `WRITES_WAITING` waiting besides the one being written. A write's error is raised in the caller, at
    its next `submit` or on leaving the block, and the writes after it that have not started are dropped. When the
    caller's own error leaves the block, the writes already queued are finished first (their batches are whole)."""

    def __init__(self, behind: bool):
        self.pool = ThreadPoolExecutor(max_workers=1) if behind else None
        self.pending = deque()

    def __enter__(self) -> "_Writer":
        return self

    def submit(self, write) -> None:
        if self.pool is None:
            write()
            return
        while self.pending and (self.pending[0].done() or len(self.pending) > WRITES_WAITING):
            self._finish(self.pending.popleft())
        self.pending.append(self.pool.submit(write))

    def _finish(self, future) -> None:
        try:
            future.result()
        except BaseException:
            for later in self.pending:
                later.cancel()
            raise

    def __exit__(self, kind, error, traceback) -> None:
        if self.pool is None:
            return
        try:
            while kind is None and self.pending:
                self._finish(self.pending.popleft())
        finally:
            self.pool.shutdown(wait=True)


def _write_output(batches, keys, partial, output_file) -> None:
    """Copy the lines of the batches that other processes computed into `output.hdf5` (the first process's are
    there), move it to `output_file` in one step, then remove the batch folder."""
    files = _BatchFiles(partial)
    missing = [k for k in range(len(batches)) if not files.path(k).is_file()]
    if missing:
        raise RuntimeError(f"{partial}: batches {missing[:5]} are missing after every process finished")
    output = _PartialOutput(partial / OUTPUT_NAME, keys)
    try:
        for k, batch in enumerate(batches):
            handle = files[k]
            if not handle.attrs.get(IN_OUTPUT, False):
                output.write(batch, [handle[str(line)][...] for line in batch])
        output.sync()  # (once: the move below must not come before the lines)
    finally:
        output.close()
        files.close()
    os.replace(partial / OUTPUT_NAME, output_file)
    fsync_path(output_file.parent)  # (the move on the disk before the batch files go)
    shutil.rmtree(partial)


def _read_manifest(partial: Path) -> dict | None:
    """The manifest of the run whose batches `partial` holds; None where there is none that reads back whole."""
    try:
        found = json.loads((partial / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError, ValueError):  # (ValueError: not JSON, or not UTF-8)
        return None
    return found if isinstance(found, dict) else None


def _finished_manifest(output_file: Path) -> dict | None:
    try:
        with _open_hdf5(output_file) as handle:
            return json.loads(handle.attrs[MANIFEST_ATTRIBUTE]) if MANIFEST_ATTRIBUTE in handle.attrs else None
    except _NotOpenedError:
        raise  # (a finished output that another program is writing: not computed again behind its back)
    except (OSError, ValueError):
        return None


def _prepare_partial_folder(partial: Path, manifest: dict, sentences: list[str], keys: list[str],
                            shapes: list[tuple[int, ...]], batches: list[list[int]], stateful: bool,
                            sentence_index: bool, progress: bool) -> None:
    """Create the batch folder, or check that the one an interrupted run left is for the same job, and remove
    what that run left unfinished: temporary files, and batch files that do not read back whole; then make
    `output.hdf5`, or check the one that run left (a damaged one is made again, and its batches are computed
    again)."""
    # (checked before the folder is made: a refused run leaves nothing, or what it would resume as it was)
    _check_room(partial, keys, shapes, sentences, sentence_index)
    if partial.exists():
        found = _read_manifest(partial)
        if found is None and any(partial.glob("[0-9]*.hdf5")):
            raise ValueError(
                f"{partial}: holds batch files but no {MANIFEST_NAME} that says which run they belong to; delete the "
                "folder to start again"
            )
        if found is not None and found != manifest:
            differences = sorted(key for key in manifest if found.get(key) != manifest[key])
            if not differences:  # (only keys this version does not write: another version's run)
                raise ValueError(
                    f"{partial}: holds batches of an interrupted run of another version of hf-elmo (its "
                    f"{MANIFEST_NAME} has {', '.join(sorted(set(found) - set(manifest)))}); finish it with that "
                    "version, or delete the folder to start again"
                )
            if differences == ["versions"]:
                earlier = found.get("versions")
                earlier = (f"hf-elmo {earlier.get('hf_elmo')} and torch {earlier.get('torch')}"
                           if isinstance(earlier, dict) else "an earlier version of hf-elmo")
                raise ValueError(
                    f"{partial}: holds batches of an interrupted run with {earlier}, this run has hf-elmo "
                    f"{manifest['versions']['hf_elmo']} and torch {manifest['versions']['torch']}, whose numbers may "
                    "differ in their last bits: finish it with the versions it began with, or delete the folder to "
                    "start again"
                )
            if differences == ["cpu_threads"] and isinstance(found.get("cpu_threads"), int):
                raise ValueError(
                    f"{partial}: holds batches of an interrupted run that computed with {found['cpu_threads']} "
                    f"threads per process, this run with {manifest['cpu_threads']}, whose numbers differ in their "
                    f"last bits: finish it with {found['cpu_threads']} (OMP_NUM_THREADS={found['cpu_threads']}, as "
                    "torchrun sets 1 for several processes), or delete the folder to start again"
                )
            if differences == ["input_sha256"]:  # (that command cannot be run again: its input is gone)
                raise ValueError(
                    f"{partial}: holds batches of an interrupted run on another content of {manifest['input']} (it has "
                    "changed since): restore it to finish that run, or delete the folder to start again"
                )
            raise ValueError(
                f"{partial}: holds batches of an interrupted run with different {', '.join(differences)}; "
                "rerun that command to finish it, or delete the folder to start again"
            )
        for leftover in partial.glob(".*.tmp-*"):  # a file that was being written when the run stopped
            leftover.unlink()
        if found is not None:
            for path in sorted(partial.glob("[0-9]*.hdf5")):
                problem = _batch_file_problem(path, shapes, batches, stateful)
                if problem is not None:
                    logger.warning(f"{path}: {problem}; computing that batch again")
                    path.unlink()
            _prepare_partial_output(partial, manifest, sentences, keys, shapes, sentence_index, progress)
            return
        # (else a run stopped before its manifest was written: it finished no batch, so this run starts afresh)
    else:
        partial.mkdir()
    # The manifest in one step, as the batches are: a run stopped while writing it leaves none, never half of one;
    # and on the disk before it (a power cut would leave batch files that no manifest says are this run's).
    temporary = partial / f".{MANIFEST_NAME}.tmp-{os.getpid()}"
    temporary.write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    fsync_path(temporary)
    os.replace(temporary, partial / MANIFEST_NAME)
    _prepare_partial_output(partial, manifest, sentences, keys, shapes, sentence_index, progress)


def _prepare_partial_output(partial: Path, manifest: dict, sentences: list[str], keys: list[str],
                            shapes: list[tuple[int, ...]], sentence_index: bool, progress: bool) -> None:
    """Keep the `output.hdf5` an interrupted run left if it is whole; else make it (again), and remove the batch
    files that say their lines are in it."""
    output = partial / OUTPUT_NAME
    if output.exists():
        problem = _partial_output_problem(output, keys, shapes, manifest, progress)
        if problem is None:
            return
        logger.warning(f"{output}: {problem}; computing its batches again")
        output.unlink()
    for path in sorted(partial.glob("[0-9]*.hdf5")):
        with _open_hdf5(path) as handle:  # (each read back whole: _batch_file_problem)
            in_output = bool(handle.attrs.get(IN_OUTPUT, False))
        if in_output:
            path.unlink()
    _create_partial_output(output, keys, shapes, sentences, manifest, sentence_index, progress)


def _check_same_job(manifest: dict, input_file: Path) -> None:
    """Every process read its input and its model itself: a file changed while the run started, or another machine's
    copy, gave them other lines, and the first process wrote batches it had not planned (a KeyError's traceback) while
    the others waited. Refused in every process, naming what differs."""
    seen = gather_object([json.dumps(manifest, sort_keys=True)])
    differing = sorted({key for other in map(json.loads, seen) for key in manifest if other.get(key) != manifest[key]})
    if differing:
        raise ValueError(f"{input_file}: the processes of this run read different {', '.join(differing)} (a file "
                         "changed while the run started, or another machine's copy): give every process the same "
                         "input, model and settings")


def _output_bytes(keys: list[str], shapes: list[tuple[int, ...]], sentences: list[str],
                  sentence_index: bool) -> tuple[int, int]:
    """The bytes of the lines' numbers, and about those of the whole `output.hdf5` once they are written (never
    less: HDF5's records of each dataset are counted at a little more than they take)."""
    numbers = 4 * sum(math.prod(shape) for shape in shapes)
    records = FILE_RECORD_BYTES + sum(LINE_RECORD_BYTES + len(key.encode()) for key in keys)
    if sentence_index:
        records += sum(len(sentence.encode()) + len(str(line)) + 8 for line, sentence in enumerate(sentences))
    return numbers, numbers + records


def _check_room(partial: Path, keys: list[str], shapes: list[tuple[int, ...]], sentences: list[str],
                sentence_index: bool) -> None:
    """Refuse, before any batch is computed, an output that cannot be written where it goes: `output.hdf5` is made
    sparse, and takes its whole size as the batches fill it (besides it, the batch files of the processes other
    than the first hold their lines until the end). A disk too small for that, or a limit on the size of a file
    (`ulimit -f`) below it, is said now, not hours later (and HDF5, when it cannot extend a file it makes, can crash
    the process as it exits). A resumed run needs the room that its `output.hdf5` has not taken yet."""
    output_file = partial.with_suffix("")  # (the folder is OUTPUT.partial)
    numbers, size = _output_bytes(keys, shapes, sentences, sentence_index)
    try:  # (the disk's blocks that the file being resumed holds: the lines written so far, and HDF5's records)
        taken = os.stat(partial / OUTPUT_NAME).st_blocks * 512
    except (FileNotFoundError, AttributeError):  # (AttributeError: a system without st_blocks)
        taken = 0
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0] if resource is not None else None
    if limit not in (None, resource.RLIM_INFINITY) and size > limit:
        raise ValueError(f"{output_file}: would be a file of about {_megabytes(size)}, and this process may write "
                         f"files of at most {_megabytes(limit)} (`ulimit -f`)")
    processes = process_state().num_processes
    needed = max(size - taken, 0) + numbers * (processes - 1) // processes
    free = shutil.disk_usage(partial.parent).free
    if needed > free:
        raise ValueError(f"{output_file}: needs about {_megabytes(needed)} on the disk, and {partial.parent} has "
                         f"{_megabytes(free)} free: make room, or write the output elsewhere")


def _megabytes(size: int) -> str:
    return f"{size / 1e6:,.1f} MB"


def _batch_file_problem(path: Path, shapes: list[tuple[int, ...]], batches: list[list[int]],
                        stateful: bool) -> str | None:
    """What is wrong with a finished batch file (None: nothing): it must read back with every line of its batch in
    its shape (or say that they are in output.hdf5), and in a stateful run with the state after it."""
    if not BATCH_FILE.fullmatch(path.name) or int(path.stem) >= len(batches):
        return "is no batch of this run"
    batch = int(path.stem)

    def problem(handle):
        expected = {}
        if not handle.attrs.get(IN_OUTPUT, False):
            expected = {str(line): shapes[line] for line in batches[batch]}
        if stateful:
            expected.update({f"{STATE_GROUP}/h": None, f"{STATE_GROUP}/c": None})
        for name, shape in expected.items():
            if name not in handle:
                return f"has no dataset {name}"
            data = handle[name][...]  # (read whole: a damaged one fails here)
            dtypes = (np.float32,) if shape is not None else (np.float32, np.float64)  # (a state: _kept_state)
            if data.dtype not in dtypes or (shape is not None and data.shape != shape):
                return _not_its_line(name, data)
        return None

    return _file_problem(path, problem)


__all__ = ["check_input_file", "check_paths", "embed_file", "pin_frequent_words", "plan_batches", "read_sentences",
           "unpin_words"]
