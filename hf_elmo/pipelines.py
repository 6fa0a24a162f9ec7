"""transformers' `pipeline("feature-extraction")` and `pipeline("token-classification")`, made to read ELMo.

ELMo's inputs are `[batch, words, chars]`: every position is one whole word, spelled as character ids. The stock
pipelines assume a position holds one token id, which fails in two places:

* feature extraction with `batch_size > 1` runs one padded model call and then cuts every output field along dim 0;
  ELMo's `final_states` are `[layers, batch, ...]`, so that cut fails. `ElmoFeatureExtractionPipeline` hands the
  pipeline only the batch-first outputs and drops the padding from each sentence's vectors, so batched and unbatched
  calls give the same `[1, words, 2P]` features.
* token classification reads a position's token id as one integer, and allows word-level aggregation (`first`,
  `average`, `max`) and pre-split words only with a fast tokenizer. `ElmoTokenClassificationPipeline` takes each
  position's word and offsets from the tokenizer: every position is a word, so every aggregation strategy gives
  word-level entities with the words' character spans in the text.

Any other model runs exactly as in transformers' pipelines. `register_pipelines` installs both in transformers'
pipeline registry; `configuration_elmo.py` calls it on import, so that it also happens where only the files of a
saved folder are loaded as remote code (the config is the first of them that `pipeline()` imports, before it picks
the task's class). This file imports only transformers, torch and numpy: it travels with saved folders.
"""

import numpy as np
from transformers.pipelines import PIPELINE_REGISTRY, FeatureExtractionPipeline, TokenClassificationPipeline
from transformers.pipelines.token_classification import AggregationStrategy


def _is_elmo(model) -> bool:
    return getattr(model.config, "model_type", None) == "elmo"


def _aggregation_strategy(value) -> AggregationStrategy:
    """`value`, an `AggregationStrategy` or its name in any case, as the strategy; transformers' own lookup,
    `AggregationStrategy[value.upper()]`, raised a bare KeyError ('BEST') for a name it lacks."""
    names = [strategy.value for strategy in AggregationStrategy]
    if isinstance(value, str) and value.lower() in names:  # (an AggregationStrategy is a str too)
        return AggregationStrategy(value.lower())
    raise ValueError(f"aggregation_strategy must be one of {', '.join(names)}, got {value!r}")


class ElmoFeatureExtractionPipeline(FeatureExtractionPipeline):
    """The feature-extraction pipeline; for ELMo models, the top biLSTM layer of each sentence, [1, words, 2P] (of
    the biLM inside a task model too, as `pipeline()` gives when it loads that model's folder itself)."""

    def _forward(self, model_inputs):
        if not _is_elmo(self.model):
            return super()._forward(model_inputs)
        outputs = self.model.base_model(**model_inputs, output_final_states=False, return_dict=True)
        return {"last_hidden_state": outputs.last_hidden_state, "attention_mask": outputs.attention_mask}

    def postprocess(self, model_outputs, return_tensors=False):
        if not _is_elmo(self.model):
            return super().postprocess(model_outputs, return_tensors=return_tensors)
        # One sentence at a time here: keep its words, wherever the batch padded it.
        features = model_outputs["last_hidden_state"][:, model_outputs["attention_mask"][0].bool()]
        return features if return_tensors else features.tolist()


