"""modeling/finetune.py on slices of the real task data (from `make data`), and the metrics and data it uses.

The fixture biLM was trained on a few sentences only, so these runs train it too (--finetune-bilm) for a few
dozen steps; the README's full runs give the held-out numbers.
"""

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from huggingface_hub import ModelCard
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

from hf_elmo import ElmoForSequenceClassification, ElmoForTokenClassification, ElmoModel, ElmoTokenizer
from hf_elmo.files import PROXY_VARIABLES
from modeling.finetune import check_inputs, encode, finetune, main, parse_args
from modeling.metrics import entity_scores, entity_spans
from modeling.task_data import NER_TAGS, load_conll2003, load_rotten_tomatoes

from conftest import REPO, assert_one_error
from test_hub import fake_hub_snapshot


@pytest.fixture(autouse=True)
def one_thread():
    """The tiny fixture model trains fastest on one thread, and a busy 2-core machine makes two threads crawl."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def run_finetune(*args) -> dict:
    """finetune.py's run in this process: its results."""
    return finetune(parse_args([str(arg) for arg in args]))


def test_entity_spans_read_iob1_and_iob2_as_conlleval_does():
    assert entity_spans(["B-PER", "I-PER", "O", "B-LOC"]) == [("PER", 0, 2), ("LOC", 3, 4)]
    assert entity_spans(["I-ORG", "I-ORG", "B-ORG", "I-LOC"]) == [("ORG", 0, 2), ("ORG", 2, 3), ("LOC", 3, 4)]
    assert entity_spans(["O", "I-MISC", "B-MISC", "I-MISC"]) == [("MISC", 1, 2), ("MISC", 2, 4)]
    assert entity_spans(["O", "O"]) == []
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG"]]
    predicted = [["B-PER", "I-PER", "O", "B-ORG"], ["O"]]
    # 1 of 2 predicted entities is right, 1 of 3 gold entities is found.
    assert entity_scores(gold, predicted) == pytest.approx({"precision": 50.0, "recall": 100 / 3, "f1": 40.0})
    # Predictions that do not line up with the gold tags are refused, not scored.
    with pytest.raises(ValueError, match=r"^2 gold sentences but 1 predicted ones$"):
        entity_scores(gold, predicted[:1])
    with pytest.raises(ValueError, match=r"^a sentence has 4 gold tags but 3 predicted ones$"):
        entity_scores(gold, [predicted[0][:3], predicted[1]])


def test_task_data_splits():
    conll = load_conll2003()
    assert {name: len(split) for name, split in conll.items()} == {"train": 14041, "validation": 3250, "test": 3453}
    assert conll["train"][0]["words"][:3] == ["EU", "rejects", "German"]
    assert [NER_TAGS[tag] for tag in conll["train"][0]["ner_tags"][:3]] == ["B-ORG", "O", "B-MISC"]
    reviews = load_rotten_tomatoes()
    texts = {name: set(split["text"]) for name, split in reviews.items()}
    assert sum(map(len, texts.values())) == sum(map(len, reviews.values())) == 12752  # no snippet twice
    assert not (texts["train"] & texts["test"]) and not (texts["validation"] & texts["test"])
    assert [len(reviews[name]) for name in ("train", "validation", "test")] == [10201, 1275, 1276]
    assert reviews["train"].features["label"].names == ["rotten", "fresh"]
    for split in reviews.values():  # stratified: fresh is 57.8% of every split
        assert abs(np.mean(split["label"]) - 0.578) < 0.002


