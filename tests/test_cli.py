"""The `hf-elmo` command."""

import errno
import json
import os
import re
import resource
import shutil
import signal

import huggingface_hub.constants
import pytest
import torch

from conftest import ELMOFORMANYLANGS, REPO, assert_only_an_error_line, run_two_processes

from hf_elmo import ElmoConfig, ElmoModel
from hf_elmo.cli import main
from hf_elmo.default_model import default_model_path
from hf_elmo.demo import SenseVectors, plot_senses


def test_demo_shows_static_layer0_and_contextual_layers(converted, capsys, tmp_path, monkeypatch):
    """The tables, and the picture where --plot puts it by default: elmo-senses.png in the current folder."""
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--model", str(converted["allennlp-elmo"])]) == 0
    out = capsys.readouterr().out
    assert "(3 layers, each 32 wide)" in out
    rows = {m.group(1).strip(): [float(x) for x in m.group(2).split()]
            for m in re.finditer(r"^(\S+ / \S+)\s+((?:-?\d\.\d{4}\s*){4})$", out, re.M)}
    assert set(rows) == {"apple / Apple", "bank / bank", "天 / 天"}
    for label in ("bank / bank", "天 / 天"):
        assert rows[label][0] == 1.0  # same spelling: the context-free layer cannot tell the two apart
        assert all(value < 0.999 for value in rows[label][1:])
    assert os.listdir(tmp_path) == ["elmo-senses.png"] and (tmp_path / "elmo-senses.png").read_bytes()[:4] == b"\x89PNG"


