"""README promises that no other test held: each test names the sentence it checks."""

import importlib
import json
import re
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import FIXTURES, README, REPO
from hf_elmo import ElmoModel
from hf_elmo.default_model import DEFAULT_MODEL_DIR, default_model_path
from modeling.export_default import LAYER_ANALYSIS_END, LAYER_ANALYSIS_START, analysed_weights, weights_key

TRAIN = FIXTURES / "bilm-tf" / "train"
TINY_RUN = ["--preset", "tiny", "--train-file", TRAIN / "data.txt", "--validation-file", TRAIN / "data.txt",
            "--logging-steps", 1, "--save-steps", 5, "--seed", 7]


def readme_text() -> str:
    """The README with its lines joined, so that a sentence can be matched across line breaks."""
    return " ".join(README.read_text(encoding="utf-8").split())


def pretrain(capsys, *args) -> None:
    from modeling import pretrain as program

    code = program.main([str(arg) for arg in args])
    err = capsys.readouterr().err
    assert code == 0, err[-2000:]


def test_a_resume_may_raise_max_steps_and_ends_as_the_longer_uninterrupted_run(tmp_path, capsys):
    """README, "Resume after a crash": "A resumed run refuses options that would change the training ...;
    `--max-steps` may grow." A 10-step run resumed with --max-steps 15 is accepted and ends with the weights and the
    logged losses of an uninterrupted 15-step run (the tiny preset's learning rate is constant)."""
    assert "`--max-steps` may grow" in readme_text()
    pretrain(capsys, *TINY_RUN, "--max-steps", 10, "--output-dir", tmp_path / "grown")
    pretrain(capsys, *TINY_RUN, "--max-steps", 15, "--output-dir", tmp_path / "grown", "--resume")
    pretrain(capsys, *TINY_RUN, "--max-steps", 15, "--output-dir", tmp_path / "straight")
    grown, straight = (load_file(tmp_path / name / "model.safetensors") for name in ("grown", "straight"))
    assert grown.keys() == straight.keys()
    for name, tensor in straight.items():
        assert torch.equal(grown[name], tensor), name

    def losses(name: str) -> list:
        records = [json.loads(line) for line in (tmp_path / name / "log.jsonl").read_text().splitlines()]
        return [(r["step"], r["loss"]) for r in records if "loss" in r]

    assert [step for step, _ in losses("grown")] == list(range(1, 16))
    assert losses("grown") == losses("straight")
    assert json.loads((tmp_path / "grown" / "trainer_state.json").read_text())["step"] == 15


def card_text() -> str:
    return (DEFAULT_MODEL_DIR / "README.md").read_text(encoding="utf-8")


