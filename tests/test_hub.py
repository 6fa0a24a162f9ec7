"""Saved folders as Hub repositories: the full auto_map, remote code without hf_elmo, the model card, the upload."""

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from huggingface_hub.errors import OfflineModeIsEnabled
from transformers import AutoModel, pipeline

from conftest import REPO

from hf_elmo import (
    ELMO_AUTO_MAP,
    ElmoConfig,
    ElmoForPreTraining,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
)
from hf_elmo.model_card import default_model_card, render_model_card

PROBE = [["EU", "rejects", "German", "call", "."], ["Peter", "Blackburn"], ["天", "气"]]  # as in remote_code_probe.py
HUB_ID = "hf-elmo-test/elmo-tagger"
# Modules the copied code may import besides its own flat siblings: transformers and what it always installs.
ALLOWED_IMPORTS = {"torch", "numpy", "transformers", "tokenizers", "huggingface_hub", "safetensors"} | set(sys.stdlib_module_names)


@pytest.fixture(scope="module")
def base_path(converted):
    return converted["allennlp-elmo"]


@pytest.fixture(scope="module")
def head_folders(base_path, tmp_path_factory) -> dict[str, Path]:
    """A sentence classifier and a word tagger with seeded classifiers, saved with their tokenizer."""
    root = tmp_path_factory.mktemp("heads")
    tokenizer = ElmoTokenizer.from_pretrained(base_path)
    folders = {}
    torch.manual_seed(0)
    heads = {
        "AutoModelForSequenceClassification": ElmoForSequenceClassification.from_pretrained(
            base_path, num_labels=2, sequence_pooling="mean_max", id2label={0: "rotten", 1: "fresh"}
        ),
        "AutoModelForTokenClassification": ElmoForTokenClassification.from_pretrained(base_path, num_labels=5),
    }
    for auto_class, model in heads.items():
        torch.nn.init.normal_(model.classifier.weight)  # a classifier far from 0, so that a mix-up would show
        model.save_pretrained(root / auto_class)
        tokenizer.save_pretrained(root / auto_class)
        folders[auto_class] = root / auto_class
    return folders


def fake_hub_snapshot(hf_home: Path, repo_id: str, folder: Path) -> None:
    """Lay `folder` out as the hub client's cache of `repo_id` at one commit, as a download would leave it."""
    repo = hf_home / "hub" / f"models--{repo_id.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(folder, repo / "snapshots" / commit)


def installed_outputs(source, auto_class) -> dict[str, torch.Tensor]:
    tokenizer = ElmoTokenizer.from_pretrained(source)
    batch = tokenizer(PROBE, is_split_into_words=True, padding=True, return_tensors="pt")
    outputs = {}
    for name, auto in (("AutoModel", AutoModel), (auto_class, getattr(sys.modules["transformers"], auto_class))):
        model = auto.from_pretrained(source).eval()
        assert type(model).__module__ == "hf_elmo.modeling_elmo"
        with torch.no_grad():
            outputs[name] = model(**batch)[0]
    return outputs


def test_every_class_saves_the_whole_auto_map(base_path, tmp_path):
    expected = json.loads(json.dumps(ELMO_AUTO_MAP))
    config = ElmoConfig.from_pretrained(base_path)
    config.save_pretrained(tmp_path / "config")
    assert json.loads((tmp_path / "config" / "config.json").read_text())["auto_map"] == expected
    for cls in (ElmoModel, ElmoForSequenceClassification, ElmoForTokenClassification):
        folder = tmp_path / cls.__name__
        cls(config).save_pretrained(folder)
        assert json.loads((folder / "config.json").read_text())["auto_map"] == expected, cls.__name__
        # The folder carries the code of every class the map names, importing nothing but the allowed packages.
        defined = {}
        for path in folder.glob("*.py"):
            tree = ast.parse(path.read_text())
            defined.update({node.name: path.stem for node in tree.body if isinstance(node, ast.ClassDef)})
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    modules = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    modules = [node.module]
                else:
                    continue
                # hf_elmo may only appear inside try/except ImportError (checked by the remote load below).
                assert all(m.split(".")[0] in ALLOWED_IMPORTS | {"hf_elmo"} for m in modules), (path.name, modules)
        for reference in expected.values():
            module, name = (reference[0] if isinstance(reference, list) else reference).split(".")
            assert defined.get(name) == module, (cls.__name__, reference)
    ElmoTokenizer().save_pretrained(tmp_path / "tokenizer")
    tokenizer_config = json.loads((tmp_path / "tokenizer" / "tokenizer_config.json").read_text())
    assert tokenizer_config["auto_map"]["AutoTokenizer"][0] == "tokenization_elmo.ElmoTokenizer"