def test_ner_finetuning_learns_and_saves_a_reloadable_model(converted, tmp_path, capsys):
    output = tmp_path / "ner"
    results = run_finetune(
        "--task", "ner", "--model", converted["allennlp-elmo"], "--output-dir", output, "--finetune-bilm",
        "--max-train-examples", 600, "--max-eval-examples", 200, "--max-steps", 60, "--batch-size", 16,
        "--learning-rate", 1e-2, "--warmup-steps", 0, "--logging-steps", 5,
    )
    losses = results["logged_losses"]
    assert np.mean(losses[-3:]) < 0.8 * np.mean(losses[:2]), losses
    # Held-out sentences: entities found (predicting "O" everywhere finds none) and more words right.
    assert results["test"]["f1"] > 5.0
    assert results["test"]["token_accuracy"] > results["majority_baseline_test"]["token_accuracy"] + 0.5
    assert json.loads((output / "results.json").read_text())["test"] == results["test"]
    # What it prints: the scores, rounded to 4 decimals (results.json keeps every digit), then where it wrote.
    printed = capsys.readouterr().out
    scores, last_line = printed[printed.rindex('{\n "validation"'):].rsplit("\n", 2)[:2]
    assert json.loads(scores)["test"] == {name: round(value, 4) for name, value in results["test"].items()}
    assert last_line == f"wrote and verified {output} (the model, its tokenizer, results.json and its card, README.md)"
    # What was trained: 60 steps of the 38 batches of 16 in 600 examples (not the 3 epochs --epochs defaults to).
    assert results["steps"] == 60 and results["epochs"] == pytest.approx(60 / 38)
    assert results["validation_per_epoch"] == []  # (with --max-steps, no evaluation after each epoch)

    card = (output / "README.md").read_text()
    assert "pipeline_tag: token-classification" in card and "- elmo" in card and "custom_code" in card
    assert "\nlanguage: en\n" in card  # (an English task)
    assert "1.58 epochs (60 steps), 600 training examples); scored on the first 200 of 3,453 test examples and the " \
           "first 200 of 3,250 validation examples." in card  # (--max-eval-examples: not the whole splits' scores)
    assert (results["test_examples"], results["test_examples_in_split"]) == (200, 3453)
    assert "base_model" not in card  # a local folder: nothing for the Hub to link to
    assert f"| test | {results['test']['f1']:.2f} |" in card and "${" not in card
    assert '.from_pretrained("ner")' in card  # (--model-id's default: the output folder's name)
    assert "license:" not in card  # (the converted model's card names none, and --license gave none)
    model = AutoModelForTokenClassification.from_pretrained(output)
    assert type(model) is ElmoForTokenClassification and model.config.id2label[1] == "B-PER"
    # --finetune-bilm: the biLM learned too, not only the task's mix and classifier.
    before, after = ElmoModel.from_pretrained(converted["allennlp-elmo"]).state_dict(), model.elmo.state_dict()
    assert not [name for name in before if torch.equal(before[name], after[name])]
    # (its tokenizer saved, not made from config.json: remote code finds a tokenizer in tokenizer_config.json only)
    assert (output / "tokenizer_config.json").is_file() and type(ElmoTokenizer.from_pretrained(output)) is ElmoTokenizer
    assert not (output / "trainer").exists()


def test_a_folder_that_does_not_reload_as_trained_is_refused_and_nothing_is_written(converted, tmp_path, monkeypatch):
    """The saved folder is reloaded and checked before success: a saved weight that differs from the trained one
    is an error, and the output folder is written completely or not at all (an older one stays as it was)."""
    save_pretrained = ElmoForTokenClassification.save_pretrained

    def save_with_one_weight_changed(self, *args, **kwargs):
        bias = self.classifier.bias.detach().clone()
        with torch.no_grad():
            self.classifier.bias[0] += 1.0
        try:
            save_pretrained(self, *args, **kwargs)
        finally:
            with torch.no_grad():
                self.classifier.bias.copy_(bias)

    monkeypatch.setattr(ElmoForTokenClassification, "save_pretrained", save_with_one_weight_changed)
    arguments = ["--task", "ner", "--model", str(converted["allennlp-elmo"]), "--max-train-examples", "16",
                 "--max-eval-examples", "8", "--max-steps", "1", "--batch-size", "8", "--logging-steps", "1"]
    with pytest.raises(RuntimeError, match=r"the reloaded model differs from the trained one by 1"):
        run_finetune(*arguments, "--output-dir", tmp_path / "ner")
    assert list(tmp_path.iterdir()) == []
    older = tmp_path / "older"
    older.mkdir()
    (older / "results.json").write_text("{}")
    with pytest.raises(RuntimeError, match=r"the reloaded model differs"):
        run_finetune(*arguments, "--output-dir", older, "--overwrite")
    assert list(tmp_path.iterdir()) == [older] and [p.name for p in older.iterdir()] == ["results.json"]


