"""Conversion and pretraining-data behaviour that mutations of the library showed no other test held: --overwrite
leaves nothing beside the output, the backward stream's own shuffle, the text digest (sentence boundaries, every
word's spelling), a word.dic softmax's boundaries, character ids past 32767 in the word table, only complete
checkpoints listed; both converters write into an existing empty folder, their functions' card defaults are
their commands', and an empty --language is refused."""
from pathlib import Path

import numpy as np
import pytest
import torch
from huggingface_hub import ModelCard

from conftest import ELMOFORMANYLANGS, FIXTURE_SETS
from test_pretraining import datasets_cache, fixture_text  # noqa: F401  (datasets_cache: the autouse fixture)

from conversion import convert_elmoformanylangs, convert_original_elmo
from conversion.convert_original_elmo import convert_hf_to_original, convert_original_to_hf
from modeling.data import StreamBatches


def test_overwriting_a_converted_folder_leaves_nothing_beside_it(tmp_path):
    """--overwrite replaces the folder in one step: the old folder is moved aside and then removed; nothing but the
    output stays in its parent (not a hidden copy of the old model, which could be gigabytes, per overwrite)."""
    fixture = FIXTURE_SETS["allennlp-elmo"]
    out = tmp_path / "out"
    convert_original_to_hf(fixture.options_file, fixture.weight_file, out)
    (out / "mine.txt").write_text("old")
    convert_original_to_hf(fixture.options_file, fixture.weight_file, out, overwrite=True)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]
    assert not (out / "mine.txt").exists()
    back = tmp_path / "back"
    convert_hf_to_original(out, back)
    convert_hf_to_original(out, back, overwrite=True)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["back", "out"]


def _stream_of_epoch(batches, epoch: int, key: str) -> torch.Tensor:
    """Row 0's stream of `key` over one epoch, in the direction's own reading order (each backward window reaches
    the model flipped left to right: flipped back, window by window)."""
    steps = batches.steps_per_epoch
    windows = [batches.batch(epoch * steps + k)[key][0] for k in range(steps)]
    if key.startswith("backward_"):
        windows = [window.flip(0) for window in windows]
    return torch.cat(windows)


def test_the_backward_stream_is_shuffled_in_an_order_of_its_own():
    """data.py: the backward stream holds each sentence reversed "in an order of its own": it is the backward stream
    of the direction-1 order, not of the forward (direction-0) order."""
    text, table, vocabulary = fixture_text()
    batches = StreamBatches(text, table, vocabulary, batch_size=1, unroll_steps=5, seed=3, shuffle=True)
    backward = _stream_of_epoch(batches, 0, "backward_labels")
    forward_order, backward_order = batches._order(0, 0), batches._order(0, 1)
    assert not np.array_equal(forward_order, backward_order)
    _, own = text.stream(backward_order, vocabulary, backward=True)
    assert torch.equal(backward, torch.from_numpy(own[: len(backward)]).long())
    _, forwards = text.stream(forward_order, vocabulary, backward=True)
    assert not torch.equal(backward, torch.from_numpy(forwards[: len(backward)]).long())


def test_the_texts_digest_tells_sentence_boundaries_apart():
    """A resume refuses other text by the digest of what batches are made of: the same words split into other
    sentences make other batches (other <S> and </S>), so another digest."""
    from modeling.data import EncodedText, WordTable
    from modeling.vocabulary import Vocabulary
    from test_pretraining import sentences_dataset

    vocabulary = Vocabulary(["<S>", "</S>", "<UNK>", "a", "b", "c"])
    table = WordTable(50)
    one = EncodedText.encode(sentences_dataset(["a b", "c a"]), table, vocabulary)
    other = EncodedText.encode(sentences_dataset(["a", "b c a"]), table, vocabulary)
    assert np.array_equal(one.types, other.types) and np.array_equal(one.targets, other.targets)
    assert one.digest(table) != other.digest(table)
    assert one.digest(table) == EncodedText.encode(sentences_dataset(["a b", "c a"]), table, vocabulary).digest(table)


def test_a_word_dic_vocabulary_ends_forward_sentences_with_eos_and_backward_ones_with_bos():
    """The softmax of a character-vocabulary model predicts word.dic's words: `<bos>`, `<eos>`, `<oov>` are its
    boundaries and unknown word, by name; a forward sentence's last target is `<eos>`, a backward one's `<bos>`."""
    from modeling.data import EncodedText, WordTable
    from modeling.vocabulary import Vocabulary
    from test_pretraining import sentences_dataset

    vocabulary = Vocabulary.from_word_dictionary({"<oov>": 0, "<bos>": 1, "<eos>": 2, "<pad>": 3, "a": 4, "b": 5})
    assert (vocabulary.bos_id, vocabulary.eos_id, vocabulary.unk_id) == (1, 2, 0)
    text = EncodedText.encode(sentences_dataset(["a b z"]), WordTable(50), vocabulary)
    _, forward = text.stream(np.arange(1), vocabulary, backward=False)
    _, backward = text.stream(np.arange(1), vocabulary, backward=True)
    assert [vocabulary.words[i] for i in forward] == ["a", "b", "<oov>", "<eos>"]
    assert [vocabulary.words[i] for i in backward] == ["<oov>", "b", "a", "<bos>"]


