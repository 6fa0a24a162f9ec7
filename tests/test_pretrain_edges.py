"""pretrain.py and evaluate.py behaviour that mutations of the programs showed no other test held: which folders are
checkpoints, the order the final files are moved in, fractional epochs, a finished run resumed on other text, a resume
inside the warm-up, options fixed on resume, what is logged and recorded, a new softmax's scale, and evaluate.py's
checkpoint choice and its --output-json check; and the audit's defects: a diverged run's infinite perplexity, a second
run into a folder another one holds, float options that are not finite, --init-from a folder whose vocabulary and softmax
differ, vocabularies of the special words alone or covering few words, resumes with another --word-splitting or
another name of --init-from's folder, pipes and empty or upper-case compressed files, and an unfinished run's folder;
and a checkpoint pruned or saved again when the process dies, a log line cut short, a time budget's warm-up; and
--freeze-body kept on resume, --text-column with text files only, a checkpoint or final model that cannot be written."""

import errno
import gzip
import json
import math
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from accelerate import Accelerator
from safetensors.torch import load_file

from conftest import REPO, assert_one_error, run_two_processes
from test_pretrain_options import snapshot, tiny_model  # noqa: F401  (tiny_model: the fixture)
from test_pretrain_resume import LINEAR, linear_rate, rates, train
from test_pretraining import (PRETRAIN, TRAIN, TRAIN_ARGS, datasets_cache, fixture_text, losses, read_log,  # noqa: F401
                              run_main, run_pretrain, script_env, tiny_config)

from hf_elmo import ElmoForPreTraining
from hf_elmo.files import OutputLock, is_write_error
from modeling import evaluate, pretrain
from modeling.checkpoints import list_checkpoints
from modeling.data import EvaluationStream, StreamBatches, window_batch


# modeling/checkpoints.py: only folders named exactly checkpoint-STEP are a run's checkpoints, ordered by step.
def test_a_copy_of_a_checkpoint_under_another_name_is_not_one_of_the_runs_checkpoints(tmp_path):
    """`cp -r checkpoint-4 checkpoint-4.bak` (or checkpoint-4-old): a name that only begins like a checkpoint's is
    not one (a plain --resume would not take it, --save-total-limit would not prune the user's copy); the steps are
    ordered as numbers, not as names (checkpoint-10 after checkpoint-9)."""
    for name in ("checkpoint-9", "checkpoint-10", "checkpoint-4.bak", "checkpoint-4-old", "checkpoint-12x"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "trainer_state.json").write_text("{}")
    assert list_checkpoints(tmp_path) == [(9, tmp_path / "checkpoint-9"), (10, tmp_path / "checkpoint-10")]


# pretrain.py's final model: trainer_state.json (which tells a later --resume that the run finished) is the last file
# moved into OUTPUT_DIR, so that a crash while the final files are moved never leaves it beside an older model.
def test_trainer_state_json_is_the_last_final_file_moved_into_the_output_folder(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "run"
    moved = []
    replace = os.replace

    def noting(source, target, *args, **kwargs):
        if Path(target).parent == folder and Path(source).parent.name == ".final.partial":
            moved.append(Path(target).name)
        return replace(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "replace", noting)
    code, _, err = run_main(capsys, *TRAIN_ARGS, "--max-steps", 1, "--save-steps", 0, "--eval-steps", 0,
                            "--output-dir", folder)
    assert code == 0, err
    assert {"model.safetensors", "config.json", "vocab.txt", "eval_results.json", "README.md"} <= set(moved)
    assert moved[-1] == "trainer_state.json" and moved.count("trainer_state.json") == 1, moved


# --epochs that end inside an epoch's last step: the run takes that step too (the steps round up), so that it covers
# at least the text asked for.
def test_fractional_epochs_round_the_steps_up(tmp_path, capsys):
    folder = tmp_path / "run"
    code, out, err = run_main(capsys, *TRAIN_ARGS, "--epochs", 0.5, "--save-steps", 0, "--eval-steps", 0,
                              "--output-dir", folder)
    assert code == 0, err
    assert "3 steps per epoch" in out  # (half an epoch: 1.5 steps)
    assert "3 steps per epoch, 2 steps, 1 process\n" in out
    assert sorted(losses(folder)) == [1, 2]
    state = json.loads((folder / "trainer_state.json").read_text())
    assert state["step"] == 2 and state["epoch"] >= 0.5


# --resume of a finished run that kept no checkpoint, on other text: not that run's end (the text differs), so the run
# trains from the beginning on the new text instead of saying that it has finished.
def test_a_finished_run_resumed_on_other_text_trains_again_instead_of_saying_it_finished(tmp_path, capsys):
    folder = tmp_path / "run"
    arguments = [*TRAIN_ARGS, "--max-steps", 2, "--save-steps", 0, "--eval-steps", 0, "--output-dir", folder]
    code, _, err = run_main(capsys, *arguments)
    assert code == 0, err
    first = json.loads((folder / "trainer_state.json").read_text())["data"]["train_sha256"]
    other = tmp_path / "other.txt"
    other.write_text("\n".join((TRAIN / "data.txt").read_text().splitlines()[:3]) + "\n")
    code, out, err = run_main(capsys, *arguments, "--train-file", other, "--resume")
    assert code == 0, err
    assert "nothing to train" not in out and f"no checkpoint in {folder}: starting from the beginning" in out, out
    state = json.loads((folder / "trainer_state.json").read_text())
    assert state["data"]["train_sha256"] != first and state["data"]["train_file"] == [str(other)]


# --text-column names a saved dataset's column: with text files only (whose lines are the sentences) pretrain.py trained
# and evaluate.py scored as if it had not been given. Refused now, as evaluate.py's --split is, and before any work
# (evaluate.py's, and now its --split's too, before it loads the model: the second folder here does not exist); with a
# saved dataset for one input, it is that one's.
def test_text_column_with_text_files_only_is_refused_before_the_work(tmp_path, capsys):
    import datasets

    lines = (TRAIN / "data.txt").read_text().splitlines()
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"sentence": lines, "text": ["unused"] * len(lines)})}
                         ).save_to_disk(tmp_path / "saved")
    folder = tmp_path / "run"
    code, _, err = run_main(capsys, *TRAIN_ARGS, "--train-file", tmp_path / "saved", "--text-column", "sentence",
                            "--max-steps", 1, "--save-steps", 0, "--eval-steps", 0, "--output-dir", folder)
    assert code == 0, err
    data = json.loads((folder / "trainer_state.json").read_text())["data"]
    assert data["train_sha256"] == data["validation_sha256"]  # the column's sentences, and the validation file's lines
    validation = str(TRAIN / "data.txt")
    for model_dir in (folder, tmp_path / "no-such-model"):
        code = evaluate.main(["--model-dir", str(model_dir), "--file", validation, "--text-column", "sentence"])
        assert_one_error(code, capsys.readouterr().err, "error: --text-column sentence: only a saved dataset folder "
                                                        "has columns, and --file names text files, each line a "
                                                        "sentence; drop --text-column")
        code = evaluate.main(["--model-dir", str(model_dir), "--file", validation, "--split", "test"])
        assert_one_error(code, capsys.readouterr().err, "error: --split test: only a saved dataset folder has splits, "
                                                        "and --file names text files")
    scores = {}
    for name, source in (("file", [validation]),
                         ("dataset", [str(tmp_path / "saved"), "--text-column", "sentence", "--split", "train"]),
                         ("file named", [validation, "--text-column", "text"])):  # ("text": a text file's lines)
        code = evaluate.main(["--model-dir", str(folder), "--file", *source, "--output-json", str(tmp_path / name)])
        assert code == 0, capsys.readouterr().err
        scores[name] = json.loads((tmp_path / name).read_text())
    assert scores["file"] == scores["dataset"] == scores["file named"]


