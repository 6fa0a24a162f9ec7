"""modeling/layer_analysis.py: the paper's layer analysis, run small on the real task data with a fixture ELMo."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch
from conftest import REPO, assert_one_error, assert_only_an_error_line

from hf_elmo import ElmoModel, ElmoTokenizer
from hf_elmo.fast_linear import cpu_name
from modeling.export_default import LAYER_ANALYSIS_END, LAYER_ANALYSIS_START
import modeling.layer_analysis as layer_analysis
from hf_elmo.default_model import default_model_path
from modeling.layer_analysis import (INPUTS, Features, LayerInput, LinearProbe, fit, layer_findings, main, pos_accuracy,
                                     markdown_paragraph, pos_losses, weights_key)

LAYER_ANALYSIS = REPO / "modeling" / "layer_analysis.py"


def save_with_fixture_tokenizer(model: ElmoModel, folder, converted):
    """`model` saved into `folder` with the fixture model's tokenizer, a folder that --model reads."""
    model.save_pretrained(folder)
    ElmoTokenizer.from_pretrained(converted["allennlp-elmo"]).save_pretrained(folder)


def task_data(folder):
    """Stand-ins of `make data`'s files where layer_analysis.py looks for them: (--conll-dir, --brown-dir)."""
    for path in [folder / "conll2003" / f"{split}.txt" for split in ("train", "valid", "test")] + [
            folder / "brown-pos" / f"{split}.jsonl" for split in ("train", "validation", "test")]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    return str(folder), str(folder / "brown-pos")


@pytest.mark.parametrize("case, message", [
    ("no markers", r"card\.md: the model card has no layer-analysis section \(a line <!-- layer-analysis -->"),
    ("end marker first", "the model card has no layer-analysis section"),
    ("missing card", r"card\.md: model card not found$"),
    ("ner epochs 0", r"^error: --ner-epochs must be at least 1, got 0$"),
    ("pos epochs -1", r"^error: --pos-epochs must be at least 1, got -1$"),
    ("no conll data", r"^error: task data missing: .*empty/conll2003/train\.txt, .*empty/conll2003/valid\.txt, "
                      r".*empty/conll2003/test\.txt; `make data` downloads it$"),
    ("no brown test", r"^error: task data missing: .*brown-pos/test\.jsonl; `make data` downloads it$"),
    ("model folder", r"^error: --model .*nowhere: no such folder$"),
    ("batch size 0", r"^error: --batch-size must be at least 1, got 0$"),
    ("ner hidden 0", r"^error: --ner-hidden must be at least 1, got 0$"),
    # (a tagger too large to allocate failed after the features were computed, minutes in)
    ("ner hidden 100000000", r"^error: --ner-hidden must be at most 2048, got 100000000$"),
    ("max sentences 0", r"^error: --max-sentences must be at least 1, got 0$"),
    ("dropout 1", r"^error: --dropout must be at least 0 and below 1, got 1\.0$"),
    ("learning rate 0", r"^error: --learning-rate must be a finite number above 0, got 0\.0$"),
    ("learning rate inf", r"^error: --learning-rate must be a finite number above 0, got inf$"),  # (all weights NaN)
    ("seeds twice", r"^error: --seeds must differ, got 1 more than once$"),
    # (-1 seeds torch as 2**64 - 1 does: the same run twice; past 64 bits, an overflow after the model loaded)
    ("seeds outside 64 bits", r"^error: --seeds must be 0 to 2\*\*64 - 1, got -1, 18446744073709551616$"),
    ("empty model", r"^error: --model is empty: give a model folder, or leave --model out for the default model$"),
])
def test_unusable_arguments_are_one_error_line_and_exit_code_2_before_anything_is_loaded(case, message, tmp_path,
                                                                                          capsys):
    """Each would otherwise fail after the whole run (up to an hour) with a traceback; here the data are empty
    stand-ins, so any run that got as far as loading them would fail differently."""
    conll_dir, brown_dir = task_data(tmp_path / "data")
    card = tmp_path / "card.md"
    card.write_text({"no markers": "# card\n", "end marker first": f"{LAYER_ANALYSIS_END}\n{LAYER_ANALYSIS_START}\n"}
                    .get(case, f"# card\n{LAYER_ANALYSIS_START}\n{LAYER_ANALYSIS_END}\n"), encoding="utf-8")
    if case == "missing card":
        card.unlink()
    if case == "no brown test":
        (tmp_path / "data" / "brown-pos" / "test.jsonl").unlink()
    args = ["--output-dir", str(tmp_path / "run"), "--conll-dir", str(tmp_path / "empty") if case == "no conll data"
            else conll_dir, "--brown-dir", brown_dir, "--update-card", str(card),
            "--ner-epochs", "0" if case == "ner epochs 0" else "1", "--pos-epochs", "-1" if case == "pos epochs -1" else "1"]
    if case in ("model folder", "empty model"):
        args += ["--model", str(tmp_path / "nowhere") if case == "model folder" else ""]
    args += {"batch size 0": ["--batch-size", "0"], "ner hidden 0": ["--ner-hidden", "0"],
             "ner hidden 100000000": ["--ner-hidden", "100000000"],
             "max sentences 0": ["--max-sentences", "0"], "dropout 1": ["--dropout", "1"],
             "learning rate 0": ["--learning-rate", "0"], "learning rate inf": ["--learning-rate", "inf"],
             "seeds twice": ["--seeds", "1", "0", "1"],
             "seeds outside 64 bits": ["--seeds", "-1", "0", str(2**64)]}.get(case, [])
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and captured.err.startswith("error: "), captured.err
    assert re.search(message, captured.err.rstrip("\n")), captured.err
    assert not (tmp_path / "run").exists()
    if case != "missing card":
        assert card.read_text(encoding="utf-8").startswith(("# card", LAYER_ANALYSIS_END))


