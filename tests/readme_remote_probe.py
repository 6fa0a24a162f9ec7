"""Run by tests/test_readme_examples.py in a Python environment where hf_elmo cannot be imported, only transformers
and torch.

    python readme_remote_probe.py OUTPUT.json CODE SENTENCE

Executes CODE (the README's "Anyone can then load it with transformers 5.13 or later alone" block), then tags
SENTENCE with the `tagger` it made, and writes the entities and the modules of what the block loaded to OUTPUT.json.
"""

import importlib.util
import json
import sys

if importlib.util.find_spec("hf_elmo") is not None:
    sys.exit("hf_elmo is importable here: this check needs an environment without it")

output, code, sentence = sys.argv[1:4]
namespace = {}
exec(compile(code, "README.md", "exec"), namespace)
model, tokenizer, tagger = namespace["model"], namespace["tokenizer"], namespace["tagger"]
loaded = {"model": model, "tokenizer": tokenizer, "pipeline": tagger, "pipeline model": tagger.model,
          "pipeline tokenizer": tagger.tokenizer}
results = {
    "classes": {name: f"{type(value).__module__}.{type(value).__name__}" for name, value in loaded.items()},
    # (numpy scores and indices as Python numbers)
    "entities": [{key: getattr(value, "item", lambda: value)() for key, value in entity.items()}
                 for entity in tagger(sentence)],
}
with open(output, "w", encoding="utf-8") as handle:
    json.dump(results, handle)
