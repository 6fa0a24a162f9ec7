"""Pretrain an ELMo biLM, or adapt one to new text, with Accelerate: one CPU, one GPU, DDP or FSDP.

    python modeling/pretrain.py --preset tiny --train-file train.txt --validation-file valid.txt --output-dir run
    accelerate launch --config_file modeling/configs/multi_gpu.yaml modeling/pretrain.py --preset original ...
    python modeling/pretrain.py ... --resume          # after a crash: continue from the last checkpoint
    python modeling/pretrain.py ... --max-train-minutes 50   # as many steps as 50 minutes hold, schedule included
    python modeling/pretrain.py --init-from elmo-original --train-file domain.txt ...   # domain adaptation

Input: text files (globs allowed) or a local `datasets` dataset with a text column, one sentence per line. The
softmax vocabulary is `--vocab-file` (bilm-tf's format), the one of `--init-from` (its vocab.txt, or the word.dic of
an ELMoForManyLangs model), or built from the training text (`--vocab-size`, `--min-count`); it is saved as
OUTPUT_DIR/vocab.txt. Words are spelled as UTF-8 bytes (bilm-tf), or with `--alphabet vocabulary` as
ELMoForManyLangs spells them: a character vocabulary (char.dic) and a word vocabulary (word.dic, which is then the
softmax's) built from the training text, and with `--word-embedding-dim` each word's id in word.dic as an input too.

Every `--save-steps` optimizer steps, the whole training state goes to OUTPUT_DIR/checkpoint-STEP/: weights,
optimizer, scheduler, random generators, and each process's carried LSTM state. A checkpoint is written into a
hidden folder and renamed when complete, so a crash at any moment (kill -9 included) leaves only complete ones (a
write that fails, on a full disk, ends the run in one line, the hidden folder removed), and `--resume` continues
exactly as if nothing had happened (a run that has finished says so and trains nothing; with a larger --max-steps
the rest of its learning-rate schedule is spread over the steps left). The final model is
saved with save_pretrained at the top of OUTPUT_DIR (it loads as `ElmoModel` with AutoModel, as
`ElmoForPreTraining`, and through its config's auto_map, which names every ELMo class, as either head with only
transformers), with log.jsonl (losses and held-out perplexities) and eval_results.json.
"""

import argparse
import contextlib
import ctypes
import json
import math
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from accelerate import Accelerator  # noqa: E402
from accelerate.utils import (DistributedType, broadcast_object_list, gather_object, parse_flag_from_env,  # noqa: E402
                               set_seed)
from packaging.version import Version  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402
from transformers import get_scheduler  # noqa: E402
from transformers.dynamic_module_utils import custom_object_save  # noqa: E402

from hf_elmo import ElmoConfig, ElmoForPreTraining, ElmoTokenizer, library_versions  # noqa: E402
from hf_elmo.files import (OutputLock, check_output_location, failure_text, fsync_path, give_plain_modes,  # noqa: E402
                            input_inside, is_write_error, model_folder_problem, sha256_file, sha256_tensors)
from hf_elmo.fast_linear import cpu_name  # noqa: E402
from hf_elmo.lexicon import WORD_ENTRIES, ElmoLexicon, LexiconError  # noqa: E402
from hf_elmo.model_card import (card_option_problem, counted, folder_card_language, folder_card_license,  # noqa: E402
                                render_model_card)

from modeling.data import (  # noqa: E402
    IGNORE_INDEX,
    TEXT_COLUMN,
    DataError,
    EncodedText,
    EvaluationStream,
    SentenceBatches,
    StreamBatches,
    WordTable,
    check_dataset_options,
    count_words,
    read_corpus,
)
from modeling.checkpoints import CHECKPOINT_NAME, in_folder, list_checkpoints  # noqa: E402
from modeling.evaluate import perplexity  # noqa: E402
from modeling.graphed_step import GraphedTrainingStep, assign_learning_rates, graph_unsupported_reason  # noqa: E402
from modeling.presets import PRESETS, TRAINING_DEFAULTS, training_settings  # noqa: E402
from modeling.vocabulary import SPECIAL_WORDS, Vocabulary, VocabularyError  # noqa: E402

# Options a resumed run must share with the run it continues, or it would not continue it exactly.
FIXED_ON_RESUME = (
    "preset", "init_from", "freeze_body", "batching", "batch_size", "unroll_steps", "shuffle", "group_by_length",
    "negative_samples", "softmax_init", "dropout", "optimizer", "learning_rate", "lr_scheduler", "warmup_steps",
    "weight_decay", "max_grad_norm", "gradient_accumulation_steps", "seed", "mixed_precision", "num_processes",
    "max_train_minutes", "alphabet", "word_embedding_dim",
)
# The least share of the training words that the softmax vocabulary should cover (the rest are <UNK> targets).
MIN_COVERAGE = 0.5
# What a run recorded before these options existed had.
FORMER_DEFAULTS = {**TRAINING_DEFAULTS, "alphabet": "bytes", "word_embedding_dim": 0}


class PretrainError(ValueError):
    """A bad option or output folder; the message says which."""


class SaveFailure(PretrainError):
    """A checkpoint or the final model that could not be written (a full disk, say), its partial folder removed; the
    message names the folder and the cause (`main` adds what the run leaves to go on from)."""



