"""`hf-elmo embed`: one sentence per line in, the HDF5 file of `allennlp elmo` out; resumable and multi-process.

Layout of the output (what `allennlp elmo` wrote, so that existing readers work unchanged):
    "0", "1", ...           one float32 dataset per input line, keyed by its line number (0-based), or by the
                            sentence itself with `use_sentence_keys`: [L + 1, words, 2P] for "all", [words, 2P]
                            for "top", "average" and "mix". A blank line gives a dataset with 0 words.
    "sentence_to_index"     shape (1,), a JSON string {sentence: "line number"}; left out with `forget_sentences`
                            or `use_sentence_keys`.

How the work is kept: each batch is written, as soon as it is computed, to its own small HDF5 file in
`OUTPUT.partial/` (atomically: a killed run leaves whole batches or nothing). A run finds the batches that an
earlier, interrupted run finished and computes only the others; when all are there, they are copied in line order
into OUTPUT (again atomically) and the folder is removed. Under `accelerate launch` or `torchrun`, batch k goes to
process k mod N, and the first process writes the output file.
"""

import hashlib
import json
import os
import shutil
import time
from collections import OrderedDict
from pathlib import Path

import h5py
import numpy as np
import torch
from accelerate import PartialState
from accelerate.utils import parse_flag_from_env
from tqdm.auto import tqdm

from .embedder import OUTPUT_FORMATS, ElmoEmbedder, length_sorted_batches

MANIFEST_NAME = "manifest.json"
STATE_GROUP = "_state"  # in a stateful run's batch files: the LSTM state after the batch
MANIFEST_ATTRIBUTE = "hf_elmo_embed"  # on a finished output file: the manifest of the run that wrote it


def process_state() -> PartialState:
    """This process's place among those that `accelerate launch` or `torchrun` started (one, run alone).

    Accelerate forms a group of CPU processes only when told to (`ACCELERATE_USE_CPU=1`); on a machine without
    CUDA there is no other kind, so it is asked for there too.
    """
    return PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU") or not torch.cuda.is_available())


