"""A converted ELMoForManyLangs model through everything else: the Auto classes with hf_elmo and as remote code
without it, both heads with Trainer, the pipelines, `hf-elmo embed` and `hf-elmo demo`, pretraining from scratch
with a character vocabulary, and adaptation with a softmax over the model's word.dic (or, with --new-vocabulary, over
the new text's words)."""

import json
import os
import re
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from datasets import Dataset
from transformers import (
    AutoModel,
    AutoModelForPreTraining,
    AutoTokenizer,
    DataCollatorForTokenClassification,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
    pipeline,
)

from hf_elmo import ElmoForSequenceClassification, ElmoForTokenClassification, ElmoModel, ElmoTokenizer
from hf_elmo.cli import main as hf_elmo_main

from conftest import ELMOFORMANYLANGS
from conversion.convert_elmoformanylangs import convert_elmoformanylangs_to_hf, convert_hf_to_elmoformanylangs
from modeling.vocabulary import Vocabulary
from test_hub import installed_outputs
from test_pretraining import read_log, run_pretrain

SENTENCES = json.loads((ELMOFORMANYLANGS / "sentences.json").read_text(encoding="utf-8"))["sets"]
CHINESE = SENTENCES["chinese"]
TRAIN_TEXT = [" ".join(words) for group in SENTENCES.values() for words in group] * 3


@pytest.fixture(scope="module")
def folder(converted_elmoformanylangs) -> Path:
    return converted_elmoformanylangs["with_words"]


@pytest.fixture(scope="module")
def tokenizer(folder):
    return ElmoTokenizer.from_pretrained(folder)


def test_auto_classes_and_remote_code_without_hf_elmo(folder, tokenizer, python_without_hf_elmo, tmp_path):
    """With hf_elmo the Auto classes build ElmoModel and ElmoTokenizer (char.dic, word.dic); without it the folder's
    own code (lexicon.py included) gives the same outputs."""
    assert type(AutoTokenizer.from_pretrained(folder)) is ElmoTokenizer and type(AutoModel.from_pretrained(folder)) is ElmoModel
    torch.manual_seed(0)
    tagger = ElmoForTokenClassification.from_pretrained(folder, num_labels=3)
    torch.nn.init.normal_(tagger.classifier.weight)
    tagger.save_pretrained(tmp_path / "tagger")
    tokenizer.save_pretrained(tmp_path / "tagger")
    probe = Path(__file__).with_name("remote_code_probe.py")
    spec = f"{tmp_path / 'tagger'}:AutoModelForTokenClassification"
    result = subprocess.run([python_without_hf_elmo, probe, tmp_path / "outputs.pt", spec], cwd=tmp_path,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home"), "PYTHONPATH": ""},
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    remote = torch.load(tmp_path / "outputs.pt")[spec]
    assert remote["tokenizer"].startswith("transformers_modules.") and remote["AutoModel class"] == "ElmoModel"
    for name, expected in installed_outputs(tmp_path / "tagger", "AutoModelForTokenClassification").items():
        assert torch.equal(remote[name], expected), name


def test_both_heads_train_with_trainer(folder, tokenizer, tmp_path):
    """Collators pad input_word_ids and Trainer passes them on (a model without them would raise)."""
    words = CHINESE + SENTENCES["english"]
    tags = [[i % 3 for i in range(len(sentence))] for sentence in words]
    token_data = Dataset.from_dict({"words": words, "labels": tags}).map(
        lambda b: tokenizer(b["words"], is_split_into_words=True), batched=True, remove_columns=["words"])
    sentence_data = Dataset.from_dict({"words": words, "label": [0, 1, 0, 1, 0, 1]}).map(
        lambda b: tokenizer(b["words"], is_split_into_words=True), batched=True, remove_columns=["words"])
    assert "input_word_ids" in token_data.column_names
    runs = [
        (ElmoForTokenClassification, token_data, DataCollatorForTokenClassification(tokenizer)),
        (ElmoForSequenceClassification, sentence_data, DataCollatorWithPadding(tokenizer)),
    ]
    for head, data, collator in runs:
        model = head.from_pretrained(folder, num_labels=3 if head is ElmoForTokenClassification else 2)
        mix = model.elmo.scalar_mixes[0].scalar_parameters.detach().clone()
        args = TrainingArguments(output_dir=str(tmp_path / head.__name__), per_device_train_batch_size=3, max_steps=3,
                                 learning_rate=0.1, report_to="none", use_cpu=True, save_strategy="no", seed=0)
        trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=collator)
        assert np.isfinite(trainer.train().training_loss)
        assert not torch.equal(mix, model.elmo.scalar_mixes[0].scalar_parameters.detach())
        predictions = trainer.predict(data).predictions
        assert predictions.shape[0] == len(words)


