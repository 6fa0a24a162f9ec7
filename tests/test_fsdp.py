"""FSDP2 as modeling/configs/fsdp.yaml shards the model, on two CPU processes (gloo): the same training as one process.

Accelerate forms an FSDP group on GPUs only: `accelerate launch --config_file modeling/configs/fsdp.yaml` trains here as
DDP (which pretrain.py says), so tests/fsdp_probe.py applies the same sharding with torch's `fully_shard` itself."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, REPO, run_two_processes


@pytest.mark.parametrize("path", ["fast", "plain"])
def test_fsdp_sharded_training_is_one_process_training(path, tmp_path):
    """3 steps of a stream (carried LSTM state, sampled softmax) with each biLSTM layer and the character encoder
    sharded over 2 processes, each training on 2 of the 4 rows, give the losses and the weights of training on all 4
    rows unsharded; and no FSDP warning (a module that returns a view tensor) reaches the user."""
    probe = Path(__file__).with_name("fsdp_probe.py")
    result = run_two_processes([probe, tmp_path, path], {**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-4000:]
    assert "FSDP" not in result.stderr, result.stderr[-4000:]
    run = json.loads((tmp_path / "result.json").read_text())
    assert run["world_size"] == 2 and run["parameters_sharded"]
    assert run["sharded_units"] == ["FSDPElmoBiLstmLayer", "FSDPElmoCharacterEncoder"]
    assert run["losses"] == pytest.approx(run["expected_losses"], rel=1e-6)
    assert run["largest_weight_change"] > 0.01  # (training moved the weights: the comparison below means something)
    assert run["largest_weight_difference"] < 1e-6


def test_fsdp_asked_for_on_cpus_is_said_to_train_as_ddp(tmp_path):
    """fsdp.yaml's ACCELERATE_USE_FSDP on CPU processes: Accelerate forms DDP instead, and the run said nothing of
    it (nor did trainer_state.json): pretrain.py says so."""
    train = FIXTURES / "bilm-tf" / "train"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(tmp_path / "cache"),
           "ACCELERATE_USE_FSDP": "true"}
    result = run_two_processes([REPO / "modeling" / "pretrain.py", "--preset", "tiny", "--train-file", train / "data.txt", "--max-steps", 1,
                                "--save-steps", 0, "--output-dir", tmp_path / "run"], env)
    assert result.returncode == 0, result.stderr[-3000:]
    said = ("FSDP was asked for (fsdp.yaml), which Accelerate forms for several GPU processes only: these processes "
            "train as MULTI_CPU, each holding the whole model")
    assert said in result.stdout + result.stderr
    result = subprocess.run([sys.executable, REPO / "modeling" / "pretrain.py", "--preset", "tiny", "--train-file",
                             train / "data.txt", "--max-steps", "1", "--save-steps", "0", "--output-dir", tmp_path / "one"],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert ("FSDP was asked for (fsdp.yaml), which Accelerate forms for several GPU processes only: this one process "
            "trains alone holding the whole model") in result.stdout
