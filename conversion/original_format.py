"""The original ELMo weight file (bilm-tf's `dump_weights` HDF5) <-> `ElmoModel` state dict, exactly.

Every mapping is a transpose, a reordering of the LSTM gate blocks, or the padding row of the character
embedding, so converting there and back reproduces every dataset bit for bit. The model is float32: a dataset of
another float type converts only where float32 holds every one of its values (and comes back as float32).
"""

import contextlib
import io
import math
import os

import h5py
import numpy as np
import torch
from tqdm.auto import tqdm

from hf_elmo import ElmoConfig

# TensorFlow's LSTMCell stores the gate blocks as (input, cell, forget, output); torch uses
# (input, forget, cell, output). Swapping blocks 1 and 2 converts either way.
GATE_ORDER = [0, 2, 1, 3]


class ConversionError(ValueError):
    """The original files do not describe a model we can convert; the message says what and where."""


def exact_float32(values: np.ndarray, where: str) -> np.ndarray:
    """`values` as float32, which the model is, only where nothing changes: every value finite, and an array of
    another float type (float64) only if each of its values is a float32 too, as float16's always are. `where`
    ("FILE: dataset NAME") begins the error."""
    if not np.isfinite(values).all():
        count = values.size - np.count_nonzero(np.isfinite(values))
        raise ConversionError(f"{where} holds {count} non-finite value{'s' if count > 1 else ''} (NaN or infinity)")
    with np.errstate(over="ignore"):  # (a value past float32's range becomes inf: refused below, with no warning)
        converted = values.astype(np.float32, copy=False)
    if converted.dtype != values.dtype and not np.array_equal(converted, values):
        raise ConversionError(
            f"{where} has type {values.dtype}, with values that float32 cannot hold exactly: the model is float32, "
            "and a conversion keeps every value"
        )
    return converted


def _lstm_prefix(direction: int, layer: int) -> str:
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"


def expected_datasets(config: ElmoConfig) -> dict[str, tuple[int, ...]]:
    """Every dataset the weight file of a model with this config holds, with its shape."""
    dim, width, proj, cell = config.char_embedding_dim, config.num_char_filters, config.projection_dim, config.cell_size
    shapes = {"char_embed": (config.n_characters - 1, dim)}  # the file has no padding row
    for i, (filter_width, count) in enumerate(config.char_cnn_filters):
        shapes[f"CNN/W_cnn_{i}"] = (1, filter_width, dim, count)
        shapes[f"CNN/b_cnn_{i}"] = (count,)
    for k in range(config.num_highway_layers):
        for part in ("carry", "transform"):
            shapes[f"CNN_high_{k}/W_{part}"] = (width, width)
            shapes[f"CNN_high_{k}/b_{part}"] = (width,)
    if config.has_char_projection:
        shapes["CNN_proj/W_proj"] = (width, proj)
        shapes["CNN_proj/b_proj"] = (proj,)
    for direction in range(2):
        for layer in range(config.num_lstm_layers):
            prefix = _lstm_prefix(direction, layer)
            shapes[f"{prefix}/W_0"] = (2 * proj, 4 * cell)  # rows: [input; recurrent h]
            shapes[f"{prefix}/B"] = (4 * cell,)
            if config.has_lstm_projection:
                shapes[f"{prefix}/W_P_0"] = (cell, proj)
    return shapes


def check_weight_names(path: str, found: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]],
                       kind: str = "dataset", described_by: str = "the options") -> None:
    """One clear error for the first weight of `expected` (name -> shape) missing from `found` (name -> shape),
    or the first of `found` that `expected` does not have; `kind` and `described_by` word the message."""
    missing = [name for name in expected if name not in found]
    if missing:
        raise ConversionError(
            f"{path}: missing {kind} {missing[0]} (expected shape {expected[missing[0]]} from {described_by})"
            + (f", and {len(missing) - 1} more" if len(missing) > 1 else "")
        )
    extra = sorted(set(found) - set(expected))
    if extra:
        raise ConversionError(
            f"{path}: unexpected {kind} {extra[0]} with shape {found[extra[0]]}, a weight not described by {described_by}"
        )


def _reorder_gates(array: np.ndarray) -> np.ndarray:
    """Swap the cell and forget gate blocks along axis 0."""
    blocks = np.split(array, 4, axis=0)
    return np.concatenate([blocks[i] for i in GATE_ORDER], axis=0)


