"""Put a trained default model into the package, `hf_elmo/default-model/`, with its model card.

    python modeling/export_default.py --run-dir build/default-model --sources data/default/sources.json

`make pretrain-default` runs it after training. The softmax is dropped (the package needs the biLM only); the
new folder is written beside the old one, checked by reloading it (a folder that does not reload to the same model
is refused, the old one left as it was) and put in its place by two renames (the old folder moved aside as
`default-model.old`, the new one moved in; a run stopped between the two leaves the old folder there, and the next run
moves it back first). The card's layer-analysis section is kept
from the folder being replaced where it measured the same weights (its first line names them), else it says "not
measured yet"; `modeling/layer_analysis.py --update-card` fills it. A run folder (weights that
are not finite, or a training state, evaluation or vocabulary without what the card reads, included), sources file,
--previous-text-results file (a figure the card reads that is missing or not a number, in any of them, included) or
output that cannot be used is one line `error: ...` and exit code 2, before anything is written.
"""

import argparse
import json
import os
import re
import shutil
import sys
from pathlib import Path

import torch

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hf_elmo import ElmoModel, ElmoTokenizer  # noqa: E402
from hf_elmo.default_model import DEFAULT_MODEL_DIR  # noqa: E402
from hf_elmo.embedder import tokenizer_misfit  # noqa: E402
from hf_elmo.fast_linear import cpu_name  # noqa: E402
from hf_elmo.files import check_output_location, input_inside, read_text_file, sha256_tensors  # noqa: E402
from hf_elmo.model_card import render_model_card  # noqa: E402

from modeling.vocabulary import Vocabulary, VocabularyError  # noqa: E402

MAX_MEGABYTES = 30
LAYER_ANALYSIS_START = "<!-- layer-analysis -->"
LAYER_ANALYSIS_END = "<!-- /layer-analysis -->"
NO_LAYER_ANALYSIS = "Not measured yet: `make layer-analysis`."


class ExportError(ValueError):
    """A run folder, sources file or output that cannot be used, a model too large or one whose written folder does
    not reload to it; the message says which."""


# What the card reads of each JSON document: per field, what it must be where the card computes with it or formats
# it as a number (None: anything, the card writes it as it is).
NUMBER, WHOLE_NUMBER = "a number", "a whole number"
SOURCE_FIELDS = {"description": None, "package": None, "license": None, "train_words": WHOLE_NUMBER,
                 "valid_words": WHOLE_NUMBER}
STATE_FIELDS = {"step": WHOLE_NUMBER, "seconds": NUMBER, "settings": None}
SETTINGS_FIELDS = {"batch_size": WHOLE_NUMBER, "unroll_steps": WHOLE_NUMBER, "epochs": None, "negative_samples": None,
                   "learning_rate": None, "dropout": None}
RESULTS_FIELDS = {"forward_perplexity": NUMBER, "backward_perplexity": NUMBER, "average_perplexity": NUMBER,
                  "target_words": WHOLE_NUMBER}


def read_json(path: Path, what: str, option: str, fields: dict[str, str | None] | None = None):
    """The JSON document in `path` (a `what`, given by `option`), an object with `fields`, or an ExportError naming
    both."""
    try:
        document = json.loads(read_text_file(path, what, error=ExportError))
    except ExportError as error:
        raise ExportError(f"{option} {error}") from None
    except json.JSONDecodeError as error:
        raise ExportError(f"{option} {path}: the {what} is not JSON ({error})") from None
    if fields:
        require_fields(document, fields, f"{option} {path}: the {what}")
    return document


def require_fields(document, fields: dict[str, str | None], described: str) -> None:
    """An ExportError, beginning with `described`, unless `document` is an object with every one of `fields`, each
    what it must be: the card is written after the new folder is staged, too late for a traceback."""
    if not isinstance(document, dict):
        raise ExportError(f"{described} is not a JSON object")
    missing = [field for field in fields if field not in document]
    if missing:
        raise ExportError(f"{described} has no {', '.join(missing)}")
    for field, kind in fields.items():
        if not is_kind(document[field], kind):
            raise ExportError(f"{described} has {field} {json.dumps(document[field])}, not {kind}")