def test_remote_code_without_hf_elmo_gives_the_same_outputs(
    base_path, head_folders, python_without_hf_elmo, tmp_path
):
    """Folders and a Hub repository (offline snapshot) load through every Auto class with only transformers."""
    tokenizer = ElmoTokenizer.from_pretrained(base_path)
    tagger = ElmoForTokenClassification.from_pretrained(head_folders["AutoModelForTokenClassification"])
    card = render_model_card(
        tagger, HUB_ID, source="fine-tuned on test sentences", results="| test | F1 |\n|---|---|\n| x | 0.5 |",
        base_model="hf-elmo-test/elmo-base", license="apache-2.0",
    )
    tagger.save_hub_folder(tmp_path / "staged", HUB_ID, model_card=card, tokenizer=tokenizer)
    hf_home = tmp_path / "hf_home"
    fake_hub_snapshot(hf_home, HUB_ID, tmp_path / "staged")

    sources = {f"{folder}:{auto_class}": (folder, auto_class) for auto_class, folder in head_folders.items()}
    sources[f"{HUB_ID}:AutoModelForTokenClassification"] = (tmp_path / "staged", "AutoModelForTokenClassification")
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    probe = Path(__file__).with_name("remote_code_probe.py")
    result = subprocess.run(
        [python_without_hf_elmo, probe, tmp_path / "outputs.pt", *sources], cwd=tmp_path, env=env,
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    remote = torch.load(tmp_path / "outputs.pt")

    for spec, (folder, auto_class) in sources.items():
        outputs = remote[spec]
        for kind in ("config", "tokenizer", "AutoModel module", f"{auto_class} module"):
            assert outputs[kind].startswith("transformers_modules."), (spec, kind, outputs[kind])
        assert outputs["AutoModel class"] == "ElmoModel"
        assert outputs[f"{auto_class} class"] == ELMO_AUTO_MAP[auto_class].split(".")[1]
        for name, expected in installed_outputs(folder, auto_class).items():
            assert torch.equal(outputs[name], expected), (spec, name)

    card_data = remote[f"{HUB_ID}:AutoModelForTokenClassification"]["card"]
    assert card_data["library_name"] == "transformers"
    assert {"elmo", "custom_code"} <= set(card_data["tags"])
    assert card_data["pipeline_tag"] == "token-classification"
    assert card_data["base_model"] == "hf-elmo-test/elmo-base"
    assert card_data["license"] == "apache-2.0" and card_data["language"] == "en"
    assert "| x | 0.5 |" in card_data["text"] and "fine-tuned on test sentences" in card_data["text"]
    assert f"{sum(p.numel() for p in tagger.parameters()):,}" in card_data["text"]


def test_hub_folder_carries_hf_elmos_card(head_folders, tmp_path):
    model = ElmoForSequenceClassification.from_pretrained(head_folders["AutoModelForSequenceClassification"])
    model.save_hub_folder(tmp_path / "default", "someone/elmo-sentiment", tags=["sentiment"])
    card = (tmp_path / "default" / "README.md").read_text()
    assert card.startswith("---\n") and "library_name: transformers" in card
    for expected in ("- elmo", "- custom_code", "- sentiment", "pipeline_tag: text-classification",
                     "AutoModelForSequenceClassification.from_pretrained(\"someone/elmo-sentiment\")", "rotten, fresh"):
        assert expected in card, expected
    assert "automatically generated" not in card


def test_push_to_hub_goes_through_the_hub_client(head_folders, monkeypatch):
    """Offline, the hub client refuses the upload (its first call creates the repository)."""
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    model = ElmoForTokenClassification.from_pretrained(head_folders["AutoModelForTokenClassification"])
    with pytest.raises(OfflineModeIsEnabled):
        model.push_to_hub(HUB_ID, tokenizer=ElmoTokenizer())


class HubUploads(list):
    """What the stood-in Hub was handed: one record per commit, and every repository and branch made."""

    def __init__(self):
        super().__init__()
        self.repositories, self.branches = [], []


def fake_hub_uploads(monkeypatch, model_class) -> HubUploads:
    """push_to_hub with the Hub itself stood in for (it cannot be reached here): the three calls of the hub client
    that reach the Hub (the repository, the branch, the commit) are patched on `HfApi`, each taking the arguments the
    real call takes. Each commit records what it was handed: the repository, the options, the repositories and
    branches made before it, the client's token, the files, README.md, the tokenizer, and the weights as
    `model_class` loads them."""
    import inspect

    from huggingface_hub import CommitInfo, HfApi, RepoUrl

    uploads = HubUploads()
    real = {name: inspect.signature(getattr(HfApi, name)) for name in ("create_repo", "create_branch", "create_commit")}

    def create_repo(self, repo_id, **options):
        real["create_repo"].bind(self, repo_id, **options)
        uploads.repositories.append({"repo_id": repo_id, "token": self.token, **options})
        return RepoUrl(f"https://huggingface.co/{repo_id}")

    def create_branch(self, repo_id, **options):
        real["create_branch"].bind(self, repo_id, **options)
        uploads.branches.append(options["branch"])

    def create_commit(self, repo_id, operations, **options):
        real["create_commit"].bind(self, repo_id, operations, **options)
        files = {operation.path_in_repo: Path(operation.path_or_fileobj) for operation in operations}
        folder = files["README.md"].parent
        on_disk = {path.relative_to(folder).as_posix(): path for path in folder.rglob("*") if path.is_file()}
        assert files == on_disk  # every file of the folder, each once
        uploads.append({"repo_id": repo_id, "options": options, "repositories": list(uploads.repositories),
                        "branches": list(uploads.branches), "token": self.token, "files": sorted(files),
                        "card": files["README.md"].read_text(encoding="utf-8"),
                        "tokenizer": ElmoTokenizer.from_pretrained(folder),
                        "state": model_class.from_pretrained(folder).state_dict()})
        address = f"https://huggingface.co/{repo_id}/commit/0"
        return CommitInfo(commit_url=address, commit_message=options["commit_message"], commit_description="",
                          oid="0", pr_url=None)

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "create_branch", create_branch)
    monkeypatch.setattr(HfApi, "create_commit", create_commit)
    return uploads


