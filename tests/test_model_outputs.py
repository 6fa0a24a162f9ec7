"""The outputs' contract under transformers' conventions: hidden states that are the tensors the model used (their
gradients reach each of them), `output_hidden_states` on ElmoForPreTraining, a 0/1 `attention_mask`."""

import pytest
import torch

from hf_elmo import ElmoConfig, ElmoForPreTraining, ElmoModel, ElmoTokenizer

SENTENCES = [["I", "eat", "an", "apple", "."], ["Apple", "is", "big"]]


@pytest.fixture(scope="module")
def base_path(converted):
    return converted["allennlp-elmo"]


def test_every_returned_hidden_state_gets_the_gradient_of_the_top_layer(base_path):
    """Left padding too: the hidden states are where the words are, and the LSTMs read them from there."""
    model = ElmoModel.from_pretrained(base_path)
    tokenizer = ElmoTokenizer.from_pretrained(base_path, padding_side="left")
    batch = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    output = model(**batch)
    for layer in output.hidden_states:
        layer.retain_grad()
    output.last_hidden_state.sum().backward()
    words = batch["attention_mask"].bool()
    for index, layer in enumerate(output.hidden_states):
        assert layer.grad is not None, index
        assert layer.grad[words].abs().sum(-1).gt(0).all(), index  # every word's vector took part
        assert torch.all(layer[~words] == 0), index  # zero at padding, as documented
    assert output.attention_mask.dtype == torch.long and torch.equal(output.attention_mask, batch["attention_mask"])
    # The same vectors as without gradients (the inference path).
    with torch.no_grad():
        plain = model(**batch)
    for with_grad, without in zip(output.hidden_states, plain.hidden_states):
        assert torch.allclose(with_grad, without, atol=1e-6)


def test_pretraining_returns_the_hidden_states_it_used(base_path):
    model = ElmoForPreTraining.from_pretrained(base_path, lm_vocab_size=10)
    tokenizer = ElmoTokenizer.from_pretrained(base_path)
    rows = [["<S>", *sentence, "</S>"] for sentence in SENTENCES]
    batch = tokenizer(rows, is_split_into_words=True, padding=True, return_tensors="pt")
    # Another text for the backward LM (pretraining reads two streams), with the same padding.
    backward = tokenizer([row[::-1] for row in rows], is_split_into_words=True, padding=True, return_tensors="pt")
    backward_ids = backward["input_ids"]
    assert model(**batch).hidden_states is None  # config.output_hidden_states is False by default
    output = model(**batch, backward_input_ids=backward_ids, output_hidden_states=True)
    assert len(output.hidden_states) == model.config.num_lstm_layers + 1
    assert output.hidden_states[-1] is output.last_hidden_state
    proj = model.config.projection_dim
    # The token layers again, under autograd as in the forward pass (so through the same path: without gradients
    # the inference path's kernels round differently).
    mask = batch["attention_mask"].bool()
    forward_tokens, backward_tokens = model._token_layers(batch["input_ids"], backward_ids, mask)
    assert torch.equal(output.hidden_states[0], torch.cat([forward_tokens, backward_tokens], dim=-1).detach())
    for layer in output.hidden_states:
        assert layer.shape == (2, batch["input_ids"].shape[1], 2 * proj)
        layer.retain_grad()
    output.last_hidden_state.sum().backward()
    for index, layer in enumerate(output.hidden_states):
        assert layer.grad is not None and layer.grad.abs().sum() > 0, index
    configured = ElmoForPreTraining.from_pretrained(base_path, lm_vocab_size=10, output_hidden_states=True)
    assert len(configured(**batch).hidden_states) == model.config.num_lstm_layers + 1


def test_highway_layers_use_relu_whatever_the_char_cnn_activation():
    """bilm-tf and AllenNLP hard-code ReLU in the highway layers; `char_cnn_activation` (tanh here) is the CNN's only.
    On every path: the inference fast path, the plain one, and the fused training path."""
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(cell_size=16, projection_dim=8, char_cnn_filters=[[1, 4], [2, 8]],
                                 num_highway_layers=2, char_cnn_activation="tanh"))
    with torch.no_grad():
        for layer in model.char_encoder.highway:  # transforms with negative and large outputs, where relu and tanh differ
            layer.transform.weight.normal_(0.0, 2.0)
            layer.transform.bias.normal_(0.0, 1.0)
    encoder = model.char_encoder
    char_ids = ElmoTokenizer()(SENTENCES[:1], is_split_into_words=True, return_tensors="pt")["input_ids"][0]

    def by_hand(highway_activation):
        chars = encoder.char_embedding(char_ids).transpose(1, 2)
        x = torch.tanh(torch.cat([conv(chars).amax(dim=-1) for conv in encoder.char_cnn], dim=-1))
        for layer in encoder.highway:
            gate = torch.sigmoid(layer.carry(x))
            x = gate * highway_activation(layer.transform(x)) + (1 - gate) * x
        return encoder.projection(x)

    with torch.no_grad():
        expected = by_hand(torch.relu)
        assert not torch.allclose(expected, by_hand(torch.tanh), atol=1e-2)  # (the check can tell the two apart)
        model.eval()
        fast = encoder(char_ids)
    encoder.use_fast_path = False
    with torch.no_grad():
        plain = encoder(char_ids)
    encoder.use_fast_path = True
    model.train()
    fused = encoder(char_ids)  # autograd on, weights that need gradients: the fused training path
    for found in (fast, plain, fused.detach()):
        torch.testing.assert_close(found, expected, rtol=1e-5, atol=1e-6)


def test_output_final_states_none_reads_as_its_default(base_path):
    """`output_final_states=None`, as transformers' `output_*` flags are often passed on, was read as False (no final
    states): it is the documented default, True, and gives what leaving it out gives."""
    model = ElmoModel.from_pretrained(base_path).eval()
    batch = ElmoTokenizer.from_pretrained(base_path)(SENTENCES, is_split_into_words=True, padding=True,
                                                     return_tensors="pt")
    with torch.no_grad():
        default, none = model(**batch), model(**batch, output_final_states=None)
    assert none.final_states is not None and default.final_states is not None
    for found, expected in zip(none.final_states, default.final_states, strict=True):
        assert torch.equal(found, expected)
    assert torch.equal(none.last_hidden_state, default.last_hidden_state)
