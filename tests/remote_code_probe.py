"""Run by tests/test_hub.py in a Python environment where hf_elmo cannot be imported, only transformers and torch.

    python remote_code_probe.py OUTPUT.pt SOURCE:AUTO_CLASS [SOURCE:AUTO_CLASS ...]

Loads each SOURCE (a folder or a Hub id) through AutoConfig, AutoTokenizer, AutoModel and AUTO_CLASS with
trust_remote_code=True, runs the probe sentences and saves every output (and each repository's model card
metadata, read through the Hub client) to OUTPUT.pt.
"""

import importlib.util
import sys

import torch
import transformers
from huggingface_hub import ModelCard

PROBE = [["EU", "rejects", "German", "call", "."], ["Peter", "Blackburn"], ["天", "气"]]

if importlib.util.find_spec("hf_elmo") is not None:
    sys.exit("hf_elmo is importable here: this check needs an environment without it")

results = {}
for spec in sys.argv[2:]:
    source, auto_class = spec.rsplit(":", 1)
    config = transformers.AutoConfig.from_pretrained(source, trust_remote_code=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(source, trust_remote_code=True)
    batch = tokenizer(PROBE, is_split_into_words=True, padding=True, return_tensors="pt")
    outputs = {"config": type(config).__module__, "tokenizer": type(tokenizer).__module__}
    for name in ("AutoModel", auto_class):
        model = getattr(transformers, name).from_pretrained(source, trust_remote_code=True).eval()
        with torch.no_grad():
            outputs[name] = model(**batch)[0]
        outputs[f"{name} module"] = type(model).__module__
        outputs[f"{name} class"] = type(model).__name__
    if "/" in source and not source.startswith("/"):
        card = ModelCard.load(source)
        outputs["card"] = {**card.data.to_dict(), "text": card.text}
    results[spec] = outputs
torch.save(results, sys.argv[1])
