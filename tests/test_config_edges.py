"""Behaviour of hf_elmo/configuration_elmo.py that no other test held (found by mutation testing)."""

import json
import re

import pytest
import torch
from transformers import AutoModel

from hf_elmo import ElmoConfig, ElmoModel, ElmoTokenizer
from hf_elmo.configuration_elmo import check_type

from conftest import FIXTURES

TINY = dict(char_embedding_dim=4, num_highway_layers=1, cell_size=16, projection_dim=8)
VOCABULARY_ALPHABET = dict(alphabet="vocabulary", n_characters=62, bos_char_id=1, eos_char_id=2, bow_char_id=3,
                           eow_char_id=4, pad_char_id=5)


def test_a_config_without_filters_is_refused_naming_the_field():
    """A character CNN needs one filter at least: `char_cnn_filters=[]` is refused at construction, naming the field
    (not a model of 0 character features that fails, or reads nothing, later)."""
    with pytest.raises(ValueError, match=r"^ElmoConfig.char_cnn_filters must be one or more \[width, count\] pairs, "
                                         r"each at least 1, got \[\]$"):
        ElmoConfig(char_cnn_filters=[])


def test_filters_that_are_not_a_list_of_pairs_are_refused_naming_the_field():
    """A number where the list goes (options.json's count of filters, say) and a filter of three numbers: each
    refused with the field and the form it takes."""
    with pytest.raises(ValueError, match=r"^ElmoConfig.char_cnn_filters must be a list of lists of integers, got 2048 "
                                         r"\(int\)$"):
        ElmoConfig(char_cnn_filters=2048)
    with pytest.raises(ValueError, match=r"^ElmoConfig.char_cnn_filters must be one or more \[width, count\] pairs, "
                                         r"each at least 1, got \[\[1, 4, 5\]\]$"):
        ElmoConfig(char_cnn_filters=[[1, 4, 5]])
    # (the words for a fixed-length tuple, which char_cnn_filters' list form hides in its own message)
    with pytest.raises(ValueError, match=r"^size must be a list of 2 integers, got \[1\] \(list\)$"):
        check_type("size", [1], tuple[int, int])


def test_a_filter_as_wide_as_a_word_is_accepted_and_runs():
    """No filter can be wider than max_characters_per_token, but one exactly as wide is a filter over the whole word
    (one window): accepted, and the model runs on words of every length, the fast path as the plain one."""
    config = ElmoConfig(max_characters_per_token=7, char_cnn_filters=[[1, 4], [7, 4]], **TINY)
    with pytest.raises(ValueError, match=r"^ElmoConfig.char_cnn_filters has \[8, 4\]: no filter can be wider than "
                                         r"max_characters_per_token \(7\)$"):
        ElmoConfig(max_characters_per_token=7, char_cnn_filters=[[1, 4], [8, 4]], **TINY)
    torch.manual_seed(0)
    model = ElmoModel(config).eval()
    batch = ElmoTokenizer(max_characters_per_token=7)([["a", "bc", "defghijk"]], is_split_into_words=True,
                                                      return_tensors="pt")
    with torch.no_grad():
        fast = model(**batch).last_hidden_state
        model.set_fast_path(False)
        plain = model(**batch).last_hidden_state
    assert fast.shape == (1, 3, 16) and torch.isfinite(fast).all()
    torch.testing.assert_close(fast, plain, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ["bos_char_id", "eos_char_id", "bow_char_id", "eow_char_id", "pad_char_id"])
def test_a_character_vocabularys_special_ids_cannot_be_the_padding_id_0(name):
    """Character id 0 is the all-zero padding word's (its embedding row is the padding row): no special character of
    a character vocabulary may be 0."""
    ids = {"bos_char_id": 1, "eos_char_id": 2, "bow_char_id": 3, "eow_char_id": 4, "pad_char_id": 5, name: 0}
    with pytest.raises(ValueError, match=rf"^ElmoConfig.{name} must be a character id in 1..n_characters - 1 \(61; 0 "
                                         rf"is the padding word\), got 0$"):
        ElmoConfig(**{**VOCABULARY_ALPHABET, **ids})


@pytest.mark.parametrize("ids", [{}, {"bos_word_id": 1}, {"bos_word_id": -1, "eos_word_id": 2},
                                 {"bos_word_id": 1, "eos_word_id": -3}])
