"""pretrain.py's option combinations: an option that would have no effect is refused in one line, a refused run
leaves its output folder as it was, and Adagrad's loss scale is the one bilm-tf's recipe means for each batching."""

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from hf_elmo import ElmoForPreTraining
from modeling.data import SentenceBatches, StreamBatches
from modeling.presets import PRESETS, TRAINING_DEFAULTS, training_settings
from modeling.pretrain import loss_scale
from modeling.vocabulary import Vocabulary

from conftest import README, assert_one_error
from test_pretraining import TRAIN, fixture_text, read_log, run_main, tiny_config

DATA = ["--train-file", TRAIN / "data.txt", "--vocab-file", TRAIN / "vocab.txt", "--max-steps", 1, "--save-steps", 0]
NEW = ["--preset", "tiny", *DATA]


@pytest.fixture
def tiny_model(tmp_path) -> Path:
    """A tiny biLM with a full-softmax head over the fixture's vocabulary (so --init-from keeps that softmax)."""
    torch.manual_seed(3)
    folder = tmp_path / "tiny-model"
    ElmoForPreTraining(tiny_config(lm_negative_samples=0, lm_dropout=0.0)).save_pretrained(folder)
    shutil.copy(TRAIN / "vocab.txt", folder / "vocab.txt")
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() if path.is_file() else b"<folder>"
            for path in sorted(folder.rglob("*"))}


