"""Peters et al. (2018)'s layer analysis at small scale: what each layer of a frozen ELMo gives a task model.

    python modeling/layer_analysis.py --conll-dir data --brown-dir data/brown-pos --output-dir build/layer-analysis

With the biLM frozen, the same small task model is trained on seven inputs: (a) the character-CNN layer of an
untrained model of the same size, (b) layer 0 (the trained character CNN), (c) layer 1, (d) layer 2, (e) a learned
scalar mix of the three, (f) their plain average, and (g) for a model with `use_skip_connections`, whose layer 2
is the second LSTM's output plus layer 1, that output alone (layer 2 minus layer 1). Tasks: CoNLL-2003 NER (a
1-layer BiLSTM tagger, entity F1) and Brown part-of-speech tagging (a linear probe, as the paper's POS experiment, word accuracy; the split of
`modeling/default_corpus.py`). Each run keeps the epoch with the best validation score and reports its test score;
with several `--seeds` each task model is trained once per seed (its initialisation and the order of its batches),
the table gives the mean and the standard deviation between seeds, and the findings are judged on the means.

The frozen features of every sentence are computed once and cached in OUTPUT_DIR (keyed by the model's weights and
the split's sentences and labels, and for the untrained model by the first seed, which initialises it);
`results.json` and `results.md` hold the table. `--update-card` writes the table into a model card's
layer-analysis section (`make layer-analysis` updates the default model's). Arguments that cannot be used (an epoch
count below 1, missing task data, a card without that section, a seed given twice) are one line `error: ...` and exit code 2, before
anything is loaded; so is a task data file that does not read as its format (named with its line), before the model
is loaded and anything written.
"""

import argparse
import hashlib
import json
import math
import re
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hf_elmo import ElmoModel, ElmoTokenizer  # noqa: E402
from hf_elmo.default_model import default_model_path  # noqa: E402
from hf_elmo.embedder import load_model  # noqa: E402
from hf_elmo.fast_linear import cpu_name  # noqa: E402
from hf_elmo.model_card import counted  # noqa: E402
from hf_elmo.files import (atomic_file, check_output_location, model_folder_problem, read_text_file,  # noqa: E402
                            write_text_atomically)

from modeling.export_default import (LAYER_ANALYSIS_END, LAYER_ANALYSIS_START, cpu_cores,  # noqa: E402
                                     replace_layer_analysis, weights_key, weights_line)
from modeling.metrics import entity_scores  # noqa: E402
from modeling.task_data import NER_TAGS, BadTaskData, MissingTaskData, conll2003_files, load_conll2003  # noqa: E402

INPUTS = {
    "untrained": "(a) character CNN of an untrained model",
    "layer0": "(b) layer 0: character CNN",
    "layer1": "(c) layer 1: first biLSTM layer",
    "layer2": "(d) layer 2: second biLSTM layer",
    "mix": "(e) learned scalar mix",
    "average": "(f) average of the layers",
    "lstm2_own": "(g) layer 2 without the skip connection (layer 2 minus layer 1)",
}


@dataclass
class Features:
    """Frozen features of a list of sentences: `vectors[offsets[k]:offsets[k+1]]` are sentence k's words."""

    vectors: torch.Tensor  # [words, layers, 2P], float16
    offsets: list[int]
    labels: torch.Tensor  # [words], class ids

    def sentence(self, k: int) -> slice:
        return slice(self.offsets[k], self.offsets[k + 1])

    @property
    def num_sentences(self) -> int:
        return len(self.offsets) - 1