def script_env(tmp_path: Path) -> dict:
    """The environment of finetune.py run as a script: its own datasets cache, offline, one thread."""
    return {**os.environ, "HF_DATASETS_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(REPO)}


def files_of_200_kB() -> None:
    """A preexec_fn: files of at most 200 kB (the weights take 400 kB), a write past it failing (EFBIG) rather than
    killing the process (SIGXFSZ ignored)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.RLIM_INFINITY))


def test_a_model_that_cannot_be_written_is_one_line_and_the_output_folder_is_left_as_it_was(converted, tmp_path):
    """A full disk (here a file size limit, SIGXFSZ ignored so that the write fails with EFBIG instead of killing the
    process) while the trained model is saved was safetensors' traceback, exit code 1. Now one line names
    --output-dir and the cause, exit code 2; the staging folder is removed and an older output folder stays as it
    was."""
    older = tmp_path / "ner"
    older.mkdir()
    (older / "results.json").write_text("{}")

    env = script_env(tmp_path)
    result = subprocess.run(
        [sys.executable, str(REPO / "modeling" / "finetune.py"), "--task", "ner", "--model", str(converted["allennlp-elmo"]),
         "--data-dir", str(REPO / "data"), "--output-dir", str(older), "--overwrite", "--max-train-examples", "16",
         "--max-eval-examples", "8", "--max-steps", "1", "--batch-size", "8", "--logging-steps", "1"],
        capture_output=True, text=True, env=env, timeout=300, preexec_fn=files_of_200_kB)
    assert_one_error(result.returncode, result.stderr, f"error: --output-dir {older}: the fine-tuned model could not "
                     "be written (SafetensorError: ", "File too large", "nothing is written there and the training "
                     "is not kept")
    assert [path.name for path in tmp_path.iterdir() if path.name != "cache"] == ["ner"]  # (no staging folder left)
    assert [path.name for path in older.iterdir()] == ["results.json"] and (older / "results.json").read_text() == "{}"


def test_a_model_that_reads_word_ids_fine_tunes_and_passes_the_reload_check(converted_elmoformanylangs, tmp_path):
    """ELMoForManyLangs' models read each word's id in word.dic besides its characters. The reload check fed the
    model the character ids and the mask only, so every such run trained and then failed with a ValueError
    (`pass input_word_ids`), writing nothing."""
    source = converted_elmoformanylangs["with_words"]
    assert "input_word_ids" in ElmoTokenizer.from_pretrained(source).model_input_names
    for task, auto_class in (("ner", AutoModelForTokenClassification), ("sentiment", AutoModelForSequenceClassification)):
        output = tmp_path / task
        run_finetune("--task", task, "--model", source, "--output-dir", output, "--max-train-examples", 8,
                     "--max-eval-examples", 4, "--max-steps", 1, "--batch-size", 4, "--logging-steps", 1)
        assert auto_class.from_pretrained(output).config.word_embedding_dim > 0
        assert json.loads((output / "results.json").read_text())["steps"] == 1


def test_feature_based_by_default_with_validation_after_each_epoch(converted, tmp_path):
    """Without --finetune-bilm the biLM stays as it was (only the task's mix and classifier learn), and results.json
    holds the validation after each epoch and the majority-class baseline of the test slice."""
    source = converted["allennlp-elmo"]
    returned = run_finetune("--task", "ner", "--model", source, "--max-train-examples", 16, "--max-eval-examples", 8,
                            "--epochs", 2, "--batch-size", 8, "--logging-steps", 1, "--output-dir", tmp_path / "ner")
    results = json.loads((tmp_path / "ner" / "results.json").read_text())
    assert results == json.loads(json.dumps(returned))
    assert (results["epochs"], results["steps"]) == (2.0, 4)
    assert [entry["epoch"] for entry in results["validation_per_epoch"]] == [1.0, 2.0]
    assert all("f1" in entry and "token_accuracy" in entry for entry in results["validation_per_epoch"])
    assert not results["finetune_bilm"]
    before = ElmoModel.from_pretrained(source).state_dict()
    after = ElmoForTokenClassification.from_pretrained(tmp_path / "ner").elmo.state_dict()
    learned = [name for name in before if not torch.equal(before[name], after[name])]
    assert learned == ["scalar_mixes.0.scalar_parameters", "scalar_mixes.0.gamma"], learned  # the task's mix only
    tags = np.concatenate([np.asarray(tags) for tags in load_conll2003()["test"].select(range(8))["ner_tags"]])
    expected = 100.0 * float((tags == NER_TAGS.index("O")).mean())  # always "O", the most frequent tag
    assert results["majority_baseline_test"] == pytest.approx({"f1": 0.0, "token_accuracy": expected})


def test_sentiment_finetuning_fits_its_slice(converted, tmp_path):
    """On the 64 reviews it trained on, the classifier ends far above always answering the majority class. The
    card keeps the license of the base model's card."""
    base = tmp_path / "base"
    shutil.copytree(converted["allennlp-elmo"], base)
    card = (base / "README.md").read_text(encoding="utf-8")
    (base / "README.md").write_text(card.replace("\nlanguage: en\n", "\nlicense: apache-2.0\nlanguage: en\n", 1))
    output = tmp_path / "sentiment"
    results = run_finetune(
        "--task", "sentiment", "--model", base, "--output-dir", output,
        "--finetune-bilm", "--max-train-examples", 64, "--max-eval-examples", 64, "--max-steps", 60,
        "--batch-size", 16, "--learning-rate", 1e-2, "--warmup-steps", 0, "--logging-steps", 6,
    )
    losses = results["logged_losses"]
    assert np.mean(losses[-2:]) < 0.5 * np.mean(losses[:2]), losses
    model = AutoModelForSequenceClassification.from_pretrained(output).eval()
    assert type(model) is ElmoForSequenceClassification and model.config.sequence_pooling == "mean_max"
    tokenizer = ElmoTokenizer.from_pretrained(output)
    train = load_rotten_tomatoes()["train"].select(range(64))
    batch = tokenizer(train["text"], padding=True, return_tensors="pt")
    with torch.no_grad():
        accuracy = (model(**batch).logits.argmax(-1).numpy() == np.asarray(train["label"])).mean()
    majority = np.bincount(train["label"]).max() / len(train)
    assert accuracy > majority + 0.15, (accuracy, majority)
    # The baseline: always the training slice's most frequent label, scored on the test slice.
    test_labels = np.asarray(load_rotten_tomatoes()["test"].select(range(64))["label"])
    expected = 100.0 * float((test_labels == np.bincount(train["label"]).argmax()).mean())
    assert results["majority_baseline_test"] == pytest.approx({"accuracy": expected})
    assert ModelCard.load(output / "README.md").data.license == "apache-2.0"
    assert "pipeline_tag: text-classification" in (output / "README.md").read_text()
    assert encode("sentiment", train.select(range(2)), tokenizer)["length"] == [len(tokenizer.split_words(t)) for t in train["text"][:2]]


def test_two_processes_fine_tune_into_one_output_folder(converted, tmp_path):
    """Under torchrun every process staged an output folder of its own, where Trainer saved the model from the first
    one only: the second's reload check failed in a traceback (exit code 1), and the folders raced to be the output.
    Both train and evaluate now, the first writes the folder, and it reloads to the model it reports."""
    from conftest import run_two_processes

    output = tmp_path / "two"
    env = script_env(tmp_path)
    result = run_two_processes([REPO / "modeling" / "finetune.py", "--task", "sentiment", "--model",
                                converted["allennlp-elmo"], "--output-dir", output, "--data-dir", REPO / "data",
                                "--max-train-examples", 16, "--max-eval-examples", 8, "--max-steps", 2,
                                "--batch-size", 2], env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "find_unused_parameters=True" not in result.stderr  # (every trainable parameter gets a gradient)
    results = json.loads((output / "results.json").read_text())
    assert results["steps"] == 2 and result.stdout.count('"majority_baseline_test"') == 1  # (printed once)
    assert type(AutoModelForSequenceClassification.from_pretrained(output)) is ElmoForSequenceClassification
    assert sorted(path.name for path in tmp_path.iterdir()) == ["cache", "two"]  # (no staging folder left)


def test_two_processes_whose_model_cannot_be_written_say_so_in_one_line_each(converted, tmp_path):
    """The first process writes the model; the second returned as if it had been written, and was stopped by torchrun
    without a word once the first failed. Now each ends with the first's error line."""
    from conftest import run_two_processes

    output = tmp_path / "two"
    env = script_env(tmp_path)
    result = run_two_processes([REPO / "modeling" / "finetune.py", "--task", "ner", "--model",
                                converted["allennlp-elmo"], "--output-dir", output, "--data-dir", REPO / "data",
                                "--max-train-examples", 16, "--max-eval-examples", 8, "--max-steps", 1,
                                "--batch-size", 4], env, preexec_fn=files_of_200_kB)
    said = f"error: --output-dir {output}: the fine-tuned model could not be written (SafetensorError: "
    assert result.returncode != 0 and result.stderr.count(said) == 2, result.stderr[-3000:]
    assert [path.name for path in tmp_path.iterdir() if path.name != "cache"] == []  # (no output, no staging folder)


def test_a_datasets_cache_on_a_full_disk_is_named_not_the_data(converted, tmp_path):
    """Rotten Tomatoes is read into the datasets cache: on a full disk (a file size limit here) the corpus was said
    to be no bzip2-compressed CSV."""
    env = script_env(tmp_path)
    result = subprocess.run(
        [sys.executable, str(REPO / "modeling" / "finetune.py"), "--task", "sentiment", "--model",
         str(converted["allennlp-elmo"]), "--data-dir", str(REPO / "data"), "--output-dir", str(tmp_path / "out"),
         "--max-train-examples", "16", "--max-eval-examples", "8", "--max-steps", "1"],
        capture_output=True, text=True, env=env, timeout=300, preexec_fn=files_of_200_kB)
    assert_one_error(result.returncode, result.stderr, "rotten_tomatoes_corpus_full.csv.bz2: could not be read into "
                     f"the datasets cache {tmp_path / 'cache'} (OSError: [Errno 27] File too large): make room there")


def test_bad_input_is_one_clear_error_before_the_work(converted, tmp_path, capsys):
    """A missing model, data or output problem was a traceback (a ConversionError, an OSError from the Hub client);
    --max-train-examples 0 used all the data, a negative one failed deep in Trainer, --epochs 0 trained nothing.
    The numbers are checked before the data is read (the data folder of those rows does not exist)."""
    model = converted["allennlp-elmo"]
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "results.json").write_text("{}")
    shutil.copytree(converted["allennlp-elmo"], tmp_path / "used" / "elmo")
    output = tmp_path / "out"
    no_data = ["--data-dir", tmp_path / "no-data"]
    numbers = [
        (["--batch-size", 0], "--batch-size must be at least 1, got 0"),
        (["--logging-steps", 0], "--logging-steps must be at least 1, got 0"),
        (["--max-steps", 0], "--max-steps must be at least 1, got 0"),
        (["--max-steps", -1], "--max-steps must be at least 1, got -1"),
        (["--max-train-examples", 0], "--max-train-examples must be at least 1, got 0"),
        (["--max-train-examples", -5], "--max-train-examples must be at least 1, got -5"),
        (["--max-eval-examples", 0], "--max-eval-examples must be at least 1, got 0"),
        (["--epochs", 0], "--epochs must be a finite number above 0, got 0"),
        (["--epochs", -1, "--max-steps", 5], "--epochs must be a finite number above 0, got -1"),
        (["--epochs", "nan"], "--epochs must be a finite number above 0, got nan"),
        (["--learning-rate", 0], "--learning-rate must be a finite number above 0, got 0"),
        (["--warmup-steps", -1], "--warmup-steps must be a whole number of steps, or a fraction of the training "
                                 "steps in [0, 1), got -1"),
        (["--warmup-steps", 2.5], "--warmup-steps must be a whole number of steps, or a fraction of the training "
                                  "steps in [0, 1), got 2.5"),
        (["--dropout", 1], "--dropout must be in [0, 1), got 1"),
        (["--scalar-mix-l2-coef", -0.1], "--scalar-mix-l2-coef must be a finite number >= 0, got -0.1"),
        (["--seed", -1], "--seed must be from 0 to 2**32 - 1 (NumPy's seeds), got -1"),
        (["--seed", 2**32], "--seed must be from 0 to 2**32 - 1 (NumPy's seeds), got 4294967296"),
        (["--license", "Apache License 2.0"], "--license 'Apache License 2.0' is not a license id: give the Hub's"),
        # (it went into the card's code as from_pretrained("a\nb: c"))
        (["--model-id", "a\nb: c"], "--model-id 'a\\nb: c' is not a Hub model id"),
    ]
    for arguments, message in [
        (["--model", "/nonexistent"], "--model /nonexistent: no such folder"),
        (["--model", tmp_path / "file.txt"], f"--model {tmp_path / 'file.txt'}: is a file, not a model folder"),
        (["--model", tmp_path], f"--model {tmp_path}: no config.json, not a model folder"),
        (["--model", model, "--output-dir", tmp_path / "used"],
         f"--output-dir {tmp_path / 'used'}: output folder exists and is not empty (pass --overwrite to replace it)"),
        # (--overwrite deleted an output folder that held the model or the data, without a word)
        (["--model", tmp_path / "used" / "elmo", "--output-dir", tmp_path / "used", "--overwrite"],
         f"--output-dir {tmp_path / 'used'}: the output folder holds the input {tmp_path / 'used' / 'elmo'}, which "
         "replacing it would delete: write to another folder"),
        (["--model", model, "--data-dir", tmp_path / "used", "--output-dir", tmp_path, "--overwrite"],
         f"--output-dir {tmp_path}: the output folder holds the input {tmp_path / 'used'}, which replacing it would "
         "delete: write to another folder"),
        *[(["--model", model, *no_data, *option], message) for option, message in numbers],
        (["--model", model, *no_data],
         f"--data-dir {tmp_path / 'no-data'}: {tmp_path / 'no-data' / 'conll2003' / 'train.txt'}: missing; `make data` downloads"),
    ]:
        code = main([str(argument) for argument in ["--task", "ner", "--output-dir", output, *arguments]])
        assert_one_error(code, capsys.readouterr().err, message)
    assert not output.exists() and sorted(p.name for p in (tmp_path / "used").iterdir()) == ["elmo", "results.json"]
    # The smallest sizes are accepted.
    args = parse_args(["--task", "ner", "--model", str(model), "--output-dir", str(output), "--epochs", "0.5",
                       "--max-train-examples", "1", "--max-eval-examples", "1", "--warmup-steps", "0",
                       "--batch-size", "1", "--logging-steps", "1", "--max-steps", "1", "--dropout", "0"])
    check_inputs(args)


def test_a_model_whose_tokenizer_or_weights_do_not_load_is_one_clear_error(converted, converted_elmoformanylangs,
                                                                          tmp_path, capsys):
    """A --model folder whose char.dic is missing (a ValueError from the tokenizer) or whose model.safetensors is cut
    short (a SafetensorError naming no file) was a traceback; each is one line naming --model, nothing written."""
    no_char_dic = shutil.copytree(converted_elmoformanylangs["chars_only"], tmp_path / "no-char-dic")
    (no_char_dic / "char.dic").unlink()
    cut = shutil.copytree(converted["allennlp-elmo"], tmp_path / "cut")
    weights = (cut / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    for model, message in [(no_char_dic, f"--model {no_char_dic}: {no_char_dic / 'char.dic'}: not found"),
                           (cut, f"--model {cut}: its weights (.safetensors) cannot be read, the file is damaged or "
                                 "incomplete: ")]:
        code = main(["--task", "ner", "--model", str(model), "--output-dir", str(tmp_path / "out"), "--max-steps", "1",
                     "--max-train-examples", "4", "--max-eval-examples", "4"])
        assert_one_error(code, capsys.readouterr().err, message)
    assert not (tmp_path / "out").exists()


def test_a_model_of_another_kind_or_head_is_one_clear_error(converted, tmp_path, capsys):
    """A BERT folder (built as a BERT by the Auto class, which failed inside it on ELMo's options) and a sentiment
    model given for NER (its classifier of another shape: transformers' size-mismatch RuntimeError) were tracebacks;
    each is one line naming --model, nothing written."""
    from transformers import BertConfig, BertModel

    BertModel(BertConfig(vocab_size=16, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32)).save_pretrained(tmp_path / "bert")
    ElmoForSequenceClassification.from_pretrained(converted["allennlp-elmo"], num_labels=2,
                                                  sequence_pooling="mean_max").save_pretrained(tmp_path / "sentiment")
    ElmoTokenizer.from_pretrained(converted["allennlp-elmo"]).save_pretrained(tmp_path / "sentiment")
    for model, message in [(tmp_path / "bert", f"--model {tmp_path / 'bert'}: a bert model, not an ELMo one"),
                           (tmp_path / "sentiment", f"--model {tmp_path / 'sentiment'}: its classifier does not fit "
                                                    "--task ner (9 labels; its classifier.weight is [2, 64], where "
                                                    "the task needs [9, 32]): it was fine-tuned for another head")]:
        code = main(["--task", "ner", "--model", str(model), "--output-dir", str(tmp_path / "out"), "--max-steps", "1",
                     "--max-train-examples", "4", "--max-eval-examples", "4"])
        assert_one_error(code, capsys.readouterr().err, message)
    assert not (tmp_path / "out").exists()


def test_a_hub_base_model_is_named_on_the_card_and_a_local_folder_is_not(converted, tmp_path, monkeypatch, capsys):
    """--model OWNER/NAME, from the hub client's cache (the converted fixture laid out as its download, on a machine
    that cannot look the Hub up: `.invalid` names never resolve): the card names it as base_model and as the
    source. A Hub id the cache does not hold fails at once, saying why (it was tried for about a minute). A folder
    of that name where the script runs wins over the Hub id, and its card names no base_model."""
    hub_id = "hf-elmo-test/elmo-base"
    hf_home = tmp_path / "hf_home"
    fake_hub_snapshot(hf_home, hub_id, converted["allennlp-elmo"])
    small = ["--task", "ner", "--model", hub_id, "--data-dir", REPO / "data", "--max-train-examples", 16,
             "--max-eval-examples", 8, "--max-steps", 1, "--batch-size", 8, "--logging-steps", 1]
    env = {name: value for name, value in os.environ.items()
           if name not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", *PROXY_VARIABLES)}
    env.update(HF_HOME=str(hf_home), HF_ENDPOINT="https://hub.invalid", OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, REPO / "modeling" / "finetune.py", *map(str, small), "--output-dir", str(tmp_path / "hub")],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    card = (tmp_path / "hub" / "README.md").read_text()
    assert f"\nbase_model: {hub_id}\n" in card.split("\n---\n")[0] + "\n"  # in the metadata block
    assert f"`{hub_id}`, fine-tuned on CoNLL-2003" in card
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", "https://hub.invalid")
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    code = main([*map(str, small[:3]), "hf-elmo-test/not-cached", *map(str, small[4:]), "--output-dir",
                 str(tmp_path / "none")])
    assert_one_error(code, capsys.readouterr().err, "--model hf-elmo-test/not-cached: no folder of that name here, and "
                     "the Hub (hub.invalid) cannot be reached from this machine, whose Hub cache does not hold it")

    shutil.copytree(converted["allennlp-elmo"], tmp_path / hub_id)
    monkeypatch.chdir(tmp_path)
    run_finetune(*small, "--output-dir", tmp_path / "local")
    card = (tmp_path / "local" / "README.md").read_text()
    assert "base_model" not in card and "`elmo-base`, fine-tuned on CoNLL-2003" in card
    # A folder named as `.` (run inside it) is named by its own name (the card said ``).
    monkeypatch.chdir(tmp_path / hub_id)
    run_finetune(*[str(a) for a in small[:3]], ".", *small[4:], "--output-dir", tmp_path / "here")
    assert "`elmo-base`, fine-tuned on CoNLL-2003" in (tmp_path / "here" / "README.md").read_text()
