"""modeling_elmo.py outside the task heads: what mutations showed no other test held. Word ids follow their words
where the layout moves them (left padding, a word masked out) and the backward text reads its own; set_fast_path
reaches the pretraining head's fused softmax; pretraining refuses padding inside a row without an attention_mask
and takes int32 labels; tags are added to a card once each; LM dropout keeps 1 - p of a bfloat16 input; a float64
model's losses, the heads' too, are float64."""

import pytest
import torch
import yaml
from torch.nn import functional as F

from hf_elmo import (ElmoConfig, ElmoForPreTraining, ElmoForSequenceClassification, ElmoForTokenClassification, ElmoModel,
                     ElmoTokenizer)
from hf_elmo.modeling_elmo import ElmoLmDropout

TINY = dict(char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 4]], num_highway_layers=1, cell_size=16,
            projection_dim=8)
WORD_INPUT = dict(TINY, word_vocab_size=20, word_embedding_dim=4, bos_word_id=1, eos_word_id=2)


def words(rows, **kwargs):
    return ElmoTokenizer(**kwargs)(rows, is_split_into_words=True, padding=True, return_tensors="pt")


def test_left_padded_word_input_gives_the_right_padded_vectors():
    """Left padding moves each row's words to the front before the LSTMs read them: the word ids move with their
    words, so a left-padded batch gives each word the vectors it gets right-padded, and alone."""
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(**WORD_INPUT)).eval()
    rows = [["a", "big", "word"], ["one"]]
    with torch.no_grad():
        right = model(**words(rows), input_word_ids=torch.tensor([[4, 7, 9], [5, 0, 0]]))
        left = model(**words(rows, padding_side="left"), input_word_ids=torch.tensor([[4, 7, 9], [0, 0, 5]]))
        alone = model(**words(rows[1:]), input_word_ids=torch.tensor([[5]]))
    for layer in range(3):
        assert torch.allclose(left.hidden_states[layer][0], right.hidden_states[layer][0], atol=1e-6)
        assert torch.allclose(left.hidden_states[layer][1, 2], right.hidden_states[layer][1, 0], atol=1e-6)
        assert torch.all(left.hidden_states[layer][1, :2] == 0)
    assert torch.allclose(left.last_hidden_state[1, 2], alone.last_hidden_state[0, 0], atol=1e-6)


def test_a_word_masked_out_takes_its_word_id_with_it():
    """A real word masked out (attention_mask 0) is not read: the row reads as the sentence without it, its
    neighbours' word ids included."""
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(**WORD_INPUT)).eval()
    batch, word_ids = words([["a", "big", "word"]]), torch.tensor([[4, 7, 9]])
    with torch.no_grad():
        masked = model(input_ids=batch["input_ids"], attention_mask=torch.tensor([[1, 0, 1]]), input_word_ids=word_ids)
        without = model(input_ids=batch["input_ids"][:, [0, 2]], input_word_ids=word_ids[:, [0, 2]])
    assert torch.allclose(masked.last_hidden_state[0, [0, 2]], without.last_hidden_state[0], atol=1e-6)
    assert torch.all(masked.last_hidden_state[0, 1] == 0)


def test_the_backward_token_layer_is_its_own_texts_words_and_word_ids():
    """With word input, ElmoForPreTraining's backward text reads backward_input_word_ids, not the forward text's."""
    torch.manual_seed(0)
    model = ElmoForPreTraining(ElmoConfig(**WORD_INPUT, lm_vocab_size=10, output_hidden_states=True)).eval()
    forward = words([["<S>", "a", "big", "word"], ["<S>", "one"]])
    backward = words([["the", "small", "word", "</S>"], ["two", "</S>"]])
    mask = forward["attention_mask"].bool()
    word_ids = torch.tensor([[1, 4, 5, 6], [1, 7, 0, 0]])
    backward_word_ids = torch.tensor([[8, 9, 6, 2], [10, 2, 0, 0]])
    with torch.no_grad():
        output = model(**forward, backward_input_ids=backward["input_ids"], input_word_ids=word_ids,
                       backward_input_word_ids=backward_word_ids)
        expected_forward = model.elmo.char_encoder(forward["input_ids"][mask], word_ids[mask])
        expected_backward = model.elmo.char_encoder(backward["input_ids"][mask], backward_word_ids[mask])
    width = model.config.projection_dim
    token_layer = output.hidden_states[0]
    assert torch.allclose(token_layer[..., :width][mask], expected_forward, atol=1e-6)
    assert torch.allclose(token_layer[..., width:][mask], expected_backward, atol=1e-6)
    assert torch.all(token_layer[~mask] == 0)


def test_set_fast_path_false_gives_the_pretraining_loss_second_order_gradients():
    """The fused sampled softmax gives first-order gradients only and its error says to call set_fast_path(False):
    after that call the loss (sampled softmax, in training) takes a gradient of a gradient, as the plain definition
    does; set_fast_path(True) turns the fused softmax back on."""
    torch.manual_seed(0)
    model = ElmoForPreTraining(ElmoConfig(**TINY, lm_vocab_size=40, lm_negative_samples=8)).train()
    labels = torch.tensor([[3, 4, 5, 6, -100]])
    inputs = dict(words([["<S>", "a", "big", "word", "</S>"]]), labels=labels, backward_labels=labels)
    softmax = model.softmax.weight
    for enabled in (True, False, True):
        model.zero_grad()
        model.set_fast_path(enabled)
        assert model.use_fast_path is enabled
        loss = model(**inputs).loss
        if enabled:
            with pytest.raises(RuntimeError, match=r"first-order gradients only .* set model.set_fast_path\(False\)"):
                torch.autograd.grad(loss, softmax, create_graph=True)
        else:
            (gradient,) = torch.autograd.grad(loss, softmax, create_graph=True)
            gradient.pow(2).sum().backward()
            assert softmax.grad is not None and softmax.grad.abs().sum() > 0


