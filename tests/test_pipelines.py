"""`pipeline("token-classification")` and `pipeline("feature-extraction")` with ELMo, with hf_elmo imported and as
remote code where hf_elmo cannot be imported: word-level entities with their spans, every aggregation strategy,
batched equal to unbatched."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import (
    BertConfig,
    BertForTokenClassification,
    BertTokenizerFast,
    FeatureExtractionPipeline,
    TokenClassificationPipeline,
    pipeline,
)
from transformers.pipelines.token_classification import AggregationStrategy

from conftest import FIXTURE_SETS, solved_tagger

from hf_elmo import ElmoForTokenClassification, ElmoTokenizer
from hf_elmo.default_model import default_model_path
from hf_elmo.pipelines import ElmoFeatureExtractionPipeline, ElmoTokenClassificationPipeline

TEXTS = ["Peter Blackburn visited Brussels, Belgium.", "Brussels", "He left ."]  # as in remote_pipeline_probe.py
WORDS = ["Peter", "Blackburn", "visited", "Brussels", ",", "Belgium", "."]
LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
TAGS = {  # the tagger below is made to predict these
    "Peter": "B-PER", "Blackburn": "I-PER", "visited": "O", "Brussels": "B-LOC", ",": "O", "Belgium": "B-LOC",
    ".": "O", "He": "O", "left": "O",
}
# The words of TEXTS[0] and their spans in it.
SPANS = [("Peter", 0, 5), ("Blackburn", 6, 15), ("visited", 16, 23), ("Brussels", 24, 32), (",", 32, 33),
         ("Belgium", 34, 41), (".", 41, 42)]


@pytest.fixture(scope="module")
def tagger_folder(converted, tmp_path_factory) -> Path:
    """A word tagger on the fixture ELMo whose classifier is solved (least squares) to predict TAGS in TEXTS."""
    # Every word in each of its contexts (ELMo's vectors are contextual): 11 vectors of 32 numbers, solved exactly.
    words = [word for text in TEXTS for word in ElmoTokenizer().tokenize(text)]
    tags = [TAGS[word] for word in words]
    tokenizer, model = solved_tagger(converted["allennlp-elmo"], TEXTS, tags, LABELS, tag_logit=10.0, other_logit=-10.0)
    folder = tmp_path_factory.mktemp("tagger")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def expected_entities(text, spans, strategy):
    """What the token-classification pipeline must give for `text` with its words at `spans`, by TAGS."""
    tagged = [(word, start, end, TAGS[word]) for word, start, end in spans]
    if strategy == "none":
        return [{"entity": tag, "index": index, "word": word, "start": start, "end": end}
                for index, (word, start, end, tag) in enumerate(tagged) if tag != "O"]
    groups = []
    for word, start, end, tag in tagged:
        kind = tag.split("-")[-1]
        if groups and tag.startswith("I-") and groups[-1]["entity_group"] == kind:
            groups[-1].update(word=text[groups[-1]["start"] : end], end=end)
        else:
            groups.append({"entity_group": kind, "word": word, "start": start, "end": end})
    return [group for group in groups if group["entity_group"] != "O"]


def without_scores(entities):
    return [{key: value for key, value in entity.items() if key != "score"} for entity in entities]


def assert_same_entities(found, expected):
    """The same entities, scores to float rounding (a batch computes them in other sums), and their positions plain
    ints, as transformers' own pipeline gives them (not NumPy's)."""
    assert len(found) == len(expected)
    for one, other in zip(found, expected):
        assert without_scores(one) == without_scores(other)
        assert all(type(entity[key]) is int for entity in one for key in ("index", "start", "end") if key in entity)
        assert [entity["score"] for entity in one] == pytest.approx([entity["score"] for entity in other], abs=1e-5)


def spans_of(text):
    tokenizer = ElmoTokenizer()
    encoding = tokenizer(text, return_offsets_mapping=True)
    return [(text[start:end], start, end) for start, end in encoding["offset_mapping"]]


@pytest.mark.parametrize("strategy", ["none", "simple", "first", "average", "max"])
def test_token_classification_gives_word_entities_with_their_spans(tagger_folder, strategy):
    tagger = pipeline("token-classification", model=str(tagger_folder), aggregation_strategy=strategy)
    assert spans_of(TEXTS[0]) == SPANS
    for text, entities in zip(TEXTS, tagger(TEXTS)):
        assert without_scores(entities) == expected_entities(text, spans_of(text), strategy), (text, strategy)
        for entity in entities:
            assert 0.9 < entity["score"] <= 1.0  # the solved classifier is sure of every word
    # Batched as unbatched, and pre-split words as the words of the text they join into.
    assert_same_entities(tagger(TEXTS, batch_size=2), tagger(TEXTS))
    joined = " ".join(WORDS)
    word_spans, start = [], 0
    for word in WORDS:
        word_spans.append((word, start, start + len(word)))
        start += len(word) + 1
    # (transformers answers a pre-split sentence as a batch of one)
    assert without_scores(tagger(WORDS, is_split_into_words=True)[0]) == expected_entities(joined, word_spans, strategy)


@pytest.mark.parametrize("strategy", ["simple", "first", "average", "max"])
def test_a_groups_word_is_the_text_it_spans(tagger_folder, strategy):
    """transformers joins a group's words with spaces: "Peter  Blackburn" (two spaces) read "Peter Blackburn", and
    a group of Chinese characters "今 天"; each single word was already its span."""
    text = TEXTS[0].replace(" ", "  ", 1)  # (the same words, so the same tags)
    tagger = pipeline("token-classification", model=str(tagger_folder), aggregation_strategy=strategy)
    entities = tagger(text)
    assert [entity["word"] for entity in entities] == ["Peter  Blackburn", "Brussels", "Belgium"]
    assert all(entity["word"] == text[entity["start"] : entity["end"]] for entity in entities)


def test_a_left_padding_tokenizer_gives_the_same_entities_batched(tagger_folder):
    """Batched with a tokenizer that pads on the left, the padding words come before a sentence's own: its spans
    count from its first word (the positions were read as spans, past the list's end: IndexError)."""
    tokenizer = ElmoTokenizer.from_pretrained(tagger_folder, padding_side="left")
    tagger = pipeline("token-classification", model=str(tagger_folder), tokenizer=tokenizer, aggregation_strategy="none")
    assert_same_entities(tagger(TEXTS, batch_size=3), tagger(TEXTS))
    assert without_scores(tagger(TEXTS, batch_size=3)[0]) == expected_entities(TEXTS[0], SPANS, "none")


def test_a_saved_pipeline_is_a_plain_folder_for_any_model(tagger_folder, tiny_bert_folder, tmp_path):
    """Saving a pipeline of either class writes the model's folder as transformers does for its own pipelines: no
    `custom_pipelines` (a BERT's folder, given hf_elmo's pipeline code too, then loaded only as remote code, and an
    ELMo's asked for trust_remote_code with hf_elmo installed); each loads back and tags as before."""
    for name, folder in (("elmo", tagger_folder), ("bert", tiny_bert_folder)):
        tagger = pipeline("token-classification", model=str(folder))
        tagger.save_pretrained(tmp_path / name)
        assert "custom_pipelines" not in (tmp_path / name / "config.json").read_text()
        assert (tmp_path / name / "pipelines.py").exists() == (name == "elmo")  # (an ELMo folder's remote code)
        assert pipeline("token-classification", model=str(tmp_path / name))(TEXTS) == tagger(TEXTS), name


def test_token_classification_refuses_a_stride(tagger_folder):
    with pytest.raises(ValueError, match="takes no stride"):
        pipeline("token-classification", model=str(tagger_folder), aggregation_strategy="first", stride=2)


def test_token_classification_names_an_unknown_aggregation_strategy(tagger_folder):
    """One ValueError naming the value and the allowed ones, when the pipeline is made and when it is called
    (transformers' lookup raised a bare KeyError: 'BEST'); a name in any case, or the enum itself, is taken."""
    allowed = "none, simple, first, average, max"
    with pytest.raises(ValueError, match=rf"^aggregation_strategy must be one of {allowed}, got 'best'$"):
        pipeline("token-classification", model=str(tagger_folder), aggregation_strategy="best")
    tagger = pipeline("token-classification", model=str(tagger_folder), aggregation_strategy="SIMPLE")
    with pytest.raises(ValueError, match=rf"^aggregation_strategy must be one of {allowed}, got 3$"):
        tagger(TEXTS[0], aggregation_strategy=3)
    expected = expected_entities(TEXTS[0], spans_of(TEXTS[0]), "simple")
    assert without_scores(tagger(TEXTS[0])) == expected
    assert without_scores(tagger(TEXTS[0], aggregation_strategy=AggregationStrategy.SIMPLE)) == expected


def test_token_classification_refuses_input_of_the_other_kind(tagger_folder):
    """Words where a string is expected and the other way round: transformers' own messages, not a crash later."""
    tagger = pipeline("token-classification", model=str(tagger_folder))
    with pytest.raises(ValueError, match=r"^When `is_split_into_words=True`, `sentence` must be a list of words\.$"):
        tagger("Peter Blackburn", is_split_into_words=True)
    with pytest.raises(ValueError, match=r"^When `is_split_into_words=False`, `sentence` must be an untokenized string\.$"):
        tagger([WORDS])


def test_feature_extraction_batched_is_unbatched_to_float_rounding_on_the_default_model():
    """The README's figure: the default model's features batched (as the README batches them, and all at once) and
    one sentence at a time within 5e-6, on the fixture's 30 sentences of 3 to 53 words."""

    extractor = pipeline("feature-extraction", model=default_model_path())
    texts = [" ".join(sentence) for batch in FIXTURE_SETS["allennlp-elmo"].batches() for sentence in batch]
    alone = extractor(texts, return_tensors=True)
    for batch_size in (8, len(texts)):
        batched = extractor(texts, batch_size=batch_size, return_tensors=True)
        assert [t.shape for t in batched] == [t.shape for t in alone]
        assert max((b - a).abs().max().item() for b, a in zip(batched, alone)) <= 5e-6


def test_feature_extraction_of_a_task_model_gives_its_bilms_top_layer(tagger_folder):
    """A task model handed to the pipeline gives the features of the ELMo inside it, as its folder does (which
    pipeline() loads as the base model); it failed on the `output_final_states` the pipeline passes."""
    model = ElmoForTokenClassification.from_pretrained(tagger_folder).eval()
    extractor = pipeline("feature-extraction", model=model, tokenizer=ElmoTokenizer.from_pretrained(tagger_folder))
    from_folder = pipeline("feature-extraction", model=str(tagger_folder))
    for found, wanted in zip(extractor(TEXTS, return_tensors=True), from_folder(TEXTS, return_tensors=True), strict=True):
        assert found.shape == wanted.shape and found.shape[2] == 32 and torch.equal(found, wanted)


def test_a_config_that_says_return_dict_false_changes_only_what_a_model_returns(tagger_folder, tmp_path):
    """`return_dict=False` in a folder's config (transformers' switch to tuples, which the body shares with its head)
    makes the heads return tuples of the same values; the heads, the pipelines, the embedder and the demo read the
    biLM's outputs by name as before (they failed on a tuple)."""
    from hf_elmo import ElmoEmbedder, ElmoForSequenceClassification
    from hf_elmo.approximate import approximation_deviation
    from hf_elmo.demo import embed_words, load_default

    folder = tmp_path / "tuples"
    shutil.copytree(tagger_folder, folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    (folder / "config.json").write_text(json.dumps(dict(config, return_dict=False)), encoding="utf-8")
    batch = ElmoTokenizer()(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        for head in (ElmoForTokenClassification, ElmoForSequenceClassification):
            outputs = []
            for source in (tagger_folder, folder):
                torch.manual_seed(0)  # (the sequence head's new classifier: the same draw for both)
                outputs.append(head.from_pretrained(source).eval()(**batch))
            wanted, found = outputs
            assert isinstance(found, tuple) and torch.equal(found[0], wanted.logits), head
    deviations = [approximation_deviation(ElmoForTokenClassification.from_pretrained(source), batch, "nn_lstm")
                  for source in (tagger_folder, folder)]
    assert deviations[0] == deviations[1] and len(deviations[0]) == 3
    for task in ("feature-extraction", "token-classification"):
        assert pipeline(task, model=str(folder))(TEXTS) == pipeline(task, model=str(tagger_folder))(TEXTS), task
    for wanted, found in zip(ElmoEmbedder(tagger_folder).embed_batch(TEXTS), ElmoEmbedder(folder).embed_batch(TEXTS),
                             strict=True):
        assert np.array_equal(found, wanted)
    positions = [1, 0, 1]
    for wanted, found in zip(embed_words(*load_default(str(tagger_folder))[:2], TEXTS, positions),
                             embed_words(*load_default(str(folder))[:2], TEXTS, positions), strict=True):
        assert torch.equal(found, wanted)


@pytest.fixture(scope="module")
def tiny_bert_folder(tmp_path_factory) -> Path:
    """A random 2-layer BERT tagger with a WordPiece vocabulary written here (some words split into pieces)."""
    folder = tmp_path_factory.mktemp("tiny-bert")
    pieces = ["peter", "black", "##burn", "visited", "brussels", ",", "belg", "##ium", ".", "he", "left"]
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *pieces]
    tokenizer = BertTokenizerFast(vocab={token: i for i, token in enumerate(tokens)})
    assert tokenizer.tokenize("Peter Blackburn .") == ["peter", "black", "##burn", "."]
    tokenizer.save_pretrained(folder)
    config = BertConfig(vocab_size=16, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=32, id2label=dict(enumerate(LABELS)),
                        label2id={l: i for i, l in enumerate(LABELS)})
    torch.manual_seed(0)
    BertForTokenClassification(config).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("strategy", ["none", "simple", "first", "average", "max"])
def test_other_models_run_exactly_as_before(tiny_bert_folder, strategy):
    """With hf_elmo imported, pipeline() builds its own class for word tagging: a BERT gives in it what
    transformers' own class gives, entities made of word pieces."""
    model = BertForTokenClassification.from_pretrained(tiny_bert_folder).eval()
    tokenizer = BertTokenizerFast.from_pretrained(tiny_bert_folder)
    tagger = pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy=strategy)
    assert type(tagger) is ElmoTokenClassificationPipeline
    stock = TokenClassificationPipeline(model=model, tokenizer=tokenizer, aggregation_strategy=strategy)
    expected = stock(TEXTS)
    # Entities made of word pieces (joined, or alone with "none"), which an ELMo position never is.
    assert {entity["word"] for entities in expected for entity in entities} & {"##burn", "peter blackburn", "belgium"}
    assert tagger(TEXTS) == expected and tagger(TEXTS, batch_size=2) == stock(TEXTS, batch_size=2)
    assert tagger(WORDS, is_split_into_words=True) == stock(WORDS, is_split_into_words=True)


def test_other_models_tag_long_text_in_overlapping_windows_as_before(tiny_bert_folder):
    """`stride`, which hf_elmo's class passes on for models other than ELMo: windows of 8 pieces overlapping by 2."""
    model = BertForTokenClassification.from_pretrained(tiny_bert_folder).eval()
    tokenizer = BertTokenizerFast.from_pretrained(tiny_bert_folder, model_max_length=8)
    text = " ".join(TEXTS * 3)
    tagger = pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="first", stride=2)
    stock = TokenClassificationPipeline(model=model, tokenizer=tokenizer, aggregation_strategy="first", stride=2)
    assert len(tokenizer(text)["input_ids"]) > 16  # (three windows or more)
    assert tagger(text) == stock(text) and len(stock(text)) > 0


