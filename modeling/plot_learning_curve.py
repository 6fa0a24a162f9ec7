"""Plot a pretraining run's learning curve (OUTPUT_DIR/log.jsonl) as a PNG.

    python modeling/plot_learning_curve.py OUTPUT_DIR/log.jsonl curve.png [--title TEXT]

Left: the training loss (both directions, with the softmax the run trained with: sampled or full), averaged over
each logging interval. Right: the held-out perplexity of each direction (full softmax) at every evaluation. Needs
matplotlib (`pip install matplotlib`; `make ptb-plot` installs it into .venv).
"""

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hf_elmo.files import atomic_file, check_output_location, read_text_file  # noqa: E402


EVALUATION_FIELDS = ("eval_forward_perplexity", "eval_backward_perplexity", "eval_average_perplexity")


def read_log(path: str) -> list[dict]:
    """The records of a log.jsonl, or a ValueError naming the file and the line that does not read as a record of
    an optimizer step (a JSON object with its `step`; an evaluation's with its three perplexities). A last line cut
    short, without its newline (a run stopped while writing it, as pretrain.py's log allows), is left out, saying
    so."""
    text = read_text_file(path, "training log")
    lines = text.splitlines()
    records = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                if number == len(lines) and not text.endswith("\n"):
                    print(f"{path}: line {number}, the last, is cut short (the run stopped while writing it): left "
                          "out", file=sys.stderr)
                    break
                raise ValueError(f"{path}: line {number} is not a JSON record") from None
            if not isinstance(record, dict) or "step" not in record:
                raise ValueError(f"{path}: line {number} is not a record of a training step (a JSON object with a "
                                 "\"step\")")
            if any(name in record for name in EVALUATION_FIELDS) and not all(name in record for name in EVALUATION_FIELDS):
                raise ValueError(f"{path}: line {number} is an evaluation without all of {', '.join(EVALUATION_FIELDS)}")
            records.append(record)
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", help="log.jsonl of a pretraining run")
    parser.add_argument("output", help="PNG file to write")
    parser.add_argument("--title", default=None)
    args = parser.parse_args(argv)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        print("error: plotting needs matplotlib: pip install matplotlib", file=sys.stderr)
        return 2
    try:
        check_output_location(args.output, "file")
        records = read_log(args.log)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    training = [r for r in records if "loss" in r]
    evaluations = [r for r in records if "eval_forward_perplexity" in r]
    if not training:
        print(f"error: {args.log}: no training steps logged", file=sys.stderr)
        return 2

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.plot([r["step"] for r in training], [r["loss"] for r in training], linewidth=0.8, color="tab:gray")
    left.set_xlabel("optimizer step")
    left.set_ylabel("training loss (the run's softmax)")
    left.grid(alpha=0.3)
    if evaluations:
        steps = [r["step"] for r in evaluations]
        for name, color in (("forward", "tab:blue"), ("backward", "tab:orange"), ("average", "tab:green")):
            values = [r[f"eval_{name}_perplexity"] for r in evaluations]
            right.plot(steps, values, marker="o", markersize=3, label=f"{name} ({values[-1]:.1f})", color=color)
        right.set_yscale("log")
        plain = matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}")
        right.yaxis.set_major_formatter(plain)
        right.yaxis.set_minor_formatter(plain)
        right.set_xlabel("optimizer step")
        right.set_ylabel("held-out perplexity (full softmax)")
        right.legend()
        right.grid(alpha=0.3, which="both")
    else:
        right.set_axis_off()
    if args.title:
        figure.suptitle(args.title)
    figure.tight_layout()
    with atomic_file(args.output, "wb") as picture:  # written whole or not at all
        figure.savefig(picture, format="png", dpi=120)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