def is_kind(value, kind: str | None) -> bool:
    """Whether `value` is `kind` (NUMBER, WHOLE_NUMBER or None: anything); true and false are not numbers here,
    though Python's bool is an int."""
    if kind is None:
        return True
    return not isinstance(value, bool) and isinstance(value, int if kind == WHOLE_NUMBER else (int, float))


def read_sources(path: Path) -> dict:
    """modeling/default_corpus.py's sources.json: per source, the fields of SOURCE_FIELDS."""
    sources = read_json(path, "sources file", "--sources")
    if not isinstance(sources, dict):
        raise ExportError(f"--sources {path}: the sources file is not a JSON object, one entry per source")
    for name, source in sources.items():
        require_fields(source, SOURCE_FIELDS, f"--sources {path}: the source {name!r}")
    return sources


def cpu_cores() -> str:
    """The cores of this machine that this process may run on, "2 CPU cores" (a container's share, not the host's),
    a core's hardware threads counted once."""
    usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count() or 1)
    cores = len({thread_siblings(cpu) for cpu in usable})
    return f"{cores} CPU core{'s' if cores > 1 else ''}"


def thread_siblings(cpu: int) -> str:
    """The logical CPUs of `cpu`'s core as Linux lists them ("0,8"), or `cpu` alone where it does not."""
    try:
        return Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text().strip()
    except OSError:
        return str(cpu)


def training_machine(device: str) -> str:
    """What the run trained on, beside `device` (the CPU's or GPU's name): this machine's cores where `device` is its
    CPU (pretrain.py records no count, and `make pretrain-default` exports right after training), else `device`."""
    return cpu_cores() if device == cpu_name() else device


def weights_key(model: torch.nn.Module) -> str:
    """A digest of every weight, in its own dtype (a float16 copy of a model has a key of its own): which model a
    layer analysis measured (and whose features a cache holds)."""
    return sha256_tensors(sorted(model.state_dict().items())).hexdigest()[:16]


def weights_line(key: str) -> str:
    """The first line of a layer-analysis section: the `weights_key` of the model it measured."""
    return f"<!-- weights: {key} -->"


def analysed_weights(section: str) -> str | None:
    """The `weights_key` of the model a layer-analysis section measured, None where it names none."""
    match = re.match(weights_line("([0-9a-f]{16})"), section)
    return match.group(1) if match else None


def layer_analysis_section(card: str) -> str:
    """The text between the layer-analysis markers of a card, or the placeholder."""
    if LAYER_ANALYSIS_START in card and LAYER_ANALYSIS_END in card:
        return card.split(LAYER_ANALYSIS_START, 1)[1].split(LAYER_ANALYSIS_END, 1)[0].strip()
    return NO_LAYER_ANALYSIS


def replace_layer_analysis(card: str, section: str) -> str:
    head, rest = card.split(LAYER_ANALYSIS_START, 1)
    return f"{head}{LAYER_ANALYSIS_START}\n{section.strip()}\n{LAYER_ANALYSIS_END}{rest.split(LAYER_ANALYSIS_END, 1)[1]}"


# The default model this one replaced (hf-elmo up to commit 433a9a5), measured on its held-out text: the same
# documents as now, split into sentences before the closing quotes and brackets were kept (commit d262c07).
PREVIOUS_MODEL = {"parameters": 5_454_861, "training": "2,918 steps (0.6 epochs), 56 minutes",
                  "forward_perplexity": 162.6, "backward_perplexity": 163.2, "average_perplexity": 162.9,
                  "target_words": 62_409}


def perplexity_cells(results: dict | None) -> str:
    if results is None:
        return "not measured | | |"
    return (f"{results['forward_perplexity']:.1f} | {results['backward_perplexity']:.1f} | "
            f"{results['average_perplexity']:.1f} | {results['target_words']:,}")


