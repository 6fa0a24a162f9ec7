"""The timing arithmetic of gpu_profile.py, memory_rates.py, optimizer_speed.py, compile_speed.py,
embed_host_side.py and embed_batching.py, on a made-up clock or checked against the figures each prints (no GPU); and
what each benchmark script refuses (counts, files, folders, interpreters), in one line before any work."""

import re
import subprocess
import sys
import types

import pytest
import torch
from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_profile  # noqa: E402
import memory_rates  # noqa: E402
import optimizer_speed  # noqa: E402


@pytest.fixture(autouse=True)
def threads_kept():
    """The programs' main() sets torch's number of threads (--threads): the tests after these keep theirs."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


class Calls:
    """A call that takes the next of `durations` seconds on a made-up clock."""

    def __init__(self, durations):
        self.now, self.durations, self.count, self.before = 0.0, list(durations), 0, []

    def clock(self):
        return self.now

    def __call__(self, *arguments):
        self.now += self.durations[self.count]
        self.count += 1


def test_gpu_profile_times_a_call_after_as_many_warm_up_calls(monkeypatch):
    call = Calls([10.0, 10.0, 10.0, 1.0, 2.0, 3.0])
    monkeypatch.setattr(gpu_profile, "time", types.SimpleNamespace(perf_counter=call.clock))
    assert gpu_profile.timed(call, 3) == pytest.approx(2.0) and call.count == 6


def test_gpu_profile_inference_words_per_second_is_the_batchs_words_over_its_time(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_profile, "DEVICE", "cpu")
    report = gpu_profile.Report(tmp_path)
    printed = []
    monkeypatch.setattr(report, "line", printed.append)
    gpu_profile.inference(report, 2, None)
    milliseconds, rate = re.search(r": ([\d.]+) ms, ([\d,]+) words/s", printed[0]).groups()
    assert float(rate.replace(",", "")) == pytest.approx(25 * 2 / (float(milliseconds) / 1e3), rel=0.02), printed


def test_memory_rates_median_of_the_timed_calls_after_one_untimed_with_the_cache_emptied_before_each(monkeypatch):
    call = Calls([50.0, 1.0, 7.0, 2.0])
    monkeypatch.setattr(memory_rates, "time", types.SimpleNamespace(perf_counter=call.clock))
    emptied = []
    assert memory_rates.median_seconds(call, 3, before=lambda: emptied.append(call.count)) == 2.0
    assert call.count == 4 and emptied == [1, 2, 3]


def test_optimizer_speed_medians_leave_out_the_first_fifth_of_the_steps(monkeypatch, capsys):
    seconds = iter([100.0, 1000.0, 1.0, 10.0, 2.0, 20.0, 3.0, 30.0, 4.0, 40.0])  # (fused, loop alternating)
    monkeypatch.setattr(optimizer_speed, "timed", lambda step: (next(seconds),))
    monkeypatch.setattr(optimizer_speed, "CASES", optimizer_speed.CASES[:1])
    results = optimizer_speed.main(["--steps", "5", "--threads", "1"])
    assert results[0]["fused"] == 2500.0 and results[0]["loop"] == 25000.0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(": fused 2500.0 ms, loop 25000.0 ms, loop / fused 10.0"), lines
    assert lines[1].startswith("(medians of 4 steps; 1 threads; "), lines


def test_compile_speed_medians_and_their_ratio(tmp_path, monkeypatch, capsys):
    import compile_speed

    text = tmp_path / "sentences.txt"
    text.write_text("".join(f"sentence {k} of the {k % 7} cats .\n" for k in range(40)))
    # (start and stop of each timed call: eager 1, 2, 9 s and compiled 1, 1, 7 s a case, alternating)
    durations = [1.0, 1.0, 2.0, 1.0, 9.0, 7.0] * 2
    ticks = iter([t for d in durations for t in (0.0, d)])
    monkeypatch.setattr(compile_speed, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
    results = compile_speed.main(["--file", str(text), "--rounds", "3", "--threads", "1"])
    assert [(r["eager_s"], r["compiled_s"], r["ratio"]) for r in results] == [(2.0, 1.0, 0.5)] * 2
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "32 sentences: eager 2000.0 ms, compiled 1000.0 ms, compiled / eager 0.500", lines


def test_embed_host_side_prints_encode_words_against_the_call(tmp_path):
    result = subprocess.run([sys.executable, REPO / "benchmarks" / "embed_host_side.py", "--sentences", "200",
                             "--batch-size", "64", "--folder", str(tmp_path)], cwd=REPO, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rates = {line.split(":")[0].strip(): line for line in result.stdout.splitlines()[1:]}
    call = float(re.search(r"([\d,]+) words/s", rates["tokenizer call"]).group(1).replace(",", ""))
    encode, times = re.search(r"([\d,]+) words/s \(([\d.]+)x\)", rates["encode_words"]).groups()
    assert float(times) == pytest.approx(float(encode.replace(",", "")) / call, abs=0.051), result.stdout


def test_embed_batching_times_both_ways_in_turns_each_from_empty_caches():
    import embed_batching

    order = []
    call = Calls([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    ways = {"file": lambda: (order.append("file"), call()), "sorted": lambda: (order.append("sorted"), call())}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(embed_batching, "time", types.SimpleNamespace(perf_counter=call.clock))
        seconds = embed_batching.timed_rounds(ways, 3, before=lambda: order.append("emptied"))
    assert order == ["emptied", "file", "emptied", "sorted", "emptied", "sorted", "emptied", "file", "emptied", "file",
                     "emptied", "sorted"]
    assert seconds == {"file": [1.0, 4.0, 5.0], "sorted": [2.0, 3.0, 6.0]}


def test_embed_batching_prints_the_medians_their_ratio_and_the_cpu(tmp_path, monkeypatch, capsys):
    import embed_batching

    from hf_elmo import ElmoConfig, ElmoModel, ElmoTokenizer
    from hf_elmo.fast_linear import cpu_name

    tiny = ElmoConfig(char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 4]], num_highway_layers=1,
                      projection_dim=4, cell_size=8, num_lstm_layers=2)
    ElmoModel(tiny).save_pretrained(tmp_path)
    ElmoTokenizer().save_pretrained(tmp_path)
    cached_at_start = []  # (words in the token cache when each timed way begins)
    timed_rounds = embed_batching.timed_rounds

    def observed(ways, rounds, before):
        cache = before.__self__.char_encoder.token_cache  # (before: the model's clear_caches)
        watched = {name: lambda way=way: (cached_at_start.append(len(cache)), way()) for name, way in ways.items()}
        return timed_rounds(watched, rounds, before)

    monkeypatch.setattr(embed_batching, "timed_rounds", observed)
    medians = embed_batching.main(["--model", str(tmp_path), "--sentences", "12", "--batch-size", "4", "--rounds", "3"])
    assert cached_at_start == [0] * 6
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("12 sentences, ") and lines[0].endswith(" words, batch size 4, 1 thread(s)"), lines
    assert f"{medians['file order']:8.2f} s" in lines[1] and f"{medians['length-sorted']:8.2f} s" in lines[2]
    assert f"{medians['file order'] / medians['length-sorted']:8.2f}x" in lines[3]
    assert lines[4] == f"(medians of 3 rounds, each way from empty caches; {cpu_name()}, torch {torch.__version__})"


def test_gpu_profile_kernel_time_and_count_are_per_call(tmp_path, monkeypatch):
    """(torch.profiler stood in for: on the CPU it records no CUDA kernel) 6 kernels of 1,000 us over 2 calls, and a
    host event: 3 ms of kernels and 3 kernels a call."""
    cuda, cpu = gpu_profile.torch.autograd.DeviceType.CUDA, gpu_profile.torch.autograd.DeviceType.CPU
    events = [types.SimpleNamespace(device_type=cuda, device_time_total=1000.0) for _ in range(6)]
    events.append(types.SimpleNamespace(device_type=cpu, device_time_total=0.0))

    class FakeProfile:
        def __init__(self, activities):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exception):
            return False

        def events(self):
            return events

        def key_averages(self):
            return types.SimpleNamespace(table=lambda **keywords: "table")

    monkeypatch.setattr(gpu_profile, "profile", FakeProfile)
    calls = []
    assert gpu_profile.Report(tmp_path).profiled("part", lambda: calls.append(1), 2) == (3.0, 3.0)
    assert len(calls) == 2


def test_memory_rates_reports_the_emptied_cache_call_as_main_memory_and_the_other_as_cache(monkeypatch, capsys):
    monkeypatch.setattr(memory_rates, "memory_bandwidth", lambda: {"bandwidth_buffer_mib": 1.0, "bandwidth_gbs": 1.0})
    monkeypatch.setattr(memory_rates, "cpu0_caches", lambda: {"L3": "1024K"})
    kernel = next(iter(memory_rates.float32_kernels().items()))
    monkeypatch.setattr(memory_rates, "float32_kernels", lambda: dict([kernel]))
    emptied = []

    def fake_median_seconds(call, repeats, before=None):
        if before is not None:
            before()
            emptied.append(True)
        return 2.0 if before is not None else 1.0

    monkeypatch.setattr(memory_rates, "median_seconds", fake_median_seconds)
    memory_rates.main(["--repeats", "1", "--threads", "1"])
    lines = [line for line in capsys.readouterr().out.splitlines() if "main memory" in line and "cache" in line]
    assert len(lines) == 3 and len(emptied) == 3
    assert all(": main memory 2000.00 ms (" in line and "), cache 1000.00 ms (" in line for line in lines), lines


def test_embed_host_side_times_embed_on_its_second_pass(tmp_path, monkeypatch, capsys):
    """The first pass, made 2 s slower here, is left out of embed's host-side words/s."""
    import time

    import embed_host_side

    calls = []

    class FirstPassSlow(embed_host_side.ElmoEmbedder):
        def embed_file(self, *arguments, **keywords):
            calls.append(1)
            if len(calls) == 1:
                time.sleep(2.0)
            return super().embed_file(*arguments, **keywords)

    monkeypatch.setattr(embed_host_side, "ElmoEmbedder", FirstPassSlow)
    monkeypatch.setattr(sys, "argv", ["embed_host_side.py", "--sentences", "100", "--batch-size", "64", "--folder",
                                      str(tmp_path)])
    embed_host_side.main()
    lines = capsys.readouterr().out.splitlines()
    words = int(re.search(r"(\d+) words, batches", lines[0]).group(1))
    rate = float(re.search(r"([\d,]+) words/s", lines[3]).group(1).replace(",", ""))
    assert len(calls) == 2 and rate > words / 2.0, lines


