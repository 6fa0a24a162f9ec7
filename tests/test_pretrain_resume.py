"""pretrain.py --resume beyond a crash: the vocabulary options of a resumed run, a finished run resumed, and a resume
with a larger --max-steps, whose learning-rate schedule goes on from the rate the run had; an output folder that is not
empty without --resume, and --init-from inside it."""

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch

from conftest import assert_one_error
from test_pretrain_options import snapshot
from test_pretraining import TRAIN, losses, read_log, run_main

TEXT = ["--preset", "tiny", "--train-file", TRAIN / "data.txt", "--logging-steps", 1, "--seed", 7]
# AdamW with a warm-up of 2 steps and a linear decay, checkpoints every 4 steps.
LINEAR = [*TEXT, "--vocab-file", TRAIN / "vocab.txt", "--optimizer", "adamw", "--learning-rate", 0.01,
          "--lr-scheduler", "linear", "--warmup-steps", 2, "--save-steps", 4]


def train(capsys, *arguments) -> str:
    code, out, err = run_main(capsys, *arguments)
    assert code == 0, err
    return out


def rates(folder: Path) -> dict[int, float]:
    return {record["step"]: record["learning_rate"] for record in read_log(folder) if "loss" in record}


def linear_rate(position: float, warmup: int = 2, steps: int = 10, peak: float = 0.01) -> float:
    """transformers' linear schedule with warm-up at a (possibly fractional) step."""
    return peak * position / warmup if position < warmup else peak * max(0.0, (steps - position) / (steps - warmup))


def test_vocabulary_options_of_a_resume_must_choose_the_checkpoints_vocabulary(tmp_path, capsys):
    """A resumed run predicts its checkpoint's vocabulary: --vocab-file, --vocab-size and --min-count (even
    --min-count 1, the default) were silently ignored there. Now a resume refuses those that would choose another
    vocabulary, naming them, and accepts those that choose the checkpoint's (`make pretrain-default` resumes with its
    --min-count 3)."""
    counts = Counter((TRAIN / "data.txt").read_text().split())
    assert len({sum(count >= least for count in counts.values()) for least in (1, 2, 3)}) == 3  # 3 vocabularies
    folder = tmp_path / "run"
    train(capsys, *TEXT, "--min-count", 3, "--max-steps", 4, "--save-steps", 2, "--output-dir", folder)
    checkpoint, before = folder / "checkpoint-2", snapshot(folder)
    started_with = (checkpoint / "vocab.txt").read_bytes()
    resume = [*TEXT, "--save-steps", 2, "--output-dir", folder, "--resume", "--max-steps"]
    for options, named in [(["--min-count", 2], "--min-count 2"), (["--min-count", 1], "--min-count 1"),
                           (["--vocab-size", 10, "--min-count", 3], "--vocab-size 10 and --min-count 3"),
                           (["--vocab-file", TRAIN / "vocab.txt"], f"--vocab-file {TRAIN / 'vocab.txt'}")]:
        code, _, err = run_main(capsys, *resume, 6, *options)
        assert_one_error(code, err, f"--resume {checkpoint}: {named} would choose another vocabulary than the one the run "
                                    f"was started with ({checkpoint / 'vocab.txt'}), which a resumed run keeps")
        assert snapshot(folder) == before
    # Options that choose the checkpoint's vocabulary are accepted, and none.
    out = train(capsys, *resume, 6, "--min-count", 3, "--vocab-size", 1000)
    assert f"resumed from {checkpoint} at step 2" in out
    out = train(capsys, *resume, 8)
    assert f"resumed from {folder / 'checkpoint-4'} at step 4" in out
    assert (folder / "vocab.txt").read_bytes() == started_with


def test_a_resume_refuses_another_warm_up_or_weight_decay_of_an_adamw_run(tmp_path, capsys):
    """The AdamW options of FIXED_ON_RESUME that the tiny Adagrad run of test_pretraining cannot change: refused,
    naming each (a resume that took them would go on as another run)."""
    folder = tmp_path / "run"
    command = [*LINEAR, "--max-steps", 6, "--output-dir", folder]
    train(capsys, *command)
    checkpoint = folder / "checkpoint-4"
    for options, named in [(["--warmup-steps", 1], "warmup_steps=2, now 1"),
                           (["--weight-decay", 0.05], "weight_decay=0.0, now 0.05")]:
        code, _, err = run_main(capsys, *command, "--max-steps", 8, "--resume", checkpoint, *options)
        assert_one_error(code, err, f"--resume {checkpoint}: the run was started with other options ({named})")


