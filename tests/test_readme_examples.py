"""The README's Python examples run as written, and give what their comments promise.

Each block runs unchanged in a folder of its own that holds the models it names: "elmo-original" (the converted
test fixture) and "build/ner-finetuned" (a word tagger on it, saved with a model card as modeling/finetune.py
saves one). Only the Hub upload is stood in for (there is no network); the remote-code block loads its repository
from an offline cache, in an environment without hf_elmo.
"""

import ast
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification, AutoTokenizer, pipeline

from conftest import readme_python_block, solved_tagger
from test_hub import fake_hub_snapshot, fake_hub_uploads

from hf_elmo import ElmoConfig, ElmoForTokenClassification, ElmoTokenizer
from hf_elmo.model_card import render_model_card

HUB_ID = "your-name/elmo-ner"  # the README's repository, laid out in the offline cache as it is
SENTENCE = "Peter Blackburn visited Brussels."  # what the README tags
LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
TAGS = ["B-PER", "I-PER", "O", "B-LOC", "O"]  # of SENTENCE's words, which the tagger below is made to predict


@pytest.fixture(scope="module")
def tagger_folder(converted, tmp_path_factory) -> Path:
    """A word tagger on the fixture ELMo whose classifier is solved (least squares) to predict TAGS in SENTENCE,
    each with a score of about 0.65 (far from 1, so that compared scores differ where the computations do), saved
    with its tokenizer and a model card (README.md) with results, as modeling/finetune.py's folders are."""
    tokenizer, model = solved_tagger(converted["allennlp-elmo"], [SENTENCE], TAGS, LABELS, tag_logit=2.0, other_logit=0.0)
    card = render_model_card(model, HUB_ID, source="made by a test", results="| test | F1 |\n|---|---|\n| x | 0.5 |")
    folder = tmp_path_factory.mktemp("tagger") / "ner-finetuned"
    model.save_hub_folder(folder, HUB_ID, model_card=card, tokenizer=tokenizer)
    return folder


def run_in(folder: Path, monkeypatch, code: str, models: dict[str, Path]) -> dict:
    """Execute `code` with `folder` as the working directory, in which each path of `models` leads to its model's
    folder; the names the code defines."""
    monkeypatch.chdir(folder)
    for name, target in models.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).symlink_to(target)
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    return namespace


def first_argument(code: str, call: str):
    """The literal list that `code` passes first to `call`."""
    return ast.literal_eval(re.search(rf"{call}\((\[.*?\])", code).group(1))


def assert_as_the_comments_say(output, words: list[int], config: ElmoConfig) -> None:
    """What "Using the model" says of each output, for a batch of sentences of `words` words."""
    P, C, layers = config.projection_dim, config.cell_size, config.num_lstm_layers
    batch, length = len(words), max(words)
    at_words = torch.tensor([[True] * count + [False] * (length - count) for count in words])
    assert output.attention_mask.tolist() == at_words.long().tolist()
    assert len(output.hidden_states) == layers + 1
    token_layer = output.hidden_states[0]
    assert torch.equal(token_layer[..., :P], token_layer[..., P:])
    assert torch.equal(output.hidden_states[-1], output.last_hidden_state)
    assert len(output.elmo_representations) == config.num_output_representations
    for name, value in [("last_hidden_state", output.last_hidden_state),
                        *((f"hidden_states[{i}]", layer) for i, layer in enumerate(output.hidden_states)),
                        *((f"elmo_representations[{i}]", mix) for i, mix in enumerate(output.elmo_representations))]:
        assert list(value.shape) == [batch, length, 2 * P], name
        assert (value[at_words].abs().sum(-1) > 0).all() and value[~at_words].abs().sum() == 0, name
    h, c = output.final_states
    assert list(h.shape) == [layers, batch, 2 * P] and list(c.shape) == [layers, batch, 2 * C]


def test_quickstart_python_block_runs_the_default_model_on_the_fast_path(tmp_path, monkeypatch, capsys):
    """The Quickstart's block, as written: the default model's top layer is [2 sentences, 5 words, 512], printed as
    its comment says, and under its torch.no_grad() each biLSTM layer runs the inference fast path (its comment)."""
    import hf_elmo.modeling_elmo as modeling

    fast_calls = []
    fast = modeling.fast_bilstm_layer
    monkeypatch.setattr(modeling, "fast_bilstm_layer", lambda *args, **kwargs: fast_calls.append(1) or fast(*args, **kwargs))
    code = readme_python_block("## Quickstart")
    found = run_in(tmp_path, monkeypatch, code, {})
    printed = capsys.readouterr().out.strip()
    assert printed == str(torch.Size([2, 5, 512])) and printed in code
    assert list(found["output"].last_hidden_state.shape) == [2, 5, 512]
    assert len(fast_calls) == found["model"].config.num_lstm_layers