@pytest.mark.parametrize("script, args, message", [
    ("run.py", ["--rounds", "0"], "argument --rounds: must be at least 1, got 0"),
    ("run.py", ["--threads", "x"], "argument --threads: must be a whole number, got 'x'"),
    ("run.py", ["--sizes", "elmoformanylangs"], "--sizes takes original, small (one at least) and elmoformanylangs, "
                                                "got 'elmoformanylangs'"),
    ("run.py", ["--sizes", "foo"], "--sizes takes original, small (one at least) and elmoformanylangs, got 'foo'"),
    ("run.py", ["--allennlp-python", sys.executable, "--sizes", "small,elmoformanylangs", "--elmoformanylangs-python",
                "/nonexistent/python"], "error: no ELMoForManyLangs interpreter at /nonexistent/python"),
    ("train_bench.py", ["--ptb-steps", "20"], "--ptb-steps must be 0 (no pretrain.py runs) or at least 30"),
    ("train_bench.py", ["--ptb-runs", "0"], "argument --ptb-runs: must be at least 1, got 0"),
    ("train_bench.py", ["--sizes", "big"], "--sizes takes original, small, got 'big'"),
    ("train_bench.py", ["--ptb-steps", "29"], "--ptb-steps must be 0 (no pretrain.py runs) or at least 30"),
    # (0 is taken: the next check, of the interpreter, is what refuses it here)
    ("train_bench.py", ["--ptb-steps", "0", "--allennlp-python", "/nonexistent/python"],
     "error: no AllenNLP interpreter at /nonexistent/python"),
    ("train_bench.py", ["--allennlp-python", sys.executable, "--ptb-dir", "/nonexistent"],
     "error: no /nonexistent/train.txt; run `make ptb-data`"),
    ("run.py", ["--allennlp-python", "/nonexistent/python"], "error: no AllenNLP interpreter at /nonexistent/python"),
    ("gpu_bench.py", ["--device", "cpu", "--sizes", "big"], "--sizes takes original, small, got 'big'"),
    *([("gpu_bench.py", ["--device", "cuda"], "error: no CUDA device visible to torch")]
      if not torch.cuda.is_available() else []),
    ("compile_speed.py", ["--rounds", "0"], "argument --rounds: must be at least 1, got 0"),
])
def test_counts_and_names_a_benchmark_cannot_use_are_refused_before_it_runs(script, args, message):
    """0 rounds (or runs, or fewer pretrain.py steps than its timed intervals need) ended in "no median for empty
    data" after the whole benchmark had run; an unknown or lone elmoformanylangs size in a StopIteration after it; a
    missing ELMoForManyLangs interpreter after every AllenNLP round. Each is one error before any work."""
    result = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args], capture_output=True, text=True,
                            timeout=120)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 2 and message in last and "Traceback" not in result.stderr, result.stderr