def parse_args(argv: list[str] | None) -> argparse.Namespace:
    presets = "\n".join(f"  {name}: {preset['description']}" for name, preset in PRESETS.items())
    parser = argparse.ArgumentParser(description=__doc__, epilog=f"presets:\n{presets}",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    data = parser.add_argument_group("data")
    data.add_argument("--train-file", nargs="+", required=True, help="text files or globs, or one saved dataset folder")
    data.add_argument("--validation-file", nargs="+", help="held-out text for the periodic and final perplexity")
    data.add_argument("--text-column", help="column of a saved dataset that holds the sentences (default: text)")
    data.add_argument("--word-splitting", default="whitespace", choices=["whitespace", "tokenizer"],
                      help="whitespace: pre-tokenised text (bilm-tf's format); tokenizer: split raw text with ElmoTokenizer")
    data.add_argument("--vocab-file", help="softmax vocabulary in bilm-tf's format (<S>, </S>, <UNK>, then by frequency)")
    data.add_argument("--vocab-size", type=int, help="build the vocabulary from the training text: at most this many words")
    data.add_argument("--min-count", type=int, help="build the vocabulary from words seen this often (default 1)")
    data.add_argument("--new-vocabulary", action="store_true", help="with --init-from: build a vocabulary from the training text even if the model has one")
    data.add_argument("--language", nargs="+", metavar="CODE",
                      help="the training text's language(s) for the model card, ISO 639 codes such as en or zh fr "
                           "(default: the --init-from folder's card's, else und)")
    data.add_argument("--license", help="the weights' license for the model card, a Hub license id such as apache-2.0 "
                      "or cc-by-sa-4.0, as the training text allows (default: the --init-from folder's card's, else none)")

    model = parser.add_argument_group("model")
    model.add_argument("--preset", choices=list(PRESETS), help="model size and training recipe (with --init-from: the recipe only; default bilm-tf's)")
    model.add_argument("--init-from", help="start from this model folder (a converted ELMo or a pretraining output)")
    model.add_argument("--freeze-body", action="store_true", help="train the softmax only (fit it to a converted model)")
    model.add_argument("--alphabet", choices=["bytes", "vocabulary"],
                       help="a new model spells words as UTF-8 bytes (bilm-tf, the default) or with a character vocabulary "
                            "built from the training text (ELMoForManyLangs' char.dic; word.dic becomes the softmax vocabulary)")
    model.add_argument("--word-embedding-dim", type=int,
                       help="with --alphabet vocabulary: also read each word's id in word.dic, as a vector of this size")

    training = parser.add_argument_group("training (defaults from the preset)")
    training.add_argument("--output-dir", required=True)
    training.add_argument("--max-steps", type=int,
                          help="optimizer steps (default: --epochs over the training text; with --max-train-minutes: "
                               "at most this many)")
    training.add_argument("--epochs", type=float, help="passes over the training text (default: the preset's); not "
                                                        "with --max-steps or --max-train-minutes")
    training.add_argument("--max-train-minutes", type=float,
                          help="train for this long instead of --epochs: the schedule follows the clock (evaluations "
                               "and checkpoints not counted); 0 = off")
    training.add_argument("--batching", choices=["stream", "sentence"], help="stream: bilm-tf's windows with carried LSTM state; sentence: stateless padded sentences")
    training.add_argument("--batch-size", type=int, help="rows per process and step")
    training.add_argument("--unroll-steps", type=int, help="words per window (stream batching)")
    training.add_argument("--shuffle", action=argparse.BooleanOptionalAction, help="shuffle the sentences every epoch")
    training.add_argument("--group-by-length", action=argparse.BooleanOptionalAction,
                          help="sentence batching: put sentences of about the same length in each step (as transformers' "
                               "group_by_length), to pad less")
    training.add_argument("--negative-samples", type=int, help="sampled softmax negatives; 0 = full softmax")
    training.add_argument("--softmax-init", choices=["random", "unigram"],
                          help="a new softmax: random (bilm-tf) or the unigram model of the training text (weights 0, "
                               "bias log frequency); refused where --init-from's softmax is kept, where a preset's "
                               "does not apply (the run says so; trainer_state.json's softmax_start: init-from)")
    training.add_argument("--dropout", type=float, help="LM dropout: each LSTM layer's input and the softmax input")
    training.add_argument("--optimizer", choices=["adagrad", "adamw"])
    training.add_argument("--learning-rate", type=float)
    training.add_argument("--lr-scheduler", choices=["constant", "constant_with_warmup", "linear", "cosine"])
    training.add_argument("--warmup-steps", type=int)
    training.add_argument("--weight-decay", type=float, help="AdamW only")
    training.add_argument("--max-grad-norm", type=float, help="clip the gradient's global norm; 0 = no clipping")
    training.add_argument("--gradient-accumulation-steps", type=int)
    training.add_argument("--mixed-precision", choices=["no", "bf16", "fp16"], help="default: Accelerate's configuration")
    training.add_argument("--seed", type=int, default=42)
    training.add_argument("--plain-path", action="store_true",
                          help="train with the plain computation that defines the model, not the fused fast path (same numbers, slower)")
    training.add_argument("--no-cuda-graph", action="store_true",
                          help="on one GPU, run each step's kernels one by one instead of replaying the step recorded as a "
                               "CUDA graph (see modeling/graphed_step.py; slower)")

    runs = parser.add_argument_group("checkpoints and logging")
    runs.add_argument("--save-steps", type=int, help="checkpoint every N steps; 0 = only the final model")
    runs.add_argument("--save-total-limit", type=int,
                      help="the latest checkpoints kept (default 2, as bilm-tf; 0 = every one), with --save-steps")
    runs.add_argument("--resume", nargs="?", const="latest", help="continue from the latest checkpoint in OUTPUT_DIR (or from PATH); starts fresh when there is none")
    runs.add_argument("--overwrite-output-dir", action="store_true", help="start afresh in an OUTPUT_DIR that is not empty (its checkpoints removed)")
    runs.add_argument("--eval-steps", type=int, help="held-out perplexity every N steps; 0 = at the end only")
    runs.add_argument("--eval-batch-size", type=int, help="rows per process for the held-out text (default 64)")
    runs.add_argument("--eval-unroll-steps", type=int, help="words per window of the held-out text (default 100)")
    runs.add_argument("--logging-steps", type=int)
    runs.add_argument("--report-to", nargs="*", default=[], help="Accelerate trackers, e.g. tensorboard wandb")
    return parser.parse_args(argv)


def resolve_settings(args: argparse.Namespace, num_processes: int) -> dict:
    """The run's options: the preset's, overridden by the command line."""
    if args.preset is None and not args.init_from:
        raise PretrainError(f"pass --preset ({', '.join(PRESETS)}) or --init-from a model folder")
    settings = training_settings(args.preset) if args.preset else dict(TRAINING_DEFAULTS)
    for name in TRAINING_DEFAULTS:
        value = getattr(args, name, None)
        if value is not None:
            settings[name] = value
    settings.update(
        preset=args.preset,
        init_from=args.init_from,
        freeze_body=args.freeze_body,
        seed=args.seed,
        mixed_precision=args.mixed_precision,
        num_processes=num_processes,
        max_steps=args.max_steps,
        alphabet=args.alphabet or "bytes",
        word_embedding_dim=args.word_embedding_dim or 0,
    )
    if args.init_from and (args.alphabet or args.word_embedding_dim):
        raise PretrainError("--alphabet and --word-embedding-dim describe a new model; --init-from's model keeps its own")
    if settings["word_embedding_dim"] < 0:
        raise PretrainError(
            f"--word-embedding-dim must be a positive size, with --alphabet vocabulary, got {settings['word_embedding_dim']}"
        )
    if settings["word_embedding_dim"] and settings["alphabet"] != "vocabulary":  # (a size above 0: not what is wrong)
        raise PretrainError(
            f"--word-embedding-dim {settings['word_embedding_dim']} needs --alphabet vocabulary: the model reads each "
            "word's id in the word.dic that it builds from the training text, and a byte alphabet has none"
        )
    at_least_one = {name: settings[name] for name in ("batch_size", "unroll_steps", "gradient_accumulation_steps", "logging_steps")}
    at_least_one.update({name: getattr(args, name) for name in ("eval_batch_size", "eval_unroll_steps", "min_count")
                         if getattr(args, name) is not None})
    for name, value in at_least_one.items():
        if value < 1:
            raise PretrainError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    # NaN passes every comparison below, and an infinite value overflows the step count or trains a NaN model.
    for name, allowed in (("epochs", ", 0 or more"), ("max_train_minutes", ", 0 (off) or more"),
                          ("learning_rate", " above 0"), ("weight_decay", ", 0 or more"), ("max_grad_norm", ", 0 or more"),
                          ("dropout", " in [0, 1)")):
        if not math.isfinite(settings[name]):
            raise PretrainError(f"--{name.replace('_', '-')} must be a finite number{allowed}, got {settings[name]}")
    # (a negative --max-grad-norm would flip the gradients: clip_grad_norm_ scales them by max / norm)
    for name in ("save_steps", "eval_steps", "negative_samples", "warmup_steps", "epochs", "max_grad_norm",
                 "weight_decay"):
        if settings[name] < 0:
            raise PretrainError(f"--{name.replace('_', '-')} must be 0 or more, got {settings[name]}")
    if not 0 <= settings["dropout"] < 1:
        raise PretrainError(f"--dropout must be in [0, 1), got {settings['dropout']}")
    if settings["learning_rate"] <= 0:
        raise PretrainError(f"--learning-rate must be positive, got {settings['learning_rate']}")
    if not 0 <= args.seed < 2**32:  # (numpy's seeds; set_seed failed with a traceback)
        raise PretrainError(f"--seed must be 0 to 2**32 - 1, got {args.seed}")
    if args.max_steps is not None and args.max_steps < 0:
        raise PretrainError(f"--max-steps must be 0 or more, got {args.max_steps}")
    if settings["max_train_minutes"] < 0:
        raise PretrainError(f"--max-train-minutes must be 0 (off) or more, got {settings['max_train_minutes']}")
    if args.save_total_limit is not None and args.save_total_limit < 0:
        raise PretrainError(f"--save-total-limit must be 0 (every checkpoint kept) or more, got {args.save_total_limit}")
    if args.epochs is not None:
        if args.max_train_minutes:
            raise PretrainError("pass --epochs or --max-train-minutes, not both")
        if args.max_steps is not None:  # (--max-steps won, and --epochs was ignored)
            raise PretrainError(f"--epochs {args.epochs:g} and --max-steps {args.max_steps} both set the run's length; "
                                "pass one of them (--max-steps counts optimizer steps, --epochs passes over the text)")
        settings["max_train_minutes"] = 0.0  # --epochs replaces a preset's time budget
    check_options_take_effect(args, settings)
    args.save_total_limit = 2 if args.save_total_limit is None else args.save_total_limit
    args.eval_batch_size = 64 if args.eval_batch_size is None else args.eval_batch_size
    args.eval_unroll_steps = 100 if args.eval_unroll_steps is None else args.eval_unroll_steps
    return settings


def check_options_take_effect(args: argparse.Namespace, settings: dict) -> None:
    """Refuse an option that this run would ignore (it trained as if the option had not been given)."""
    if not args.validation_file:
        for name in ("eval_steps", "eval_batch_size", "eval_unroll_steps"):
            value = getattr(args, name)
            if value is not None and not (name == "eval_steps" and value == 0):  # (0: no periodic evaluation)
                raise PretrainError(f"--{name.replace('_', '-')} {value}: there is no --validation-file to evaluate "
                                    "on; pass one, or drop the option")
    if settings["weight_decay"] and settings["optimizer"] != "adamw":
        raise PretrainError(f"--weight-decay {settings['weight_decay']:g} applies to AdamW only, and the optimizer is "
                            f"{settings['optimizer']}; pass --optimizer adamw, or drop --weight-decay")
    if args.new_vocabulary and not args.init_from:
        raise PretrainError("--new-vocabulary builds a vocabulary for an --init-from model instead of its own; a new "
                            "model's vocabulary is built from the training text anyway (or read from --vocab-file)")
    if args.freeze_body and not args.init_from:  # (it trained a softmax on a random biLM that never learnt)
        raise PretrainError("--freeze-body trains the softmax only, fitting it to an --init-from model's biLM; a new "
                            "model's biLM would stay as randomly initialised: pass --init-from, or drop --freeze-body")
    if args.new_vocabulary and args.vocab_file:
        raise PretrainError("--new-vocabulary and --vocab-file both choose the softmax vocabulary; drop one or the other")
    check_dataset_options({"--train-file": args.train_file, "--validation-file": args.validation_file}, args.text_column)
    if problem := card_option_problem(args.language, args.license):  # (before the training; the card comes after it)
        raise PretrainError(problem)
    if args.vocab_file and settings["alphabet"] == "vocabulary" and not args.init_from:
        raise PretrainError(f"--vocab-file {args.vocab_file} would be the softmax vocabulary, but with --alphabet "
                            "vocabulary the softmax's is the word.dic built from the training text (as ELMoForManyLangs "
                            "reads it); drop --vocab-file (--vocab-size and --min-count limit word.dic)")
    if args.unroll_steps is not None and settings["batching"] == "sentence":
        raise PretrainError(f"--unroll-steps {args.unroll_steps} cuts the text into windows of --batching stream; "
                            "--batching sentence reads whole sentences")
    if settings["group_by_length"] and settings["batching"] == "stream":
        raise PretrainError("--group-by-length groups the sentences of --batching sentence; stream batching has no "
                            "padding to save (pass --batching sentence, or drop --group-by-length)")
    if settings["group_by_length"] and not settings["shuffle"]:
        raise PretrainError("--group-by-length shuffles the sentences and then groups them by length, and --no-shuffle "
                            "reads them in order; drop one or the other")
    if args.warmup_steps and settings["lr_scheduler"] == "constant":  # (transformers' "constant" has no warm-up)
        raise PretrainError(f"--warmup-steps {args.warmup_steps} needs a schedule with a warm-up; --lr-scheduler is "
                            "constant: pass --lr-scheduler constant_with_warmup (or linear, cosine)")
    if args.save_total_limit is not None and not settings["save_steps"]:
        raise PretrainError(f"--save-total-limit {args.save_total_limit} keeps the latest checkpoints that --save-steps "
                            "writes, and --save-steps is 0 (no checkpoints, only the final model); pass --save-steps N, "
                            "or drop --save-total-limit")
    if args.resume is not None and args.overwrite_output_dir:
        raise PretrainError("--resume continues the run in --output-dir, --overwrite-output-dir starts afresh there; "
                            "pass one of them")


def checkpoint_notice(args: argparse.Namespace, settings: dict, max_steps: int) -> str | None:
    """--save-steps against the run's steps, once they are known: a checkpoint comes at each multiple of save_steps
    before the last step (the last saves the final model), so save_steps of max_steps or more writes none. Given on
    the command line, that is refused (checkpoints were asked for); a preset's or the default save_steps only makes a
    notice, returned, since a short try of a preset must run. A run of --max-train-minutes without --max-steps has no
    known length (max_steps is sys.maxsize) and gets neither."""
    save_steps = settings["save_steps"]
    if not save_steps or save_steps < max_steps:
        return None
    decided_by = "--max-steps" if args.max_steps is not None else "its epochs over the training text"
    length = f"{counted(max_steps, 'step')} ({decided_by})"
    if args.save_steps is not None:
        remedy = f"--save-steps below {max_steps}, or 0 for the final model only" if max_steps > 1 else "--save-steps 0"
        raise PretrainError(f"--save-steps {save_steps} writes no checkpoint in this run of {length}: checkpoints come "
                            f"before the last step, which saves the final model; pass {remedy}")
    source = f"--preset {args.preset}'s" if args.preset else "the default"
    return (f"no checkpoint in this run of {length}: save_steps is {save_steps} ({source}; --save-steps sets it); "
            "only the final model is saved")


# ---- checkpoints ---------------------------------------------------------------------------------------------


def _fsync_tree(folder: Path) -> None:
    for path in [*folder.iterdir(), folder]:
        fsync_path(path)


def save_checkpoint(accelerator: Accelerator, model, output_dir: Path, step: int, states, trainer_state: dict,
                    vocabulary: Vocabulary, tokenizer: ElmoTokenizer, total_limit: int) -> Path:
    """Write checkpoint-STEP atomically: everything into a hidden folder, then one rename. A write that fails, in any
    process, is every process's SaveFailure, the hidden folder removed (the checkpoints before it stay as they were).
    (Under FSDP, Accelerate's save gathers the shards between its writes: a first process whose write fails before
    that leaves the others waiting in it.)"""
    final = output_dir / f"checkpoint-{step}"
    partial = output_dir / f".checkpoint-{step}.partial"
    if accelerator.is_main_process:
        shutil.rmtree(partial, ignore_errors=True)
    accelerator.wait_for_everyone()

    def write_states() -> None:  # (each process: Accelerate writes its random states, the first the rest of its files)
        accelerator.save_state(str(partial))
        carried = {} if states is None else {"h": states[0].contiguous().cpu(), "c": states[1].contiguous().cpu()}
        save_file(carried, partial / f"lstm_states_{accelerator.process_index}.safetensors")

    def write_model_files() -> None:  # (the first process, once every process's files are there)
        unwrapped = accelerator.unwrap_model(model)
        unwrapped.config.save_pretrained(partial)  # the folder loads with from_pretrained,
        custom_object_save(unwrapped, partial, config=unwrapped.config)  # and as remote code: what auto_map names
        tokenizer.save_pretrained(partial)
        vocabulary.save(partial / "vocab.txt")
        # Written last, and with every other file's size and digest: a resume can tell a whole checkpoint.
        state = {**trainer_state, "files": file_digests(partial)}
        (partial / "trainer_state.json").write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
        give_plain_modes(partial)  # (safetensors writes its files private)
        _fsync_tree(partial)

    failure = failed_write(accelerator, write_states)  # (also the barrier after every process's files)
    if failure is None:
        failure = failed_write(accelerator, write_model_files if accelerator.is_main_process else None)
    if failure is not None:
        if accelerator.is_main_process:
            shutil.rmtree(partial, ignore_errors=True)
        accelerator.wait_for_everyone()  # (gone before any process ends the run)
        raise SaveFailure(f"{final}: the checkpoint could not be written ({failure}); its partial folder "
                          f"{partial.name} is removed")

    def put_in_place() -> None:
        try:
            if final.exists():  # the same step saved before a crash: keep it until the new one is in place
                retired = output_dir / f".checkpoint-{step}.retired"
                shutil.rmtree(retired, ignore_errors=True)
                os.replace(final, retired)
                os.replace(partial, final)
                shutil.rmtree(retired)
            else:
                os.replace(partial, final)
        except OSError as error:  # (a checkpoint it replaced is put back by the next run: clean_up_interrupted_saves)
            shutil.rmtree(partial, ignore_errors=True)
            raise SaveFailure(f"{final}: the checkpoint could not be put in place ({failure_text(error)}); its partial "
                              f"folder {partial.name} is removed") from None
        for _, old in list_checkpoints(output_dir)[:-total_limit] if total_limit > 0 else []:
            try:
                remove_checkpoint(old)
            except PretrainError as error:  # (the run stops there, its new checkpoint whole: it goes on from it)
                raise SaveFailure(str(error)) from None

    on_the_first_process(accelerator, put_in_place, (SaveFailure,), SaveFailure)  # (the others wait for it)
    return final


def failed_write(accelerator: Accelerator, write) -> str | None:
    """Run `write()` in this process (None: nothing to write here) and return the cause of a failed write
    (`is_write_error`: a full disk, say) in any process, the same in every process, or None. Every process calls it:
    it waits for all, also where a write raised another error, which its process then raises as it is (the others
    end with the line that names it), so that no process is left waiting."""
    failure, error = None, None
    if write is not None:
        try:
            write()
        except Exception as caught:
            failure, error = failure_text(caught), caught
    if accelerator.num_processes > 1:
        failure = next((found for found in gather_object([failure]) if found is not None), None)
    if error is not None and not is_write_error(error):
        raise error  # (a fault of the program, not of the disk: its own traceback)
    return failure


def resume_advice(args: argparse.Namespace) -> str:
    """What a run that stopped before its end (interrupted, or a save that failed) leaves in OUTPUT_DIR to go on from,
    and the command that does: the latest checkpoint, with a plain --resume (the command's own --resume PATH would go
    on from PATH), else the start again (or PATH again)."""
    output_dir = Path(args.output_dir)
    instead = " instead of --overwrite-output-dir" if args.overwrite_output_dir else ""  # (both at once are refused)
    if list_checkpoints(output_dir):
        command = "a plain --resume" if args.resume not in (None, "latest") else f"--resume{instead}"
        return f"the checkpoints saved in {output_dir} are kept; the same command with {command} goes on from the latest"
    if args.resume not in (None, "latest"):
        return f"no checkpoint was saved in {output_dir}; the same command goes on from {args.resume} again"
    return (f"no checkpoint was saved in {output_dir}; the same command with --resume{instead} starts the run again "
            "from the beginning")


def remove_checkpoint(checkpoint: Path) -> None:
    """Delete a checkpoint folder, renamed first: a crash while it is being deleted leaves no checkpoint-N that looks
    whole (`clean_up_interrupted_saves` deletes the rest)."""
    pruned = checkpoint.with_name(f".{checkpoint.name}.pruned")
    try:
        os.replace(checkpoint, pruned)
        shutil.rmtree(pruned)
    except OSError as error:
        raise PretrainError(f"{checkpoint}: the checkpoint could not be removed ({failure_text(error)})") from None


def clean_up_interrupted_saves(output_dir: Path) -> None:
    """What a crash inside `save_checkpoint` can leave: a save not finished (.partial), a checkpoint being pruned
    (.pruned), both deleted; a checkpoint being replaced by a new save of its step (.retired), put back where the new
    one did not take its place, deleted where it did."""
    leftover = output_dir
    try:
        for leftover in [*output_dir.glob(".checkpoint-*.partial"), *output_dir.glob(".checkpoint-*.pruned")]:
            shutil.rmtree(leftover)
        for leftover in output_dir.glob(".checkpoint-*.retired"):
            final = output_dir / leftover.name[1:].removesuffix(".retired")
            if final.exists():
                shutil.rmtree(leftover)
            else:
                os.replace(leftover, final)
    except OSError as error:
        raise PretrainError(f"{leftover}: what an interrupted save left could not be put right ({failure_text(error)}); "
                            "remove it, and run the command again") from None


def file_digests(folder: Path) -> dict[str, dict]:
    """Size and sha256 of every file in a checkpoint folder."""
    return {path.name: {"bytes": path.stat().st_size, "sha256": sha256_file(path)} for path in sorted(folder.iterdir())}


def checkpoint_problem(checkpoint: Path) -> str | None:
    """What keeps `checkpoint` from continuing its run exactly (None: nothing): a file missing, cut short or
    changed since the checkpoint was saved, or a trainer_state.json that does not read."""
    try:
        state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        return f"its trainer_state.json does not read ({error})"
    if not isinstance(state, dict) or not {"step", "settings"} <= state.keys():
        return "its trainer_state.json is not a checkpoint's"
    files = state.get("files")
    if files is None:  # saved before checkpoints recorded their files: each one that resuming reads must be there
        processes = range(state["settings"].get("num_processes", 1))
        files = dict.fromkeys(["model.safetensors", "optimizer.bin", "config.json", "vocab.txt",
                               *(f"random_states_{i}.pkl" for i in processes),
                               *(f"lstm_states_{i}.safetensors" for i in processes)])
    for name, saved in files.items():
        path = checkpoint / name
        if not path.is_file():
            return f"its {name} is missing"
        if saved is None:
            continue
        if path.stat().st_size != saved["bytes"]:
            return f"its {name} has {path.stat().st_size:,} bytes, where {saved['bytes']:,} were saved"
        if sha256_file(path) != saved["sha256"]:
            return f"its {name} has changed since it was saved"
    return None


def verify_resume_checkpoint(checkpoint: Path) -> None:
    """Refuse a checkpoint that would not continue its run exactly, and name the complete one to resume from."""
    problem = checkpoint_problem(checkpoint)
    if problem is None:
        return
    match = CHECKPOINT_NAME.fullmatch(checkpoint.name)
    step = int(match.group(1)) if match else math.inf
    earlier = [path for found, path in reversed(list_checkpoints(checkpoint.parent))
               if found < step and checkpoint_problem(path) is None]
    advice = (f"resume from {earlier[0]}, the latest complete checkpoint before it: --resume {earlier[0]}" if earlier
              else "no earlier checkpoint is complete: start afresh with --overwrite-output-dir")
    raise PretrainError(f"--resume {checkpoint}: {problem}, so it cannot continue the run exactly; {advice}")


def check_same_text(checkpoint: Path, data: dict) -> None:
    """A resumed run must read the text its checkpoint was trained on (and evaluated on), or it would not continue
    that run."""
    saved = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8")).get("data")
    if saved is None:  # saved before checkpoints recorded their text
        return
    for role in ("train", "validation"):
        if saved[f"{role}_sha256"] != data[f"{role}_sha256"]:
            option = f"--{role}-file"
            started = " ".join(saved[f"{role}_file"]) if saved[f"{role}_file"] else "none"
            given = " ".join(data[f"{role}_file"]) if data[f"{role}_file"] else "none"
            raise PretrainError(
                f"--resume {checkpoint}: {option} is not the text that run was started on ({started}; now {given}, "
                f"whose words differ); resume with the run's own {option}, or start a new run in another --output-dir"
            )


def changed_options(saved: dict, settings: dict) -> list[str]:
    """The options that a resumed run must share with its run (FIXED_ON_RESUME) and that `settings` give otherwise than
    the run's `saved` settings did, as `name='then', now 'now'`. Options that older versions did not record had
    their default."""
    return [f"{name}={saved.get(name, FORMER_DEFAULTS.get(name))!r}, now {settings.get(name)!r}"
            for name in FIXED_ON_RESUME
            if not same_option(name, saved.get(name, FORMER_DEFAULTS.get(name)), settings.get(name))]


def same_option(name: str, then, now) -> bool:
    """Whether a resumed run's option `now` is the run's `then`: --init-from's folders by their real paths (`conv` and
    /abs/path/conv are one folder; a relative one resolved in this run's working folder)."""
    if name == "init_from" and then and now:
        return Path(then).resolve() == Path(now).resolve()
    return then == now


def checkpoint_record(checkpoint: Path) -> dict:
    """What names one save of a checkpoint: its folder and its trainer_state.json's digest (which lists the digests
    of all its other files)."""
    return {"name": checkpoint.name, "trainer_state_sha256": sha256_file(checkpoint / "trainer_state.json")}


def read_final_state(folder: Path) -> dict | None:
    """The trainer_state.json of a run's final model in `folder` (it records the run's latest checkpoint; older
    versions did not), None where there is none: a checkpoint's, or none that reads."""
    try:
        state = json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and "latest_checkpoint" in state else None


def finished_run(output_dir: Path, checkpoint: Path | None, settings: dict, data: dict) -> dict | None:
    """OUTPUT_DIR's final trainer_state.json where it is the end of the run that `--resume` would continue: written
    after that run's latest checkpoint (`checkpoint`, or none is left), by a run of these options on this text. None
    where there is no such final model (the run did not finish, or a later one started since)."""
    state = read_final_state(output_dir)
    if state is None:
        return None
    if checkpoint is not None and state["latest_checkpoint"] != checkpoint_record(checkpoint):
        return None
    same_text = all(state["data"][f"{role}_sha256"] == data[f"{role}_sha256"] for role in ("train", "validation"))
    return state if same_text and not changed_options(state["settings"], settings) else None


def finished_run_message(args, settings: dict, output_dir: Path, finished: dict, checkpoint: Path | None,
                         max_steps: int, clock) -> tuple[str, bool]:
    """What a resume of a run that has `finished` (its final trainer_state.json) says, and whether that run is what
    this command asks for (nothing to train). Fewer steps than it has are refused: they would replace its model."""
    if finished["step"] > max_steps:
        raise PretrainError(
            f"{output_dir}: the run finished at step {finished['step']}, past the {counted(max_steps, 'step')} this "
            "command trains for (--max-steps or --epochs); a resumed run can only go on: pass --max-steps "
            f"{finished['step']} or more"
        )
    spent = clock is not None and finished.get("train_seconds", 0.0) >= clock.budget
    if finished["step"] == max_steps or spent:
        length = (f"its {settings['max_train_minutes']:g} minutes of training spent" if spent
                  else f"--max-steps {max_steps}" if args.max_steps is not None
                  else f"the {max_steps} steps of --epochs {settings['epochs']:g}")
        going_on = ("a run with a time budget ends with it: more minutes are another run, in another folder" if spent
                    else "a larger --max-steps trains on, from its latest checkpoint" if checkpoint
                    else "a larger --max-steps trains again from the beginning: no checkpoint is left")
        return (f"{output_dir}: the run finished at step {finished['step']} ({length}): nothing to train; its final "
                f"model is there ({going_on})"), True
    start = f"from {checkpoint}, the latest checkpoint" if checkpoint else "from the beginning: no checkpoint is left"
    return f"{output_dir}: the run finished at step {finished['step']}; it goes on to step {max_steps} {start}", False


def load_training_state(accelerator: Accelerator, checkpoint: Path) -> None:
    """`accelerator.load_state(checkpoint)`, refused where this process's random states did not load: Accelerate
    only logs that, and the resumed run would draw other dropout masks and sampled words than the uninterrupted one.
    What is checked is torch's CPU generator, which Accelerate restores after Python's and NumPy's and before a
    GPU's: a file that does not load is caught, a GPU generator that fails to restore is not. (A process refused
    here alone leaves the others waiting, as a checkpoint without its carried states does.)"""
    # A state drawn from the operating system's randomness, which no checkpoint holds: still there after the load,
    # it was not replaced.
    torch.default_generator.seed()  # (not torch.seed(), which reseeds a GPU's generators too)
    unloaded = torch.get_rng_state()
    accelerator.load_state(str(checkpoint))
    if torch.equal(torch.get_rng_state(), unloaded):
        name = f"random_states_{accelerator.process_index}.pkl"
        if Version(np.__version__) < Version("1.25"):
            reason = (f"Accelerate's weights-only loading does not admit NumPy {np.__version__}'s saved state: "
                      "upgrade NumPy to 1.25 or later (hf-elmo's floor) and resume again")
        else:
            reason = f"{name} does not load here (damaged, or saved with other releases of torch, NumPy or Accelerate)"
        raise PretrainError(f"--resume {checkpoint}: Accelerate could not load its random states ({name}), so the run "
                            f"would not continue exactly; {reason}")


def load_carried_states(checkpoint: Path, process_index: int, device) -> tuple[torch.Tensor, torch.Tensor] | None:
    """This process's carried LSTM states, None where the run carries none. (Its file is there: the checkpoint's
    files were checked against its trainer_state.json, and the number of processes is fixed on resume.)"""
    carried = load_file(checkpoint / f"lstm_states_{process_index}.safetensors")
    return (carried["h"].to(device), carried["c"].to(device)) if carried else None


def find_resume_checkpoint(args: argparse.Namespace, output_dir: Path) -> Path | None:
    """The checkpoint this run goes on from (--resume), or None for a fresh start; a fresh start into an OUTPUT_DIR
    that is not empty, or a --resume that cannot go on, is refused here."""
    if args.resume is None:
        held = sorted(path.name for path in output_dir.iterdir()) if output_dir.is_dir() else []
        if held and not args.overwrite_output_dir:
            if list_checkpoints(output_dir):
                raise PretrainError(f"{output_dir} already holds checkpoints: pass --resume to continue that run, or "
                                    "--overwrite-output-dir")
            # (a finished run's model, a converted one, the user's own files)
            shown = ", ".join(held[:3]) + (", ..." if len(held) > 3 else "")
            raise PretrainError(f"{output_dir} is not empty ({shown}): pass --overwrite-output-dir to start afresh "
                                "there, replacing what a run writes, or choose another --output-dir")
        return None
    if args.resume != "latest":
        path = Path(args.resume)
        inside = list_checkpoints(path) if path.is_dir() else []
        if inside:  # (its trainer_state.json is the final model's, which has no optimizer or random states)
            raise PretrainError(f"--resume {path}: a run's output folder, not one of its checkpoints; resume from its "
                                f"latest checkpoint: --resume {inside[-1][1]}")
        if not (path / "trainer_state.json").is_file():
            raise PretrainError(f"--resume {path}: not a complete checkpoint folder (no trainer_state.json)")
        if read_final_state(path) is not None:
            raise PretrainError(f"--resume {path}: a run's final model, which kept no checkpoint to resume from (it "
                                "holds no optimizer or random states); to train it on, start a run with --init-from "
                                f"{path}")
        own = list_checkpoints(output_dir)
        if own and not in_folder(path, output_dir):
            # Its checkpoints would mix with this run's, and a later plain --resume pick up theirs.
            raise PretrainError(
                f"--resume {path}: {output_dir} already holds checkpoints ({', '.join(found.name for _, found in own)}), "
                f"with which this run's would mix: to go on from its latest, pass --resume alone; to continue from "
                f"{path} instead, choose an --output-dir without checkpoints"
            )
        return path
    checkpoints = list_checkpoints(output_dir)
    return checkpoints[-1][1] if checkpoints else None


# ---- log ---------------------------------------------------------------------------------------------------


class TrainingLog:
    """OUTPUT_DIR/log.jsonl, one JSON object per logged step or evaluation (the learning curve), written by the
    first process. A write that fails (a full disk) is every process's SaveFailure, naming the file: the others
    would otherwise wait at their next collective for the first, gone with its traceback."""

    def __init__(self, path: Path, accelerator: Accelerator, resumed: tuple[int, Path] | None):
        """`resumed`: the checkpoint's step and the log of the run it belongs to (`path` itself, or the log beside a
        checkpoint of another folder); None for a new run."""
        self.path, self.accelerator, self.active = path, accelerator, accelerator.is_main_process
        self._written(lambda: self._begin(resumed))

    def _begin(self, resumed: tuple[int, Path] | None) -> None:
        if resumed is None:
            self.path.unlink(missing_ok=True)
            return
        # Lines past the checkpoint were written by the interrupted run (the last one maybe half), and the resumed
        # run writes them again.
        resume_step, continued = resumed
        # (a line that is not UTF-8 does not read as a record, and goes as a half-written one does)
        lines = continued.read_text(encoding="utf-8", errors="replace").splitlines() if continued.is_file() else []
        kept = [line for line in lines if self._step(line) <= resume_step]
        temporary = self.path.with_name(f".{self.path.name}.partial")
        try:
            temporary.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
            os.replace(temporary, self.path)
        finally:
            temporary.unlink(missing_ok=True)

    def write(self, record: dict) -> None:
        def append() -> None:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")

        self._written(append)

    def _written(self, write) -> None:
        """`write()` in the first process; every process's SaveFailure where it failed to write."""
        failure = failed_write(self.accelerator, write if self.active else None)
        if failure is not None:
            raise SaveFailure(f"{self.path}: the log could not be written ({failure})")

    @staticmethod
    def _step(line: str) -> float:
        try:
            return json.loads(line)["step"]
        except (json.JSONDecodeError, KeyError, TypeError):
            return math.inf

    def evaluation_at(self, step: int) -> dict | None:
        """The held-out figures the log holds for `step` (`perplexity`'s names), or None; read where the log is
        written, None elsewhere."""
        if not self.active or not self.path.is_file():
            return None
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict) and record.get("step") == step and "eval_average_perplexity" in record:
                return {name.removeprefix("eval_"): value for name, value in record.items() if name.startswith("eval_")}
        return None


