"""Run by tests/test_pipelines.py in a Python environment where hf_elmo cannot be imported, only transformers and torch.

    python remote_pipeline_probe.py OUTPUT.pt TAGGER_FOLDER BASE_FOLDER

Builds `pipeline("token-classification")` from TAGGER_FOLDER with each aggregation strategy and
`pipeline("feature-extraction")` from BASE_FOLDER, with trust_remote_code=True, both from the folder and from model
objects loaded first, and saves their results (and the pipeline classes' modules) to OUTPUT.pt.
"""

import importlib.util
import sys

import torch
import transformers

TEXTS = ["Peter Blackburn visited Brussels, Belgium.", "Brussels", "He left ."]  # as in test_pipelines.py
WORDS = ["Peter", "Blackburn", "visited", "Brussels", ",", "Belgium", "."]

if importlib.util.find_spec("hf_elmo") is not None:
    sys.exit("hf_elmo is importable here: this check needs an environment without it")


def plain(entities):
    """The entities with Python floats, so that they compare as they are."""
    if isinstance(entities, list):
        return [plain(entity) for entity in entities]
    return {key: float(value) if key == "score" else value for key, value in entities.items()}


output, tagger, base = sys.argv[1:4]
results = {}
for strategy in ("none", "simple", "first", "average", "max"):
    tag = transformers.pipeline("token-classification", model=tagger, trust_remote_code=True, aggregation_strategy=strategy)
    results[f"module {strategy}"] = type(tag).__module__
    results[strategy] = plain(tag(TEXTS, batch_size=2))
    results[f"{strategy} words"] = plain(tag(WORDS, is_split_into_words=True))
objects = transformers.pipeline(
    "token-classification",
    model=transformers.AutoModelForTokenClassification.from_pretrained(tagger, trust_remote_code=True),
    tokenizer=transformers.AutoTokenizer.from_pretrained(tagger, trust_remote_code=True),
    aggregation_strategy="first",
)
results["first from objects"] = plain(objects(TEXTS))

extract = transformers.pipeline("feature-extraction", model=base, trust_remote_code=True)
results["module feature-extraction"] = type(extract).__module__
results["features"] = extract(TEXTS, return_tensors=True)
results["features batched"] = extract(TEXTS, batch_size=3, return_tensors=True)
torch.save(results, output)
