"""`hf-elmo demo`: what contextual vectors are for, shown on repeated and ambiguous words."""

import os
import unicodedata
from dataclasses import dataclass

import torch

from .default_model import default_model_path
from .embedder import load_model
from .files import atomic_file, check_output_location
from .modeling_elmo import ElmoModel
from .tokenization_elmo import ElmoTokenizer

# Pairs of contexts for one word: (sentence, position of the word) twice.
SEED_EXAMPLES = [
    (("I eat an apple .", 3), ("Apple is a company .", 0)),
    (("He sat on the river bank .", 5), ("She deposited cash at the bank .", 5)),
    (("天气不错！小天你说是吗？", 0), ("天气不错！小天你说是吗？", 6)),
]

# Ambiguous words, each in sentences of two senses. The word is written the same way in every sentence, so the
# context-free layer 0 cannot tell the senses apart and only context can.
SENSE_EXAMPLES = {
    "bank": {
        "river": [
            "They walked along the bank of the river .",
            "The boat was pulled up on the muddy bank .",
            "Trees grew thick on the far bank of the stream .",
            "The water rose over the bank after the rain .",
        ],
        "money": [
            "She opened an account at the bank .",
            "The bank raised its interest rates .",
            "He borrowed money from the bank to buy a house .",
            "The bank closed its doors during the crisis .",
        ],
    },
    "plant": {
        "factory": [
            "The company built a new steel plant in Ohio .",
            "Workers at the power plant went on strike .",
            "The plant produces two thousand cars a year .",
            "They closed the chemical plant last year .",
        ],
        "vegetation": [
            "She watered the plant on the window sill .",
            "The plant grows small white flowers in spring .",
            "Every plant needs light and water to grow .",
            "The leaves of the plant turned yellow .",
        ],
    },
    "interest": {
        "finance": [
            "The loan carries an interest rate of five percent .",
            "We must reduce the interest on the public debt .",
            "Savers earn interest on their deposits .",
            "The government paid interest to the bondholders .",
        ],
        "curiosity": [
            "She has a great interest in music and art .",
            "The children showed little interest in the lesson .",
            "His interest in science began at school .",
            "The story caught the interest of every reader .",
        ],
    },
    "state": {
        "polity": [
            "Texas became a state in 1845 .",
            "Each state sends two senators to Washington .",
            "The state of New York raised its taxes .",
            "He was elected governor of the state .",
        ],
        "condition": [
            "The house was in a poor state of repair .",
            "She was in a state of shock after the accident .",
            "The patient remained in a stable state .",
            "Water changes its state when it freezes .",
        ],
    },
    "light": {
        "brightness": [
            "The light from the lamp filled the room .",
            "She turned on the light in the kitchen .",
            "The morning light came through the window .",
            "Plants need light to grow .",
        ],
        "weight": [
            "The box was light enough to carry .",
            "He wore a light jacket in the summer .",
            "The new bicycle is very light and fast .",
            "She packed a light bag for the trip .",
        ],
    },
    "spring": {
        "season": [
            "The flowers bloom in the spring .",
            "We plan to travel in the spring of next year .",
            "The snow melts every spring .",
            "Congress will meet again in the spring .",
        ],
        "water": [
            "They drank cold water from the spring .",
            "The village was built around a natural spring .",
            "A clear spring flows from the rock .",
            "The spring never ran dry even in summer .",
        ],
    },
}


@dataclass
class SenseVectors:
    """Every layer's vector (and the mix) of each occurrence of the ambiguous words."""

    words: list[str]  # [occurrences]
    senses: list[str]  # [occurrences]
    sentences: list[str]  # [occurrences]
    layers: list[torch.Tensor]  # per layer (the mix last): [occurrences, 2P]
    layer_names: list[str]


def load_default(model_path: str | None) -> tuple[ElmoModel, ElmoTokenizer, str]:
    """The model `model_path` (a folder or Hub id; default: the default model), its tokenizer, and its path; one
    that cannot be loaded is refused naming it (`embedder.load_model`)."""
    path = default_model_path() if model_path is None else model_path  # ("" is refused by load_model, not the default)
    return *load_model(path), path


@torch.no_grad()
def embed_words(model: ElmoModel, tokenizer: ElmoTokenizer, sentences: list[str], positions: list[int]) -> list[torch.Tensor]:
    """Every layer's vector (and the first mix) of the word at `positions[k]` of `sentences[k]`: [sentences, 2P] each."""
    words = [tokenizer.split_words(sentence) for sentence in sentences]
    batch = tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt")
    output = model(**batch, output_final_states=False, return_dict=True)
    rows = torch.arange(len(sentences))
    index = torch.tensor(positions)
    return [layer[rows, index] for layer in [*output.hidden_states, output.elmo_representations[0]]]


