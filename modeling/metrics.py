"""Entity-level precision, recall and F1 for IOB tags, counted as the CoNLL shared task's conlleval script does."""

from collections.abc import Sequence


def entity_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """
    The entities of one sentence as (type, start, end) word spans, end excluded. An entity starts at `B-X`, or at
    `I-X` after anything but an `X` entity (so IOB1 and IOB2 both read right); it ends before `O`, `B-*` or
    another type's `I-*`.
    """
    spans, kind, start = [], None, 0
    for position, tag in enumerate([*tags, "O"]):
        prefix, _, label = tag.partition("-")
        if kind is not None and (prefix != "I" or label != kind):
            spans.append((kind, start, position))
            kind = None
        if prefix == "B" or (prefix == "I" and kind is None):
            kind, start = label, position
    return spans


def entity_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict[str, float]:
    """Micro-averaged entity precision, recall and F1 (in %) over sentences; an entity counts when type and span match."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted ones")
    found = correct = expected = 0
    for gold_tags, predicted_tags in zip(gold, predicted):
        if len(gold_tags) != len(predicted_tags):
            raise ValueError(f"a sentence has {len(gold_tags)} gold tags but {len(predicted_tags)} predicted ones")
        gold_spans, predicted_spans = set(entity_spans(gold_tags)), set(entity_spans(predicted_tags))
        expected += len(gold_spans)
        found += len(predicted_spans)
        correct += len(gold_spans & predicted_spans)
    precision = 100.0 * correct / found if found else 0.0
    recall = 100.0 * correct / expected if expected else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}