def test_word_input_needs_both_boundary_word_ids_within_the_word_vocabulary(ids):
    """With word input, `<bos>` and `<eos>` are words read through the word embedding: each id must be set (None,
    the default, was a TypeError from comparing None) and be a row of it, 0 .. word_vocab_size - 1 (a negative id
    would index the embedding from its end)."""
    ids = {"bos_word_id": None, "eos_word_id": None, **ids}
    name, value = next((n, v) for n, v in ids.items() if v is None or v < 0)
    with pytest.raises(ValueError, match=rf"^ElmoConfig.{name} must be a word id in 0..word_vocab_size - 1 \(50\), "
                                         rf"got {value}$"):
        ElmoConfig(**VOCABULARY_ALPHABET, word_vocab_size=51, word_embedding_dim=6, **ids)
    assert ElmoConfig(**VOCABULARY_ALPHABET, word_vocab_size=51, word_embedding_dim=6, bos_word_id=0,
                      eos_word_id=50).eos_word_id == 50


def test_numbers_given_as_integers_are_kept_and_saved_as_floats(tmp_path):
    """The docstring: nothing is converted silently, but the dropouts, the forget bias and the clips take one form,
    a float (an integer is a number): `dropout=0`, `forget_bias=1` are 0.0 and 1.0 in the config and in config.json,
    and read back as the same config."""
    config = ElmoConfig(dropout=0, lm_dropout=0, forget_bias=1, cell_clip=3, proj_clip=2, **TINY)
    values = {name: getattr(config, name) for name in ("dropout", "lm_dropout", "forget_bias", "cell_clip", "proj_clip")}
    assert values == {"dropout": 0.0, "lm_dropout": 0.0, "forget_bias": 1.0, "cell_clip": 3.0, "proj_clip": 2.0}
    assert all(type(value) is float for value in values.values()), values
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert all(type(saved[name]) is float for name in values), {name: saved[name] for name in values}
    assert re.search(r'"forget_bias": 1\.0', (tmp_path / "config.json").read_text())
    assert ElmoConfig.from_pretrained(tmp_path).to_dict() == config.to_dict()


def test_options_json_leaving_out_the_optional_options_reads_their_defaults():
    """from_original_options: an options.json with only the required options (the embedding width, the filters and
    the LSTM's sizes) reads every other option as its default: no highway layer, relu, 50 characters a word, the 262
    byte ids, no clipping, no skip connections; the same as those options written null."""
    options = {"char_cnn": {"embedding": {"dim": 4}, "filters": [[1, 4], [2, 8]]},
               "lstm": {"dim": 16, "projection_dim": 8, "n_layers": 1}}
    config = ElmoConfig.from_original_options(options)
    defaults = {"num_highway_layers": 0, "char_cnn_activation": "relu", "max_characters_per_token": 50,
                "n_characters": 262, "cell_clip": None, "proj_clip": None, "use_skip_connections": False}
    assert {name: getattr(config, name) for name in defaults} == defaults
    nulls = {"char_cnn": {**options["char_cnn"], "n_highway": None, "activation": None,
                          "max_characters_per_token": None, "n_characters": None},
             "lstm": {**options["lstm"], "cell_clip": None, "proj_clip": None, "use_skip_connections": None}}
    assert ElmoConfig.from_original_options(nulls).to_dict() == config.to_dict()


@pytest.mark.parametrize("changes", [{"forget_bias": 0.0}, {"always_project": True},
                                     {"word_vocab_size": 10, "word_embedding_dim": 4, "bos_word_id": 1,
                                      "eos_word_id": 2}, VOCABULARY_ALPHABET])
def test_to_original_options_refuses_each_thing_bilm_tf_cannot_express(changes):
    """bilm-tf's options.json has no room for a forget bias stored in the weights (bilm-tf adds 1 at run time), for
    projections kept where the widths match, for word input or for a character vocabulary: each alone is refused
    (the options written would describe another model: bilm-tf would add +1 to a forget gate that has it already,
    or build no projection for weights that have one)."""
    config = ElmoConfig(char_cnn_filters=[[1, 4], [2, 4]], **TINY)
    assert set(config.to_original_options()) == {"lstm", "char_cnn"}
    with pytest.raises(ValueError, match=r"^this model is not in bilm-tf's form \(a character vocabulary, word input, "
                                         r"a forget bias stored in the weights or projections of equal widths"):
        ElmoConfig(char_cnn_filters=[[1, 4], [2, 4]], **{**TINY, **changes}).to_original_options()