def sense_vectors(model: ElmoModel, tokenizer: ElmoTokenizer, examples: dict = SENSE_EXAMPLES) -> SenseVectors:
    sentences, positions, words, senses = [], [], [], []
    for word, by_sense in examples.items():
        for sense, sense_sentences in by_sense.items():
            for sentence in sense_sentences:
                split = tokenizer.split_words(sentence)
                if split.count(word) != 1:
                    raise ValueError(f"{sentence!r} must contain {word!r} exactly once as a word")
                sentences.append(sentence)
                positions.append(split.index(word))
                words.append(word)
                senses.append(sense)
    layers = embed_words(model, tokenizer, sentences, positions)
    names = [f"layer {j}" for j in range(len(layers) - 1)] + ["mix"]
    return SenseVectors(words, senses, sentences, layers, names)


@dataclass
class NearestSense:
    """One layer's nearest-sense check, per occurrence (in the order of `SenseVectors`)."""

    same: list[float]  # mean cosine similarity to the other occurrences of the word in the same sense
    other: list[float]  # ... and to its occurrences in the other sense
    right: list[bool]  # same > other (a tie, as at layer 0, is not right)

    @property
    def margins(self) -> list[float]:
        return [same - other for same, other in zip(self.same, self.other)]


def nearest_sense(vectors: SenseVectors) -> list[NearestSense]:
    """Per layer (the mix last), each occurrence's mean cosine similarity to the other occurrences of the same word
    in the same sense and to those in the other sense, and whether the first is higher."""
    checks = []
    words, senses = vectors.words, vectors.senses
    for layer in vectors.layers:
        unit = torch.nn.functional.normalize(layer.double(), dim=-1)
        cosine = unit @ unit.T
        check = NearestSense([], [], [])
        for k in range(len(words)):
            same = [m for m in range(len(words)) if m != k and words[m] == words[k] and senses[m] == senses[k]]
            other = [m for m in range(len(words)) if words[m] == words[k] and senses[m] != senses[k]]
            # Round away the last bits, so that identical vectors give an exact tie.
            check.same.append(round(cosine[k, same].mean().item(), 9))
            check.other.append(round(cosine[k, other].mean().item(), 9))
            check.right.append(check.same[-1] > check.other[-1])
        checks.append(check)
    return checks


def nearest_sense_scores(checks: list[NearestSense]) -> list[tuple[int, int]]:
    """
    Per layer of `nearest_sense`'s checks, (right, total): an occurrence is right when its mean cosine similarity
    to the other occurrences of the same word in the same sense is higher than to the occurrences in the other
    sense. A tie (as at layer 0, where every occurrence of a word has one vector) is not right.
    """
    return [(sum(check.right), len(check.right)) for check in checks]


def picture_format(path: str) -> str:
    """The format of the picture at `path`, from its suffix as matplotlib names them (png, pdf, svg, jpg, ...; PNG
    without a suffix), or a ValueError naming the path and the formats: it was a PNG whatever the name said."""
    suffix = os.path.splitext(path)[1].lower().lstrip(".")
    if not suffix:
        return "png"
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:  # (no picture is drawn then: the demo says so)
        return suffix
    formats = FigureCanvasBase.get_supported_filetypes()
    if suffix not in formats:
        raise ValueError(f"{path}: .{suffix} is no picture format matplotlib writes; end the path in one of "
                         f"{', '.join('.' + name for name in sorted(formats))}")
    return suffix