def test_the_readmes_default_model_figures_are_the_packaged_models():
    """README, "The default model": "26.5 MB of safetensors", "6,636,557 parameters", the training run and the
    held-out perplexity are those of hf_elmo/default-model and of its card (which export_default.py writes from the
    run), not figures of an earlier model."""
    readme = readme_text()
    size = re.search(r"`hf_elmo/default-model/` \(([\d.]+) MB of safetensors", readme)[1]
    assert f"{(DEFAULT_MODEL_DIR / 'model.safetensors').stat().st_size / 1e6:.1f}" == size
    parameters = re.search(r"Kim et al.'s small character CNN; ([\d,]+) parameters \|", readme)[1]
    model = ElmoModel.from_pretrained(default_model_path())
    assert f"{sum(p.numel() for p in model.parameters()):,}" == parameters
    card = card_text()
    assert f"| parameters | {parameters} |" in card

    # "12,158 steps of 64 x 20 words (2.5 epochs), 96 minutes": the card's training paragraph.
    steps, rows, words, epochs, minutes = re.search(
        r"`make pretrain-default` \(seeded\): ([\d,]+) steps of (\d+) x (\d+) words \(([\d.]+) epochs\), (\d+) minutes",
        readme).groups()
    card_training = " ".join(card.split())
    assert f"{steps} steps of {rows} rows x {words} words" in card_training
    assert f"{epochs} epochs)" in card_training and f"{minutes} minutes of training" in card_training
    config = model.config
    assert (config.cell_size, config.projection_dim) == (640, 256)

    # "forward 100.5, backward 100.4, average 100.4 (full softmax, 62,391 words per direction); the previous default
    # model ... had 162.9": the card's rows for this corpus's held-out text and for the previous model.
    forward, backward, average, targets = re.search(
        r"held-out perplexity \| forward ([\d.]+), backward ([\d.]+), average ([\d.]+) \(full softmax, ([\d,]+) words "
        r"per direction\)", readme).groups()
    row = re.search(r"^\| this model \| [^|]+ \| [^|]+ \| this corpus's \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d,]+) \|$",
                    card, re.MULTILINE)
    assert row and row.groups() == (forward, backward, average, targets), row
    previous = re.search(r"^\| previous default model \|(?: [^|]+ \|){3} [\d.]+ \| [\d.]+ \| ([\d.]+) \|", card, re.MULTILINE)
    assert previous and f"the same documents, where this one has {forward}" in readme
    assert f"had {previous[1]} on the same documents" in readme

    # "on 6.0M words of English ... and Chinese", "96 minutes on 2 cores of an Intel Xeon": the card's corpus and CPU.
    corpus = int(re.search(r"([\d,]+) training words;", card_training)[1].replace(",", ""))
    assert f"on {corpus / 1e6:.1f}M words of English" in " ".join(readme.split())
    assert "96 minutes of training on Intel(R) Xeon(R)" in card_training and "2 cores of an Intel Xeon |" in readme


def test_the_make_targets_run_the_commands_the_readme_gives():
    """README: `make demo` runs `hf-elmo demo --plot build/elmo-senses.png`; `make pretrain-default` trains with
    `modeling/pretrain.py --preset default` (seeded) and exports with `modeling/export_default.py`; `make
    layer-analysis` runs `modeling/layer_analysis.py` over three seeds into build/layer-analysis and the default
    model's card. Seen in a dry run (`make -n`), which runs nothing."""
    readme = readme_text()
    assert "`make demo` runs `hf-elmo demo --plot build/elmo-senses.png`" in readme
    assert "`modeling/pretrain.py --preset default` trains, and `modeling/export_default.py` writes the biLM" in readme
    assert "`make pretrain-default` (seeded)" in readme and "cached in `build/layer-analysis/`" in readme
    assert "each task model once for each of three seeds. The table also goes into the default model's card" in readme

    def dry_run(target: str) -> str:
        # (the data targets' files may be missing on a fresh checkout: their commands are only printed too)
        result = subprocess.run(["make", "-n", "--no-print-directory", "-C", str(REPO), target], capture_output=True,
                                text=True, check=True)
        return " ".join(result.stdout.replace("\\\n", " ").split())

    # (bin/ of the venv the run uses: make test-floors has its own)
    assert "bin/hf-elmo demo --plot build/elmo-senses.png" in dry_run("demo")
    pretraining = dry_run("pretrain-default")
    assert re.search(r"modeling/pretrain\.py --preset default .* --seed 1 ", pretraining), pretraining
    assert "modeling/export_default.py --run-dir build/default-model --sources data/default/sources.json" in pretraining
    analysis = dry_run("layer-analysis")
    assert re.search(r"modeling/layer_analysis\.py .*--seeds 0 1 2 --output-dir build/layer-analysis --update-card "
                     r"hf_elmo/default-model/README\.md", analysis), analysis