def refusal(monkeypatch, capsys, script: str, args: list[str]) -> str:
    """The one error line with which `script`'s main(), run in this process on `args`, refuses them (exit status 2,
    no traceback: an exception would fail the test)."""
    import importlib

    module = importlib.import_module(script.removesuffix(".py"))
    monkeypatch.setattr(sys, "argv", [script, *args])
    try:
        status = module.main()
    except SystemExit as exit:
        status = exit.code
    error = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and error, error
    return error[-1]


def test_gpu_profile_refuses_an_output_folder_under_a_file_and_an_unknown_part(tmp_path, monkeypatch, capsys):
    """OUTPUT_DIR under a file ended in NotADirectoryError's traceback; it is refused before any part runs."""
    (tmp_path / "file").write_text("")
    line = refusal(monkeypatch, capsys, "gpu_profile.py", [str(tmp_path / "file" / "out"), "gemm"])
    assert line.endswith(f"error: OUTPUT_DIR: {tmp_path / 'file'}: is a file, so {tmp_path / 'file' / 'out'} cannot "
                         "be written (a folder belongs there)"), line
    line = refusal(monkeypatch, capsys, "gpu_profile.py", [str(tmp_path / "out"), "gpu"])
    assert line.endswith("error: argument PART: takes train, train-layers, original, inference, gemm, got 'gpu'"), line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("script, made_by", [("run.py", "make bench does"), ("train_bench.py", "make bench-train does")])
