"""The GPU benchmark scripts run on CPU too (`--device cpu`), so that code which only a lent GPU would otherwise run
is exercised here: benchmarks/gpu_train_bench.py's smoke run checks the fused training path and writes only where
it is told to."""

import subprocess
import sys

from conftest import REPO

GPU_TRAIN_BENCH = REPO / "benchmarks" / "gpu_train_bench.py"
GPU_RESULTS = REPO / "benchmarks" / "GPU_RESULTS.md"


def smoke_run(*args: str) -> str:
    result = subprocess.run([sys.executable, GPU_TRAIN_BENCH, "--device", "cpu", "--smoke", *args], cwd=REPO,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_gpu_training_benchmark_smoke_run_writes_no_results_unless_told(tmp_path):
    """Its figures only check the script: by default they go to the screen alone, never into GPU_RESULTS.md; with
    --output they are appended there. Every check of the section passes on CPU."""
    committed = GPU_RESULTS.read_bytes()
    printed = smoke_run()
    assert GPU_RESULTS.read_bytes() == committed
    assert "## Training" in printed and "--smoke" in printed and "FAIL" not in printed, printed[-3000:]
    assert "Training section:" in printed
    output = tmp_path / "results.md"
    output.write_text("earlier\n")
    printed = smoke_run("--output", str(output))
    written = output.read_text()
    assert written.startswith("earlier\n") and written.removeprefix("earlier\n") == printed
