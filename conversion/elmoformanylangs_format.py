"""ELMoForManyLangs' model folder (HIT-SCIR, PyPI `elmoformanylangs`) <-> `ElmoModel` state dict, exactly.

A model folder of the package holds:

    config.json            its training options; `config_path` names the architecture file
    <architecture>.json    `encoder` (AllenNLP's LSTM with projection, cell and projection clip, a residual around
                           every layer but the first), `token_embedder` (`cnn`: an optional word embedding, a char
                           CNN, highway layers in AllenNLP's form, a projection that is always there)
    char.dic, word.dic     `token<TAB>id` (read by `hf_elmo.lexicon`)
    token_embedder.pkl     torch state dicts, loaded here with `torch.load(..., weights_only=True)`: tensors only,
    encoder.pkl            never any other pickled object

The released models' config.json names `cnn_50_100_512_4096_sample.json`, a file of the package (its `configs/`
folder), not of the model folder; that architecture is known here. Every mapping is a copy, a split of the highway
weights, a negation, or the padding row of the character embedding, so converting there and back gives every tensor
bit for bit. The model is float32: a tensor of another float type converts only where float32 holds every one of its
values (and comes back as float32).
"""

import json
import os
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

from hf_elmo import ElmoConfig, ElmoTokenizer
from hf_elmo.configuration_elmo import (
    REQUIRED,
    VALUE_RULES,
    check_type,
    check_value,
    in_option_names,
    warn_of_misspelt_options,
)
from hf_elmo.lexicon import LexiconError

from conversion.original_format import ConversionError, check_weight_names, exact_float32

# The architecture of every released model: the package's configs/cnn_50_100_512_4096_sample.json (and its
# cnn_0_100_512_4096_sample.json, identical in elmoformanylangs 0.0.4.post2, compared file to file), for folders whose
# config.json names that file of the package.
PACKAGE_ARCHITECTURES = {
    name: {
        "encoder": {"name": "elmo", "projection_dim": 512, "cell_clip": 3, "proj_clip": 3, "dim": 4096, "n_layers": 2},
        "token_embedder": {
            "name": "cnn", "activation": "relu",
            "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
            "n_highway": 2, "word_dim": 100, "char_dim": 50, "max_characters_per_token": 50,
        },
        "classifier": {"name": "sampled_softmax", "n_samples": 8192},
        "dropout": 0.1,
    }
    for name in ("cnn_50_100_512_4096_sample.json", "cnn_0_100_512_4096_sample.json")
}
WEIGHT_FILES = ("token_embedder.pkl", "encoder.pkl")