def test_options_that_would_have_no_effect_are_refused(tiny_model, tmp_path, capsys):
    """Each of these runs trained as if the option had not been given (--new-vocabulary without --init-from even
    replaced a new --alphabet vocabulary model's word.dic softmax with another vocabulary; --freeze-body without
    --init-from fitted a softmax to a biLM that stayed random)."""
    validation = ["--validation-file", TRAIN / "data.txt"]
    adapt = ["--init-from", tiny_model, *DATA, "--batch-size", 2]
    # A model whose vocab.txt is the one --new-vocabulary builds from the training text.
    text = (TRAIN / "data.txt").read_text(encoding="utf-8")
    vocabulary = Vocabulary.from_counts(Counter(word for line in text.splitlines() for word in line.split()))
    same_vocabulary = tmp_path / "same-vocabulary"
    ElmoForPreTraining(tiny_config(lm_vocab_size=len(vocabulary), lm_negative_samples=0)).save_pretrained(same_vocabulary)
    vocabulary.save(same_vocabulary / "vocab.txt")
    output = tmp_path / "out"
    for arguments, message in [
        ([*NEW, "--eval-steps", 2], "--eval-steps 2: there is no --validation-file to evaluate"),
        ([*NEW, "--eval-batch-size", 8], "--eval-batch-size 8: there is no --validation-file to evaluate"),
        ([*NEW, "--eval-unroll-steps", 8], "--eval-unroll-steps 8: there is no --validation-file to evaluate"),
        ([*NEW, *validation, "--weight-decay", 0.01],
         "--weight-decay 0.01 applies to AdamW only, and the optimizer is adagrad; pass --optimizer adamw"),
        ([*NEW, "--new-vocabulary"], "--new-vocabulary builds a vocabulary for an --init-from model"),
        ([*NEW, "--freeze-body"],  # (it trained a softmax on a random biLM that stayed random, and exited 0)
         "--freeze-body trains the softmax only, fitting it to an --init-from model's biLM; a new model's biLM would "
         "stay as randomly initialised: pass --init-from, or drop --freeze-body"),
        ([*NEW, "--text-column", "sentence"],  # (a text file's lines were read, whatever it named)
         "--text-column sentence: only a saved dataset folder has columns, and --train-file names text files, each "
         "line a sentence; drop --text-column"),
        ([*NEW, *validation, "--text-column", "sentence"],
         "--text-column sentence: only a saved dataset folder has columns, and --train-file and --validation-file "
         "name text files"),
        ([*adapt, "--new-vocabulary"],
         "--new-vocabulary and --vocab-file both choose the softmax vocabulary; drop one or the other"),
        ([*NEW, "--alphabet", "vocabulary"],  # (--vocab-file took the softmax, beside a word.dic of another vocabulary)
         f"--vocab-file {TRAIN / 'vocab.txt'} would be the softmax vocabulary, but with --alphabet vocabulary the "
         "softmax's is the word.dic built from the training text"),
        ([*NEW, "--batching", "sentence", "--unroll-steps", 5],
         "--unroll-steps 5 cuts the text into windows of --batching stream; --batching sentence reads whole sentences"),
        ([*NEW, "--group-by-length"], "--group-by-length groups the sentences of --batching sentence; stream batching "
         "has no padding to save"),
        ([*NEW, "--batching", "sentence", "--group-by-length", "--no-shuffle"],
         "--group-by-length shuffles the sentences and then groups them by length, and --no-shuffle reads them in order"),
        ([*NEW, "--warmup-steps", 5], "--warmup-steps 5 needs a schedule with a warm-up; --lr-scheduler is constant"),
        ([*NEW, "--resume", "--overwrite-output-dir"],
         "--resume continues the run in --output-dir, --overwrite-output-dir starts afresh there; pass one of them"),
        ([*adapt, "--softmax-init", "unigram"],
         f"--softmax-init unigram starts a new softmax, but --init-from {tiny_model} keeps its own (its vocab.txt is "
         "the softmax vocabulary)"),
        # (a --new-vocabulary that comes out as the folder's own: the message said the folder's vocab.txt was used)
        (["--init-from", same_vocabulary, "--train-file", TRAIN / "data.txt", "--max-steps", 1, "--save-steps", 0,
          "--batch-size", 2, "--new-vocabulary", "--softmax-init", "unigram"],
         f"--softmax-init unigram starts a new softmax, but --init-from {same_vocabulary} keeps its own (the "
         "vocabulary --new-vocabulary built from the text is the folder's own, word for word)"),
        ([*NEW, "--epochs", 2],  # (--max-steps won, silently)
         "--epochs 2 and --max-steps 1 both set the run's length; pass one of them"),
        ([*NEW, "--save-total-limit", 3],
         "--save-total-limit 3 keeps the latest checkpoints that --save-steps writes, and --save-steps is 0"),
        ([*NEW, "--save-steps", 1, "--save-total-limit", -1],
         "--save-total-limit must be 0 (every checkpoint kept) or more, got -1"),
    ]:
        code, _, err = run_main(capsys, *arguments, "--output-dir", output)
        assert_one_error(code, err, message)
        assert not output.exists()
    # Where they apply, they are taken.
    code, _, err = run_main(capsys, *NEW, *validation, "--eval-steps", 1, "--eval-batch-size", 2, "--eval-unroll-steps",
                            5, "--max-steps", 2, "--optimizer", "adamw", "--weight-decay", 0.01, "--lr-scheduler",
                            "linear", "--warmup-steps", 1, "--output-dir", output)
    assert code == 0, err
    assert [record["step"] for record in read_log(output) if "eval_average_perplexity" in record] == [1, 2]
    for limit, kept in [(1, ["checkpoint-2"]), (0, ["checkpoint-1", "checkpoint-2"])]:
        code, _, err = run_main(capsys, *NEW, "--max-steps", 3, "--save-steps", 1, "--save-total-limit", limit,
                                "--output-dir", tmp_path / f"limit-{limit}")
        assert code == 0, err
        assert sorted(path.name for path in (tmp_path / f"limit-{limit}").glob("checkpoint-*")) == kept


