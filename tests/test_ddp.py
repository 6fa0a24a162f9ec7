"""The heads under real DDP: two CPU processes (gloo), activation checkpointing, find_unused_parameters=False."""

import json
import os
import subprocess
import sys
from pathlib import Path


def test_heads_train_under_ddp_without_unused_parameters(converted, tmp_path):
    probe = Path(__file__).with_name("ddp_heads_probe.py")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(probe), str(converted["allennlp-elmo"]), str(tmp_path)]
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    runs = json.loads((tmp_path / "result.json").read_text())
    assert len(runs) == 4
    for name, run in runs.items():
        assert run["world_size"] == 2 and run["wrapped"] == "DistributedDataParallel", name
        assert run["find_unused_parameters"] is False, name
        assert run["loss"] > 0, name
        feature_based = "finetune_bilm=False" in name
        assert (len(run["trained"]) == 4) == feature_based, (name, run["trained"])