def comparison(parameters: int, training: str, results: dict, previous_text_results: dict | None) -> str:
    """The table of the previous default model against this one."""
    return f"""| model | parameters | training | held-out text | forward | backward | average | words per direction |
|---|---|---|---|---|---|---|---|
| previous default model | {PREVIOUS_MODEL['parameters']:,} | {PREVIOUS_MODEL['training']} | before the splitter fix | {perplexity_cells(PREVIOUS_MODEL)} |
| this model | {parameters:,} | {training} | before the splitter fix | {perplexity_cells(previous_text_results)} |
| this model | {parameters:,} | {training} | this corpus's | {perplexity_cells(results)} |"""


OPTIMIZER_NAMES = {"adamw": "AdamW", "adagrad": "Adagrad"}
SCHEDULE_NAMES = {"linear": "linear decay", "cosine": "cosine decay", "constant": "a constant rate",
                  "constant_with_warmup": "a constant rate after warm-up"}


def card_results(run: dict, sources: dict, layer_analysis: str, parameters: int,
                 previous_text_results: dict | None = None) -> str:
    """The card's training, layer-analysis and limits sections; `run`: `read_run`'s."""
    state, results, vocabulary = run["state"], run["results"], run["vocabulary_size"]
    settings = state["settings"]
    rows = "\n".join(
        f"| {name} | {s['description']} | {s['package']} | {s['license']} | {s['train_words']:,} | {s['valid_words']:,} |"
        for name, s in sources.items()
    )
    total = sum(s["train_words"] for s in sources.values())
    words_seen = state["step"] * settings["batch_size"] * settings["unroll_steps"]
    minutes = state["seconds"] / 60
    # pretrain.py records the device; a run from before it did was exported on the machine that trained it.
    device = state.get("device") or cpu_name()
    machine = training_machine(device)
    # What the run did: the epochs it trained (--max-steps may end it early), its optimizer and schedule (records from
    # before pretrain.py kept them are of the default preset: AdamW with linear decay).
    recorded = state.get("epoch")
    epochs = f"{round(recorded, 2):g}" if type(recorded) in (int, float) else settings["epochs"]
    optimizer, schedule = settings.get("optimizer", "adamw"), settings.get("lr_scheduler", "linear")
    optimizer, schedule = OPTIMIZER_NAMES.get(optimizer, optimizer), SCHEDULE_NAMES.get(schedule, schedule)
    return f"""## Training

The default model of hf-elmo, which ships inside the package: trained from scratch on {machine} with
`make pretrain-default` (`modeling/pretrain.py --preset default --seed 1`), on text that public package registries
ship. Held-out documents of every source were kept out of training.

| source | text | package | license | training words | held-out words |
|---|---|---|---|---|---|
{rows}

Words are split as `ElmoTokenizer` splits them; each Chinese character is a word. {total:,} training words; softmax
vocabulary of {vocabulary:,} words seen at least 3 times (dropped from this folder: only the biLM is kept).
{state['step']:,} steps of {settings['batch_size']} rows x {settings['unroll_steps']} words ({words_seen:,} words, {epochs}
epochs), {settings['negative_samples']} sampled negatives, {optimizer} {settings['learning_rate']} with
{schedule}, dropout {settings['dropout']}; {minutes:.0f} minutes of training on {device}.

Held-out perplexity (full softmax), against the default model this one replaced:

{comparison(parameters, f"{state['step']:,} steps ({epochs} epochs), {minutes:.0f} minutes", results, previous_text_results)}

## Layer analysis (Peters et al. 2018, section 5, at small scale)

{LAYER_ANALYSIS_START}
{layer_analysis}
{LAYER_ANALYSIS_END}

## Limits

A small model trained for {minutes:.0f} minutes on {machine}: its vectors show what ELMo does
(contextual senses, a static layer 0, layers that specialise), far below the released ELMo models in quality.
"""