class ElmoTokenClassificationPipeline(TokenClassificationPipeline):
    """The token-classification pipeline; for ELMo models, one entity per word of the text (or per given word with
    `is_split_into_words=True`), with its span in the text, grouped into entities by every aggregation strategy."""

    def _sanitize_parameters(self, aggregation_strategy=None, stride=None, **kwargs):
        if not _is_elmo(self.model):
            return super()._sanitize_parameters(aggregation_strategy=aggregation_strategy, stride=stride, **kwargs)
        if stride is not None:
            raise ValueError("ELMo reads a whole sentence at once: the token-classification pipeline takes no stride")
        # The base class refuses `first`, `average` and `max` without a fast tokenizer, for want of word
        # boundaries; every ELMo position is a whole word, so they need none.
        preprocess_params, forward_params, postprocess_params = super()._sanitize_parameters(**kwargs)
        if aggregation_strategy is not None:
            postprocess_params["aggregation_strategy"] = _aggregation_strategy(aggregation_strategy)
        return preprocess_params, forward_params, postprocess_params

    def preprocess(self, sentence, offset_mapping=None, **preprocess_params):
        if not _is_elmo(self.model):
            yield from super().preprocess(sentence, offset_mapping=offset_mapping, **preprocess_params)
            return
        if preprocess_params["is_split_into_words"]:
            if not isinstance(sentence, list):
                raise ValueError("When `is_split_into_words=True`, `sentence` must be a list of words.")
            delimiter = preprocess_params["delimiter"]
            inputs = self.tokenizer(
                sentence, is_split_into_words=True, return_tensors="pt", return_special_tokens_mask=True
            )
            # Spans in the words joined by the delimiter, the sentence the results refer to.
            spans, start = [], 0
            for word in sentence:
                spans.append((start, start + len(word)))
                start += len(word) + len(delimiter)
            sentence = delimiter.join(sentence)
        else:
            if not isinstance(sentence, str):
                raise ValueError("When `is_split_into_words=False`, `sentence` must be an untokenized string.")
            inputs = self.tokenizer(
                sentence, return_tensors="pt", return_special_tokens_mask=True, return_offsets_mapping=True
            )
            spans = [tuple(span) for span in inputs.pop("offset_mapping")[0].tolist()]
        model_inputs = dict(inputs)
        model_inputs["offset_mapping"] = offset_mapping if offset_mapping is not None else [spans]
        model_inputs["sentence"] = sentence
        model_inputs["is_last"] = True
        yield model_inputs

    def postprocess(self, all_outputs, aggregation_strategy=AggregationStrategy.NONE, ignore_labels=None):
        entities = super().postprocess(all_outputs, aggregation_strategy, ignore_labels)
        if _is_elmo(self.model):
            # A group's word is its span of the text, as a single word's is: transformers joins the group's words
            # with spaces ("今 天" for 今天, ", world ." for ",  world.").
            sentence = all_outputs[0]["sentence"]
            for entity in entities:
                entity["word"] = sentence[entity["start"] : entity["end"]]
        return entities

    def gather_pre_entities(self, sentence, input_ids, scores, offset_mapping, special_tokens_mask,
                            aggregation_strategy, word_ids=None, word_to_chars_map=None):
        if not _is_elmo(self.model):
            return super().gather_pre_entities(
                sentence, input_ids, scores, offset_mapping, special_tokens_mask, aggregation_strategy,
                word_ids=word_ids, word_to_chars_map=word_to_chars_map,
            )
        # Each position is one word, never part of one; its text is its span of the sentence. A batch of a
        # left-padding tokenizer puts padding words (all zeros) before the sentence's, which its spans do not count.
        padded = int(np.asarray(input_ids).reshape(len(scores), -1).any(axis=1).argmax()) if len(scores) else 0
        pre_entities = []
        for index, word_scores in enumerate(scores):
            if special_tokens_mask[index]:
                continue
            start, end = (int(offset) for offset in offset_mapping[index - padded])
            pre_entities.append({
                "word": sentence[start:end], "scores": word_scores, "start": start, "end": end, "index": index - padded,
                "is_subword": False,
            })
        return pre_entities


ELMO_PIPELINES = {
    "feature-extraction": ElmoFeatureExtractionPipeline,
    "token-classification": ElmoTokenClassificationPipeline,
}


def register_pipelines() -> None:
    """Make `pipeline()` build the classes above for their tasks (for every model; see above)."""
    for task, pipeline_class in ELMO_PIPELINES.items():
        entry = PIPELINE_REGISTRY.supported_tasks[task]
        # Replaced in place rather than through register_pipeline, which warns about overwriting a built-in task,
        # and marks the class as a custom pipeline (`_registered_impl`): saving any model's pipeline of it, a BERT's
        # too, would write this file and `custom_pipelines` into its folder, which then loads only as remote code.
        entry["impl"] = pipeline_class
