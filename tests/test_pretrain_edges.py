"""pretrain.py and evaluate.py behaviour that mutations of the programs showed no other test held: which folders are
checkpoints, the order the final files are moved in, fractional epochs, a finished run resumed on other text, a resume
inside the warm-up, options fixed on resume, what is logged and recorded, a new softmax's scale, and evaluate.py's
checkpoint choice and its --output-json check."""

import json
import math
import os
from pathlib import Path

import pytest
from safetensors.torch import load_file

from conftest import assert_one_error
from test_pretrain_options import snapshot, tiny_model  # noqa: F401  (tiny_model: the fixture)
from test_pretrain_resume import LINEAR, linear_rate, rates, train
from test_pretraining import (TRAIN, TRAIN_ARGS, datasets_cache, losses, read_log, run_main,  # noqa: F401
                              run_pretrain)

from modeling import evaluate, pretrain
from modeling.checkpoints import list_checkpoints


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


def test_a_resume_with_freeze_body_is_refused(tmp_path, capsys):
    folder = tmp_path / "run"
    code, _, err = run_main(capsys, *RUN, "--output-dir", folder)
    assert code == 0, err
    before = snapshot(folder)
    code, _, err = run_main(capsys, *RUN, "--freeze-body", "--output-dir", folder, "--resume", folder / "checkpoint-2")
    assert_one_error(code, err, f"--resume {folder / 'checkpoint-2'}: the run was started with other options "
                                "(freeze_body=False, now True)")
    assert snapshot(folder) == before


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
