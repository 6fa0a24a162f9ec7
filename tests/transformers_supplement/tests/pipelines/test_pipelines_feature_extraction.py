"""Stands in for tests/pipelines/test_pipelines_feature_extraction.py, which the sdist lacks.

PipelineTesterMixin takes `get_test_pipeline` and `run_pipeline_test` from `FeatureExtractionPipelineTests` (and
then runs the pipeline over 10 examples with `batch_size=4` itself). These two make the checks of the repository's
versions: the features of one text are `[1, tokens, hidden]`, a list of texts gives one such entry per text, with
tensors or nested lists. The pipeline is built with `pipeline()`, the way users build one, which picks the task's
registered class.
"""

import unittest

import torch
from transformers import pipeline


class FeatureExtractionPipelineTests(unittest.TestCase):
    def get_test_pipeline(self, model, tokenizer=None, image_processor=None, feature_extractor=None, processor=None,
                          dtype="float32"):
        if tokenizer is None:
            self.skipTest(reason="No tokenizer")
        extractor = pipeline("feature-extraction", model=model, tokenizer=tokenizer, dtype=dtype)
        return extractor, ["This is a test", "This is another test"]

    def run_pipeline_test(self, extractor, examples):
        hidden_size = extractor.model.config.hidden_size
        words = len(extractor.tokenizer.tokenize("This is a test"))
        outputs = extractor("This is a test")
        self.assertEqual(torch.tensor(outputs).shape, (1, words, hidden_size))
        as_tensor = extractor("This is a test", return_tensors=True)
        self.assertIsInstance(as_tensor, torch.Tensor)
        self.assertEqual(as_tensor.shape, (1, words, hidden_size))
        outputs = extractor(["This is a test", "Another test"])
        self.assertEqual(len(outputs), 2)
        for text, output in zip(["This is a test", "Another test"], outputs):
            self.assertEqual(torch.tensor(output).shape, (1, len(extractor.tokenizer.tokenize(text)), hidden_size))