# ---- model and data ------------------------------------------------------------------------------------------


def check_init_from(source: Path) -> ElmoConfig:
    """--init-from, before any work: a model folder whose config reads (the tokenizer and the model come from it).
    Returns that config."""
    problem = model_folder_problem(source)
    if problem:
        hint = ("; convert original weights first (conversion/convert_original_elmo.py or convert_elmoformanylangs.py)"
                if source.is_dir() and not (source / "config.json").exists() else "")
        raise PretrainError(f"--init-from {source}: {problem}{hint}")
    try:
        return ElmoConfig.from_pretrained(source)
    except (OSError, ValueError) as error:  # not JSON; a field of the wrong type or out of range
        raise PretrainError(f"--init-from {source / 'config.json'}: {error}") from None


def choose_tokenizer(args, settings: dict, checkpoint: Path | None, train_sentences) -> ElmoTokenizer:
    """How the model spells words: a resumed run's own (kept in its checkpoint), --init-from's (its tokenizer, or
    for a folder without one the tokenizer its config describes), or a new one (with --alphabet vocabulary, a
    character vocabulary built from the training text, the same in every process). Nothing is written into
    OUTPUT_DIR: checkpoints and the final model save it."""
    if checkpoint is not None:
        if (checkpoint / "tokenizer_config.json").is_file():
            return ElmoTokenizer.from_pretrained(checkpoint)
        # (a checkpoint from before tokenizers were kept in them: its run spelled UTF-8 bytes)
        return ElmoTokenizer(max_characters_per_token=ElmoConfig.from_pretrained(checkpoint).max_characters_per_token)
    if args.init_from:
        source = Path(args.init_from)
        try:  # (a folder without tokenizer files: the tokenizer its config.json describes)
            tokenizer = ElmoTokenizer.from_pretrained(source)
        except (OSError, ValueError) as error:  # its char.dic or word.dic missing or unreadable, named
            raise PretrainError(f"--init-from {source}: its tokenizer does not load ({error})") from None
    else:
        characters = PRESETS[args.preset]["model"].get("max_characters_per_token", ElmoConfig().max_characters_per_token)
        if settings["alphabet"] == "bytes":
            tokenizer = ElmoTokenizer(max_characters_per_token=characters)
        else:
            try:
                lexicon = ElmoLexicon.build(count_words(train_sentences), characters, with_words=True,
                                            max_words=args.vocab_size, min_count=args.min_count or 1)  # (None: not given)
            except LexiconError as error:  # (a --vocab-size below word.dic's special entries and one word, or a
                # character that char.dic cannot hold: --vocab-size is named only where it was given)
                vocab_size = "" if args.vocab_size is None else f" --vocab-size {args.vocab_size}"
                raise PretrainError(f"--alphabet vocabulary{vocab_size}: {error}") from None
            names = ["input_ids", "input_word_ids", "attention_mask"] if settings["word_embedding_dim"] else None
            with tempfile.TemporaryDirectory() as folder:  # (the tokenizer reads its dictionaries from files)
                lexicon.save(Path(folder) / "char.dic", Path(folder) / "word.dic")
                tokenizer = ElmoTokenizer(max_characters_per_token=characters, char_vocab_file=f"{folder}/char.dic",
                                          word_vocab_file=f"{folder}/word.dic",
                                          model_input_names=names or ["input_ids", "attention_mask"])
    return tokenizer


