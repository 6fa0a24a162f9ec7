"""transformers' own common tokenizer tests (TokenizerTesterMixin) run against ElmoTokenizer, as transformers runs
them for its tokenizers (tests/models/*/test_tokenization_*.py).

The mixin comes from the source distribution of the installed transformers (`make transformers-tests`). Where it
assumes what ELMo does not have, the test says so in a comment and checks ELMo's counterpart instead:
  * text pairs: the six tests that encode pairs check that a pair is refused with a clear error (and the single-
    sentence half of the two that check both);
  * one id per position (a word vocabulary): an ELMo position is a word of `max_characters_per_token` character
    ids, so the three padding tests make the mixin's checks with the padding word, `[pad_token_id] * chars`,
    where it expects `pad_token_id`;
  * the padding word keeps id 0 and its name once the tokenizer is made, so the test of the special tokens' id
    setters checks that changing pad_token_id is refused;
  * test sentences built from the vocabulary: the vocabulary is the character alphabet, so the two hooks that
    build them (`get_clean_sequence`, `get_input_output_texts`) give sentences of words, as other character-level
    tokenizers' tests do.
"""

import unittest
from pathlib import Path

import hf_elmo
from hf_elmo import ElmoTokenizer
from hf_elmo.tokenization_elmo import word_to_char_ids
from transformers_suite import use_transformers_tests

use_transformers_tests()

from tests.test_tokenization_common import TokenizerTesterMixin  # noqa: E402

PAIR_REFUSED = "ElmoTokenizer encodes single sentences; text_pair is not supported"


# The words of the mixin's integration string (emoji, Chinese, runs of spaces, blank lines, "<s>", Thai).
INTEGRATION_WORDS = (
    "This is a test 😊 I was born in 92000 , and this is falsé . 生 活 的 真 谛 是 Hi Hello Hi Hello Hello < s > "
    "hi<s>there The following string should be properly encoded : Hello . But ird and ปี ird ด Hey how are you doing"
)