def test_the_readmes_layer_analysis_is_the_one_in_the_default_models_card():
    """README, "The paper's layer analysis": "The table also goes into the default model's card." The README's table
    and its findings are the card's layer-analysis section, line for line."""
    readme = README.read_text(encoding="utf-8")
    card = card_text()
    section = card.split(LAYER_ANALYSIS_START, 1)[1].split(LAYER_ANALYSIS_END, 1)[0]
    table_and_findings = [line for line in section.splitlines() if line.startswith(("|", "- "))]
    assert len(table_and_findings) == 2 + 7 + 5  # header, rule, rows (a) to (g), the five findings
    start = readme.index("| input to the task model |")
    shown = readme[start:].split("\n\nNER: ", 1)[0].splitlines()
    assert [line for line in shown if line] == table_and_findings
    # The section measured the packaged weights (an export of other weights would have dropped it), and the
    # paragraph of settings after the findings is the card's too.
    assert analysed_weights(section.strip()) == weights_key(ElmoModel.from_pretrained(default_model_path()))
    paragraph = lambda text: " ".join(text.split("\n\nNER: CoNLL-2003", 1)[1].split("\n\n", 1)[0].split())  # noqa: E731
    assert paragraph(readme) == paragraph(section)


def test_the_readmes_account_of_the_layer_analysis_is_the_cards_table():
    """README, the paragraphs after the layer-analysis table: every figure they derive from it (differences, the
    ratio of a gap to the seeds' spread, the ranges of the spreads) is the table's, so a new analysis cannot leave
    them stale."""
    section = card_text().split(LAYER_ANALYSIS_START, 1)[1].split(LAYER_ANALYSIS_END, 1)[0]
    rows = {}
    for line in section.splitlines():
        cell, spread = r" \| ([\d.]+)", r" ± ([\d.]+)"
        match = re.match(rf"\| \((\w)\) .*?{cell}{spread}{cell}{cell}{spread}{cell} \|$", line)
        if match:
            ner, ner_sd, _, pos, pos_sd, _ = map(float, match.groups()[1:])
            rows[match.group(1)] = {"ner": ner, "ner_sd": ner_sd, "pos": pos, "pos_sd": pos_sd}
    assert sorted(rows) == list("abcdefg")
    a, b, c, d, e, _, g = (rows[letter] for letter in "abcdefg")
    trained = [rows[letter] for letter in "bcdefg"]
    text = " ".join(readme_text().split("### The paper's layer analysis", 1)[1].split("## Converting")[0].split())
    gap = d["pos"] - c["pos"]
    assert gap > 4 * max(c["pos_sd"], d["pos_sd"])
    for phrase in [
        f"layer 0 beats the untrained character CNN by {b['ner'] - a['ner']:.0f} F1 and {b['pos'] - a['pos']:.0f} "
        "accuracy points",
        f"for NER {e['ner']:.2f} against the first layer's {c['ner']:.2f}, for POS {e['pos']:.2f} against the second "
        f"layer's {d['pos']:.2f}",
        f"for POS the first biLSTM layer is {gap:.2f} points *below* the second "
        f"({c['pos']:.2f} against {d['pos']:.2f})",
        f"more than four times the standard deviation between seeds ({max(c['pos_sd'], d['pos_sd']):.2f})",
        f"{c['pos'] - g['pos']:.2f} points below layer 1 for POS ({g['pos']:.2f} against {c['pos']:.2f})",
        f"for NER even below layer 0 ({g['ner']:.2f})",
        f"it lifts a linear POS probe by {gap:.2f} points",
        f"The first layer is the better one for NER ({c['ner']:.2f} against {d['ner']:.2f})",
        f"up to {max(row['ner_sd'] for row in trained):.2f} F1 for NER",
        f"shows the mix {e['ner'] - c['ner']:.2f} ahead",
        f"({min(row['ner_sd'] for row in trained):.1f} to {max(row['ner_sd'] for row in trained):.1f} F1 against "
        f"{min(row['pos_sd'] for row in trained):.2f} to {max(row['pos_sd'] for row in trained):.2f} points; the "
        f"untrained baseline {a['ner_sd']:.1f} F1)",
    ]:
        assert phrase in text, phrase
    assert g["ner"] < b["ner"] and c["ner"] > d["ner"] and e["ner"] > max(b["ner"], c["ner"], d["ner"])