def test_demo_refuses_a_missing_model_or_an_unwritable_picture_in_one_line(tmp_path, capsys):
    """The picture's path is checked before the model loads (the model named here does not exist either)."""
    assert main(["demo", "--model", str(tmp_path / "no-such-model"), "--plot", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: {tmp_path}: is a folder; give the path of the file to write"
    assert main(["demo", "--model", str(tmp_path / "no-such-model"), "--plot", str(tmp_path / "senses.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "no-such-model" in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == [] and not list(tmp_path.parent.glob(f".{tmp_path.name}.*"))
    # A suffix that is no picture format is refused before the model loads (any suffix gave a PNG).
    assert main(["demo", "--model", str(tmp_path / "no-such-model"), "--plot", str(tmp_path / "senses.docx")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {tmp_path / 'senses.docx'}: .docx is no picture format matplotlib writes; end the "
                          "path in one of ") and ".pdf" in err and ".svg" in err, err


def test_a_reader_that_stops_reading_the_demo_is_no_error(converted, tmp_path):
    """`hf-elmo demo | head -1`: the demo's next line meets a closed pipe. That was exit code 2 and "error: [Errno 32]
    Broken pipe", as if the command had failed; it ends quietly now, with a shell's code for it (141)."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "hf_elmo.cli", "demo", "--model", str(converted["allennlp-elmo"]), "--plot",
               str(tmp_path / "senses.png")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    process.stdout.close()  # (before the demo's first line: its every write meets the closed pipe, on any machine)
    err = process.stderr.read().decode()
    assert process.wait(timeout=300) == 141
    assert "error" not in err and "Traceback" not in err, err


@pytest.mark.parametrize("name, starts", [("senses.pdf", b"%PDF"), ("senses.SVG", b"<?xml"), ("senses", b"\x89PNG")])
def test_the_picture_is_in_the_format_its_name_says(converted, tmp_path, capsys, name, starts):
    """--plot senses.pdf wrote a PNG under that name; the suffix chooses the format (PNG without one)."""
    assert main(["demo", "--model", str(converted["allennlp-elmo"]), "--plot", str(tmp_path / name)]) == 0
    assert (tmp_path / name).read_bytes().startswith(starts)



def test_an_empty_model_or_picture_is_refused_not_read_as_a_default(tmp_path, capsys, monkeypatch):
    """`--model ""` loaded whatever model the current folder held (embed), or the default model (demo); `--plot ""`
    read as the current folder. Each is one error line now, before any work."""
    monkeypatch.chdir(REPO / "hf_elmo" / "default-model")  # (a folder with a config.json: "" read as it)
    (tmp_path / "in.txt").write_text("a b\n")
    for arguments in (["embed", str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5"), "--model", ""],
                      ["demo", "--model", "", "--plot", str(tmp_path / "senses.png")]):
        assert main(arguments) == 2
        assert capsys.readouterr().err == ("error: the model's location is empty: give a model folder or a Hub "
                                           "id\n"), arguments
    assert main(["demo", "--plot", ""]) == 2
    assert capsys.readouterr().err == "error: the path of the file to write is empty: give one\n"
    assert list(tmp_path.iterdir()) == [tmp_path / "in.txt"]


def test_a_panel_of_one_vector_for_every_occurrence_draws_one_point(tmp_path, monkeypatch):
    """Layer 0 gives every occurrence of a word the same vector: its panel draws them at one point, also where the
    vectors differ by rounding noise (another device's kernels), whose "principal directions" the plot would otherwise
    spread over the panel as if the senses differed."""
    import matplotlib.axes

    generator = torch.Generator().manual_seed(0)
    same = torch.randn(1, 8, generator=generator, dtype=torch.float64).expand(4, 8) + 1e-9 * torch.randn(
        4, 8, generator=generator, dtype=torch.float64)
    vectors = SenseVectors(words=["bank"] * 4, senses=["river", "river", "money", "money"], sentences=[""] * 4,
                           layers=[same, torch.randn(4, 8, generator=generator)], layer_names=["layer 0", "layer 1"])
    drawn = []
    real_scatter = matplotlib.axes.Axes.scatter
    monkeypatch.setattr(matplotlib.axes.Axes, "scatter", lambda self, x, y, **kwargs: drawn.append(
        torch.stack([torch.as_tensor(x), torch.as_tensor(y)])) or real_scatter(self, x, y, **kwargs))
    plot_senses(vectors, str(tmp_path / "senses.png"))
    assert len(drawn) == 4  # (two senses in each of the two panels)
    assert all(points.abs().max() == 0 for points in drawn[:2])  # layer 0: one point
    assert torch.cat(drawn[2:], 1).abs().max() > 0.1  # layer 1: spread out


def test_a_picture_that_fails_to_be_written_leaves_the_one_there(tmp_path):
    """The demo's picture is written atomically: when the write fails part way (here at a file size limit, as on a
    full disk), the picture already at the path is left as it was, with no temporary file beside it."""
    vectors = SenseVectors(words=["bank"] * 4, senses=["river", "river", "money", "money"], sentences=[""] * 4,
                           layers=[torch.randn(4, 8, generator=torch.Generator().manual_seed(0))], layer_names=["layer 1"])
    picture = tmp_path / "senses.png"
    picture.write_bytes(b"the picture of an earlier run")
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails (EFBIG), not the process
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, limit[1]))
    try:
        with pytest.raises(OSError) as raised:
            plot_senses(vectors, str(picture))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limit)
        signal.signal(signal.SIGXFSZ, handler)
    assert raised.value.errno == errno.EFBIG
    assert picture.read_bytes() == b"the picture of an earlier run" and os.listdir(tmp_path) == ["senses.png"]
    plot_senses(vectors, str(picture))
    assert picture.read_bytes()[:4] == b"\x89PNG" and picture.stat().st_size > 4096


def test_a_model_that_cannot_be_loaded_is_one_line_naming_it(tmp_path, capsys, monkeypatch):
    """README: for `hf-elmo demo` and `hf-elmo embed`, a model that cannot be loaded is one line `error: ...` naming
    it. The demo gave transformers' messages: a relative path that names nothing was "Repo id must use alphanumeric
    chars", a folder without config.json a missing weights file, and a Hub id it cannot reach two lines that name
    no model. In code, `ElmoConfig.from_pretrained` and `ElmoModel.from_pretrained` of a config.json that holds no
    object name the file (a number, null or true failed with a TypeError from inside transformers)."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty-folder").mkdir()
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    (tmp_path / "bert").mkdir()  # (its config failed on an ELMo field it lacks, naming no model)
    (tmp_path / "bert" / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 16}))
    for name, config, tokenizer_config in [("array", [], None), ("string", {"model_type": "elmo"}, "x")]:
        (tmp_path / name).mkdir()  # (JSON, but no object of settings: AttributeErrors from inside transformers)
        (tmp_path / name / "config.json").write_text(json.dumps(config))
        if tokenizer_config is not None:
            (tmp_path / name / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    # An ELMoForManyLangs folder not converted (its config.json names its architecture json): "did you mean"
    # warnings of fields it lacks, then no weights found, before.
    shutil.copytree(ELMOFORMANYLANGS / "chars_only", tmp_path / "zhs.model")
    for model, message in [("./no-such-model", "./no-such-model: no such folder"),
                           ("zhs.model", "zhs.model: an ELMoForManyLangs model folder, not converted: convert it with "
                                         "conversion/convert_elmoformanylangs.py first"),
                           ("empty-folder", "empty-folder: no config.json, not a model folder"),
                           ("bert", "bert: the config is of a bert model, not an ELMo one (model_type 'bert')"),
                           ("array", "array: its config.json holds an array, not an object of settings"),
                           ("string", "string: its tokenizer_config.json holds a string, not an object of settings"),
                           ("hf-elmo-tests/no-such-elmo", "hf-elmo-tests/no-such-elmo: cannot load the model (")]:
        for command in (["demo", "--plot", "senses.png"], ["embed", "in.txt", "out.hdf5"]):
            assert main([*command, "--model", model]) == 2
            assert_only_an_error_line(2, capsys.readouterr().err, f"error: {message}")
    assert sorted(os.listdir(tmp_path)) == ["array", "bert", "empty-folder", "in.txt", "string", "zhs.model"]
    for load in (ElmoConfig.from_pretrained, ElmoModel.from_pretrained):
        with pytest.raises(ValueError, match=f"^{re.escape(str(tmp_path / 'zhs.model' / 'config.json'))}: an "
                                             "ELMoForManyLangs model's config, not converted: convert the folder"):
            load(tmp_path / "zhs.model")
    for content, kind in [("[1]", "list"), ("5", "int"), ("null", "NoneType"), ("true", "bool")]:
        (tmp_path / "array" / "config.json").write_text(content)
        for load in (ElmoConfig.from_pretrained, ElmoModel.from_pretrained):
            with pytest.raises(ValueError, match=f"^{re.escape(str(tmp_path / 'array' / 'config.json'))}: the config "
                                                 f"holds a JSON {kind}, not an object of settings$"):
                load(tmp_path / "array")


def test_a_tokenizer_that_does_not_fit_its_model_or_is_no_json_is_one_line_naming_the_folder(tmp_path, capsys):
    """A tokenizer_config.json of another word length than config.json's: the demo printed its table's header, then
    "input_ids must be [batch, words, 50] character ids, got [2, 5, 10]", naming neither; one that is not JSON gave
    json's message without the file's name. Both are refused when the model loads, for the demo and embed."""
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    for name, content in (("ten", None), ("broken", "{not json")):
        shutil.copytree(default_model_path(), tmp_path / name)
        path = tmp_path / name / "tokenizer_config.json"
        path.write_text(content or json.dumps({**json.loads(path.read_text()), "max_characters_per_token": 10}))
    for model, message in [("ten", "ten: its tokenizer does not fit its model: the tokenizer spells words in 10 "
                                   "characters, the model reads 50 (max_characters_per_token)"),
                           ("broken", "broken/tokenizer_config.json: not a JSON file (Expecting property name")]:
        for command in (["demo", "--plot", str(tmp_path / "senses.png")],
                        ["embed", str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5")]):
            assert main([*command, "--model", str(tmp_path / model)]) == 2
            captured = capsys.readouterr()
            assert_only_an_error_line(2, captured.err, f"error: {tmp_path}/{message}")
            assert "cosine" not in captured.out
    assert not (tmp_path / "senses.png").exists() and not (tmp_path / "out.hdf5").exists()


@pytest.mark.parametrize("model, tokenizer_files, misfit", [
    ("default", ["char.dic"], "the tokenizer's alphabet is vocabulary, the model's bytes"),
    ("with_words", ["char.dic"], "the model reads word ids (word.dic), which the tokenizer does not give"),
    ("chars_only", ["char.dic", "word.dic"], "the tokenizer gives word ids (input_word_ids), which the model does not "
                                             "read"),
    ("with_words", ["char.dic with a character more", "word.dic"], "the tokenizer's char.dic gives n_characters 63, "
                                                                  "the model's config 62"),
    ("with_words", ["char.dic", "word.dic with a word less"], "the tokenizer's word.dic gives word_vocab_size 50, the "
                                                             "model's config 51"),
])
def test_a_tokenizer_whose_alphabet_dictionaries_or_word_input_are_not_its_models_is_refused_when_it_loads(
        converted_elmoformanylangs, tmp_path, model, tokenizer_files, misfit):
    """A model folder whose tokenizer spells in char.dic's characters where the model reads bytes embedded every
    sentence with no error, in vectors that mean nothing, as did another model's char.dic of fewer characters (one of
    more failed in torch's embedding at the first word past the model's rows); word ids that one gives and the other
    lacks failed at the first batch, naming neither. Each is refused as the model loads, naming the folder."""
    from hf_elmo import ElmoEmbedder, ElmoTokenizer

    folder = tmp_path / model
    shutil.copytree(default_model_path() if model == "default" else converted_elmoformanylangs[model], folder)
    for name in ("char.dic", "word.dic"):
        (folder / name).unlink(missing_ok=True)
    files = {}
    for kind, name in zip(["char", "word"], tokenizer_files):
        lines = (ELMOFORMANYLANGS / "with_words" / f"{kind}.dic").read_text(encoding="utf-8").splitlines(keepends=True)
        if name.endswith("a character more"):
            lines.append(f"新\t{len(lines)}\n")
        elif name.endswith("a word less"):
            lines = lines[:-1]
        (tmp_path / f"{kind}.dic").write_text("".join(lines), encoding="utf-8")
        files[f"{kind}_vocab_file"] = tmp_path / f"{kind}.dic"
    ElmoTokenizer(**files).save_pretrained(folder)
    with pytest.raises(ValueError, match=f"^{re.escape(f'{folder}: its tokenizer does not fit its model: {misfit}')}$"):
        ElmoEmbedder(folder)


def test_no_subcommand_is_a_usage_error(capsys):
    """`hf-elmo` alone names the command it lacks and exits 2 (without the check it did nothing and exited 0)."""
    with pytest.raises(SystemExit) as raised:
        main([])
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: hf-elmo") and "error: the following arguments are required: command" in err


def test_the_version_is_the_packages_with_transformers_and_torch(capsys):
    """`hf-elmo --version` and `hf_elmo.__version__` give the installed package's version (pyproject.toml's), the
    command with the transformers and torch it runs on."""
    import tomllib

    import transformers

    import hf_elmo

    with pytest.raises(SystemExit) as raised:
        main(["--version"])
    assert raised.value.code == 0
    expected = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert hf_elmo.__version__ == expected
    assert capsys.readouterr().out == (f"hf-elmo {expected} (transformers {transformers.__version__}, torch "
                                       f"{torch.__version__})\n")


@pytest.mark.parametrize("first, second", [("--top", "--average"), ("--all", "--mix"), ("--mix", "--top")])
def test_two_output_layouts_are_refused_not_the_last_one_taken(tmp_path, capsys, first, second):
    """--all, --top, --average and --mix choose one layout: two of them are a usage error (exit 2) before the input
    is read or any output made, rather than silently the last one."""
    source = tmp_path / "in.txt"
    source.write_text("a b\n", encoding="utf-8")
    with pytest.raises(SystemExit) as raised:
        main(["embed", str(source), str(tmp_path / "out.hdf5"), first, second, "--model", str(tmp_path / "none")])
    assert raised.value.code == 2
    assert f"argument {second}: not allowed with argument {first}" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt"]


def test_two_processes_print_one_summary(converted, tmp_path):
    """Under torchrun the summary line `hf-elmo embed: N sentences in OUT (...)` is the first process's alone (each
    process printing its own gave two lines with different "computed by this process" counts)."""
    source = tmp_path / "in.txt"
    source.write_text("".join(f"line {i} of words\n" for i in range(8)), encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    result = run_two_processes(["-m", "hf_elmo.cli", "embed", source, tmp_path / "out.hdf5", "--batch-size", 2,
                                "--model", converted["allennlp-elmo"]], env)
    assert result.returncode == 0, result.stderr[-3000:]
    summaries = [line for line in result.stderr.splitlines() if line.startswith("hf-elmo embed: 8 sentences in")]
    assert len(summaries) == 1, result.stderr[-3000:]
    assert "(4 batches: 2 computed by this process, 0 finished by an earlier run" in summaries[0]