@torch.no_grad()
def compute_features(model: ElmoModel, tokenizer: ElmoTokenizer, sentences: list[list[str]], labels: list[list[int]],
                     token_layer_only: bool, batch_size: int = 64) -> Features:
    """Every layer's vectors (or the token layer only) of every word, in sentence order."""
    order = sorted(range(len(sentences)), key=lambda k: len(sentences[k]))
    per_sentence: list[torch.Tensor | None] = [None] * len(sentences)
    for start in range(0, len(order), batch_size):
        chosen = order[start : start + batch_size]
        # (padded on the right whatever the tokenizer's setting: each sentence's words are read from its row's start)
        batch = tokenizer([sentences[k] for k in chosen], is_split_into_words=True, padding=True, padding_side="right",
                          return_tensors="pt")
        if token_layer_only:
            char_ids = batch["input_ids"]  # [B, T, 50]
            word_ids = batch.get("input_word_ids")  # (a model with word input: ELMoForManyLangs')
            token = model.char_encoder(char_ids.flatten(0, 1), None if word_ids is None else word_ids.flatten()
                                       ).view(*char_ids.shape[:2], -1)  # [B, T, P]
            layers = torch.cat([token, token], dim=-1).unsqueeze(2)
        else:
            output = model(**batch, output_final_states=False, return_dict=True)
            layers = torch.stack(output.hidden_states, dim=2)  # [B, T, layers, 2P]
        for row, k in enumerate(chosen):
            per_sentence[k] = layers[row, : len(sentences[k])].half()
    offsets = [0]
    for words in sentences:
        offsets.append(offsets[-1] + len(words))
    return Features(torch.cat(per_sentence), offsets, torch.tensor([label for row in labels for label in row]))


def data_key(sentences: list[list[str]], labels: list[list[int]]) -> str:
    """What the features of a split are computed from besides the model: its words and their labels."""
    return hashlib.sha256(json.dumps([list(sentences), list(labels)]).encode()).hexdigest()[:16]  # (datasets Columns)


def cached_features(cache: Path, compute) -> Features:
    if cache.is_file():
        return Features(**torch.load(cache))
    features = compute()
    with atomic_file(cache, "wb") as out:
        torch.save(features.__dict__, out)
    return features


class LayerInput(nn.Module):
    """Turns [*, layers, 2P] features into the task model's [*, 2P] input, as one of INPUTS chooses."""

    def __init__(self, kind: str, num_layers: int):
        super().__init__()
        self.kind = kind
        if kind == "mix":  # Peters et al. (2018), eq. 1; starts as the average
            self.scalar_weights = nn.Parameter(torch.zeros(num_layers))
            self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        features = features.float()
        if self.kind in ("untrained", "layer0"):
            return features[..., 0, :]
        if self.kind == "lstm2_own":  # what the second LSTM adds to layer 1 (use_skip_connections)
            return features[..., 2, :] - features[..., 1, :]
        if self.kind.startswith("layer"):
            return features[..., int(self.kind[-1]), :]
        if self.kind == "average":
            return features.mean(dim=-2)
        weights = torch.softmax(self.scalar_weights, dim=0)
        return self.gamma * (weights[:, None] * features).sum(dim=-2)


class BiLstmTagger(nn.Module):
    def __init__(self, kind: str, num_layers: int, width: int, hidden: int, num_tags: int, dropout: float):
        super().__init__()
        self.layer_input = LayerInput(kind, num_layers)
        self.dropout = nn.Dropout(dropout)
        self.lstm = nn.LSTM(width, hidden, batch_first=True, bidirectional=True)
        self.classifier = nn.Linear(2 * hidden, num_tags)

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        x = self.dropout(self.layer_input(features))
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=features.shape[1])
        return self.classifier(self.dropout(out))


class LinearProbe(nn.Module):
    def __init__(self, kind: str, num_layers: int, width: int, num_tags: int):
        super().__init__()
        self.layer_input = LayerInput(kind, num_layers)
        self.classifier = nn.Linear(width, num_tags)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.layer_input(features))