def choose_vocabulary(args, checkpoint: Path | None, train_sentences, tokenizer: ElmoTokenizer) -> Vocabulary:
    if checkpoint is not None:  # the run's own (its digest was checked with the checkpoint's other files)
        return Vocabulary.from_file(checkpoint / "vocab.txt")
    limits = given_options(args, ("vocab_size", "min_count"))
    # (with --alphabet vocabulary a new model's word.dic was built from the text, within the limits)
    limited = not args.init_from and tokenizer.lexicon is not None

    def unlimited(source: str, remedy: str) -> None:
        """The limits build a vocabulary from the text: refuse them where the softmax's comes from `source`."""
        if limits and not limited:
            raise PretrainError(f"{' and '.join(limits)} would limit a vocabulary built from the training text, but the "
                                f"softmax's is {source}; {remedy}")

    if args.vocab_file:
        unlimited(f"--vocab-file {args.vocab_file}", "drop one or the other")
        return Vocabulary.from_file(args.vocab_file)
    if args.init_from and not args.new_vocabulary and (Path(args.init_from) / "vocab.txt").is_file():
        unlimited(f"--init-from's {Path(args.init_from) / 'vocab.txt'}", "pass --new-vocabulary to build one from the text")
        return Vocabulary.from_file(Path(args.init_from) / "vocab.txt")
    if not args.new_vocabulary and tokenizer.lexicon is not None and tokenizer.lexicon.words is not None:
        unlimited("--init-from's word.dic", "pass --new-vocabulary to build one from the text")
        return Vocabulary.from_word_dictionary(tokenizer.lexicon.words)  # ELMoForManyLangs' softmax: word.dic
    return Vocabulary.from_counts(count_words(train_sentences), max_size=args.vocab_size, min_count=args.min_count or 1)