def test_the_layer_analysis_pos_data_is_the_readmes():
    """README, "The paper's layer analysis": "POS: Brown corpus (8,000 / 1,355 / 1,486 sentences; 138 tags, the Brown
    tags without their title, headline, foreign-word and cited markers)", as `make data` writes data/brown-pos."""
    from modeling.layer_analysis import read_brown

    train, validation, test, tag_count = map(lambda figure: int(figure.replace(",", "")), re.search(
        r"POS: Brown corpus \(([\d,]+) / ([\d,]+) / ([\d,]+) sentences; (\d+) tags, the Brown tags without their title, "
        r"headline, foreign-word and cited markers\)", readme_text()).groups())
    splits, tags = read_brown(REPO / "data" / "brown-pos")
    assert {name: len(words) for name, (words, _) in splits.items()} == {"train": train, "validation": validation,
                                                                        "test": test}
    assert len(tags) == tag_count
    # Brown's markers: -tl (title), -hl (headline), fw- (foreign word), -nc (cited)
    marked = [tag for tag in tags if re.search(r"-(tl|hl|nc)\b|^fw-", tag)]
    assert marked == []
    for words, rows in splits.values():
        assert [len(row) for row in rows] == [len(sentence) for sentence in words]


# Options of the other tools the README's commands run: pip, accelerate launch, torchrun.
OTHER_TOOLS_OPTIONS = {"--index-url", "--no-deps", "--config_file", "--num_processes", "--standalone", "--nproc_per_node"}


def help_text(capsys, main, *argv) -> str:
    with pytest.raises(SystemExit) as stopped:
        main([*argv, "--help"])
    assert stopped.value.code == 0
    return capsys.readouterr().out


def test_every_option_the_readme_names_is_one_of_its_commands(capsys, monkeypatch):
    """Each `--option` in the README's commands and prose is accepted by the program it belongs to: a renamed or
    dropped option would leave the README telling users to type a command that fails."""
    from conversion import convert_elmoformanylangs, convert_original_elmo
    from hf_elmo import cli
    from modeling import evaluate, export_default, finetune, layer_analysis, pretrain

    texts = [help_text(capsys, cli.main), help_text(capsys, cli.main, "embed"), help_text(capsys, cli.main, "demo")]
    for program in (pretrain, finetune, evaluate, layer_analysis, export_default, convert_original_elmo,
                    convert_elmoformanylangs):
        texts.append(help_text(capsys, program.main))
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))  # (the script imports its neighbours, as test_benchmarks.py)
    gpu_train_bench = importlib.import_module("gpu_train_bench")
    monkeypatch.setattr("sys.argv", ["gpu_train_bench.py", "--help"])
    texts.append(help_text(capsys, lambda argv: gpu_train_bench.main()))
    accepted = set(re.findall(r"--[a-z][a-z0-9_-]*", " ".join(texts)))
    named = set(re.findall(r"--[a-z][a-z0-9_-]*", README.read_text(encoding="utf-8")))
    assert len(named) > 50
    assert named - OTHER_TOOLS_OPTIONS - accepted == set()


README_CPU_NAMES = {"family 26, model 2": "AMD EPYC Zen 5", "family 25, model 17": "AMD EPYC Zen 4",
                    "family 23, model 49": "AMD EPYC Zen 2", "GenuineIntel": "Intel Xeon"}


