"""modeling/layer_analysis.py: what mutations showed no test held. The table's every column and its findings'
verdicts, a single seed's cells without a spread, the spread the findings quote, the mean validation score over
seeds, the mix's gamma, the seed of `fit` (the order of its batches) and its first best epoch on a tie, the NER score
taken in eval mode, --dropout 0 accepted, an --output-dir that is a file refused first, and the untrained model
initialised by the first seed."""

import copy
import re

import pytest
import torch

from conftest import assert_one_error

from hf_elmo import ElmoModel, ElmoTokenizer
from modeling.layer_analysis import (INPUTS, BiLstmTagger, Features, LayerInput, LinearProbe, compute_features, fit,
                                     layer_findings, main, ner_f1, over_seeds, pos_accuracy, pos_losses,
                                     results_markdown)
from modeling.task_data import NER_TAGS

from test_layer_analysis import task_data
from test_modeling_promises import layer_analysis_args, write_task_data


def settings(seeds: list[int]) -> dict:
    return {"seeds": seeds, "features_cached": False, "ner_sentences": "40 / 40 / 40 sentences", "ner_hidden": 64,
            "dropout": 0.2, "ner_epochs": 3, "pos_sentences": "40 / 40 / 40 sentences", "pos_tags": 12, "pos_epochs": 5,
            "learning_rate": 0.002, "batch_size": 32, "model": "a model", "minutes": 3.0, "machine": "2 CPU cores of x"}


def run(test: float, validation: float, test_sd: float = 0.0) -> dict:
    return {"test": test, "validation": validation, "test_sd": test_sd, "runs": []}


def test_the_table_has_each_tasks_own_columns_and_the_findings_verdicts():
    """Each row: NER test, NER validation, POS test, POS validation, in that order (each column its own figure);
    one seed: the cells without a spread; each finding with its verdict and figures; the untrained model named with
    the first seed."""
    results = {"inputs": {"layer0": {"ner": run(11.0, 12.0), "pos": run(13.0, 14.0)},
                          "mix": {"ner": run(21.0, 22.0), "pos": run(23.0, 24.0)}},
               "findings": [("NER: holding", True, "1.00 against 0.00, +1.00"),
                            ("POS: failing", False, "0.00 against 1.00, -1.00")]}
    table = results_markdown(results, settings([7]))
    assert f"| {INPUTS['layer0']} | 11.00 | 12.00 | 13.00 | 14.00 |" in table.splitlines()
    assert f"| {INPUTS['mix']} | 21.00 | 22.00 | 23.00 | 24.00 |" in table.splitlines()
    assert "±" not in table
    assert "- NER: holding: **holds** (1.00 against 0.00, +1.00)" in table.splitlines()
    assert "- POS: failing: **does not hold** (0.00 against 1.00, -1.00)" in table.splitlines()
    prose = " ".join(table.split())
    assert "seed 7; each cell is the test score" in prose and "initialised with seed 7." in prose
    several = results_markdown({**results, "inputs": {"mix": {"ner": run(21.0, 22.0, 1.5), "pos": run(23.0, 24.0, 0.25)}}},
                               settings([7, 3]))
    assert f"| {INPUTS['mix']} | 21.00 ± 1.50 | 22.00 | 23.00 ± 0.25 | 24.00 |" in several.splitlines()
    assert "initialised with seed 7." in " ".join(several.split())


def test_the_findings_quote_the_spread_between_seeds_and_validation_is_the_mean_over_seeds():
    """A finding compared across seeds names the larger standard deviation of the two figures it compares;
    over_seeds' validation score is the mean of the runs' (the table's validation columns), as its test score is."""
    def scores(sd: dict) -> dict:
        base = {"layer0": 80.0, "layer1": 85.0, "layer2": 86.0}
        return {kind: {task: {"test": value, "test_sd": sd.get(kind, 0.0)} for task in ("ner", "pos")}
                for kind, value in base.items()}

    findings = layer_findings(scores({"layer1": 1.5, "layer0": 0.5}))
    assert findings[0][2] == "85.00 against 80.00, +5.00; standard deviation between seeds up to 1.50"
    assert layer_findings(scores({}))[0][2] == "85.00 against 80.00, +5.00"
    summary = over_seeds([{"validation": 80.0, "test": 70.0, "epoch": 1}, {"validation": 90.0, "test": 74.0, "epoch": 2}])
    assert summary["validation"] == pytest.approx(85.0) and summary["test"] == pytest.approx(72.0)


def test_the_learned_mix_is_scaled_by_gamma():
    """Peters et al.'s eq. 1: gamma times the softmax-weighted sum; gamma is learned with the weights."""
    features = torch.randn(5, 3, 8)
    mix = LayerInput("mix", 3)
    with torch.no_grad():
        mix.gamma.fill_(2.5)
        mix.scalar_weights.copy_(torch.tensor([0.0, 1.0, -1.0]))
    weights = torch.softmax(torch.tensor([0.0, 1.0, -1.0]), dim=0)
    assert torch.allclose(mix(features), 2.5 * (weights[:, None] * features).sum(dim=1), atol=1e-6)
    mix(features).sum().backward()
    assert mix.gamma.grad is not None and mix.gamma.grad.abs() > 0


def probe_splits() -> dict[str, Features]:
    generator = torch.Generator().manual_seed(0)

    def split(words: int) -> Features:
        vectors = torch.randn(words, 1, 4, generator=generator)
        return Features(vectors.half(), [0, words], (vectors[:, 0, 0] > 0).long())

    return {"train": split(1024), "validation": split(64), "test": split(64)}