def test_a_finished_run_resumed_says_so_and_changes_nothing(tmp_path, capsys):
    """`--resume` of a run that has finished (the same command run again, e.g. `make ptb-cpu` twice) trained again from
    its last checkpoint and replaced the final model; with --save-steps 0 it trained again from the beginning. It now
    says that the run is finished and leaves the folder as it was; fewer --max-steps than the run has are refused (they
    would replace the final model with an earlier one); --resume PATH still continues from that checkpoint. A run with
    a time budget is finished when its time is spent."""
    for name, save_steps in [("checkpoints", 4), ("final-only", 0)]:
        folder = tmp_path / name
        command = [*LINEAR, "--max-steps", 6, "--save-steps", save_steps, "--output-dir", folder]
        train(capsys, *command)
        before = snapshot(folder)
        out = train(capsys, *command, "--resume")
        going_on = ("a larger --max-steps trains on, from its latest checkpoint" if save_steps else
                    "a larger --max-steps trains again from the beginning: no checkpoint is left")
        assert (f"{folder}: the run finished at step 6 (--max-steps 6): nothing to train; its final model is there "
                f"({going_on})") in out, name
        assert "resumed from" not in out and snapshot(folder) == before, name
        code, _, err = run_main(capsys, *command, "--max-steps", 5, "--resume")
        assert_one_error(code, err, f"{folder}: the run finished at step 6, past the 5 steps this command trains for")
        assert snapshot(folder) == before
    out = train(capsys, *LINEAR, "--max-steps", 6, "--output-dir", tmp_path / "checkpoints", "--resume",
                tmp_path / "checkpoints" / "checkpoint-4")
    assert f"resumed from {tmp_path / 'checkpoints' / 'checkpoint-4'} at step 4" in out
    # A run with a time budget is finished once its time is spent.
    timed = [*LINEAR, "--max-train-minutes", 0.01, "--output-dir", tmp_path / "timed"]
    train(capsys, *timed)
    before = snapshot(tmp_path / "timed")
    out = train(capsys, *timed, "--resume")
    assert ("(its 0.01 minutes of training spent): nothing to train; its final model is there (a run with a time "
            "budget ends with it: more minutes are another run, in another folder)") in out
    assert snapshot(tmp_path / "timed") == before
    # More steps go on from the latest checkpoint; a run that kept none trains again from the beginning, saying so.
    for name, start in [("checkpoints", f"from {tmp_path / 'checkpoints' / 'checkpoint-4'}, the latest checkpoint"),
                        ("final-only", "from the beginning: no checkpoint is left")]:
        folder = tmp_path / name
        out = train(capsys, *LINEAR, "--max-steps", 7, "--save-steps", 4 if name == "checkpoints" else 0,
                    "--output-dir", folder, "--resume")
        assert f"{folder}: the run finished at step 6; it goes on to step 7 {start}" in out, out
        assert json.loads((folder / "trainer_state.json").read_text())["step"] == 7