# A longer resume from a checkpoint inside the warm-up: the warm-up still counts steps (the rate rises to its peak at
# --warmup-steps, as planned), and only the course after it is spread over the steps up to the new last one.
def test_a_longer_resume_from_inside_the_warm_up_keeps_the_warm_up_and_spreads_the_rest(tmp_path, capsys):
    folder = tmp_path / "run"
    command = [*LINEAR, "--warmup-steps", 4, "--save-steps", 2, "--output-dir", folder]
    train(capsys, *command, "--max-steps", 6)
    planned = rates(folder)
    assert list(planned.values()) == pytest.approx([linear_rate(step, warmup=4, steps=6) for step in range(1, 7)])
    out = train(capsys, *command, "--max-steps", 10, "--resume", folder / "checkpoint-2")
    assert f"resumed from {folder / 'checkpoint-2'} at step 2" in out
    longer = rates(folder)
    assert sorted(longer) == list(range(1, 11))
    # The warm-up as planned: steps 3 and 4 at 3/4 of the peak and the peak.
    assert [longer[step] for step in (1, 2, 3, 4)] == [planned[step] for step in (1, 2, 3, 4)]
    # After it, the 2 steps of the course that were left spread over steps 4 to 10, to 0 at the last.
    assert [longer[step] for step in range(5, 11)] == [
        pytest.approx(linear_rate(4 + (step - 4) * 2 / 6, warmup=4, steps=6), rel=1e-9)
        for step in range(5, 11)]
    assert longer[10] == 0.0


# pretrain.py --resume refuses --freeze-body and --mixed-precision that differ from the run's (FIXED_ON_RESUME), and
# records the mixed precision Accelerate trains with, so that naming the default on resuming is no change.
RUN = [*TRAIN_ARGS, "--max-steps", 3, "--save-steps", 2, "--eval-steps", 0]


def test_freeze_body_is_kept_on_resume_and_another_choice_is_refused(tiny_model, tmp_path, capsys):  # noqa: F811
    """A run of --init-from with --freeze-body resumes with its own command, the biLM still frozen (--freeze-body
    without --init-from is refused, so these runs adapt a model); a resume that drops --freeze-body, or adds it to
    a run that trained everything, is refused, the folder left as it was."""
    adapt = [*RUN, "--init-from", tiny_model]
    for name, started, resumed, change in (("frozen", ["--freeze-body"], [], "freeze_body=True, now False"),
                                           ("whole", [], ["--freeze-body"], "freeze_body=False, now True")):
        folder = tmp_path / name
        code, _, err = run_main(capsys, *adapt, *started, "--output-dir", folder)
        assert code == 0, err
        before = snapshot(folder)
        code, _, err = run_main(capsys, *adapt, *resumed, "--output-dir", folder, "--resume", folder / "checkpoint-2")
        assert_one_error(code, err, f"--resume {folder / 'checkpoint-2'}: the run was started with other options "
                                    f"({change})")
        assert snapshot(folder) == before
    folder = tmp_path / "frozen"
    code, out, err = run_main(capsys, *adapt, "--freeze-body", "--max-steps", 5, "--output-dir", folder, "--resume")
    assert code == 0, err
    assert f"resumed from {folder / 'checkpoint-2'} at step 2" in out
    state = json.loads((folder / "trainer_state.json").read_text())
    assert state["step"] == 5 and state["settings"]["freeze_body"] is True
    body = ElmoForPreTraining.from_pretrained(tiny_model).elmo.state_dict()
    trained = ElmoForPreTraining.from_pretrained(folder)
    assert all(torch.equal(tensor, body[name]) for name, tensor in trained.elmo.state_dict().items())  # still frozen
    assert not torch.equal(trained.softmax.weight, ElmoForPreTraining.from_pretrained(tiny_model).softmax.weight)