def read_original_weights(weight_file: str | os.PathLike, config: ElmoConfig) -> dict[str, np.ndarray]:
    """Read and check every dataset of `weight_file` against `config`; returns them by HDF5 path."""
    path = os.fspath(weight_file)
    expected = expected_datasets(config)
    if os.path.isdir(path):
        raise ConversionError(f"{path}: is a folder, not a weight file")
    if not os.path.isfile(path):
        raise ConversionError(f"{path}: weight file not found")
    try:
        handle = h5py.File(path, "r")
    except OSError as error:
        raise ConversionError(f"{path}: not an HDF5 weight file ({error})") from None
    with handle:
        found = {}

        def note_dataset(name: str) -> None:
            with _damaged_hdf5(f"{path}: cannot open the HDF5 object {name}"):
                item = handle[name]
                if isinstance(item, h5py.Dataset):
                    found[name] = item.shape

        with _damaged_hdf5(f"{path}: cannot list the datasets of this HDF5 file"):
            handle.visit(note_dataset)
        check_weight_names(path, found, expected)
        arrays = {}
        total = sum(math.prod(found[name] or ()) * 4 for name in expected)  # (an empty dataset's shape is None)
        with tqdm(total=total, unit="B", unit_scale=True, desc="reading weights", disable=total < 50_000_000) as bar:
            for name, shape in expected.items():
                with _damaged_hdf5(f"{path}: cannot read dataset {name}"):
                    dataset = handle[name]
                    dtype = dataset.dtype  # (h5py makes it from the file's datatype message, which may be damaged)
                if dataset.shape != shape:
                    raise ConversionError(
                        f"{path}: dataset {name} has shape {dataset.shape}, expected {shape} from the options"
                    )
                if not np.issubdtype(dtype, np.floating):
                    raise ConversionError(f"{path}: dataset {name} has type {dtype}, expected float32")
                # a damaged chunk, a filter h5py does not have: h5py names neither the file nor the dataset
                try:
                    with _damaged_hdf5(f"{path}: cannot read dataset {name}", damaged=False):
                        values = dataset[...]
                except ConversionError as error:
                    if lacking := _filters_h5py_lacks(dataset):  # (h5py says only that a plugin folder is missing)
                        raise ConversionError(f"{error}: it is stored with the HDF5 filter {', '.join(lacking)}, which "
                                              "this h5py cannot decode: install that filter's plugin (the hdf5plugin "
                                              "package has the common ones), or write the file without it") from None
                    raise
                arrays[name] = exact_float32(values, f"{path}: dataset {name}")
                bar.update(dataset.size * 4)
    return arrays


def _filters_h5py_lacks(dataset: h5py.Dataset) -> list[str]:
    """The filters of a chunked dataset's pipeline that this h5py has no decoder for, as "ID (name)"."""
    try:
        plist = dataset.id.get_create_plist()
        filters = [plist.get_filter(index) for index in range(plist.get_nfilters())]
    except Exception:  # noqa: BLE001 - a header h5py cannot read: the error already raised says so
        return []
    return [f"{code} ({name.decode('utf-8', 'replace')})" for code, _, _, name in filters
            if not h5py.h5z.filter_avail(code)]


@contextlib.contextmanager
def _damaged_hdf5(what: str, damaged: bool = True):
    """h5py's errors for a damaged file (a bad disk or copy: an object header, a group's index, a chunk) as one
    ConversionError beginning with `what` ("FILE: cannot ..."): h5py raises RuntimeError, KeyError, ValueError or
    OSError, naming neither the file nor the dataset. `damaged`: say that the file is (where the error cannot
    also be a filter that h5py lacks)."""
    try:
        yield
    except ConversionError:
        raise
    except Exception as error:  # noqa: BLE001 - whatever h5py raises for bytes it cannot make sense of
        reason = str(error).strip().strip("'\"").splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConversionError(f"{what} ({reason})" + (": the file is damaged" if damaged else "")) from None