@pytest.mark.parametrize("always_project", [False, True])
@pytest.mark.parametrize("filters, projection", [([[1, 4], [2, 4]], 16), ([[1, 8], [2, 8]], 16)])
def test_the_token_projection_reads_the_word_vector_and_the_char_cnns_together(filters, projection, always_project):
    """With word input and `always_project` off, the token projection is built only where the word vector and the
    char CNN's output together (word_embedding_dim + F) differ from projection_dim: 8 + 8 = 16 needs none, 8 + 16
    does; with `always_project` (ELMoForManyLangs') both are built, the token projection and the cells' projection,
    whatever the widths. Either way the model reads its words and characters to [B, S, 2P]."""
    config = ElmoConfig(**{**VOCABULARY_ALPHABET, "n_characters": 262}, char_cnn_filters=filters,
                        word_vocab_size=10, word_embedding_dim=8, bos_word_id=1, eos_word_id=2,
                        always_project=always_project, **{**TINY, "cell_size": 32, "projection_dim": projection})
    assert config.has_char_projection == (always_project or config.num_char_filters + 8 != projection)
    torch.manual_seed(0)
    model = ElmoModel(config).eval()
    assert (model.char_encoder.projection is not None) == config.has_char_projection
    char_ids = torch.randint(6, 262, (2, 3, 50))
    char_ids[..., 0], char_ids[..., -1] = 3, 4
    word_ids = torch.tensor([[3, 4, 5], [6, 7, 8]])
    with torch.no_grad():
        out = model(input_ids=char_ids, input_word_ids=word_ids).last_hidden_state
    assert out.shape == (2, 3, 2 * projection) and torch.isfinite(out).all()
    # The cells' projection likewise: where the cell is as wide as the output, only always_project builds it.
    square = ElmoConfig(**{**config.to_dict(), "cell_size": projection})
    assert square.has_lstm_projection == always_project
    assert all((layer.projection_weight is not None) == always_project for layer in ElmoModel(square).layers)


def test_to_original_options_writes_every_option_bilm_tf_reads():
    """The options.json written for bilm-tf and AllenNLP holds every option they read (bilm-tf reads
    `char_cnn.n_characters` and `max_characters_per_token` without a default, and refuses an n_characters other than
    262 at inference), in its inference form, and reads back as the same config."""
    config = ElmoConfig(char_cnn_filters=[[1, 4], [2, 8]], char_cnn_activation="tanh", max_characters_per_token=20,
                        cell_clip=2, proj_clip=None, use_skip_connections=True, num_lstm_layers=2,
                        **{**TINY, "num_highway_layers": 2})
    assert config.to_original_options() == {
        "lstm": {"dim": 16, "projection_dim": 8, "n_layers": 2, "cell_clip": 2.0, "proj_clip": None,
                 "use_skip_connections": True},
        "char_cnn": {"embedding": {"dim": 4}, "filters": [[1, 4], [2, 8]], "n_highway": 2, "activation": "tanh",
                     "max_characters_per_token": 20, "n_characters": 262},
    }
    assert ElmoConfig.from_original_options(config.to_original_options()).to_dict() == config.to_dict()


def warnings_of(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]


def test_a_setting_meant_for_a_field_is_named_in_a_warning_with_the_field(tmp_path, caplog):
    """transformers keeps a setting that is no field as a plain attribute, so `filters=` (options.json's name) or
    `cellsize=` would leave the field at its default without a word: each is named in a warning with the field it
    looks meant for, at construction, when a config.json holding it is loaded, and as a keyword of from_pretrained."""
    config = ElmoConfig(filters=[[1, 4]], dim=8, cellsize=32)
    assert warnings_of(caplog) == [
        "ElmoConfig has no field 'filters' (kept as an attribute that no ELMo model reads): did you mean "
        "'char_cnn_filters'?",
        "ElmoConfig has no field 'dim' (kept as an attribute that no ELMo model reads): did you mean "
        "'char_embedding_dim' or 'cell_size'?",
        "ElmoConfig has no field 'cellsize' (kept as an attribute that no ELMo model reads): did you mean 'cell_size'?",
    ]
    assert (config.filters, config.dim, config.cellsize) == ([[1, 4]], 8, 32)
    assert config.cell_size == 4096 and config.char_cnn_filters == [list(f) for f in ElmoConfig().char_cnn_filters]

    ElmoConfig(**TINY).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**saved, "n_highway": 2}))
    caplog.clear()
    assert ElmoConfig.from_pretrained(tmp_path).num_highway_layers == 1
    assert warnings_of(caplog) == ["ElmoConfig has no field 'n_highway' (kept as an attribute that no ELMo model "
                                   "reads): did you mean 'num_highway_layers'?"]
    # A keyword of from_pretrained that is no field (transformers drops it, or hands it to the model's class).
    (tmp_path / "config.json").write_text(json.dumps(saved))
    caplog.clear()
    config = ElmoConfig.from_pretrained(tmp_path, cellsize=32, cell_size=24)
    assert config.cell_size == 24 and not hasattr(config, "cellsize")
    assert warnings_of(caplog) == ["ElmoConfig has no field 'cellsize' (a keyword of from_pretrained that no ELMo "
                                   "config reads): did you mean 'cell_size'?"]
    # A model class's from_pretrained hands it to the model, which refuses it (README: as every transformers model).
    ElmoModel(ElmoConfig.from_pretrained(tmp_path)).save_pretrained(tmp_path)
    with pytest.raises(TypeError, match=r"__init__\(\) got an unexpected keyword argument 'cellsize'"):
        AutoModel.from_pretrained(tmp_path, cellsize=32)


