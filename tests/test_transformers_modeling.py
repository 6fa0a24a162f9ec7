"""transformers' own common tests (ModelTesterMixin with its torch.export test, ConfigTester, PipelineTesterMixin)
run against every ELMo class, as transformers runs them for its models (tests/models/*/test_modeling_*.py).

The mixins come from the source distribution of the installed transformers (`make transformers-tests`).
"""

import atexit
import json
import os
import shutil
import tempfile
import unittest
from unittest import mock

import torch
from transformers.models.auto import modeling_auto

from hf_elmo import (
    ElmoConfig,
    ElmoForPreTraining,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
)
from hf_elmo.tokenization_elmo import word_to_char_ids
from transformers_suite import use_transformers_tests

ELMO_CLASSES = (ElmoModel, ElmoForSequenceClassification, ElmoForTokenClassification, ElmoForPreTraining)
PIPELINE_MODEL_MAPPING = {
    "feature-extraction": ElmoModel,
    "text-classification": ElmoForSequenceClassification,
    "token-classification": ElmoForTokenClassification,
}


def save_tiny_pipeline_models(root: str) -> None:
    """The local stand-in for the Hub's tiny-random models that PipelineTesterMixin loads: each class of
    PIPELINE_MODEL_MAPPING saved with its tokenizer under `root/elmo/CLASS`, and `root/reports/tiny_model_summary.json`
    naming them. The tokenizer class is given as AutoTokenizer: the mixin resolves the name on the transformers
    module, where hf_elmo's registration makes AutoTokenizer load ElmoTokenizer."""
    torch.manual_seed(0)
    summary = {}
    for model_class in PIPELINE_MODEL_MAPPING.values():
        folder = os.path.join(root, "elmo", model_class.__name__)
        model_class(ElmoModelTester(None).get_config()).save_pretrained(folder)
        ElmoTokenizer(max_characters_per_token=ElmoModelTester.max_characters_per_token).save_pretrained(folder)
        summary[model_class.__name__] = {
            "tokenizer_classes": ["AutoTokenizer"],
            "processor_classes": [],
            "model_classes": [model_class.__name__],
        }
    os.makedirs(os.path.join(root, "reports"))
    with open(os.path.join(root, "reports", "tiny_model_summary.json"), "w", encoding="utf-8") as summary_file:
        json.dump(summary, summary_file)


class ElmoModelTester:
    """A tiny ELMo: every part of the real one (CNN filters of three widths, two highway layers, the char
    projection, two biLSTM layers with cell projection, clipping and the residual connection), a few hundred
    parameters wide."""

    batch_size = 3
    seq_length = 7
    max_characters_per_token = 12
    num_labels = 3
    lm_vocab_size = 20
    is_training = True

    def __init__(self, parent):
        self.parent = parent
        config = self.get_config()
        self.num_hidden_layers = config.num_hidden_layers
        self.hidden_size = config.hidden_size
        self.vocab_size = config.vocab_size

    def get_config(self) -> ElmoConfig:
        return ElmoConfig(
            char_embedding_dim=4,
            char_cnn_filters=[[1, 4], [2, 8], [3, 4]],
            num_highway_layers=2,
            max_characters_per_token=self.max_characters_per_token,
            cell_size=16,
            projection_dim=8,
            num_lstm_layers=2,
            num_labels=self.num_labels,
            lm_vocab_size=self.lm_vocab_size,
            lm_negative_samples=8,
        )

    def prepare_config_and_inputs_for_common(self) -> tuple[ElmoConfig, dict]:
        """Sentences of random lowercase words, right-padded as the tokenizer pads them; the first row is full."""
        generator = torch.Generator().manual_seed(0)
        lengths = torch.randint(1, self.seq_length + 1, (self.batch_size - 1,), generator=generator).tolist()
        input_ids = torch.zeros(self.batch_size, self.seq_length, self.max_characters_per_token, dtype=torch.long)
        for row, length in enumerate([self.seq_length, *lengths]):
            for position in range(length):
                size = int(torch.randint(1, 8, (1,), generator=generator))
                letters = torch.randint(ord("a"), ord("z") + 1, (size,), generator=generator)
                word = "".join(map(chr, letters.tolist()))
                input_ids[row, position] = torch.tensor(word_to_char_ids(word, self.max_characters_per_token))
        attention_mask = (input_ids > 0).any(-1).long()
        return self.get_config(), {"input_ids": input_ids, "attention_mask": attention_mask}