def test_the_cpu_benchmarks_refuse_an_interpreter_that_cannot_run_and_outputs_that_cannot_be_written(
        script, made_by, tmp_path, monkeypatch, capsys):
    """make bench and make bench-train: a file given for AllenNLP's interpreter that is no program failed with "Exec
    format error" once the models were made; a --work-dir under a file with NotADirectoryError; an --output that
    cannot be written (a folder, under a file) only once it was written, after the whole benchmark. Each is one line
    naming it, before any work (the work folder is not made)."""
    (tmp_path / "ptb").mkdir()
    (tmp_path / "ptb" / "train.txt").write_text("a b c\n")
    (tmp_path / "file").write_text("")
    text, garbage, failing = tmp_path / "text", tmp_path / "garbage", tmp_path / "failing"
    text.write_text("not a program\n")
    garbage.write_bytes(b"\x00\x01 no format the system runs\n")
    failing.write_text("#!/bin/sh\nexit 3\n")
    garbage.chmod(0o755)
    failing.chmod(0o755)
    work, output = tmp_path / "work", tmp_path / "out.md"
    common = ["--sizes", "small", *(["--ptb-dir", str(tmp_path / "ptb")] if script == "train_bench.py" else [])]
    setup = f"; run `bash ../shared/tools/peer-allennlp-setup.sh build/allennlp-venv` ({made_by})"
    cases = [
        (["--allennlp-python", str(text)], f"error: {text}: not executable, so no AllenNLP interpreter{setup}"),
        (["--allennlp-python", str(garbage)],
         f"error: {garbage}: cannot be run (Exec format error), so no AllenNLP interpreter{setup}"),
        (["--allennlp-python", str(failing)],
         f"error: {failing} -c pass: exit status 3, so no working AllenNLP interpreter{setup}"),
        (["--work-dir", str(tmp_path / "file" / "work")],
         f"error: --work-dir: {tmp_path / 'file'}: is a file, so {tmp_path / 'file' / 'work'} cannot be written"),
        (["--output", str(tmp_path / "file" / "out.md")],
         f"error: --output: {tmp_path / 'file'}: is a file, so {tmp_path / 'file' / 'out.md'} cannot be written"),
        (["--output", str(tmp_path)], f"error: --output: {tmp_path}: is a folder; give the path of the file to write"),
    ]
    for args, message in cases:
        given = ["--allennlp-python", sys.executable, "--work-dir", str(work), "--output", str(output), *common, *args]
        line = refusal(monkeypatch, capsys, script, given)
        assert message in line, line
        assert not work.exists() and not output.exists()


