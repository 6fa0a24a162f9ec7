"""gpu_train_bench.py's figures from made-up measurements (no GPU): pretrain.py's words/s from its log (the first
two logged rates left out, the median of the rest), bf16's loss drift from float32 and the targets' met/missed, and
the training step's words/s over the timed steps."""

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_train_bench  # noqa: E402


def test_pretrain_takes_the_median_words_per_second_of_the_log_after_its_first_two_records(monkeypatch):
    records = [{"step": 10, "loss": 6.0, "words_per_second": 1.0}, {"step": 20, "loss": 5.5, "words_per_second": 2.0},
               {"step": 30, "loss": 5.0, "words_per_second": 100.0}, {"step": 40, "loss": 4.5, "words_per_second": 200.0},
               {"step": 50, "loss": 4.0, "words_per_second": 300.0}, {"step": 60, "loss": 3.5, "words_per_second": 1000.0},
               {"step": 60, "eval_loss": 3.9}]  # (a record without words/s: not a rate)

    def fake_run(command, timeout):
        folder = Path(command[command.index("--output-dir") + 1])
        (folder / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(gpu_train_bench, "run", fake_run)
    result = gpu_train_bench.pretrain("tiny", 60, "bf16", timeout=10)
    assert result["words_per_second"] == 250.0  # (median of 100, 200, 300, 1000; their mean is 400)
    assert result["losses"] == {10: 6.0, 20: 5.5, 30: 5.0, 40: 4.5, 50: 4.0, 60: 3.5}


def speed_lines(monkeypatch, ptb_bf16: float, original_bf16: float) -> list[str]:
    figures = {("ptb-gpu", "bf16"): {"words_per_second": ptb_bf16, "losses": {10: 5.0, 20: 4.0, 30: 3.5}},
               ("ptb-gpu", "no"): {"words_per_second": 10.0, "losses": {10: 5.1, 20: 4.3, 30: 3.45, 40: 3.0}},
               ("original", "bf16"): {"words_per_second": original_bf16, "losses": {}}}
    monkeypatch.setattr(gpu_train_bench, "SMOKE", False)
    monkeypatch.setattr(gpu_train_bench, "pretrain", lambda preset, steps, precision, timeout: figures[(preset, precision)])
    return gpu_train_bench.pretrain_speed()


def test_bf16_drift_is_the_largest_loss_difference_over_the_common_steps_and_targets_are_met_from_the_goal(monkeypatch):
    ptb, original = speed_lines(monkeypatch, 60_000.0, 25_000.0)
    assert "bf16 60,000 words/s (target 60,000: met); float32 with TF32 off 10 words/s" in ptb, ptb
    assert "largest difference 0.3000; at step 30 3.5000 against 3.4500" in ptb, ptb
    assert "bf16 25,000 words/s (target 25,000: met)" in original, original


def test_training_targets_below_their_goal_are_not_met(monkeypatch):
    ptb, original = speed_lines(monkeypatch, 59_999.0, 24_999.0)
    assert "(target 60,000: NOT met)" in ptb and "(target 25,000: NOT met)" in original


def test_the_training_steps_words_per_second_counts_the_steps_timed(monkeypatch):
    """SMOKE: 6 steps, steps 3-6 timed (4 steps of 1 s each, 100 words a step): 100 words/s, in every case."""
    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(gpu_train_bench, "time", types.SimpleNamespace(perf_counter=lambda: clock.now))
    monkeypatch.setattr(gpu_train_bench, "SMOKE", True)
    monkeypatch.setattr(gpu_train_bench, "DEVICE", "cpu")

    class Template(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(1))

        def set_fast_path(self, fast):
            pass

    batches = types.SimpleNamespace(batch=lambda step: {})
    monkeypatch.setattr(gpu_train_bench, "preset_model", lambda name, negatives: (Template(), batches, 100))

    def one_second(*arguments):
        clock.now += 1.0
        return None

    class Graphed:
        failure = None

        def __init__(self, *arguments, **keywords):
            pass

        def step(self, batch, states):
            return None, None, one_second()

    import modeling.graphed_step
    monkeypatch.setattr(modeling.graphed_step, "GraphedTrainingStep", Graphed)
    monkeypatch.setattr(gpu_train_bench, "usual_step", one_second)
    (line,) = gpu_train_bench.step_speed()
    assert "steps 3-6 timed as a run" in line, line
    assert line.count(": 100 words/s") == 4, line


def test_relative_error_is_relative_to_the_reference():
    assert gpu_train_bench.relative_error(torch.tensor([3.0, 0.0]), torch.tensor([1.0, 0.0])) == pytest.approx(2.0)


@pytest.mark.parametrize("verdict, status", [("PASS", 0), ("FAIL", 1), ("raises", 1)])
def test_the_exit_status_says_whether_a_check_failed(verdict, status, tmp_path, monkeypatch, capsys):
    """As gpu_bench.py: exit status 1 where a check reports FAIL or a part raises (gpu.sh's status collects it; the
    script returned 0 whatever its checks found), 0 where every check passes."""
    def check(*args):
        if verdict == "raises":
            raise RuntimeError("a part that fails")
        return f"{verdict}: a check"

    monkeypatch.setattr(gpu_train_bench, "layer_check", check)
    monkeypatch.setattr(gpu_train_bench, "model_check", lambda: "PASS: the model")
    monkeypatch.setattr(sys, "argv", ["gpu_train_bench.py", "--device", "cpu", "--smoke", "--train-file",
                                      str(tmp_path / "none.txt")])
    for name in ("DEVICE", "SMOKE", "TRAIN_TEXT"):  # (main sets them, TF32 and the datasets cache: put back afterwards)
        monkeypatch.setattr(gpu_train_bench, name, getattr(gpu_train_bench, name))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        assert gpu_train_bench.main() == status
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    assert f"- {verdict if verdict != 'raises' else 'FAIL'}:" in capsys.readouterr().out


def test_a_section_that_fails_to_be_written_leaves_the_results_file_whole(tmp_path):
    """write_section replaces the file in one step: a section that cannot be written (here a lone surrogate, as an
    undecodable byte of a traceback gives) leaves the file as it was, not cut short."""
    results = tmp_path / "GPU_RESULTS.md"
    results.write_text("# GPU\n\n## Training\n\n- an earlier run, whole\n", encoding="utf-8")
    with pytest.raises(UnicodeEncodeError):
        gpu_train_bench.write_section(results, "\n## Training\n\n- " + "x" * 100_000 + " \udc80\n")
    assert results.read_text(encoding="utf-8") == "# GPU\n\n## Training\n\n- an earlier run, whole\n"
    assert [path.name for path in tmp_path.iterdir()] == ["GPU_RESULTS.md"]


@pytest.mark.parametrize("returncode, output, verdict", [
    (1, "FAILED tests/x.py::t - boom\n1 failed, 3 passed\n", "FAIL"),
    (4, "ERROR: file or directory not found: tests/x.py\n", "FAIL"),  # (no test ran: no "failed" to read)
    (0, "4 passed\n", "PASS"),
])
def test_the_tests_on_cuda_give_the_verdict_their_exit_status_gives(monkeypatch, returncode, output, verdict):
    monkeypatch.setattr(gpu_train_bench, "run", lambda command, timeout: subprocess.CompletedProcess(
        command, returncode, output, ""))
    assert gpu_train_bench.pytest_on_cuda().startswith(f"{verdict}: `pytest -k cuda tests/test_fused_training.py")
