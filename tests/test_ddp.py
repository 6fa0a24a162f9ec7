"""The heads under real DDP: two CPU processes (gloo), activation checkpointing, find_unused_parameters=False."""

import json
import os
from pathlib import Path

from conftest import run_two_processes


def test_heads_train_under_ddp_without_unused_parameters(converted, tmp_path):
    probe = Path(__file__).with_name("ddp_heads_probe.py")
    result = run_two_processes([probe, converted["allennlp-elmo"], tmp_path], {**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-4000:]
    runs = json.loads((tmp_path / "result.json").read_text())
    assert len(runs) == 4
    for name, run in runs.items():
        assert run["world_size"] == 2 and run["wrapped"] == "DistributedDataParallel", name
        assert run["find_unused_parameters"] is False, name
        assert run["loss"] > 0, name
        feature_based = "finetune_bilm=False" in name
        assert (len(run["trained"]) == 4) == feature_based, (name, run["trained"])


def test_two_processes_that_hang_fail_with_where_they_hang(tmp_path):
    """run_two_processes on a timeout kills both workers and fails the test with each worker's traceback (what
    explains a rare hang in CI), not only with the output printed so far."""
    import pytest

    script = tmp_path / "hang.py"
    script.write_text("import time\n\ndef wait_for_ever():\n    time.sleep(3600)\n\nprint('started', flush=True)\nwait_for_ever()\n")
    with pytest.raises(pytest.fail.Exception) as failure:
        run_two_processes([script], {**os.environ, "OMP_NUM_THREADS": "1"}, timeout=20)
    message = str(failure.value)
    assert "two processes still running after 20 s" in message and "started" in message
    assert message.count('line 4 in wait_for_ever') == 2, message[-3000:]