def test_push_to_hub_uploads_one_folder_with_the_card_and_the_tokenizer(head_folders, monkeypatch):
    """What push_to_hub hands to the upload: one folder, in one commit, that loads as the model and holds hf-elmo's
    card and the tokenizer."""
    uploads = fake_hub_uploads(monkeypatch, ElmoForTokenClassification)
    model = ElmoForTokenClassification.from_pretrained(head_folders["AutoModelForTokenClassification"])
    url = model.push_to_hub(HUB_ID, tokenizer=ElmoTokenizer(max_characters_per_token=20), commit_message="first")
    assert url.endswith("/commit/0") and len(uploads) == 1
    upload_made = uploads[0]
    assert upload_made["repo_id"] == HUB_ID and upload_made["options"]["commit_message"] == "first"
    assert {"config.json", "model.safetensors", "modeling_elmo.py", "tokenizer_config.json", "README.md"} <= set(upload_made["files"])
    state, uploaded = model.state_dict(), upload_made["state"]
    assert state.keys() == uploaded.keys() and all(torch.equal(state[name], uploaded[name]) for name in state)
    assert upload_made["tokenizer"].max_characters_per_token == 20
    card = upload_made["card"]
    assert "library_name: transformers" in card and "pipeline_tag: token-classification" in card
    assert f'AutoModelForTokenClassification.from_pretrained("{HUB_ID}")' in card and "automatically generated" not in card


TINY = dict(cell_size=16, projection_dim=8, char_cnn_filters=[[1, 4], [2, 4]], char_embedding_dim=4)


def test_a_hub_folder_without_a_given_tokenizer_holds_the_one_its_config_describes(tmp_path):
    """save_hub_folder (and so push_to_hub) without `tokenizer`: a byte-alphabet model's folder holds the tokenizer
    its config describes, with its auto_map and code (transformers 5 finds a tokenizer's remote code only there); a
    model of a character vocabulary or with word input gets none (its char.dic and word.dic are the tokenizer's)."""
    ElmoModel(ElmoConfig(**TINY, max_characters_per_token=20)).save_hub_folder(tmp_path / "bytes", HUB_ID)
    saved = json.loads((tmp_path / "bytes" / "tokenizer_config.json").read_text())
    assert saved["auto_map"]["AutoTokenizer"][0] == "tokenization_elmo.ElmoTokenizer"
    assert saved["max_characters_per_token"] == 20 and saved["alphabet"] == "bytes"
    assert ElmoTokenizer.from_pretrained(tmp_path / "bytes").max_characters_per_token == 20
    vocabulary = dict(alphabet="vocabulary", n_characters=62, bos_char_id=1, eos_char_id=2, bow_char_id=3,
                      eow_char_id=4, pad_char_id=5)
    words = dict(word_vocab_size=10, word_embedding_dim=4, bos_word_id=1, eos_word_id=2)
    for name, fields in (("vocabulary", vocabulary), ("words", {**vocabulary, **words})):
        ElmoModel(ElmoConfig(**TINY, **fields)).save_hub_folder(tmp_path / name, HUB_ID)
        assert (tmp_path / name / "config.json").is_file() and not (tmp_path / name / "tokenizer_config.json").exists()


# Where hf_elmo cannot be imported: a tagger saved without its tokenizer, loaded from its folder's code, writes a Hub
# folder without a tokenizer given; that folder loads the model and the tokenizer as remote code, which tag the probe.
REMOTE_HUB_FOLDER = """
import importlib.util, sys
import torch, transformers
if importlib.util.find_spec("hf_elmo") is not None:
    sys.exit("hf_elmo is importable here")
source, staged, output = sys.argv[1:4]
model = transformers.AutoModelForTokenClassification.from_pretrained(source, trust_remote_code=True).eval()
model.save_hub_folder(staged, "someone/elmo-tagger", tags=["ner"])
again = transformers.AutoModelForTokenClassification.from_pretrained(staged, trust_remote_code=True).eval()
tokenizer = transformers.AutoTokenizer.from_pretrained(staged, trust_remote_code=True)
batch = tokenizer([["EU", "rejects", "German", "call", "."], ["天", "气"]], is_split_into_words=True, padding=True,
                  return_tensors="pt")
with torch.no_grad():
    torch.save({"modules": [type(model).__module__, type(again).__module__, type(tokenizer).__module__],
                "input_ids": batch["input_ids"], "logits": again(**batch).logits}, output)
"""