def test_a_finished_run_whose_latest_checkpoint_is_gone_goes_on_from_the_checkpoint_left(tmp_path, capsys):
    """The final trainer_state.json ends the run only where it follows the run's latest checkpoint: with that one
    deleted, a plain --resume goes on from the latest checkpoint there is."""
    folder = tmp_path / "run"
    command = [*LINEAR, "--max-steps", 5, "--save-steps", 2, "--output-dir", folder]
    train(capsys, *command)
    assert sorted(path.name for path in folder.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    shutil.rmtree(folder / "checkpoint-4")
    out = train(capsys, *command, "--resume")
    assert f"resumed from {folder / 'checkpoint-2'} at step 2" in out and "nothing to train" not in out
    assert json.loads((folder / "trainer_state.json").read_text())["step"] == 5


def test_a_longer_resume_goes_on_from_the_rate_it_had_and_ends_the_schedule_at_the_new_last_step(tmp_path, capsys):
    """A resume with a larger --max-steps rebuilt the linear schedule for the new length: at step 9 of a 10-step run
    resumed for 20 steps the rate jumped from a quarter of its peak back up to 0.61 of it. The rest of the schedule
    (from the checkpoint's step to the planned last one) is now spread over the steps left, as --max-train-minutes
    spreads it over the time left: the rate falls on from where it was to 0 at the new last step. The checkpoints
    record the schedule, so resuming the longer run again continues it exactly; a checkpoint of an older version
    (without the record) follows its own run's --max-steps, as then."""
    folder = tmp_path / "run"
    train(capsys, *LINEAR, "--max-steps", 10, "--output-dir", folder)
    planned = rates(folder)
    assert list(planned.values()) == pytest.approx([linear_rate(step) for step in range(1, 11)])
    older = shutil.copytree(folder, tmp_path / "older")

    out = train(capsys, *LINEAR, "--max-steps", 20, "--output-dir", folder, "--resume")
    assert f"resumed from {folder / 'checkpoint-8'} at step 8" in out
    longer = rates(folder)
    assert sorted(longer) == list(range(1, 21))
    assert [longer[step] for step in range(1, 9)] == [planned[step] for step in range(1, 9)]
    # Steps 8 to 20 run the course that steps 8 to 10 had left.
    assert [longer[step] for step in range(9, 21)] == pytest.approx(
        [linear_rate(8 + (step - 8) * 2 / 12) for step in range(9, 21)], rel=1e-9)
    assert longer[9] < longer[8] and longer[20] == 0.0

    again = shutil.copytree(folder, tmp_path / "again")
    train(capsys, *LINEAR, "--max-steps", 20, "--output-dir", again, "--resume", again / "checkpoint-12")
    assert rates(again) == longer and losses(again) == pytest.approx(losses(folder), abs=1e-6)
    # Longer still: from step 16 (the latest checkpoint), the rest of that course over steps 16 to 30.
    train(capsys, *LINEAR, "--max-steps", 30, "--output-dir", folder, "--resume")
    longest = rates(folder)
    at_16 = 8 + 8 * 2 / 12
    assert [longest[step] for step in range(17, 31)] == pytest.approx(
        [linear_rate(at_16 + (step - 16) * (10 - at_16) / 14) for step in range(17, 31)], rel=1e-9)

    # An older checkpoint's schedule: its run's own --max-steps (10) planned it.
    state_file = older / "checkpoint-8" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    del state["schedule"]
    state_file.write_text(json.dumps(state))
    train(capsys, *LINEAR, "--max-steps", 20, "--output-dir", older, "--resume", state_file.parent)
    assert rates(older) == pytest.approx(longer, rel=1e-12)


def test_a_checkpoint_of_a_recorded_run_resumes_on_the_cpu(tmp_path, capsys):
    """A run whose steps were recorded as a CUDA graph (modeling/graphed_step.py) saves AdamW with a tensor learning
    rate and `capturable`: resumed on a CPU, it goes on as the run that was not interrupted (the same learning rates,
    logged as numbers)."""
    import torch

    folder = tmp_path / "run"
    train(capsys, *LINEAR, "--max-steps", 6, "--output-dir", folder)
    optimizer_file = folder / "checkpoint-4" / "optimizer.bin"
    state = torch.load(optimizer_file, weights_only=True)
    for group in state["param_groups"]:  # as a recorded run's checkpoint holds it
        group["lr"], group["capturable"] = torch.tensor(float(group["lr"])), True
    torch.save(state, optimizer_file)
    trainer_state_file = folder / "checkpoint-4" / "trainer_state.json"
    trainer_state = json.loads(trainer_state_file.read_text())
    trainer_state["files"]["optimizer.bin"] = None  # (its recorded digest is the saved file's)
    trainer_state_file.write_text(json.dumps(trainer_state))
    (folder / "model.safetensors").unlink()  # (the final model: the run resumes from checkpoint-4)
    (folder / "trainer_state.json").unlink()
    uninterrupted = rates(folder)
    out = train(capsys, *LINEAR, "--max-steps", 6, "--output-dir", folder, "--resume")
    assert f"resumed from {folder / 'checkpoint-4'} at step 4" in out
    assert rates(folder)[6] == pytest.approx(uninterrupted[6])


class _Crash(Exception):
    """A crash of the run, raised where a kill would stop it."""


def test_a_rewound_run_that_crashes_resumes_as_the_run_it_replaces(tmp_path, capsys, monkeypatch):
    """`--resume PATH` from before the latest checkpoint, crashed before its next save: the same command with a plain
    `--resume` said the run had finished (the earlier end's record was still there) while the log had lost the steps
    after PATH; crashed after its next save, it would have gone on from the abandoned course's later checkpoints. The
    rewound run now removes those at its start, saying so; resumed after the crash, it ends as the uninterrupted run."""
    command = [*LINEAR, "--max-steps", 10, "--save-steps", 2, "--save-total-limit", 0]
    train(capsys, *command, "--output-dir", tmp_path / "uninterrupted")
    folder = shutil.copytree(tmp_path / "uninterrupted", tmp_path / "run")

    crash_before_saving(monkeypatch, 6, *command, "--output-dir", folder, "--resume", folder / "checkpoint-4")
    out = capsys.readouterr().out
    assert f"--resume {folder / 'checkpoint-4'}: this run replaces what followed step 4: removing checkpoint-6, " \
           "checkpoint-8" in out
    assert sorted(path.name for path in folder.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]

    out = train(capsys, *command, "--output-dir", folder, "--resume")
    assert f"resumed from {folder / 'checkpoint-4'} at step 4" in out
    assert_same_run(folder, tmp_path / "uninterrupted", steps=10)


def test_a_checkpoint_of_another_folder_continues_into_a_folder_without_checkpoints(tmp_path, capsys):
    """`--resume PATH`, PATH in another run's folder: into an output folder that holds checkpoints it is refused, the
    folder left as it was (the two runs' checkpoints would mix, and a later plain `--resume` pick up the latest of
    either), saying how to go on; into a new folder it ends as the uninterrupted run, the log beginning with PATH's
    run's to its step."""
    command = [*LINEAR, "--max-steps", 10, "--save-steps", 2, "--save-total-limit", 0]
    uninterrupted = tmp_path / "uninterrupted"
    train(capsys, *command, "--output-dir", uninterrupted)
    other = shutil.copytree(uninterrupted, tmp_path / "other")
    before = snapshot(other)
    code, _, err = run_main(capsys, *command, "--output-dir", other, "--resume", uninterrupted / "checkpoint-4")
    assert_one_error(code, err, f"--resume {uninterrupted / 'checkpoint-4'}: {other} already holds checkpoints "
                     "(checkpoint-2, checkpoint-4, checkpoint-6, checkpoint-8), with which this run's would mix: to go on "
                     f"from its latest, pass --resume alone; to continue from {uninterrupted / 'checkpoint-4'} instead, "
                     "choose an --output-dir without checkpoints")
    assert snapshot(other) == before

    out = train(capsys, *command, "--output-dir", tmp_path / "new", "--resume", uninterrupted / "checkpoint-4")
    assert f"resumed from {uninterrupted / 'checkpoint-4'} at step 4" in out
    assert_same_run(tmp_path / "new", uninterrupted, steps=10)
    copied = [record for record in read_log(uninterrupted) if record["step"] <= 4]
    assert read_log(tmp_path / "new")[:len(copied)] == copied


def test_a_continued_run_that_crashes_leaves_the_run_it_continued_resumable(tmp_path, capsys, monkeypatch):
    """A finished run continued with more steps and crashed before its next save: the finished run's record was
    still there, so the plain `--resume` with the first length said the run had finished, its log holding the
    continuation's steps. The continuation now removes the record as it starts: that resume goes on from the latest
    checkpoint and ends as the first run did."""
    command = [*LINEAR, "--save-total-limit", 0]
    train(capsys, *command, "--max-steps", 10, "--output-dir", tmp_path / "first")
    folder = shutil.copytree(tmp_path / "first", tmp_path / "run")
    crash_before_saving(monkeypatch, 12, *command, "--max-steps", 16, "--output-dir", folder, "--resume")
    out = train(capsys, *command, "--max-steps", 10, "--output-dir", folder, "--resume")
    assert f"resumed from {folder / 'checkpoint-8'} at step 8" in out
    assert_same_run(folder, tmp_path / "first", steps=10)


def test_a_resume_that_ends_at_its_checkpoint_keeps_the_evaluation_logged_there(tmp_path, capsys):
    """A run stopped after checkpoint-8 and resumed with --max-steps 8 ends at once: step 8 was evaluated before the
    save, and that record is the run's result (a second evaluation logged step 8 twice, and a later resume to 12 kept
    both, where the uninterrupted run has one)."""
    command = [*LINEAR, "--validation-file", TRAIN / "data.txt", "--eval-steps", 4]
    train(capsys, *command, "--max-steps", 12, "--output-dir", tmp_path / "first")
    folder = shutil.copytree(tmp_path / "first", tmp_path / "run")
    (folder / "trainer_state.json").unlink()  # (as a run killed after checkpoint-8 leaves its folder)
    train(capsys, *command, "--max-steps", 8, "--output-dir", folder, "--resume")
    evaluations = [record for record in read_log(folder) if "eval_average_perplexity" in record]
    assert [record["step"] for record in evaluations] == [4, 8]
    results = json.loads((folder / "eval_results.json").read_text())
    assert {f"eval_{name}": value for name, value in results.items()} == {
        name: value for name, value in evaluations[-1].items() if name != "step"}
    train(capsys, *command, "--max-steps", 12, "--output-dir", folder, "--resume")
    untimed = [[{k: v for k, v in record.items() if k != "words_per_second"} for record in read_log(run)]
               for run in (folder, tmp_path / "first")]
    assert untimed[0] == untimed[1]
    assert [r["step"] for r in read_log(folder) if "eval_average_perplexity" in r] == [4, 8, 12]


def crash_before_saving(monkeypatch, step: int, *arguments) -> None:
    """pretrain.py with ARGUMENTS, crashed (`_Crash`) where it would save the checkpoint of `step`."""
    from modeling import pretrain

    save = pretrain.save_checkpoint

    def crash(accelerator, model, output_dir, at_step, *rest, **options):
        if at_step == step:
            raise _Crash
        return save(accelerator, model, output_dir, at_step, *rest, **options)

    monkeypatch.setattr(pretrain, "save_checkpoint", crash)
    try:
        with pytest.raises(_Crash):
            pretrain.main([str(argument) for argument in arguments])
    finally:
        monkeypatch.setattr(pretrain, "save_checkpoint", save)


def assert_same_run(folder: Path, uninterrupted: Path, steps: int) -> None:
    """The losses of every step 1..`steps` and the final weights of the uninterrupted run (within 1e-6)."""
    from safetensors.torch import load_file

    assert sorted(losses(folder)) == list(range(1, steps + 1))
    assert losses(folder) == pytest.approx(losses(uninterrupted), abs=1e-6)
    weights, expected = load_file(folder / "model.safetensors"), load_file(uninterrupted / "model.safetensors")
    assert weights.keys() == expected.keys()
    assert all(torch.allclose(weights[name], expected[name], atol=1e-6) for name in expected)


def test_epochs_below_the_checkpoints_step_are_refused_and_a_longer_cosine_schedule_ends_at_0(tmp_path, capsys):
    """The README's two promises beside --max-steps': `--epochs` too short for the checkpoint is refused, naming it;
    a cosine schedule, like the linear one, goes on to 0 at the new last step."""
    folder = tmp_path / "run"
    cosine = [*LINEAR, "--lr-scheduler", "cosine", "--output-dir", folder]
    train(capsys, *cosine, "--max-steps", 10)
    code, _, err = run_main(capsys, *cosine, "--epochs", 1, "--resume")
    assert_one_error(code, err, f"--resume {folder / 'checkpoint-8'}: that run is at step 8, past the")
    out = train(capsys, *cosine, "--max-steps", 16, "--resume")
    assert f"resumed from {folder / 'checkpoint-8'} at step 8" in out
    longer = rates(folder)
    assert sorted(longer) == list(range(1, 17)) and longer[16] == pytest.approx(0.0, abs=1e-12)
    assert all(longer[step + 1] < longer[step] for step in range(8, 15))


def test_a_refused_resume_names_a_max_steps_that_goes_on(tmp_path, capsys):
    """A run extended from 3 to 5 steps (checkpoints 3 and 4 kept, then its final model at 5): --resume with
    --max-steps 2 names the least --max-steps that goes on, 5, where the run finished (it named 4, its latest
    checkpoint's step, which was refused in its turn)."""
    run = ["--preset", "tiny", "--output-dir", tmp_path / "run", "--save-steps", "1", "--train-file", TRAIN / "data.txt"]
    assert run_main(capsys, *run, "--max-steps", "3")[0] == 0
    assert run_main(capsys, *run, "--max-steps", "5", "--resume")[0] == 0
    code, _, err = run_main(capsys, *run, "--max-steps", "2", "--resume")
    assert_one_error(code, err, "pass --max-steps 5 or more")
    code, out, err = run_main(capsys, *run, "--max-steps", "5", "--resume")
    assert code == 0, err


def test_an_output_folder_that_is_not_empty_is_replaced_only_when_asked(tmp_path, capsys):
    """Without --resume, an OUTPUT_DIR that holds anything (a folder of one's own files; a finished run saved without
    checkpoints) is refused, left as it was, unless --overwrite-output-dir is given (both were replaced silently:
    only checkpoints were looked for)."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text('{"mine": 1}')
    run = ["--preset", "tiny", "--max-steps", "1", "--train-file", TRAIN / "data.txt"]
    code, _, err = run_main(capsys, *run, "--output-dir", mine)
    assert_one_error(code, err, f"{mine} is not empty (config.json): pass --overwrite-output-dir")
    assert snapshot(mine) == {"config.json": b'{"mine": 1}'}
    finished = tmp_path / "finished"
    assert run_main(capsys, *run, "--output-dir", finished, "--save-steps", "0")[0] == 0
    before = snapshot(finished)
    code, _, err = run_main(capsys, *run, "--output-dir", finished, "--save-steps", "0")
    assert_one_error(code, err, f"{finished} is not empty", "pass --overwrite-output-dir")
    assert snapshot(finished) == before
    assert run_main(capsys, *run, "--output-dir", mine, "--overwrite-output-dir")[0] == 0
    assert json.loads((mine / "config.json").read_text())["model_type"] == "elmo"


def test_init_from_inside_the_output_folder_is_refused(converted, tmp_path, capsys):
    """The run's final model would replace the model it starts from: refused before anything is written, with
    --overwrite-output-dir too, for the folder itself and for one inside it."""
    model = shutil.copytree(converted["allennlp-elmo"], tmp_path / "elmo" / "model")
    before = snapshot(tmp_path / "elmo")
    for output_dir in (model, tmp_path / "elmo"):
        code, _, err = run_main(capsys, "--init-from", model, "--output-dir", output_dir, "--overwrite-output-dir",
                                "--max-steps", "1", "--batch-size", "2", "--unroll-steps", "5",
                                "--train-file", TRAIN / "data.txt")
        assert_one_error(code, err, f"--init-from {model} is inside --output-dir {output_dir}",
                         "write to another folder")
    assert snapshot(tmp_path / "elmo") == before


def test_ctrl_c_is_one_line_and_resume_goes_on(tmp_path, capsys, monkeypatch):
    """Ctrl-C (KeyboardInterrupt) in the third step: one line saying what is kept and what to do, exit code 130, not
    a traceback from inside the step; --resume then goes on from the checkpoint of step 2 and ends the run."""
    from hf_elmo import ElmoForPreTraining

    forward, calls = ElmoForPreTraining.forward, []

    def interrupted(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return forward(self, *args, **kwargs)

    run = ["--preset", "tiny", "--output-dir", tmp_path / "run", "--save-steps", "1", "--max-steps", "4",
           "--train-file", TRAIN / "data.txt"]
    with monkeypatch.context() as patch:
        patch.setattr(ElmoForPreTraining, "forward", interrupted)
        code, _, err = run_main(capsys, *run)
    assert code == 130 and "Traceback" not in err, err
    assert err.splitlines()[-1] == (f"interrupted: the checkpoints saved in {tmp_path / 'run'} are kept; the same "
                                    "command with --resume goes on from the latest")
    code, out, err = run_main(capsys, *run, "--resume")
    assert code == 0 and f"resumed from {tmp_path / 'run' / 'checkpoint-2'} at step 2" in out + err, out + err
    assert json.loads((tmp_path / "run" / "trainer_state.json").read_text())["step"] == 4