def original_to_state_dict(arrays: dict[str, np.ndarray], config: ElmoConfig) -> dict[str, torch.Tensor]:
    """Original datasets -> `ElmoModel` parameters (the scalar mixes start as a plain average)."""
    state = {}
    char_embed = arrays["char_embed"]
    # Inference shifts every character id by one and puts an all-zero padding row at id 0.
    padding_row = np.zeros((1, char_embed.shape[1]), dtype=np.float32)
    state["char_encoder.char_embedding.weight"] = np.concatenate([padding_row, char_embed])
    for i in range(len(config.char_cnn_filters)):
        # TF conv kernel [1, width, in, out] -> torch Conv1d [out, in, width]
        state[f"char_encoder.char_cnn.{i}.weight"] = arrays[f"CNN/W_cnn_{i}"][0].transpose(2, 1, 0)
        state[f"char_encoder.char_cnn.{i}.bias"] = arrays[f"CNN/b_cnn_{i}"]
    for k in range(config.num_highway_layers):
        for part in ("carry", "transform"):
            state[f"char_encoder.highway.{k}.{part}.weight"] = arrays[f"CNN_high_{k}/W_{part}"].T
            state[f"char_encoder.highway.{k}.{part}.bias"] = arrays[f"CNN_high_{k}/b_{part}"]
    if config.has_char_projection:
        state["char_encoder.projection.weight"] = arrays["CNN_proj/W_proj"].T
        state["char_encoder.projection.bias"] = arrays["CNN_proj/b_proj"]
    proj = config.projection_dim
    for layer in range(config.num_lstm_layers):
        per_direction = {"input_weight": [], "recurrent_weight": [], "bias": [], "projection_weight": []}
        for direction in range(2):
            prefix = _lstm_prefix(direction, layer)
            kernel = arrays[f"{prefix}/W_0"].T  # [4C, 2P]
            per_direction["input_weight"].append(_reorder_gates(kernel[:, :proj]))
            per_direction["recurrent_weight"].append(_reorder_gates(kernel[:, proj:]))
            per_direction["bias"].append(_reorder_gates(arrays[f"{prefix}/B"]))
            if config.has_lstm_projection:
                per_direction["projection_weight"].append(arrays[f"{prefix}/W_P_0"].T)
        for name, values in per_direction.items():
            if values:
                state[f"layers.{layer}.{name}"] = np.stack(values)
    for k in range(config.num_output_representations):
        state[f"scalar_mixes.{k}.scalar_parameters"] = np.zeros(config.num_lstm_layers + 1, dtype=np.float32)
        state[f"scalar_mixes.{k}.gamma"] = np.ones(1, dtype=np.float32)
    return {name: torch.from_numpy(np.ascontiguousarray(value)) for name, value in state.items()}


def state_dict_to_original(state: dict[str, torch.Tensor], config: ElmoConfig) -> dict[str, np.ndarray]:
    """`ElmoModel` parameters -> the original datasets (the inverse of `original_to_state_dict`)."""

    def array(name: str) -> np.ndarray:
        return state[name].detach().to("cpu", torch.float32).numpy()

    arrays = {"char_embed": array("char_encoder.char_embedding.weight")[1:]}
    for i in range(len(config.char_cnn_filters)):
        arrays[f"CNN/W_cnn_{i}"] = array(f"char_encoder.char_cnn.{i}.weight").transpose(2, 1, 0)[None]
        arrays[f"CNN/b_cnn_{i}"] = array(f"char_encoder.char_cnn.{i}.bias")
    for k in range(config.num_highway_layers):
        for part in ("carry", "transform"):
            arrays[f"CNN_high_{k}/W_{part}"] = array(f"char_encoder.highway.{k}.{part}.weight").T
            arrays[f"CNN_high_{k}/b_{part}"] = array(f"char_encoder.highway.{k}.{part}.bias")
    if config.has_char_projection:
        arrays["CNN_proj/W_proj"] = array("char_encoder.projection.weight").T
        arrays["CNN_proj/b_proj"] = array("char_encoder.projection.bias")
    for layer in range(config.num_lstm_layers):
        for direction in range(2):
            prefix = _lstm_prefix(direction, layer)
            input_weight = _reorder_gates(array(f"layers.{layer}.input_weight")[direction])
            recurrent_weight = _reorder_gates(array(f"layers.{layer}.recurrent_weight")[direction])
            arrays[f"{prefix}/W_0"] = np.concatenate([input_weight, recurrent_weight], axis=1).T
            arrays[f"{prefix}/B"] = _reorder_gates(array(f"layers.{layer}.bias")[direction])
            if config.has_lstm_projection:
                arrays[f"{prefix}/W_P_0"] = array(f"layers.{layer}.projection_weight")[direction].T
    return {name: np.ascontiguousarray(value) for name, value in arrays.items()}


def write_original_weights(arrays: dict[str, np.ndarray], weight_file: str | os.PathLike) -> None:
    """Write datasets the way bilm-tf's `dump_weights` does: float32, no attributes. A write that fails (a full disk)
    raises OSError: the file is made in memory and written by Python, since h5py writing to a full disk crashed the
    process when it closed the file."""
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as handle:
        for name, value in arrays.items():
            handle.create_dataset(name, data=value.astype(np.float32, copy=False))
    with open(weight_file, "wb") as file:
        file.write(buffer.getbuffer())