def check_softmax_words(args, vocabulary: Vocabulary) -> None:
    """A new run's softmax vocabulary must hold a word beyond the special ones: with those alone every target is
    <UNK>, and the perplexity means nothing (as --vocab-size below 4 is refused)."""
    if set(vocabulary.words) - {*SPECIAL_WORDS, *WORD_ENTRIES}:  # (word.dic's special entries: <oov> <bos> <eos> <pad>)
        return
    specials = f"only its special words ({', '.join(vocabulary.words)})"
    if args.vocab_file:
        problem = f"--vocab-file {args.vocab_file}: holds {specials}"
    elif limits := given_options(args, ("vocab_size", "min_count")):
        problem = f"{' and '.join(limits)}: no word of the training text is kept, the vocabulary would hold {specials}"
    elif args.init_from and not args.new_vocabulary:
        problem = f"--init-from {args.init_from}: its vocabulary holds {specials}"
    else:
        problem = f"the training text has no word but the special ones, the vocabulary would hold {specials}"
    raise PretrainError(f"{problem}; every target would be {vocabulary.words[vocabulary.unk_id]}: the softmax needs "
                        "one word more at least")


def on_the_first_process(accelerator: Accelerator, work, refusals: tuple = (PretrainError,),
                         raised_as: type[ValueError] = PretrainError):
    """`work()` in the first process only, its result there (None in the others). Its refusal (one of `refusals`)
    is every process's own error, `raised_as` with its message: the others would otherwise wait at the next barrier,
    which the first left by its error, and die in gloo's "Connection closed by peer" traceback."""
    return on_every_process(accelerator, work if accelerator.is_main_process else (lambda: None), refusals, raised_as)


def on_every_process(accelerator: Accelerator, work, refusals: tuple, raised_as: type[ValueError]):
    """`work()` in every process, its result. A refusal (one of `refusals`) in any process is every process's
    `raised_as`, with the message of the first process that refused: no process goes on to a collective that
    another, gone with its error, never reaches."""
    failure, result = None, None
    try:
        result = work()
    except refusals as error:
        if accelerator.num_processes == 1:
            raise
        failure = str(error)
    if accelerator.num_processes > 1:
        failure = next((found for found in gather_object([failure]) if found is not None), None)
        if failure is not None:
            raise raised_as(failure)
    return result


def check_coverage(accelerator: Accelerator, text: EncodedText, vocabulary: Vocabulary) -> None:
    """Warn where most training targets are <UNK> (a vocabulary of another language or domain, as an --init-from
    model's kept one on other text): the model would learn little but to predict <UNK>."""
    words = len(text.targets)
    covered = words - int(np.count_nonzero(text.targets == vocabulary.unk_id))
    if words and covered < MIN_COVERAGE * words:
        accelerator.print(f"warning: the softmax vocabulary ({len(vocabulary):,} words) covers {covered / words:.1%} "
                          f"of the training text's {words:,} words, the others are {vocabulary.words[vocabulary.unk_id]} "
                          "targets; a vocabulary built from the text (without --vocab-file; --new-vocabulary with "
                          "--init-from) would cover them")


def given_options(args, names: tuple[str, ...]) -> list[str]:
    """The options among `names` that the command line gave, as it spelled them (`--min-count 3`, `--new-vocabulary`)."""
    given = []
    for name in names:
        value = getattr(args, name)
        if value is not None and value is not False:
            given.append(f"--{name.replace('_', '-')}" + ("" if value is True else f" {value}"))
    return given


def check_resumed_vocabulary(args, settings: dict, checkpoint: Path, train_sentences, vocabulary: Vocabulary) -> None:
    """A resumed run predicts its checkpoint's `vocabulary`. The options that choose a new run's must choose that one
    (the run's own command), or the resume would ignore them."""
    given = given_options(args, ("vocab_file", "vocab_size", "min_count", "new_vocabulary"))
    if not given:
        return
    tokenizer = choose_tokenizer(args, settings, None, train_sentences)  # (a new --alphabet's word.dic)
    chosen = choose_vocabulary(args, None, train_sentences, tokenizer)
    if chosen != vocabulary:
        raise PretrainError(
            f"--resume {checkpoint}: {' and '.join(given)} would choose another vocabulary than the one the run was "
            f"started with ({checkpoint / 'vocab.txt'}), which a resumed run keeps: {len(chosen):,} words against its "
            f"{len(vocabulary):,}; drop {'them' if len(given) > 1 else 'it'}, or pass the run's own"
        )


def build_model(args, settings: dict, vocabulary: Vocabulary, tokenizer: ElmoTokenizer,
                source_config: ElmoConfig | None) -> tuple[ElmoForPreTraining, bool]:
    """The model to train (from --init-from, whose config is `source_config`, or new), and whether its softmax is
    new."""
    lm_options = {
        "lm_vocab_size": len(vocabulary),
        "lm_dropout": settings["dropout"],
        "lm_negative_samples": settings["negative_samples"],
    }
    if not args.init_from:
        model_options = dict(PRESETS[args.preset]["model"])
        if tokenizer.lexicon is not None:
            word_input = bool(settings["word_embedding_dim"])
            # ELMoForManyLangs' form (its forget bias stored in the weights, both projections), so that the model
            # converts to that package's format.
            model_options.update(tokenizer.lexicon.config_options(word_input=word_input), always_project=True,
                                 forget_bias=0.0, word_embedding_dim=settings["word_embedding_dim"])
        return ElmoForPreTraining(ElmoConfig(**model_options, **lm_options)), True
    source = Path(args.init_from)
    source_vocabulary = Vocabulary.from_file(source / "vocab.txt") if (source / "vocab.txt").is_file() else None
    keep_softmax = source_config.lm_vocab_size is not None and source_vocabulary == vocabulary
    if keep_softmax and source_config.lm_vocab_size != len(vocabulary):  # (transformers would reinitialise it)
        raise PretrainError(f"--init-from {source}: vocab.txt has {len(vocabulary)} words, the softmax "
                            f"{source_config.lm_vocab_size}, so its softmax cannot go on; fix the folder, or start a new "
                            "softmax with --new-vocabulary")
    try:
        model = ElmoForPreTraining.from_pretrained(source, ignore_mismatched_sizes=True, **lm_options)
    except ValueError as error:  # a biLM weight missing or of another shape, named
        raise PretrainError(f"--init-from {error}") from None
    except OSError as error:  # no weights file (one cut short or damaged is a ValueError naming the folder)
        raise PretrainError(f"--init-from {source}: its weights do not load ({type(error).__name__}: {error})") from None
    if not keep_softmax and source_config.lm_vocab_size is not None:
        # A softmax over another vocabulary: start it afresh, as a model without one would.
        with torch.no_grad():
            model.softmax.weight.normal_(0.0, 1.0 / math.sqrt(model.config.projection_dim))
            model.softmax.bias.zero_()
    return model, not keep_softmax


def set_unigram_softmax(model: ElmoForPreTraining, text: EncodedText, vocabulary: Vocabulary) -> None:
    """Make the softmax the unigram model of `text`: weights 0, bias = log of each word's (add-one smoothed)
    frequency in the text with both sentence boundaries, each word counted once and `<S>` and `</S>` once per
    sentence (the backward and the forward LM's end target). Whatever the biLM reads, it starts near unigram
    perplexity."""
    counts = np.bincount(text.targets, minlength=len(vocabulary)).astype(np.float64)
    counts[[vocabulary.bos_id, vocabulary.eos_id]] += text.num_sentences
    with torch.no_grad():
        model.softmax.weight.zero_()
        model.softmax.bias.copy_(torch.from_numpy(np.log((counts + 1) / (counts.sum() + len(vocabulary)))))


def weights_digest(model) -> int:
    """A 63-bit hash of every parameter's bytes, to check that all processes hold the same model."""
    return int.from_bytes(sha256_tensors(sorted(model.state_dict().items())).digest()[:8], "big") >> 1


def save_final_model(model: ElmoForPreTraining, state_dict: dict, vocabulary: Vocabulary, tokenizer: ElmoTokenizer,
                     output_dir: Path, source: str, results: str, card: dict, records: dict[str, dict]) -> None:
    """save_pretrained, and `records` (file name: JSON document), into a hidden folder, then move each file into
    OUTPUT_DIR (each replacement is atomic), trainer_state.json last: once it is there, the rest is too. `card`:
    the model card's `language` and `license`."""
    staging = output_dir / ".final.partial"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        # (config.json keeps the config's full auto_map: the folder loads as every ELMo class, the heads included)
        model.save_pretrained(staging, state_dict=state_dict)
        tokenizer.save_pretrained(staging)
        vocabulary.save(staging / "vocab.txt")
        (staging / "README.md").write_text(
            render_model_card(model, output_dir.resolve().name, source=source, results=results, **card), encoding="utf-8")
        for name, record in records.items():
            (staging / name).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        give_plain_modes(staging)  # (safetensors writes model.safetensors private)
        _fsync_tree(staging)
    except Exception as error:  # (nothing of it has been moved into OUTPUT_DIR yet)
        if not is_write_error(error):
            raise
        shutil.rmtree(staging, ignore_errors=True)
        raise SaveFailure(f"{output_dir}: the final model could not be written ({failure_text(error)}); its partial "
                          f"folder {staging.name} is removed") from None
    # An earlier run's char.dic or word.dic that this tokenizer does not write would be read with it from OUTPUT_DIR.
    try:
        for name in {"char.dic", "word.dic"} - {path.name for path in staging.iterdir()}:
            (output_dir / name).unlink(missing_ok=True)
        for path in sorted(staging.iterdir(), key=lambda path: path.name == "trainer_state.json"):
            os.replace(path, output_dir / path.name)
        staging.rmdir()
    except OSError as error:  # (trainer_state.json comes last: the folder does not read as a finished run)
        raise SaveFailure(f"{output_dir}: the final model could not be moved into the folder ({failure_text(error)}); "
                          f"what was not moved is in {staging.name}") from None


def loss_scale(optimizer: str, labels: torch.Tensor, share: float = 1.0, accumulation: int = 1) -> float:
    """What a batch's loss (the mean over its target words) is multiplied by for the gradient. bilm-tf's Adagrad
    recipe takes the gradient of each row's loss summed over its words, averaged over the rows: for stream windows,
    which hold --unroll-steps targets in every row, the mean times --unroll-steps (bilm-tf's `loss * unroll_steps`);
    for sentence batches the mean times the batch's targets per row (its sentences' mean length + 1), which
    --unroll-steps has nothing to do with; over the `accumulation` micro-batches of a step, each of as many rows, the
    average of theirs. AdamW trains on the mean over the step's target words, of which the batch holds `share` (a
    micro-batch of sentences holds its own count's share, not one over the micro-batches: the mean of their means
    would weigh a short sentence's words more)."""
    if optimizer != "adagrad":
        return share
    return int((labels != IGNORE_INDEX).sum()) / labels.shape[0] / accumulation


