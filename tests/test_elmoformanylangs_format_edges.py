"""Behaviour of conversion/elmoformanylangs_format.py that no other test held (found by mutation testing)."""

import json
import shutil

import pytest
import torch

from hf_elmo import ElmoConfig, ElmoModel, ElmoTokenizer

from conftest import ELMOFORMANYLANGS, assert_only_an_error_line
from conversion.convert_elmoformanylangs import convert_elmoformanylangs_to_hf, main
from conversion.elmoformanylangs_format import architecture_options, check_convertible
from conversion.original_format import ConversionError


def test_the_encoder_and_token_embedder_names_are_read_in_any_case_as_the_package_reads_them():
    """The package builds its biLM for `encoder.name.lower() == "elmo"` and its char CNN for
    `token_embedder.name.lower() == "cnn"`: an architecture json that writes "ELMo" and "CNN" is the same model,
    and converts; another name is refused, naming it."""
    architecture = json.loads((ELMOFORMANYLANGS / "chars_only" / "architecture.json").read_text())
    expected = architecture_options(architecture, "architecture.json")
    architecture["encoder"]["name"], architecture["token_embedder"]["name"] = "ELMo", "CNN"
    assert architecture_options(architecture, "architecture.json") == expected
    architecture["encoder"]["name"] = "ELMo2"
    with pytest.raises(ConversionError, match=r"^architecture.json: encoder 'ELMo2' is not ELMo's biLM \('elmo'\)"):
        architecture_options(architecture, "architecture.json")


def test_an_architecture_option_spelt_near_a_missing_one_is_named_in_a_warning(caplog):
    """`cellclip` for `cell_clip` converted with no clipping and no word; now named, as in options.json. The test
    models' own architectures (a classifier section and dropout beside the two read) give no warning."""
    for name in ("with_words", "chars_only"):
        architecture_options(json.loads((ELMOFORMANYLANGS / name / "architecture.json").read_text()), name)
    assert [record.getMessage() for record in caplog.records] == []
    architecture = json.loads((ELMOFORMANYLANGS / "chars_only" / "architecture.json").read_text())
    architecture["encoder"]["cellclip"] = architecture["encoder"].pop("cell_clip")
    assert architecture_options(architecture, "architecture.json")["cell_clip"] is None
    assert [record.getMessage() for record in caplog.records] == [
        "architecture.json: option 'encoder.cellclip' is none that ELMo reads: did you mean 'encoder.cell_clip', which "
        "the file lacks (an optional one takes its default)?"]


def test_a_model_whose_architecture_names_its_parts_in_capitals_converts(tmp_path):
    folder = shutil.copytree(ELMOFORMANYLANGS / "chars_only", tmp_path / "model")
    architecture = json.loads((folder / "architecture.json").read_text())
    architecture["encoder"]["name"], architecture["token_embedder"]["name"] = "ELMO", "Cnn"
    (folder / "architecture.json").write_text(json.dumps(architecture))
    config = ElmoModel.from_pretrained(convert_elmoformanylangs_to_hf(folder, tmp_path / "hf")).config
    assert (config.alphabet, config.projection_dim, config.cell_size) == ("vocabulary", 8, 24)


@pytest.mark.parametrize("name", ["chars_only", "with_words"])
def test_a_converted_models_mix_starts_as_the_plain_average_of_its_layers(converted_elmoformanylangs, name):
    """The package has no scalar mix: the converted model's starts as a fresh one does, equal weights and gamma 1,
    so that `elmo_representations` (what the task heads read) is the average of the layers, not a multiple of it."""
    folder = converted_elmoformanylangs[name]
    model, tokenizer = ElmoModel.from_pretrained(folder).eval(), ElmoTokenizer.from_pretrained(folder)
    mix = model.scalar_mixes[0]
    assert torch.equal(mix.scalar_parameters.detach(), torch.zeros(model.config.num_lstm_layers + 1))
    assert torch.equal(mix.gamma.detach(), torch.ones(1))
    batch = tokenizer([["天气", "不错"], ["好"]], is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        output = model(**batch)
    average = torch.stack(output.hidden_states).mean(dim=0)
    mask = batch["attention_mask"].bool()
    torch.testing.assert_close(output.elmo_representations[0][mask], average[mask], rtol=0, atol=1e-6)


def test_way_back_refuses_a_model_whose_forget_bias_is_added_at_run_time(converted_elmoformanylangs, tmp_path, capsys):
    """The package's cell adds no forget bias at run time (its stored bias includes it): a model with a character
    vocabulary but bilm-tf's run-time forget bias of 1 would be written without that +1, and the package would
    give other numbers. It is refused, and nothing is written."""
    folder = shutil.copytree(converted_elmoformanylangs["with_words"], tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "forget_bias": 1.0}))
    code = main(["--to-elmoformanylangs", "--model-dir", str(folder), "--output-dir", str(tmp_path / "out")])
    assert_only_an_error_line(code, capsys.readouterr().err, "this model is in bilm-tf's form (UTF-8 bytes, forget "
                                                             "bias +1 at run time)")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("config_path", [5, ["architecture.json"], "", None])
