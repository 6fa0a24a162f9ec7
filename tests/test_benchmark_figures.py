"""benchmarks/run.py's arithmetic, on made-up rounds (a real run takes minutes), which the published figures in
RESULTS.md and the README rest on. summarise: each speed ratio is AllenNLP's seconds over hf_elmo's within a round,
the figure their median (not the mean, not the ratio of medians), with the range of the per-round ratios; ceilings
are medians; the bandwidth share uses each library's own weight traffic; memory ratios are hf_elmo over AllenNLP.
render: each target judged on its own figure with its own comparison, yes/no as met, the load average range, the
busy-machine warning from the loads between rounds. bench_size, with stand-ins for the two worker processes: the
libraries alternate, the order flipping every round, the ceilings are measured once a round, the warm-up runs are
the ones saved and compared, and an opt-in mode's speed-up is exact over approximate."""

import argparse
import json
import statistics

import numpy as np
from benchmark_measurements import CONFIG, INPUTS, run, setup, size_result, targets_table

from hf_elmo import ElmoConfig


def test_ratios_are_medians_of_per_round_ratios_with_their_range():
    summary = run.summarise(size_result(), INPUTS)
    batch, single = summary["batch"], summary["single"]
    assert batch["ratio_cold"] == 2.0 and batch["ratio_cold_range"] == (2.0, 9.0)  # rounds: 2, 2, 9
    assert batch["ratio_warm"] == 4.0 and batch["ratio_warm_range"] == (4.0, 18.0)  # rounds: 4, 4, 18
    assert single["ratio_cold"] == 3.0 and single["ratio_cold_range"] == (1.5, 6.0)  # rounds: 3, 6, 1.5
    words = sum(len(s) for s in INPUTS["batch"][0])
    assert batch["allennlp"]["words_per_s"] == words / 4.0 and batch["hf-cold"]["seconds"] == 1.0


def test_ceilings_are_medians_over_rounds_and_the_kernel_the_most_frequent():
    summary = run.summarise(size_result(), INPUTS)
    assert summary["ceiling_gflops"] == 110.0 and summary["bandwidth_gbs"] == 20.0
    assert summary["ceiling_kernel"] == "blas" and summary["bound"]["step_rate_gflops"] == 60.0
    # The most frequent kernel, neither the last round's nor the median round's (the second): blas, torch.mm, blas.
    result = size_result()
    for record, kernel in zip(result["runs"]["ceiling"], ["blas", "torch.mm", "blas"]):
        record["ceiling_kernel"] = kernel
    assert run.summarise(result, INPUTS)["ceiling_kernel"] == "blas"


def test_one_sentence_bandwidth_share_counts_each_librarys_own_weight_traffic():
    summary = run.summarise(size_result(), INPUTS)
    sentences = [s for b in INPUTS["single"] for s in b]
    for lib in ("allennlp", "hf-cold", "hf-warm"):
        seconds = statistics.median(size_result()["runs"][f"{lib}-single"][i]["seconds"] for i in range(3))
        need = sum(run.weight_bytes(CONFIG, len(s), lib) for s in sentences)
        assert summary["single"][lib]["bandwidth_fraction"] == need / seconds / 20e9, lib


def test_memory_ratios_are_hf_elmo_over_allennlp():
    memory = run.summarise(size_result(), INPUTS)["memory"]
    assert memory["load_ratio"] == 300 / 400 and memory["run_ratio"] == 500 / 800
    assert memory["hf_elmo"]["load_file_backed"] == 10.0 and memory["allennlp"]["load_file_backed"] == 0.0


def test_flops_and_positions_count_every_convolution_position_and_both_boundaries():
    assert run.needed_positions([["a", "b"], ["c"]]) == (2 + 2 + 1 + 2, 2 + 1 + 1 + 1)
    config = ElmoConfig(char_embedding_dim=4, char_cnn_filters=[[1, 2], [3, 4]], max_characters_per_token=10,
                        num_highway_layers=1, cell_size=8, projection_dim=5)
    # a width-w filter slides over 10 - w + 1 positions: 1*4*2*10 + 3*4*4*8 multiply-adds
    width = 2 + 4
    char = 1 * 4 * 2 * 10 + 3 * 4 * 4 * 8 + 2 * width * width + width * 5
    assert run.flops_per_position(config)[0] == 2.0 * char


def rendered(adjust=lambda summaries, results: None, load_during=(0.5, 1.5, 1.0)):
    results = {"original": size_result(), "small": size_result()}
    summaries = {name: run.summarise(result, INPUTS) for name, result in results.items()}
    adjust(summaries, results)
    return run.render(results, summaries, setup(load_during), 60.0, INPUTS)