def test_using_the_model(converted, tmp_path, monkeypatch):
    """"Using the model": every output as its comment describes it (shapes, the token layer [x; x], the top layer
    last in hidden_states, attention_mask, 0 at padding), for the block's batch and, since that one has no padding
    and as many sentences as the model has layers, for a padded batch of 3 through the block's model."""
    code = readme_python_block("## Using the model")
    found = run_in(tmp_path, monkeypatch, code, {"elmo-original": converted["allennlp-elmo"]})
    config = ElmoConfig.from_pretrained(converted["allennlp-elmo"])
    tokenizer, model = found["tokenizer"], found["model"]
    words = [len(tokenizer.tokenize(text)) for text in first_argument(code, "tokenizer")]
    assert_as_the_comments_say(found["output"], words, config)
    texts = ["I eat an apple .", "Hello", "Apple is big"]
    with torch.no_grad():
        output = model(**tokenizer(texts, padding=True, return_tensors="pt"))
    assert_as_the_comments_say(output, [5, 1, 3], config)


def test_task_heads_and_fine_tuning_with_trainer(converted, tmp_path, monkeypatch):
    """"Task heads and fine-tuning with Trainer": both heads train (every trainable parameter moves from its
    initial value, but for the classifier's weight, whose random start the block drew and this test does not know;
    only the task mix and the classifier are trainable, the biLM stays as loaded), and the saved
    "elmo-sentiment" folder reloads through AutoModelForSequenceClassification with the trained model's outputs."""
    base = converted["allennlp-elmo"]
    found = run_in(tmp_path, monkeypatch, readme_python_block("## Task heads and fine-tuning with Trainer"),
                   {"elmo-original": base})
    initial = {  # the heads as from_pretrained makes them: mix s = 0, gamma = 1, classifier bias 0 (weight random)
        "tagger": AutoModelForTokenClassification.from_pretrained(base, num_labels=5),
        "classifier": AutoModelForSequenceClassification.from_pretrained(base, num_labels=2, sequence_pooling="mean_max"),
    }
    for head, fresh in initial.items():
        trained = dict(found[head].named_parameters())
        assert {name for name, parameter in trained.items() if parameter.requires_grad} == {
            "elmo.scalar_mixes.0.scalar_parameters", "elmo.scalar_mixes.0.gamma", "classifier.weight", "classifier.bias"}
        for name, before in fresh.named_parameters():
            after = trained[name].detach().cpu()
            if trained[name].requires_grad:
                assert name == "classifier.weight" or not torch.equal(after, before), (head, name)
            else:
                assert torch.equal(after, before), (head, name)

    folder = tmp_path / "elmo-sentiment"
    assert {"config.json", "model.safetensors", "modeling_elmo.py", "tokenizer_config.json",
            "tokenization_elmo.py"} <= {path.name for path in folder.iterdir()}
    classifier = found["classifier"].eval()
    reloaded = AutoModelForSequenceClassification.from_pretrained(folder).to(classifier.device).eval()
    assert reloaded.config.sequence_pooling == "mean_max"
    batch = AutoTokenizer.from_pretrained(folder)(["A three-hour cinema master class.", "Dull and overlong."],
                                                   padding=True, return_tensors="pt").to(classifier.device)
    with torch.no_grad():
        assert torch.equal(reloaded(**batch).logits, classifier(**batch).logits)