def results_speed_rows() -> dict:
    """benchmarks/RESULTS.md's words/s rows at the original size and ELMoForManyLangs' released size, keyed by
    (README case, README CPU name): [peer, hf_elmo cold, hf_elmo warm, cold ratio, warm ratio] as strings."""
    text = (REPO / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    rows = {}
    for section in text.split("\n## CPU: ")[1:]:
        heading = section.splitlines()[0]
        names = [name for key, name in README_CPU_NAMES.items() if key in heading]
        assert len(names) == 1, f"RESULTS.md section {heading!r} has no README name"
        for size, peer in (("### original", "AllenNLP"), ("### ELMoForManyLangs", "ELMoForManyLangs")):
            part = section.split(size, 1)[1].split("\n### ", 1)[0]
            for case in ("32 sentences", "1 sentence at a time"):
                cells = re.search(rf"^\| {case} \|(.*)\|$", part, re.M).group(1)
                rows[(f"{case}, against {peer}", names[0])] = [cell.strip() for cell in cells.split("|")]
    return rows


def test_the_readmes_speed_table_is_results_md():
    """README, Speed: "The figures below come from the four sections, each one run of 9 rounds": every row of its
    table (peer words/s, hf_elmo cold and warm, both ratios) is the row of benchmarks/RESULTS.md's section for that
    CPU, so that a new `make bench` run cannot leave the README quoting an older one."""
    expected = results_speed_rows()
    assert len(expected) == 16
    seen, case = {}, None
    for line in README.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 8 and cells[1] in README_CPU_NAMES.values():
            case = cells[0] or case
            seen[(case, cells[1])] = [cell.replace(",", "").replace("*", "") for cell in cells[2:7]]
    assert seen == expected


def test_the_readmes_account_of_each_cpu_section_is_results_md():
    """README, Speed: "The figures below come from the four sections": each CPU's date, ceilings (GFLOP/s, GB/s) and
    largest deviations from AllenNLP and ELMoForManyLangs are those of its section of benchmarks/RESULTS.md."""
    text = (REPO / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    readme = readme_text()
    paragraph = readme.split("The figures below come from the four sections", 1)[1]
    paragraph = paragraph.split("(The Zen 2 and Intel runs")[0]
    spans = {}
    for section in text.split("\n## CPU: ")[1:]:
        heading = section.splitlines()[0]
        (name,) = [name for key, name in README_CPU_NAMES.items() if key in heading]
        date = re.search(r"From one run of `make bench` on (\d{4}-\d\d-\d\d)", section)[1]
        gflops, bandwidth = re.search(r"Ceilings: (\d+) GFLOP/s fp32 matrix multiply.*?, ([\d.]+) GB/s memory",
                                      section).groups()
        allennlp = re.search(r"^\| original: every layer within 1e-5 of AllenNLP \| ([\d.e-]+) \|", section, re.M)[1]
        package = re.search(r"^\| ELMoForManyLangs size: every layer within 2e-5 of the package \| ([\d.e-]+) \|",
                            section, re.M)[1]
        start = paragraph.index(f"the {name} (") if f"the {name} (" in paragraph else paragraph.index(f"the {name}")
        spans[start] = (name, [date, f"{gflops} GFLOP/s", f"{bandwidth} GB/s",
                               *(f"{float(value):.1e}".replace("e-0", "e-") for value in (allennlp, package))])
    starts = sorted(spans)
    for index, start in enumerate(starts):
        name, figures = spans[start]
        part = paragraph[start:starts[index + 1] if index + 1 < len(starts) else len(paragraph)]
        for figure in figures:
            assert figure in part, (name, figure, part)


def test_the_readmes_training_table_is_training_md():
    """README, "The fast training path": every row of its training table (hf_elmo's fast words/s, the peer's or the
    plain path's, the ratio with its range, or the per-run ratios) is that of benchmarks/TRAINING.md's section for
    that CPU, and so are the loss drifts and the dates the text gives, so a new `make bench-train` cannot leave them
    stale."""
    text = (REPO / "benchmarks" / "TRAINING.md").read_text(encoding="utf-8")
    expected, drifts, dates = {}, {}, {}
    for section in text.split("\n## CPU: ")[1:]:
        heading = section.splitlines()[0]
        (name,) = [name for key, name in README_CPU_NAMES.items() if key in heading]
        dates[name] = re.search(r"From one run of `make bench-train` on (\d{4}-\d\d-\d\d)", section)[1]
        for size, case in (("small", "one step, Small size"), ("original", "one step, original size")):
            cells = [cell.strip() for cell in re.search(rf"^\| {size} \|(.*)\|$", section, re.M)[1].split("|")]
            allennlp, _, fast, ratio = cells[:4]
            expected[(case, name)] = [f"{int(fast):,} words/s", f"AllenNLP {allennlp}", ratio]
        fast, plain, ratio = (re.search(rf"^\| {row} \| \**([\d.]+x?)\** \|$", section, re.M)[1]
                              for row in (r"fast \(the default\)", r"plain \(`--plain-path`\)", "fast / plain"))
        runs = re.search(r"per-run ratios ([\d.]+), ([\d.]+)\.", section).groups()
        expected[("`pretrain.py --preset ptb-cpu`", name)] = [
            f"{int(fast):,} words/s", f"`--plain-path` {int(plain):,}", f"{ratio} ({runs[0]}, {runs[1]})"]
        drifts[name] = float(re.search(r"differ by ([\d.e-]+) at most", section)[1])
    seen, case = {}, None
    for line in README.read_text(encoding="utf-8").split("| training | CPU | hf_elmo fast |", 1)[1].split("\n\n")[0].splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 6 and cells[1] in README_CPU_NAMES.values():
            case = cells[0] or case
            seen[(case, cells[1])] = [cells[2], cells[3], cells[4].replace("*", "")]
    assert seen == expected
    readme = readme_text()
    for name, drift in drifts.items():  # ("up to 5.6e-3 on the AMD EPYC Zen 4, 4.3e-3 on the Intel Xeon, ...")
        shown = f"{drift:.1e}".replace("e-0", "e-")
        assert re.search(rf"{re.escape(shown)} on the (AMD EPYC )?{name.removeprefix('AMD EPYC ')}\b", readme), name
    order = ["AMD EPYC Zen 5", "AMD EPYC Zen 4", "AMD EPYC Zen 2", "Intel Xeon"]
    assert (f"the AMD EPYC Zen 5 on {dates[order[0]]}, the Zen 4 and Zen 2 on {dates[order[1]]}, the Intel Xeon on "
            f"{dates[order[3]]}") in readme and dates[order[1]] == dates[order[2]]


def test_the_layout_names_files_that_exist_and_every_make_command_is_a_target():
    """README, "Layout": each path it names exists (a file named alone, such as `gpu.sh`, in its row's folder); and
    every `make TARGET` the README gives is a target of the Makefile."""
    readme = README.read_text(encoding="utf-8")
    layout = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in layout.splitlines() if line.startswith("| `")]
    assert len(rows) >= 10
    for row in rows:
        folder = re.match(r"\| `([^`]+)`", row[0])[1].rstrip("/")
        folder = folder if (REPO / folder).is_dir() else str(Path(folder).parent)
        for name in re.findall(r"`([\w./-]+\.(?:py|md|sh)|[\w./-]+/)`", " | ".join(row)):
            assert (REPO / name).exists() or (REPO / folder / name).exists(), (name, row[0])
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([\w-]+):", makefile, re.MULTILINE))
    named = set(re.findall(r"`make ([\w-]+)", readme))
    assert named and named <= targets, named - targets


@pytest.mark.skipif(not Path("/proc/self/maps").is_file(), reason="reads the process's memory map (Linux)")
def test_weights_load_memory_mapped_from_model_safetensors(converted):
    """README, Speed: "Weights load memory-mapped from `model.safetensors`": after from_pretrained the weights' memory
    is the file's mapping, not a copy."""
    folder = converted["allennlp-elmo"]
    model = ElmoModel.from_pretrained(folder)
    mapped = []
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and Path(fields[5]).name == "model.safetensors" and Path(fields[5]).parent == Path(folder):
            start, end = (int(address, 16) for address in fields[0].split("-"))
            mapped.append((start, end))
    assert mapped
    inside = [name for name, parameter in model.named_parameters()
              if any(start <= parameter.data_ptr() < end for start, end in mapped)]
    assert len(inside) == len(list(model.parameters())), set(dict(model.named_parameters())) - set(inside)


def test_the_readmes_install_extra_is_the_packages():
    """README: `pip install ".[demo]"` brings matplotlib for the demo's picture: the extra pyproject.toml declares."""
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert 'pip install ".[demo]"' in README.read_text(encoding="utf-8")
    assert [requirement.split(">")[0] for requirement in extras["demo"]] == ["matplotlib"]
