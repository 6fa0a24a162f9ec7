"""gpu_bench.py's arithmetic and judgements on made-up measurements (no GPU): words/s of a batch, the figures each
target reads and its met/missed, the table's columns, the exact-vs-CPU check."""

import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_bench  # noqa: E402


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self, device=None):
        return self.now


class FakeModel:
    """Each call takes the next of `durations` seconds on the fake clock."""

    def __init__(self, clock, durations):
        self.clock, self.durations, self.calls, self.cleared, self.cleared_before = clock, list(durations), 0, 0, []

    def clear_caches(self):
        self.cleared += 1

    def __call__(self, **kwargs):
        self.cleared_before.append(self.cleared)
        self.clock.now += self.durations[self.calls]
        self.calls += 1


def test_words_per_second_is_the_words_over_the_median_of_the_timed_runs_after_one_untimed(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(gpu_bench, "synchronized", clock)
    model = FakeModel(clock, [100.0, 1.0, 2.0, 9.0])  # (the first: the graphs' capture, left out)
    rate = gpu_bench.words_per_second(model, {}, 600, "cpu", runs=3, cold=False)
    assert model.calls == 4 and rate == pytest.approx(600 / 2.0)  # (the median of 1, 2, 9; their mean is 4)
    assert model.cleared == 0  # (warm: the caches kept)


def test_cold_words_per_second_empties_the_caches_before_every_call(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(gpu_bench, "synchronized", clock)
    model = FakeModel(clock, [5.0, 4.0, 2.0])
    assert gpu_bench.words_per_second(model, {}, 30, "cpu", runs=2, cold=True) == pytest.approx(30 / 3.0)
    assert model.cleared_before == [1, 2, 3]


def report_of(monkeypatch, tmp_path, measured_figures, embed_ratio=None):
    def fake_speed_table(device, args, failures, measured, lines, measured_row):
        measured.update(measured_figures)
        measured_row()

    monkeypatch.setattr(gpu_bench, "speed_table", fake_speed_table)
    monkeypatch.setattr(gpu_bench, "embed_end_to_end", lambda device, batch, count: (["- embed"], embed_ratio))
    monkeypatch.setattr(gpu_bench, "cuda_tests", lambda failures: ["- cuda tests"])
    monkeypatch.setattr(gpu_bench, "embed_against_cpu", lambda failures: ["- embed against cpu"])
    output = tmp_path / "GPU_RESULTS.md"
    monkeypatch.setattr(sys, "argv", ["gpu_bench.py", "--device", "cpu", "--output", str(output)]
                        + ([] if embed_ratio is not None else ["--no-checks"]))
    assert gpu_bench.main() == 0
    # (the host CPU named: embed end to end and the GPU-against-CPU figures depend on it)
    assert f"GPU benchmark on cpu (host CPU: {gpu_bench.cpu_name()}), torch " in output.read_text()
    rows = [line for line in output.read_text().splitlines() if line.startswith("| ") and " | " in line]
    return {row.split(" | ")[0].lstrip("| "): (row.split(" | ")[1], row.split(" | ")[2].rstrip(" |")) for row in rows}


def test_each_target_is_met_from_its_goal_up_and_reads_its_own_figure(monkeypatch, tmp_path):
    targets = report_of(monkeypatch, tmp_path, {
        ("original", "exact", 32): 50_000.0,  # (at the goal: met)
        ("original", "exact", 256): 249_999.0,  # (just under: missed)
        ("original", "bf16", 32): 99_000.0,
        ("original", "bf16", 256): 500_001.0,
        ("original", "cpu"): 2e-6, ("original", "rounding"): (3e-6, 2e-6),  # (at the limit: met)
        ("small", "cpu"): 3e-6, ("small", "rounding"): (3e-6, 2e-6)}, embed_ratio=0.9)  # (over it: missed)
    def found(*words):
        (value,) = [v for key, v in targets.items() if all(w in key for w in words)]
        return value

    assert found("original, exact", " 32 sentences") == ("50,000", "yes")
    assert found("original, exact", " 256 sentences") == ("249,999", "**no**")
    assert found("original, bf16", " 32 sentences") == ("99,000", "**no**")
    assert found("original, bf16", " 256 sentences") == ("500,001", "yes")
    assert found("original: exact GPU") == ("2e-06 (from float64: GPU 3e-06, CPU 2e-06)", "yes")
    assert found("small: exact GPU") == ("3e-06 (from float64: GPU 3e-06, CPU 2e-06)", "**no**")
    assert found("`hf-elmo embed` end to end") == ("90%", "yes")


def test_embed_end_to_end_below_nine_tenths_of_the_model_is_missed(monkeypatch, tmp_path):
    targets = report_of(monkeypatch, tmp_path, {}, embed_ratio=0.85)
    assert targets["`hf-elmo embed` end to end within 10% of the model's words/s"] == ("85%", "**no**")


@pytest.fixture
def speed_rows(monkeypatch):
    """speed_table on the CPU (the Small size, batches of 2 and 3), words/s made up per mode and warm/cold."""
    def fake_words_per_second(model, batch, words, device, runs, cold):
        mode = model._bilstm_layers()[0].approximation
        return {(None, False): 2000.0, (None, True): 1000.0, ("bf16", False): 3000.0, ("nn_lstm", False): 4000.0}[
            (mode, cold)]

    monkeypatch.setattr(gpu_bench, "words_per_second", fake_words_per_second)
    monkeypatch.setattr(gpu_bench, "approximation_deviation", lambda model, batch, mode: [0.5, 0.25, 0.125])

    def run(differences):
        calls = iter(differences)  # (GPU - CPU, GPU - float64, CPU - float64)
        monkeypatch.setattr(gpu_bench, "largest_difference", lambda first, second: next(calls))
        args = type("Args", (), {"sizes": "small", "batch_sizes": [3, 2], "runs": 1})()
        failures, measured, lines = [], {}, []
        gpu_bench.speed_table(gpu_bench.torch.device("cpu"), args, failures, measured, lines, lambda: None)
        return failures, measured, lines
    return run


def test_the_speed_table_puts_each_run_in_its_column_and_the_warm_figures_in_the_targets(speed_rows):
    failures, measured, lines = speed_rows([[1e-7, 2e-7, 3e-7], [2e-6], [1e-6]])
    assert measured[("small", "exact", 2)] == measured[("small", "exact", 3)] == 2000.0  # (warm, not cold)
    assert measured[("small", "bf16", 2)] == 3000.0
    rows = {line.split(" | ")[1]: line.split(" | ") for line in lines[2:]}
    assert rows["3"][2:6] == rows["2"][2:6] == ["2000", "1000", "3000", "4000"]
    # (against the CPU: the smallest batch only)
    assert rows["2"][8].startswith("1e-07, 2e-07, 3e-07 (from float64: GPU 2e-06; CPU 1e-06)")
    assert rows["3"][8].strip() == "|" and measured[("small", "cpu")] == 3e-7
    assert failures == []


@pytest.mark.parametrize("gpu_rounding, fails", [(3e-6, False), (3.1e-6, True)])
def test_exact_gpu_outputs_further_from_float64_than_twice_the_cpu_fail(speed_rows, gpu_rounding, fails):
    failures = speed_rows([[1e-7], [gpu_rounding], [1e-6]])[0]
    assert bool(failures) == fails, failures


def test_embed_end_to_end_ratio_is_embeds_words_per_second_over_the_models(monkeypatch):
    """On the CPU with a tiny model (in place of the original size) and embed made slower than the model by a
    pause: the ratio the target reads is embed's words/s over the model's, as the line says."""
    import re
    import time

    from hf_elmo import ElmoConfig

    monkeypatch.setattr(gpu_bench, "ElmoConfig", lambda: ElmoConfig(
        char_embedding_dim=4, char_cnn_filters=((1, 4), (2, 8)), num_highway_layers=1, cell_size=32, projection_dim=16))

    class SlowEmbedder(gpu_bench.ElmoEmbedder):
        def embed_file(self, *arguments, **keywords):
            time.sleep(1.0)
            return super().embed_file(*arguments, **keywords)

    monkeypatch.setattr(gpu_bench, "ElmoEmbedder", SlowEmbedder)
    lines, ratio = gpu_bench.embed_end_to_end(gpu_bench.torch.device("cpu"), 4, 6)
    embed, percent, model = re.search(r"`--top`\): (\d+) words/s, (\d+)% of the model's own (\d+) words/s", lines[0]).groups()
    embed, model = int(embed), int(model)  # (each printed to the unit)
    assert ratio < 0.9 and (embed - 0.5) / (model + 0.5) <= ratio <= (embed + 0.5) / (model - 0.5), lines
    assert abs(int(percent) - ratio * 100) <= 0.5 + 1e-9


def test_a_parts_command_gets_at_most_what_is_left_of_the_scripts_time_less_twenty_seconds(monkeypatch):
    import subprocess

    given = []
    monkeypatch.setattr(gpu_bench.subprocess, "run", lambda command, **keywords: given.append(keywords["timeout"])
                        or subprocess.CompletedProcess(command, 0, "", ""))
    monkeypatch.setenv("GPU_SCRIPT_SECONDS", "150")
    monkeypatch.setattr(gpu_bench, "STARTED", gpu_bench.time.monotonic() - 100)
    gpu_bench.run(["true"], timeout=120)
    gpu_bench.run(["true"], timeout=10)
    monkeypatch.setattr(gpu_bench, "STARTED", gpu_bench.time.monotonic() - 200)
    gpu_bench.run(["true"], timeout=120)  # (past the limit: one second, to fail as itself)
    assert given[0] == pytest.approx(30, abs=1) and given[1] == 10 and given[2] == 1.0


@pytest.mark.parametrize("cuda_offset, failed", [(2e-5, True), (1e-6, False)])
def test_embed_on_cuda_fails_the_run_where_its_output_is_not_the_cpus(monkeypatch, cuda_offset, failed):
    """`hf-elmo embed --device cuda` must give the CPU's numbers within 5e-6 (two float32 outputs, each about 2e-6
    from float64): further, the run's verdict says so. The commands are faked here; their files are written."""
    import subprocess

    import h5py
    import numpy as np

    def fake_run(command, timeout):
        output, device = command[5], command[-1]
        with h5py.File(output, "w") as file:
            for key in ("0", "1", "2"):
                file[key] = np.zeros((3, 4), np.float32) + (cuda_offset if device == "cuda" else 0.0)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(gpu_bench, "run", fake_run)
    failures = []
    lines = gpu_bench.embed_against_cpu(failures)
    assert f"largest difference from the CPU output {np.float32(cuda_offset):.2g}" in lines[0]
    assert failures == ([f"hf-elmo embed: CUDA output {np.float32(cuda_offset):.2g} from the CPU's"] if failed else [])


def test_tests_on_cuda_that_fail_fail_the_run(monkeypatch, tmp_path):
    import subprocess

    (tmp_path / "shared" / "fixtures").mkdir(parents=True)  # (the tests run only beside the fixtures)
    monkeypatch.setattr(gpu_bench, "ROOT", tmp_path / "main")
    monkeypatch.setattr(gpu_bench, "run", lambda command, timeout: subprocess.CompletedProcess(
        command, 1, "1 failed, 9 passed in 3s\n", ""))
    failures = []
    lines = gpu_bench.cuda_tests(failures)
    assert failures == ["tests on CUDA failed"] and "1 failed, 9 passed" in lines[0] and "exit status 1" in lines[0]
