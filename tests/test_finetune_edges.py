"""modeling/finetune.py, task_data.py and metrics.py behaviour that mutations of them showed no other test held, on
tiny CoNLL files of its own (a few sentences per split, each run a second or two):

- results.json's validation and test figures are the saved model's on the first --max-eval-examples sentences of
  each split (token accuracy over the words, not the padding); --max-train-examples above the data's size takes all;
- the card's table shows each split's own figure and says whether the biLM was fine-tuned;
- --seed makes a run repeatable (the new classifier's initialisation included) and another seed gives another model;
- --warmup-steps is honoured (a first step inside the warmup has learning rate 0: nothing learns);
- --license names the card's license, over the base model's card's;
- the reload check compares fresh computations (the trained model's caches hold vectors of other batches);
- a CoNLL file's last sentence counts without a blank line after it; a file of no sentence is one error naming it;
  a line of one field is no word and its tag; the sentiment split is the seeded one; MIN_REVIEWS_PER_LABEL suffices;
- entity scores where nothing is found or expected are conlleval's zeros.
"""

import bz2
import hashlib
import json
import shutil

import numpy as np
import pytest
import torch
from huggingface_hub import ModelCard
from safetensors.torch import load_file

from conftest import REPO
from test_finetune import one_thread  # noqa: F401  (autouse: one thread for the tiny model)
from test_modeling_promises import assert_conll_refused

from hf_elmo import ElmoForTokenClassification, ElmoModel, ElmoTokenizer
from modeling.finetune import check_inputs, finetune, parse_args, results_table
from modeling.metrics import entity_scores
from modeling.task_data import MIN_REVIEWS_PER_LABEL, NER_TAGS, BadTaskData, load_rotten_tomatoes, read_conll


TRAIN = [[("Peter", "B-PER"), ("Blackburn", "I-PER"), ("visited", "O"), ("Brussels", "B-LOC")],
         [("EU", "B-ORG"), ("rejects", "O"), ("German", "B-MISC"), ("call", "O")],
         [("The", "O"), ("bank", "O"), ("closed", "O")],
         [("Apple", "B-ORG"), ("is", "O"), ("a", "O"), ("company", "O"), ("in", "O"), ("California", "B-LOC")]]
TEST = [[("Rome", "B-LOC"), ("is", "O"), ("old", "O")],
        [("Sony", "B-ORG"), ("sells", "O"), ("Walkman", "B-MISC"), ("radios", "O"), ("again", "O")],
        [("no", "O")],
        [("Anna", "B-PER"), ("Karenina", "I-PER")],
        [("Mars", "B-LOC")]]
# The validation file begins with the test file's first sentences, so that the trained model's evaluations and the
# saved model's scores below run the very same batches (the biLM's token cache keeps a word's vector from the batch
# that first computed it, which can differ in the last bit). Its later sentences, of other lengths and tags, are
# scored only where --max-eval-examples is not honoured.
VALIDATION = TEST[:3] + [[("the", "O"), ("cat", "O"), ("sat", "O"), ("on", "O"), ("a", "O"), ("mat", "O")],
                         [("Paris", "B-LOC"), ("London", "B-LOC"), ("Berlin", "B-LOC")],
                         [("John", "B-PER"), ("Smith", "I-PER"), ("met", "O"), ("Mary", "B-PER")]]


def write_conll(folder, splits=(("train", TRAIN), ("valid", VALIDATION), ("test", TEST)), end="\n"):
    """CoNLL-2003 files ("word POS chunk tag" lines, a blank line between sentences), each file ending with `end`
    after its last sentence's last line."""
    (folder / "conll2003").mkdir(parents=True, exist_ok=True)
    for split, sentences in splits:
        text = "-DOCSTART- -X- -X- O\n\n" + "\n".join(
            "".join(f"{word} NN I-NP {tag}\n" for word, tag in sentence) for sentence in sentences)
        (folder / "conll2003" / f"{split}.txt").write_text(text.removesuffix("\n") + end, encoding="utf-8")
    return folder


def run(model, data, output, *options) -> dict:
    return finetune(parse_args([str(a) for a in ["--task", "ner", "--model", model, "--data-dir", data,
                                                 "--output-dir", output, "--batch-size", 4, "--logging-steps", 1,
                                                 *options]]))


def scores_of_saved_model(folder, sentences) -> dict:
    """Entity F1 and token accuracy (%) of the saved model on `sentences`, in one padded batch as Trainer's
    evaluation gives them (its batch of 2 x --batch-size holds them all)."""
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    model = ElmoForTokenClassification.from_pretrained(folder).eval()
    words = [[word for word, _ in sentence] for sentence in sentences]
    batch = tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        predicted = model(**batch).logits.argmax(-1)
    gold = [[tag for _, tag in sentence] for sentence in sentences]
    found = [[NER_TAGS[i] for i in predicted[row, : len(sentence)].tolist()] for row, sentence in enumerate(sentences)]
    right = sum(g == f for gold_row, found_row in zip(gold, found) for g, f in zip(gold_row, found_row))
    return {**entity_scores(gold, found), "token_accuracy": 100.0 * right / sum(map(len, gold))}