def _read_json(path: Path, what: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            content = json.load(f)
    except FileNotFoundError:
        raise ConversionError(f"{path}: {what} not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConversionError(f"{path}: not a JSON {what} ({error})") from None
    if not isinstance(content, dict):
        raise ConversionError(f"{path}: a {what} must be a JSON object")
    return content


def read_architecture(model_dir: str | os.PathLike) -> tuple[dict, str]:
    """The architecture json that config.json names, found where the package looks for it (the path as given,
    relative to the folder, the file's name in the folder, the package's own configs); and where it came from."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ConversionError(f"{model_dir}: is a file, not a model folder" if model_dir.exists()
                              else f"{model_dir}: model folder not found")
    options = _read_json(model_dir / "config.json", "ELMoForManyLangs config.json")
    config_path = options.get("config_path")
    if not isinstance(config_path, str) or not config_path:
        hint = (": it is a Hugging Face checkpoint's; convert it back with --to-elmoformanylangs"
                if options.get("model_type") == "elmo" else "")
        raise ConversionError(f"{model_dir / 'config.json'}: no 'config_path' naming the architecture json{hint}")
    for candidate in (model_dir / config_path, model_dir / Path(config_path).name):
        if candidate.is_file():
            return _read_json(candidate, "architecture json"), str(candidate)
    name = Path(config_path).name
    if name in PACKAGE_ARCHITECTURES:
        return json.loads(json.dumps(PACKAGE_ARCHITECTURES[name])), f"elmoformanylangs/configs/{name}"
    raise ConversionError(
        f"{model_dir / 'config.json'}: its config_path {config_path!r} is neither in the folder nor one of the "
        f"package's configs ({', '.join(PACKAGE_ARCHITECTURES)})"
    )


# Where the architecture json keeps each ElmoConfig field, and the value a missing or null option means (the
# package reads word_dim, cell_clip and proj_clip with defaults); REQUIRED ones must be there.
ARCHITECTURE_OPTIONS = {
    "word_embedding_dim": (("token_embedder", "word_dim"), 0),
    "char_embedding_dim": (("token_embedder", "char_dim"), REQUIRED),
    "char_cnn_filters": (("token_embedder", "filters"), REQUIRED),
    "num_highway_layers": (("token_embedder", "n_highway"), REQUIRED),
    "char_cnn_activation": (("token_embedder", "activation"), "relu"),
    "max_characters_per_token": (("token_embedder", "max_characters_per_token"), REQUIRED),
    "cell_size": (("encoder", "dim"), REQUIRED),
    "projection_dim": (("encoder", "projection_dim"), REQUIRED),
    "num_lstm_layers": (("encoder", "n_layers"), REQUIRED),
    "cell_clip": (("encoder", "cell_clip"), None),
    "proj_clip": (("encoder", "proj_clip"), None),
}
# The only encoder and token embedder that convert (the package also has "lstm" ones).
ARCHITECTURE_NAMES = {"encoder": ("elmo", "ELMo's biLM"), "token_embedder": ("cnn", "the char CNN")}


def architecture_options(architecture: dict, source: str) -> dict[str, Any]:
    """The ElmoConfig fields that the architecture json gives, every option type- and value-checked, with an error
    naming `source` (the file) and the option."""
    for section, (name, meaning) in ARCHITECTURE_NAMES.items():
        if not isinstance(architecture.get(section), dict):
            raise ConversionError(f"{source}: no '{section}' section")
        found = architecture[section].get("name")
        if not isinstance(found, str) or found.lower() != name:
            raise ConversionError(
                f"{source}: {section} {found!r} is not {meaning} ({name!r}); only ELMo models with a char CNN convert"
            )
    if architecture["token_embedder"].get("char_dim") == 0:
        raise ConversionError(
            f"{source}: token_embedder.char_dim is 0 (words only); only models that read characters convert"
        )
    names = [(section, "name") for section in ARCHITECTURE_NAMES]
    warn_of_misspelt_options(architecture, [path for path, _ in ARCHITECTURE_OPTIONS.values()] + names, source)
    options = {}
    for field, ((section, key), default) in ARCHITECTURE_OPTIONS.items():
        option = f"{section}.{key}"
        value = architecture[section].get(key)
        if value is None:
            if default is REQUIRED:
                raise ConversionError(f"{source}: missing option '{option}'")
            value = default
        try:
            check_type(f"{source}: option '{option}'", value, ElmoConfig.__annotations__[field])
            check_value(f"{source}: option '{option}'", value, *VALUE_RULES[field])
        except ValueError as error:
            raise ConversionError(str(error)) from None
        options[field] = value
    return options


def config_from_options(options: dict[str, Any], tokenizer: ElmoTokenizer, source: str, **kwargs) -> ElmoConfig:
    """The ElmoConfig of a model with these `architecture_options`, spelled by `tokenizer` (its char.dic and
    word.dic)."""
    try:
        return ElmoConfig(
            **tokenizer.lexicon.config_options(word_input=options["word_embedding_dim"] > 0),
            **options,
            use_skip_connections=True,  # ElmobiLm adds every layer's input to its output but the first's
            forget_bias=0.0,  # AllenNLP's cell: the stored bias already includes bilm-tf's +1
            always_project=True,  # the token projection and the cell projection are always built
            **kwargs,
        )
    except ValueError as error:  # what only the options together contradict
        option_names = {field: ".".join(path) for field, (path, _) in ARCHITECTURE_OPTIONS.items()}
        raise ConversionError(f"{source}: {in_option_names(str(error), option_names)}") from None


def architecture_from_config(config: ElmoConfig) -> dict[str, Any]:
    """The architecture json the package reads for a model with this config."""
    return {
        "encoder": {
            "name": "elmo",
            "projection_dim": config.projection_dim,
            "cell_clip": config.cell_clip or 0,
            "proj_clip": config.proj_clip or 0,
            "dim": config.cell_size,
            "n_layers": config.num_lstm_layers,
        },
        "token_embedder": {
            "name": "cnn",
            "activation": config.char_cnn_activation,
            "filters": [list(f) for f in config.char_cnn_filters],
            "n_highway": config.num_highway_layers,
            "word_dim": config.word_embedding_dim,
            "char_dim": config.char_embedding_dim,
            "max_characters_per_token": config.max_characters_per_token,
        },
        "classifier": {"name": "sampled_softmax", "n_samples": 8192},
        "dropout": 0.0,
    }


def check_convertible(config: ElmoConfig) -> None:
    """The package can express this model: its alphabet, the +1 in the stored forget bias, its projections."""
    if config.alphabet != "vocabulary" or config.forget_bias != 0.0:
        raise ConversionError(
            "this model is in bilm-tf's form (UTF-8 bytes, forget bias +1 at run time): convert it with "
            "conversion/convert_original_elmo.py --to-original"
        )
    if not (config.has_char_projection and config.has_lstm_projection):  # (always_project false, equal widths)
        raise ConversionError("ELMoForManyLangs always projects the token vector and each biLSTM layer's cells; this "
                              "model leaves a projection out (always_project is false and the widths are equal)")
    if not config.use_skip_connections:
        raise ConversionError("ELMoForManyLangs' biLM always has skip connections; this model has none")


def expected_tensors(config: ElmoConfig, num_chars: int) -> dict[str, dict[str, tuple[int, ...]]]:
    """Every tensor of token_embedder.pkl and encoder.pkl for this config, with its shape (`num_chars`: char.dic's
    entries, the package's rows)."""
    filters, proj, cell = config.num_char_filters, config.projection_dim, config.cell_size
    embedder = {"char_emb_layer.embedding.weight": (num_chars, config.char_embedding_dim)}
    if config.word_vocab_size:
        embedder["word_emb_layer.embedding.weight"] = (config.word_vocab_size, config.word_embedding_dim)
    for i, (width, count) in enumerate(config.char_cnn_filters):
        embedder[f"convolutions.{i}.weight"] = (count, config.char_embedding_dim, width)
        embedder[f"convolutions.{i}.bias"] = (count,)
    for k in range(config.num_highway_layers):
        embedder[f"highways._layers.{k}.weight"] = (2 * filters, filters)  # [nonlinear part; gate]
        embedder[f"highways._layers.{k}.bias"] = (2 * filters,)
    embedder["projection.weight"] = (proj, config.word_embedding_dim + filters)
    embedder["projection.bias"] = (proj,)
    encoder = {}
    for layer in range(config.num_lstm_layers):
        for direction in ("forward", "backward"):
            prefix = f"{direction}_layer_{layer}"
            encoder[f"{prefix}.input_linearity.weight"] = (4 * cell, proj)
            encoder[f"{prefix}.state_linearity.weight"] = (4 * cell, proj)
            encoder[f"{prefix}.state_linearity.bias"] = (4 * cell,)
            encoder[f"{prefix}.state_projection.weight"] = (proj, cell)
    return {"token_embedder.pkl": embedder, "encoder.pkl": encoder}


def _load_failure(error: Exception) -> str:
    """Why torch.load(weights_only=True) refused a file, in one line: for a pickled object other than tensors (a
    whole module), what it is, not torch's advice on loading it anyway (which never applies here) with its terminal
    escape codes."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))
    found = re.search(r"WeightsUnpickler error: (Unsupported global: GLOBAL (\S+))", text)
    if found:
        return f"it holds a pickled {found.group(2)}, which is never unpickled; only tensors are read"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


def read_weights(model_dir: str | os.PathLike, config: ElmoConfig, num_chars: int) -> dict[str, dict[str, torch.Tensor]]:
    """Both state dicts, every tensor checked against `config`: {file name: {tensor name: tensor}}."""
    tensors = {}
    for file_name, expected in expected_tensors(config, num_chars).items():
        path = Path(model_dir) / file_name
        if not path.is_file():
            raise ConversionError(f"{path}: weight file not found")
        _check_zip_entries(path)
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # noqa: BLE001 - an unpickling error of any kind: name the file
            raise ConversionError(f"{path}: not a torch state dict of tensors ({_load_failure(error)})") from None
        if not isinstance(state, dict) or not all(
            isinstance(name, str) and isinstance(value, torch.Tensor) for name, value in state.items()
        ):
            raise ConversionError(f"{path}: not a state dict (a mapping of tensor names to tensors)")
        check_weight_names(str(path), {name: tuple(value.shape) for name, value in state.items()}, expected,
                           kind="tensor", described_by="the architecture")
        for name, shape in expected.items():
            if tuple(state[name].shape) != shape:
                raise ConversionError(
                    f"{path}: tensor {name} has shape {tuple(state[name].shape)}, expected {shape} from the "
                    "architecture and the dictionaries"
                )
            if not state[name].is_floating_point():
                raise ConversionError(f"{path}: tensor {name} has type {state[name].dtype}, expected float32")
            if state[name].layout != torch.strided:
                raise ConversionError(f"{path}: tensor {name} is a {state[name].layout} tensor, expected a dense one")
            if state[name].device.type != "cpu":  # torch.load maps every tensor with values to the CPU
                raise ConversionError(f"{path}: tensor {name} holds no values (a {state[name].device.type} tensor)")
        tensors[file_name] = {name: _exact_float32(state[name], f"{path}: tensor {name}") for name in expected}
    return tensors


def _check_zip_entries(path: Path) -> None:
    """torch's zip format (torch.save since 1.6) keeps a CRC-32 of every entry, which torch.load does not check: a
    file damaged inside its tensors' bytes loaded, and converted. (The older format keeps none to check.)"""
    if not zipfile.is_zipfile(path):
        return
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except Exception as error:  # noqa: BLE001 - also an unknown compression method, an encrypted entry: name the file
        reason = f"{type(error).__name__}: {error}"
        raise ConversionError(f"{path}: damaged: its zip archive does not read ({reason})") from None
    if damaged is not None:
        raise ConversionError(f"{path}: damaged: its entry {damaged} fails its CRC-32 check")


def _exact_float32(tensor: torch.Tensor, where: str) -> torch.Tensor:
    """`exact_float32` for a tensor (numpy has no bfloat16 or float8, whose values float32 holds exactly anyway).
    A parameter saved as one (`state_dict(keep_vars=True)`, requiring grad) is read as its values."""
    tensor = tensor.detach()
    values = (tensor.float() if tensor.dtype.itemsize < 2 or tensor.dtype == torch.bfloat16 else tensor).numpy()
    return torch.from_numpy(exact_float32(values, where))


def package_to_state_dict(tensors: dict[str, dict[str, torch.Tensor]], config: ElmoConfig) -> dict[str, torch.Tensor]:
    """The package's tensors -> `ElmoModel` parameters (the scalar mixes start as a plain average)."""
    embedder, encoder = tensors["token_embedder.pkl"], tensors["encoder.pkl"]
    chars = embedder["char_emb_layer.embedding.weight"]
    # Every character id is the package's + 1: row 0 is the all-zero padding word's.
    state = {"char_encoder.char_embedding.weight": torch.cat([chars.new_zeros(1, chars.shape[1]), chars])}
    if config.word_vocab_size:
        state["char_encoder.word_embedding.weight"] = embedder["word_emb_layer.embedding.weight"]
    for i in range(len(config.char_cnn_filters)):
        state[f"char_encoder.char_cnn.{i}.weight"] = embedder[f"convolutions.{i}.weight"]
        state[f"char_encoder.char_cnn.{i}.bias"] = embedder[f"convolutions.{i}.bias"]
    for k in range(config.num_highway_layers):
        # AllenNLP's highway: y = g x + (1 - g) relu(A x), g = sigmoid(B x), A and B stacked in one Linear. Ours is
        # y = t relu(A x) + (1 - t) x with t = sigmoid(-B x) = 1 - g: the carry gate is B negated.
        nonlinear, gate = embedder[f"highways._layers.{k}.weight"].chunk(2)
        nonlinear_bias, gate_bias = embedder[f"highways._layers.{k}.bias"].chunk(2)
        state[f"char_encoder.highway.{k}.transform.weight"] = nonlinear
        state[f"char_encoder.highway.{k}.transform.bias"] = nonlinear_bias
        state[f"char_encoder.highway.{k}.carry.weight"] = -gate
        state[f"char_encoder.highway.{k}.carry.bias"] = -gate_bias
    state["char_encoder.projection.weight"] = embedder["projection.weight"]
    state["char_encoder.projection.bias"] = embedder["projection.bias"]
    names = {"input_weight": "input_linearity.weight", "recurrent_weight": "state_linearity.weight",
             "bias": "state_linearity.bias", "projection_weight": "state_projection.weight"}
    for layer in range(config.num_lstm_layers):
        for ours, theirs in names.items():
            # Gates in torch's order (input, forget, cell, output), as AllenNLP's cell has them.
            state[f"layers.{layer}.{ours}"] = torch.stack(
                [encoder[f"{direction}_layer_{layer}.{theirs}"] for direction in ("forward", "backward")]
            )
    for k in range(config.num_output_representations):
        state[f"scalar_mixes.{k}.scalar_parameters"] = torch.zeros(config.num_lstm_layers + 1)
        state[f"scalar_mixes.{k}.gamma"] = torch.ones(1)
    return {name: tensor.contiguous() for name, tensor in state.items()}


def state_dict_to_package(state: dict[str, torch.Tensor], config: ElmoConfig) -> dict[str, dict[str, torch.Tensor]]:
    """`ElmoModel` parameters -> the package's tensors (the inverse of `package_to_state_dict`)."""

    def tensor(name: str) -> torch.Tensor:
        return state[name].detach().to("cpu", torch.float32)

    embedder = {}
    if config.word_vocab_size:
        embedder["word_emb_layer.embedding.weight"] = tensor("char_encoder.word_embedding.weight")
    embedder["char_emb_layer.embedding.weight"] = tensor("char_encoder.char_embedding.weight")[1:]
    for i in range(len(config.char_cnn_filters)):
        embedder[f"convolutions.{i}.weight"] = tensor(f"char_encoder.char_cnn.{i}.weight")
        embedder[f"convolutions.{i}.bias"] = tensor(f"char_encoder.char_cnn.{i}.bias")
    for k in range(config.num_highway_layers):
        prefix = f"char_encoder.highway.{k}"
        embedder[f"highways._layers.{k}.weight"] = torch.cat([tensor(f"{prefix}.transform.weight"), -tensor(f"{prefix}.carry.weight")])
        embedder[f"highways._layers.{k}.bias"] = torch.cat([tensor(f"{prefix}.transform.bias"), -tensor(f"{prefix}.carry.bias")])
    embedder["projection.weight"] = tensor("char_encoder.projection.weight")
    embedder["projection.bias"] = tensor("char_encoder.projection.bias")
    encoder = {}
    names = {"input_linearity.weight": "input_weight", "state_linearity.weight": "recurrent_weight",
             "state_linearity.bias": "bias", "state_projection.weight": "projection_weight"}
    for layer in range(config.num_lstm_layers):
        for index, direction in enumerate(("forward", "backward")):
            for theirs, ours in names.items():
                encoder[f"{direction}_layer_{layer}.{theirs}"] = tensor(f"layers.{layer}.{ours}")[index]
    clone = {name: value.clone().contiguous() for name, value in embedder.items()}  # own storage each, as saved
    return {"token_embedder.pkl": clone, "encoder.pkl": {name: value.clone().contiguous() for name, value in encoder.items()}}


def read_tokenizer(model_dir: str | os.PathLike, options: dict[str, Any]) -> ElmoTokenizer:
    """The tokenizer of the folder's char.dic and word.dic (for a model with these `architecture_options`); word ids
    are model inputs only with word input."""
    model_dir = Path(model_dir)
    word_input = options["word_embedding_dim"] > 0
    word_file = model_dir / "word.dic"
    if word_input and not word_file.is_file():
        raise ConversionError(f"{word_file}: dictionary file not found (the architecture has word input)")
    input_names = ["input_ids", "input_word_ids", "attention_mask"] if word_input else ["input_ids", "attention_mask"]
    try:
        return ElmoTokenizer(
            max_characters_per_token=options["max_characters_per_token"],
            char_vocab_file=str(model_dir / "char.dic"),
            word_vocab_file=str(word_file) if word_file.is_file() else None,
            model_input_names=input_names,
        )
    except LexiconError as error:
        raise ConversionError(str(error)) from None
