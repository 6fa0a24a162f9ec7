"""The `hf-elmo` command."""

import argparse
import sys

import torch

from .modeling_elmo import ElmoModel
from .tokenization_elmo import ElmoTokenizer

# Pairs of contexts for one word: (sentence, position of the word) twice.
SEED_EXAMPLES = [
    (("I eat an apple .", 3), ("Apple is a company .", 0)),
    (("He sat on the river bank .", 5), ("She deposited cash at the bank .", 5)),
    (("天气不错！小天你说是吗？", 0), ("天气不错！小天你说是吗？", 6)),
]


def demo(model_path: str) -> None:
    """Embed the seed examples and show how the repeated word's vector depends on its sentence."""
    model = ElmoModel.from_pretrained(model_path).eval()
    tokenizer = ElmoTokenizer.from_pretrained(model_path)
    layers = model.config.num_lstm_layers + 1
    print(f"model: {model_path} ({layers} layers, each {model.config.hidden_size} wide)\n")
    header = "".join(f"{f'layer {j}':>10}" for j in range(layers)) + f"{'mix':>10}"
    rows = []
    for (first, i), (second, j) in SEED_EXAMPLES:
        words = [tokenizer.split_words(first), tokenizer.split_words(second)]
        batch = tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt")
        with torch.no_grad():
            output = model(**batch)
        for sentence, sentence_words in zip((first, second), words):
            shapes = ", ".join(str(list(layer.shape[1:])) for layer in output.hidden_states)
            print(f"{sentence!r}: {len(sentence_words)} words; hidden_states {shapes} per sentence")
        vectors = list(output.hidden_states) + [output.elmo_representations[0]]
        cosines = [torch.cosine_similarity(v[0, i], v[1, j], dim=0).item() for v in vectors]
        rows.append((f"{words[0][i]} / {words[1][j]}", cosines))
    print(f"\ncosine similarity of the word between its two contexts\n{'':24}{header}")
    for label, cosines in rows:
        print(f"{label:24}" + "".join(f"{c:10.4f}" for c in cosines))
    print(
        "\nLayer 0 is the context-free character-CNN vector: the same spelling gives exactly 1.0 there "
        "(apple and Apple are different spellings). The biLSTM layers see the sentence, so the vectors part."
    )


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
    embed_parser.add_argument("input", help="text file, one sentence per line")
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
    embed_parser.add_argument("--model", help="a converted ELMo checkpoint folder or Hub id (required for now)")
    embed_parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default 64)")
    embed_parser.add_argument("--stateful", action="store_true",
                              help="carry the LSTM state from batch to batch in file order, as the original did")
    embed_parser.add_argument("--device", help="where to run in a single process, e.g. cuda (default cpu)")
    embed_parser.add_argument("--use-sentence-keys", action="store_true",
                              help="key each dataset by its sentence instead of its line number")
    embed_parser.add_argument("--forget-sentences", action="store_true", help="do not write sentence_to_index")


def embed(args: argparse.Namespace) -> int:
    from .embed_file import process_state
    from .embedder import ElmoEmbedder

    if not args.model:
        print(
            "error: hf-elmo embed needs --model: there is no default ELMo model yet. Pass a converted checkpoint "
            "folder (conversion/convert_original_elmo.py) or a Hub id.",
            file=sys.stderr,
        )
        return 2
    if args.batch_size < 1:
        print(f"error: --batch-size must be at least 1, got {args.batch_size}", file=sys.stderr)
        return 2
    state = process_state()
    device = state.device if state.num_processes > 1 else args.device
    try:
        embedder = ElmoEmbedder(args.model, device=device, stateful=args.stateful)
        summary = embedder.embed_file(
            args.input, args.output, output_format=args.output_format, batch_size=args.batch_size,
            use_sentence_keys=args.use_sentence_keys, forget_sentences=args.forget_sentences,
        )
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if state.is_main_process:
        print(
            f"hf-elmo embed: {summary['sentences']} sentences in {args.output} ({summary['batches']} batches: "
            f"{summary['computed']} computed by this process, {summary['resumed']} finished by an earlier run; "
            f"{summary['seconds']:.1f} s)",
            file=sys.stderr,
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hf-elmo", description="ELMo for Hugging Face transformers")
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser("demo", help="show contextual vectors of repeated words")
    demo_parser.add_argument("--model", required=True, help="a converted ELMo checkpoint folder or Hub id")
    add_embed_parser(commands)
    args = parser.parse_args(argv)
    if args.command == "demo":
        demo(args.model)
    elif args.command == "embed":
        return embed(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
