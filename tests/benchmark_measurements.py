"""Made-up measurements in the shapes that benchmarks/run.py's bench_size and settings produce, for the tests of
the benchmarks' arithmetic (test_benchmark_figures.py, test_train_bench_figures.py): a real run takes minutes."""
import sys

from conftest import REPO

from hf_elmo import ElmoConfig

sys.path.insert(0, str(REPO / "benchmarks"))
import run  # noqa: E402

CONFIG = ElmoConfig(**run.SIZES[1].config)
INPUTS = {"batch": [[["the", "cat", "sat"], ["a", "dog", "ran", "off"], ["the", "end"]]],
          "single": [[["one", "two", "three"]], [["four", "five"]], [["six", "seven", "eight", "nine"]]]}
# seconds per round (3 rounds): AllenNLP / hf cold per round = 2, 2, 9 (median 2; mean 4.33; medians' ratio 4)
SECONDS = {"allennlp-batch": [2.0, 4.0, 9.0], "hf-cold-batch": [1.0, 2.0, 1.0], "hf-warm-batch": [0.5, 1.0, 0.5],
           "allennlp-single": [3.0, 6.0, 3.0], "hf-cold-single": [1.0, 1.0, 2.0], "hf-warm-single": [1.0, 0.5, 0.5]}


def size_result(config=CONFIG, seconds=SECONDS) -> dict:
    runs = {key: [{"seconds": s, "lstm_seconds": s / 2, "words": 0} for s in values] for key, values in seconds.items()}
    runs["ceiling"] = [{"gflops": g, "bandwidth_gbs": b, "step_gflops": st, "ceiling_kernel": k}
                       for g, b, st, k in zip([100.0, 110.0, 300.0], [10.0, 20.0, 60.0], [50.0, 60.0, 90.0],
                                              ["torch.mm", "blas", "blas"])]
    load = {"allennlp": {"imported": {"peak": 100.0}, "loaded": {"peak": 400.0, "rss": 390.0}, "versions": {}},
            "hf_elmo": {"imported": {"peak": 200.0}, "loaded": {"peak": 300.0, "rss": 250.0, "file_backed": 10.0},
                        "versions": {}}}
    return {"label": "small (test)", "runs": runs, "config_obj": config, "load": load,
            "memory_end": {"allennlp": {"peak": 800.0}, "hf_elmo": {"peak": 500.0}},
            "config": dict(zip(("char_flops", "lstm_flops"), run.flops_per_position(config))),
            "agreement": {"batch cold": [1e-7, 2e-7, 3e-7], "batch warm": [1e-7, 2e-7, 3e-7],
                          "single cold": [1e-7, 2e-7, 3e-7], "single warm": [1e-7, 2e-7, 3e-7]},
            "approximations": {}, "kernels": [], "load_average_during": [0.5, 1.5, 1.0]}


def setup(load_during=(0.5, 1.5, 1.0), threads=2) -> dict:
    cpu = {"model": "Test CPU", "vendor": "TestVendor", "family": "1", "model_number": "2", "logical_cpus": 2,
           "extensions": ["AVX2"], "caches": {"L1": "48K", "L2": "1024K", "L3": "32768K"}}
    return {"threads": threads, "cpu": cpu, "platform": "Linux", "python": "3.x", "allocator": "glibc malloc",
            "environment": {"OMP_NUM_THREADS": "2"}, "allennlp_python": "/x/python", "load_average_start": (0.1, 0, 0),
            "started": 0.0, "rounds": 3, "load_average_end": (0.2, 0, 0), "load_during": list(load_during),
            "versions": {"hf_elmo": {"torch": "t", "transformers": "tf"}, "allennlp": {"torch": "t", "allennlp": "a"}},
            "fixture_deviations": {"int8": [1e-3, 2e-3, 3e-3]}}


def targets_table(text: str) -> dict[str, tuple[str, str]]:
    """{target: (measured, met)} from a section's Targets table."""
    part = text.split("### Targets", 1)[1].split("\n### ", 1)[0]
    rows = [line.strip("|").split("|") for line in part.splitlines() if line.startswith("| ") and "---" not in line]
    return {cells[0].strip(): (cells[1].strip(), cells[2].strip()) for cells in rows[1:]}