def test_the_mixed_precision_trained_with_is_recorded_and_another_is_refused_on_resume(tmp_path):
    """(Subprocesses: Accelerate keeps one process's first mixed precision.)"""
    folder = tmp_path / "run"
    run_pretrain(tmp_path, *RUN, "--output-dir", folder)
    state = json.loads((folder / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["settings"]["mixed_precision"] == "no"  # (Accelerate's default, not the option's absence)
    result = run_pretrain(tmp_path, *RUN, "--mixed-precision", "bf16", "--output-dir", folder, "--resume",
                          folder / "checkpoint-2", check=False)
    assert_one_error(result.returncode, result.stderr, "the run was started with other options "
                                                       "(mixed_precision='no', now 'bf16')")
    # Naming the precision the run had is no change.
    result = run_pretrain(tmp_path, *RUN, "--mixed-precision", "no", "--output-dir", folder, "--resume",
                          folder / "checkpoint-2")
    assert f"resumed from {folder / 'checkpoint-2'} at step 2" in result.stdout


# What pretrain.py logs and records: the last step is logged even where --logging-steps does not divide it, and the
# epoch that trainer_state.json records (a checkpoint's and the final model's) counts micro-batches, as the log does.
def test_the_last_step_is_logged_where_logging_steps_does_not_divide_it(tmp_path, capsys):
    folder = tmp_path / "run"
    code, _, err = run_main(capsys, *TRAIN_ARGS, "--max-steps", 5, "--logging-steps", 2, "--save-steps", 0,
                            "--eval-steps", 0, "--output-dir", folder)
    assert code == 0, err
    assert sorted(losses(folder)) == [2, 4, 5]


def test_trainer_state_records_the_epoch_of_accumulated_steps(tmp_path, capsys):
    folder = tmp_path / "run"
    code, _, err = run_main(capsys, *TRAIN_ARGS, "--batching", "sentence", "--batch-size", 2,
                            "--gradient-accumulation-steps", 2, "--max-steps", 2, "--save-steps", 1, "--eval-steps", 0,
                            "--output-dir", folder)
    assert code == 0, err
    assert [r["epoch"] for r in read_log(folder) if "loss" in r] == [1.0, 2.0]  # (one step of 4 sentences an epoch)
    assert json.loads((folder / "checkpoint-1" / "trainer_state.json").read_text())["epoch"] == 1.0
    assert json.loads((folder / "trainer_state.json").read_text())["epoch"] == 2.0


# --init-from with another vocabulary: the new softmax starts as a new model's would, weights of standard deviation
# 1/sqrt(projection_dim) and bias 0 (not the unit normal, whose logits would be sqrt(projection_dim) times larger).
def test_a_new_softmax_over_another_vocabulary_starts_at_the_new_models_scale(tiny_model, tmp_path, capsys):
    folder = tmp_path / "run"
    code, _, err = run_main(capsys, "--init-from", tiny_model, "--train-file", TRAIN / "data.txt", "--new-vocabulary",
                            "--batch-size", 2, "--unroll-steps", 5, "--max-steps", 0, "--save-steps", 0,
                            "--output-dir", folder)
    assert code == 0, err
    softmax = load_file(folder / "model.safetensors")
    weight, bias = softmax["softmax.weight"], softmax["softmax.bias"]
    assert not bias.any()
    projection_dim = weight.shape[1]
    assert weight.std().item() == pytest.approx(1 / math.sqrt(projection_dim), rel=0.25), projection_dim


# evaluate.py takes the word splitting from a checkpoint only where it holds the folder's model: the same vocabulary
# and the same config, not the vocabulary alone.
def test_a_checkpoint_of_another_config_with_the_same_vocabulary_does_not_say_how_to_split(tmp_path, capsys):
    raw = tmp_path / "raw.txt"
    raw.write_text("The curse, of the house.\nIt ended (at last).\nThe house, the curse and the end.\n" * 3)
    run = tmp_path / "run"
    assert pretrain.main(["--preset", "tiny", "--train-file", str(raw), "--word-splitting", "tokenizer",
                          "--max-steps", "2", "--save-steps", "1", "--output-dir", str(run)]) == 0
    (run / "trainer_state.json").unlink()  # (a continuation that crashed removed it)
    capsys.readouterr()
    assert evaluate.main(["--model-dir", str(run), "--file", str(raw)]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("word splitting:")]
    assert said == ["word splitting: tokenizer (recorded in checkpoint-1: the folder's trainer_state.json is missing)"]
    # A checkpoint of another model (another size) over the same vocabulary: not the folder's model.
    config_file = run / "checkpoint-1" / "config.json"
    config = json.loads(config_file.read_text())
    config["projection_dim"] += 1
    config_file.write_text(json.dumps(config))
    assert evaluate.main(["--model-dir", str(run), "--file", str(raw)]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("word splitting:")]
    assert said == ["word splitting: whitespace (none recorded)"]


# evaluate.py --output-json that cannot be written: one error line before the evaluation, not a traceback after it.
def test_an_output_json_that_cannot_be_written_is_refused_before_the_work(tmp_path, capsys):
    run = tmp_path / "run"
    code, _, err = run_main(capsys, *TRAIN_ARGS, "--max-steps", 0, "--save-steps", 0, "--output-dir", run)
    assert code == 0, err
    (tmp_path / "a-file").write_text("not a folder\n")
    output = tmp_path / "a-file" / "results.json"
    code = evaluate.main(["--model-dir", str(run), "--file", str(TRAIN / "data.txt"), "--output-json", str(output)])
    captured = capsys.readouterr()
    assert_one_error(code, captured.err, str(tmp_path / "a-file"))
    assert "perplexity" not in captured.out  # (refused before the evaluation)


def test_an_output_json_that_a_full_disk_keeps_from_being_written_is_one_line(tmp_path, capsys):
    """A disk that fills during the evaluation (a file size limit here, in a child process) ended in an OSError's
    traceback after the figures; now one line names --output-json and the cause, and nothing half-written is left."""
    run = tmp_path / "run"
    code, _, err = run_main(capsys, *TRAIN_ARGS, "--max-steps", 0, "--save-steps", 0, "--output-dir", run)
    assert code == 0, err
    output = tmp_path / "results.json"
    command = ["--model-dir", run, "--file", TRAIN / "data.txt", "--output-json", output]

    def evaluate_run(limit=None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(REPO / "modeling" / "evaluate.py"), *map(str, command)],
                              capture_output=True, text=True, env=script_env(tmp_path), timeout=300,
                              preexec_fn=file_size_limit(limit) if limit else None)

    assert evaluate_run().returncode == 0  # (and the datasets cache is written)
    output.unlink()
    result = evaluate_run(100)
    assert_one_error(result.returncode, result.stderr, f"error: --output-json {output}: could not be written "
                     "(OSError: [Errno 27] File too large)")
    assert "perplexity" in result.stdout and not [path for path in tmp_path.iterdir() if "results" in path.name]


# ---- a diverged run, a held output folder, non-finite options, vocabularies, resumes, inputs, unfinished runs ----


# evaluate.py's perplexity: exp of a mean NLL above ~709 overflows a float; it is inf (NaN stays NaN), not an
# OverflowError that lost a diverged run's model.
def test_the_perplexity_of_losses_that_overflow_exp_is_inf_and_nan_stays_nan():
    text, table, vocabulary = fixture_text()
    stream = EvaluationStream(text, table, vocabulary, rows=2, unroll_steps=5)
    model = ElmoForPreTraining(tiny_config(max_characters_per_token=50, lm_negative_samples=0))
    with torch.no_grad():
        model.softmax.weight.zero_()
        model.softmax.bias.zero_()
        model.softmax.bias[vocabulary.unk_id] = 1e5  # (every other word's NLL is 1e5)
    results = evaluate.perplexity(model, stream, "cpu")
    assert results["forward_perplexity"] == results["backward_perplexity"] == results["average_perplexity"] == math.inf
    with torch.no_grad():
        model.softmax.bias.fill_(math.nan)
    results = evaluate.perplexity(model, stream, "cpu")
    assert all(math.isnan(results[name]) for name in ("forward_perplexity", "backward_perplexity", "average_perplexity"))


def test_a_diverged_run_saves_its_model_and_reports_its_infinite_perplexity(tmp_path, capsys):
    folder = tmp_path / "run"
    code, out, err = run_main(capsys, *TRAIN_ARGS, "--learning-rate", 100, "--optimizer", "adamw", "--max-steps", 4,
                              "--save-steps", 0, "--eval-steps", 0, "--output-dir", folder)
    assert code == 0, err
    assert "step 4: held-out perplexity forward inf, backward inf, average inf" in out
    assert "step 4: the held-out loss is not finite, the model has diverged" in out
    assert (folder / "model.safetensors").is_file()
    assert json.loads((folder / "eval_results.json").read_text())["average_perplexity"] == math.inf


# Two runs into one --output-dir (a --resume while the first trains) mixed their log and checkpoints: OUTPUT_DIR.lock,
# beside the folder, is held for the whole run, and a second run is refused before it writes anything.
def test_a_run_into_an_output_folder_that_another_run_holds_is_refused_and_writes_nothing(tmp_path, capsys):
    folder = tmp_path / "run"
    code, _, err = run_main(capsys, *RUN, "--output-dir", folder)
    assert code == 0, err
    # (released at the end: nothing left beside the folder, and nothing of it in the folder)
    assert not list(tmp_path.glob("*lock*")) and not list(folder.glob("*lock*"))
    before = snapshot(folder)
    with OutputLock(tmp_path / "run.lock", "the first run"):
        for output in (folder, tmp_path / "." / "run"):  # (however the folder is named)
            code, out, err = run_main(capsys, *RUN, "--max-steps", 5, "--output-dir", output, "--resume")
            assert_one_error(code, err, f"{output}: another run is writing it (it holds {tmp_path / 'run.lock'})")
            assert "resumed" not in out
        assert snapshot(folder) == before
        fresh = tmp_path / "fresh"
        with OutputLock(tmp_path / "fresh.lock", "the first run"):
            code, _, err = run_main(capsys, *RUN, "--output-dir", fresh)
        assert_one_error(code, err, f"{fresh}: another run is writing it")
        assert not fresh.exists()


def test_a_run_whose_lock_cannot_be_written_beside_its_folder_goes_on_and_says_so(tmp_path, capsys, monkeypatch):
    """An output folder that can be written in a folder that cannot (a volume mounted in a read-only file system):
    the lock cannot be made, and the run goes on without it, saying a second run would not be refused. (This process
    runs as root, which every permission lets through: the file system's refusal is made here.)"""

    class ReadOnlyParent(OutputLock):
        def __enter__(self):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self.path))

    monkeypatch.setattr(pretrain, "OutputLock", ReadOnlyParent)
    folder = tmp_path / "run"
    code, out, err = run_main(capsys, *RUN, "--output-dir", folder)
    assert code == 0, err
    assert (f"warning: {folder}.lock: cannot write the lock of --output-dir there (Permission denied), so a second run "
            "into it would not be refused") in out
    assert (folder / "model.safetensors").is_file()