def test_other_models_extract_features_exactly_as_before(tiny_bert_folder):
    """The same for feature extraction: a BERT's features in hf_elmo's pipeline class are transformers' own."""
    model = BertForTokenClassification.from_pretrained(tiny_bert_folder).eval()
    tokenizer = BertTokenizerFast.from_pretrained(tiny_bert_folder)
    extractor = pipeline("feature-extraction", model=model.bert, tokenizer=tokenizer)
    assert type(extractor) is ElmoFeatureExtractionPipeline
    stock = FeatureExtractionPipeline(model=model.bert, tokenizer=tokenizer)
    features = extractor(TEXTS, batch_size=2, return_tensors=True)
    for found, wanted in zip(features, stock(TEXTS, batch_size=2, return_tensors=True), strict=True):
        assert found.shape[1] > 2 and torch.equal(found, wanted)


def test_remote_code_pipelines_without_hf_elmo(tagger_folder, converted, python_without_hf_elmo, tmp_path):
    """The same results where only the files of the saved folders are loaded, as remote code."""
    base = converted["allennlp-elmo"]
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    result = subprocess.run(
        [python_without_hf_elmo, Path(__file__).with_name("remote_pipeline_probe.py"), tmp_path / "results.pt",
         tagger_folder, base],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    remote = torch.load(tmp_path / "results.pt", weights_only=False)

    for strategy in ("none", "simple", "first", "average", "max"):
        assert remote[f"module {strategy}"].startswith("transformers_modules.")
        tagger = pipeline("token-classification", model=str(tagger_folder), aggregation_strategy=strategy)
        assert_same_entities(remote[strategy], tagger(TEXTS))
        for text, entities in zip(TEXTS, remote[strategy]):
            assert without_scores(entities) == expected_entities(text, spans_of(text), strategy)
        assert without_scores(remote[f"{strategy} words"][0]) == without_scores(tagger(WORDS, is_split_into_words=True)[0])
    first = pipeline("token-classification", model=str(tagger_folder), aggregation_strategy="first")
    assert_same_entities(remote["first from objects"], first(TEXTS))

    assert remote["module feature-extraction"].startswith("transformers_modules.")
    local = pipeline("feature-extraction", model=str(base))(TEXTS, return_tensors=True)
    for text, one, batched, here in zip(TEXTS, remote["features"], remote["features batched"], local):
        assert one.shape == (1, len(ElmoTokenizer().tokenize(text)), 32)
        assert torch.allclose(batched, one, atol=1e-6)
        assert torch.equal(one, here)


# The ELMo token-classification pipeline honours transformers' `delimiter` (pre-split words) and a given
# `offset_mapping` (text): the spans it reports are in the sentence the caller means.
TAGGED_WORDS = ["Peter", "Blackburn", "visited", "Brussels"]


@pytest.fixture(scope="module")
def tag_everything():
    """A tagger on the default model that tags every word B-LOC (the classifier reads only its bias)."""
    base = default_model_path()
    model = ElmoForTokenClassification.from_pretrained(
        base, num_labels=2, id2label={0: "O", 1: "B-LOC"}, label2id={"O": 0, "B-LOC": 1}).eval()
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([0.0, 10.0]))
    return model, ElmoTokenizer.from_pretrained(base)


