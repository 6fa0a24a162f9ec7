"""elmoformanylangs_bench.run and render on made-up rounds: `run` takes the worker class (run.py's Worker), so stand-in
workers replace the two processes (the released size takes minutes); the model's stamp is made so that make_models
finds it made. Everything else is the module's own code with run.py's median and max_difference."""
import json

import numpy as np
from benchmark_measurements import run, targets_table  # noqa: F401  (puts benchmarks/ on the path)

import elmoformanylangs_bench as bench

INPUTS = {"batch": [[["a", "b"], ["c"]]], "single": [[["d", "e"]], [["f"]]]}
# seconds per run, the warm-ups' first (hf_elmo warms up cold only)
SECONDS = {"package": [9.0, 4.0, 8.0, 4.0], "cold": [9.0, 1.0, 1.0, 2.0], "warm": [0.5, 1.0, 1.0]}


def stand_in_class(log):
    class StandIn:
        def __init__(self, name, argv, env, log_path):
            self.name, self.count = name, {}
            self.hello = {"versions": {"torch": "t", "elmoformanylangs": "e", "transformers": "tf"}}

        def call(self, cmd, case, save=None, mode=None):
            who = "package" if self.name == "elmoformanylangs" else mode
            index = self.count[(who, case)] = self.count.get((who, case), -1) + 1
            log.append((who, case))
            if save:
                arrays = {}
                for b, batch in enumerate(INPUTS[case]):
                    for r, words in enumerate(batch):
                        for layer in range(3):
                            value = np.zeros((len(words), 4), dtype=np.float32)
                            if who == "package" and layer == 2:
                                value[0, 0] = 3e-5 if case == "single" else 1e-6  # only the top layer differs
                            arrays[f"b{b}_r{r}_l{layer}"] = value
                np.savez(save, **arrays)
            return {"seconds": SECONDS[who][index], "words": 10}

        def close(self):
            return {"memory": {}}

    return StandIn


def measured(tmp_path):
    inputs_file = tmp_path / "inputs.json"
    inputs_file.write_text(json.dumps(INPUTS))
    text = "".join(" ".join(s) + "\n" for case in ("batch", "single") for batch in INPUTS[case] for s in batch)
    (tmp_path / "elmoformanylangs.json").write_text(json.dumps({"text": text}))
    (tmp_path / "elmoformanylangs-hf").mkdir()
    (tmp_path / "elmoformanylangs-hf" / "config.json").write_text("{}")
    log = []
    summary = bench.run("python", 2, 3, inputs_file, tmp_path, {}, stand_in_class(log), run.median, run.max_difference)
    return summary, log


def test_ratios_words_per_second_alternation_and_agreement_of_every_layer(tmp_path):
    summary, log = measured(tmp_path)
    batch_order = [who for who, case in log[4:] if case == "batch"]  # (after the warm-ups)
    assert batch_order == ["package", "cold", "warm", "cold", "warm", "package", "package", "cold", "warm"]
    row = summary["batch"]
    # per round package/hf seconds: cold 4, 8, 2; warm 8, 8, 4
    assert row["ratio_cold"] == 4.0 and row["ratio_cold_range"] == (2.0, 8.0)
    assert row["ratio_warm"] == 8.0 and row["ratio_warm_range"] == (4.0, 8.0)
    assert row["package_words_per_s"] == 10 / 4.0 and row["hf_cold_words_per_s"] == 10 / 1.0
    assert row["hf_warm_words_per_s"] == 10 / 1.0
    assert summary["agreement"]["single"][2] > 2e-5 and summary["agreement"]["single"][:2] == [0.0, 0.0]


def test_targets_are_the_cold_ratios_against_their_own_case_and_the_agreement_within_2e_5(tmp_path):
    summary, _ = measured(tmp_path)
    summary["batch"].update(ratio_cold=2.5, ratio_warm=3.5)  # batch: missed (3x), though warm would meet it
    summary["single"].update(ratio_cold=2.5, ratio_warm=1.0)  # single: met (2x)
    lines, targets = bench.render(summary)
    table = {target: (measured_value, ok) for target, measured_value, ok in targets}
    assert table["ELMoForManyLangs size, 32 sentences, cold: >= 3x ELMoForManyLangs"] == ("2.50x", False)
    assert table["ELMoForManyLangs size, 1 sentence at a time, cold: >= 2x ELMoForManyLangs"] == ("2.50x", True)
    assert table["ELMoForManyLangs size: every layer within 2e-5 of the package"] == ("3e-05", False)


def test_one_step_weight_traffic_at_the_released_size():
    mib = 2**20
    assert bench.weight_bytes_per_step() == (160 * mib, 288 * mib)  # (4 chains: 4x4096x512 + 4096x512; + inputs)