UNDER_A_FILE = "error: --output: {tmp}/file: is a file, so {tmp}/file/out.md cannot be written"
A_FOLDER = "error: --output: {tmp}: is a folder; give the path of the file to write"


@pytest.mark.parametrize("script, args, message", [
    ("gpu_bench.py", ["--device", "foo"], "error: argument --device: takes cpu, cuda or cuda:N, got 'foo'"),
    ("gpu_bench.py", ["--device", "meta"], "error: argument --device: takes cpu, cuda or cuda:N, got 'meta'"),
    ("gpu_bench.py", ["--runs", "0"], "error: argument --runs: must be at least 1, got 0"),
    ("gpu_bench.py", ["--embed-sentences", "0"], "error: argument --embed-sentences: must be at least 1, got 0"),
    ("gpu_bench.py", ["--batch-sizes", "x"], "error: argument --batch-sizes: must be a whole number, got 'x'"),
    ("gpu_bench.py", ["--batch-sizes", "32,0"], "error: argument --batch-sizes: must be at least 1, got 0"),
    ("gpu_bench.py", ["--output", "{tmp}/file/out.md"], UNDER_A_FILE),
    ("gpu_bench.py", ["--output", "{tmp}"], A_FOLDER),
    ("gpu_train_bench.py", ["--smoke", "--output", "{tmp}/file/out.md"], UNDER_A_FILE),
    ("gpu_train_bench.py", ["--smoke", "--output", "{tmp}"], A_FOLDER),
])
def test_the_gpu_benchmarks_refuse_devices_counts_and_outputs_they_cannot_use(script, args, message, tmp_path,
                                                                              monkeypatch, capsys):
    """gpu.sh's halves, on the CPU: an unknown --device was torch's RuntimeError; --runs 0 and a batch size that is
    no whole number ended in the report as failed checks; an --output under a file was found after the first
    measurement, and gpu_train_bench.py's --output that is a folder at the end. Each is one line, before any work."""
    (tmp_path / "file").write_text("")
    args = [arg.format(tmp=tmp_path) for arg in args]
    common = (["--device", "cpu", "--sizes", "small", "--batch-sizes", "2", "--runs", "1", "--no-checks"]
              if script == "gpu_bench.py" else ["--device", "cpu"])
    line = refusal(monkeypatch, capsys, script, [*common, *args])
    assert message.format(tmp=tmp_path) in line, line
    assert sorted(path.name for path in tmp_path.iterdir()) == ["file"]