class ElmoTokenizationTest(TokenizerTesterMixin, unittest.TestCase):
    tokenizer_class = ElmoTokenizer
    from_pretrained_id = str(Path(hf_elmo.__file__).parent / "default-model")  # the tokenizer the package ships
    test_seq2seq = False  # ELMo has no decoder: no target texts to encode
    test_tokenizer_from_extractor = False  # no tokenizer.json or vocabulary file: the alphabet is fixed
    integration_expected_tokens = INTEGRATION_WORDS.split(" ")
    integration_expected_token_ids = [word_to_char_ids(word) for word in integration_expected_tokens]
    integration_expected_decoded_text = INTEGRATION_WORDS

    # ---- test data: sentences of words, since the vocabulary is the character alphabet ---------------------

    def get_clean_sequence(self, tokenizer, with_prefix_space=False, max_length=20, min_length=5):
        words = "the quick brown fox jumps over the lazy dog and runs far away from here".split()[:max_length]
        text = (" " if with_prefix_space else "") + " ".join(words)
        return text, tokenizer.encode(text, add_special_tokens=False)

    def get_input_output_texts(self, tokenizer):
        # decode() gives the words joined by single spaces.
        return "Hello world, it's me!", "Hello world , it 's me !"

    # ---- text pairs: ELMo encodes single sentences ------------------------------------------------------------

    def assert_pairs_refused(self, tokenizer, first="Test this method.", second="With these inputs."):
        with self.assertRaisesRegex(ValueError, PAIR_REFUSED):
            tokenizer(first, second)
        with self.assertRaisesRegex(ValueError, PAIR_REFUSED):
            tokenizer.encode(first, second)
        with self.assertRaisesRegex(TypeError, "text pair"):
            tokenizer([(first, second)])
        with self.assertRaisesRegex(ValueError, PAIR_REFUSED):
            tokenizer(first.split(), second.split(), is_split_into_words=True)

    def test_call(self):
        # The mixin also encodes text pairs, which ELMo does not read: single sentences and batches, then pairs refused.
        tokenizer = self.get_tokenizer()
        sentences = ["Testing batch encode plus", "Testing batch encode plus with different sequence lengths"]
        self.assertEqual(tokenizer(sentences[0]), tokenizer(sentences[0]))
        self.assertEqual(tokenizer(sentences)["input_ids"], [tokenizer(text)["input_ids"] for text in sentences])
        self.assert_pairs_refused(tokenizer, *sentences)

    def test_mask_output(self):
        self.assert_pairs_refused(self.get_tokenizer())  # the mixin checks the token type ids of a text pair

    def test_maximum_encoding_length_pair_input(self):
        self.assert_pairs_refused(self.get_tokenizer())  # the mixin truncates text pairs

    def test_number_of_added_tokens(self):
        self.assert_pairs_refused(self.get_tokenizer())  # the mixin counts the special tokens of a text pair

    def test_special_tokens_mask_input_pairs(self):
        self.assert_pairs_refused(self.get_tokenizer())  # the mixin checks the special tokens mask of a text pair

    def test_pretokenized_inputs(self):
        # The mixin also encodes pre-split text pairs: pre-split sentences and batches, then pairs refused.
        tokenizer = self.get_tokenizer()
        text, _ = self.get_clean_sequence(tokenizer)
        batch = [text, text + " " + text]
        self.assertEqual(tokenizer(text.split(), is_split_into_words=True).data, tokenizer(text).data)
        self.assertEqual(
            tokenizer([t.split() for t in batch], is_split_into_words=True, padding=True).data,
            tokenizer(batch, padding=True).data,
        )
        self.assert_pairs_refused(tokenizer, text, text)

    # ---- one id per position: an ELMo position is a word of character ids ----------------------------------

    def check_padding(self, padding_side_as_kwarg: bool):
        """The mixin's padding checks, with the padding word where it expects `pad_token_id` per position."""
        tokenizer = self.get_tokenizer()
        padding_word = [tokenizer.pad_token_id] * tokenizer.max_characters_per_token
        plain = tokenizer("Sequence of words", return_special_tokens_mask=True)
        for padding in (True, False, "longest"):  # one sentence: nothing to pad
            self.assertEqual(tokenizer("Sequence of words", padding=padding, return_special_tokens_mask=True), plain)
        for side in ("right", "left"):
            kwargs = {"padding_side": side} if padding_side_as_kwarg else {}
            tokenizer.padding_side = "left" if padding_side_as_kwarg and side == "right" else side
            padded = tokenizer(
                "Sequence of words", max_length=13, padding="max_length", return_special_tokens_mask=True, **kwargs
            )
            for key, fill in (("input_ids", padding_word), ("attention_mask", 0), ("special_tokens_mask", 1)):
                padding = [fill] * 10
                expected = plain[key] + padding if side == "right" else padding + plain[key]
                self.assertEqual(padded[key], expected, (side, key))
            self.assertEqual(tokenizer.encode("Sequence of words", max_length=13, padding="max_length", **kwargs),
                             padded["input_ids"])

    def test_batch_encode_dynamic_overflowing(self):
        # The mixin expects [batch, tokens] tensors, one id per position; ELMo's ids are [batch, words, chars].
        tokenizer = self.get_tokenizer()
        chars = tokenizer.max_characters_per_token
        text = "HuggingFace is solving NLP one commit at a time"  # 9 words
        for truncation in (True, "only_first"):
            tokens = tokenizer([text], max_length=6, padding=True, truncation=truncation, stride=1,
                               return_tensors="pt", return_overflowing_tokens=True)
            self.assertEqual(tuple(tokens["input_ids"].shape), (1, 6, chars))
            self.assertEqual(tuple(tokens["attention_mask"].shape), (1, 6))
            self.assertEqual(tuple(tokens["overflowing_tokens"].shape), (1, 3 + 1, chars))  # 3 cut, 1 of overlap
            self.assertEqual(tokens["num_truncated_tokens"].tolist(), [3])
            self.assertEqual(tokenizer.decode(tokens["overflowing_tokens"][0]), "commit at a time")

    def test_encode_basic_padding(self):
        self.check_padding(padding_side_as_kwarg=False)  # the mixin pads with `pad_token_id`, one id per position

    def test_encode_plus_with_padding_0(self):
        self.check_padding(padding_side_as_kwarg=True)  # the mixin pads with `pad_token_id`, one id per position

    def test_encode_plus_with_padding_1(self):
        self.check_padding(padding_side_as_kwarg=False)  # the mixin pads with `pad_token_id`, one id per position

    def test_tokenizers_common_ids_setters(self):
        # The mixin's check for every special token but the padding word, which keeps id 0 and its name once made
        # (transformers pads with pad_token_id): setting it to None or to another id is refused, and it is unchanged.
        tokenizer = self.get_tokenizer()
        token_id = next(iter(tokenizer.get_vocab().values()))
        token = tokenizer.convert_ids_to_tokens(token_id, skip_special_tokens=False)
        for attribute in ("bos_token", "eos_token", "unk_token", "sep_token", "cls_token", "mask_token"):
            setattr(tokenizer, attribute + "_id", None)
            self.assertEqual((getattr(tokenizer, attribute), getattr(tokenizer, attribute + "_id")), (None, None))
            setattr(tokenizer, attribute + "_id", token_id)
            self.assertEqual((getattr(tokenizer, attribute), getattr(tokenizer, attribute + "_id")), (token, token_id))
        pad_token = tokenizer.pad_token
        for value in (None, 5):
            with self.assertRaisesRegex(ValueError, f"pad_token_id cannot become {value}: ElmoTokenizer pads with id 0"):
                tokenizer.pad_token_id = value
        self.assertEqual((tokenizer.pad_token, tokenizer.pad_token_id), (pad_token, 0))
        tokenizer.extra_special_tokens_ids = []
        self.assertEqual((tokenizer.extra_special_tokens, tokenizer.extra_special_tokens_ids), ([], []))
        tokenizer.extra_special_tokens_ids = [token_id]
        self.assertEqual((tokenizer.extra_special_tokens, tokenizer.extra_special_tokens_ids), ([token], [token_id]))


class ElmoCharacterVocabularyTokenizationTest(ElmoTokenizationTest):
    """The same suite on a tokenizer that spells words with ELMoForManyLangs' char.dic and returns word ids from its
    word.dic (those of the tests' model with word input, tests/fixtures/elmoformanylangs/with_words)."""

    @classmethod
    def setUpClass(cls):
        import tempfile

        from conftest import ELMOFORMANYLANGS

        source = ELMOFORMANYLANGS / "with_words"
        cls._folder = tempfile.mkdtemp()
        tokenizer = ElmoTokenizer(char_vocab_file=str(source / "char.dic"), word_vocab_file=str(source / "word.dic"))
        tokenizer.save_pretrained(cls._folder)
        cls.from_pretrained_id = cls._folder
        cls.integration_expected_token_ids = [tokenizer.word_to_char_ids(word) for word in cls.integration_expected_tokens]
        # Characters outside char.dic read back as <oov>.
        cls.integration_expected_decoded_text = tokenizer.decode(cls.integration_expected_token_ids)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        import shutil

        super().tearDownClass()
        shutil.rmtree(cls._folder, ignore_errors=True)

    def get_input_output_texts(self, tokenizer):
        # Characters that char.dic has (others would read back as <oov>); each Chinese character is a word.
        return "天气不错！I eat an apple.", "天 气 不 错 ！ I eat an apple ."