def padded(features: Features, sentences: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rows = [features.vectors[features.sentence(k)] for k in sentences]
    labels = [features.labels[features.sentence(k)] for k in sentences]
    lengths = torch.tensor([len(r) for r in rows])
    return (nn.utils.rnn.pad_sequence(rows, batch_first=True), nn.utils.rnn.pad_sequence(labels, batch_first=True, padding_value=-100),
            lengths)


@torch.no_grad()
def ner_f1(model: BiLstmTagger, features: Features, batch_size: int = 128) -> float:
    model.eval()
    gold, predicted = [], []
    for start in range(0, features.num_sentences, batch_size):
        chosen = list(range(start, min(start + batch_size, features.num_sentences)))
        x, y, lengths = padded(features, chosen)
        best = model(x, lengths).argmax(-1)
        for row, length in enumerate(lengths.tolist()):
            gold.append([NER_TAGS[t] for t in y[row, :length].tolist()])
            predicted.append([NER_TAGS[t] for t in best[row, :length].tolist()])
    return entity_scores(gold, predicted)["f1"]


def ner_losses(model: BiLstmTagger, train: Features, generator: torch.Generator, batch_size: int):
    """One epoch: batches of sentences of similar length, in a random order."""
    order = sorted(torch.randperm(train.num_sentences, generator=generator).tolist(),
                   key=lambda k: train.offsets[k + 1] - train.offsets[k])
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    for b in torch.randperm(len(batches), generator=generator).tolist():
        x, y, lengths = padded(train, batches[b])
        yield nn.functional.cross_entropy(model(x, lengths).flatten(0, 1), y.flatten(), ignore_index=-100)


@torch.no_grad()
def pos_accuracy(model: LinearProbe, features: Features, batch_size: int = 4096) -> float:
    model.eval()
    right = 0
    for start in range(0, len(features.labels), batch_size):
        logits = model(features.vectors[start : start + batch_size])
        right += (logits.argmax(-1) == features.labels[start : start + batch_size]).sum().item()
    return 100.0 * right / len(features.labels)


def pos_losses(model: LinearProbe, train: Features, generator: torch.Generator):
    """One epoch: batches of 256 words in a random order."""
    for batch in torch.randperm(len(train.labels), generator=generator).split(256):
        yield nn.functional.cross_entropy(model(train.vectors[batch]), train.labels[batch])


def fit(model: nn.Module, splits: dict[str, Features], epochs: int, losses, score, learning_rate: float,
        seed: int) -> dict:
    """Train with Adam, batches drawn in an order seeded by `seed`; the test score at the epoch with the best
    validation score."""
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    generator = torch.Generator().manual_seed(seed)
    best = {"validation": -1.0}
    for epoch in range(1, epochs + 1):
        model.train()
        for loss in losses(model, splits["train"], generator):
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        validation = score(model, splits["validation"])
        if validation > best["validation"]:
            best = {"validation": validation, "test": score(model, splits["test"]), "epoch": epoch}
    return best


def read_brown(folder: Path) -> tuple[dict[str, tuple[list, list]], list[str]]:
    """The Brown tagging splits (`default_corpus.py brown-pos`): per split the sentences' words and tag ids, and the
    tags; a line that is not a record of as many tags as tokens is a BadTaskData naming the file and the line."""
    splits = {}
    for split in ("train", "validation", "test"):
        path = folder / f"{split}.jsonl"
        if not path.is_file():
            raise MissingTaskData(f"{path}: missing; `make data` writes it")
        records = [brown_record(path, number, line)
                   for number, line in enumerate(read_text_file(path, "tagging file", error=BadTaskData).splitlines(), 1)
                   if line.strip()]
        if not records:  # (as read_conll refuses one: the task model would fail on it after the features were made)
            raise BadTaskData(f"{path}: no sentences")
        splits[split] = ([r["tokens"] for r in records], [r["tags"] for r in records])
    tags = sorted({t for _, tag_rows in splits.values() for row in tag_rows for t in row})
    index = {t: i for i, t in enumerate(tags)}
    return {s: (words, [[index[t] for t in row] for row in rows]) for s, (words, rows) in splits.items()}, tags


def brown_record(path: Path, number: int, line: str) -> dict:
    """Line `number` of a tagging file: {"tokens": [words], "tags": [one tag per word]}, at least one word."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise BadTaskData(f"{path}: line {number} is not JSON ({error.msg})") from None
    tokens, tags = (record.get(name) if isinstance(record, dict) else None for name in ("tokens", "tags"))
    if not (isinstance(tokens, list) and isinstance(tags, list) and all(isinstance(x, str) for x in tokens + tags)):
        raise BadTaskData(f"{path}: line {number} is not a record {{\"tokens\": [words], \"tags\": [tags]}}")
    if not tokens or len(tokens) != len(tags):
        raise BadTaskData(f"{path}: line {number} has {len(tokens)} tokens and {len(tags)} tags; each token needs "
                          "its tag")
    return record


def over_seeds(runs: list[dict]) -> dict:
    """The runs of one task model, one per seed, each {"validation", "test", "epoch"} -> their mean validation and
    test scores, the test scores' standard deviation between seeds (0 for one seed), and the runs."""
    tests = torch.tensor([run["test"] for run in runs], dtype=torch.float64)
    return {"validation": sum(run["validation"] for run in runs) / len(runs), "test": tests.mean().item(),
            "test_sd": tests.std().item() if len(runs) > 1 else 0.0, "runs": runs}


def layer_findings(scores: dict) -> list[tuple[str, bool, str]]:
    """Peters et al.'s findings, judged on the mean test scores `scores[kind][task]` (task "ner" or "pos", each
    `over_seeds`): (finding, whether it holds, the figures and the margin, with the spread between seeds)."""

    def margin(task: str, kind: str, other: str) -> str:
        first, second = scores[kind][task], scores[other][task]
        spread = max(first["test_sd"], second["test_sd"])
        shown = round(first["test"], 2), round(second["test"], 2)  # (the margin is that of the figures shown)
        return (f"{shown[0]:.2f} against {shown[1]:.2f}, {shown[0] - shown[1]:+.2f}"
                + (f"; standard deviation between seeds up to {spread:.2f}" if spread else ""))

    findings = []
    if not {"layer0", "layer1", "layer2"} <= scores.keys():
        return findings
    for task, name in (("ner", "NER"), ("pos", "POS")):
        weaker = min(("layer1", "layer2"), key=lambda kind: scores[kind][task]["test"])
        findings.append((f"{name}: both contextual layers beat the static layer 0",
                         scores[weaker][task]["test"] > scores["layer0"][task]["test"], margin(task, weaker, "layer0")))
        if "mix" in scores:
            best = max(("layer0", "layer1", "layer2"), key=lambda kind: scores[kind][task]["test"])
            findings.append((f"{name}: the learned mix is at least as good as the best single layer",
                             scores["mix"][task]["test"] >= scores[best][task]["test"], margin(task, "mix", best)))
    findings.append(("POS: the first biLSTM layer beats the second",
                     scores["layer1"]["pos"]["test"] > scores["layer2"]["pos"]["test"], margin("pos", "layer1", "layer2")))
    return findings


def markdown_paragraph(text: str, width: int = 115) -> str:
    """`text` wrapped at `width`, no line beginning with a number and a full stop, which Markdown can read as a
    numbered list ("1." in CommonMark, any number in some renderers; the paragraph was cut at "seed\n0. The whole
    run ..."), and no `code span` cut."""
    unbroken = re.sub(r"`[^`]*`", lambda span: span.group(0).replace(" ", "\0"), text)
    lines = [line.replace("\0", " ") for line in
             textwrap.wrap(unbroken, width=width, break_on_hyphens=False, break_long_words=False)]
    for index in range(len(lines) - 1, 0, -1):
        if re.match(r"\d+[.)](\s|$)", lines[index]):
            number, _, rest = lines[index].partition(" ")
            lines[index - 1] += " " + number
            lines[index] = rest
    return "\n".join(line for line in lines if line)


def results_markdown(results: dict, settings: dict) -> str:
    several = len(settings["seeds"]) > 1

    def test_cell(score: dict) -> str:
        return f"{score['test']:.2f} ± {score['test_sd']:.2f}" if several else f"{score['test']:.2f}"

    rows = "\n".join(
        f"| {INPUTS[kind]} | {test_cell(r['ner'])} | {r['ner']['validation']:.2f} | {test_cell(r['pos'])} | "
        f"{r['pos']['validation']:.2f} |"
        for kind, r in results["inputs"].items()
    )
    findings = "\n".join(f"- {text}: **{'holds' if holds else 'does not hold'}** ({figures})"
                         for text, holds, figures in results["findings"])
    seeds = ", ".join(str(seed) for seed in settings["seeds"])
    if several:
        protocol = (f"each task model is trained once per seed ({seeds}: its initialisation and the order of its "
                    "batches), and each cell is the mean over the seeds of the test score at the epoch with the best "
                    "validation score (± the standard deviation between seeds); the findings compare the means")
    else:
        protocol = f"seed {seeds}; each cell is the test score at the epoch with the best validation score"
    cached = ", with the features of an earlier run (from its cache)" if settings["features_cached"] else ""
    settings_text = markdown_paragraph(
        f"NER: CoNLL-2003 English ({settings['ner_sentences']}), a 1-layer BiLSTM tagger ({settings['ner_hidden']} "
        f"units per direction, dropout {settings['dropout']}) over the frozen features, {settings['ner_epochs']} "
        f"epochs. POS: Brown corpus ({settings['pos_sentences']}; {settings['pos_tags']} tags, the Brown tags without "
        f"their title, headline, foreign-word and cited markers), a linear probe, {settings['pos_epochs']} epochs. "
        f"Adam, learning rate {settings['learning_rate']}, batches of {settings['batch_size']} sentences (NER) or 256 "
        f"words (POS); {protocol}. Features of {settings['model']}; the untrained model has the same size, initialised "
        f"with seed {settings['seeds'][0]}. The whole run (`make layer-analysis`) took {settings['minutes']:.0f} "
        f"minutes on {settings['machine']}{cached}.")
    return f"""| input to the task model | NER test F1 | NER validation F1 | POS test accuracy | POS validation accuracy |
|---|---|---|---|---|
{rows}

{findings}

{settings_text}
"""


def read_card(card: Path) -> str:
    """The text of the model card `card` (`--update-card`); ValueError, naming it, where it cannot be read or has no
    layer-analysis section to take the table."""
    text = read_text_file(card, "model card")
    start = text.find(LAYER_ANALYSIS_START)
    if start < 0 or text.find(LAYER_ANALYSIS_END, start) < 0:
        raise ValueError(f"{card}: the model card has no layer-analysis section (a line {LAYER_ANALYSIS_START}, later "
                         f"a line {LAYER_ANALYSIS_END}) to write the table into")
    return text


# The NER tagger's largest BiLSTM (units per direction): 2,048 over the default model's 1,024-wide features is 50M
# weights, 0.8 GB with Adam's state; 100,000,000 failed to allocate only after the features were computed (minutes).
MAX_NER_HIDDEN = 2048


def argument_problem(args) -> str | None:
    """What makes these arguments unusable, found before anything is loaded or trained (a run takes up to an hour),
    or None."""
    for option in ("ner_epochs", "pos_epochs", "batch_size", "ner_hidden"):
        if getattr(args, option) < 1:
            return f"--{option.replace('_', '-')} must be at least 1, got {getattr(args, option)}"
    if args.ner_hidden > MAX_NER_HIDDEN:
        return f"--ner-hidden must be at most {MAX_NER_HIDDEN}, got {args.ner_hidden}"
    if args.max_sentences is not None and args.max_sentences < 1:
        return f"--max-sentences must be at least 1, got {args.max_sentences}"
    if not 0 <= args.dropout < 1:
        return f"--dropout must be at least 0 and below 1, got {args.dropout}"
    if not 0 < args.learning_rate < math.inf:
        return f"--learning-rate must be a finite number above 0, got {args.learning_rate}"
    outside = [seed for seed in args.seeds if not 0 <= seed < 2**64]  # (torch's seeds; -1 would be 2**64 - 1 again)
    if outside:
        return f"--seeds must be 0 to 2**64 - 1, got {', '.join(map(str, outside))}"
    repeated = sorted({seed for seed in args.seeds if args.seeds.count(seed) > 1})
    if repeated:  # (its runs would be the same, shrinking the spread the table reports between seeds)
        return f"--seeds must differ, got {', '.join(map(str, repeated))} more than once"
    if args.model == "":  # (an unset shell variable: not the default model)
        return "--model is empty: give a model folder, or leave --model out for the default model"
    problem = model_folder_problem(args.model) if args.model else None
    if problem:
        return f"--model {args.model}: {problem}"
    needed = list(conll2003_files(args.conll_dir).values())
    needed += [Path(args.brown_dir) / f"{split}.jsonl" for split in ("train", "validation", "test")]
    missing = [str(path) for path in needed if not path.is_file()]
    if missing:
        return f"task data missing: {', '.join(missing)}; `make data` downloads it"
    try:
        check_output_location(args.output_dir, "folder", writes_inside=True)
        if args.update_card:
            check_output_location(args.update_card, "file")
            read_card(args.update_card)
    except ValueError as error:
        return str(error)
    return None


def main(argv=None) -> dict | int:
    """The results, or 2 where the arguments cannot be used (one line `error: ...` on stderr)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="ELMo folder (default: the default model)")
    parser.add_argument("--conll-dir", default="data", help="folder with conll2003/ (`make data`)")
    parser.add_argument("--brown-dir", default="data/brown-pos", help="Brown tagging data (`make data`)")
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--inputs", nargs="+", default=list(INPUTS), choices=list(INPUTS))
    parser.add_argument("--ner-epochs", type=int, default=3)
    parser.add_argument("--ner-hidden", type=int, default=64,
                        help=f"units per direction of the NER tagger's BiLSTM (default 64, at most {MAX_NER_HIDDEN}: over 1,024-wide "
                             "features, 50M weights, 0.8 GB with the optimiser's state)")
    parser.add_argument("--pos-epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--max-sentences", type=int, help="use at most this many sentences per split (quick tries)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0],
                        help="train each task model once per seed; the first also initialises the untrained model")
    parser.add_argument("--update-card", type=Path, help="write the table into this model card's layer-analysis section")
    args = parser.parse_args(argv)
    problem = argument_problem(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    try:  # (read before the model: a file that does not read is one line, with nothing loaded or written)
        conll = load_conll2003(args.conll_dir)
        brown, brown_tags = read_brown(Path(args.brown_dir))
    except (BadTaskData, MissingTaskData) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:  # (a folder whose weights or tokenizer do not load: one line, with nothing written)
        model, tokenizer = load_model(args.model or default_model_path())
    except (ValueError, OSError) as error:
        print(f"error: --model {error}", file=sys.stderr)
        return 2
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seeds[0])
    untrained = ElmoModel(model.config).eval()
    key = weights_key(model)

    tasks = {
        "ner": {split: (conll[split]["words"], conll[split]["ner_tags"]) for split in ("train", "validation", "test")},
        "pos": brown,
    }
    if args.max_sentences:
        tasks = {t: {s: (w[: args.max_sentences], l[: args.max_sentences]) for s, (w, l) in splits.items()}
                 for t, splits in tasks.items()}
    features, cached = {}, set(output_dir.glob("features-*.pt"))
    for task, splits in tasks.items():
        # (the trained model's features are the same for every seed; the untrained model is the first seed's)
        for which, encoder, token_only, seeded in (("trained", model, False, ""),
                                                    ("untrained", untrained, True, f"-{args.seeds[0]}")):
            features[task, which] = {
                split: cached_features(
                    output_dir / f"features-{task}-{split}-{which}-{key}{seeded}-{len(words)}-{data_key(words, labels)}.pt",
                    lambda: compute_features(encoder, tokenizer, list(words), list(labels), token_only),
                )
                for split, (words, labels) in splits.items()
            }
        print(f"{task}: features ready ({time.perf_counter() - started:.0f} s)", flush=True)

    results = {"inputs": {}}
    for kind in args.inputs:
        if kind == "lstm2_own" and not (model.config.use_skip_connections and model.config.num_lstm_layers >= 2):
            print(f"{INPUTS[kind]}: left out, this model's layer 2 holds no skip connection from layer 1", flush=True)
            continue
        if kind.startswith("layer") and int(kind[-1]) > model.config.num_lstm_layers:
            print(f"{INPUTS[kind]}: left out, this model has {counted(model.config.num_lstm_layers, 'biLSTM layer')}",
                  flush=True)
            continue
        which = "untrained" if kind == "untrained" else "trained"
        ner_splits, pos_splits = features["ner", which], features["pos", which]
        num_layers, width = ner_splits["train"].vectors.shape[1:]
        runs = {"ner": [], "pos": []}
        for seed in args.seeds:
            torch.manual_seed(seed)
            tagger = BiLstmTagger(kind, num_layers, width, args.ner_hidden, len(NER_TAGS), args.dropout)
            runs["ner"].append(fit(tagger, ner_splits, args.ner_epochs,
                                   lambda m, train, g: ner_losses(m, train, g, args.batch_size), ner_f1,
                                   args.learning_rate, seed))
            torch.manual_seed(seed)
            probe = LinearProbe(kind, num_layers, width, len(brown_tags))
            runs["pos"].append(fit(probe, pos_splits, args.pos_epochs, pos_losses, pos_accuracy, args.learning_rate, seed))
            print(f"{INPUTS[kind]:42} seed {seed}: NER test F1 {runs['ner'][-1]['test']:6.2f} "
                  f"(validation {runs['ner'][-1]['validation']:.2f})   POS test accuracy {runs['pos'][-1]['test']:6.2f} "
                  f"(validation {runs['pos'][-1]['validation']:.2f})   {time.perf_counter() - started:.0f} s", flush=True)
        results["inputs"][kind] = {task: over_seeds(task_runs) for task, task_runs in runs.items()}

    results["findings"] = layer_findings(results["inputs"])
    split_sizes = lambda splits: " / ".join(f"{len(words):,}" for words, _ in splits.values())  # noqa: E731
    settings = {**{k: v for k, v in vars(args).items() if k != "update_card"},
                "model": args.model or "the default model (hf_elmo/default-model)",
                "ner_sentences": f"{split_sizes(tasks['ner'])} sentences",
                "pos_sentences": f"{split_sizes(tasks['pos'])} sentences", "pos_tags": len(brown_tags),
                "minutes": (time.perf_counter() - started) / 60, "machine": f"{cpu_cores()} of {cpu_name()}",
                "features_cached": cached >= set(output_dir.glob("features-*.pt"))}
    results["settings"] = settings
    markdown = results_markdown(results, settings)
    write_text_atomically(output_dir / "results.json", json.dumps(results, indent=2) + "\n")
    write_text_atomically(output_dir / "results.md", markdown)
    print(f"\n{markdown}\nwritten: {output_dir / 'results.md'}")
    if args.update_card:
        try:
            card = read_card(args.update_card)  # (checked before the run; it may have changed since)
        except ValueError as error:
            print(f"error: {error}; the table is in {output_dir / 'results.md'}", file=sys.stderr)
            return 2
        # (named, so that an export of other weights into the card's folder does not keep this table)
        write_text_atomically(args.update_card, replace_layer_analysis(card, f"{weights_line(key)}\n{markdown}"))
        print(f"updated: {args.update_card}")
    return results


if __name__ == "__main__":
    outcome = main()
    sys.exit(outcome if isinstance(outcome, int) else 0)