def plot_senses(vectors: SenseVectors, path: str) -> None:
    """A picture (PNG, or the format of `path`'s suffix): one row per ambiguous word, one panel per layer, each
    occurrence projected on the first two principal components of that word's vectors at that layer, coloured by
    sense. Written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    words = list(dict.fromkeys(vectors.words))
    figure, axes = plt.subplots(len(words), len(vectors.layers), figsize=(3 * len(vectors.layers), 2.6 * len(words)),
                                squeeze=False)
    for row, word in enumerate(words):
        members = [k for k, w in enumerate(vectors.words) if w == word]
        word_senses = list(dict.fromkeys(vectors.senses[k] for k in members))
        for column, (layer, name) in enumerate(zip(vectors.layers, vectors.layer_names)):
            points = layer[members].double()
            centred = points - points.mean(dim=0)
            if centred.abs().max() < 1e-6:  # one vector for every occurrence: nothing to project
                projected = torch.zeros(len(members), 2, dtype=torch.float64)
            else:
                _, _, basis = torch.linalg.svd(centred, full_matrices=False)
                projected = centred @ basis[:2].T
            axis = axes[row][column]
            for colour, sense in zip(("tab:blue", "tab:orange"), word_senses):
                chosen = [i for i, k in enumerate(members) if vectors.senses[k] == sense]
                axis.scatter(projected[chosen, 0], projected[chosen, 1], c=colour, label=sense, s=30, alpha=0.8)
            axis.set_title(f"{word!r}, {name}", fontsize=9)
            axis.set_xticks([])
            axis.set_yticks([])
            if column == 0:
                axis.legend(fontsize=7, loc="best")
    figure.suptitle("ELMo vectors of ambiguous words by sense (2-D PCA per panel; layer 0 is context-free)")
    figure.tight_layout()
    try:
        with atomic_file(path, "wb") as picture:
            figure.savefig(picture, format=picture_format(path), dpi=90)
    finally:
        plt.close(figure)


def _padded(text: str, columns: int) -> str:
    """`text` padded to `columns` terminal columns: a wide character (天) takes two."""
    width = sum(2 if unicodedata.east_asian_width(character) in "WF" else 1 for character in text)
    return text + " " * (columns - width)


def run_demo(model_path: str | None = None, plot_path: str | None = "elmo-senses.png") -> dict:
    """Print the seed examples' cosines and the nearest-sense scores, draw the picture; return the figures (also
    the nearest-sense check per word, its mean cosines and margins, and the sentences it gets wrong, per layer). A
    `plot_path` that cannot be written is refused (ValueError) before the model loads."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # the demo's own output is the point
    if plot_path is not None:  # before the model loads and the figures are computed
        check_output_location(plot_path, "file")
        picture_format(plot_path)
    model, tokenizer, path = load_default(model_path)
    layers = model.config.num_lstm_layers + 1
    names = [f"layer {j}" for j in range(layers)] + ["mix"]
    print(f"model: {path} ({layers} layers, each {model.config.hidden_size} wide)\n")
    print("cosine similarity of the word between its two contexts")
    print(f"{'':24}" + "".join(f"{name:>10}" for name in names))
    seed_cosines = {}
    for (first, i), (second, j) in SEED_EXAMPLES:
        vectors = embed_words(model, tokenizer, [first, second], [i, j])
        cosines = [torch.cosine_similarity(v[0], v[1], dim=0).item() for v in vectors]
        label = f"{tokenizer.split_words(first)[i]} / {tokenizer.split_words(second)[j]}"
        seed_cosines[label] = cosines
        print(_padded(label, 24) + "".join(f"{c:10.4f}" for c in cosines))
    print(
        "\nLayer 0 is the context-free character-CNN vector: the same spelling gives exactly 1.0 there (apple and "
        "Apple are different spellings). The biLSTM layers see the sentence, so the vectors part.\n"
    )
    vectors = sense_vectors(model, tokenizer)
    checks = nearest_sense(vectors)
    scores = nearest_sense_scores(checks)
    words = list(SENSE_EXAMPLES)
    print(f"nearest sense: {len(vectors.words)} occurrences of {len(words)} ambiguous words ({', '.join(words)}), "
          "each closer to the same sense in other sentences than to the other sense?")
    print("".join(f"{name:>10}" for name in names))
    print("".join(f"{f'{right}/{total}':>10}" for right, total in scores))
    print("(layer 0 gives one vector per spelling, so it cannot separate senses: every case is a tie)")
    if plot_path is not None:
        try:
            plot_senses(vectors, plot_path)
            print(f"\npicture of the senses, one panel per layer: {os.path.abspath(plot_path)}")
        except ImportError:
            print("\n(matplotlib is not installed: `pip install matplotlib` to draw the picture)")
    return {
        "seed_cosines": seed_cosines,
        "nearest_sense": dict(zip(names, scores)),
        # Per layer: each word's (right, occurrences); the mean over the occurrences of their mean cosine to the
        # same sense and to the other; each occurrence's margin (same - other); the sentences it gets wrong.
        "nearest_sense_by_word": {
            name: {word: (sum(r for r, w in zip(check.right, vectors.words) if w == word), vectors.words.count(word))
                   for word in words}
            for name, check in zip(names, checks)
        },
        "mean_cosines": {
            name: (sum(check.same) / len(check.same), sum(check.other) / len(check.other))
            for name, check in zip(names, checks)
        },
        "margins": {name: check.margins for name, check in zip(names, checks)},
        "misses": {name: [sentence for sentence, right in zip(vectors.sentences, check.right) if not right]
                   for name, check in zip(names, checks)},
    }
