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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hf-elmo", description="ELMo for Hugging Face transformers")
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser("demo", help="show contextual vectors of repeated words")
    demo_parser.add_argument("--model", required=True, help="a converted ELMo checkpoint folder or Hub id")
    args = parser.parse_args(argv)
    if args.command == "demo":
        demo(args.model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
