"""Held-out perplexity of a pretrained ELMo biLM: forward, backward and their average, with the full softmax.

    python modeling/evaluate.py --model-dir OUTPUT_DIR --file test.txt

Perplexity is exp(mean negative log-likelihood per target word). Each sentence gives n + 1 targets per direction
(its words, then `</S>` forward or `<S>` backward), as in the standard Penn Treebank count. The text is read once,
in order, with the LSTM state carried from sentence to sentence (bilm-tf's `run_test`), in --batch-size contiguous
parts, each from the zero state. The average is
exp of the mean of the two directions' NLL, the geometric mean of their perplexities, which is what bilm-tf
reports.
"""

import argparse
import contextlib
import json
import math
import sys
from pathlib import Path

import torch

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hf_elmo import ElmoConfig, ElmoForPreTraining, ElmoTokenizer  # noqa: E402
from hf_elmo.embedder import tokenizer_misfit  # noqa: E402
from hf_elmo.files import check_output_location, failure_text, write_text_atomically  # noqa: E402

from modeling.checkpoints import list_checkpoints  # noqa: E402
from modeling.data import (IGNORE_INDEX, TEXT_COLUMN, DataError, EncodedText, EvaluationStream,  # noqa: E402
                           WordTable, check_dataset_options, input_files, read_corpus)
from modeling.vocabulary import Vocabulary, VocabularyError  # noqa: E402


@torch.no_grad()
def perplexity(model: ElmoForPreTraining, stream: EvaluationStream, device, autocast=contextlib.nullcontext, reduce=None) -> dict:
    """Run `stream` through `model` in evaluation mode; `reduce` sums a tensor over processes (Accelerate)."""
    was_training = model.training
    model.eval()
    totals = torch.zeros(4, dtype=torch.float64, device=device)  # NLL sums and target counts per direction
    states = None
    for batch in stream:
        batch = {name: tensor.to(device) for name, tensor in batch.items()}
        with autocast():
            output = model(**batch, initial_states=states, return_dict=True)
        states = output.final_states
        forward_count = (batch["labels"] != IGNORE_INDEX).sum()
        backward_count = (batch["backward_labels"] != IGNORE_INDEX).sum()
        totals += torch.stack([
            output.forward_loss.double() * forward_count,
            output.backward_loss.double() * backward_count,
            forward_count.double(),
            backward_count.double(),
        ])
    model.train(was_training)
    if reduce is not None:
        totals = reduce(totals)
    forward_nll, backward_nll = (totals[0] / totals[2]).item(), (totals[1] / totals[3]).item()
    return {
        "forward_perplexity": exp_or_inf(forward_nll),
        "backward_perplexity": exp_or_inf(backward_nll),
        "average_perplexity": exp_or_inf((forward_nll + backward_nll) / 2),
        "target_words": int(totals[2].item()),
        "parts": stream.parts,  # (evaluate.py --batch-size that gives these figures again)
    }


def exp_or_inf(nll: float) -> float:
    """exp(nll), inf where that overflows a float (a mean NLL above ~709: a diverged model); NaN stays NaN."""
    try:
        return math.exp(nll)
    except OverflowError:
        return math.inf