def test_the_word_table_holds_character_ids_past_32767(tmp_path):
    """A character vocabulary built from a large multilingual text can have more than 32767 characters: the word
    table (int16 up to 2**15 ids) must give each word its ids unchanged."""
    from hf_elmo.lexicon import ElmoLexicon
    from hf_elmo.tokenization_elmo import ElmoTokenizer
    from modeling.data import WordTable

    characters = [chr(0x4E00 + i) for i in range(20000)] + [chr(0x20000 + i) for i in range(20000)]
    words = {"".join(characters[i : i + 40]): 1 for i in range(0, len(characters), 40)}
    lexicon = ElmoLexicon.build(words, 50, with_words=False)
    lexicon.save(tmp_path / "char.dic", None)
    tokenizer = ElmoTokenizer(char_vocab_file=str(tmp_path / "char.dic"))
    assert tokenizer.vocab_size > 40000
    table = WordTable(50, tokenizer)
    last = list(words)[-1]
    types = table.ids([last, "<bos>"])
    spelled = table.spell(np.array(types))
    assert spelled.tolist() == [tokenizer.word_to_char_ids(last), tokenizer.word_to_char_ids("<bos>")]
    assert int(spelled.max()) > 40000


def test_the_texts_digest_covers_the_spelling_of_every_word_it_holds():
    """The digest covers each word's character ids, the last word of the table's too (types 0 .. max)."""
    from modeling.data import EncodedText, WordTable
    from modeling.vocabulary import Vocabulary
    from test_pretraining import sentences_dataset

    vocabulary = Vocabulary(["<S>", "</S>", "<UNK>", "a", "b"])
    table = WordTable(50)
    text = EncodedText.encode(sentences_dataset(["a b", "b"]), table, vocabulary)
    before = text.digest(table)
    last = int(text.types.max())
    table._rows[last] = table.tokenizer.word_to_char_ids("c")  # (as another tokenizer would spell it)
    table._char_ids = None
    assert text.digest(table) != before


def test_only_complete_checkpoints_are_listed(tmp_path):
    """A folder named checkpoint-N without trainer_state.json is no checkpoint of the run (not resumed from, not
    rotated away by --save-total-limit, not removed by --overwrite-output-dir)."""
    from modeling.checkpoints import list_checkpoints

    for step, complete in ((3, True), (12, True), (7, False), (20, False)):
        (tmp_path / f"checkpoint-{step}").mkdir()
        if complete:
            (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-x").mkdir()
    assert list_checkpoints(tmp_path) == [(3, tmp_path / "checkpoint-3"), (12, tmp_path / "checkpoint-12")]


def test_a_checkpoint_is_in_its_output_folder_however_either_is_spelled(tmp_path, monkeypatch):
    """`--resume out/checkpoint-3 --output-dir /abs/out` (or through a link) names a checkpoint of that folder."""
    from modeling.checkpoints import in_folder

    (tmp_path / "out" / "checkpoint-3").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "out")
    monkeypatch.chdir(tmp_path)
    assert in_folder(Path("out/checkpoint-3"), tmp_path / "out")
    assert in_folder(tmp_path / "link" / "checkpoint-3", tmp_path / "out")
    assert not in_folder(tmp_path / "out" / "checkpoint-3", tmp_path)


@pytest.mark.parametrize("rows", [1, 2, 3])
def test_processes_evaluate_disjoint_parts_of_the_held_out_text_that_cover_it(rows):
    """Under 2 processes each evaluates its own `rows` of the rows * 2 parts: together every target once, exactly
    the targets that one process with rows * 2 rows counts (which leaves out the parts without text, as the
    processes' rows past the text are)."""
    from modeling.data import EvaluationStream, IGNORE_INDEX

    text, table, vocabulary = fixture_text()

    def targets(stream):  # [rows, length] of each direction, targets only
        return [t for _, t in stream.arrays]

    single = EvaluationStream(text, table, vocabulary, rows=2 * rows, unroll_steps=5)
    parts = [EvaluationStream(text, table, vocabulary, rows=rows, unroll_steps=5, num_processes=2, process_index=p)
             for p in (0, 1)]
    for direction in (0, 1):
        together = np.concatenate([targets(part)[direction] for part in parts])
        together = together[(together != IGNORE_INDEX).any(1)]
        expected = targets(single)[direction]
        assert together.shape == expected.shape and np.array_equal(together, expected)
        assert (together != IGNORE_INDEX).sum() == text.num_predictions