def make_optimizer(parameters: list[torch.nn.Parameter], settings: dict, device_type: str,
                   fused: bool = True) -> torch.optim.Optimizer:
    """bilm-tf's Adagrad, or AdamW, as torch's fused kernel (one kernel over all parameters) where torch has one:
    AdamW on CPU and CUDA, Adagrad on CPU: several times faster than the loop over tensors (the README's figures,
    from benchmarks/optimizer_speed.py).
    torch 2.13's fused CPU kernels update a non-contiguous parameter wrongly, so then the loop. `fused=False`: torch's
    own choice, the loop over tensors on CPU (what benchmarks/optimizer_speed.py compares with)."""
    fused = fused and all(parameter.is_contiguous() for parameter in parameters)
    if settings["optimizer"] == "adagrad":
        return torch.optim.Adagrad(parameters, lr=settings["learning_rate"], initial_accumulator_value=1.0,
                                   fused=(fused and device_type == "cpu") or None)
    return torch.optim.AdamW(parameters, lr=settings["learning_rate"], weight_decay=settings["weight_decay"],
                             fused=(fused and device_type in ("cpu", "cuda")) or None)


def step_shares(micro_batches: list[dict[str, torch.Tensor]], accelerator: Accelerator) -> list[float]:
    """Each micro-batch's part of the step's mean over its target words: its targets over the step's, times the
    processes (whose gradients and logged losses are averaged over them). Stream windows all hold as many targets;
    sentence batches do not."""
    counts = [int((batch["labels"] != IGNORE_INDEX).sum()) for batch in micro_batches]
    total = float(sum(counts))
    if accelerator.num_processes > 1:
        total = accelerator.reduce(torch.tensor([total], dtype=torch.float64, device=accelerator.device), "sum").item()
    per_process = total / accelerator.num_processes
    return [count / per_process if per_process else 1.0 / len(counts) for count in counts]


class TrainingClock:
    """`--max-train-minutes`: the learning-rate schedule follows training time instead of steps.

    The warm-up still counts steps; after it, the scheduler's course is spread over the time left, so the run ends
    on time with its schedule complete, at whatever speed the machine has. Time is the optimizer steps' own, summed
    (evaluations and checkpoints do not count), the slowest process's when there are several. The number of steps
    therefore depends on the machine's speed: such a run is not reproducible step for step, and a resumed one
    continues the schedule from the checkpoint's time but not with the same steps as an uninterrupted run.
    """

    COURSE_STEPS = 1_000_000  # the scheduler's steps after the warm-up: the resolution of the time-driven course

    def __init__(self, minutes: float, warmup_steps: int, seconds: float = 0.0, warmup_seconds: float | None = None):
        self.budget, self.warmup_steps = minutes * 60.0, warmup_steps
        self.seconds = seconds
        self.warmup_seconds = 0.0 if warmup_steps == 0 else warmup_seconds

    def add(self, seconds: float, step: int) -> None:
        """Count one more optimizer step's `seconds`; `step` is the number of steps done."""
        self.seconds += seconds
        if step == self.warmup_steps:
            self.warmup_seconds = self.seconds

    @property
    def done(self) -> bool:
        return self.seconds >= self.budget

    def schedule_step(self, step: int) -> float:
        """Where the scheduler's course stands after `step` steps: `step` in the warm-up, then the share of the
        time left after it that has passed, in COURSE_STEPS."""
        if self.warmup_seconds is None or step < self.warmup_steps:
            return float(step)
        remaining = max(self.budget - self.warmup_seconds, 1e-9)
        return self.warmup_steps + self.COURSE_STEPS * min((self.seconds - self.warmup_seconds) / remaining, 1.0)

    def steps_estimate(self, step: int) -> int:
        """The number of steps the run will have at the current speed."""
        if step == 0 or self.seconds == 0:
            return step
        return step + max(0, int((self.budget - self.seconds) * step / self.seconds))

    def state(self) -> dict:
        return {"train_seconds": self.seconds, "warmup_seconds": self.warmup_seconds}


class StepSchedule:
    """The learning-rate schedule of a run that counts steps: the scheduler's course of `course_steps` steps, step by
    step, as planned. A resume with another --max-steps (or --epochs) spreads the rest of the course, from where it
    stood at the checkpoint (`from_position` at step `from_step`), evenly over the steps up to the new last one
    (`to_step`), as TrainingClock spreads it over the time left: the rate goes on from the checkpoint's, without a
    jump, and ends its course (0, for linear and cosine) at the new last step. The warm-up still counts steps. The
    checkpoints record it, so that a later resume of the same length continues it exactly."""

    def __init__(self, course_steps: int, from_step: int = 0, from_position: float = 0, to_step: int | None = None):
        self.course_steps, self.from_step, self.from_position = course_steps, from_step, from_position
        self.to_step = course_steps if to_step is None else to_step

    def schedule_step(self, step: int) -> float:
        """Where the scheduler's course stands after `step` steps (`step` itself as planned)."""
        if step < self.from_step:  # (in the warm-up)
            return step
        if self.to_step <= self.from_step:
            return self.from_position
        # (multiplied before dividing: a planned course gives `step` exactly, as the scheduler counted it)
        course_left, steps_left = self.course_steps - self.from_position, self.to_step - self.from_step
        return self.from_position + (step - self.from_step) * course_left / steps_left

    def ending_at(self, step: int, max_steps: int, warmup_steps: int) -> "StepSchedule":
        """This schedule for a run resumed at `step` that ends at `max_steps`: itself where that is its own end."""
        if max_steps == self.to_step:
            return self
        start = max(step, warmup_steps)
        return StepSchedule(self.course_steps, start, self.schedule_step(start), max_steps)

    def state(self) -> dict:
        return {"course_steps": self.course_steps, "from_step": self.from_step, "from_position": self.from_position,
                "to_step": self.to_step}


def planned_steps(max_steps: int | None, epochs: float, batches, accumulation: int) -> int:
    """A run's optimizer steps: --max-steps, or those of --epochs over the training text."""
    return max_steps if max_steps is not None else math.ceil(epochs * batches.steps_per_epoch / accumulation)


def resumed_schedule(saved_state: dict, batches, accumulation: int) -> StepSchedule:
    """The step schedule that a checkpoint's run followed."""
    if "schedule" in saved_state:
        return StepSchedule(**saved_state["schedule"])
    # (older versions did not record it: their scheduler ran over their own run's steps, as planned)
    saved = saved_state["settings"]
    return StepSchedule(max(planned_steps(saved.get("max_steps"), saved["epochs"], batches, accumulation), 1))


def course_state(clock: TrainingClock | None, schedule: StepSchedule | None) -> dict:
    """What a checkpoint and the final model record of the learning-rate schedule's course."""
    return clock.state() if clock is not None else {"schedule": schedule.state()}


def keep_freed_memory() -> None:
    """Have glibc's malloc keep freed memory for reuse instead of handing it back to the system: every training step
    allocates and frees the same large buffers, and memory fresh from the system costs a page fault per 4 KiB on
    first use (tens of milliseconds a step on CPU). Buffers up to 32 MiB (glibc's largest setting) then come from
    the reused heap. Nothing changes where the C library is not glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # mallopt's parameter numbers (malloc.h)
    libc.mallopt(m_mmap_threshold, 32 << 20)
    libc.mallopt(m_trim_threshold, 1 << 30)


def set_float32_precision(mixed_precision: str) -> None:
    """Without mixed precision, float32 is exact: TF32 off in CUDA's multiplies and cuDNN's convolutions (cuDNN's
    default lets them use it)."""
    if mixed_precision == "no":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


def set_learning_rate(optimizer, scheduler, schedule_step: float) -> None:
    """The learning rate that `scheduler`'s own schedule gives at `schedule_step` (possibly fractional)."""
    assign_learning_rates(optimizer, [base * multiplier(schedule_step)
                                      for base, multiplier in zip(scheduler.base_lrs, scheduler.lr_lambdas)])


# ---- the run -------------------------------------------------------------------------------------------------


def check_trackers(names: list[str]) -> None:
    """--report-to: each name an Accelerate tracker whose package is installed. (Accelerate drops a missing one with
    a warning, and the run would log nowhere.)"""
    import accelerate.utils
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS

    for name in names:
        if name not in LOGGER_TYPE_TO_CLASS:
            raise PretrainError(f"--report-to {name}: not one of Accelerate's trackers ({', '.join(LOGGER_TYPE_TO_CLASS)})")
        if not getattr(accelerate.utils, f"is_{name}_available")():
            raise PretrainError(f"--report-to {name}: the {name} package is not installed")


def train(args: argparse.Namespace) -> dict:
    """One pretraining run, in this process and in each other process of a distributed launch: the held-out
    results (empty without --validation-file)."""
    run_started = time.perf_counter()
    keep_freed_memory()
    check_trackers(args.report_to)
    # Under torchrun on a machine without an accelerator (CUDA, XPU, ...), Accelerate forms a group of CPU processes
    # only when told to (ACCELERATE_USE_CPU=1): without it each process ran alone, and they took each other for
    # another run.
    several_on_cpu = int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.accelerator.is_available()
    # Trackers that write files (TensorBoard's events) write them into the output folder.
    accelerator = Accelerator(mixed_precision=args.mixed_precision, log_with=args.report_to or None,
                              project_dir=args.output_dir, cpu=several_on_cpu)
    if parse_flag_from_env("ACCELERATE_USE_FSDP") and accelerator.distributed_type != DistributedType.FSDP:
        trains = ("this one process trains alone" if accelerator.distributed_type == DistributedType.NO else
                  f"these processes train as {accelerator.distributed_type.value}, each")
        accelerator.print(f"FSDP was asked for (fsdp.yaml), which Accelerate forms for several GPU processes only: "
                          f"{trains} holding the whole model")
    with output_lock(accelerator, args.output_dir):
        results = train_with(accelerator, args, run_started)
    # The DDP-wrapped model, a local of train_with, is gone before the process group. Otherwise DDP's reducer is the
    # group's last owner, and freeing it, with the GIL held, runs gloo's destructor, which joins worker threads that
    # may be waiting for the GIL to free a collective's tensors: a hang at exit (1 two-process run in 20 on 2 cores).
    # Freed through the group's own Python object, in end_training, the destructor releases the GIL first.
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return results


@contextlib.contextmanager
def output_lock(accelerator: Accelerator, output_dir: str):
    """OUTPUT_DIR.lock, beside the folder (never in it: not in the model, not seen by the checks of what it holds),
    held by the main process for the whole run, so that a second run into the same folder (a --resume while the
    first trains) is refused instead of mixing its log and checkpoints with the first's. Where the folder above
    cannot be written (a mounted volume in a read-only one), the run goes on without the lock, and says so."""
    with contextlib.ExitStack() as held:

        def take_the_lock() -> None:
            check_output_location(output_dir, "folder", error=PretrainError, writes_inside=True)
            real = Path(output_dir).resolve()  # (one lock however the folder is named, links followed)
            real.parent.mkdir(parents=True, exist_ok=True)
            lock = real.with_name(f"{real.name}.lock")
            try:
                held.enter_context(OutputLock(lock, output_dir, error=PretrainError))
            except OSError as error:
                accelerator.print(f"warning: {lock}: cannot write the lock of --output-dir there ({error.strerror}), "
                                  "so a second run into it would not be refused")

        on_the_first_process(accelerator, take_the_lock)  # (the others learn whether the run may go on)
        yield