# Float options that are not finite: NaN passed every `< 0` check, inf overflowed the step count.
@pytest.mark.parametrize("option, value, message", [
    ("--epochs", "inf", "--epochs must be a finite number, 0 or more, got inf"),
    ("--epochs", "nan", "--epochs must be a finite number, 0 or more, got nan"),
    ("--max-train-minutes", "nan", "--max-train-minutes must be a finite number, 0 (off) or more, got nan"),
    ("--max-train-minutes", "inf", "--max-train-minutes must be a finite number, 0 (off) or more, got inf"),
    ("--learning-rate", "nan", "--learning-rate must be a finite number above 0, got nan"),
    ("--learning-rate", "inf", "--learning-rate must be a finite number above 0, got inf"),
    ("--weight-decay", "nan", "--weight-decay must be a finite number, 0 or more, got nan"),
    ("--weight-decay", "-0.1", "--weight-decay must be 0 or more, got -0.1"),  # (torch's ValueError before)
    ("--max-grad-norm", "nan", "--max-grad-norm must be a finite number, 0 or more, got nan"),
    ("--dropout", "nan", "--dropout must be a finite number in [0, 1), got nan"),
])
def test_float_options_must_be_finite_numbers(option, value, message, tmp_path, capsys):
    extra = ["--optimizer", "adamw"] if option == "--weight-decay" else []
    length = [] if option in ("--epochs", "--max-train-minutes") else ["--max-steps", 1]
    code, _, err = run_main(capsys, "--preset", "tiny", "--train-file", TRAIN / "data.txt", *length, *extra, option,
                            value, "--output-dir", tmp_path / "run")
    assert_one_error(code, err, message)
    assert not (tmp_path / "run").exists()


# --init-from a folder whose vocab.txt has another number of words than its softmax: transformers reinitialised the
# softmax while the run said it went on; refused, as evaluate.py refuses such a folder.
def test_init_from_a_folder_whose_vocabulary_and_softmax_differ_in_size_is_refused(tiny_model, tmp_path, capsys):
    with open(tiny_model / "vocab.txt", "a") as file:
        file.write("extra\n")
    code, out, err = run_main(capsys, "--init-from", tiny_model, "--train-file", TRAIN / "data.txt", "--batch-size", 2,
                              "--unroll-steps", 5, "--max-steps", 1, "--save-steps", 0, "--output-dir", tmp_path / "run")
    assert_one_error(code, err, f"--init-from {tiny_model}: vocab.txt has 33 words, the softmax 32")
    assert "pretraining" not in err and not (tmp_path / "run").exists()


# A softmax vocabulary of the special words alone (every target <UNK>): refused as --vocab-size 3 is.
def test_a_vocabulary_of_only_the_special_words_is_refused(tmp_path, capsys):
    specials = tmp_path / "specials.txt"
    specials.write_text("<S>\n</S>\n<UNK>\n")
    text = ["--preset", "tiny", "--train-file", TRAIN / "data.txt", "--max-steps", 1, "--output-dir", tmp_path / "run"]
    code, _, err = run_main(capsys, *text, "--vocab-file", specials)
    assert_one_error(code, err, f"--vocab-file {specials}: holds only its special words (<S>, </S>, <UNK>); every "
                                "target would be <UNK>")
    code, _, err = run_main(capsys, *text, "--min-count", 100000)
    assert_one_error(code, err, "--min-count 100000: no word of the training text is kept")
    code, _, err = run_main(capsys, *text, "--alphabet", "vocabulary", "--min-count", 100000)
    assert_one_error(code, err, "--min-count 100000: no word of the training text is kept", "every target would be <oov>")
    assert not (tmp_path / "run").exists()


def test_a_vocabulary_that_covers_few_training_words_is_warned_of(tmp_path, capsys):
    few = tmp_path / "few.txt"
    few.write_text("<S>\n</S>\n<UNK>\nthe\n")
    text = ["--preset", "tiny", "--train-file", TRAIN / "data.txt", "--max-steps", 1, "--save-steps", 0]
    code, out, err = run_main(capsys, *text, "--vocab-file", few, "--output-dir", tmp_path / "few")
    assert code == 0, err
    words = sum(len(line.split()) for line in (TRAIN / "data.txt").read_text().splitlines())
    share = sum(line.split().count("the") for line in (TRAIN / "data.txt").read_text().splitlines()) / words
    assert (f"warning: the softmax vocabulary (4 words) covers {share:.1%} of the training text's {words:,} words, "
            "the others are <UNK> targets") in out
    code, out, err = run_main(capsys, *text, "--vocab-file", TRAIN / "vocab.txt", "--output-dir", tmp_path / "all")
    assert code == 0, err
    assert "warning" not in out


# Resuming with another --word-splitting named the text as other text; --init-from was compared as a string.
def test_a_resume_with_another_word_splitting_names_the_option(tmp_path, capsys):
    folder = tmp_path / "run"
    code, _, err = run_main(capsys, *RUN, "--output-dir", folder)
    assert code == 0, err
    before = snapshot(folder)
    code, _, err = run_main(capsys, *RUN, "--word-splitting", "tokenizer", "--output-dir", folder, "--resume")
    assert_one_error(code, err, f"--resume {folder / 'checkpoint-2'}: the run was started with --word-splitting "
                                "whitespace, now tokenizer; resume with the run's own --word-splitting whitespace")
    assert snapshot(folder) == before


def test_a_resume_names_init_from_by_its_real_path(tiny_model, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tiny_model.parent)
    folder = tmp_path / "run"
    command = ["--train-file", TRAIN / "data.txt", "--batch-size", 2, "--unroll-steps", 5, "--max-steps", 2,
               "--save-steps", 1, "--eval-steps", 0, "--output-dir", folder]
    code, _, err = run_main(capsys, "--init-from", tiny_model.name, *command)
    assert code == 0, err
    (folder / "trainer_state.json").unlink()  # (as if the run had crashed after its checkpoint)
    code, out, err = run_main(capsys, "--init-from", tiny_model, *command, "--resume")
    assert code == 0, err
    assert f"resumed from {folder / 'checkpoint-1'} at step 1" in out


# Input that is not a regular file, compressed files that are empty, and compressed suffixes in capitals.
def test_a_pipe_as_input_is_refused_before_it_is_read(tmp_path, capsys):
    """As `--train-file <(cat train.txt)` gives it: the pipe was read by the check, and datasets found nothing."""

    def pipe() -> str:
        read, write = os.pipe()
        os.write(write, (TRAIN / "data.txt").read_bytes())
        os.close(write)
        return f"/dev/fd/{read}"

    train_pipe, file_pipe = pipe(), pipe()
    try:
        code, _, err = run_main(capsys, "--preset", "tiny", "--train-file", train_pipe, "--max-steps", 1,
                                "--output-dir", tmp_path / "run")
        assert_one_error(code, err, f"--train-file {train_pipe}: is no regular file (a pipe?), which is read once only: "
                                    "give a file")
        run = tmp_path / "model"
        code, _, err = run_main(capsys, *TRAIN_ARGS, "--max-steps", 0, "--save-steps", 0, "--output-dir", run)
        assert code == 0, err
        code = evaluate.main(["--model-dir", str(run), "--file", file_pipe])
        assert_one_error(code, capsys.readouterr().err, f"--file {file_pipe}: is no regular file (a pipe?), which is "
                                                        "read once only: give a file")
    finally:
        for path in (train_pipe, file_pipe):
            os.close(int(path.rsplit("/", 1)[1]))