def test_save_steps_that_no_step_of_the_run_reaches_is_refused_where_given_and_said_where_a_presets(tmp_path, capsys):
    """A checkpoint comes at each multiple of --save-steps before the last step (the last saves the final model):
    --save-steps at or past the run's length wrote none, and said nothing. Given on the command line it is refused
    once the run's steps are known (--max-steps, or the epochs over the text), before anything is written; a preset's
    save_steps is not refused for a short run, which says that it writes no checkpoint. With --max-train-minutes
    alone the run's steps are not known in advance: nothing is refused or said."""
    text = ["--preset", "tiny", "--train-file", TRAIN / "data.txt", "--vocab-file", TRAIN / "vocab.txt"]
    output = tmp_path / "out"
    for arguments, message in [
        (["--max-steps", 3, "--save-steps", 3], "--save-steps 3 writes no checkpoint in this run of 3 steps (--max-steps): "
                                                "checkpoints come before the last step, which saves the final model; "
                                                "pass --save-steps below 3, or 0 for the final model only"),
        (["--max-steps", 3, "--save-steps", 50], "--save-steps 50 writes no checkpoint in this run of 3 steps"),
        (["--epochs", 1, "--save-steps", 50], "in this run of 3 steps (its epochs over the training text)"),
        (["--max-train-minutes", 1, "--max-steps", 2, "--save-steps", 2],
         "--save-steps 2 writes no checkpoint in this run of 2 steps (--max-steps)"),
        (["--max-steps", 1, "--save-steps", 1], "--save-steps 1 writes no checkpoint in this run of 1 step (--max-steps): "
                                                "checkpoints come before the last step, which saves the final model; "
                                                "pass --save-steps 0"),
    ]:
        code, _, err = run_main(capsys, *text, *arguments, "--output-dir", output)
        assert_one_error(code, err, message)
        assert not output.exists()
    # The preset's save_steps (10 for tiny) and a short run: trained, and said.
    code, out, err = run_main(capsys, *text, "--max-steps", 3, "--output-dir", output)
    assert code == 0, err
    assert ("no checkpoint in this run of 3 steps (--max-steps): save_steps is 10 (--preset tiny's; --save-steps "
            "sets it); only the final model is saved") in out
    assert not list(output.glob("checkpoint-*")) and (output / "model.safetensors").is_file()
    # A time budget: its steps are not known in advance.
    code, out, err = run_main(capsys, *text, "--max-train-minutes", 0.005, "--save-steps", 1000, "--output-dir",
                              tmp_path / "budget")
    assert code == 0, err
    assert "no checkpoint" not in out
    # Where a step reaches it, it is taken.
    code, out, err = run_main(capsys, *text, "--max-steps", 3, "--save-steps", 2, "--output-dir", tmp_path / "taken")
    assert code == 0, err
    assert "no checkpoint" not in out and [path.name for path in (tmp_path / "taken").glob("checkpoint-*")] == ["checkpoint-2"]


def test_a_presets_softmax_init_starts_a_new_softmax_only_and_the_run_says_which(tiny_model, tmp_path, capsys):
    """--preset default's softmax_init unigram with --init-from a model whose softmax is kept: the run kept the softmax
    and said nothing (its trainer_state.json recorded softmax_init unigram). It says so now, and trainer_state.json
    records how the softmax started; with another vocabulary the softmax is new and the preset's unigram start
    applies."""
    adapt = ["--preset", "default", "--init-from", tiny_model, "--train-file", TRAIN / "data.txt", "--batch-size", 2,
             "--unroll-steps", 5, "--max-steps", 0, "--save-steps", 0]
    source = load_file(tiny_model / "model.safetensors")
    for name, options, start in [("kept", [], "init-from"), ("new", ["--new-vocabulary", "--vocab-size", 10], "unigram")]:
        code, out, err = run_main(capsys, *adapt, *options, "--output-dir", tmp_path / name)
        assert code == 0, err
        said = (f"--init-from {tiny_model}: its softmax goes on (this run's vocabulary is its own), so softmax_init "
                "unigram (a new softmax's start) does not apply")
        assert (said in out) == (start == "init-from"), out
        state = json.loads((tmp_path / name / "trainer_state.json").read_text())
        assert (state["softmax_start"], state["settings"]["softmax_init"]) == (start, "unigram")
        softmax = load_file(tmp_path / name / "model.safetensors")
        if start == "init-from":
            assert all(torch.equal(softmax[part], source[part]) for part in ("softmax.weight", "softmax.bias"))
        else:
            assert softmax["softmax.weight"].shape[0] == 10 and not softmax["softmax.weight"].any()