def test_results_are_the_saved_models_scores_on_the_first_eval_examples(converted, tmp_path):
    """--max-eval-examples 3: validation and test are scored on their first 3 sentences (not all of them), token
    accuracy over their words (the padding of the shorter ones not counted); --max-train-examples above the data's
    size trains on all of it (it was an IndexError from `select` where min() was dropped)."""
    data = write_conll(tmp_path / "data")
    results = run(converted["allennlp-elmo"], data, tmp_path / "out", "--max-train-examples", 100,
                  "--max-eval-examples", 3, "--max-steps", 2, "--finetune-bilm", "--learning-rate", 0.05,
                  "--warmup-steps", 0)
    assert results["train_examples"] == len(TRAIN)
    for split, sentences in (("validation", VALIDATION), ("test", TEST)):
        # The metrics and the loss, without the timing entries (which differ from run to run).
        assert sorted(results[split]) == ["f1", "loss", "precision", "recall", "token_accuracy"], split
        expected = scores_of_saved_model(tmp_path / "out", sentences[:3])
        assert {key: results[split][key] for key in expected} == pytest.approx(expected), split
    tags = [NER_TAGS.index(tag) for sentence in TEST[:3] for _, tag in sentence]
    assert results["majority_baseline_test"] == pytest.approx(
        {"f1": 0.0, "token_accuracy": 100.0 * float(np.mean(np.asarray(tags) == 0))})
    card = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert results_table("ner", results) in card


def test_the_cards_table_shows_each_splits_own_figure_and_the_training_mode():
    """And how many examples each score is of: the whole split's, or (--max-eval-examples) its first N, which a card
    of 16 scored reviews did not say."""
    results = {"test": {"f1": 61.234}, "validation": {"f1": 72.5}, "majority_baseline_test": {"f1": 0.0},
               "finetune_bilm": False, "epochs": 1.5, "steps": 1234, "train_examples": 600, "test_examples": 3453,
               "test_examples_in_split": 3453, "validation_examples": 16, "validation_examples_in_split": 3250}
    table = results_table("ner", results)
    assert "scored on all 3,453 test examples and the first 16 of 3,250 validation examples." in table
    assert "| split | entity-level F1 (%) |" in table
    assert "| test | 61.23 |\n| validation | 72.50 |\n| majority class (test) | 0.00 |" in table
    assert "(feature-based: biLM frozen, task mix and classifier trained, 1.5 epochs (1,234 steps), 600 training " \
           "examples)" in " ".join(table.split())
    assert "biLM fine-tuned" not in table
    assert ", 1 epoch (1,234 steps), " in " ".join(results_table("ner", {**results, "epochs": 1.0}).split())
    table = results_table("sentiment", {**results, "finetune_bilm": True, "test": {"accuracy": 80.0},
                                        "validation": {"accuracy": 79.0}, "majority_baseline_test": {"accuracy": 57.8}})
    assert "| split | accuracy (%) |" in table and "(biLM fine-tuned, " in table and "feature-based" not in table
    assert "| test | 80.00 |\n| validation | 79.00 |\n| majority class (test) | 57.80 |" in table


def saved_weights(folder) -> dict:
    return load_file(folder / "model.safetensors")


def test_the_seed_makes_a_run_repeatable_and_another_seed_another_model(converted, tmp_path):
    """The new classifier is initialised before Trainer seeds anything: without the script's own seeding, two runs
    of one --seed gave different models."""
    data = write_conll(tmp_path / "data")
    model = converted["allennlp-elmo"]
    options = ["--max-steps", 2, "--max-eval-examples", 2, "--warmup-steps", 0]
    first = run(model, data, tmp_path / "a", *options, "--seed", 3)
    torch.rand(5)  # (the global random state moves on between the runs, as in any longer program)
    second = run(model, data, tmp_path / "b", *options, "--seed", 3)
    a, b = saved_weights(tmp_path / "a"), saved_weights(tmp_path / "b")
    assert sorted(a) == sorted(b) and all(torch.equal(a[name], b[name]) for name in a)
    assert first["logged_losses"] == second["logged_losses"]
    run(model, data, tmp_path / "c", *options, "--seed", 4)
    c = saved_weights(tmp_path / "c")
    assert not torch.equal(a["classifier.weight"], c["classifier.weight"])