def test_pipelines(folder, tokenizer):
    model = ElmoModel.from_pretrained(folder).eval()
    extractor = pipeline("feature-extraction", model=model, tokenizer=tokenizer)
    texts = ["天气不错！", "小天你说是吗？", "Apple is a company ."]
    single, batched = extractor(texts, return_tensors=True), extractor(texts, batch_size=3, return_tensors=True)
    for text, one, many in zip(texts, single, batched):
        with torch.no_grad():
            direct = model(**tokenizer(text, return_tensors="pt")).last_hidden_state
        assert one.shape == (1, len(tokenizer.split_words(text)), 16)
        assert torch.equal(one, direct) and torch.allclose(many, one, atol=1e-6)
    classifier = ElmoForSequenceClassification.from_pretrained(folder, num_labels=2, id2label={0: "no", 1: "yes"}).eval()
    scores = pipeline("text-classification", model=classifier, tokenizer=tokenizer)(texts, top_k=None)
    with torch.no_grad():
        logits = classifier(**tokenizer(texts[0], return_tensors="pt")).logits.softmax(-1)[0]
    assert {entry["label"]: entry["score"] for entry in scores[0]} == pytest.approx({"no": logits[0].item(), "yes": logits[1].item()})
    torch.manual_seed(0)
    tagger = ElmoForTokenClassification.from_pretrained(folder, num_labels=3).eval()
    entities = pipeline("token-classification", model=tagger, tokenizer=tokenizer)(texts[0])
    with torch.no_grad():
        probabilities = tagger(**tokenizer(texts[0], return_tensors="pt")).logits.softmax(-1)[0]
    assert [(entity["word"], entity["start"], entity["end"]) for entity in entities] == [
        (word, i, i + 1) for i, word in enumerate("天气不错！")]
    assert [entity["score"] for entity in entities] == pytest.approx(probabilities.amax(-1).tolist())


def test_embed_command_gives_the_packages_layers(folder, tmp_path):
    """`hf-elmo embed --model` on segmented Chinese, one sentence per line: the package's every layer."""
    (tmp_path / "zh.txt").write_text("".join(" ".join(words) + "\n" for words in CHINESE), encoding="utf-8")
    assert hf_elmo_main(["embed", str(tmp_path / "zh.txt"), str(tmp_path / "zh.hdf5"), "--model", str(folder)]) == 0
    with np.load(ELMOFORMANYLANGS / "with_words_outputs.npz") as expected, h5py.File(tmp_path / "zh.hdf5") as found:
        for i in range(len(CHINESE)):
            np.testing.assert_allclose(found[str(i)][...], expected[f"chinese/{i}/all"], rtol=0, atol=2e-5)


def test_demo_command(folder, capsys, tmp_path):
    assert hf_elmo_main(["demo", "--model", str(folder), "--plot", str(tmp_path / "senses.png")]) == 0
    out = capsys.readouterr().out
    assert "(3 layers, each 16 wide)" in out
    row = re.search(r"^天 / 天\s+((?:-?\d\.\d{4}\s*){4})$", out, re.M)
    cosines = [float(value) for value in row.group(1).split()]
    assert cosines[0] == 1.0 and all(value < 0.999 for value in cosines[1:])
    assert (tmp_path / "senses.png").read_bytes()[:4] == b"\x89PNG"