def test_a_config_path_that_is_not_a_file_name_is_refused_naming_config_json(tmp_path, config_path):
    """config.json's `config_path` must name the architecture json: a number or a list (a TypeError from pathlib
    before), an empty name or null is one error naming config.json."""
    from conversion.elmoformanylangs_format import read_architecture

    folder = shutil.copytree(ELMOFORMANYLANGS / "chars_only", tmp_path / "model")
    (folder / "config.json").write_text(json.dumps({"config_path": config_path}))
    with pytest.raises(ConversionError, match=r"config.json: no 'config_path' naming the architecture json$"):
        read_architecture(folder)


def test_the_packages_own_architecture_is_the_released_models_every_option(tmp_path):
    """A released model's architecture is the package's configs file, not in its folder: every option of it is what
    the package's file says (the clips included, which change every output), as the package's own `cnn_50_sample`
    in its elmo.py writes it."""
    from conversion.elmoformanylangs_format import read_architecture

    name = "cnn_50_100_512_4096_sample.json"
    folder = tmp_path / "zhs.model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"config_path": f"../configs/{name}"}))
    architecture, _ = read_architecture(folder)
    assert architecture["encoder"] == {"name": "elmo", "projection_dim": 512, "cell_clip": 3, "proj_clip": 3,
                                       "dim": 4096, "n_layers": 2}
    assert architecture["token_embedder"] == {
        "name": "cnn", "activation": "relu",
        "filters": [[1, 32], [2, 32], [3, 64], [4, 128], [5, 256], [6, 512], [7, 1024]],
        "n_highway": 2, "word_dim": 100, "char_dim": 50, "max_characters_per_token": 50}
    options = architecture_options(architecture, name)
    assert (options["cell_clip"], options["proj_clip"], options["word_embedding_dim"]) == (3, 3, 100)


@pytest.mark.parametrize("file_name", ["config.json", "architecture.json"])
def test_a_json_file_of_the_folder_that_is_not_an_object_is_refused_naming_it(tmp_path, file_name):
    """config.json and the architecture json must each be a JSON object: a list was an AttributeError."""
    from conversion.elmoformanylangs_format import read_architecture

    folder = shutil.copytree(ELMOFORMANYLANGS / "chars_only", tmp_path / "model")
    (folder / file_name).write_text("[1, 2]")
    with pytest.raises(ConversionError, match=rf"{file_name}: a .*json must be a JSON object$"):
        read_architecture(folder)


def test_way_back_takes_a_model_that_projects_only_where_widths_differ(converted_elmoformanylangs, tmp_path, capsys):
    """always_project false builds a projection only where the widths differ (bilm-tf's rule): where they all
    differ, the package's model is the same, so the way back writes it (it was refused as "in bilm-tf's form") and
    the written model converts back to the same outputs. Where a projection is left out, it is refused, naming it."""
    folder = shutil.copytree(converted_elmoformanylangs["with_words"], tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "always_project": False}))
    assert main(["--to-elmoformanylangs", "--model-dir", str(folder), "--output-dir", str(tmp_path / "package")]) == 0
    again = convert_elmoformanylangs_to_hf(tmp_path / "package", tmp_path / "again")
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    batch = tokenizer([["天", "气", "不错"], ["I", "eat", "an", "apple"]], is_split_into_words=True, padding=True,
                      return_tensors="pt")
    with torch.no_grad():
        expected = ElmoModel.from_pretrained(folder).eval()(**batch).hidden_states
        found = ElmoModel.from_pretrained(again).eval()(**batch).hidden_states
    assert all(torch.equal(a, b) for a, b in zip(expected, found, strict=True))
    equal_widths = ElmoConfig.from_pretrained(folder, always_project=False, cell_size=8)
    with pytest.raises(ConversionError, match=r"^ELMoForManyLangs always projects .* leaves a projection out"):
        check_convertible(equal_widths)


@pytest.mark.parametrize("section", ["encoder", "token_embedder"])
def test_an_architecture_without_a_section_is_refused_naming_it(section):
    """An architecture json without its encoder or token_embedder section (or one that is no object) names the
    section, not a KeyError."""
    architecture = json.loads((ELMOFORMANYLANGS / "chars_only" / "architecture.json").read_text())
    for value in (None, ["elmo"]):
        architecture[section] = value
        with pytest.raises(ConversionError, match=rf"^architecture.json: no '{section}' section$"):
            architecture_options({k: v for k, v in architecture.items() if v is not None}, "architecture.json")


def test_options_that_contradict_each_other_are_refused_naming_the_file_and_nothing_is_written(tmp_path, capsys):
    """Each option can be right alone and wrong with another: a filter wider than the words is refused at
    conversion, naming the architecture json and both options as it names them, before any output. (A projection
    wider than the cell is no contradiction here: the package projects its cells to any width; see the
    wide_projection fixture.)"""
    folder = shutil.copytree(ELMOFORMANYLANGS / "chars_only", tmp_path / "model")
    config_path = json.loads((folder / "config.json").read_text())["config_path"]
    architecture = json.loads((folder / config_path).read_text())
    architecture["token_embedder"]["max_characters_per_token"] = 3
    architecture["token_embedder"]["filters"][-1] = [4, 16]
    (folder / config_path).write_text(json.dumps(architecture))
    code = main(["--model-dir", str(folder), "--output-dir", str(tmp_path / "hf")])
    assert_only_an_error_line(code, capsys.readouterr().err,
                              f"error: {folder / config_path}: 'token_embedder.filters' has [4, 16]: no filter can be "
                              "wider than 'token_embedder.max_characters_per_token' (3)")
    assert not (tmp_path / "hf").exists()