def read_sentences(path: str | os.PathLike) -> list[str]:
    """The lines of a UTF-8 text file, stripped of surrounding whitespace (`\\n`, `\\r\\n` and `\\r` end lines)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ValueError(f"{path}: input file not found") from None
    except IsADirectoryError:
        raise ValueError(f"{path}: is a folder, not a text file") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ValueError(f"{path}: line {line} is not UTF-8 text ({error.reason} at byte {error.start})") from None
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines[-1] == "":  # the newline that ends the last line does not start another
        lines.pop()
    return [line.strip() for line in lines]


def plan_batches(sentences: list[str], batch_size: int, stateful: bool) -> list[list[int]]:
    """
    The line numbers of each batch. Stateful: consecutive lines, as the original ran them. Stateless: lines of
    similar length together, and blank lines in no batch (they need no model).
    """
    if stateful:
        return [list(range(start, min(start + batch_size, len(sentences)))) for start in range(0, len(sentences), batch_size)]
    lines = [i for i, sentence in enumerate(sentences) if sentence]
    return [[lines[j] for j in batch] for batch in length_sorted_batches([len(sentences[i].split()) for i in lines], batch_size)]


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _model_fingerprint(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _check_sentence_keys(sentences: list[str], input_file) -> None:
    seen = {}
    for line, sentence in enumerate(sentences):
        if sentence in ("", ".") or "/" in sentence:
            raise ValueError(
                f"{input_file}: line {line} ({sentence!r}) cannot be an HDF5 key: with --use-sentence-keys no line may "
                "be blank, '.' or contain '/'"
            )
        if sentence in seen:
            raise ValueError(
                f"{input_file}: lines {seen[sentence]} and {line} are the same sentence, which --use-sentence-keys "
                "cannot store twice; leave out --use-sentence-keys to key by line number"
            )
        seen[sentence] = line


def _write_atomically(path: Path, write) -> None:
    """Run `write(h5py.File)` on a temporary file beside `path`, then move it to `path` in one step."""
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with h5py.File(temporary, "w", track_order=True) as handle:
            write(handle)
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()


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
            self.open[batch] = h5py.File(self.path(batch), "r")
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
) -> dict:
    """
    Embed every line of `input_file` (whitespace-separated words) into `output_file` (layout in the module
    docstring). Stateless or stateful as `embedder` is; stateful runs go through the file in order, `batch_size`
    lines at a time, row r carrying its state to row r of the next batch, as `allennlp elmo` did.

    Returns a summary: `sentences`, `batches`, `computed` (batches this process computed), `resumed` (batches an
    earlier run had finished), `seconds`, `output`.
    """
    started = time.perf_counter()
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"output_format must be one of {', '.join(OUTPUT_FORMATS)}, got {output_format!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    state = process_state()
    if embedder.stateful and state.num_processes > 1:
        raise ValueError(
            "--stateful carries the LSTM state through the file in order, so it cannot be split across "
            f"{state.num_processes} processes: run it in a single process"
        )
    input_file, output_file = Path(input_file), Path(output_file)
    sentences = read_sentences(input_file)
    if use_sentence_keys:
        _check_sentence_keys(sentences, input_file)
    manifest = {
        "input": str(input_file.resolve()),
        "input_sha256": _sha256_file(input_file),
        "model": embedder.model_name_or_path,
        "model_sha256": _model_fingerprint(embedder.model),
        "output_format": output_format,
        "batch_size": batch_size,
        "stateful": embedder.stateful,
        "use_sentence_keys": use_sentence_keys,
        "forget_sentences": forget_sentences,
    }
    batches = plan_batches(sentences, batch_size, embedder.stateful)
    summary = {"sentences": len(sentences), "batches": len(batches), "computed": 0, "resumed": 0, "output": str(output_file)}
    partial = output_file.with_name(output_file.name + ".partial")
    if output_file.is_file() and not partial.exists() and _finished_manifest(output_file) == manifest:
        summary.update(resumed=len(batches), seconds=time.perf_counter() - started)
        return summary  # an earlier run wrote exactly this

    if state.is_main_process:
        _prepare_partial_folder(partial, manifest)
    state.wait_for_everyone()
    if _read_manifest(partial) != manifest:
        raise ValueError(f"{partial}: was started by a run with other options or input")
    files = _BatchFiles(partial)
    finished = {int(path.stem) for path in partial.glob("[0-9]*.hdf5")}
    mine = [k for k in range(len(batches)) if k % state.num_processes == state.process_index]
    todo = [k for k in mine if k not in finished]
    summary["resumed"] = len(mine) - len(todo)
    if embedder.stateful:
        embedder.reset_states()
        if todo and todo[0] > 0:  # stateful batches finish in order: continue from the last one's state
            with h5py.File(files.path(todo[0] - 1), "r") as handle:
                embedder.states = tuple(
                    torch.from_numpy(handle[STATE_GROUP][name][...]).to(embedder.device) for name in ("h", "c")
                )

    bar = tqdm(
        total=sum(len(batches[k]) for k in mine), initial=sum(len(batches[k]) for k in mine if k in finished),
        unit=" sentences", desc="hf-elmo embed", disable=not (progress and state.is_main_process), dynamic_ncols=True,
    )
    with bar:
        for k in todo:
            embeddings = embedder.embed_batch([sentences[line] for line in batches[k]], output_format)

            def write_batch(handle, k=k, embeddings=embeddings):
                for line, embedding in zip(batches[k], embeddings):
                    handle.create_dataset(str(line), data=embedding)
                if embedder.stateful:
                    handle.create_dataset(f"{STATE_GROUP}/h", data=embedder.states[0].float().cpu().numpy())
                    handle.create_dataset(f"{STATE_GROUP}/c", data=embedder.states[1].float().cpu().numpy())

            _write_atomically(files.path(k), write_batch)
            summary["computed"] += 1
            bar.update(len(batches[k]))

    state.wait_for_everyone()
    if state.is_main_process:
        missing = [k for k in range(len(batches)) if not files.path(k).is_file()]
        if missing:
            raise RuntimeError(f"{partial}: batches {missing[:5]} are missing after every process finished")
        line_batch = {line: k for k, batch in enumerate(batches) for line in batch}
        empty = embedder.empty_embedding(output_format)

        def write_output(handle):
            handle.attrs[MANIFEST_ATTRIBUTE] = json.dumps(manifest)
            for line, sentence in enumerate(sentences):
                key = sentence if use_sentence_keys else str(line)
                data = files[line_batch[line]][str(line)][...] if line in line_batch else empty
                handle.create_dataset(key, data=data)
            if not (use_sentence_keys or forget_sentences):
                index = handle.create_dataset("sentence_to_index", (1,), dtype=h5py.string_dtype())
                index[0] = json.dumps({sentence: str(line) for line, sentence in enumerate(sentences)})

        output_file.parent.mkdir(parents=True, exist_ok=True)
        try:
            _write_atomically(output_file, write_output)
        finally:
            files.close()
        shutil.rmtree(partial)
    state.wait_for_everyone()
    summary["seconds"] = time.perf_counter() - started
    return summary


def _read_manifest(partial: Path) -> dict | None:
    try:
        return json.loads((partial / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _finished_manifest(output_file: Path) -> dict | None:
    try:
        with h5py.File(output_file, "r") as handle:
            return json.loads(handle.attrs[MANIFEST_ATTRIBUTE]) if MANIFEST_ATTRIBUTE in handle.attrs else None
    except (OSError, ValueError):
        return None


def _prepare_partial_folder(partial: Path, manifest: dict) -> None:
    """Create the batch folder, or check that the one an interrupted run left is for the same job."""
    if partial.exists():
        found = _read_manifest(partial)
        if found != manifest:
            differences = sorted(key for key in manifest if found is None or found.get(key) != manifest[key])
            raise ValueError(
                f"{partial}: holds batches of an interrupted run with different {', '.join(differences)}; "
                "rerun that command to finish it, or delete the folder to start again"
            )
        for leftover in partial.glob(".*.tmp-*"):  # a batch that was being written when the run stopped
            leftover.unlink()
        return
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.mkdir()
    (partial / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1), encoding="utf-8")


__all__ = ["embed_file", "plan_batches", "read_sentences"]
