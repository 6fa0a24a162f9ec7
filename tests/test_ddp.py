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
