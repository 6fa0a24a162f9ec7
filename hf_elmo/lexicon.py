"""A character vocabulary (and optionally a word vocabulary) in place of UTF-8 bytes: ELMoForManyLangs' alphabet.

ELMoForManyLangs (HIT-SCIR, PyPI `elmoformanylangs`) spells a word as the ids of its Unicode code points in
char.dic, and may also read the word's id in word.dic. Both files hold `token<TAB>id` lines. This module reads and
writes them exactly as the package does, and spells words as it spells them:

* a word is cut to `max_characters_per_token - 2` code points, then spelled `[begin, c_1 .. c_n, end, <pad> ..]`;
  a character missing from char.dic is `<oov>`, and so is a word missing from word.dic (looked up after the cut);
* the package's code takes the begin-of-word marker from the `<eow>` entry and the end-of-word marker from `<bow>`
  (the names the other way round); models were trained that way, so that is what the ids here are;
* `<bos>` and `<eos>` are words: one character each, `[begin, <bos>, end, <pad> ..]`, and word ids of their own; a
  pre-split word `<bos>` reads as the sentence boundary, as the package reads it (its users pass words, not text;
  raw text is split as for every ELMo, `<bos>` into `<`, `bos`, `>`).

Every character id is the package's id + 1, so that 0 stays the all-zero padding word of `ElmoTokenizer` (the
model's character embedding has one more row in front, as the byte alphabet's has). Word ids are the package's.

This file is copied into saved model folders as Hub remote code: it imports only the standard library and
files.py (copied with it).
"""

import os

from .files import atomic_file

BOS, EOS, OOV, PAD = "<bos>", "<eos>", "<oov>", "<pad>"
BOW, EOW = "<bow>", "<eow>"
CHAR_SPECIALS = (BOS, EOS, OOV, PAD, BOW, EOW)  # every one must be in char.dic
# Their names among the tokenizer's character ids (the byte alphabet's are <S>, </S>, <bow>, <eow>, <char_pad>).
SPECIAL_CHAR_NAMES = {BOS: "<bos_char>", EOS: "<eos_char>", OOV: "<oov_char>", PAD: "<char_pad>", BOW: "<bow>", EOW: "<eow>"}
WORD_ENTRIES = (OOV, BOS, EOS, PAD)  # the first entries of a word.dic that the package's training builds
WORD_SPECIALS = (OOV, PAD)  # the package asserts these two; <bos>/<eos> fall back to <oov> if missing
# The package writes a dictionary line as token<TAB>id and reads it back with line.strip().split("\t"): a token that
# strip() removes (whitespace, such as the ideographic space U+3000) leaves one field, which it reads as U+3000.
STRIPPED_TOKEN = "\u3000"


class LexiconError(ValueError):
    """A char.dic or word.dic that cannot be read or written as the package reads it (ids of ASCII digits only:
    stricter than the package's `int`, which also takes " 5", "+5" or "1_0"); the message names the file and line."""


def _parse_line(line: str) -> tuple[str, int] | None:
    """A dictionary line's `(token, id)` as the package reads it (`line.strip().split("\t")`), or None if it
    cannot: the id must be ASCII digits (`str.isdigit` also takes "²", which `int` refuses)."""
    fields = line.strip().split("\t")
    if len(fields) == 1:
        fields.insert(0, STRIPPED_TOKEN)
    if len(fields) != 2 or not (fields[1].isascii() and fields[1].isdigit()):
        return None
    return fields[0], int(fields[1])


