"""The `hf-elmo` command."""

import argparse
import os
import sys


def add_embed_parser(commands) -> None:
    embed_parser = commands.add_parser(
        "embed",
        help="embed a file, one sentence per line, into HDF5 (the `allennlp elmo` command)",
        description=(
            "Embed every line of INPUT (words separated by whitespace) with ELMo into OUTPUT, laid out as "
            "`allennlp elmo` wrote it: a dataset per line keyed by its line number, and `sentence_to_index`. "
            "An interrupted run resumes where it stopped when run again. Under `accelerate launch` or `torchrun` "
            "the lines are split across the processes."
        ),
    )
    embed_parser.add_argument("input", help="text file, one sentence per line (-: the standard input)")
    embed_parser.add_argument("output", help="HDF5 file to write")
    formats = embed_parser.add_mutually_exclusive_group()
    formats.add_argument("--all", dest="output_format", action="store_const", const="all",
                         help="every layer, [layers, words, 2P] per line (the default)")
    formats.add_argument("--top", dest="output_format", action="store_const", const="top",
                         help="the top biLSTM layer, [words, 2P]")
    formats.add_argument("--average", dest="output_format", action="store_const", const="average",
                         help="the average of the layers, [words, 2P]")
    formats.add_argument("--mix", dest="output_format", action="store_const", const="mix",
                         help="the model's learned scalar mix, [words, 2P]")
    embed_parser.set_defaults(output_format="all")
    embed_parser.add_argument("--model", help="a converted ELMo checkpoint folder or Hub id (default: the default model)")
    embed_parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default 64)")
    embed_parser.add_argument("--stateful", action="store_true",
                              help="carry the LSTM state from batch to batch in file order, as the original did")
    embed_parser.add_argument("--device", help="where to run in a single process, e.g. cuda (default cpu)")
    embed_parser.add_argument("--use-sentence-keys", action="store_true",
                              help="key each dataset by its sentence instead of its line number")
    embed_parser.add_argument("--forget-sentences", action="store_true", help="do not write sentence_to_index")


def report_error(error: Exception) -> int:
    """Print `error: MESSAGE` in one line (some of transformers' messages span several) and give the exit code, 2."""
    print("error: " + " ".join(line.strip() for line in str(error).splitlines() if line.strip()), file=sys.stderr)
    return 2


def embed(args: argparse.Namespace) -> int:
    from .embed_file import check_input_file, check_paths, process_state
    from .embedder import ElmoEmbedder
    from .model_card import counted

    if args.batch_size < 1:
        print(f"error: --batch-size must be at least 1, got {args.batch_size}", file=sys.stderr)
        return 2
    state = process_state()
    if state.num_processes > 1 and args.device is not None:  # (it was dropped without a word, even --device bogus)
        print(f"error: --device {args.device} is for a single process: each of the {state.num_processes} processes "
              f"runs where the launcher puts it ({state.device.type}); leave --device out", file=sys.stderr)
        return 2
    device = state.device if state.num_processes > 1 else args.device
    if args.input == "-":  # (as other commands read it; its name for the checks, the manifest and the messages)
        args.input = "/dev/stdin"
    try:
        check_input_file(args.input, args.use_sentence_keys, state.num_processes)  # both before the model loads
        check_paths(args.input, args.output)
        embedder = ElmoEmbedder(args.model, device=device, stateful=args.stateful)
        summary = embedder.embed_file(
            args.input, args.output, output_format=args.output_format, batch_size=args.batch_size,
            use_sentence_keys=args.use_sentence_keys, forget_sentences=args.forget_sentences,
        )
    except (ValueError, OSError) as error:
        return report_error(error)
    if state.is_main_process:
        print(
            f"hf-elmo embed: {counted(summary['sentences'], 'sentence')} in {args.output} "
            f"({counted(summary['batches'], 'batch', 'batches')}: "
            f"{summary['computed']} computed by this process, {summary['resumed']} finished by an earlier run; "
            f"{summary['seconds']:.1f} s)",
            file=sys.stderr,
        )
    return 0


def versions() -> str:
    """`hf-elmo --version`: hf-elmo's version and those of the two libraries its numbers depend on (torch's with its
    build, `2.13.0+cpu`, which the package metadata leaves out)."""
    import transformers

    from . import library_versions

    ours = library_versions()
    return f"hf-elmo {ours['hf_elmo']} (transformers {transformers.__version__}, torch {ours['torch']})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hf-elmo", description="ELMo for Hugging Face transformers")
    parser.add_argument("--version", action="version", version=versions())
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser("demo", help="show contextual vectors of repeated words")
    demo_parser.add_argument("--model", help="a converted ELMo checkpoint folder or Hub id (default: the default model)")
    demo_parser.add_argument("--plot", default="elmo-senses.png",
                             help="where to write the picture of the senses, in the format its suffix names "
                                  "(.png, .pdf, .svg, ...; default: elmo-senses.png)")
    add_embed_parser(commands)
    args = parser.parse_args(argv)
    try:
        if args.command == "demo":
            from .demo import run_demo

            try:
                run_demo(args.model, args.plot)
            except BrokenPipeError:
                raise
            except (ValueError, OSError) as error:
                return report_error(error)
        elif args.command == "embed":
            return embed(args)
    except KeyboardInterrupt:  # (Ctrl-C: one line, not a traceback from wherever the work was)
        kept = "; the batches finished are kept: run the same command again to go on" if args.command == "embed" else ""
        print(f"hf-elmo {args.command}: interrupted{kept}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # (the reader of the output stopped, `hf-elmo demo | head`: no error of the command's)
        # Python flushes stdout at exit, which would fail on the closed pipe again: write the rest nowhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # (128 + SIGPIPE: what a shell reports of a program that a closed pipe stopped)
    return 0


if __name__ == "__main__":
    sys.exit(main())