def test_unusable_arguments_exit_with_code_2_from_the_command_line(tmp_path):
    result = subprocess.run([sys.executable, LAYER_ANALYSIS, "--output-dir", str(tmp_path / "run"), "--conll-dir",
                             str(tmp_path), "--brown-dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: task data missing: ") and result.stderr.count("\n") == 1, result.stderr


def test_a_model_folder_that_does_not_load_is_one_error_line_with_nothing_written(converted, tmp_path, capsys):
    """A --model folder with a config.json whose weights or config do not load: one line naming it, exit code 2,
    and no output folder (it was a traceback, after the output folder was made)."""
    cut = tmp_path / "cut"
    shutil.copytree(converted["allennlp-elmo"], cut)
    weights = (cut / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": 16}))
    for folder, message in [(cut, "its weights (.safetensors) cannot be read"), (tmp_path / "bert", "the config is of a bert model")]:
        assert main(["--model", str(folder), "--output-dir", str(tmp_path / "run"), "--max-sentences", "2"]) == 2
        captured = capsys.readouterr()
        assert_only_an_error_line(2, captured.err, f"error: --model {folder}", message)
        assert not (tmp_path / "run").exists()


def test_without_model_the_default_model_and_a_card_changed_during_the_run_is_one_error_line(tmp_path, capsys,
                                                                                             monkeypatch):
    """Without --model the features are the default model's. The card of --update-card is checked before the run and
    read again at its end: one that lost its layer-analysis section meanwhile (here while the table is made) is one
    line `error: ...` (after the loading's progress bars) and exit code 2, with the table left in results.md and the
    card as it was."""
    card = tmp_path / "README.md"
    card.write_text(f"# card\n{LAYER_ANALYSIS_START}\n{LAYER_ANALYSIS_END}\n", encoding="utf-8")
    make_table = layer_analysis.results_markdown

    def table_while_the_card_changes(*args):
        card.write_text("# card, its section removed\n", encoding="utf-8")
        return make_table(*args)

    monkeypatch.setattr(layer_analysis, "results_markdown", table_while_the_card_changes)
    run = tmp_path / "run"
    code = main(["--output-dir", str(run), "--max-sentences", "5", "--ner-epochs", "1", "--pos-epochs", "1",
                 "--inputs", "layer0", "--update-card", str(card)])
    assert_one_error(code, capsys.readouterr().err, f"error: {card}: the model card has no layer-analysis section (a "
                     f"line {LAYER_ANALYSIS_START}, later a line {LAYER_ANALYSIS_END}) to write the table into; the table "
                     f"is in {run / 'results.md'}")
    assert card.read_text(encoding="utf-8") == "# card, its section removed\n"
    assert "| (b) layer 0: character CNN |" in (run / "results.md").read_text(encoding="utf-8")
    settings = json.loads((run / "results.json").read_text())["settings"]
    assert settings["model"] == "the default model (hf_elmo/default-model)"
    key = weights_key(ElmoModel.from_pretrained(default_model_path()))
    assert len(list(run.glob(f"features-ner-train-trained-{key}-5-*.pt"))) == 1


def test_the_settings_paragraph_has_no_line_that_markdown_reads_as_a_numbered_list():
    """The card's paragraph was cut at "initialised with seed" so that the next line began "0. The whole run", which
    Markdown can render as a list (CommonMark does with "1."); nor is a code span cut (textwrap cut `make
    layer-analysis` at its hyphen)."""
    text = ("the untrained model has the same size, initialised with seed 0. The whole run (`make layer-analysis`) "
            "took 11 minutes, seed 1. Then 2) more. ") * 3
    for width in range(40, 80):
        wrapped = markdown_paragraph(text, width)
        assert " ".join(wrapped.split()) == " ".join(text.split())
        assert not re.search(r"^\d+[.)](\s|$)", wrapped, re.M), (width, wrapped)
        assert all(line.count("`") % 2 == 0 for line in wrapped.splitlines()), (width, wrapped)  # (spans whole)


def test_scalar_mix_input_starts_as_the_average_and_single_layers_pick_their_layer():
    features = torch.randn(7, 3, 10)
    mix = LayerInput("mix", 3)
    assert torch.allclose(mix(features), LayerInput("average", 3)(features), atol=1e-6)
    assert torch.equal(LayerInput("layer2", 3)(features), features[:, 2])
    assert torch.equal(LayerInput("untrained", 1)(features[:, :1]), features[:, 0])
    assert {name for name, _ in mix.named_parameters()} == {"scalar_weights", "gamma"}
    assert torch.equal(LayerInput("lstm2_own", 3)(features), features[:, 2] - features[:, 1])


def test_the_second_lstm_alone_is_left_out_for_a_model_without_skip_connections(converted, tmp_path):
    config = ElmoModel.from_pretrained(converted["allennlp-elmo"]).config
    config.use_skip_connections = False
    save_with_fixture_tokenizer(ElmoModel(config), tmp_path / "no-skip", converted)
    results = main(["--model", str(tmp_path / "no-skip"), "--output-dir", str(tmp_path / "run"), "--max-sentences", "10",
                    "--ner-epochs", "1", "--pos-epochs", "1", "--inputs", "layer0", "lstm2_own"])
    assert list(results["inputs"]) == ["layer0"]


def test_a_model_with_word_input_gives_its_untrained_features_with_word_ids(converted_elmoformanylangs, tmp_path):
    """A converted ELMoForManyLangs model reads each word's id in word.dic: the untrained model's token features,
    made for every run, were computed without them (a traceback after the trained features were cached)."""
    results = main(["--model", str(converted_elmoformanylangs["with_words"]), "--output-dir", str(tmp_path / "run"),
                    "--max-sentences", "10", "--ner-epochs", "1", "--pos-epochs", "1", "--inputs", "untrained", "layer0"])
    assert list(results["inputs"]) == ["untrained", "layer0"]


def test_layers_a_model_lacks_are_left_out(converted, tmp_path, capsys):
    """A model of one biLSTM layer: layer 2 (and the second LSTM alone) are left out, said in a line; the run was an
    IndexError after the features were made."""
    config = ElmoModel.from_pretrained(converted["allennlp-elmo"]).config
    config.num_lstm_layers = 1
    save_with_fixture_tokenizer(ElmoModel(config), tmp_path / "one-layer", converted)
    results = main(["--model", str(tmp_path / "one-layer"), "--output-dir", str(tmp_path / "run"), "--max-sentences",
                    "10", "--ner-epochs", "1", "--pos-epochs", "1", "--inputs", "layer1", "layer2", "lstm2_own"])
    assert list(results["inputs"]) == ["layer1"]
    out = capsys.readouterr().out
    assert ": left out, this model has 1 biLSTM layer\n" in out
    assert ": left out, this model's layer 2 holds no skip connection from layer 1\n" in out


def test_fit_reports_the_test_score_of_the_epoch_with_the_best_validation_score():
    """A linear probe on words whose tag is the sign of their first feature, trained on the right tags in epoch 2
    only (on the flipped tags in epochs 1 and 3): validation peaks at epoch 2, and its test score is reported."""
    generator = torch.Generator().manual_seed(0)

    def split(words: int) -> Features:
        vectors = torch.randn(words, 1, 4, generator=generator)
        return Features(vectors.half(), [0, words], (vectors[:, 0, 0] > 0).long())

    splits = {"train": split(512), "validation": split(256), "test": split(256)}
    epochs, scored = [], {}

    def losses(model, train, generator):
        epochs.append(len(epochs) + 1)
        tags = train.labels if epochs[-1] == 2 else 1 - train.labels
        for _ in range(40):
            yield from pos_losses(model, Features(train.vectors, train.offsets, tags), generator)

    def score(model, features):
        name = next(name for name, candidate in splits.items() if candidate is features)
        scored[epochs[-1], name] = pos_accuracy(model, features)
        return scored[epochs[-1], name]

    torch.manual_seed(0)
    best = fit(LinearProbe("layer0", 1, 4, 2), splits, 3, losses, score, learning_rate=0.1, seed=0)
    validation = [scored[epoch, "validation"] for epoch in (1, 2, 3)]
    assert validation[1] > 90.0 > max(validation[0], validation[2]), scored
    assert best == {"validation": validation[1], "test": scored[2, "test"], "epoch": 2}
    assert best["test"] > 90.0


def test_layer_analysis_trains_every_input_caches_features_and_fills_the_card(converted, tmp_path, monkeypatch):
    """Every input trained, the features cached and the card filled; the table names the machine the run took its
    minutes on, its cores (16 here) and its CPU (it said "2 CPU cores" on any machine)."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    card = tmp_path / "README.md"
    card.write_text(f"# card\n{LAYER_ANALYSIS_START}\nPLACEHOLDER\n{LAYER_ANALYSIS_END}\nend\n", encoding="utf-8")
    args = ["--model", str(converted["allennlp-elmo"]), "--output-dir", str(tmp_path / "run"), "--max-sentences", "40",
            "--ner-epochs", "2", "--pos-epochs", "2", "--learning-rate", "0.05", "--update-card", str(card)]
    results = main(args)
    assert list(results["inputs"]) == list(INPUTS)
    for scores in results["inputs"].values():
        assert 0.0 <= scores["ner"]["test"] <= 100.0 and 0.0 <= scores["pos"]["test"] <= 100.0
        assert [run["epoch"] in (1, 2) for run in scores["ner"]["runs"]] == [True]
        assert scores["ner"]["test_sd"] == 0.0  # (one seed)
    # A trained character CNN, even the fixture's tiny one, tags Brown words better than an untrained one.
    pos = {kind: scores["pos"]["test"] for kind, scores in results["inputs"].items()}
    assert pos["layer0"] > pos["untrained"] + 5.0
    assert len(results["findings"]) == 5
    caches = sorted((tmp_path / "run").glob("features-*.pt"))
    assert len(caches) == 12  # 2 tasks x 3 splits x (trained, untrained)
    stamps = [path.stat().st_mtime_ns for path in caches]
    first_text = " ".join((tmp_path / "run" / "results.md").read_text(encoding="utf-8").split())
    assert main(args)["inputs"] == results["inputs"]  # same seed, cached features: the same numbers
    assert [path.stat().st_mtime_ns for path in caches] == stamps
    # The table says when its features came from an earlier run's cache (its time then leaves their computation out).
    again_text = " ".join((tmp_path / "run" / "results.md").read_text(encoding="utf-8").split())
    assert "earlier run" not in first_text and "with the features of an earlier run (from its cache)." in again_text
    assert f"minutes on 16 CPU cores of {cpu_name()}." in first_text and "2 CPU cores" not in first_text
    assert results["settings"]["machine"] == f"16 CPU cores of {cpu_name()}"
    text = card.read_text(encoding="utf-8")
    assert "PLACEHOLDER" not in text and "| (e) learned scalar mix |" in text and text.endswith(f"{LAYER_ANALYSIS_END}\nend\n")
    # The section names the weights it measured (an export of other weights drops it).
    key = weights_key(ElmoModel.from_pretrained(converted["allennlp-elmo"]))
    assert f"{LAYER_ANALYSIS_START}\n<!-- weights: {key} -->\n| input to the task model |" in text
    assert json.loads((tmp_path / "run" / "results.json").read_text())["settings"]["max_sentences"] == 40

    # The cache is keyed by the weights: a model with one weight changed gets features of its own.
    model = ElmoModel.from_pretrained(converted["allennlp-elmo"])
    with torch.no_grad():
        model.char_encoder.projection.bias[0] += 1.0
    save_with_fixture_tokenizer(model, tmp_path / "changed", converted)
    main([*args[:1], str(tmp_path / "changed"), *args[2:], "--inputs", "layer0"])
    assert [path.stat().st_mtime_ns for path in caches] == stamps
    new_caches = sorted(set((tmp_path / "run").glob("features-*.pt")) - set(caches))
    assert len(new_caches) == 12
    old_features = torch.load(next(path for path in caches if path.name.startswith("features-pos-test-trained-")))
    new_features = torch.load(next(path for path in new_caches if path.name.startswith("features-pos-test-trained-")))
    assert not torch.equal(old_features["vectors"], new_features["vectors"])


def test_each_finding_is_judged_by_its_own_comparison():
    """The five findings on made-up scores, each flipped alone: both contextual layers against layer 0 (the weaker
    of the two decides; a tie is no win), the mix against the best single layer (a tie holds), and POS layer 1
    against layer 2; each with the figures it compared."""
    def scores(ner: dict, pos: dict) -> dict:
        return {kind: {"ner": {"test": ner[kind], "test_sd": 0.0}, "pos": {"test": pos[kind], "test_sd": 0.0}}
                for kind in ner}

    ner = {"layer0": 80.0, "layer1": 85.0, "layer2": 86.0, "mix": 87.0}
    pos = {"layer0": 90.0, "layer1": 95.0, "layer2": 94.0, "mix": 95.5}
    names = [f"{task}: {finding}" for task in ("NER", "POS") for finding in (
        "both contextual layers beat the static layer 0", "the learned mix is at least as good as the best single layer")]
    names.append("POS: the first biLSTM layer beats the second")
    findings = layer_findings(scores(ner, pos))
    assert [(text, holds) for text, holds, _ in findings] == [(name, True) for name in names]
    assert findings[0][2] == "85.00 against 80.00, +5.00" and findings[3][2] == "95.50 against 95.00, +0.50"
    flips = [({**ner, "layer1": 80.0}, pos), ({**ner, "mix": 85.9}, pos), (ner, {**pos, "layer2": 89.0}),
             (ner, {**pos, "mix": 94.9}), (ner, {**pos, "layer2": 95.0})]
    for flipped, (ner_flipped, pos_flipped) in enumerate(flips):
        holding = [holds for _, holds, _ in layer_findings(scores(ner_flipped, pos_flipped))]
        assert holding == [index != flipped for index in range(5)], names[flipped]
    tie = layer_findings(scores({**ner, "mix": 86.0}, pos))
    assert tie[1][1] and tie[1][2] == "86.00 against 86.00, +0.00"
    # The margin is that of the figures shown (from the unrounded means it read +1.87 beside 72.45 and 70.59).
    unrounded = layer_findings(scores({**ner, "layer0": 70.586, "layer1": 72.454}, pos))
    assert unrounded[0][2] == "72.45 against 70.59, +1.86"
    without_mix = {kind: value for kind, value in scores(ner, pos).items() if kind != "mix"}
    assert [text for text, _, _ in layer_findings(without_mix)] == [names[0], names[2], names[4]]


def test_several_seeds_train_each_task_model_once_per_seed_and_judge_the_findings_on_the_means(converted, tmp_path):
    """`--seeds 0 1`: every task model twice, the table's cells the mean with the spread between the seeds, the
    findings on the means, with their margins; the trained model's features serve every seed (computed once)."""
    common = ["--model", str(converted["allennlp-elmo"]), "--output-dir", str(tmp_path / "run"), "--max-sentences", "40",
              "--ner-epochs", "1", "--pos-epochs", "2", "--learning-rate", "0.05"]
    single = {seed: main([*common, "--seeds", str(seed)]) for seed in (0, 1)}
    trained = sorted((tmp_path / "run").glob("features-*-trained-*.pt"))
    assert len(trained) == 6 and len(list((tmp_path / "run").glob("features-*-untrained-*.pt"))) == 12
    stamps = [path.stat().st_mtime_ns for path in trained]
    both = main([*common, "--seeds", "0", "1"])
    assert [path.stat().st_mtime_ns for path in trained] == stamps
    for kind, scores in both["inputs"].items():
        for task in ("ner", "pos"):
            runs = [single[seed]["inputs"][kind][task]["runs"][0] for seed in (0, 1)]
            # (the untrained model is the first seed's in both runs: the single run of seed 1 had another one)
            compared = 1 if kind == "untrained" else 2
            assert scores[task]["runs"][:compared] == runs[:compared]
            tests = [run["test"] for run in scores[task]["runs"]]
            assert scores[task]["test"] == pytest.approx(sum(tests) / 2)
            assert scores[task]["test_sd"] == pytest.approx(abs(tests[0] - tests[1]) / 2 ** 0.5)
    assert any(single[0]["inputs"][kind][task] != single[1]["inputs"][kind][task]
               for kind in both["inputs"] for task in ("ner", "pos"))  # (the seed reaches the task models)
    mean = {kind: {task: both["inputs"][kind][task]["test"] for task in ("ner", "pos")} for kind in both["inputs"]}
    text, holds, figures = both["findings"][-1]
    assert text == "POS: the first biLSTM layer beats the second"
    assert holds == (mean["layer1"]["pos"] > mean["layer2"]["pos"])
    assert figures.startswith(f"{mean['layer1']['pos']:.2f} against {mean['layer2']['pos']:.2f}, "
                              f"{mean['layer1']['pos'] - mean['layer2']['pos']:+.2f}")
    markdown = (tmp_path / "run" / "results.md").read_text(encoding="utf-8")
    prose = " ".join(markdown.split())  # (the settings paragraph is wrapped)
    sd = both["inputs"]["mix"]["ner"]["test_sd"]
    assert f"| (e) learned scalar mix | {mean['mix']['ner']:.2f} ± {sd:.2f} |" in markdown
    assert "once per seed (0, 1" in prose and "seed 0;" not in prose


def test_features_are_each_sentences_own_words_whatever_side_the_tokenizer_pads():
    """compute_features reads each sentence's words from the start of its row: a tokenizer that pads on the left
    (a model folder may say so) gave other positions' vectors (up to 3.0 off); the batch is padded on the right."""
    from modeling.layer_analysis import compute_features

    model = ElmoModel.from_pretrained(default_model_path()).eval()
    sentences = [["I", "eat"], ["the", "bank", "of", "the", "river"], ["ok"]]
    labels = [[0] * len(words) for words in sentences]
    with torch.no_grad():
        right, left = (compute_features(model, ElmoTokenizer.from_pretrained(default_model_path(), padding_side=side),
                                        sentences, labels, token_layer_only=False) for side in ("right", "left"))
    assert right.offsets == left.offsets == [0, 2, 7, 8] and torch.equal(right.vectors, left.vectors)
