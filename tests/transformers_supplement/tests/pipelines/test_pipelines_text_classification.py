"""Stands in for tests/pipelines/test_pipelines_text_classification.py, which the sdist lacks.

PipelineTesterMixin takes `get_test_pipeline` and `run_pipeline_test` from `TextClassificationPipelineTests` (and
then runs the pipeline over 10 examples with `batch_size=4` itself). These two make the checks of the repository's
versions: one label (a name of the model's `id2label`) and a score in [0, 1] per text, the labels sorted by score
with `top_k`, and every label with `top_k=None`. The repository's version also classifies text pairs
(`{"text": ..., "text_pair": ...}`); ELMo encodes single sentences, so that check is left out. The pipeline is built
with `pipeline()`, the way users build one.
"""

import unittest

from transformers import pipeline


class TextClassificationPipelineTests(unittest.TestCase):
    def get_test_pipeline(self, model, tokenizer=None, image_processor=None, feature_extractor=None, processor=None,
                          dtype="float32"):
        classifier = pipeline("text-classification", model=model, tokenizer=tokenizer, dtype=dtype)
        return classifier, ["HuggingFace is in", "This is another test"]

    def check_labels(self, outputs, labels):
        for output in outputs:
            self.assertEqual(set(output), {"label", "score"})
            self.assertIn(output["label"], labels)
            self.assertTrue(0.0 <= output["score"] <= 1.0)

    def run_pipeline_test(self, classifier, _):
        labels = set(classifier.model.config.id2label.values())
        outputs = classifier("HuggingFace is in")
        self.assertEqual(len(outputs), 1)
        self.check_labels(outputs, labels)

        outputs = classifier(["HuggingFace is in ", "Paris is in France"])
        self.assertEqual(len(outputs), 2)
        self.check_labels(outputs, labels)

        outputs = classifier("HuggingFace is in", top_k=2)
        self.assertEqual(len(outputs), 2)
        self.check_labels(outputs, labels)
        self.assertGreaterEqual(outputs[0]["score"], outputs[1]["score"])

        outputs = classifier("HuggingFace is in", top_k=None)
        self.assertEqual({output["label"] for output in outputs}, labels)
        self.assertAlmostEqual(sum(output["score"] for output in outputs), 1.0, places=5)