def test_fit_draws_its_batches_in_the_order_its_seed_gives():
    """The seed of `fit` orders the batches (the table's seeds vary it with the initialisation): the same model
    trained with seed 0 twice is the same; with seed 1 it is another."""
    splits = probe_splits()
    torch.manual_seed(0)
    start = LinearProbe("layer0", 1, 4, 2)
    trained = {}
    for name, seed in (("first", 0), ("again", 0), ("other", 1)):
        trained[name] = copy.deepcopy(start)
        fit(trained[name], splits, 1, pos_losses, pos_accuracy, learning_rate=0.05, seed=seed)
    weight = {name: model.classifier.weight for name, model in trained.items()}
    assert torch.equal(weight["first"], weight["again"]) and not torch.equal(weight["first"], weight["other"])


def test_fit_keeps_the_first_epoch_of_the_best_validation_score():
    """Validation scores that tie (a tiny model's NER F1 is often 0.0 epoch after epoch): the first epoch with the
    best score is kept, with its test score."""
    splits, epochs = probe_splits(), []

    def losses(model, train, generator):
        epochs.append(len(epochs) + 1)
        yield from pos_losses(model, train, generator)

    def score(model, features):
        return 50.0 if features is splits["validation"] else float(epochs[-1])

    torch.manual_seed(0)
    best = fit(LinearProbe("layer0", 1, 4, 2), splits, 3, losses, score, learning_rate=0.05, seed=0)
    assert best == {"validation": 50.0, "test": 1.0, "epoch": 1}


def test_ner_f1_scores_the_tagger_in_eval_mode():
    """ner_f1 switches dropout off (fit leaves the tagger in training mode): a tagger with dropout 0.5 scores 100
    against its own eval-mode predictions, and is left in eval mode."""
    torch.manual_seed(0)
    tagger = BiLstmTagger("layer0", 1, 8, 16, len(NER_TAGS), dropout=0.5)
    lengths = [5, 3, 7, 4] * 4
    offsets = [0]
    for length in lengths:
        offsets.append(offsets[-1] + length)
    vectors = torch.randn(offsets[-1], 1, 8).half()
    tagger.eval()
    with torch.no_grad():
        rows = [tagger(vectors[offsets[k] : offsets[k + 1]][None], torch.tensor([length]))[0].argmax(-1)
                for k, length in enumerate(lengths)]
    features = Features(vectors, offsets, torch.cat(rows))
    assert any(NER_TAGS[t].startswith("B-") for t in features.labels.tolist())
    tagger.train()
    assert ner_f1(tagger, features) == pytest.approx(100.0) and not tagger.training


def test_dropout_0_is_accepted_and_an_output_dir_that_is_a_file_is_refused_first(tmp_path, capsys):
    """--dropout 0 (no dropout) is a value the check lets through (here the run then stops at the empty stand-in task
    data), a negative one is refused; an --output-dir where a file stands is one error naming it, before the task
    data are read (it was a FileExistsError traceback after the model loaded)."""
    conll_dir, brown_dir = task_data(tmp_path / "data")
    common = ["--conll-dir", conll_dir, "--brown-dir", brown_dir, "--output-dir", str(tmp_path / "run")]
    assert main([*common, "--dropout", "0"]) == 2
    err = capsys.readouterr().err
    assert_one_error(2, err, "conll2003", "no sentences")
    assert "--dropout" not in err
    assert main([*common, "--dropout", "-0.1"]) == 2
    assert re.fullmatch(r"error: --dropout must be at least 0 and below 1, got -0\.1\n", capsys.readouterr().err)
    (tmp_path / "file").write_text("x")
    code = main(["--conll-dir", conll_dir, "--brown-dir", brown_dir, "--output-dir", str(tmp_path / "file")])
    assert_one_error(code, capsys.readouterr().err, f"error: {tmp_path / 'file'}: is a file, not a folder")
    assert (tmp_path / "file").read_text() == "x"


def test_the_untrained_model_is_the_first_seeds_in_every_run(converted, tmp_path):
    """Row (a)'s model is initialised with the first seed (its features are cached under that seed): two runs into
    two folders compute the same untrained features, those of `torch.manual_seed(seed); ElmoModel(config)`."""
    data = write_task_data(tmp_path / "data")
    for folder in ("a", "b"):
        torch.manual_seed(100 + len(folder) + ord(folder))  # (whatever the global generator holds before a run)
        main([*layer_analysis_args(converted, *data, tmp_path / folder), "--seeds", "3"])
    (first,) = (tmp_path / "a").glob("features-pos-test-untrained-*-3-*.pt")
    (second,) = (tmp_path / "b").glob(first.name)
    assert torch.equal(torch.load(first)["vectors"], torch.load(second)["vectors"])
    model = ElmoModel.from_pretrained(converted["allennlp-elmo"])
    torch.manual_seed(3)
    untrained = ElmoModel(model.config).eval()
    sentences = [["The", "cat", "sat", "."], ["Dogs", "ran", "."], ["It", "was", "late", "."]]
    expected = compute_features(untrained, ElmoTokenizer.from_pretrained(converted["allennlp-elmo"]), sentences,
                                [[0] * len(s) for s in sentences], token_layer_only=True)
    assert torch.equal(torch.load(first)["vectors"], expected.vectors)