def test_empty_compressed_files_are_named_empty_and_capital_suffixes_are_decompressed(tmp_path, capsys):
    (tmp_path / "empty.gz").write_bytes(b"")
    (tmp_path / "empty.zip").write_bytes(b"")
    (tmp_path / "nothing.gz").write_bytes(gzip.compress(b""))
    text = ["--preset", "tiny", "--max-steps", 1, "--save-steps", 0]
    for name, message in [("empty.gz", "the training file is empty"), ("empty.zip", "the training file is empty"),
                          ("nothing.gz", "the training file is empty (once decompressed)")]:
        code, _, err = run_main(capsys, *text, "--train-file", tmp_path / name, "--output-dir", tmp_path / "run")
        assert_one_error(code, err, f"--train-file {tmp_path / name}: {message}")
    upper = tmp_path / "TRAIN.TXT.GZ"
    upper.write_bytes(gzip.compress((TRAIN / "data.txt").read_bytes()))
    code, _, err = run_main(capsys, *text, "--train-file", upper, "--output-dir", tmp_path / "upper")
    assert code == 0, err
    plain = ["--max-steps", 1, "--save-steps", 0, "--train-file", TRAIN / "data.txt"]
    code, _, err = run_main(capsys, "--preset", "tiny", *plain, "--output-dir", tmp_path / "plain")
    assert code == 0, err
    assert (json.loads((tmp_path / "upper" / "trainer_state.json").read_text())["data"]["train_sha256"]
            == json.loads((tmp_path / "plain" / "trainer_state.json").read_text())["data"]["train_sha256"])


# An unfinished run's folder (checkpoints and log.jsonl only): evaluate.py names the checkpoint to pass, and a Ctrl-C
# before the first checkpoint says that none was saved (and releases the folder's lock).
def test_evaluate_on_an_unfinished_run_names_its_newest_checkpoint(tmp_path, capsys):
    folder = tmp_path / "run"
    code, _, err = run_main(capsys, *TRAIN_ARGS, "--max-steps", 5, "--save-steps", 2, "--save-total-limit", 0,
                            "--eval-steps", 0, "--output-dir", folder)
    assert code == 0, err
    for name in ("config.json", "model.safetensors", "vocab.txt", "trainer_state.json"):
        (folder / name).unlink()
    code = evaluate.main(["--model-dir", str(folder), "--file", str(TRAIN / "data.txt")])
    assert_one_error(code, capsys.readouterr().err, f"{folder}: no config.json, the run has not saved its final "
                                                    f"model; pass its newest checkpoint: --model-dir {folder / 'checkpoint-4'}")


def test_an_interrupt_before_the_first_checkpoint_says_none_was_saved(tmp_path, capsys, monkeypatch):
    def interrupted(self, index):
        raise KeyboardInterrupt

    monkeypatch.setattr(StreamBatches, "batch", interrupted)
    folder = tmp_path / "run"
    code, _, err = run_main(capsys, *RUN, "--output-dir", folder)
    assert code == 130
    assert err.strip().splitlines()[-1] == (f"interrupted: no checkpoint was saved in {folder}; the same command with "
                                            "--resume starts the run again from the beginning")
    assert not (tmp_path / "run.lock").exists()


# A checkpoint or the final model that cannot be written (a full disk; here a file size limit, with SIGXFSZ ignored so
# that the write fails with EFBIG instead of killing the process) ended in safetensors' or torch's traceback, exit code
# 1, and left its .checkpoint-N.partial or .final.partial folder behind. Now one line names the folder, the cause and
# what the run leaves to go on from, exit code 2, the partial folder removed; the checkpoints before it stay whole,
# and --resume goes on from the latest.
def file_size_limit(size: int):
    """A preexec_fn that limits the files a process (and its children) writes to `size` bytes, a write past it
    failing (EFBIG) rather than killing the process (SIGXFSZ, ignored)."""
    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))

    return limit


