"""`pipeline("feature-extraction")` that batches ELMo.

transformers' pipeline runs `batch_size > 1` as one padded model call and then cuts every output field along
dim 0. ELMo's `final_states` are `[layers, batch, ...]` and `elmo_representations` is a tuple of mixes, so that
cut fails. This subclass hands the pipeline only the batch-first outputs of an ELMo model and drops the padding
from each sentence's vectors, so batched and unbatched calls give the same `[1, words, 2P]` features. Any other
model runs exactly as in `FeatureExtractionPipeline`.
"""

from transformers.pipelines import PIPELINE_REGISTRY, FeatureExtractionPipeline


def _is_elmo(model) -> bool:
    return getattr(model.config, "model_type", None) == "elmo"


class ElmoFeatureExtractionPipeline(FeatureExtractionPipeline):
    """The feature-extraction pipeline; for ELMo models, the top biLSTM layer of each sentence, [1, words, 2P]."""

    def _forward(self, model_inputs):
        outputs = self.model(**model_inputs, output_final_states=False) if _is_elmo(self.model) else self.model(**model_inputs)
        if not _is_elmo(self.model):
            return outputs
        return {"last_hidden_state": outputs.last_hidden_state, "attention_mask": outputs.attention_mask}

    def postprocess(self, model_outputs, return_tensors=False):
        if not _is_elmo(self.model):
            return super().postprocess(model_outputs, return_tensors=return_tensors)
        # One sentence at a time here: keep its words, wherever the batch padded it.
        features = model_outputs["last_hidden_state"][:, model_outputs["attention_mask"][0]]
        return features if return_tensors else features.tolist()


def register_feature_extraction_pipeline() -> None:
    """Make `pipeline("feature-extraction")` build `ElmoFeatureExtractionPipeline` (for every model; see above)."""
    task = PIPELINE_REGISTRY.supported_tasks["feature-extraction"]
    # Replaced in place rather than through register_pipeline, which warns about overwriting a built-in task.
    task["impl"] = ElmoFeatureExtractionPipeline
    ElmoFeatureExtractionPipeline._registered_impl = {"feature-extraction": task}