def recorded_word_splitting(model_dir: Path) -> tuple[str, str]:
    """How the run that wrote `model_dir` (its output folder or a checkpoint) split its text into words, and where
    that is recorded: its trainer_state.json, or else its newest checkpoint's that holds the same model (vocabulary
    and config; a continuation that crashed has removed the folder's own record, and a fresh run's checkpoints
    beside an earlier run's final model are another model's); "whitespace" where none records it (a run of an
    earlier version, a converted model)."""

    def recorded(folder: Path) -> str | None:
        try:
            return json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))["data"]["word_splitting"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def model_files(folder: Path) -> tuple[dict, bytes] | None:
        try:
            return json.loads((folder / "config.json").read_text(encoding="utf-8")), (folder / "vocab.txt").read_bytes()
        except (OSError, ValueError):
            return None

    def same_model(ours: tuple[dict, bytes], checkpoint: Path) -> bool:
        """The same vocabulary, and every config field both record alike (the final save adds a few)."""
        theirs = model_files(checkpoint)
        return theirs is not None and ours[1] == theirs[1] and all(
            ours[0][key] == theirs[0][key] for key in ours[0].keys() & theirs[0].keys())

    if (splitting := recorded(model_dir)) is not None:
        return splitting, f"recorded in {model_dir / 'trainer_state.json'}"
    ours = model_files(model_dir)
    for _, checkpoint in reversed(list_checkpoints(model_dir) if ours is not None else []):
        if same_model(ours, checkpoint) and (splitting := recorded(checkpoint)) is not None:
            return splitting, f"recorded in {checkpoint.name}: the folder's trainer_state.json is missing"
    return "whitespace", "none recorded"


def recorded_parts(model_dir: Path) -> tuple[int, str]:
    """The parts that the run's own held-out figures read the text in (its --eval-batch-size times its processes),
    from the folder's eval_results.json, and where they came from; 64 where none is recorded (a checkpoint folder,
    a run from before they were)."""
    try:
        parts = json.loads((model_dir / "eval_results.json").read_text(encoding="utf-8")).get("parts")
    except (OSError, ValueError, AttributeError):
        parts = None
    if isinstance(parts, int) and not isinstance(parts, bool) and parts >= 1:
        return parts, "the run's own evaluation's, eval_results.json"
    return 64, "the default: none recorded"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", required=True, help="a pretraining output folder or one of its checkpoint-STEP folders")
    parser.add_argument("--file", nargs="+", required=True, help="held-out text files (one sentence per line) or a saved dataset folder")
    parser.add_argument("--text-column", help="column of a saved dataset that holds the sentences (default: text)")
    parser.add_argument("--split", help="the split of a saved DatasetDict to score, that one only, such as test "
                                        "(default: validation, else valid, else test)")
    parser.add_argument("--word-splitting", choices=["whitespace", "tokenizer"],
                        help="how the text's lines become words (default: as the run that made the model split its text, "
                             "recorded in its trainer_state.json or its newest checkpoint of the same model; whitespace "
                             "where none is)")
    parser.add_argument("--batch-size", type=int,
                        help="the parts the text is split into, read in parallel (default: the `parts` of the "
                             "folder's eval_results.json, which the run's own figures read; else 64); the batch is the "
                             "parts that hold text: more parts than the text's sentences leave some empty, which are "
                             "not read (the figures are the same), so a larger number than the text fills is no "
                             "larger batch")
    parser.add_argument("--unroll-steps", type=int, default=100,
                        help="words per window (the result does not depend on it); at most the longest part's, a "
                             "larger number reads windows of that length")
    parser.add_argument("--output-json", help="also write the results to this file")
    args = parser.parse_args(argv)
    try:
        for name in ("batch_size", "unroll_steps"):
            if getattr(args, name) is not None and getattr(args, name) < 1:
                raise DataError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
        check_dataset_options({"--file": args.file}, args.text_column, args.split)  # (before the model loads)
        for pattern in args.file:  # (a missing one, too)
            input_files(pattern, "--file")
        if args.output_json:  # before the work, not after it
            check_output_location(args.output_json, "file", error=DataError)
        model_dir = Path(args.model_dir)
        for name in ("config.json", "vocab.txt"):
            if not (model_dir / name).is_file():
                if checkpoints := list_checkpoints(model_dir):  # (a run that has not finished: no final model yet)
                    raise DataError(f"{model_dir}: no {name}, the run has not saved its final model; pass its newest "
                                    f"checkpoint: --model-dir {checkpoints[-1][1]}")
                raise DataError(f"{model_dir}: no {name}; pass a folder written by modeling/pretrain.py")
        vocabulary = Vocabulary.from_file(model_dir / "vocab.txt")
        try:  # (first alone: transformers' OSError for a config.json that is no JSON is no weights problem)
            config = ElmoConfig.from_pretrained(model_dir)
        except ValueError as error:  # a field of the wrong type or out of range, named
            raise DataError(str(error)) from None
        except OSError as error:
            raise DataError(f"{model_dir / 'config.json'}: does not read ({' '.join(str(error).split())})") from None
        try:
            model = ElmoForPreTraining.from_pretrained(model_dir, config=config)
        except ValueError as error:  # a config field of the wrong type, a biLM weight missing
            raise DataError(str(error)) from None
        except OSError as error:  # no weights file (one cut short or damaged is a ValueError naming the folder)
            raise DataError(f"{model_dir}: its weights do not load ({type(error).__name__}: {error})") from None
        if model.config.lm_vocab_size != len(vocabulary):
            raise DataError(f"{model_dir}: vocab.txt has {len(vocabulary)} words, the softmax {model.config.lm_vocab_size}")
        tokenizer = None  # folders older than the tokenizer in checkpoints spell UTF-8 bytes
        if (model_dir / "tokenizer_config.json").is_file():
            try:
                tokenizer = ElmoTokenizer.from_pretrained(model_dir)
            except (OSError, ValueError) as error:  # its char.dic or word.dic missing or unreadable, named
                raise DataError(f"{model_dir}: its tokenizer does not load ({error})") from None
            if misfit := tokenizer_misfit(model.config, tokenizer):
                raise DataError(f"{model_dir}: {misfit}")
        table = WordTable(model.config.max_characters_per_token, tokenizer)
        if args.word_splitting:
            splitting = args.word_splitting
        else:
            splitting, source = recorded_word_splitting(model_dir)
            print(f"word splitting: {splitting} ({source})")
        if args.batch_size is None:
            args.batch_size, source = recorded_parts(model_dir)
            print(f"parts: {args.batch_size} ({source})")
        corpus = read_corpus(args.file, TEXT_COLUMN if args.text_column is None else args.text_column, splitting, "validation", "--file", split=args.split)
        text = EncodedText.encode(corpus, table, vocabulary)
        stream = EvaluationStream(text, table, vocabulary, rows=args.batch_size, unroll_steps=args.unroll_steps)
        if stream.rows < args.batch_size:
            print(f"parts: the text fills {stream.rows} of the {args.batch_size}, a batch of {stream.rows} rows (the "
                  "empty parts are not read)")
    except (DataError, VocabularyError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = perplexity(model.to(device), stream, device)
    print(
        f"forward perplexity {results['forward_perplexity']:.2f}, backward {results['backward_perplexity']:.2f}, "
        f"average {results['average_perplexity']:.2f} over {results['target_words']} target words per direction"
    )
    if args.output_json:
        try:
            write_text_atomically(args.output_json, json.dumps(results, indent=2) + "\n")
        except OSError as error:  # (a full disk: the figures are printed above)
            print(f"error: --output-json {args.output_json}: could not be written ({failure_text(error)})",
                  file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