def packaged_usage(card: str) -> str:
    """The card's usage for a folder that ships inside hf-elmo (no Hub id, no code files of its own: neither the
    paragraph on loading its code without hf-elmo nor the Hub's `custom_code` tag)."""
    card = card.replace("import hf_elmo  # registers ELMo with the Auto classes\n",
                        "import hf_elmo  # registers ELMo with the Auto classes\n"
                        "from hf_elmo.default_model import default_model_path\n")
    card = card.replace('from_pretrained("hf-elmo-default")', "from_pretrained(default_model_path())")
    card = card.replace("\n- custom_code\n", "\n", 1)
    return re.sub(r"With only transformers \([^)]*\) installed.*?\n\n", "", card, flags=re.S)


def drop_auto_map(folder: Path) -> None:
    """Remove `auto_map` from the folder's config.json and tokenizer_config.json: it names code files that a folder
    inside the package does not carry, and with `trust_remote_code=True` transformers would look for them there
    (AutoTokenizer and the pipelines failed with "does not appear to have a file named tokenization_elmo.py").
    Without it every Auto class takes hf-elmo's registered classes, with or without `trust_remote_code`."""
    for name in ("config.json", "tokenizer_config.json"):
        settings = json.loads((folder / name).read_text(encoding="utf-8"))
        settings.pop("auto_map", None)
        (folder / name).write_text(json.dumps(settings, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def read_run(run_dir: Path) -> dict:
    """What the card says of a pretraining run: its training state, its evaluation and its vocabulary's size."""
    state = read_json(run_dir / "trainer_state.json", "training state", "--run-dir", STATE_FIELDS)
    require_fields(state["settings"], SETTINGS_FIELDS, f"--run-dir {run_dir / 'trainer_state.json'}: the training state's settings")
    results = read_json(run_dir / "eval_results.json", "evaluation results", "--run-dir", RESULTS_FIELDS)
    try:
        vocabulary = Vocabulary.from_file(run_dir / "vocab.txt")
    except VocabularyError as error:
        raise ExportError(f"--run-dir {error}") from None
    return {"state": state, "results": results, "vocabulary_size": len(vocabulary)}


def check_replaceable(output: Path, inputs: list[Path | None]) -> Path:
    """`output` (absolute), which the export replaces whole: refused where it holds one of the export's `inputs`,
    or is a folder with things in it but no model (config.json or model.safetensors)."""
    source = input_inside(output, inputs)
    if source is not None:
        raise ExportError(f"--output {output}: holds the input {source}, which replacing it would delete: write "
                          "to another folder")
    if output.is_dir() and any(output.iterdir()) and not any((output / name).is_file()
                                                            for name in ("config.json", "model.safetensors")):
        raise ExportError(f"--output {output}: a folder that holds no model, which the export would replace whole: "
                          "write to a new folder, or to a model folder")
    return output


@torch.no_grad()
def export(run_dir: Path, sources_file: Path, output: Path | str = DEFAULT_MODEL_DIR, previous_text: Path | None = None
           ) -> Path:
    """`previous_text`: `evaluate.py --output-json` of this model on the previous model's held-out text."""
    if not run_dir.is_dir():
        raise ExportError(f"--run-dir {run_dir}: no such folder; train first (`make pretrain-default`)")
    for name in ("model.safetensors", "trainer_state.json", "eval_results.json", "vocab.txt"):
        if not (run_dir / name).is_file():
            raise ExportError(f"--run-dir {run_dir}: no {name}; train first (`make pretrain-default`)")
    run = read_run(run_dir)
    sources = read_sources(sources_file)
    previous_results = (read_json(previous_text, "results file", "--previous-text-results", RESULTS_FIELDS)
                        if previous_text else None)
    try:
        check_output_location(output, "folder", error=ExportError)
    except ExportError as error:
        raise ExportError(f"--output {error}") from None
    output = check_replaceable(Path(output).resolve(), [run_dir, sources_file, previous_text])
    retired = output.with_name(output.name + ".old")
    if retired.is_dir() and not output.exists():  # (an export stopped between its two renames)
        retired.rename(output)
    old_card = (output / "README.md").read_text(encoding="utf-8") if (output / "README.md").is_file() else ""
    try:
        model = ElmoModel.from_pretrained(run_dir).eval()
        tokenizer = ElmoTokenizer.from_pretrained(run_dir)
    except (OSError, ValueError) as error:  # a weights file cut short, a char.dic missing, ...
        raise ExportError(f"--run-dir {run_dir}: the model does not load ({' '.join(str(error).split())})") from None
    if misfit := tokenizer_misfit(model.config, tokenizer):
        raise ExportError(f"--run-dir {run_dir}: {misfit}")
    # (a diverged run: its outputs would be NaN, which no reloaded copy equals)
    not_finite = [name for name, tensor in model.state_dict().items() if not torch.isfinite(tensor).all()]
    if not_finite:
        raise ExportError(f"--run-dir {run_dir}: the weight {not_finite[0]} holds NaN or infinite values (the training "
                          "diverged); export a run whose weights are finite")
    parameters = sum(p.numel() for p in model.parameters())
    probe = ["I eat an apple .", "天气不错！小天你说是吗？"]
    expected = model(**tokenizer(probe, padding=True, return_tensors="pt"), return_dict=True).last_hidden_state

    # The replaced card's layer analysis stays where it measured these very weights (a card made again), else it
    # would describe the earlier model.
    analysis = layer_analysis_section(old_card)
    if analysis != NO_LAYER_ANALYSIS and (measured := analysed_weights(analysis)) != (key := weights_key(model)):
        print(f"layer analysis: the card's measured other weights ({measured or 'not named'}; these are {key}): left "
              "out; `make layer-analysis` measures these")
        analysis = NO_LAYER_ANALYSIS

    staging = output.with_name(output.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    for code_file in staging.glob("*.py"):  # the package is the code; copies would go stale
        code_file.unlink()
    drop_auto_map(staging)
    card = render_model_card(
        model, "hf-elmo-default", source="`make pretrain-default` (see Training)",
        results=card_results(run, sources, analysis, parameters, previous_results),
        language=["en", "zh"], license="apache-2.0",  # (as the card said before --license: a maintainer's choice)
    )
    (staging / "README.md").write_text(packaged_usage(card), encoding="utf-8")

    megabytes = (staging / "model.safetensors").stat().st_size / 2**20
    if megabytes > MAX_MEGABYTES:
        shutil.rmtree(staging)
        raise ExportError(f"the default model is {megabytes:.1f} MB, over the {MAX_MEGABYTES} MB the repository allows")
    try:  # the model and its tokenizer, both as the written folder gives them
        found = ElmoModel.from_pretrained(staging).eval()(
            **ElmoTokenizer.from_pretrained(staging)(probe, padding=True, return_tensors="pt"), return_dict=True
        ).last_hidden_state
    except (OSError, ValueError):
        found = None
    if found is None or not torch.equal(expected, found):
        raise ExportError(f"{staging}: the written folder does not reload to the same model; {output} is left as it "
                          "was (the written folder is kept to be examined)")

    shutil.rmtree(retired, ignore_errors=True)
    if output.exists():
        output.rename(retired)
    staging.rename(output)
    shutil.rmtree(retired, ignore_errors=True)
    print(f"default model: {output} ({megabytes:.1f} MB, {parameters:,} parameters)")
    return output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", type=Path, required=True, help="the output folder of `pretrain.py --preset default`")
    parser.add_argument("--sources", type=Path, required=True, help="sources.json of modeling/default_corpus.py")
    # (a str: Path("") reads as the current folder, which the export would replace)
    parser.add_argument("--output", default=DEFAULT_MODEL_DIR)
    parser.add_argument("--previous-text-results", type=Path,
                        help="evaluate.py --output-json of the model on the previous default model's held-out text")
    args = parser.parse_args(argv)
    try:
        export(args.run_dir, args.sources, args.output, args.previous_text_results)
    except ExportError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
