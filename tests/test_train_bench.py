"""train_bench.py's arithmetic on made-up steps: the stand-in workers below replace the AllenNLP and hf_elmo
processes (a real step of the original size takes minutes); everything else is train_bench's own code."""
import argparse

from benchmark_measurements import run, setup, targets_table  # noqa: F401  (puts benchmarks/ on the path)

import train_bench

# seconds per step, the warm-up's first
SECONDS = {"allennlp": [9.0, 4.0, 8.0, 4.0], "fast": [9.0, 1.0, 1.0, 2.0], "plain": [9.0, 2.0, 2.0, 2.0]}
GRADS = {"allennlp": [1.0, 2.0], "fast": [1.0, 2.1], "plain": [1.0, 2.2]}
LOSSES = {"allennlp": 10.0, "fast": 10.5, "plain": 11.0}


class StandIn:
    def __init__(self, log, who_of_mode):
        self.log, self.who_of_mode, self.count = log, who_of_mode, {}
        self.hello = {"versions": {"torch": "t", "transformers": "tf", "allennlp": "a"}}

    def call(self, cmd, mode=None):
        who = self.who_of_mode(mode)
        index = self.count[who] = self.count.get(who, -1) + 1
        self.log.append(who)
        return {"seconds": SECONDS[who][index], "loss": LOSSES[who], "words": 1280, "memory": {},
                "char_embedding_grad": GRADS[who]}

    def close(self):
        return {"memory": {"peak": 100.0}}


def bench(monkeypatch, tmp_path, size_index=1, rounds=3, original_rounds=3):
    log = []
    monkeypatch.setattr(train_bench, "make_models", lambda size, folder: ("options", "weights", "converted"))
    monkeypatch.setattr(train_bench, "library_workers", lambda *a: (StandIn(log, lambda mode: "allennlp"),
                                                                    StandIn(log, lambda mode: mode)))
    args = argparse.Namespace(rounds=rounds, original_rounds=original_rounds)
    return train_bench.bench_steps(run.SIZES[size_index], args, tmp_path / "w.json", tmp_path, {}), log


def test_step_ratios_are_medians_of_per_round_speed_ratios_and_the_order_alternates(monkeypatch, tmp_path):
    result, log = bench(monkeypatch, tmp_path)
    assert log == ["allennlp", "fast", "plain", "allennlp", "fast", "plain", "plain", "fast", "allennlp",
                   "allennlp", "fast", "plain"]
    # per round AllenNLP/fast seconds: 4, 8, 2; plain/fast: 2, 2, 1; AllenNLP/plain: 2, 4, 2
    assert result["ratio"][("fast", "allennlp")] == 4.0 and result["spread"][("fast", "allennlp")] == (2.0, 8.0)
    assert result["ratio"][("fast", "plain")] == 2.0 and result["spread"][("fast", "plain")] == (1.0, 2.0)
    assert result["ratio"][("plain", "allennlp")] == 2.0
    assert result["seconds"] == {"allennlp": 4.0, "fast": 1.0, "plain": 2.0}  # (warm-ups left out)
    assert result["loss"] == LOSSES
    assert result["grad_difference"]["fast vs allennlp"] == abs(2.1 - 2.0) / 2.0
    assert result["grad_difference"]["fast vs plain"] == abs(2.1 - 2.2) / 2.2


def test_the_original_size_runs_its_own_number_of_rounds(monkeypatch, tmp_path):
    result, log = bench(monkeypatch, tmp_path, size_index=0, rounds=3, original_rounds=2)
    assert result["rounds"] == 2 and log.count("fast") == 3  # (warm-up + 2)


def test_largest_relative_difference_is_the_largest_not_the_mean():
    assert train_bench.largest_relative_difference([1.0, 2.0, 3.0], [1.0, 2.0, 4.0]) == 0.25


def pretrain(monkeypatch, tmp_path, runs=2):
    calls = []

    def records(rates, losses):
        return [{"words_per_second": r, "loss": l} for r, l in zip(rates, losses)]

    made = {(False, 0): records([1, 1, 100, 100, 100], [5, 4, 3, 2, 1]),
            (True, 0): records([1, 1, 40, 40, 40], [5, 4, 3, 2, 1.5]),
            (False, 1): records([1, 1, 90, 90, 90], [5, 4, 3, 2, 1]),
            (True, 1): records([1, 1, 45, 45, 45], [5, 4, 3, 2, 1])}

    def pretrain_run(args, work, env, plain, index):
        calls.append(("plain" if plain else "fast", index))
        return made[(plain, index)]

    monkeypatch.setattr(train_bench, "pretrain_run", pretrain_run)
    return train_bench.bench_pretrain(argparse.Namespace(ptb_runs=runs, ptb_steps=50), tmp_path, {}), calls


def test_pretraining_rates_leave_out_two_intervals_and_the_ratio_is_fast_over_plain(monkeypatch, tmp_path):
    result, calls = pretrain(monkeypatch, tmp_path)
    assert calls == [("fast", 0), ("plain", 0), ("plain", 1), ("fast", 1)]
    assert result["words_per_second"] == {"fast": 95.0, "plain": 42.5}
    assert result["ratio"] == 95.0 / 42.5 and result["per_run_ratios"] == [2.5, 2.0]
    assert result["loss_difference"] == 0.5  # (at the last logged step)
    assert result["loss_first"] == 5 and result["loss_last"] == 1


def test_training_targets_are_judged_on_the_measured_ratios(monkeypatch, tmp_path):
    steps = {"small": bench(monkeypatch, tmp_path)[0]}
    pretrained = pretrain(monkeypatch, tmp_path)[0]  # fast / plain 2.24: under 2.5
    table = targets_table(train_bench.render(steps, pretrained, setup(), 60.0))
    assert table == {"Small size, training step >= 3x AllenNLP": ("4.00x", "yes"),
                     "`ptb-cpu` pretraining, fast path >= 2.5x the plain path": ("2.24x", "no")}
    steps["small"]["ratio"][("fast", "allennlp")] = 2.9
    table = targets_table(train_bench.render(steps, pretrained, setup(), 60.0))
    assert table["Small size, training step >= 3x AllenNLP"] == ("2.90x", "no")
    # AllenNLP's interpreter as given, or (in the checkout, as make bench-train's is) from the checkout's root
    assert "in its own venv (/x/python)." in train_bench.render(steps, pretrained, setup(), 60.0)
    inside = {**setup(), "allennlp_python": str(train_bench.ROOT / "build" / "allennlp-venv" / "bin" / "python")}
    assert "in its own venv (build/allennlp-venv/bin/python)." in train_bench.render(steps, pretrained, inside, 60.0)


def test_the_training_steps_windows_are_the_first_words_of_ptb_train_read_as_one_stream(tmp_path):
    """64 windows of 20 words: the first 1,280 words of train.txt, across its lines (every window whole)."""
    import json

    lines = [" ".join(f"w{i}_{j}" for j in range(7 + i % 5)) for i in range(300)]
    (tmp_path / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    windows = train_bench.make_windows(tmp_path, tmp_path / "windows.json")
    stream = " ".join(lines).split()
    assert windows == [stream[k * 20 : (k + 1) * 20] for k in range(64)]
    assert json.loads((tmp_path / "windows.json").read_text())["windows"] == windows