def test_a_refused_run_leaves_the_output_folder_as_it_was(tiny_model, tmp_path, capsys):
    """--init-from a model whose weights do not load: vocab.txt and the tokenizer had already been written into the
    output folder (and --overwrite-output-dir had deleted its checkpoints); a vocabulary limit refused with
    --init-from came after the tokenizer was written too."""
    no_weights = shutil.copytree(tiny_model, tmp_path / "no-weights")
    (no_weights / "model.safetensors").unlink()
    fresh = tmp_path / "fresh"
    code, _, err = run_main(capsys, "--init-from", no_weights, *DATA, "--output-dir", fresh)
    assert_one_error(code, err, f"--init-from {no_weights}: its weights do not load")
    assert not fresh.exists()

    used = tmp_path / "used"
    (used / "checkpoint-3").mkdir(parents=True)
    (used / "checkpoint-3" / "trainer_state.json").write_text("{}")
    for name in ("vocab.txt", "char.dic", "tokenizer_config.json"):
        (used / name).write_text(f"an earlier run's {name}\n")
    before = snapshot(used)
    for arguments, message in [
        (["--init-from", no_weights, *DATA], "its weights do not load"),
        (["--init-from", tiny_model, "--train-file", TRAIN / "data.txt", "--vocab-size", 10],
         "--vocab-size 10 would limit a vocabulary built from the training text"),
    ]:
        code, _, err = run_main(capsys, *arguments, "--overwrite-output-dir", "--output-dir", used)
        assert_one_error(code, err, message)
        assert snapshot(used) == before


def adagrad_step(folder: Path, batch: dict, scale: float, learning_rate: float) -> dict[str, torch.Tensor]:
    """The weights after one Adagrad step (bilm-tf's: accumulators start at 1) on `batch`'s loss times `scale`."""
    model = ElmoForPreTraining.from_pretrained(folder).train()
    optimizer = torch.optim.Adagrad(model.parameters(), lr=learning_rate, initial_accumulator_value=1.0)
    (model(**batch).loss * scale).backward()
    optimizer.step()
    return {name: tensor.detach() for name, tensor in model.state_dict().items()}


def test_adagrad_with_sentence_batches_scales_the_loss_by_the_words_per_row(tiny_model, tmp_path, capsys):
    """bilm-tf's Adagrad takes the gradient of each row's summed loss, averaged over the rows: for stream windows the
    per-word mean times --unroll-steps. With --batching sentence the loss was still multiplied by --unroll-steps (20
    here, a value that does not apply to sentences); it is the mean times the batch's target words per row now."""
    text, table, vocabulary = fixture_text()
    batch = SentenceBatches(text, table, vocabulary, batch_size=2, seed=0, shuffle=False).batch(0)
    rows, targets = batch["labels"].shape[0], int((batch["labels"] != -100).sum())
    assert loss_scale("adagrad", batch["labels"]) == targets / rows != 20  # (the test tells the two scales apart)
    stream = StreamBatches(text, table, vocabulary, batch_size=2, unroll_steps=6, seed=0).batch(0)
    assert loss_scale("adagrad", stream["labels"]) == 6 and loss_scale("adamw", batch["labels"]) == 1
    output = tmp_path / "run"
    code, _, err = run_main(capsys, "--init-from", tiny_model, *DATA, "--batching", "sentence", "--batch-size", 2,
                            "--no-shuffle", "--optimizer", "adagrad", "--learning-rate", 0.2, "--dropout", 0,
                            "--negative-samples", 0, "--max-grad-norm", 0, "--output-dir", output)
    assert code == 0, err
    trained = {name.removeprefix("model."): tensor for name, tensor in load_file(output / "model.safetensors").items()}
    expected = adagrad_step(tiny_model, batch, targets / rows, 0.2)
    unroll_scaled = adagrad_step(tiny_model, batch, 20.0, 0.2)
    differences = {name: (trained[name] - expected[name]).abs().max().item() for name in trained}
    assert max(differences.values()) < 1e-5, differences
    assert max((trained[name] - unroll_scaled[name]).abs().max().item() for name in trained) > 1e-3