use_transformers_tests()
# PipelineTesterMixin loads its tiny models from this folder (instead of the Hub) and reads the summary at import.
_TINY_MODELS = tempfile.mkdtemp(prefix="elmo-tiny-models-")
atexit.register(shutil.rmtree, _TINY_MODELS, ignore_errors=True)
save_tiny_pipeline_models(_TINY_MODELS)
os.environ["TRANSFORMERS_TINY_MODEL_PATH"] = _TINY_MODELS

from tests.test_configuration_common import ConfigTester  # noqa: E402
from tests.test_modeling_common import ModelTesterMixin  # noqa: E402
from tests.test_pipeline_mixin import PipelineTesterMixin  # noqa: E402


# transformers lists its own models in these name mappings, which the mixins read to know what a class is (a base
# model is not trained, a head gets labels); hf_elmo registers with the Auto classes instead, which the mixins do
# not read. The entries exist for the duration of each test only.
@mock.patch.dict(modeling_auto.MODEL_MAPPING_NAMES, {"elmo": "ElmoModel"})
@mock.patch.dict(modeling_auto.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES, {"elmo": "ElmoForSequenceClassification"})
@mock.patch.dict(modeling_auto.MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES, {"elmo": "ElmoForTokenClassification"})
@mock.patch.dict(modeling_auto.MODEL_FOR_PRETRAINING_MAPPING_NAMES, {"elmo": "ElmoForPreTraining"})
class ElmoModelTest(ModelTesterMixin, PipelineTesterMixin, unittest.TestCase):
    all_model_classes = ELMO_CLASSES
    pipeline_model_mapping = PIPELINE_MODEL_MAPPING
    has_attentions = False  # a character CNN and LSTMs: no attention
    test_resize_embeddings = False  # the character alphabet is fixed (262 ids): there is no word vocabulary to resize
    test_mismatched_shapes = False  # it resizes `vocab_size` and feeds [batch, words] word ids: no word vocabulary
    # The mixin dates a model by a copyright line at the top of its config file and runs this only for models of
    # 2023 on, or where this is set "once their `_init_weights` is fixed": hf-elmo's initialises every weight.
    test_can_init_all_missing_weights_before_2023 = True

    def setUp(self):
        self.model_tester = ElmoModelTester(self)
        self.config_tester = ConfigTester(
            self,
            config_class=ElmoConfig,
            has_text_modality=False,  # text, but read as characters: no word vocabulary (`vocab_size`) to check
            common_properties=["hidden_size", "num_hidden_layers"],  # no `num_attention_heads`: no attention
            **{key: value for key, value in self.model_tester.get_config().to_dict().items()
               if key in ("char_cnn_filters", "cell_size", "projection_dim", "num_lstm_layers", "lm_vocab_size")},
        )

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        inputs_dict = super()._prepare_for_class(inputs_dict, model_class, return_labels=return_labels)
        if return_labels and model_class is ElmoForPreTraining:
            # As BERT's test adds its pretraining labels: each direction's next word, -100 past the row's end.
            shape = inputs_dict["input_ids"].shape[:2]
            labels = torch.randint(0, self.model_tester.lm_vocab_size, shape, generator=torch.Generator().manual_seed(0))
            padding = inputs_dict["attention_mask"] == 0
            inputs_dict["labels"] = labels.masked_fill(padding, -100)
            inputs_dict["backward_labels"] = labels.flip(1).masked_fill(padding, -100)
        return inputs_dict

    def test_config(self):
        self.config_tester.run_common_tests()