def test_only_a_failed_write_is_reported_as_one():
    """A save's error is called a failed write (one line, the run to go on from its checkpoints) only where the disk
    failed: OSError, safetensors' I/O error, torch.save's stream writer. Another error (a fault of the program, CUDA
    out of memory) keeps its traceback: resuming would meet it again at the next save."""
    from accelerate import Accelerator
    from safetensors import SafetensorError

    assert is_write_error(OSError(errno.ENOSPC, "No space left on device"))
    assert is_write_error(SafetensorError("Error while serializing: I/O error: File too large (os error 27)"))
    assert is_write_error(RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598"))
    for error in (RuntimeError("CUDA error: an illegal memory access was encountered"), torch.OutOfMemoryError("x"),
                  NotImplementedError("x"), SafetensorError("You are trying to save a non contiguous tensor"),
                  ValueError("x")):
        assert not is_write_error(error), error

    def write(error):
        def fail():
            raise error
        return fail

    accelerator = Accelerator()
    assert pretrain.failed_write(accelerator, None) is None
    assert pretrain.failed_write(accelerator, write(OSError(errno.EFBIG, "File too large"))) == \
        "OSError: [Errno 27] File too large"
    with pytest.raises(RuntimeError, match="^CUDA error"):
        pretrain.failed_write(accelerator, write(RuntimeError("CUDA error: an illegal memory access was encountered")))


def test_a_save_that_cannot_be_written_is_one_line_and_leaves_no_partial_folder(tmp_path):
    folder = tmp_path / "run"
    command = [*RUN, "--save-total-limit", 0, "--output-dir", folder]

    def pretrain_run(*arguments, file_size=None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(PRETRAIN), *map(str, [*command, *arguments])], capture_output=True,
                              text=True, env=script_env(tmp_path), timeout=300,
                              preexec_fn=file_size_limit(file_size) if file_size else None)

    def refused(result: subprocess.CompletedProcess, *must_mention: str) -> None:
        assert_one_error(result.returncode, result.stderr, *must_mention)
        assert not [path.name for path in folder.iterdir() if path.name.endswith(".partial")]

    # The weights (model.safetensors: safetensors' error) of the first checkpoint: none saved before it.
    result = pretrain_run(file_size=200_000)
    refused(result, f"error: {folder / 'checkpoint-2'}: the checkpoint could not be written (SafetensorError: ",
            "File too large", "its partial folder .checkpoint-2.partial is removed; no checkpoint was saved in "
            f"{folder}; the same command with --resume starts the run again from the beginning")
    assert sorted(path.name for path in folder.iterdir()) == ["log.jsonl"]
    result = pretrain_run("--resume")  # (as it says)
    assert result.returncode == 0, result.stderr[-3000:]
    assert list_checkpoints(folder) == [(2, folder / "checkpoint-2")]
    sizes = {path.name: path.stat().st_size for path in (folder / "checkpoint-2").iterdir()}
    assert sizes["model.safetensors"] < sizes["optimizer.bin"]
    # The optimizer's state (optimizer.bin, torch.save's RuntimeError) of a later checkpoint: the one before is kept.
    before = snapshot(folder / "checkpoint-2")
    result = pretrain_run("--max-steps", 5, "--resume",
                          file_size=(sizes["model.safetensors"] + sizes["optimizer.bin"]) // 2)
    refused(result, f"error: {folder / 'checkpoint-4'}: the checkpoint could not be written (RuntimeError: ",
            f"the checkpoints saved in {folder} are kept; the same command with --resume goes on from the latest")
    assert list_checkpoints(folder) == [(2, folder / "checkpoint-2")] and snapshot(folder / "checkpoint-2") == before
    # The final model (after its last step: no checkpoint then).
    result = pretrain_run("--max-steps", 4, "--resume", file_size=200_000)
    refused(result, f"error: {folder}: the final model could not be written (SafetensorError: ", "File too large",
            "its partial folder .final.partial is removed; the checkpoints saved in "
            f"{folder} are kept; the same command with --resume goes on from the latest")
    assert not (folder / "trainer_state.json").exists()  # (the earlier end's: a later --resume does not stop there)
    result = pretrain_run("--max-steps", 4, "--resume")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resumed from {folder / 'checkpoint-2'} at step 2" in result.stdout
    assert json.loads((folder / "trainer_state.json").read_text())["step"] == 4
    assert pretrain.checkpoint_problem(folder / "checkpoint-2") is None


def test_what_a_stopped_run_leaves_to_go_on_from_names_a_command_that_does_it(tmp_path):
    """What a failed save, or Ctrl-C, says the run leaves: "the same command with --resume" is refused where that
    command has --overwrite-output-dir (both at once), and where it has --resume PATH a plain --resume goes on from
    the latest checkpoint (PATH again, where the run saved none)."""
    import argparse

    def advice(**options) -> str:
        return pretrain.resume_advice(argparse.Namespace(**{"output_dir": str(tmp_path), "resume": None,
                                                            "overwrite_output_dir": False, **options}))

    none = f"no checkpoint was saved in {tmp_path}; the same command"
    assert advice() == advice(resume="latest") == f"{none} with --resume starts the run again from the beginning"
    assert advice(overwrite_output_dir=True) == (f"{none} with --resume instead of --overwrite-output-dir starts the "
                                                 "run again from the beginning")
    assert advice(resume="other/checkpoint-4") == f"{none} goes on from other/checkpoint-4 again"
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text("{}")
    kept = f"the checkpoints saved in {tmp_path} are kept; the same command with"
    assert advice() == f"{kept} --resume goes on from the latest"
    assert advice(overwrite_output_dir=True) == f"{kept} --resume instead of --overwrite-output-dir goes on from the latest"
    assert advice(resume="other/checkpoint-4") == f"{kept} a plain --resume goes on from the latest"


def test_two_processes_whose_save_cannot_be_written_say_so_in_one_line_each(tmp_path):
    """A checkpoint's files are written by every process (its random states), the final model by the first only:
    either way each process learns of the failed write and ends with its line, none waiting for the others at a
    barrier, and the partial folder is removed."""
    weights_too_large = file_size_limit(200_000)
    for length, written in ((["--max-steps", 3, "--save-steps", 2], "checkpoint-2"), (["--max-steps", 2], "final")):
        folder = tmp_path / written
        result = run_two_processes([PRETRAIN, *TRAIN_ARGS, *length, "--batch-size", 2, "--eval-steps", 0,
                                    "--output-dir", folder], script_env(tmp_path), preexec_fn=weights_too_large)
        what = f"{folder}: the final model" if written == "final" else f"{folder / written}: the checkpoint"
        said = (f"error: {what} could not be written (SafetensorError: Error while serializing: I/O error: File too "
                "large (os error 27)); its partial folder ")
        assert result.returncode != 0 and result.stderr.count(said) == 2, result.stderr[-3000:]
        assert sorted(path.name for path in folder.iterdir()) == ["log.jsonl"]


def log_steps(log: Path) -> list[int]:
    """The steps of a log's training records (every line must read)."""
    return [record["step"] for record in map(json.loads, log.read_text().splitlines()) if "loss" in record]


def test_a_log_that_cannot_be_written_is_one_line_and_the_run_goes_on_from_it(tmp_path):
    """log.jsonl on a full disk (here past a file size limit of 700 bytes, its third line): the OSError's traceback
    was the end. Now one line naming the file and what the run leaves; the same command with --resume then runs to
    the end, its log whole (the half line cut by the limit dropped). The rewrite of the log on a resume fails
    likewise, leaving the log as it was and no .log.jsonl.partial."""
    folder = tmp_path / "run"
    command = [*TRAIN_ARGS, "--max-steps", 6, "--eval-steps", 0, "--output-dir", folder]

    def pretrain_run(*arguments, file_size=None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(PRETRAIN), *map(str, [*command, *arguments])], capture_output=True,
                              text=True, env=script_env(tmp_path), timeout=300,
                              preexec_fn=file_size_limit(file_size) if file_size else None)

    result = pretrain_run("--save-steps", 4)  # (checkpoint-4, a log of 6 lines, and the datasets cache written)
    assert result.returncode == 0, result.stderr[-3000:]
    before = (folder / "log.jsonl").read_bytes()
    result = pretrain_run("--save-steps", 4, "--max-steps", 8, "--resume", file_size=700)  # (4 lines are kept)
    assert_one_error(result.returncode, result.stderr, f"error: {folder / 'log.jsonl'}: the log could not be written "
                     "(OSError: [Errno 27] File too large); the checkpoints saved in "
                     f"{folder} are kept; the same command with --resume goes on from the latest")
    assert (folder / "log.jsonl").read_bytes() == before
    assert not [path.name for path in folder.iterdir() if path.name.startswith(".")]

    result = pretrain_run("--save-steps", 0, "--overwrite-output-dir", file_size=700)
    assert_one_error(result.returncode, result.stderr, f"error: {folder / 'log.jsonl'}: the log could not be written "
                     f"(OSError: [Errno 27] File too large); no checkpoint was saved in {folder}; the same command "
                     "with --resume instead of --overwrite-output-dir starts the run again from the beginning")
    assert (folder / "log.jsonl").stat().st_size == 700
    result = pretrain_run("--save-steps", 0, "--resume")
    assert result.returncode == 0, result.stderr[-3000:]
    assert log_steps(folder / "log.jsonl") == [1, 2, 3, 4, 5, 6]


def test_two_processes_whose_log_cannot_be_written_say_so_in_one_line_each(tmp_path):
    """The first process writes the log; the other learns of its failed write, none waiting for the other."""
    folder = tmp_path / "run"
    command = [PRETRAIN, *TRAIN_ARGS, "--batch-size", 2, "--eval-steps", 0, "--save-steps", 0, "--output-dir", folder]
    warm = subprocess.run([sys.executable, *map(str, [*command, "--max-steps", 1])], capture_output=True, text=True,
                          env=script_env(tmp_path), timeout=300)  # (the datasets cache: written without the limit)
    assert warm.returncode == 0, warm.stderr[-3000:]
    result = run_two_processes([*command, "--max-steps", 6, "--overwrite-output-dir"], script_env(tmp_path),
                               preexec_fn=file_size_limit(700))
    said = f"error: {folder / 'log.jsonl'}: the log could not be written (OSError: [Errno 27] File too large)"
    assert result.returncode != 0 and result.stderr.count(said) == 2, result.stderr[-3000:]


@pytest.mark.parametrize("size", [700, 1500])
def test_a_datasets_cache_on_a_full_disk_is_named(tmp_path, size):
    """datasets writes the text into its cache (HF_DATASETS_CACHE) first: on a full disk (a file size limit here) that
    ended in an OSError's traceback (1500 bytes), or in "--train-file ...: cannot be read", blaming the text (700)."""
    result = subprocess.run([sys.executable, str(PRETRAIN), *map(str, [*RUN, "--output-dir", tmp_path / "run"])],
                            capture_output=True, text=True, env=script_env(tmp_path), timeout=300,
                            preexec_fn=file_size_limit(size))
    assert_one_error(result.returncode, result.stderr, f"error: --train-file {TRAIN / 'data.txt'}: could not be read "
                     f"into the datasets cache {tmp_path / 'datasets-cache'} (OSError: [Errno 27] File too large): "
                     "make room there, or set HF_DATASETS_CACHE to a folder with room")


def test_a_final_model_that_cannot_be_moved_into_the_folder_is_one_line(tmp_path, capsys):
    """The files of the final model are moved into OUTPUT_DIR one by one, trainer_state.json last; a move that fails
    (here a folder where a file goes) ended in a traceback. Now one line, and the folder does not read as finished."""
    folder = tmp_path / "run"
    (folder / "README.md").mkdir(parents=True)
    (folder / "README.md" / "notes.txt").write_text("not a model card")
    code, _, err = run_main(capsys, *RUN, "--output-dir", folder, "--overwrite-output-dir")
    assert_one_error(code, err, f"error: {folder}: the final model could not be moved into the folder "
                     "(IsADirectoryError: ", "what was not moved is in .final.partial; the checkpoints saved in "
                     f"{folder} are kept; the same command with --resume instead of --overwrite-output-dir goes on")
    assert not (folder / "trainer_state.json").exists() and (folder / ".final.partial" / "trainer_state.json").exists()