def test_group_by_length_trains_on_the_grouped_sentence_batches(tiny_model, tmp_path, capsys):
    """`--batching sentence --group-by-length` takes its first step on SentenceBatches' grouped first batch (not on
    the shuffled one that the run would read without the option)."""
    text, table, vocabulary = fixture_text()
    grouped, shuffled = (SentenceBatches(text, table, vocabulary, batch_size=2, seed=42, group_by_length=group).batch(0)
                         for group in (True, False))
    assert not torch.equal(grouped["input_ids"], shuffled["input_ids"])  # (the test tells the two apart)
    output = tmp_path / "run"
    code, _, err = run_main(capsys, "--init-from", tiny_model, *DATA, "--batching", "sentence", "--group-by-length",
                            "--batch-size", 2, "--optimizer", "adagrad", "--learning-rate", 0.2, "--dropout", 0,
                            "--negative-samples", 0, "--max-grad-norm", 0, "--output-dir", output)
    assert code == 0, err
    trained = {name.removeprefix("model."): tensor for name, tensor in load_file(output / "model.safetensors").items()}
    for batch, close in ((grouped, True), (shuffled, False)):
        expected = adagrad_step(tiny_model, batch, int((batch["labels"] != -100).sum()) / 2, 0.2)
        assert (max((trained[name] - expected[name]).abs().max().item() for name in trained) < 1e-5) is close
    assert json.loads((output / "trainer_state.json").read_text())["settings"]["group_by_length"] is True


def test_a_new_runs_softmax_start_is_recorded(tmp_path, capsys):
    """trainer_state.json's softmax_start for a run without --init-from: `random` (the tiny preset's), or `unigram`
    with the softmax weights 0 and the bias the log of each word's smoothed frequency."""
    new_run = ["--preset", "tiny", "--train-file", TRAIN / "data.txt", "--vocab-file", TRAIN / "vocab.txt",
               "--max-steps", 0, "--save-steps", 0]
    for start in ("random", "unigram"):
        options = [] if start == "random" else ["--softmax-init", "unigram"]
        code, _, err = run_main(capsys, *new_run, *options, "--output-dir", tmp_path / start)
        assert code == 0, err
        assert json.loads((tmp_path / start / "trainer_state.json").read_text())["softmax_start"] == start
        softmax = load_file(tmp_path / start / "model.safetensors")
        assert bool(softmax["softmax.weight"].any()) == (start == "random")
        if start == "unigram":  # (probabilities: they sum to 1)
            assert softmax["softmax.bias"].exp().sum().item() == pytest.approx(1.0, rel=1e-5)


def test_ptb_cpu_is_the_readmes_run():
    readme = README.read_text()
    stated = re.search(r"steps of (\d+) rows x (\d+) words\s+per direction, (\d+) an epoch", readme)
    rows, words, per_epoch = map(int, stated.groups())
    settings = training_settings("ptb-cpu")
    assert (settings["batch_size"], settings["unroll_steps"]) == (rows, words) == (64, 20)
    assert "evaluates the validation text every 3 epochs" in " ".join(readme.split())
    assert settings["eval_steps"] == 3 * per_epoch
    assert "It keeps the text in order" in readme and settings["shuffle"] is False


def test_the_default_model_is_the_readmes_run():
    readme = README.read_text()
    stated = re.search(r"\(seeded\): ([\d,]+) steps of (\d+) x (\d+) words \(([\d.]+) epochs\)", readme)
    steps, rows, words, epochs = int(stated[1].replace(",", "")), int(stated[2]), int(stated[3]), float(stated[4])
    settings = training_settings("default")
    assert (settings["batch_size"], settings["unroll_steps"], settings["epochs"]) == (rows, words, epochs)
    assert settings["eval_steps"] == int(steps / epochs)  # every epoch
    assert settings["shuffle"] is True and settings["max_train_minutes"] == 0.0


def test_the_ptb_presets_read_the_text_in_order_and_the_others_shuffle():
    for name in PRESETS:
        assert training_settings(name)["shuffle"] is (name not in ("ptb-cpu", "ptb-gpu")), name
    # bilm-tf's: a constant learning rate from the first step, no weight decay, shuffled stream batches.
    assert {key: TRAINING_DEFAULTS[key] for key in ("batching", "shuffle", "warmup_steps", "weight_decay")} == {
        "batching": "stream", "shuffle": True, "warmup_steps": 0, "weight_decay": 0.0}