def read_dictionary(path: str | os.PathLike) -> dict[str, int]:
    """`token -> id` of a char.dic or word.dic, read as the package reads it (a later line wins a repeated token),
    its lines split as codecs splits them (`str.splitlines`: at U+2028 and U+001C too, not only at line ends)."""
    path = os.fspath(path)
    entries = {}
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise LexiconError(f"{path}: dictionary file not found") from None
    except IsADirectoryError:
        raise LexiconError(f"{path}: is a folder, not a dictionary file") from None
    except OSError as error:
        raise LexiconError(f"{path}: cannot read the dictionary file ({error.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        # The line as the lines below are numbered (str.splitlines); the bytes before the error are valid UTF-8.
        line = len((data[: error.start].decode("utf-8") + "x").splitlines())
        raise LexiconError(f"{path}: line {line} is not UTF-8 text ({error.reason} at byte {error.start})") from None
    for number, line in enumerate(text.splitlines(), 1):
        entry = _parse_line(line)
        if entry is None:
            raise LexiconError(f"{path}: line {number} is not token<TAB>id: {line!r}")
        entries[entry[0]] = entry[1]
    return entries


def unreadable_entry(entries: dict[str, int]) -> str | None:
    """The first token whose `token<TAB>id` line would not read back as written, here or in the package (which
    reads lines with codecs, split where str.splitlines splits: also at U+2028, U+001C ...); None if all do."""
    for token, index in entries.items():
        line = f"{token}\t{index}"
        if len(line.splitlines()) != 1 or _parse_line(line) != (token, index) or not _is_utf8(token):
            return token
    return None


def _is_utf8(token: str) -> bool:
    """Whether UTF-8 can write `token` (not a lone surrogate)."""
    try:
        token.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


UNREADABLE = ("it would read back as another (an entry must not be empty, begin with whitespace other than "
              "U+3000 alone, or hold a tab, a line break or a lone surrogate; an id is an integer >= 0)")


def write_dictionary(entries: dict[str, int], path: str | os.PathLike) -> None:
    """Write `token<TAB>id` lines in the order of `entries`, as the package does, atomically; an entry that would
    not read back as written is refused, and nothing is written."""
    if (token := unreadable_entry(entries)) is not None:
        raise LexiconError(f"{os.fspath(path)}: cannot hold the entry {token!r} (id {entries[token]!r}): {UNREADABLE}")
    with atomic_file(path) as out:
        out.writelines(f"{token}\t{index}\n" for token, index in entries.items())


def _check_dense_ids(entries: dict[str, int], source: str | os.PathLike) -> None:
    """The package gives a dictionary of N entries an embedding of N rows: its ids must be 0 .. N - 1 (and a stray
    large id would make the embedding, and the list of names, that long)."""
    if sorted(entries.values()) != list(range(len(entries))):
        raise LexiconError(f"{source}: its ids must be 0 .. {len(entries) - 1}, one per entry, as the package's "
                           "embedding rows are")


def _check_specials(entries: dict[str, int], specials: tuple[str, ...], source: str) -> None:
    missing = [token for token in specials if token not in entries]
    if missing:
        raise LexiconError(f"{source}: missing the special entr{'y' if len(missing) == 1 else 'ies'} {', '.join(missing)}")


class ElmoLexicon:
    """char.dic (and word.dic) and how words are spelled with them.

    Args:
        chars: char.dic, `character -> package id`.
        words: word.dic, `word -> id`, or None for a model without word input.
        max_characters_per_token: K, characters per word, the two markers included.
    """

    def __init__(self, chars: dict[str, int], words: dict[str, int] | None, max_characters_per_token: int,
                 char_source: str = "char.dic", word_source: str = "word.dic"):
        _check_specials(chars, CHAR_SPECIALS, char_source)
        _check_dense_ids(chars, char_source)
        if words is not None:
            _check_specials(words, WORD_SPECIALS, word_source)
            _check_dense_ids(words, word_source)
        self.chars, self.words = dict(chars), None if words is None else dict(words)
        self.max_characters_per_token = max_characters_per_token
        # The package's quirk: a word begins with the id of <eow> and ends with the id of <bow>.
        self.begin_id, self.end_id = chars[EOW] + 1, chars[BOW] + 1
        self.bos_id, self.eos_id = chars[BOS] + 1, chars[EOS] + 1
        self.oov_id, self.pad_id = chars[OOV] + 1, chars[PAD] + 1
        self._char_names = {index + 1: token for token, index in self.chars.items()}
        if self.words is not None:
            self.oov_word_id, self.pad_word_id = self.words[OOV], self.words[PAD]
            self.bos_word_id = self.words.get(BOS, self.oov_word_id)
            self.eos_word_id = self.words.get(EOS, self.oov_word_id)

    @classmethod
    def from_files(cls, char_file: str | os.PathLike, word_file: str | os.PathLike | None,
                   max_characters_per_token: int) -> "ElmoLexicon":
        words = None if word_file is None else read_dictionary(word_file)
        return cls(read_dictionary(char_file), words, max_characters_per_token, os.fspath(char_file),
                   os.fspath(word_file) if word_file is not None else "word.dic")

    def save(self, char_file: str | os.PathLike, word_file: str | os.PathLike | None) -> None:
        write_dictionary(self.chars, char_file)
        if self.words is not None and word_file is not None:
            write_dictionary(self.words, word_file)

    @property
    def num_char_ids(self) -> int:
        """Rows of the model's character embedding: the package's rows and the padding row 0."""
        return max(self.chars.values()) + 2

    @property
    def num_word_ids(self) -> int:
        return 0 if self.words is None else max(self.words.values()) + 1

    def cut(self, word: str) -> str:
        """The word as the package reads it: at most K - 2 code points."""
        return word[: self.max_characters_per_token - 2]

    def char_ids(self, word: str) -> list[int]:
        """`[begin, c_1 + 1, ..., end, pad, ...]`, K ids (see the module docstring)."""
        word = self.cut(word)
        if word in (BOS, EOS):
            characters = [self.chars[word] + 1]
        else:
            characters = [self.chars.get(character, self.oov_id - 1) + 1 for character in word]
        ids = [self.begin_id, *characters, self.end_id]
        return ids + [self.pad_id] * (self.max_characters_per_token - len(ids))

    def word_id(self, word: str) -> int:
        """The word's id in word.dic, `<oov>`'s for a word it does not have."""
        return self.words.get(self.cut(word), self.oov_word_id)

    def char_ids_to_word(self, char_ids: list[int]) -> str | None:
        """Read back a spelled word (`None` for the all-zero padding word); unknown characters read `<oov>`."""
        if not any(char_ids):
            return None
        end = char_ids.index(self.end_id, 1) if self.end_id in char_ids[1:] else len(char_ids)
        return "".join(self._char_names.get(char_id, OOV) for char_id in char_ids[1:end])

    def char_names(self) -> list[str]:
        """A name for every character id, 1 .. num_char_ids - 1, for the tokenizer's vocabulary: `<U+5929>` for 天
        (as the byte alphabet names its ids `<0x41>`), `<bos_char>` ... for the special entries. Never a word that
        text holds, so that a word is never read as one of these ids."""
        names = []
        for char_id in range(1, self.num_char_ids):
            token = self._char_names[char_id]  # (every id has its entry: _check_dense_ids)
            if token in SPECIAL_CHAR_NAMES:
                names.append(SPECIAL_CHAR_NAMES[token])
            elif len(token) == 1:
                names.append(f"<U+{ord(token):04X}>")
            else:
                names.append(f"<char {token}>")
        return names

    def config_options(self, word_input: bool) -> dict:
        """The ElmoConfig fields that describe this alphabet (and the word input, if the model reads words)."""
        options = {
            "alphabet": "vocabulary",
            "n_characters": self.num_char_ids,
            "bos_char_id": self.bos_id,
            "eos_char_id": self.eos_id,
            "bow_char_id": self.begin_id,
            "eow_char_id": self.end_id,
            "pad_char_id": self.pad_id,
        }
        if word_input:
            if self.words is None:
                raise LexiconError("a model with word input needs word.dic")
            options.update(word_vocab_size=self.num_word_ids, bos_word_id=self.bos_word_id, eos_word_id=self.eos_word_id)
        return options

    def config_mismatch(self, config) -> tuple[str, str, object] | None:
        """The first of `config_options` that the model's `config` (an ElmoConfig) gives otherwise, as (the dictionary
        it comes from, the field, this lexicon's value): its dictionaries are not that model's. None where all agree."""
        for field, value in self.config_options(word_input=bool(config.word_vocab_size)).items():
            if getattr(config, field) != value:
                return ("word.dic" if "word" in field else "char.dic"), field, value
        return None

    @classmethod
    def build(cls, word_counts: dict[str, int], max_characters_per_token: int, with_words: bool,
              max_words: int | None = None, min_count: int = 1) -> "ElmoLexicon":
        """A new lexicon from the words of a training text and their counts (in order of first appearance), laid
        out as the package's training lays one out: char.dic holds the characters in order of first appearance,
        then `<bos> <eos> <oov> <pad> <bow> <eow>`; word.dic (`with_words`) holds `<oov> <bos> <eos> <pad>`, then
        the words (cut to K - 2 characters) seen at least `min_count` times, most frequent first (ties
        alphabetically), at most `max_words` entries in all (at least 5: the four special entries and a word).
        A word that a dictionary line would not give back as written (see `write_dictionary`) is refused."""
        if max_words is not None and max_words < len(WORD_ENTRIES) + 1:
            raise LexiconError(f"max_words must be at least {len(WORD_ENTRIES) + 1} (word.dic's {len(WORD_ENTRIES)} "
                               f"special entries and one word), got {max_words}")
        cut_counts: dict[str, int] = {}
        for word, count in word_counts.items():
            word = word[: max_characters_per_token - 2]
            cut_counts[word] = cut_counts.get(word, 0) + count
        chars = {}
        for word in cut_counts:
            for character in word:
                chars.setdefault(character, len(chars))
        for token in CHAR_SPECIALS:
            chars.setdefault(token, len(chars))
        words = None
        if with_words:
            words = {token: index for index, token in enumerate(WORD_ENTRIES)}
            ranked = sorted((w for w, n in cut_counts.items() if n >= min_count and w not in words),
                            key=lambda w: (-cut_counts[w], w))
            for word in ranked[: None if max_words is None else max_words - len(words)]:
                words[word] = len(words)
        # Refused now, not when saved: a word or character that the saved dictionaries would give back as another.
        if words is not None and (word := unreadable_entry(words)) is not None:
            raise LexiconError(f"the word {word!r} cannot be an entry of word.dic: {UNREADABLE}")
        if (character := unreadable_entry(chars)) is not None:
            word = next(w for w in cut_counts if character in w)
            raise LexiconError(f"the word {word!r} has the character {character!r}, which cannot be an entry of "
                               f"char.dic: {UNREADABLE}")
        return cls(chars, words, max_characters_per_token)