# ---- pretraining -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "text.txt"
    path.write_text("\n".join(TRAIN_TEXT) + "\n", encoding="utf-8")
    return path


def test_pretraining_from_scratch_with_a_character_vocabulary(corpus, tmp_path):
    """--alphabet vocabulary builds char.dic and word.dic from the text as the package's training builds them; the
    model reads word ids too, predicts word.dic, and converts to the package's format and back unchanged."""
    run = tmp_path / "run"
    run_pretrain(tmp_path, "--preset", "tiny", "--alphabet", "vocabulary", "--word-embedding-dim", 4,
                 "--train-file", corpus, "--validation-file", corpus, "--max-steps", 30, "--batch-size", 4,
                 "--unroll-steps", 5, "--save-steps", 6, "--eval-steps", 10, "--seed", 3, "--output-dir", run)
    tokenizer = ElmoTokenizer.from_pretrained(run)
    chars, words = tokenizer.lexicon.chars, tokenizer.lexicon.words
    first_characters = list(dict.fromkeys("".join(TRAIN_TEXT[0].split())))
    assert list(chars)[: len(first_characters)] == first_characters
    assert list(chars)[-6:] == ["<bos>", "<eos>", "<oov>", "<pad>", "<bow>", "<eow>"]
    assert list(words)[:4] == ["<oov>", "<bos>", "<eos>", "<pad>"]
    assert Vocabulary.from_file(run / "vocab.txt").words == list(words)  # the softmax predicts word.dic
    assert (run / "checkpoint-24" / "char.dic").read_bytes() == (run / "char.dic").read_bytes()
    pretrained = AutoModelForPreTraining.from_pretrained(run)
    assert pretrained.config.lm_vocab_size == len(words) and pretrained.config.word_vocab_size == len(words)
    evaluations = [r["eval_forward_perplexity"] for r in read_log(run) if "eval_forward_perplexity" in r]
    assert len(evaluations) == 3 and evaluations[-1] < evaluations[0]  # held-out perplexity at steps 10, 20, 30
    # A resumed run spells words with the run's own char.dic and word.dic (kept in the checkpoint).
    char_dic = (run / "char.dic").read_bytes()
    run_pretrain(tmp_path, "--preset", "tiny", "--alphabet", "vocabulary", "--word-embedding-dim", 4,
                 "--train-file", corpus, "--validation-file", corpus, "--max-steps", 36, "--batch-size", 4,
                 "--unroll-steps", 5, "--save-steps", 6, "--eval-steps", 10, "--seed", 3, "--output-dir", run, "--resume")
    assert max(r["step"] for r in read_log(run)) == 36 and (run / "char.dic").read_bytes() == char_dic

    convert_hf_to_elmoformanylangs(run, tmp_path / "package")
    back = convert_elmoformanylangs_to_hf(tmp_path / "package", tmp_path / "back")
    batch = tokenizer(CHINESE, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = ElmoModel.from_pretrained(run).eval()(**batch).hidden_states
        found = ElmoModel.from_pretrained(back).eval()(**batch).hidden_states
    for layer_expected, layer_found in zip(expected, found):
        assert torch.equal(layer_expected, layer_found)


def test_adaptation_fits_a_softmax_over_the_models_word_dic(folder, corpus, tmp_path, capsys):
    data = ["--train-file", corpus, "--validation-file", corpus, "--batch-size", 4, "--unroll-steps", 5,
            "--negative-samples", 0, "--save-steps", 0, "--optimizer", "adamw", "--seed", 3]
    fitted, adapted = tmp_path / "softmax", tmp_path / "adapted"
    run_pretrain(tmp_path, *data, "--init-from", folder, "--freeze-body", "--learning-rate", 0.05, "--max-steps", 20,
                 "--output-dir", fitted)
    words = ElmoTokenizer.from_pretrained(folder).lexicon.words
    assert Vocabulary.from_file(fitted / "vocab.txt").words == sorted(words, key=words.get)
    assert AutoModelForPreTraining.from_pretrained(fitted).config.lm_vocab_size == len(words)
    original, body = ElmoModel.from_pretrained(folder), ElmoModel.from_pretrained(fitted)
    assert all(torch.equal(t, body.state_dict()[n]) for n, t in original.state_dict().items())  # frozen
    run_pretrain(tmp_path, *data, "--init-from", fitted, "--learning-rate", 0.01, "--max-steps", 40, "--output-dir", adapted)
    evaluations = [r for r in read_log(adapted) if "eval_forward_perplexity" in r]
    assert evaluations[0]["step"] == 0 and evaluations[-1]["step"] == 40
    assert evaluations[-1]["eval_forward_perplexity"] < 0.9 * evaluations[0]["eval_forward_perplexity"]  # 26.1 -> 21.9
    # The adapted model is still in the package's form; its softmax, which the package's Embedder does not read, is
    # left out, which the command says (it said nothing before).
    convert_hf_to_elmoformanylangs(adapted, tmp_path / "package")
    assert (tmp_path / "package" / "word.dic").read_bytes() == (ELMOFORMANYLANGS / "with_words" / "word.dic").read_bytes()
    from conversion.convert_elmoformanylangs import main as convert_main

    capsys.readouterr()
    assert convert_main(["--to-elmoformanylangs", "--model-dir", str(adapted), "--output-dir", str(tmp_path / "again")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"left out: the pretraining softmax over {len(words)} words, which the package's Embedder does not read (its "
        "own training would need it as classifier.pkl, which is not written)")


def test_new_vocabulary_builds_the_softmax_from_the_new_text(folder, tmp_path):
    """--new-vocabulary: adaptation builds the softmax vocabulary from the new text (<S> </S> <UNK>, then its words by
    frequency) instead of keeping the model's word.dic, with a new softmax over it; the model still reads its own
    char.dic and word.dic."""
    text = tmp_path / "new.txt"
    text.write_text("zeta beta beta 天\nbeta 气 zeta\n", encoding="utf-8")
    data = ["--train-file", text, "--batch-size", 2, "--unroll-steps", 3, "--max-steps", 1, "--save-steps", 0,
            "--eval-steps", 0, "--seed", 3]
    kept, new = tmp_path / "kept", tmp_path / "new"
    run_pretrain(tmp_path, *data, "--init-from", folder, "--output-dir", kept)
    run_pretrain(tmp_path, *data, "--init-from", folder, "--new-vocabulary", "--output-dir", new)
    words = ElmoTokenizer.from_pretrained(folder).lexicon.words
    assert Vocabulary.from_file(kept / "vocab.txt").words == sorted(words, key=words.get)
    expected = ["<S>", "</S>", "<UNK>", "beta", "zeta", "天", "气"]
    assert Vocabulary.from_file(new / "vocab.txt").words == expected
    model = AutoModelForPreTraining.from_pretrained(new)
    assert model.config.lm_vocab_size == len(expected) and model.softmax.weight.shape[0] == len(expected)
    assert model.config.word_vocab_size == len(words)  # (the input's word.dic is the model's own)
    assert (new / "word.dic").read_bytes() == (folder / "word.dic").read_bytes()
    assert (new / "char.dic").read_bytes() == (folder / "char.dic").read_bytes()
    # From a pretraining output, whose vocab.txt would be kept otherwise, too.
    (tmp_path / "other.txt").write_text("气 气 beta\n天 气\n", encoding="utf-8")
    data[1] = tmp_path / "other.txt"
    run_pretrain(tmp_path, *data, "--init-from", new, "--new-vocabulary", "--output-dir", tmp_path / "again")
    assert Vocabulary.from_file(tmp_path / "again" / "vocab.txt").words == ["<S>", "</S>", "<UNK>", "气", "beta", "天"]