def test_leftovers_that_cannot_be_removed_are_named_in_every_process(tmp_path, capsys):
    """What an interrupted save left (.checkpoint-N.partial, here a file where a folder should be) is put right by the
    first process before the others go on: a failure was its traceback, and the other process's "Connection closed
    by peer"."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / ".checkpoint-2.partial").write_text("")
    said = (f"error: {folder / '.checkpoint-2.partial'}: what an interrupted save left could not be put right "
            "(NotADirectoryError: ")
    code, _, err = run_main(capsys, *RUN, "--output-dir", folder, "--resume")
    assert_one_error(code, err, said, "remove it, and run the command again")
    result = run_two_processes([PRETRAIN, *RUN, "--batch-size", 2, "--output-dir", folder, "--resume"],
                               script_env(tmp_path))
    assert result.returncode != 0 and result.stderr.count(said) == 2, result.stderr[-3000:]


@pytest.mark.parametrize("refused_name", [".checkpoint-2.partial", "checkpoint-2"], ids=["placed", "pruned"])
def test_a_checkpoint_that_cannot_be_put_in_place_or_pruned_stops_the_run_in_one_line(tmp_path, capsys, monkeypatch,
                                                                                       refused_name):
    """After its files are written, the first process moves a checkpoint into place and removes the ones
    --save-total-limit drops: a failure was a traceback. (As root, which these tests may run as, no folder refuses a
    move: the failure is made here.)"""
    folder = tmp_path / "run"
    replace = os.replace

    def refused(source, target):
        if Path(source).name == refused_name:
            raise PermissionError(errno.EPERM, "Operation not permitted")
        replace(source, target)

    monkeypatch.setattr(pretrain.os, "replace", refused)
    code, _, err = run_main(capsys, *TRAIN_ARGS, "--max-steps", 5, "--save-steps", 2, "--save-total-limit", 1,
                            "--eval-steps", 0, "--output-dir", folder)
    failed = "put in place" if refused_name.endswith(".partial") else "removed"
    assert_one_error(code, err, f"error: {folder / 'checkpoint-2'}: the checkpoint could not be {failed} "
                     "(PermissionError: [Errno 1] Operation not permitted); ")
    monkeypatch.undo()
    assert not list(folder.glob(".checkpoint-*"))
    if failed == "removed":  # (the new checkpoint is whole, and the one that stayed)
        assert [path.name for path in sorted(folder.glob("checkpoint-*"))] == ["checkpoint-2", "checkpoint-4"]
        assert pretrain.checkpoint_problem(folder / "checkpoint-4") is None
    else:
        assert not list(folder.glob("checkpoint-*"))


def test_checkpoints_that_overwrite_output_dir_cannot_remove_stop_the_run_before_it_starts(tmp_path, capsys,
                                                                                         monkeypatch):
    """--overwrite-output-dir removes the folder's checkpoints before the first step (the first process, while the
    others wait): one that cannot be removed was a traceback. Now one line names it, and nothing has trained."""
    folder = tmp_path / "run"
    code, _, err = run_main(capsys, *RUN, "--output-dir", folder)
    assert code == 0, err
    replace = os.replace

    def refused(source, target):
        if Path(source).name == "checkpoint-2":
            raise PermissionError(errno.EPERM, "Operation not permitted")
        replace(source, target)

    monkeypatch.setattr(pretrain.os, "replace", refused)
    before = (folder / "log.jsonl").read_bytes()
    code, out, err = run_main(capsys, *RUN, "--output-dir", folder, "--overwrite-output-dir")
    assert_one_error(code, err, f"error: {folder / 'checkpoint-2'}: the checkpoint could not be removed "
                     "(PermissionError: [Errno 1] Operation not permitted)")
    assert (folder / "log.jsonl").read_bytes() == before and "step 1" not in out


DIFFERENT_TEXT = """import os, sys
from modeling import pretrain
from modeling.data import DataError

read_corpus = pretrain.read_corpus


def read_on_this_process(*args, **kwargs):
    if os.environ["RANK"] == "1":  # (a file changed between the processes' reads, or another machine's copy)
        if sys.argv[1] == "fails":
            raise DataError("--train-file data.txt: cannot be read (what the second process met)")
        return read_corpus(*args, **kwargs).select(range(3))
    return read_corpus(*args, **kwargs)