def test_seeds_up_to_numpys_largest_are_accepted(converted, tmp_path):
    check_inputs(parse_args(["--task", "ner", "--model", str(converted["allennlp-elmo"]), "--output-dir",
                             str(tmp_path / "out"), "--seed", str(2**32 - 1)]))


def test_warmup_steps_are_honoured(converted, tmp_path):
    """Linear warmup from 0: with --warmup-steps 1 the only step has learning rate 0 and the biLM's task mix stays the
    checkpoint's; without warmup it learns."""
    data = write_conll(tmp_path / "data")
    source = converted["allennlp-elmo"]
    before = ElmoModel.from_pretrained(source).state_dict()
    options = ["--max-steps", 1, "--max-eval-examples", 1, "--learning-rate", 0.1]

    def learned(folder):
        after = ElmoForTokenClassification.from_pretrained(folder).elmo.state_dict()
        return [name for name in before if not torch.equal(before[name], after[name])]

    run(source, data, tmp_path / "warm", *options, "--warmup-steps", 1)
    assert learned(tmp_path / "warm") == []
    run(source, data, tmp_path / "cold", *options, "--warmup-steps", 0)
    assert learned(tmp_path / "cold") == ["scalar_mixes.0.scalar_parameters", "scalar_mixes.0.gamma"]


def test_the_license_option_names_the_cards_license_over_the_base_models(converted, tmp_path):
    data = write_conll(tmp_path / "data")
    base = shutil.copytree(converted["allennlp-elmo"], tmp_path / "base")
    card = (base / "README.md").read_text(encoding="utf-8")
    options = ["--max-steps", 1, "--max-eval-examples", 1]
    run(base, data, tmp_path / "mit", *options, "--license", "mit")
    assert ModelCard.load(tmp_path / "mit" / "README.md").data.license == "mit"
    (base / "README.md").write_text(card.replace("\nlanguage: en\n", "\nlicense: apache-2.0\nlanguage: en\n", 1))
    run(base, data, tmp_path / "over", *options, "--license", "cc-by-4.0")
    assert ModelCard.load(tmp_path / "over" / "README.md").data.license == "cc-by-4.0"
    assert json.loads((tmp_path / "over" / "results.json").read_text())["steps"] == 1


# A validation sentence of other words and length than the test one: the trained model's <S> and </S> (and any
# shared word) come from the validation batch's computation when the test set and the reload check read them.
OTHER_VALIDATION = [[("the", "O"), ("cat", "O"), ("sat", "O"), ("on", "O"), ("a", "O"), ("mat", "O"), ("today", "O")]]


def test_the_reload_check_does_not_compare_cached_vectors_with_fresh_ones(converted, tmp_path):
    """The trained model's caches hold word vectors (<S> and </S> at least) from the validation and test batches;
    compared with a fresh copy's, a run trained to the end was refused ("the reloaded model differs from the trained
    one by 3e-08") and nothing written. The check empties them first."""
    data = write_conll(tmp_path / "data", (("train", TRAIN), ("valid", OTHER_VALIDATION), ("test", TEST)))
    for seed in (0, 5, 7):
        finetune(parse_args([str(a) for a in [
            "--task", "ner", "--model", converted["allennlp-elmo"], "--data-dir", data, "--output-dir",
            tmp_path / f"out-{seed}", "--max-steps", 1, "--batch-size", 4, "--logging-steps", 1,
            "--max-eval-examples", 1, "--seed", seed]]))
        assert (tmp_path / f"out-{seed}" / "model.safetensors").is_file()


def test_clear_caches_gives_the_outputs_of_a_fresh_model(converted):
    """What the reload check relies on: after another batch, a sentence is close to a fresh model's; after
    clear_caches, equal to it."""
    tokenizer = ElmoTokenizer.from_pretrained(converted["allennlp-elmo"])
    warm = ElmoModel.from_pretrained(converted["allennlp-elmo"]).eval()
    cold = ElmoModel.from_pretrained(converted["allennlp-elmo"]).eval()
    with torch.no_grad():
        warm(**tokenizer([" ".join(f"w{i}x{j}" for j in range(12)) for i in range(4)], padding=True, return_tensors="pt"))
        sentence = tokenizer(["Rome is old"], return_tensors="pt")
        cached, fresh = warm(**sentence).last_hidden_state, cold(**sentence).last_hidden_state
        warm.clear_caches()
        assert torch.equal(warm(**sentence).last_hidden_state, fresh)  # the weights are the same
    # Documented (README: a cached word "can differ ... in the last bit"): close, though not always equal.
    torch.testing.assert_close(cached, fresh)


def test_the_last_sentence_of_a_file_without_a_final_blank_line_is_read(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\nPeter NNP B-NP B-PER\n"
                    "Blackburn NNP I-NP I-PER", encoding="utf-8")
    sentences = read_conll(path)
    assert sentences["words"] == [["EU", "rejects"], ["Peter", "Blackburn"]]
    assert sentences["ner_tags"] == [[NER_TAGS.index("B-ORG"), 0], [NER_TAGS.index("B-PER"), NER_TAGS.index("I-PER")]]


