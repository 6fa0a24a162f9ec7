"""The word vocabulary of the pretraining softmax, in bilm-tf's file format.

A vocabulary file has one word per line: `<S>`, `</S>`, `<UNK>` first, then the words by descending frequency,
the order the log-uniform sampler of the sampled softmax assumes. Files written by bilm-tf and the released
`vocab-2016-09-10.txt` read as they are (the line `!!!MAXTERMID` and empty lines are skipped; a word's id is its
line's position among the others).

ELMoForManyLangs' models predict the words of their word.dic, whose special words are `<bos>`, `<eos>` and
`<oov>` (`Vocabulary.from_word_dictionary`); a vocabulary file that holds those instead of bilm-tf's reads as such.
"""

import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from hf_elmo.files import read_text_file, write_text_atomically

BOS, EOS, UNK = "<S>", "</S>", "<UNK>"
SPECIAL_WORDS = (BOS, EOS, UNK)
# The sentence boundaries and the unknown word of an ELMoForManyLangs word.dic.
PACKAGE_SPECIAL_WORDS = ("<bos>", "<eos>", "<oov>")
# A line of bilm-tf's vocabulary files that readers skip (bilm-tf's and `from_file`): no vocabulary can hold it.
SKIPPED_LINE = "!!!MAXTERMID"


class VocabularyError(ValueError):
    """A vocabulary file or option that cannot be used; the message names it."""


class Vocabulary:
    """Words of the softmax, id = position. Words outside it are `<UNK>` as targets (inputs are characters)."""

    def __init__(self, words: list[str], source: str = "vocabulary", line_numbers: list[int] | None = None):
        """`line_numbers`: each word's line in `source`, for errors (default: its position, counted from 1)."""
        specials = SPECIAL_WORDS
        if any(word not in words for word in SPECIAL_WORDS) and all(word in words for word in PACKAGE_SPECIAL_WORDS):
            specials = PACKAGE_SPECIAL_WORDS
        missing = [word for word in specials if word not in words]
        if missing:
            raise VocabularyError(f"{source}: must contain {', '.join(SPECIAL_WORDS)}; missing {', '.join(missing)}")
        if SKIPPED_LINE in words:  # (saved, it would read back without it, every later word's id one lower)
            raise VocabularyError(f"{source}: holds the word {SKIPPED_LINE!r}, a line that vocabulary files skip; "
                                  f"it cannot be a softmax word")
        self.words = list(words)
        self.index = {}
        numbers = line_numbers or range(1, len(self.words) + 1)
        for position, word in enumerate(self.words):
            if word in self.index:
                raise VocabularyError(f"{source}: word {word!r} appears twice (lines {numbers[self.index[word]]} and "
                                      f"{numbers[position]})")
            self.index[word] = position
        self.bos_id, self.eos_id, self.unk_id = (self.index[word] for word in specials)

    def __len__(self) -> int:
        return len(self.words)

    def __eq__(self, other) -> bool:
        return isinstance(other, Vocabulary) and self.words == other.words

    def ids(self, words: Iterable[str]) -> np.ndarray:
        """Vocabulary ids of `words`, `<UNK>`'s id for the words it does not have."""
        return np.fromiter((self.index.get(word, self.unk_id) for word in words), dtype=np.int64)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "Vocabulary":
        path = Path(path)
        text = read_text_file(path, "vocabulary file", error=VocabularyError)  # (without a byte-order mark)
        # Lines end as Python's universal newlines end them (not at every separator that str.splitlines knows), and
        # lose only the spaces and tabs around them: a word may end in a character that str.strip also takes away
        # (U+001F, which the tokenizer's splitting keeps in words), and must read back as `save` wrote it.
        lines = [line.strip(" \t") for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
        entries = [(number, word) for number, word in enumerate(lines, 1) if word and word != SKIPPED_LINE]
        for number, word in entries:
            if " " in word or "\t" in word:  # (`word count` or `word<TAB>count`: never a word of text split at them)
                raise VocabularyError(f"{path}: line {number} ({word!r}) is not one word: a vocabulary file holds one "
                                      "word per line, with nothing after it (bilm-tf's format: no counts)")
        if not entries:
            raise VocabularyError(f"{path}: the vocabulary file is empty")
        return cls([word for _, word in entries], source=str(path), line_numbers=[number for number, _ in entries])

    @classmethod
    def from_word_dictionary(cls, words: dict[str, int], source: str = "word.dic") -> "Vocabulary":
        """The words of an ELMoForManyLangs word.dic (`word -> id`), id = position, as the package's softmax has them.

        An entry that a vocabulary file cannot hold as it is (one with whitespace, such as the `\u3000` that the
        package reads for a line without a word, or `!!!MAXTERMID`) keeps its softmax row under the name
        `<word.dic:ID>`, so that the vocabulary saved reads back the same: text split at whitespace never has such a
        word as a target."""
        ordered = sorted(words, key=words.__getitem__)
        if [words[word] for word in ordered] != list(range(len(ordered))):
            raise VocabularyError(f"{source}: the word ids must be 0 .. {len(ordered) - 1}, one per word")
        return cls([word if _one_line_word(word) else f"<word.dic:{number}>" for number, word in enumerate(ordered)],
                   source=source)

    @classmethod
    def from_counts(cls, counts: Counter, max_size: int | None = None, min_count: int = 1) -> "Vocabulary":
        """`<S>`, `</S>`, `<UNK>`, then the words seen at least `min_count` times, most frequent first (ties in
        alphabetical order), at most `max_size` entries in all. A word `!!!MAXTERMID` is left out (`<UNK>` as a
        target), as bilm-tf's vocabulary files cannot hold it."""
        if max_size is not None and max_size < len(SPECIAL_WORDS) + 1:
            raise VocabularyError(f"--vocab-size must be at least {len(SPECIAL_WORDS) + 1} (the 3 special words and one more), got {max_size}")
        if min_count < 1:
            raise VocabularyError(f"--min-count must be at least 1, got {min_count}")
        ranked = sorted(
            (word for word, count in counts.items()
             if count >= min_count and word not in SPECIAL_WORDS and word != SKIPPED_LINE),
            key=lambda word: (-counts[word], word),
        )
        if max_size is not None:
            ranked = ranked[: max_size - len(SPECIAL_WORDS)]
        return cls([*SPECIAL_WORDS, *ranked])

    def save(self, path: str | os.PathLike) -> None:
        """Write the file atomically: a reader sees the old file or the whole new one."""
        write_text_atomically(path, "\n".join(self.words) + "\n")


def _one_line_word(word: str) -> bool:
    """Whether a vocabulary file's line can hold `word` as it is (`from_file` reads it back the same)."""
    return bool(word) and word == word.strip() and not any(c in word for c in " \t\n\r") and word != SKIPPED_LINE
