"""modeling/layer_analysis.py: the paper's layer analysis, run small on the real task data with a fixture ELMo."""

import json

import pytest
import torch

from modeling.export_default import LAYER_ANALYSIS_END, LAYER_ANALYSIS_START
from modeling.layer_analysis import INPUTS, LayerInput, main


def test_scalar_mix_input_starts_as_the_average_and_single_layers_pick_their_layer():
    features = torch.randn(7, 3, 10)
    mix = LayerInput("mix", 3)
    assert torch.allclose(mix(features), LayerInput("average", 3)(features), atol=1e-6)
    assert torch.equal(LayerInput("layer2", 3)(features), features[:, 2])
    assert torch.equal(LayerInput("untrained", 1)(features[:, :1]), features[:, 0])
    assert {name for name, _ in mix.named_parameters()} == {"scalar_weights", "gamma"}


def test_layer_analysis_trains_every_input_caches_features_and_fills_the_card(converted, tmp_path):
    card = tmp_path / "README.md"
    card.write_text(f"# card\n{LAYER_ANALYSIS_START}\nPLACEHOLDER\n{LAYER_ANALYSIS_END}\nend\n", encoding="utf-8")
    args = ["--model", str(converted["allennlp-elmo"]), "--output-dir", str(tmp_path / "run"), "--max-sentences", "40",
            "--ner-epochs", "2", "--pos-epochs", "2", "--learning-rate", "0.05", "--update-card", str(card)]
    results = main(args)
    assert list(results["inputs"]) == list(INPUTS)
    for scores in results["inputs"].values():
        assert 0.0 <= scores["ner"]["test"] <= 100.0 and 0.0 <= scores["pos"]["test"] <= 100.0
        assert scores["ner"]["epoch"] in (1, 2)
    # A trained character CNN, even the fixture's tiny one, tags Brown words better than an untrained one.
    pos = {kind: scores["pos"]["test"] for kind, scores in results["inputs"].items()}
    assert pos["layer0"] > pos["untrained"] + 5.0
    assert len(results["findings"]) == 5
    caches = sorted((tmp_path / "run").glob("features-*.pt"))
    assert len(caches) == 12  # 2 tasks x 3 splits x (trained, untrained)
    stamps = [path.stat().st_mtime_ns for path in caches]
    assert main(args)["inputs"] == results["inputs"]  # same seed, cached features: the same numbers
    assert [path.stat().st_mtime_ns for path in caches] == stamps
    text = card.read_text(encoding="utf-8")
    assert "PLACEHOLDER" not in text and "| (e) learned scalar mix |" in text and text.endswith(f"{LAYER_ANALYSIS_END}\nend\n")
    assert json.loads((tmp_path / "run" / "results.json").read_text())["settings"]["max_sentences"] == 40