def train_with(accelerator: Accelerator, args: argparse.Namespace, run_started: float) -> dict:
    """train's run within ACCELERATOR's processes: every check, the data, the steps and the saved model."""
    settings = resolve_settings(args, accelerator.num_processes)
    settings["mixed_precision"] = accelerator.mixed_precision
    versions = library_versions()  # (recorded with every checkpoint and the final model)
    if accelerator.mixed_precision == "fp16" and accelerator.device.type == "cpu":
        # Accelerate has no fp16 autocast on the CPU: the run would train in float32 and record fp16.
        raise PretrainError("--mixed-precision fp16 (or Accelerate's configuration) needs a GPU: on the CPU Accelerate "
                            "trains in float32; use bf16 or no")
    set_float32_precision(accelerator.mixed_precision)
    output_dir = Path(args.output_dir)
    main_process = accelerator.is_main_process
    source_config = check_init_from(Path(args.init_from)) if args.init_from else None
    if args.init_from and Path(args.init_from).exists() and input_inside(output_dir, [args.init_from]) is not None:
        raise PretrainError(f"--init-from {args.init_from} is inside --output-dir {output_dir}, whose model this run "
                            "replaces: write to another folder")
    # Nothing is written into OUTPUT_DIR until every check below has passed (a refused run leaves it as it was);
    # only what a crash inside a save left is put right first, so that the checkpoints are seen as they are.
    on_the_first_process(accelerator, lambda: output_dir.is_dir() and clean_up_interrupted_saves(output_dir))
    checkpoint = find_resume_checkpoint(args, output_dir)
    if checkpoint is not None:
        verify_resume_checkpoint(checkpoint)
        saved_state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
        changed = changed_options(saved_state["settings"], settings)
        if changed:
            raise PretrainError(f"--resume {checkpoint}: the run was started with other options ({', '.join(changed)}); "
                                "resume with the original command")
        # (other words from the same file: named here, not as other text by the digests compared later)
        splitting = (saved_state.get("data") or {}).get("word_splitting")  # (older checkpoints did not record it)
        if splitting is not None and splitting != args.word_splitting:
            raise PretrainError(f"--resume {checkpoint}: the run was started with --word-splitting {splitting}, now "
                                f"{args.word_splitting}; resume with the run's own --word-splitting {splitting}")
    set_seed(args.seed)

    # Data: every process reads the corpus (the datasets cache is built once) and the same vocabulary.
    def read_texts() -> tuple[list, list | None]:
        column = TEXT_COLUMN if args.text_column is None else args.text_column
        train = read_corpus(args.train_file, column, args.word_splitting, "train")
        validation = None
        if args.validation_file:
            validation = read_corpus(args.validation_file, column, args.word_splitting, "validation")
        return train, validation

    # (the first process first: the others then find the datasets cache it built)
    refusals = (DataError, VocabularyError, PretrainError)
    texts = on_the_first_process(accelerator, read_texts, refusals, DataError)
    train_sentences, validation_sentences = on_every_process(
        accelerator, (lambda: texts) if accelerator.is_main_process else read_texts, refusals, DataError)
    tokenizer = choose_tokenizer(args, settings, checkpoint, train_sentences)
    vocabulary = choose_vocabulary(args, checkpoint, train_sentences, tokenizer)
    if checkpoint is not None:
        check_resumed_vocabulary(args, settings, checkpoint, train_sentences, vocabulary)
    else:
        check_softmax_words(args, vocabulary)

    model, new_softmax = build_model(args, settings, vocabulary, tokenizer, source_config)
    if args.softmax_init is not None and not new_softmax:
        why = ("the vocabulary --new-vocabulary built from the text is the folder's own, word for word"
               if args.new_vocabulary else "its vocab.txt is the softmax vocabulary")
        raise PretrainError(f"--softmax-init {args.softmax_init} starts a new softmax, but --init-from {args.init_from} "
                            f"keeps its own ({why}); drop --softmax-init")
    # How the softmax started, recorded with the run: a preset's (or bilm-tf's default) softmax_init starts a new one.
    softmax_start = settings["softmax_init"] if new_softmax else "init-from"
    if not new_softmax and checkpoint is None:
        accelerator.print(f"--init-from {args.init_from}: its softmax goes on (this run's vocabulary is its own), so "
                          f"softmax_init {settings['softmax_init']} (a new softmax's start) does not apply")
    model.set_fast_path(not args.plain_path)
    table = WordTable(model.config.max_characters_per_token, tokenizer)
    train_text = EncodedText.encode(train_sentences, table, vocabulary)
    check_coverage(accelerator, train_text, vocabulary)
    if new_softmax and settings["softmax_init"] == "unigram":
        set_unigram_softmax(model, train_text, vocabulary)
    validation_text = None
    if validation_sentences is not None:
        validation_text = EncodedText.encode(validation_sentences, table, vocabulary)
    data = {
        "word_splitting": args.word_splitting,  # (evaluate.py splits held-out text as the run did)
        "train_file": args.train_file,
        "train_sha256": train_text.digest(table),
        "validation_file": args.validation_file,
        "validation_sha256": None if validation_text is None else validation_text.digest(table),
    }
    read = [(data["train_sha256"], data["validation_sha256"])]
    if accelerator.num_processes > 1 and len(set(gather_object(read))) > 1:  # (each process read the files itself)
        raise PretrainError(f"the processes read different text from --train-file {' '.join(args.train_file)}"
                            + (f" or --validation-file {' '.join(args.validation_file)}" if args.validation_file else "")
                            + " (changed while the run started, or other files on another machine): give every "
                            "process the same files, and leave them as they are during the run")
    if checkpoint is not None:
        check_same_text(checkpoint, data)
    validation = None
    if validation_text is not None:
        validation = EvaluationStream(validation_text, table, vocabulary, rows=args.eval_batch_size, unroll_steps=args.eval_unroll_steps,
                                      num_processes=accelerator.num_processes, process_index=accelerator.process_index)
    shared = dict(seed=args.seed, shuffle=settings["shuffle"], num_processes=accelerator.num_processes, process_index=accelerator.process_index)
    if settings["batching"] == "stream":
        batches = StreamBatches(train_text, table, vocabulary, settings["batch_size"], settings["unroll_steps"], **shared)
    else:
        batches = SentenceBatches(train_text, table, vocabulary, settings["batch_size"],
                                  group_by_length=settings["group_by_length"], **shared)
    accumulation = settings["gradient_accumulation_steps"]
    clock, schedule, planned = None, None, None  # the learning-rate schedule's course follows the clock or the steps
    if settings["max_train_minutes"]:
        clock = TrainingClock(settings["max_train_minutes"], settings["warmup_steps"])
        max_steps = args.max_steps if args.max_steps is not None else sys.maxsize
        schedule_steps = settings["warmup_steps"] + TrainingClock.COURSE_STEPS
    else:
        max_steps = planned_steps(args.max_steps, settings["epochs"], batches, accumulation)
        schedule = StepSchedule(max(max_steps, 1))
    finished_state = finished_run(output_dir, checkpoint, settings, data) if args.resume == "latest" else None
    if checkpoint is not None:
        resumed_step = saved_state["step"]
        if resumed_step > max_steps:  # (it would end at once, at the checkpoint's step, replacing the final model)
            # (the least that goes on: where the run finished, after its latest checkpoint, where it did)
            least = max(resumed_step, finished_state["step"] if finished_state is not None else 0)
            raise PretrainError(
                f"--resume {checkpoint}: that run is at step {resumed_step}, past the {counted(max_steps, 'step')} "
                "this command trains for (--max-steps or --epochs); a resumed run can only go on: pass --max-steps "
                f"{least} or more"
            )
        if clock is not None:
            clock = TrainingClock(settings["max_train_minutes"], settings["warmup_steps"], saved_state["train_seconds"],
                                  saved_state["warmup_seconds"])
        else:
            planned = resumed_schedule(saved_state, batches, accumulation)
            schedule = planned.ending_at(resumed_step, max_steps, settings["warmup_steps"])
    course = clock if clock is not None else schedule
    if schedule is not None:
        schedule_steps = schedule.course_steps
    if finished_state is not None:
        message, done = finished_run_message(args, settings, output_dir, finished_state, checkpoint, max_steps, clock)
        accelerator.print(message)
        if done:
            results = output_dir / "eval_results.json"
            return json.loads(results.read_text(encoding="utf-8")) if results.is_file() else {}
    notice = checkpoint_notice(args, settings, max_steps)
    if notice:
        accelerator.print(notice)
    if checkpoint is None and args.resume is not None:
        accelerator.print(f"no checkpoint in {output_dir}: starting from the beginning")
    elif checkpoint is not None and schedule is not planned and settings["lr_scheduler"] != "constant":
        accelerator.print(f"the {settings['lr_scheduler']} schedule, planned to end at step {planned.to_step}, goes on "
                          f"from its rate at step {schedule.from_step} and ends its course at step {max_steps}, this "
                          "run's last")

    if args.freeze_body:
        model.elmo.requires_grad_(False)
    parameters = [parameter for parameter in model.parameters() if parameter.requires_grad]
    optimizer = make_optimizer(parameters, settings, accelerator.device.type)
    scheduler = get_scheduler(settings["lr_scheduler"], optimizer, num_warmup_steps=settings["warmup_steps"], num_training_steps=schedule_steps)
    model, optimizer = accelerator.prepare(model, optimizer)
    # Not prepared: Accelerate would step a prepared scheduler once per process and step. Not stepped either: after
    # each step the rate is set from where the course stands (`course`). Its state stays in the checkpoints, which
    # Accelerate loads only with the same registered objects.
    accelerator.register_for_checkpointing(scheduler)

    step, states = 0, None
    earlier_seconds = 0.0  # of the processes before a resume, up to the checkpoint it resumes from
    unlogged = None  # the losses summed since the last logged step, at the checkpoint a resume starts from
    if checkpoint is not None:
        load_training_state(accelerator, checkpoint)
        step = saved_state["step"]
        earlier_seconds = saved_state.get("seconds", 0.0)  # (checkpoints of older versions did not record it)
        unlogged = saved_state.get("unlogged")  # (nor this: their sums restarted at the checkpoint)
        states = load_carried_states(checkpoint, accelerator.process_index, accelerator.device)
        set_learning_rate(optimizer, scheduler, course.schedule_step(step))
        accelerator.print(f"resumed from {checkpoint} at step {step}")
        saved = saved_state.get("versions")  # (older checkpoints did not record them)
        if saved is not None and saved != versions:
            accelerator.print(
                f"{checkpoint} was saved by hf-elmo {saved.get('hf_elmo')} with torch {saved.get('torch')}, this run "
                f"has hf-elmo {versions['hf_elmo']} with torch {versions['torch']}: it goes on, but its numbers may "
                "differ in their last bits from a run that was never interrupted"
            )
    # A resume from before OUTPUT_DIR's latest checkpoint (--resume PATH, PATH in OUTPUT_DIR) replaces the course
    # after PATH: its later checkpoints would have a later --resume go on with that course, past the log this run cuts
    # back to PATH's step.
    abandoned = [] if checkpoint is None or not in_folder(checkpoint, output_dir) else [
        old for found, old in list_checkpoints(output_dir) if found > step]
    if abandoned:
        accelerator.print(f"--resume {checkpoint}: this run replaces what followed step {step}: removing "
                          f"{', '.join(old.name for old in abandoned)}")
    accelerator.wait_for_everyone()  # (every process has loaded what it resumes from: nothing it reads goes)

    def start_changing_the_folder() -> None:  # every check has passed: the run starts changing OUTPUT_DIR
        output_dir.mkdir(parents=True, exist_ok=True)
        for old in [old for _, old in list_checkpoints(output_dir)] if args.overwrite_output_dir else abandoned:
            remove_checkpoint(old)
        # An earlier end's record would tell a later --resume that the run had finished, even where this one (resumed
        # from an earlier step, or continuing a finished run) crashes before it gets there, the log cut back.
        try:
            (output_dir / "trainer_state.json").unlink(missing_ok=True)
        except OSError as error:
            raise PretrainError(f"{output_dir / 'trainer_state.json'}: could not be removed ({failure_text(error)})") from None

    on_the_first_process(accelerator, start_changing_the_folder)  # (the others wait for it)
    log = TrainingLog(output_dir / "log.jsonl", accelerator,
                      (step, checkpoint.parent / "log.jsonl") if checkpoint is not None else None)

    def run_seconds() -> float:
        """The run's wall time so far, the processes before a resume counted up to their checkpoint."""
        return round(earlier_seconds + time.perf_counter() - run_started, 1)

    accelerator.init_trackers("elmo-pretraining", config={k: v for k, v in settings.items() if isinstance(v, (int, float, str, bool))})
    unwrapped = accelerator.unwrap_model(model)
    parameter_count = sum(p.numel() for p in unwrapped.parameters())
    accelerator.print(
        f"{args.preset or args.init_from}: {parameter_count:,} parameters ({parameter_count - unwrapped.softmax.weight.numel() - unwrapped.softmax.bias.numel():,} without the softmax), "
        f"vocabulary {len(vocabulary):,} words, {train_text.num_predictions:,} training targets per direction, "
        f"{batches.steps_per_epoch / accumulation:.0f} steps per epoch, "
        + (f"{settings['max_train_minutes']:g} minutes of training" if clock else counted(max_steps, "step"))
        + f", {counted(accelerator.num_processes, 'process', 'processes')}"
    )

    def evaluate() -> dict:
        results = perplexity(unwrapped, validation, accelerator.device, accelerator.autocast, lambda t: accelerator.reduce(t, "sum"))
        record = {"step": step, **{f"eval_{name}": value for name, value in results.items()}}
        log.write(record)
        accelerator.log(record, step=step)
        accelerator.print(
            f"step {step}: held-out perplexity forward {results['forward_perplexity']:.2f}, "
            f"backward {results['backward_perplexity']:.2f}, average {results['average_perplexity']:.2f}"
        )
        if not math.isfinite(results["average_perplexity"]):  # (the model is still saved: its loss curve tells why)
            accelerator.print(f"step {step}: the held-out loss is not finite, the model has diverged; a lower "
                              "--learning-rate (or --max-grad-norm) keeps it from that")
        return results

    if validation is not None and checkpoint is None and args.init_from:
        evaluate()  # where an adapted model starts
    total = clock.steps_estimate(step) if clock else max_steps
    progress = tqdm(total=total or None, initial=step, disable=not main_process, desc="pretraining", dynamic_ncols=True)
    sums = torch.zeros(4, dtype=torch.float64, device=accelerator.device)  # loss, forward, backward, target words
    steps_in_sums, started = 0, time.perf_counter()
    if unlogged is not None:  # the next record averages the steps since the last one, as without the interruption
        if main_process:  # (the sums of all processes: the others start from zero, and logging adds them up)
            sums += torch.tensor(unlogged["sums"], dtype=torch.float64, device=accelerator.device)
        steps_in_sums, started = unlogged["steps"], started - unlogged["seconds"]
    graphed, failure_said = None, False
    unsupported = "--no-cuda-graph" if args.no_cuda_graph else graph_unsupported_reason(
        accelerator.device, accelerator.num_processes, accumulation, batches.stateful, settings["optimizer"],
        unwrapped.config.lm_negative_samples, unwrapped.config.lm_vocab_size, accelerator.mixed_precision)
    if unsupported is None:
        autocast_dtype = torch.bfloat16 if accelerator.mixed_precision == "bf16" else None
        graphed = GraphedTrainingStep(unwrapped, optimizer.optimizer, settings["max_grad_norm"], autocast_dtype)
    if accelerator.device.type == "cuda":
        accelerator.print("each training step is recorded as one CUDA graph and replayed" if graphed else
                          f"training steps are not recorded as a CUDA graph: {unsupported}")
    finished = step >= max_steps or (clock is not None and clock.done)
    first_step = step
    while not finished:
        model.train()
        step_started = time.perf_counter()
        batch = batches.batch(step * accumulation) if graphed is not None else None
        if graphed is not None and graphed.fits(batch):  # (stream windows always do)
            if batches.starts_row_streams(step):
                states = None
            losses, grad_norm, states = graphed.step(batch, states)
            sums[:3] += losses
            sums[3] += int((batch["labels"] != -100).sum())
            if graphed.failure is not None and not failure_said:
                accelerator.print(f"the training step could not be recorded as a CUDA graph ({graphed.failure}); its "
                                  "kernels run one by one")
                failure_said = True
        else:
            if graphed is not None:  # (a recorded step leaves its gradients in place, which backward would add to)
                optimizer.zero_grad(set_to_none=True)
            micro_batches = [batches.batch(step * accumulation + micro) for micro in range(accumulation)]
            shares = step_shares(micro_batches, accelerator)
            for micro, batch in enumerate(micro_batches):
                index = step * accumulation + micro
                if batches.starts_row_streams(index):
                    states = None
                scale = loss_scale(settings["optimizer"], batch["labels"], shares[micro], accumulation)
                batch = {name: tensor.to(accelerator.device) for name, tensor in batch.items()}
                sync = contextlib.nullcontext() if micro == accumulation - 1 else accelerator.no_sync(model)
                with sync:
                    output = model(**batch, initial_states=states, return_dict=True)
                    accelerator.backward(output.loss * scale)
                if batches.stateful:
                    states = tuple(state.detach() for state in output.final_states)
                losses = torch.stack([output.loss, output.forward_loss, output.backward_loss]).detach().double()
                sums[:3] += losses * shares[micro]
                sums[3] += (batch["labels"] != -100).sum()
            grad_norm = None
            if settings["max_grad_norm"]:
                grad_norm = accelerator.clip_grad_norm_(model.parameters(), settings["max_grad_norm"])
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        step += 1
        if clock is not None:
            seconds = torch.tensor([time.perf_counter() - step_started], dtype=torch.float64, device=accelerator.device)
            clock.add(accelerator.reduce(seconds, "max").item(), step)
        set_learning_rate(optimizer, scheduler, course.schedule_step(step))
        finished = step >= max_steps or (clock is not None and clock.done)
        steps_in_sums += 1
        progress.update(1)

        if step % settings["logging_steps"] == 0 or finished:  # (a time limit ends at any step)
            # (read to the host first, which waits for the steps a GPU still has queued: then the time is theirs)
            totals = accelerator.reduce(sums, "sum").tolist()
            elapsed = time.perf_counter() - started
            record = {
                "step": step,
                "epoch": step * accumulation / batches.steps_per_epoch,
                "loss": totals[0] / (steps_in_sums * accelerator.num_processes),
                "forward_loss": totals[1] / (steps_in_sums * accelerator.num_processes),
                "backward_loss": totals[2] / (steps_in_sums * accelerator.num_processes),
                "learning_rate": float(optimizer.param_groups[0]["lr"]),  # (a tensor in a recorded step)
                "words_per_second": totals[3] / elapsed,
            }
            if grad_norm is not None:
                record["grad_norm"] = float(grad_norm)
            log.write(record)
            accelerator.log({k: v for k, v in record.items() if k != "step"}, step=step)
            progress.set_postfix(loss=f"{record['loss']:.3f}", words_per_s=f"{record['words_per_second']:.0f}")
            if clock is not None:
                progress.total = max(clock.steps_estimate(step), step)
                progress.refresh()
            sums.zero_()
            steps_in_sums, started = 0, time.perf_counter()
        if validation is not None and settings["eval_steps"] and step % settings["eval_steps"] == 0 and not finished:
            evaluate()
        if settings["save_steps"] and step % settings["save_steps"] == 0 and not finished:
            unlogged = {"sums": accelerator.reduce(sums, "sum").tolist(), "steps": steps_in_sums,
                        "seconds": time.perf_counter() - started}
            trainer_state = {"step": step, "epoch": step * accumulation / batches.steps_per_epoch, "settings": settings,
                             "softmax_start": softmax_start, "data": data, **course_state(clock, schedule),
                             "versions": versions,
                             "seconds": run_seconds(),
                             "unlogged": unlogged}
            save_checkpoint(accelerator, model, output_dir, step, states, trainer_state, vocabulary, tokenizer,
                            args.save_total_limit)
    progress.close()

    results = {}
    if validation is not None:
        # A resume that ends where its checkpoint was saved (--max-steps that step) evaluated it before the save:
        # the log keeps that record, which a second evaluation would repeat. (Every process must make the same choice.)
        logged = [log.evaluation_at(step) if step == first_step and checkpoint is not None else None]
        broadcast_object_list(logged)
        results = logged[0] or evaluate()
    # Every process must hold the same model (FSDP processes hold shards, which get_state_dict gathers).
    digests = None
    if accelerator.distributed_type != DistributedType.FSDP:
        digests = accelerator.gather(torch.tensor([weights_digest(unwrapped)], device=accelerator.device)).tolist()
    state_dict = accelerator.get_state_dict(model)

    def save_the_final_model() -> None:  # (the first process; a write that fails is every process's SaveFailure)
        result_lines = ""
        if results:
            result_lines = (
                f"Held-out perplexity after {counted(step, 'step')}: forward {results['forward_perplexity']:.2f}, "
                f"backward {results['backward_perplexity']:.2f}, average {results['average_perplexity']:.2f} "
                f"({results['target_words']:,} target words per direction)."
            )
        source = "pretrained with `modeling/pretrain.py`" + (f" `--preset {args.preset}`" if args.preset else "")
        source += f" from `{args.init_from}`" if args.init_from else ""
        checkpoints = list_checkpoints(output_dir)
        final_state = {
            "step": step,
            "settings": settings,
            "softmax_start": softmax_start,
            "epoch": step * accumulation / batches.steps_per_epoch,
            "data": data,
            "parameters": parameter_count,
            **course_state(clock, schedule),
            # (a later --resume tells by it that this final model ends the run of that checkpoint)
            "latest_checkpoint": checkpoint_record(checkpoints[-1][1]) if checkpoints else None,
            "seconds": run_seconds(),
            "device": torch.cuda.get_device_name(accelerator.device) if accelerator.device.type == "cuda" else cpu_name(),
            "versions": versions,
            "weights_digest_per_process": digests,
        }
        card = {"language": args.language or folder_card_language(args.init_from),
                "license": args.license or folder_card_license(args.init_from)}
        save_final_model(unwrapped, state_dict, vocabulary, tokenizer, output_dir, source, result_lines, card,
                         {"eval_results.json": results, "trainer_state.json": final_state})

    on_the_first_process(accelerator, save_the_final_model, (SaveFailure,), SaveFailure)
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        train(args)
    except SaveFailure as failure:  # (a full disk, say: one line, and what the run leaves to go on from)
        traceback.clear_frames(failure.__traceback__)  # (the run's locals go first: its progress bar ends its line)
        print(f"error: {failure}; {resume_advice(args)}", file=sys.stderr)
        return 2
    except (PretrainError, DataError, VocabularyError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupt:  # (Ctrl-C: one line, not a traceback from wherever the step was)
        traceback.clear_frames(interrupt.__traceback__)  # (the run's locals go first: its progress bar ends its line)
        print(f"interrupted: {resume_advice(args)}", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