def test_a_remote_code_model_writes_a_hub_folder_that_loads_as_remote_code(python_without_hf_elmo, tmp_path):
    """save_hub_folder (and so push_to_hub) of a model loaded with trust_remote_code where hf_elmo is not installed,
    from a folder saved without its tokenizer: README.md is transformers' generic card with the tags (hf-elmo's card
    template ships with the package only), and the folder loads again as remote code, the tokenizer too, giving the
    installed package's ids and logits."""
    torch.manual_seed(0)
    tagger = ElmoForTokenClassification(ElmoConfig(**TINY, num_labels=3)).eval()
    tagger.save_pretrained(tmp_path / "tagger")
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    result = subprocess.run([python_without_hf_elmo, "-c", REMOTE_HUB_FOLDER, tmp_path / "tagger", tmp_path / "staged",
                             tmp_path / "out.pt"], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    remote = torch.load(tmp_path / "out.pt")
    assert all(module.startswith("transformers_modules.") for module in remote["modules"]), remote["modules"]
    staged = tmp_path / "staged"
    card = (staged / "README.md").read_text(encoding="utf-8")
    assert card.startswith("---\n") and "library_name: transformers" in card and "- ner" in card
    assert json.loads((staged / "config.json").read_text())["auto_map"] == json.loads(json.dumps(ELMO_AUTO_MAP))
    batch = ElmoTokenizer()([["EU", "rejects", "German", "call", "."], ["天", "气"]], is_split_into_words=True,
                            padding=True, return_tensors="pt")
    assert torch.equal(remote["input_ids"], batch["input_ids"])
    with torch.no_grad():
        assert torch.equal(remote["logits"], tagger(**batch).logits)


def test_push_to_hub_commits_to_a_branch_it_makes_as_transformers_does(head_folders, monkeypatch):
    """As transformers: the repository is made with `private` and the client holds `token`; a `revision` branch is
    made before the commit (not a pull request's ref), and the commit goes there; the default commit message is
    "Upload model" for a class named ...Model, else "Upload CLASS"."""
    uploads = fake_hub_uploads(monkeypatch, ElmoForTokenClassification)
    model = ElmoForTokenClassification.from_pretrained(head_folders["AutoModelForTokenClassification"])
    model.push_to_hub(HUB_ID, revision="v1", commit_description="why", private=True, token="hf_secret")
    model.push_to_hub(HUB_ID, revision="refs/pr/3")
    assert uploads[0]["repositories"] == [{"repo_id": HUB_ID, "token": "hf_secret", "private": True, "exist_ok": True}]
    assert uploads[0]["token"] == "hf_secret" and uploads[1]["token"] is None
    assert [upload["branches"] for upload in uploads] == [["v1"], ["v1"]]  # none made for the pull request
    assert [upload["options"]["revision"] for upload in uploads] == ["v1", "refs/pr/3"]
    assert uploads[0]["options"]["commit_message"] == "Upload ElmoForTokenClassification"
    assert uploads[0]["options"]["commit_description"] == "why"
    uploads = fake_hub_uploads(monkeypatch, ElmoModel)
    ElmoModel.from_pretrained(head_folders["AutoModelForTokenClassification"]).push_to_hub(HUB_ID)
    assert uploads[0]["options"]["commit_message"] == "Upload model"


def test_push_to_hub_refuses_a_bad_card_or_tags_before_anything_reaches_the_hub(head_folders, monkeypatch):
    """A card that is not text, or tags that are not a list of strings, are refused before the repository or the
    branch is made; so are a card that is not UTF-8 and one whose header does not read with tags to add (these two
    were refused after the repository was made, the second as yaml's traceback)."""
    uploads = fake_hub_uploads(monkeypatch, ElmoForTokenClassification)
    model = ElmoForTokenClassification.from_pretrained(head_folders["AutoModelForTokenClassification"])
    with pytest.raises(ValueError, match="model_card must be the card's text"):
        model.push_to_hub(HUB_ID, revision="v1", model_card=Path("README.md"))
    with pytest.raises(ValueError, match="tags must be a list of strings"):
        model.push_to_hub(HUB_ID, revision="v1", tags="ner")
    with pytest.raises(ValueError, match=r"^model_card is not UTF-8 text \(surrogates not allowed at character 7\)$"):
        model.push_to_hub(HUB_ID, revision="v1", model_card="# card \ud800")
    with pytest.raises(ValueError, match=r"^model_card: its header cannot be read to add the tags \("):
        model.push_to_hub(HUB_ID, revision="v1", model_card="---\n: : bad\n---\n# card\n", tags=["ner"])
    assert (uploads, uploads.repositories, uploads.branches) == ([], [], [])


@pytest.mark.parametrize("status, create_pr, commits", [(403, True, True), (403, False, False), (404, True, False)])
def test_push_to_hub_goes_on_without_its_branch_only_for_a_pull_request_it_may_not_write(
        head_folders, monkeypatch, status, create_pr, commits):
    """A branch the Hub refuses to make (403) is no error for a pull request (the branch must exist, and the commit
    says so if not), as in transformers; any other refusal, or a 403 for a plain commit, is raised."""
    from types import SimpleNamespace

    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    uploads = fake_hub_uploads(monkeypatch, ElmoForTokenClassification)

    def refuse_branch(self, repo_id, *, branch, **options):
        # What the error reads of the hub client's HTTP response (whose class depends on the hub client's version).
        response = SimpleNamespace(status_code=status, headers={}, request=None)
        raise HfHubHTTPError(f"{status} refused", response=response)

    monkeypatch.setattr(HfApi, "create_branch", refuse_branch)
    model = ElmoForTokenClassification.from_pretrained(head_folders["AutoModelForTokenClassification"])
    if commits:
        model.push_to_hub(HUB_ID, revision="v1", create_pr=create_pr)
        assert len(uploads) == 1 and uploads[0]["options"]["create_pr"] is True
    else:
        with pytest.raises(HfHubHTTPError, match=f"{status} refused"):
            model.push_to_hub(HUB_ID, revision="v1", create_pr=create_pr)
        assert uploads == []


def test_push_to_hub_uploads_the_card_it_is_given_as_it_is(head_folders, monkeypatch):
    """The README's `push_to_hub(..., model_card=Path(".../README.md").read_text())`: the uploaded README.md is
    that card, byte for byte, not the default one."""
    uploads = fake_hub_uploads(monkeypatch, ElmoForTokenClassification)
    folder = head_folders["AutoModelForTokenClassification"]
    model = ElmoForTokenClassification.from_pretrained(folder)
    card = render_model_card(
        model, HUB_ID, source="fine-tuned on test sentences", results="## Results\n\n| split | F1 |\n|---|---|\n| test | 12.34 |",
        base_model="hf-elmo-test/elmo-base",
    ) + "\nA paragraph of the author's own, with a trailing space \n"
    assert card != default_model_card(model, HUB_ID)
    model.push_to_hub(HUB_ID, tokenizer=ElmoTokenizer.from_pretrained(folder), model_card=card)
    assert len(uploads) == 1 and uploads[0]["card"] == card


def test_feature_extraction_pipeline_batched_equals_unbatched(base_path):
    model = ElmoModel.from_pretrained(base_path).eval()
    extractor = pipeline("feature-extraction", model=model, tokenizer=ElmoTokenizer.from_pretrained(base_path))
    texts = ["I eat an apple .", "Hello", "Apple is a big company in California .", "天气不错！"]
    single = extractor(texts, return_tensors=True)
    batched = extractor(texts, batch_size=3, return_tensors=True)
    as_lists = extractor(texts, batch_size=3)
    tokenizer = ElmoTokenizer.from_pretrained(base_path)
    for text, one, many, listed in zip(texts, single, batched, as_lists):
        assert one.shape == many.shape == (1, len(tokenizer.split_words(text)), 32)
        assert torch.allclose(one, many, atol=1e-6)
        assert torch.allclose(torch.tensor(listed), many)
        with torch.no_grad():
            direct = model(**tokenizer(text, return_tensors="pt")).last_hidden_state
        # (not bit for bit: the caches now hold words computed in the batches of 3, whose products may round
        # differently from a sentence's own on some CPUs, e.g. AMD EPYC)
        assert torch.allclose(one, direct, atol=1e-6, rtol=0)


@pytest.mark.parametrize("layers", [1, 3])
def test_the_card_describes_the_model_it_is_for(layers):
    """The card's prose and table come from the config: a 1- or 3-layer biLM is not called 2-layer."""
    model = ElmoModel(ElmoConfig(cell_size=16, projection_dim=8, char_cnn_filters=[[1, 4]], num_highway_layers=1,
                                 num_lstm_layers=layers))
    card = render_model_card(model, "someone/elmo-test", source="made by a test")
    assert f"{layers}-layer biLSTM language model" in card and "2-layer" not in card and "${" not in card
    assert "each word's UTF-8 bytes: there are no out-of-vocabulary words" in card
    assert 'AutoModel.from_pretrained("someone/elmo-test")' in card and "made by a test" in card


def test_the_default_card_names_a_hub_base_model_but_not_a_local_folder(head_folders):
    """push_to_hub's card without one given: a model loaded from a Hub id names it (and, for a head, as
    base_model); one loaded from a folder on this machine names only its class."""
    model = ElmoForTokenClassification.from_pretrained(head_folders["AutoModelForTokenClassification"])
    local = default_model_card(model, "someone/tagger")
    assert "base_model" not in local and str(head_folders["AutoModelForTokenClassification"]) not in local
    assert "hf-elmo `ElmoForTokenClassification`" in local
    model.name_or_path = "allenai/elmo-original"  # (as from_pretrained of that Hub id sets it)
    card = default_model_card(model, "someone/tagger")
    assert "base_model: allenai/elmo-original" in card and "`allenai/elmo-original`" in card
    # The same test as modeling/finetune.py's: an id the Hub accepts, without the owner too; a missing path is none.
    model.name_or_path = "elmo-original"
    assert "base_model: elmo-original" in default_model_card(model, "someone/tagger")
    for not_an_id in ("models/elmo ner", "/gone/elmo", "../elmo/ner"):
        model.name_or_path = not_an_id
        card = default_model_card(model, "someone/tagger")
        assert "base_model" not in card and "hf-elmo `ElmoForTokenClassification`" in card, not_an_id


def test_a_card_names_the_license_it_is_given_and_the_default_card_that_of_the_folders_card(head_folders, tmp_path):
    """The card names no license unless given one (the code's Apache-2.0 says nothing of weights converted or trained
    with it); a given one is a Hub license id, quoted where YAML would read a boolean, and anything else is refused
    before it reaches the YAML header. push_to_hub's card without one given keeps the license of the card of the
    folder the model was loaded from."""

    folder = tmp_path / "tagger"
    shutil.copytree(head_folders["AutoModelForTokenClassification"], folder)
    model = ElmoForTokenClassification.from_pretrained(folder)
    card = render_model_card(model, "someone/tagger", source="a test")
    assert "license" not in ModelCard(card).data.to_dict() and "\nlicense:" not in card
    for license in ("mit", "cc-by-sa-4.0", "no"):
        (folder / "README.md").write_text(render_model_card(model, "someone/tagger", source="a test", license=license))
        assert ModelCard.load(folder / "README.md").data.license == license
        assert ModelCard(default_model_card(model, "someone/tagger")).data.license == license
    for bad in ("MIT License", "mit\nlanguage: fr", "", 5, "null", "1.0"):  # (the last two: YAML reads no string)
        with pytest.raises(ValueError, match="is not a license id: give the Hub's, such as apache-2.0, mit or cc-by"):
            render_model_card(model, "someone/tagger", source="a test", license=bad)
    (folder / "README.md").write_text("---\nlicense: [mit, other]\n---\n# a card\n")  # (none hf-elmo can write)
    assert "license" not in ModelCard(default_model_card(model, "someone/tagger")).data.to_dict()


def test_the_default_card_keeps_the_language_of_the_folders_card(head_folders, tmp_path):
    """push_to_hub's card without one given: `language` is that of the card of the folder the model was loaded from
    (a converted Chinese model stays zh, a list stays a list); `und` where that folder has no card, or one that
    names no language, and for a model made in memory."""
    from huggingface_hub import ModelCard

    folder = tmp_path / "tagger"
    shutil.copytree(head_folders["AutoModelForTokenClassification"], folder)
    (folder / "README.md").unlink(missing_ok=True)
    model = ElmoForTokenClassification.from_pretrained(folder)
    assert ModelCard(default_model_card(model, "someone/tagger")).data.language == "und"
    # (Norwegian's `no`, and `on`, YAML reads as booleans unless they are quoted: they were False and True, then und.)
    for language in ("zh", ["en", "zh"], "no", ["no", "nn"], "ON"):
        (folder / "README.md").write_text(render_model_card(model, "someone/tagger", source="a test", language=language))
        assert ModelCard((folder / "README.md").read_text()).data.language == language
        assert ModelCard(default_model_card(model, "someone/tagger")).data.language == language
    # A card that names no language hf-elmo can write (or whose header does not parse) gives und, not an error.
    for header, expected in (("license: mit", "und"), ("language: multilingual", "multilingual"),
                             ("language: [en, en_US]", "und"), ("language: [en", "und"), ("language: 5", "und"),
                             ("language: [zh]", "zh"), ("language:\n- zh", "zh")):  # (a list of one: that language)
        (folder / "README.md").write_text(f"---\n{header}\n---\n# a card\n")
        assert ModelCard(default_model_card(model, "someone/tagger")).data.language == expected, header
    made = ElmoModel(ElmoConfig(cell_size=16, projection_dim=8, char_cnn_filters=[[1, 4]], num_highway_layers=1))
    assert ModelCard(default_model_card(made, "someone/elmo")).data.language == "und"


def test_the_packaged_card_template_is_the_repositorys():
    """hf_elmo/model_card.md is a link to the model_card.md at the root, so the two cannot drift apart."""
    root = REPO
    assert (root / "hf_elmo" / "model_card.md").is_symlink()
    assert (root / "hf_elmo" / "model_card.md").read_text() == (root / "model_card.md").read_text()


def card_code(card: str, model_id: str, folder: Path) -> str:
    """The card's ```python blocks, in order, reading `folder` where the card names the repository `model_id`."""
    blocks = re.findall(r"```python\n(.*?)```", card, re.DOTALL)
    assert blocks
    return "\n".join(blocks).replace(f'"{model_id}"', repr(str(folder)))


def test_the_cards_example_runs_with_only_transformers_as_the_card_says(base_path, python_without_hf_elmo, tmp_path):
    """The card's example changed as it tells readers with only transformers (no `import hf_elmo`,
    `trust_remote_code=True` in both `from_pretrained` calls) runs where hf-elmo is not installed; the package is
    installed from its source, not from a package index that does not have it."""
    card = (base_path / "README.md").read_text(encoding="utf-8")
    assert "leave out `import hf_elmo` and pass `trust_remote_code=True` to both" in card
    assert "pip install hf-elmo" not in card and "pypi.org" not in card
    code = card_code(card, base_path.name, base_path).replace("import hf_elmo  # registers ELMo with the Auto classes\n", "")
    loaded = f".from_pretrained({str(base_path)!r})"
    assert "hf_elmo" not in code and code.count(loaded) == 2
    code = code.replace(loaded, f".from_pretrained({str(base_path)!r}, trust_remote_code=True)")
    result = subprocess.run(
        [python_without_hf_elmo, "-c", code + "\nprint(type(model).__module__, tuple(output.last_hidden_state.shape))"],
        cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    module, shape = result.stdout.strip().splitlines()[-1].split(" ", 1)
    assert module.startswith("transformers_modules.") and shape == "(2, 5, 32)"


@pytest.mark.parametrize("kind", ["ElmoModel", "ElmoForPreTraining", "AutoModelForSequenceClassification",
                                  "AutoModelForTokenClassification"])
def test_every_classs_card_example_runs_as_written(kind, base_path, head_folders, tmp_path, monkeypatch):
    """Each class's card, executed: its example loads the model and gives the outputs its comments describe, and
    only where the forward takes `initial_states` and the output has `final_states` (ElmoModel, and the biLM that
    AutoModel loads from a pretraining folder) does the card tell readers to carry the state, in code that runs."""
    if kind == "ElmoModel":  # the card the converter wrote into the converted folder
        folder, model_id = base_path, base_path.name
        card = (folder / "README.md").read_text(encoding="utf-8")
    else:
        if kind == "ElmoForPreTraining":
            folder = tmp_path / "pretrained"
            model = ElmoForPreTraining.from_pretrained(base_path, lm_vocab_size=11)
            model.save_pretrained(folder)
            ElmoTokenizer.from_pretrained(base_path).save_pretrained(folder)
        else:
            folder = head_folders[kind]
            model = getattr(sys.modules["transformers"], kind).from_pretrained(folder)
        model_id = "someone/elmo-card"
        card = render_model_card(model, model_id, source="made by a test")
    assert f'from_pretrained("{model_id}")' in card
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(card_code(card, model_id, folder), "README.md", "exec"), namespace)
    model, batch, output = namespace["model"], namespace["batch"], namespace["output"]
    words = batch["input_ids"].shape[1]
    if kind.startswith("AutoModelFor"):
        assert type(model).__name__ == ELMO_AUTO_MAP[kind].split(".")[1]
        expected = (2, model.config.num_labels) if "Sequence" in kind else (2, words, model.config.num_labels)
        assert output.logits.shape == expected
        assert "initial_states" not in card and "final_states" not in card
        assert "Predictions are stateless" in card
        return
    assert type(model) is ElmoModel
    config = model.config
    assert len(output.hidden_states) == config.num_lstm_layers + 1
    assert all(layer.shape == (2, words, config.hidden_size) for layer in output.hidden_states)
    assert len(output.elmo_representations) == config.num_output_representations
    # The state was carried: the next batch, read from the first one's final states, is not read from zeros.
    next_batch, next_output = namespace["next_batch"], namespace["next_output"]
    fresh = model(**next_batch)  # (with autograd on, as the card's calls run)
    carried = model(**next_batch, initial_states=output.final_states)
    assert torch.equal(next_output.last_hidden_state, carried.last_hidden_state)
    assert not torch.allclose(next_output.last_hidden_state, fresh.last_hidden_state)


# The card's model table says what the config says (clips, residual connections, sizes), and the default card names
# a base model only for a head (a biLM loaded from the Hub and pushed is no fine-tune of it).
def card_table(card: str) -> dict[str, str]:
    rows = [line.split("|")[1:-1] for line in card.splitlines() if line.startswith("| ") and line.count("|") == 3]
    return {key.strip(): value.strip() for key, value in rows}


@pytest.mark.parametrize("cell_clip, proj_clip, skip", [(3.0, 5.0, True), (None, 2.5, False), (4.0, None, True)])
def test_the_card_table_reads_the_config(cell_clip, proj_clip, skip):
    config = ElmoConfig(cell_size=16, projection_dim=8, char_cnn_filters=[[1, 4], [2, 6]], num_highway_layers=2,
                        char_embedding_dim=5, num_lstm_layers=2, cell_clip=cell_clip, proj_clip=proj_clip,
                        use_skip_connections=skip, max_characters_per_token=20)
    model = ElmoModel(config)
    rows = card_table(render_model_card(model, "someone/elmo-test", source="made by a test"))
    clip = lambda value: "none" if value is None else str(value)  # noqa: E731
    assert rows["biLSTM"] == (f"cell 16, projection 8, cell clip {clip(cell_clip)}, projection clip "
                               f"{clip(proj_clip)}, residual connections: {'yes' if skip else 'no'}")
    assert rows["parameters"] == f"{sum(p.numel() for p in model.parameters()):,}"
    assert rows["layers"] == "3 (the token layer and 2 biLSTM layers), each 16 wide"
    assert rows["character CNN"] == ("10 filters (relu) over 5-dimensional characters, 2 highway layers, 20 characters "
                                     "per word")
    assert rows["source"] == "made by a test"


def test_the_card_table_counts_one_layer_as_one():
    """A model of one biLSTM layer and one highway layer (the default model has one) reads as English does, not
    "1 highway layers"; one biLSTM layer has no residual connection to speak of, whatever use_skip_connections says."""
    config = ElmoConfig(cell_size=16, projection_dim=8, char_cnn_filters=[[1, 4]], num_highway_layers=1,
                        num_lstm_layers=1, char_embedding_dim=5, use_skip_connections=True)
    rows = card_table(render_model_card(ElmoModel(config), "someone/elmo-test", source="made by a test"))
    assert rows["layers"] == "2 (the token layer and 1 biLSTM layer), each 16 wide"
    assert rows["biLSTM"].endswith(", residual connections: none (one layer)")
    assert rows["character CNN"] == ("4 filters (relu) over 5-dimensional characters, 1 highway layer, 50 characters "
                                     "per word")
    config.num_highway_layers = 0
    rows = card_table(render_model_card(ElmoModel(config), "someone/elmo-test", source="made by a test"))
    assert rows["character CNN"] == ("4 filters (relu) over 5-dimensional characters, 0 highway layers, 50 characters "
                                     "per word")


def test_what_goes_into_the_cards_header_as_it_is_is_checked():
    """render_model_card checked the language and license that go into the YAML header, but not the pipeline tag (a
    line break in it added a key: `license: mit`), an empty language list (read as null) or None (a TypeError)."""
    model = ElmoModel(ElmoConfig(cell_size=16, projection_dim=8, char_cnn_filters=[[1, 4]], num_highway_layers=1))
    with pytest.raises(ValueError, match=r"^'feature-extraction\\nlicense: mit' is not a pipeline tag: give the Hub's "
                                         r"task name, such as feature-extraction or token-classification$"):
        render_model_card(model, "someone/elmo", source="a test", pipeline_tag="feature-extraction\nlicense: mit")
    for language in ([], None):
        with pytest.raises(ValueError, match=rf"^{re.escape(repr(language))} is not a language code: give an ISO 639 "
                                             r"code such as en, or a list of them$"):
            render_model_card(model, "someone/elmo", source="a test", language=language)
    card = render_model_card(model, "someone/elmo", source="a test", pipeline_tag="token-classification",
                             language=["en", "zh"])
    assert ModelCard(card).data.to_dict()["pipeline_tag"] == "token-classification"


def test_the_card_table_says_what_the_model_lacks_and_its_activation():
    """A cell as wide as the layer has no projection (bilm-tf builds none), so no projection clip runs: the card
    names neither; the CNN's activation is named (a tanh model's card differs from a relu one's)."""
    config = ElmoConfig(cell_size=8, projection_dim=8, char_cnn_filters=[[1, 4]], num_highway_layers=1,
                        char_embedding_dim=5, cell_clip=3.0, proj_clip=3.0, use_skip_connections=True,
                        char_cnn_activation="tanh")
    rows = card_table(render_model_card(ElmoModel(config), "someone/elmo-test", source="made by a test"))
    assert rows["biLSTM"] == "cell 8 (no projection), cell clip 3.0, residual connections: yes"
    assert rows["character CNN"].startswith("4 filters (tanh) over ")


def test_the_default_card_of_a_bilm_from_the_hub_names_no_base_model():
    config = ElmoConfig(cell_size=16, projection_dim=8, char_cnn_filters=[[1, 4]], num_highway_layers=1)
    for model_class, names_base in ((ElmoModel, False), (ElmoForTokenClassification, True)):
        model = model_class(config)
        model.name_or_path = "allenai/elmo-original"  # (as from_pretrained of that Hub id sets it)
        card = default_model_card(model, "someone/elmo")
        assert "`allenai/elmo-original`" in card  # the source, for both
        assert (ModelCard(card).data.to_dict().get("base_model") == "allenai/elmo-original") == names_base


def test_remote_code_on_an_older_transformers_says_which_it_needs():
    """The card and README promise remote code to transformers 5.13 or later; 5.12 failed deep inside its weight
    initialisation (a TypeError for is_custom_code). The config, the first file transformers runs, says which
    release is needed, in one line."""
    import subprocess
    import sys

    # (transformers puts another module object in sys.modules as its pipelines import: that one is patched)
    probe = ("import sys, transformers.pipelines\nsys.modules['transformers'].__version__ = '5.12.0'\n"
             "import hf_elmo.configuration_elmo")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "ImportError: this ELMo model's code needs transformers 5.13 or later, and this Python has 5.12.0: pip "
        "install -U 'transformers>=5.13'")
    assert "With only transformers (5.13 or later) installed" in (REPO / "model_card.md").read_text()