def spans(entities):
    return [(entity["word"], entity["start"], entity["end"]) for entity in entities]


@pytest.mark.parametrize("strategy", ["none", "simple", "first"])
def test_pre_split_words_are_spanned_in_the_words_joined_by_the_delimiter(tag_everything, strategy):
    model, tokenizer = tag_everything
    tagger = pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy=strategy)
    assert isinstance(tagger, ElmoTokenClassificationPipeline)
    for delimiter in (" ", " | ", ""):
        joined = delimiter.join(TAGGED_WORDS)
        (entities,) = tagger(TAGGED_WORDS, is_split_into_words=True, delimiter=delimiter)
        expected, start = [], 0
        for word in TAGGED_WORDS:
            expected.append((word, start, start + len(word)))
            start += len(word) + len(delimiter)
        if strategy == "none":
            assert spans(entities) == expected, delimiter
        assert [joined[s:e] for _, s, e in spans(entities)] == TAGGED_WORDS, delimiter


def test_a_given_offset_mapping_is_the_spans_of_the_words(tag_everything):
    """transformers' `offset_mapping` argument (for tokenizers without offsets of their own): each word's span."""
    model, tokenizer = tag_everything
    tagger = pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="none")
    text = "Peter Blackburn"
    entities = tagger(text, offset_mapping=[(0, 2), (3, 6)])
    assert spans(entities) == [("Pe", 0, 2), ("er ", 3, 6)]
    assert spans(tagger(text)) == [("Peter", 0, 5), ("Blackburn", 6, 15)]
