"""The benchmark scripts that `make test` does not otherwise run: the GPU training benchmark and the GPU profile on
CPU (`--device cpu`, or no GPU), so that code which only a lent GPU would run is exercised here (its smoke run checks the fused
training path and writes only where it is told to), the memory rates the README's Speed section quotes, and embed's
host side (GPU_RESULTS.md quotes it)."""

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from conftest import FIXTURES, REPO

from hf_elmo import ElmoConfig, ElmoModel
from hf_elmo.fast_linear import float32_kernels

sys.path.insert(0, str(REPO / "benchmarks"))
from gpu_train_bench import RUNNING  # noqa: E402

GPU_TRAIN_BENCH = REPO / "benchmarks" / "gpu_train_bench.py"
GPU_RESULTS = REPO / "benchmarks" / "GPU_RESULTS.md"
MEMORY_RATES = REPO / "benchmarks" / "memory_rates.py"
EMBED_HOST_SIDE = REPO / "benchmarks" / "embed_host_side.py"
COMPILE_SPEED = REPO / "benchmarks" / "compile_speed.py"
OPTIMIZER_SPEED = REPO / "benchmarks" / "optimizer_speed.py"


def smoke_run(*args: str) -> str:
    result = subprocess.run([sys.executable, GPU_TRAIN_BENCH, "--device", "cpu", "--smoke", *args], cwd=REPO,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_gpu_training_benchmark_smoke_run_writes_no_results_unless_told(tmp_path):
    """Its figures only check the script: by default they go to the screen alone, never into GPU_RESULTS.md; with
    --output they are written there, in place of an earlier Training section (what follows it is kept), never a
    second one, and no temporary file is left. Every check of the section passes on CPU."""
    committed = GPU_RESULTS.read_bytes()
    # (with a text for the speed parts, here the fixture's: pretrain.py's runs and the step's timing run too)
    printed = smoke_run("--train-file", str(FIXTURES / "bilm-tf" / "train" / "data.txt"))
    assert GPU_RESULTS.read_bytes() == committed
    assert "## Training" in printed and "--smoke" in printed and "FAIL" not in printed, printed[-3000:]
    assert "Training section:" in printed and "`pretrain.py --preset tiny`" in printed
    assert "Speed: not measured" not in printed
    output = tmp_path / "results.md"
    # (the runs with --output read no text, so that they skip the speed parts: in a checkout with data/ptb, the default
    # text, each would train on it for a minute)
    no_text = ("--train-file", str(tmp_path / "no-text.txt"))
    output.write_text("earlier\n")
    printed = smoke_run("--output", str(output), *no_text)
    written = output.read_text()
    assert written.startswith("earlier\n") and written.removeprefix("earlier\n") == printed
    assert f"Speed: not measured, no {no_text[1]}" in printed
    # Every earlier Training section goes (the script's earlier versions appended one a run), the new one where the
    # first was.
    output.write_text("earlier\n\n## Training\n\n- stale, half a section\n\n## Later\n\nkept\n\n## Training\n\n- older\n")
    for _ in range(2):  # (the second run replaces the first one's section)
        printed = smoke_run("--output", str(output), *no_text)
        assert output.read_text() == "earlier\n" + printed + "\n## Later\n\nkept\n"
    assert printed.count("## Training") == 1 and printed.startswith("\n## Training\n") and RUNNING not in printed
    assert [path.name for path in tmp_path.iterdir()] == ["results.md"]


def test_gpu_bench_runs_on_the_cpu_and_a_part_that_fails_leaves_the_others_and_the_report(tmp_path, monkeypatch):
    """benchmarks/gpu_bench.py (gpu.sh's first half) where there is no GPU, tiny settings: the speed table and its
    targets in the report, written after each part (the last "Cut short" line replaced by the whole run's time). A
    part that raises (on the GPU machine: a missing package, a kernel that fails) is a failed check naming it, exit
    status 1, with its traceback's end, the rows measured before it kept, and the parts after it still run and
    are reported."""
    import gpu_bench

    output = tmp_path / "GPU_RESULTS.md"
    command = ["gpu_bench.py", "--device", "cpu", "--sizes", "small", "--batch-sizes", "2", "--runs", "1",
               "--no-checks", "--output", str(output)]
    monkeypatch.setattr(sys, "argv", command)
    assert gpu_bench.main() == 0
    report = output.read_text()
    assert "| small | 2 |" in report and "exact GPU outputs within 2e-6 of the CPU's" in report
    assert "Whole run:" in report and "Cut short" not in report and "Failed checks" not in report

    def broken(*arguments):
        raise RuntimeError("no kernel image is available")

    def one_row_then_out_of_memory(device, args, failures, measured, lines, measured_row):
        lines += ["| size | sentences |", "|---|---|", "| small | 2 |"]
        measured_row()
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(gpu_bench, "speed_table", one_row_then_out_of_memory)
    monkeypatch.setattr(gpu_bench, "cuda_tests", lambda failures: ["- Tests on CUDA: ran after the failure."])
    monkeypatch.setattr(gpu_bench, "embed_end_to_end", broken)
    monkeypatch.setattr(gpu_bench, "embed_against_cpu", lambda failures: ["- embed against the CPU: ran too."])
    monkeypatch.setattr(sys, "argv", [argument for argument in command if argument != "--no-checks"])
    assert gpu_bench.main() == 1
    report = output.read_text()
    assert ("**Failed checks**: the speed table raised RuntimeError: CUDA out of memory; embed end to end "
            "raised RuntimeError: no kernel image is available.") in report
    assert "| small | 2 |" in report  # (the row measured before the failure)
    assert report.count("Traceback (most recent call last):") == 2 and 'in one_row_then_out_of_memory' in report
    assert "- Tests on CUDA: ran after the failure." in report and "- embed against the CPU: ran too." in report


def test_gpu_sh_runs_both_halves_with_the_fixtures_it_was_carried(tmp_path):
    """gpu.sh on a machine that has the repository without ../shared (a lent GPU machine): a copy of the fixtures
    carried in build/shared-fixtures is linked there before the two halves run, each with its time limit; the
    interpreter (PYTHON) stands in for the benchmarks here and says what it was given and what it finds."""
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    shutil.copy(REPO / "benchmarks" / "gpu.sh", repo / "benchmarks" / "gpu.sh")
    (repo / "build" / "shared-fixtures").mkdir(parents=True)
    (repo / "build" / "shared-fixtures" / "marker").write_text("carried\n")
    stand_in = tmp_path / "python"
    stand_in.write_text('#!/bin/sh\ncase "$1" in *gpu_bench.py) [ -n "$STALL" ] && sleep 30;; esac\n'
                        'echo "$1 $2 $3 $(cat ../shared/fixtures/marker) $HF_HUB_OFFLINE$PYTHONUNBUFFERED"\n')
    stand_in.chmod(0o755)
    environment = {**os.environ, "PYTHON": str(stand_in), "OUT": str(tmp_path)}
    result = subprocess.run(["bash", repo / "benchmarks" / "gpu.sh", "--runs", "1"], capture_output=True, text=True,
                            env=environment, timeout=60)
    assert result.returncode == 0, result.stderr
    output = str(tmp_path / "GPU_RESULTS.md")
    assert result.stdout.splitlines() == [f"benchmarks/gpu_bench.py --output {output} carried 11",
                                          f"benchmarks/gpu_train_bench.py --output {output} carried 11"]
    assert (tmp_path / "shared" / "fixtures").is_symlink()
    (tmp_path / "shared" / "fixtures").unlink()
    (tmp_path / "shared" / "fixtures").symlink_to(tmp_path / "gone")  # (a link left by an earlier machine)
    result = subprocess.run(["bash", repo / "benchmarks" / "gpu.sh"], capture_output=True, text=True, env=environment,
                            timeout=60)
    assert result.returncode == 0 and result.stdout.count("carried") == 2, result.stderr
    # A first half past its limit is stopped (exit status 124), and the second still runs.
    result = subprocess.run(["bash", repo / "benchmarks" / "gpu.sh"], capture_output=True, text=True, timeout=60,
                            env={**environment, "STALL": "1", "GPU_BENCH_SECONDS": "1"})
    assert result.returncode == 124
    assert result.stdout.splitlines() == [f"benchmarks/gpu_train_bench.py --output {output} carried 11"]


def test_gpu_profile_runs_every_part_on_the_cpu(tmp_path):
    """benchmarks/gpu_profile.py, whose figures GPU_RESULTS.md quotes, runs each part where there is no GPU (tiny
    sizes): one line per part, and the profiler's tables in OUTPUT_DIR/profile.txt; the whole step goes through the
    recorded step's code (unrecorded on CPU) without failing."""
    result = subprocess.run([sys.executable, REPO / "benchmarks" / "gpu_profile.py", tmp_path, "train", "train-layers",
                             "inference", "gemm", "--train-file", FIXTURES / "bilm-tf" / "train" / "data.txt"],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("== ")]
    assert [line.split(":")[0].split(" (")[0] for line in lines] == [
        "== train train", "== train train-layers", "== inference, original size, 32 sentences, exact",
        "== inference, original size, 256 sentences, exact", "== gemm"], lines
    assert "not recorded" not in lines[0]
    tables = (tmp_path / "profile.txt").read_text()
    assert len(re.findall(r"(?m)^--- .*, by self_(device|cpu)_time_total$", tables)) == 8


def test_a_gpu_profile_part_that_fails_leaves_the_others_to_run(tmp_path):
    """A part that fails (here the training text is missing, as data/ptb is on a GPU machine that has the
    repository alone) is one line naming it, and the parts after it still run; the exit status says so."""
    result = subprocess.run([sys.executable, REPO / "benchmarks" / "gpu_profile.py", tmp_path, "train", "gemm",
                             "--train-file", tmp_path / "missing.txt"], cwd=REPO, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 1, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("== ")]
    assert lines[0].startswith("== train: failed, ") and "missing.txt" in lines[0], lines
    assert [line.split(":")[0].split(" (")[0] for line in lines[1:]] == ["== gemm"], lines


def test_gpu_profile_without_parts_runs_train_and_inference(tmp_path):
    """No PART, the documented usage, runs the default parts (Python 3.11's argparse refused it, checking the default
    list against the parts' names); here the training text is missing, so that train fails at once and inference,
    tiny on CPU, runs."""
    result = subprocess.run([sys.executable, REPO / "benchmarks" / "gpu_profile.py", tmp_path / "new", "--train-file",
                             tmp_path / "missing.txt"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stderr[-3000:]
    lines = [line.split(",")[0] for line in result.stdout.splitlines() if line.startswith("== ")]
    assert lines == ["== train: failed", "== inference", "== inference"], result.stdout
    assert (tmp_path / "new" / "profile.txt").is_file()


def test_a_gpu_training_benchmark_cut_short_leaves_the_parts_it_measured(tmp_path):
    """The file is rewritten after each part: a run killed (as gpu.sh's timeout would) once it has written its first
    part leaves the lines measured so far in one Training section, marked as cut short."""
    output = tmp_path / "results.md"
    run = subprocess.Popen([sys.executable, GPU_TRAIN_BENCH, "--device", "cpu", "--smoke", "--output", str(output)],
                           cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while run.poll() is None and not output.exists():
        time.sleep(0.01)
    first = output.read_text()  # (the first part's save: the parts after it take seconds)
    run.kill()
    run.wait()
    assert first.rstrip("\n").endswith(RUNNING), first
    written = output.read_text()
    lines = written.rstrip("\n").splitlines()
    assert written.count("## Training") == 1 and any(line.startswith("- ") and "biLSTM layer" in line for line in lines), written
    assert lines[-1] == RUNNING or lines[-1].startswith("Training section:"), written


def test_embed_host_side_measures_the_tokenizer_both_ways_and_embed_without_the_model(tmp_path):
    result = subprocess.run([sys.executable, EMBED_HOST_SIDE, "--sentences", "200", "--batch-size", "64", "--folder",
                             str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert "200 sentences" in lines[0] and f"files in {tmp_path}" in lines[0], lines
    assert [line.split(":")[0].strip() for line in lines[1:]] == [
        "tokenizer call", "encode_words", "embed without the model (host side)"], lines
    assert all(re.search(r"[\d,]+ words/s", line) for line in lines[1:]), lines
    assert list(tmp_path.iterdir()) == []  # (its temporary folder is gone)


def test_compile_speed_times_both_cases_eager_and_compiled(tmp_path):
    text = tmp_path / "sentences.txt"
    text.write_text("".join(f"sentence {k} of the {k % 7} cats that sat on a mat .\n" for k in range(40)))
    result = subprocess.run([sys.executable, COMPILE_SPEED, "--file", str(text), "--rounds", "1", "--threads", "1"],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:2]] == ["32 sentences", "1 sentence"], lines
    assert all(re.search(r"eager [\d.]+ ms, compiled [\d.]+ ms, compiled / eager [\d.]+$", line) for line in lines[:2])
    assert lines[2].startswith("(medians of 1; "), lines


def test_optimizer_speed_times_the_fused_and_the_loop_optimizer_of_both_presets():
    result = subprocess.run([sys.executable, OPTIMIZER_SPEED, "--steps", "2", "--threads", "1"], cwd=REPO,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:2]] == ["default preset, adamw, 19.3M parameters",
                                                          "small preset, adagrad, 16.0M parameters"], lines
    assert all(re.search(r": fused [\d.]+ ms, loop [\d.]+ ms, loop / fused [\d.]+$", line) for line in lines[:2]), lines
    assert lines[2].startswith("(medians of 2 steps; 1 threads; "), lines


def test_memory_rates_measures_every_kernel_from_memory_and_from_the_cache():
    result = subprocess.run([sys.executable, MEMORY_RATES, "--repeats", "1", "--threads", "1"], cwd=REPO,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0].startswith("CPU: ") and "1 threads" in lines[0]
    kernels = list(float32_kernels())  # (every exact kernel this build of torch has)
    steps = [line for line in lines if line.startswith("one step of one direction")]
    once = [line for line in lines if "main memory" in line and "cache" in line]
    assert [line.split(", ")[3].split(":")[0] for line in steps] == kernels, lines
    assert len(once) == 3 * len(kernels) and all("GB/s" in line for line in lines[1:]), lines


def test_a_benchmark_run_replaces_the_section_of_its_cpu_kind_and_keeps_the_others(tmp_path):
    """RESULTS.md (`make bench`) and TRAINING.md (`make bench-train`) hold one section per CPU kind: a run's own
    section comes first, in place of the earlier one of its kind, and every other kind's section is kept whole."""
    import run
    import train_bench

    previous = ("# Title\n\nWhat the file is.\n\n## CPU: A (VendorA)\n\nold figures of A\n\n### Targets\n\nold\n\n"
                "## CPU: B (VendorB)\n\nfigures of B\n\n### Settings\n\n- B's settings\n\n## GPU\n\nold GPU text\n")
    section = "## CPU: A (VendorA)\n\nnew figures of A\n"
    for report in (run.assemble(previous, section, tmp_path / "no-gpu-results.md"),
                   train_bench.assemble(previous, section)):
        assert report.count("## CPU: A (VendorA)") == 1 and "new figures of A" in report, report
        assert "old figures of A" not in report and "\nold\n" not in report, report
        assert "## CPU: B (VendorB)\n\nfigures of B\n\n### Settings\n\n- B's settings\n" in report, report
        assert report.index("## CPU: A") < report.index("## CPU: B"), report
        assert "old GPU text" not in report, report
    assert run.assemble("", section, tmp_path / "no-gpu-results.md").count("## CPU: ") == 1


def test_cpu_kinds_that_share_a_name_keep_sections_of_their_own(tmp_path):
    """"AMD EPYC" names several generations: the family and model numbers are part of a section's heading, so one
    kind's run keeps the other's section; a heading written before the numbers were recorded is replaced by the
    run of the kind whose name and vendor it gives."""
    import run

    zen2 = {"model": "AMD EPYC", "vendor": "AuthenticAMD", "family": "23", "model_number": "49"}
    zen4 = {**zen2, "family": "25", "model_number": "17"}
    xeon = {"model": "Intel(R) Xeon(R) Processor", "vendor": "GenuineIntel", "family": "6", "model_number": "143"}
    assert run.section_heading(zen2) == "## CPU: AMD EPYC (AuthenticAMD, family 23, model 49)"
    previous = (f"# Title\n\n{run.section_heading(zen4)}\n\nZen 4 figures\n\n"
                "## CPU: Intel(R) Xeon(R) Processor (GenuineIntel)\n\nold Xeon figures\n")
    report = run.assemble(previous, f"{run.section_heading(zen2)}\n\nZen 2 figures\n", tmp_path / "none.md")
    assert "Zen 2 figures" in report and "Zen 4 figures" in report and "old Xeon figures" in report, report
    report = run.assemble(report, f"{run.section_heading(xeon)}\n\nnew Xeon figures\n", tmp_path / "none.md")
    assert "old Xeon figures" not in report and report.count("## CPU: Intel") == 1, report
    assert "Zen 2 figures" in report and "Zen 4 figures" in report, report
    cpu = run.describe_cpu()  # this machine's, as the sections record it
    if Path("/proc/cpuinfo").is_file():
        assert cpu["family"] and cpu["model_number"] and run.section_heading(cpu).endswith(
            f", family {cpu['family']}, model {cpu['model_number']})")


def sections_of(text: str) -> list[str]:
    """`text` cut before each "## " line (the first part: what precedes the first)."""
    return re.split(r"(?m)^(?=## )", text)


def test_each_committed_results_file_reassembled_with_its_own_section_is_unchanged():
    """RESULTS.md, TRAINING.md and GPU_RESULTS.md are rewritten by one parser of their sections
    (`bench_common.markdown_sections`): a run of the kind whose section comes first gives back the committed text, a
    new CPU kind's section goes first with every other kept whole, and a Training section of `gpu_train_bench.py` goes
    at the end of GPU_RESULTS.md and replaces only itself."""
    import gpu_train_bench
    import run
    import train_bench

    new = "## CPU: New kind (NewVendor, family 1, model 2)\n\nnew figures\n"
    for name, assemble in (("RESULTS.md", lambda text, section: run.assemble(text, section, GPU_RESULTS)),
                           ("TRAINING.md", train_bench.assemble)):
        text = (REPO / "benchmarks" / name).read_text(encoding="utf-8")
        parts = sections_of(text)
        cpus = [part for part in parts if part.startswith("## CPU: ")]
        assert len(cpus) >= 3, name
        assert assemble(text, cpus[0]) == text, name
        added = assemble(text, new)
        assert sections_of(added) == [parts[0], new + "\n", *cpus, *parts[1 + len(cpus):]], name
    gpu = GPU_RESULTS.read_text(encoding="utf-8")
    section = "\n## Training\n\n- figures\n"
    once = gpu_train_bench.with_section(gpu, section)
    assert once == gpu.split("\n## Training\n")[0].rstrip("\n") + "\n" + section  # (in place of the committed one)
    assert gpu_train_bench.with_section(gpu_train_bench.with_section(once, "\n## Training\n\n- other\n"), section) == once


def test_one_sentence_weight_traffic_counts_the_models_own_weights():
    """`make bench` divides the weight bytes one sentence reads by the memory bandwidth: they are the model's own
    weight matrices, read as each library runs them (hf_elmo: every step the projection weights, every step but the
    first, from the zero state, the recurrent ones, the rest once, and warm neither the char encoder's nor the first
    layer's input weights; AllenNLP: every weight of the biLSTM at every step, `<S>` to `</S>`)."""
    import run

    for config in (ElmoConfig(cell_size=1024, projection_dim=128, num_highway_layers=1),  # the Small size
                   ElmoConfig(cell_size=64, projection_dim=64, num_highway_layers=2,
                              char_cnn_filters=[[1, 32], [2, 64]], word_vocab_size=10, word_embedding_dim=8,
                              bos_word_id=1, eos_word_id=2)):  # (no LSTM projection; word input)
        parameters = dict(ElmoModel(config).named_parameters())

        def size(pattern: str) -> int:
            return sum(p.numel() * p.element_size() for n, p in parameters.items() if re.fullmatch(pattern, n))

        recurrent, projection = size(r"layers\.\d+\.recurrent_weight"), size(r"layers\.\d+\.projection_weight")
        inputs, first_inputs = size(r"layers\.\d+\.input_weight"), size(r"layers\.0\.input_weight")
        char = size(r"char_encoder\.(char_cnn|highway|projection)\..*weight")
        assert char and inputs and (projection > 0) == config.has_lstm_projection
        words, chains = 20, 2 * config.num_lstm_layers
        assert run.weight_bytes(config, words, "hf-cold") == (words + 1) * projection + words * recurrent + inputs + char
        assert run.weight_bytes(config, words, "hf-warm") == (words + 1) * projection + words * recurrent + inputs - first_inputs
        assert run.weight_bytes(config, words, "allennlp") == (words + 2) * (projection + recurrent + inputs) + char
        assert run.reread_bytes(config, "hf-cold") * chains == recurrent + projection
        assert run.reread_bytes(config, "allennlp") * chains == recurrent + projection + inputs


def test_the_memory_bandwidth_is_read_from_past_the_last_level_cache():
    """The probe reads a buffer 8 times the last-level cache (at least 512 MiB), on the benchmark's threads; the one
    before it, a vector times a 256 MiB matrix, was no faster on 2 threads than on 1, and on the Intel Xeon here (a
    260 MiB L3) its matrix fitted in the cache."""
    from bench_common import bandwidth_buffer_bytes, cpu0_caches, last_level_cache

    assert last_level_cache({"L1": "48K", "L2": "1024K", "L3": "98304K"}) == ("L3", 96 * 2**20)
    assert bandwidth_buffer_bytes({"L1": "48K", "L2": "2048K", "L3": "266240K"}) == 8 * 260 * 2**20  # (the Xeon's)
    assert bandwidth_buffer_bytes({"L2": "1024K", "L3": "32768K"}) == bandwidth_buffer_bytes({}) == 512 * 2**20
    caches = cpu0_caches()  # this machine's, as RESULTS.md records them
    if Path("/sys/devices/system/cpu/cpu0/cache").is_dir():
        assert caches and bandwidth_buffer_bytes(caches) >= 8 * last_level_cache(caches)[1], caches


def test_weights_that_stay_in_the_cache_are_not_shown_as_a_share_of_memory_bandwidth():
    """One sentence rereads a layer and direction's weights at every step (40 MiB at the original size, 2.5 MiB at
    the Small): where the last-level cache holds them (the Intel Xeon's 260 MiB L3; every CPU here at the Small size)
    RESULTS.md says so instead of a share of memory bandwidth, and where it holds part of them (the AMD EPYC Zen 5's
    32 MiB L3 at the original size) the share says that part came from the cache."""
    import run

    original, small = ElmoConfig(), ElmoConfig(cell_size=1024, projection_dim=128, num_highway_layers=1)
    assert run.reread_bytes(original, "hf-cold") == 40 * 2**20 and run.reread_bytes(original, "allennlp") == 72 * 2**20
    zen5, xeon = {"L1": "48K", "L2": "1024K", "L3": "32768K"}, {"L1": "48K", "L2": "2048K", "L3": "266240K"}
    assert run.bandwidth_share(1.51, run.reread_bytes(original, "hf-cold"), zen5) == (
        "151% of bandwidth, partly from the L3 cache")
    assert run.bandwidth_share(1.01, run.reread_bytes(original, "hf-cold"), xeon) == "weights in the L3 cache"
    assert run.bandwidth_share(0.45, run.reread_bytes(small, "hf-warm"), zen5) == "weights in the L3 cache"
    assert run.bandwidth_share(0.7, run.reread_bytes(original, "hf-cold"), {"L3": "8192K"}) == "70% of bandwidth"
    assert run.bandwidth_share(0.7, run.reread_bytes(original, "hf-cold"), {}) == "70% of bandwidth"
    # The bounds themselves: weights exactly the L3's size fit; up to 4 times it, part of them comes from it.
    assert run.bandwidth_share(0.7, 32 * 2**20, zen5) == "weights in the L3 cache"
    assert run.bandwidth_share(0.7, 4 * 32 * 2**20, zen5) == "70% of bandwidth, partly from the L3 cache"
    assert run.bandwidth_share(0.7, 4 * 32 * 2**20 + 1, zen5) == "70% of bandwidth"