@pytest.mark.parametrize("lines, message", [
    (None, "error: --file: {tmp}/text.txt: text file not found"),
    ("folder", "error: --file: {tmp}/text.txt: is a folder, not a file"),
    (["a sentence ."] * 32 + ["", "  "], "error: --file {tmp}/text.txt: 32 sentences (lines that are not blank); it "
                                         "needs 33, 32 for the batch case and one more for the one-sentence case"),
])
def test_compile_speed_refuses_a_file_it_cannot_read_or_too_short_for_both_cases(lines, message, tmp_path,
                                                                                 monkeypatch, capsys):
    """A --file that is missing or a folder was a traceback; one of fewer than 33 sentences timed an empty batch as
    the one-sentence case (and a short one as the 32 sentences') without a word. Each is refused, naming it."""
    text = tmp_path / "text.txt"
    if lines == "folder":
        text.mkdir()
    elif lines is not None:
        text.write_text("\n".join(lines) + "\n")
    line = refusal(monkeypatch, capsys, "compile_speed.py", ["--file", str(text)])
    assert message.format(tmp=tmp_path) in line, line


def test_compile_speed_reads_its_default_file_from_the_repository_root(tmp_path, monkeypatch, capsys):
    """data/ptb/valid.txt was read from the current folder: started elsewhere, it was not found."""
    import compile_speed

    read = []

    def reading(path, *arguments):
        read.append(path)
        raise ValueError(f"{path}: read")

    monkeypatch.setattr(compile_speed, "read_text_file", reading)
    monkeypatch.chdir(tmp_path)
    refusal(monkeypatch, capsys, "compile_speed.py", [])
    assert read == [REPO / "data" / "ptb" / "valid.txt"]


@pytest.mark.parametrize("script, args, message", [
    *[(script, [option, "0"], f"error: argument {option}: must be at least 1, got 0")
      for script, options in [("embed_batching.py", ["--threads", "--rounds", "--batch-size", "--sentences"]),
                              ("embed_pinned_caches.py", ["--threads", "--rounds", "--batch-size", "--sentences"]),
                              ("embed_host_side.py", ["--batch-size", "--sentences"]),
                              ("memory_rates.py", ["--threads", "--repeats"]),
                              ("optimizer_speed.py", ["--threads", "--steps"]),
                              ("elmoformanylangs_bench.py", ["--threads", "--rounds"])]
      for option in options],
    ("embed_host_side.py", ["--folder", "{tmp}/missing"], "error: --folder {tmp}/missing: no such folder"),
    ("embed_host_side.py", ["--folder", "{tmp}/file"], "error: --folder: {tmp}/file: is a file, not a folder"),
    ("elmoformanylangs_bench.py", ["--elmoformanylangs-python", "{tmp}/missing/python"],
     "error: no ELMoForManyLangs interpreter at {tmp}/missing/python; run `bash ../shared/tools/"
     "peer-elmoformanylangs-setup.sh build/elmoformanylangs-venv` (`make build/elmoformanylangs-venv/bin/python` does)"),
    ("elmoformanylangs_bench.py", ["--elmoformanylangs-python", "{tmp}/file"],
     "error: {tmp}/file: not executable, so no ELMoForManyLangs interpreter"),
    ("elmoformanylangs_bench.py", ["--work-dir", "{tmp}/file/work"],
     "error: --work-dir: {tmp}/file: is a file, so {tmp}/file/work cannot be written"),
])
def test_the_micro_benchmarks_refuse_counts_folders_and_interpreters_they_cannot_use(script, args, message, tmp_path,
                                                                                     monkeypatch, capsys):
    """0 threads was torch's RuntimeError; 0 rounds, repeats or steps a median of nothing, 0 sentences or a batch
    size of 0 an error deep inside, some after minutes of work; embed_host_side.py's --folder that does not exist
    FileNotFoundError after the tokenizer's timing; elmoformanylangs_bench.py without the ELMoForManyLangs venv
    FileNotFoundError naming its interpreter. Each is one line naming the option, and how to make the venv."""
    (tmp_path / "file").write_text("")
    args = [arg.format(tmp=tmp_path) for arg in args]
    common = ["--elmoformanylangs-python", sys.executable, "--work-dir", str(tmp_path / "work")] \
        if script == "elmoformanylangs_bench.py" else []
    line = refusal(monkeypatch, capsys, script, [*common, *args])
    assert message.format(tmp=tmp_path) in line, line
    assert sorted(path.name for path in tmp_path.iterdir()) == ["file"]
