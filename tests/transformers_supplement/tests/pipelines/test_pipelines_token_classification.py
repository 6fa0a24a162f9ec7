"""Stands in for tests/pipelines/test_pipelines_token_classification.py, which the sdist lacks.

PipelineTesterMixin takes `get_test_pipeline` and `run_pipeline_test` from `TokenClassificationPipelineTests` (and
then runs the pipeline over 10 examples with `batch_size=4` itself). These two make the checks of the repository's
versions: without aggregation one entry per kept token with entity, score, index, word and its span in the text;
with each aggregation strategy (simple, first, max, average) entity groups with entity_group, score, word and span;
for a text and for a list of texts. The pipeline is built with `pipeline()`, the way users build one.
"""

import unittest

from transformers import pipeline
from transformers.pipelines import AggregationStrategy

TOKEN_KEYS = {"entity", "score", "index", "word", "start", "end"}
GROUP_KEYS = {"entity_group", "score", "word", "start", "end"}


class TokenClassificationPipelineTests(unittest.TestCase):
    def get_test_pipeline(self, model, tokenizer=None, image_processor=None, feature_extractor=None, processor=None,
                          dtype="float32"):
        classifier = pipeline("token-classification", model=model, tokenizer=tokenizer, dtype=dtype)
        return classifier, ["A simple string", "A simple string that is quite a bit longer"]

    def check_entities(self, outputs, keys, text):
        self.assertIsInstance(outputs, list)
        for entity in outputs:
            self.assertEqual(set(entity), keys)
            self.assertIsInstance(entity["word"], str)
            self.assertTrue(0.0 <= entity["score"] <= 1.0)
            self.assertEqual(text[entity["start"] : entity["end"]].split(), entity["word"].split())

    def run_pipeline_test(self, classifier, _):
        # Every label kept, so that the checks see entities whatever the tiny model predicts.
        text = "A simple string"
        self.check_entities(classifier(text, ignore_labels=[]), TOKEN_KEYS, text)
        texts = ["list of strings", "A simple string that is quite a bit longer"]
        outputs = classifier(texts, ignore_labels=[])
        self.assertEqual(len(outputs), 2)
        for output, one_text in zip(outputs, texts):
            self.check_entities(output, TOKEN_KEYS, one_text)

        for strategy in ("simple", "first", "max", "average"):
            grouped = pipeline("token-classification", model=classifier.model, tokenizer=classifier.tokenizer,
                               aggregation_strategy=strategy)
            self.assertEqual(grouped._postprocess_params["aggregation_strategy"], AggregationStrategy[strategy.upper()])
            self.check_entities(grouped(text, ignore_labels=[]), GROUP_KEYS, text)
