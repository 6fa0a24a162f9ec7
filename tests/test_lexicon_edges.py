"""Behaviour of hf_elmo/lexicon.py that no other test held (found by mutation testing)."""

import pytest

from hf_elmo.lexicon import ElmoLexicon, LexiconError


def test_build_ranks_words_of_equal_count_alphabetically_whatever_their_order_in_the_text():
    """ElmoLexicon.build's docstring: the words most frequent first, ties alphabetically, so that word.dic (and the
    word ids a model is trained on) do not depend on which of two equally frequent words the text had first; where
    max_words cuts inside a tie, the alphabetically first words are kept."""
    counts = {"zebra": 2, "mango": 2, "apple": 2, "kiwi": 5}
    lexicon = ElmoLexicon.build(counts, 50, with_words=True)
    assert list(lexicon.words)[4:] == ["kiwi", "apple", "mango", "zebra"]
    assert [lexicon.words[w] for w in ("kiwi", "apple", "mango", "zebra")] == [4, 5, 6, 7]
    reordered = ElmoLexicon.build(dict(reversed(list(counts.items()))), 50, with_words=True)
    assert reordered.words == lexicon.words
    assert list(ElmoLexicon.build(counts, 50, with_words=True, max_words=6).words)[4:] == ["kiwi", "apple"]


def test_build_refuses_max_words_that_leaves_no_room_for_a_word():
    """At least 5 entries: word.dic's 4 special ones and one word. 4 is refused (a word.dic of specials only), 5 is
    the smallest accepted."""
    counts = {"a": 5, "b": 4}
    with pytest.raises(LexiconError, match=r"^max_words must be at least 5 \(word.dic's 4 special entries and one "
                                           r"word\), got 4$"):
        ElmoLexicon.build(counts, 50, with_words=True, max_words=4)
    assert list(ElmoLexicon.build(counts, 50, with_words=True, max_words=5).words)[4:] == ["a"]


def test_a_character_id_past_the_vocabulary_reads_back_as_oov():
    """char_ids_to_word: a spelled word is read back through char.dic; an id that char.dic does not have (one past
    its rows, say, from another vocabulary's ids) reads `<oov>`, rather than vanishing from the word."""
    lexicon = ElmoLexicon.build({"ab": 1}, 10, with_words=False)
    spelled = lexicon.char_ids("ab")
    assert lexicon.char_ids_to_word(spelled) == "ab"
    beyond = lexicon.num_char_ids  # (ids are 1 .. num_char_ids - 1)
    spelled[1] = beyond
    assert lexicon.char_ids_to_word(spelled) == "<oov>b"
    assert lexicon.char_ids_to_word([0] * 10) is None