def test_padding_inside_a_pretraining_row_is_refused_without_an_attention_mask():
    """ElmoForPreTraining reads right-padded rows whether or not an attention_mask is given: without one, an
    all-zero (padding) word before a row's last word is refused, not read as a hole in the row."""
    model = ElmoForPreTraining(ElmoConfig(**TINY, lm_vocab_size=10)).eval()
    ids = words([["<S>", "a", "big", "word"]])["input_ids"]
    with torch.no_grad():
        model(input_ids=ids)
        ids[0, 1] = 0
        with pytest.raises(ValueError, match=r"^ElmoForPreTraining reads right-padded rows: attention_mask must be 1 "
                                             r"on a prefix of each row"):
            model(input_ids=ids)
        labels = torch.zeros(1, 4, dtype=torch.long)
        with pytest.raises(ValueError, match="right-padded"):
            model(input_ids=ids, labels=labels, backward_labels=labels)


def test_int32_labels_give_the_loss_of_long_labels():
    """check_inputs takes labels of torch.int as of torch.long: the same loss, with the full softmax (eval) and the
    sampled one (training, the same negatives from one seed)."""
    torch.manual_seed(0)
    model = ElmoForPreTraining(ElmoConfig(**TINY, lm_vocab_size=40, lm_negative_samples=8))
    batch = words([["<S>", "a", "big", "word", "</S>"], ["<S>", "one"]])
    labels = torch.tensor([[3, 4, 5, 6, -100], [7, 2, 9, 9, 9]])  # (past the second row's end: not read)
    backward = torch.tensor([[-100, 1, 3, 4, 5], [-100, 1, 0, 0, 0]])
    with torch.no_grad():
        for training in (False, True):
            model.train(training)
            torch.manual_seed(1)
            expected = model(**batch, labels=labels, backward_labels=backward)
            torch.manual_seed(1)
            found = model(**batch, labels=labels.int(), backward_labels=backward.int())
            assert torch.equal(found.loss, expected.loss) and torch.equal(found.forward_loss, expected.forward_loss)
            assert torch.isfinite(found.loss) and found.loss > 0


CARD = "---\nlicense: apache-2.0\ntags:\n- elmo\n- ner\n---\n\n# A card\n\nText é.\n"


@pytest.mark.parametrize("tags", [["ner", "hf-elmo", "elmo"], ["hf-elmo", "hf-elmo"]])
def test_tags_are_added_to_the_cards_own_once_each(tmp_path, tags):
    """Read as YAML: huggingface_hub's ModelCard drops repeated tags when it reads, the Hub's page shows them."""
    ElmoModel(ElmoConfig(**TINY)).save_hub_folder(tmp_path, "someone/elmo", model_card=CARD, tags=tags)
    text = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert text.startswith("---\n") and text.endswith("# A card\n\nText é.\n")
    header = yaml.safe_load(text.split("---\n")[1])
    assert header["tags"] == ["elmo", "ner", "hf-elmo"] and header["license"] == "apache-2.0"


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_lm_dropout_keeps_1_minus_p_of_a_bfloat16_input(p):
    """The mask is drawn in float32: a bfloat16 uniform has 8 bits, and `u >= p` drawn in it keeps 0.898 of the
    values at p = 0.1 (9 standard errors off here), not 0.9."""
    torch.manual_seed(0)
    n = 2_000_000
    y = ElmoLmDropout(p).train()(torch.ones(n, dtype=torch.bfloat16))
    assert y.dtype == torch.bfloat16
    kept = (y != 0).double().mean().item()
    assert abs(kept - (1 - p)) < 4 * ((1 - p) * p / n) ** 0.5, (kept, 1 - p)


@pytest.mark.parametrize("mode", ["eval", "train"])  # (train: the sampled softmax, on the fused path)
def test_a_float64_model_computes_its_losses_in_float64(mode):
    """The heads and the pretraining head cast their logits to float32 for the loss: a float64 model's loss was a
    float32 (2.7e-8 off float64's cross-entropy, and a central difference of the loss read 0 where autograd gave
    0.039). Every loss of a float64 model is float64, equal to torch's float64 loss of its logits."""
    torch.manual_seed(0)
    batch = words([["<S>", "a", "big", "word"], ["<S>", "small"]])
    tags = torch.tensor([[0, 1, 2, 1], [2, 0, -100, -100]])
    tagger = getattr(ElmoForTokenClassification(ElmoConfig(**TINY, num_labels=3)).double(), mode)()
    output = tagger(**batch, labels=tags)
    expected = F.cross_entropy(output.logits.flatten(0, 1), tags.flatten())
    assert output.loss.dtype == torch.float64 and torch.equal(output.loss, expected)
    for num_labels, labels, loss in ((3, torch.tensor([2, 0]), F.cross_entropy),
                                     (1, torch.tensor([0.5, 2.0], dtype=torch.float64), F.mse_loss)):
        classifier = getattr(ElmoForSequenceClassification(ElmoConfig(**TINY, num_labels=num_labels)).double(), mode)()
        output = classifier(**batch, labels=labels)
        assert output.loss.dtype == torch.float64
        torch.testing.assert_close(output.loss, loss(output.logits.squeeze(-1), labels), rtol=1e-15, atol=0)
    pretraining = getattr(ElmoForPreTraining(ElmoConfig(**TINY, lm_vocab_size=10, lm_negative_samples=4)).double(), mode)()
    labels = torch.tensor([[1, 2, 3, 4], [5, 6, -100, -100]])
    assert pretraining(**batch, labels=labels, backward_labels=labels).loss.dtype == torch.float64