@pytest.mark.parametrize("text", ["", "-DOCSTART- -X- -X- O\n\n", "\n\n\n"], ids=["empty", "a document start only", "blank lines"])
def test_a_conll_file_of_no_sentence_is_one_error_naming_it(converted, tmp_path, capsys, text):
    folder = tmp_path / "data" / "conll2003"
    folder.mkdir(parents=True)
    for split in ("train", "valid", "test"):
        (folder / f"{split}.txt").write_text("EU NNP B-NP B-ORG\n\n", encoding="utf-8")
    (folder / "valid.txt").write_text(text, encoding="utf-8")
    assert_conll_refused(converted, tmp_path, capsys, f"{folder / 'valid.txt'}: no sentences")


def test_a_line_of_one_field_is_refused_even_where_it_is_a_tag(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("EU NNP B-NP B-ORG\nB-PER\n\n", encoding="utf-8")
    with pytest.raises(BadTaskData, match=rf"^{path}: line 2: 'B-PER' is not a word and its NER tag"):
        read_conll(path)


def digest(split) -> str:
    return hashlib.sha256("".join(f"{label}\t{text}\n" for label, text in zip(split["label"], split["text"]))
                          .encode()).hexdigest()[:16]


def test_the_sentiment_split_is_the_seeded_one_the_results_were_measured_on():
    """Sizes and label shares hold for any seed; the README's numbers were measured on this very split."""
    reviews = load_rotten_tomatoes(REPO / "data")
    assert {name: digest(split) for name, split in reviews.items()} == {
        "train": "e976856fc021019d", "validation": "8902cc2940d833ee", "test": "8926a7060be77774"}
    assert reviews["test"][0] == {"text": "It’s not a bad premise, just a bad movie.", "label": 0}


def test_the_fewest_reviews_of_each_label_the_split_needs_are_enough(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "data" / "rotten_tomatoes" / "rotten_tomatoes_corpus_full.csv.bz2"
    path.parent.mkdir(parents=True)
    rows = "".join(f"fresh,Good {i}.\nrotten,Bad {i}.\n" for i in range(MIN_REVIEWS_PER_LABEL))
    path.write_bytes(bz2.compress(f"category,text\nplot,A story.\n{rows}".encode()))
    reviews = load_rotten_tomatoes(tmp_path / "data")
    assert sum(map(len, reviews.values())) == 2 * MIN_REVIEWS_PER_LABEL
    assert all(sorted(set(split["label"])) == [0, 1] for split in reviews.values())


def test_entity_scores_without_entities_are_zero_as_conlleval_gives_them():
    zero = {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    assert entity_scores([["O", "O"]], [["O", "O"]]) == zero  # nothing expected, nothing found
    assert entity_scores([["B-PER", "O"]], [["O", "O"]]) == zero  # nothing found
    assert entity_scores([["O", "O"]], [["B-LOC", "I-LOC"]]) == zero  # nothing expected
    assert entity_scores([], []) == zero
    # All right: 100 each; the wrong type on the right span counts as wrong.
    assert entity_scores([["B-PER", "I-PER"]], [["B-PER", "I-PER"]]) == {"precision": 100.0, "recall": 100.0, "f1": 100.0}
    assert entity_scores([["B-PER", "I-PER"]], [["B-ORG", "I-ORG"]]) == zero


def test_a_model_whose_config_asks_for_tuples_is_fine_tuned_and_saved(converted, tmp_path):
    """A --model folder whose config.json says `return_dict: false` (transformers' switch to tuples, which the head
    shares with its biLM): the evaluations and the reload check read the outputs as they come, and the saved model
    gives tuples as its config says."""
    base = shutil.copytree(converted["allennlp-elmo"], tmp_path / "base")
    config = json.loads((base / "config.json").read_text())
    (base / "config.json").write_text(json.dumps({**config, "return_dict": False}))
    data = write_conll(tmp_path / "data")
    results = run(base, data, tmp_path / "out", "--max-steps", 1, "--max-eval-examples", 2)
    assert results["steps"] == 1 and sorted(results["test"]) == ["f1", "loss", "precision", "recall", "token_accuracy"]
    model = ElmoForTokenClassification.from_pretrained(tmp_path / "out").eval()
    batch = ElmoTokenizer.from_pretrained(tmp_path / "out")([["Rome", "is", "old"]], is_split_into_words=True,
                                                            return_tensors="pt")
    with torch.no_grad():
        (logits,) = model(**batch)
    assert logits.shape == (1, 3, len(NER_TAGS))