def test_an_options_file_option_spelt_near_a_missing_one_is_named_in_a_warning(tmp_path, caplog):
    """A misspelt option of options.json (`use_skip_connection`) was ignored without a word, and the option it was
    meant for took its default: a converted model with other numbers, which the converter's reload check cannot see.
    Each is named with the option it looks meant for, in any section; the training options of the top level, a
    near spelling of an option that is there, and the released files give none."""
    options = json.loads((FIXTURES / "allennlp-elmo" / "options.json").read_text())
    options["lstm"]["use_skip_connection"] = options["lstm"].pop("use_skip_connections")
    options["lstm"]["cellclip"] = options["lstm"].pop("cell_clip")
    options["char_cnn"]["embedding"]["dims"] = 8  # (beside its dim: meant for nothing missing)
    options["char_cnn"]["activaton"] = options["char_cnn"].pop("activation")
    options["n_epoch"] = 10  # (bilm-tf's training options sit at the top level)
    path = tmp_path / "options.json"
    path.write_text(json.dumps(options))
    config = ElmoConfig.from_original_options(path)
    assert (config.use_skip_connections, config.cell_clip) == (False, None)  # (what the warnings are for)
    assert warnings_of(caplog) == [
        f"{path}: option '{where}' is none that ELMo reads: did you mean '{meant}', which the file lacks (an optional "
        "one takes its default)?"
        for where, meant in [("char_cnn.activaton", "char_cnn.activation"),
                             ("lstm.use_skip_connection", "lstm.use_skip_connections"), ("lstm.cellclip", "lstm.cell_clip")]
    ]
    caplog.clear()
    for released in ["allennlp-elmo/options.json", "bilm-tf/model/options.json",
                     "allennlp-elmo/v0.9.0/elmo_multilingual/es/options.json"]:
        ElmoConfig.from_original_options(FIXTURES / released)
    assert warnings_of(caplog) == []


def test_settings_of_transformers_and_of_the_user_are_kept_without_a_warning(tmp_path, caplog):
    """What transformers itself reads (labels, dtype, special tokens), attributes of the user's own, and saved ELMo
    folders (the packaged default model's, one with every field changed) load without the warning."""
    import hf_elmo

    config = ElmoConfig(**TINY, num_labels=3, torch_dtype="float32", sep_token_id=3, my_note="trained on news")
    assert (config.num_labels, config.sep_token_id, config.my_note) == (3, 3, "trained on news")
    changed = ElmoConfig(**TINY, **VOCABULARY_ALPHABET, char_cnn_filters=[[1, 4], [2, 8]], cell_clip=2.0,
                         proj_clip=None, use_skip_connections=False, forget_bias=0.0, num_output_representations=2,
                         do_layer_norm=True, dropout=0.5, finetune_bilm=True, scalar_mix_l2_coef=0.001,
                         sequence_pooling="max", lm_vocab_size=10, lm_dropout=0.1, lm_negative_samples=4)
    changed.save_pretrained(tmp_path)
    assert ElmoConfig.from_pretrained(tmp_path).to_dict() == changed.to_dict()
    ElmoConfig.from_pretrained(hf_elmo.__path__[0] + "/default-model")
    assert warnings_of(caplog) == []