def test_each_target_is_judged_on_its_own_figure():
    def adjust(summaries, results):
        original = summaries["original"]
        original["batch"].update(ratio_cold=2.5, ratio_warm=4.5)  # cold missed, warm met
        original["single"]["ratio_cold"] = 1.5  # missed (the batch's 2.5 would meet it)
        original["memory"]["load_ratio"] = 0.9  # missed
        summaries["small"]["batch"]["ratio_warm"] = 5.5  # met
        results["original"]["agreement"]["single warm"] = [1e-7, 2e-5, 1e-7]  # one layer past 1e-5: missed

    table = targets_table(rendered(adjust))
    assert table["original, 32 sentences, cold: >= 3x AllenNLP"] == ("2.50x", "**no**")
    assert table["original, 32 sentences, cache warm: >= 4x"] == ("4.50x", "yes")
    assert table["original, 1 sentence: >= 1.8x AllenNLP"][1] == "**no**"
    assert table["original, 1 sentence: >= 1.8x AllenNLP"][0].startswith("1.50x (")
    assert table["original, peak RSS of loading <= 0.75x AllenNLP"] == ("0.90x", "**no**")
    assert table["original: every layer within 1e-5 of AllenNLP"] == ("2e-05", "**no**")
    assert table["small, 32 sentences, cache warm: >= 5x"] == ("5.50x", "yes")
    assert table["small: every layer within 1e-5 of AllenNLP"] == ("3e-07", "yes")


def test_a_target_met_exactly_at_its_bound_is_met_and_the_load_range_is_min_to_max():
    def adjust(summaries, results):
        summaries["original"]["batch"].update(ratio_cold=3.0, ratio_warm=4.0)
        summaries["original"]["memory"]["load_ratio"] = 0.75

    text = rendered(adjust)
    table = targets_table(text)
    assert table["original, 32 sentences, cold: >= 3x AllenNLP"] == ("3.00x", "yes")
    assert table["original, peak RSS of loading <= 0.75x AllenNLP"] == ("0.75x", "yes")
    assert "0.10 at the start, 0.50-1.50 between rounds, 0.20 at the end" in text
    assert "Warning: the machine was busy" not in text


def test_a_busy_machine_between_rounds_is_warned_of():
    # the start and end loads are low; only a load between rounds passes threads + 0.5
    text = rendered(load_during=(0.5, 2.6, 1.0))
    assert "**Warning: the machine was busy during this run** (1-minute load average up to 2.6" in text
    assert text.index("Warning: the machine was busy") < text.index("### Settings")
    assert "Warning: the machine was busy" not in rendered(load_during=(0.5, 2.4, 1.0))


TINY = ElmoConfig(cell_size=16, projection_dim=8, num_highway_layers=1, char_cnn_filters=[[1, 4], [2, 8]])


class StandIn:
    """A worker process's replies without the process (run.py's Worker.call): every run of the library it stands
    for is logged, saves layers of a known difference where asked, and takes 2 s (1 s with an approximation)."""

    def __init__(self, name, log):
        self.name, self.log = name, log
        self.hello = {"versions": {}, "imported": {"peak": 1.0}, "loaded": {"peak": 2.0, "rss": 2.0},
                      "native_bfloat16": None}

    def call(self, cmd, case=None, mode=None, save=None, approximation=None, rows=None):
        if cmd == "run":
            who = "allennlp" if self.name == "allennlp" else mode
            self.log.append((who, case, approximation, bool(save)))
            if save:
                value = 1e-6 if self.name == "allennlp" else (-1e-6 if mode == "warm" else 0.0)
                np.savez(save, **{f"b{b}_r{r}_l{l}": np.full((len(s), 2), value)
                                  for b, batch in enumerate(INPUTS[case]) for r, s in enumerate(batch)
                                  for l in range(3)})
            seconds = 1.0 if approximation else 2.0
            return {"seconds": seconds, "lstm_seconds": seconds / 2, "words": 3, "memory": {}}
        self.log.append((cmd,))
        return {"ceiling": {"gflops": 100.0, "bandwidth_gbs": 10.0}, "step_rate": {"step_gflops": 50.0},
                "memory": {"memory": {"peak": 3.0}}, "kernels": {"kernels": []}}[cmd]

    def close(self):
        return {"memory": {"peak": 3.0}}


def test_bench_size_alternates_the_libraries_and_times_the_opt_in_modes_against_exact_runs(tmp_path, monkeypatch):
    converted = tmp_path / "hf"
    TINY.save_pretrained(converted)
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps(INPUTS))
    log = []
    monkeypatch.setattr(run, "make_models", lambda size, folder: (tmp_path / "o", tmp_path / "w", converted))
    monkeypatch.setattr(run, "library_workers", lambda *a: (StandIn("allennlp", log), StandIn("hf", log)))
    result = run.bench_size(run.SIZES[1], argparse.Namespace(rounds=3), inputs, tmp_path, {})
    warm_ups, timed = log[:6], log[6:]
    assert all(saved for *_, saved in warm_ups)
    rounds = [timed[i * 8:(i + 1) * 8] for i in range(3)]
    for index, entries in enumerate(rounds):
        order = ["allennlp", "cold", "warm"] if index % 2 == 0 else ["cold", "warm", "allennlp"]
        assert [e[0] for e in entries] == order + order + ["ceiling", "step_rate"], (index, entries)
        assert [e[1] for e in entries[:6]] == ["batch"] * 3 + ["single"] * 3
    assert len(result["runs"]["allennlp-batch"]) == len(result["runs"]["ceiling"]) == 3
    assert result["approximations"]["bf16"] == {"not_offered": "this CPU has neither AVX512-BF16 nor AMX-BF16"}
    assert result["approximations"]["int8 batch"]["speedup"] == 2.0  # exact 2 s over approximate 1 s
    assert result["approximations"]["int8 batch"]["seconds"] == 1.0
    assert result["agreement"]["batch cold"] == [1e-6, 1e-6, 1e-6]
    assert result["agreement"]["single warm"] == [2e-6, 2e-6, 2e-6]