def test_pipelines_feature_extraction_and_word_tagging(converted, tagger_folder, tmp_path, monkeypatch):
    """"Pipelines": each sentence's features are [1, words, 2P], the top biLSTM layer of its words; the tagger
    gives word entities as the comment shows them, each with its span in the text."""
    code = readme_python_block("## Pipelines: feature extraction and word tagging")
    found = run_in(tmp_path, monkeypatch, code,
                   {"elmo-original": converted["allennlp-elmo"], "build/ner-finetuned": tagger_folder})
    config = ElmoConfig.from_pretrained(converted["allennlp-elmo"])
    tokenizer = ElmoTokenizer.from_pretrained(converted["allennlp-elmo"])
    texts = first_argument(code, "extractor")
    assert len(found["features"]) == len(texts)
    model = found["extractor"].model
    for text, features in zip(texts, found["features"]):
        assert tuple(features.shape) == (1, len(tokenizer.tokenize(text)), 2 * config.projection_dim), text
        with torch.no_grad():
            top = model(**tokenizer(text, return_tensors="pt").to(model.device)).last_hidden_state
        # (batched, as the README runs it, against one sentence alone: float rounding, within the README's 5e-6)
        torch.testing.assert_close(features, top.cpu(), atol=5e-6, rtol=0)

    # The comment under the call, with its "..." (the scores, the other entities' fields) left out.
    comment = re.search(rf'\ntagger\({re.escape(json.dumps(SENTENCE))}\)\n# (.*)\n', code).group(1)
    shown = ast.literal_eval(comment.replace(", ...}", "}"))
    entities = found["tagger"](SENTENCE)
    assert len(entities) == len(shown)
    for entity, promised in zip(entities, shown):
        assert entity.keys() == {"entity_group", "score", "word", "start", "end"}, entity
        assert entity.items() >= promised.items(), (entity, promised)
        assert SENTENCE[entity["start"]:entity["end"]] == entity["word"], entity


def test_publishing_on_the_hub_pushes_the_folder_with_its_card(tagger_folder, tmp_path, monkeypatch):
    """"Publishing on the Hub", push_to_hub: one commit of the tagger, with the folder's README.md as its card,
    byte for byte, and the tokenizer's files (the upload intercepted as in test_hub.py)."""
    uploads = fake_hub_uploads(monkeypatch, ElmoForTokenClassification)
    found = run_in(tmp_path, monkeypatch, readme_python_block("## Publishing on the Hub"),
                   {"build/ner-finetuned": tagger_folder})
    assert len(uploads) == 1
    upload = uploads[0]
    assert upload["repo_id"] == HUB_ID
    assert upload["card"] == (tagger_folder / "README.md").read_text(encoding="utf-8")
    assert {"config.json", "model.safetensors", "modeling_elmo.py", "tokenizer_config.json",
            "tokenization_elmo.py", "README.md"} <= set(upload["files"])
    assert type(upload["tokenizer"]) is ElmoTokenizer
    state, uploaded = found["model"].state_dict(), upload["state"]
    assert state.keys() == uploaded.keys() and all(torch.equal(state[name], uploaded[name]) for name in state)


def test_publishing_on_the_hub_loads_with_transformers_alone(tagger_folder, python_without_hf_elmo, tmp_path):
    """"Anyone can then load it with transformers 5.13 or later alone": the block runs where hf_elmo cannot be
    imported, from the repository in an offline Hub cache; its pipeline is the repository's code and tags the
    README's sentence as the installed package's pipeline tags the same folder."""
    hf_home = tmp_path / "hf_home"
    fake_hub_snapshot(hf_home, HUB_ID, tagger_folder)
    code = readme_python_block("Anyone can then load it with transformers 5.13 or later alone")
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    result = subprocess.run(
        [python_without_hf_elmo, Path(__file__).with_name("readme_remote_probe.py"), tmp_path / "remote.json", code,
         SENTENCE], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    remote = json.loads((tmp_path / "remote.json").read_text())

    for name, qualified in remote["classes"].items():
        assert qualified.startswith("transformers_modules."), (name, qualified)
    assert remote["classes"]["model"].endswith(".ElmoForTokenClassification")
    assert remote["classes"]["tokenizer"].endswith(".ElmoTokenizer")
    installed = pipeline("token-classification", model=str(tagger_folder))
    assert type(installed.model).__module__ == "hf_elmo.modeling_elmo"
    expected = installed(SENTENCE)
    assert [entity["entity"] for entity in expected] == [tag for tag in TAGS if tag != "O"]
    assert len(remote["entities"]) == len(expected)
    for found, wanted in zip(remote["entities"], expected):
        assert {key: value for key, value in found.items() if key != "score"} == {
            key: value for key, value in wanted.items() if key != "score"}
        assert found["score"] == pytest.approx(float(wanted["score"]), abs=1e-6)