def test_words_added_after_the_table_was_read_are_spelled():
    """WordTable.char_ids is rebuilt once new words are added (a second text encoded after the first was read)."""
    from modeling.data import WordTable

    table = WordTable(50)
    first = table.ids(["a", "b"])
    assert table.spell(np.array(first)).tolist() == [table.tokenizer.word_to_char_ids(w) for w in "ab"]
    later = table.ids(["c", "a"])
    assert table.spell(np.array(later)).tolist() == [table.tokenizer.word_to_char_ids(w) for w in "ca"]


ORIGINAL = FIXTURE_SETS["allennlp-elmo"]


def test_an_empty_output_folder_is_written_without_overwrite_both_ways(tmp_path, capsys):
    """The output folder "must not exist or be empty" (the help): an empty one is no reason for --overwrite."""
    options, weights = ORIGINAL.options_file, ORIGINAL.weight_file
    (tmp_path / "hf").mkdir()
    assert convert_original_elmo.main(["--options-file", str(options), "--weight-file", str(weights),
                                       "--output-dir", str(tmp_path / "hf")]) == 0, capsys.readouterr().err
    assert (tmp_path / "hf" / "model.safetensors").is_file()
    (tmp_path / "back").mkdir()
    assert convert_original_elmo.main(["--to-original", "--model-dir", str(tmp_path / "hf"),
                                       "--output-dir", str(tmp_path / "back")]) == 0, capsys.readouterr().err
    assert sorted(path.name for path in (tmp_path / "back").iterdir()) == ["options.json", "weights.hdf5"]
    (tmp_path / "zh").mkdir()
    assert convert_elmoformanylangs.main(["--model-dir", str(ELMOFORMANYLANGS / "chars_only"), "--output-dir",
                                          str(tmp_path / "zh")]) == 0, capsys.readouterr().err
    assert (tmp_path / "zh" / "char.dic").is_file()
    (tmp_path / "zh-back").mkdir()
    assert convert_elmoformanylangs.main(["--to-elmoformanylangs", "--model-dir", str(tmp_path / "zh"),
                                          "--output-dir", str(tmp_path / "zh-back")]) == 0, capsys.readouterr().err
    assert (tmp_path / "zh-back" / "encoder.pkl").is_file()
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".")]  # no staging or retired folder


def test_the_functions_card_defaults_are_the_commands(tmp_path):
    """As libraries, the converters write the cards their commands do: en for the original format, und for
    ELMoForManyLangs, no license."""
    out = convert_original_elmo.convert_original_to_hf(ORIGINAL.options_file, ORIGINAL.weight_file,
                                                      tmp_path / "elmo-en")
    data = ModelCard.load(out / "README.md").data
    assert (data.language, data.license) == ("en", None)
    out = convert_elmoformanylangs.convert_elmoformanylangs_to_hf(ELMOFORMANYLANGS / "chars_only", tmp_path / "elmo-zhs")
    card = (out / "README.md").read_text(encoding="utf-8")
    data = ModelCard(card).data
    assert (data.language, data.license) == ("und", None) and 'AutoModel.from_pretrained("elmo-zhs")' in card


EMPTY_LANGUAGE_ERROR = "error: --language '' is not a language code: give ISO 639 codes such as en, zh or pt-BR\n"


def test_an_empty_language_is_refused_by_both_converters(tmp_path, capsys):
    """An empty --language is no language: refused before anything is written (before, the original converter read
    it as the default, en)."""
    assert convert_elmoformanylangs.main(["--model-dir", str(ELMOFORMANYLANGS / "chars_only"), "--output-dir",
                                          str(tmp_path / "zh"), "--language", ""]) == 2
    assert capsys.readouterr().err == EMPTY_LANGUAGE_ERROR
    code = convert_original_elmo.main(["--options-file", str(ORIGINAL.options_file), "--weight-file",
                                       str(ORIGINAL.weight_file), "--output-dir", str(tmp_path / "en"),
                                       "--language", ""])
    assert (code, capsys.readouterr().err) == (2, EMPTY_LANGUAGE_ERROR)
    assert list(tmp_path.iterdir()) == []


def test_a_config_json_with_a_byte_order_mark_is_refused_naming_it(tmp_path, capsys):
    """transformers reads config.json as plain UTF-8 and refuses a byte-order mark: the way back refuses it first, as
    not a JSON config file named with the reason (it was let through, to transformers' "not a valid JSON file")."""
    folder = tmp_path / "hf"
    convert_original_to_hf(ORIGINAL.options_file, ORIGINAL.weight_file, folder)
    config = folder / "config.json"
    config.write_bytes(b"\xef\xbb\xbf" + config.read_bytes())
    capsys.readouterr()  # (the conversion's progress bars)
    code = convert_original_elmo.main(["--to-original", "--model-dir", str(folder), "--output-dir", str(tmp_path / "back")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"error: {config}: not a JSON config file (Unexpected UTF-8 BOM"), err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "back").exists()