pretrain.read_corpus = read_on_this_process
sys.exit(pretrain.main(sys.argv[2:]))
"""


@pytest.mark.parametrize("case", ["fails", "differs"])
def test_processes_that_read_the_text_differently_stop_in_one_line_each(tmp_path, case):
    """Every process reads the text, the first one first. Another process's refusal was its own line and the first's
    gloo traceback; another text (the file changed meanwhile) gave the processes different numbers of steps, and the
    run hung at its end (--epochs) or trained each process on other text (--max-steps)."""
    script = tmp_path / "read_differently.py"
    script.write_text(DIFFERENT_TEXT)
    result = run_two_processes([script, case, *TRAIN_ARGS, "--epochs", 2, "--batch-size", 2, "--eval-steps", 0,
                                "--output-dir", tmp_path / "run"], script_env(tmp_path), timeout=240)
    said = ("error: --train-file data.txt: cannot be read (what the second process met)" if case == "fails" else
            f"error: the processes read different text from --train-file {TRAIN / 'data.txt'} or --validation-file "
            f"{TRAIN / 'data.txt'} (changed while the run started, or other files on another machine)")
    assert result.returncode != 0 and result.stderr.count(said) == 2, result.stderr[-3000:]


# save_checkpoint and remove_checkpoint when the process dies inside them (what clean_up_interrupted_saves then finds).
def test_a_checkpoint_being_pruned_when_the_process_dies_is_never_taken_for_a_whole_one(tmp_path, monkeypatch):
    """remove_checkpoint renames the folder before deleting it: a death half-way through the deletion (its weights
    gone) leaves a .pruned folder that no resume lists, not a checkpoint-N that looks whole; the next run removes it."""
    checkpoint = tmp_path / "checkpoint-2"
    checkpoint.mkdir()
    for name in ("model.safetensors", "trainer_state.json"):
        (checkpoint / name).write_text("{}")

    def dies_half_way(path, *args, **kwargs):
        (Path(path) / "model.safetensors").unlink()
        raise KeyboardInterrupt

    monkeypatch.setattr(pretrain.shutil, "rmtree", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        pretrain.remove_checkpoint(checkpoint)
    monkeypatch.undo()
    assert list_checkpoints(tmp_path) == [] and [p.name for p in tmp_path.iterdir()] == [".checkpoint-2.pruned"]
    pretrain.clean_up_interrupted_saves(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_checkpoint_saved_again_at_its_step_is_kept_until_the_new_one_is_in_place(tmp_path, monkeypatch):
    """A second save of checkpoint-N (a run resumed after a crash that followed that save) sets the old one aside
    until the new one takes its place: a death between the two leaves the old one, which the next run puts back."""
    from accelerate import Accelerator

    from hf_elmo import ElmoTokenizer
    from modeling.vocabulary import Vocabulary

    accelerator = Accelerator()  # (cpu=True would clash with the in-process runs' state on a machine with a GPU)
    model = accelerator.prepare(ElmoForPreTraining(tiny_config(lm_negative_samples=0)))
    vocabulary = Vocabulary(["<S>", "</S>", "<UNK>", *[f"w{i}" for i in range(29)]])
    save = lambda: pretrain.save_checkpoint(accelerator, model, tmp_path, 4, None, {"global_step": 4}, vocabulary,  # noqa: E731
                                            ElmoTokenizer(), 2)
    save()
    before = {path.name: path.read_bytes() for path in (tmp_path / "checkpoint-4").iterdir()}
    replace = os.replace

    def dies_before_the_new_one_is_in_place(source, target):
        if str(source).endswith(".partial"):
            raise KeyboardInterrupt
        replace(source, target)

    monkeypatch.setattr(pretrain.os, "replace", dies_before_the_new_one_is_in_place)
    with torch.no_grad():
        model.softmax.bias.add_(1.0)  # (the new save's weights differ)
    with pytest.raises(KeyboardInterrupt):
        save()
    monkeypatch.undo()
    pretrain.clean_up_interrupted_saves(tmp_path)
    assert [path.name for path in tmp_path.iterdir()] == ["checkpoint-4"]
    assert {path.name: path.read_bytes() for path in (tmp_path / "checkpoint-4").iterdir()} == before


def test_a_resumed_log_keeps_the_lines_up_to_its_checkpoint_and_drops_a_half_written_one(tmp_path):
    """The lines past the checkpoint's step are the interrupted run's, which the resumed run writes again; a last line
    cut short by a kill (no step that reads) goes too, where it stayed, breaking every reader of the log; so does a
    line that is not UTF-8."""
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 2.9}\n{"step": 3, "loss": 2.8}\n{"step": 4, "lo')
    pretrain.TrainingLog(log, Accelerator(), (2, log))
    assert log.read_text() == '{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 2.9}\n'
    log.write_text('{"step": 1, "loss": 3.0}\n{"step": 2, "lo')
    pretrain.TrainingLog(log, Accelerator(), (2, log))
    assert log.read_text() == '{"step": 1, "loss": 3.0}\n'
    log.write_bytes(b'{"step": 1, "loss": 3.0}\n{"step": 2, "loss": \xff}\n')  # (not UTF-8: it failed to read)
    pretrain.TrainingLog(log, Accelerator(), (2, log))
    assert log.read_text() == '{"step": 1, "loss": 3.0}\n'


def test_a_time_budgets_course_starts_at_the_step_that_ends_the_warm_up():
    """With --max-train-minutes, the warm-up counts steps and the course after it spreads over the time left from the
    step that ends it: 2 warm-up steps of 10 s in a 60 s budget leave 40 s, so step 3, 10 s on, is a fourth of the
    course (recorded a step late, the warm-up took 30 s and step 3 stood at the course's start, the rate at its peak)."""
    clock = pretrain.TrainingClock(minutes=1.0, warmup_steps=2)
    positions = []
    for step in (1, 2, 3):
        clock.add(10.0, step)
        positions.append(clock.schedule_step(step))
    assert clock.warmup_seconds == 20.0 and clock.state() == {"train_seconds": 30.0, "warmup_seconds": 20.0}
    assert positions == [1.0, 2.0, 2 + clock.COURSE_STEPS / 4]


def test_the_newest_checkpoint_of_the_folders_model_says_how_the_run_split_its_words(tmp_path):
    """Where the folder's own trainer_state.json is gone, the newest checkpoint of its model that records the word
    splitting is read, not an older one."""
    (tmp_path / "config.json").write_text('{"projection_dim": 8}')
    (tmp_path / "vocab.txt").write_text("<S>\n</S>\n<UNK>\n")
    for step, splitting in ((2, "whitespace"), (4, "tokenizer")):
        checkpoint = tmp_path / f"checkpoint-{step}"
        checkpoint.mkdir()
        for name in ("config.json", "vocab.txt"):
            (checkpoint / name).write_bytes((tmp_path / name).read_bytes())
        (checkpoint / "trainer_state.json").write_text(json.dumps({"data": {"word_splitting": splitting}}))
    assert evaluate.recorded_word_splitting(tmp_path) == (
        "tokenizer", "recorded in checkpoint-4: the folder's trainer_state.json is missing")


@pytest.mark.parametrize("recorded", ["0", "-3", "true", '"4"', "null", "2.0"])
def test_held_out_parts_that_are_no_count_of_parts_read_as_none_recorded(tmp_path, recorded):
    """evaluate.py's default --batch-size is the run's recorded parts: a value that is no whole number of at least 1
    is none (it was taken as the batch size, past the check that refuses a --batch-size below 1)."""
    (tmp_path / "eval_results.json").write_text(f'{{"parts": {recorded}}}')
    assert evaluate.recorded_parts(tmp_path) == (64, "the default: none recorded")
    (tmp_path / "eval_results.json").write_text('{"parts": 8}')
    assert evaluate.recorded_parts(tmp_path) == (8, "the run's own evaluation's, eval_results.json")


# evaluate.py --batch-size 100000 on a short text was killed for memory (a batch of 100000 rows, all but a few empty)
# and --unroll-steps 100000000 failed in NumPy (47.7 GiB of padding); a missing --file was said after the model loaded.
# The batch is the parts that hold text, a window at most the longest part, the figures those of the parts asked for.
def test_held_out_parts_past_the_text_and_windows_past_its_longest_part_are_not_read():
    torch.manual_seed(0)
    model = ElmoForPreTraining(tiny_config()).eval()
    text, table, vocabulary = fixture_text()
    stream = EvaluationStream(text, table, vocabulary, rows=1000, unroll_steps=10**8)
    longest = int((np.diff(text.offsets) + 1).max())
    assert (stream.parts, stream.rows, stream.unroll_steps, stream.num_windows) == (1000, text.num_sentences, longest, 1)
    results = evaluate.perplexity(model, stream, "cpu")
    summed = {"forward": 0.0, "backward": 0.0}  # (1000 parts of 144 targets: each sentence alone, from the zero state)
    for sentence in range(text.num_sentences):
        (forward_ids, forward_targets), (backward_ids, backward_targets) = (
            text.stream(np.array([sentence]), vocabulary, False), text.stream(np.array([sentence]), vocabulary, True))
        with torch.no_grad():
            output = model(**window_batch(table, forward_ids[None], forward_targets[None], backward_ids[None],
                                          backward_targets[None]))
        summed["forward"] += output.forward_loss.item() * len(forward_targets)
        summed["backward"] += output.backward_loss.item() * len(backward_targets)
    assert results["target_words"] == text.num_predictions and results["parts"] == 1000
    for direction in ("forward", "backward"):
        expected = math.exp(summed[direction] / text.num_predictions)
        assert results[f"{direction}_perplexity"] == pytest.approx(expected, rel=1e-5)


def test_evaluate_reads_a_batch_the_text_fills_and_says_a_missing_file_before_the_model(tmp_path, capsys):
    run = tmp_path / "run"
    code, _, err = run_main(capsys, *TRAIN_ARGS, "--max-steps", 0, "--save-steps", 0, "--output-dir", run)
    assert code == 0, err
    code = evaluate.main(["--model-dir", str(run), "--file", str(TRAIN / "data.txt"), "--batch-size", "100000",
                          "--unroll-steps", "100000000", "--output-json", str(tmp_path / "results.json")])
    out = capsys.readouterr().out
    assert code == 0 and "parts: the text fills 5 of the 100000, a batch of 5 rows" in out, out
    own = json.loads((run / "eval_results.json").read_text())  # (64 parts, 59 empty)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["parts"] == 100000 and own["parts"] == 64
    assert results["average_perplexity"] == pytest.approx(own["average_perplexity"], rel=1e-5)
    code = evaluate.main(["--model-dir", str(tmp_path / "no-such-model"), "--file", str(TRAIN / "data.txt"),
                          str(tmp_path / "missing.txt")])
    assert_one_error(code, capsys.readouterr().err, f"--file {tmp_path / 'missing.txt'}: no such file")
