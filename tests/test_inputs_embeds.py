"""`inputs_embeds`: every model class reads embedded characters in place of character ids, as transformers' models
read embedded tokens, and computes what it computes from the ids (transformers' common tests check the base model's
top layer on a tiny config; these check every output, on the real fixtures, with padding and with word input)."""

import pytest
import torch

from hf_elmo import (
    ElmoForPreTraining,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
)

SENTENCES = ["I eat an apple .", "Apple is a company", "天气不错！"]


def embedded(model, batch: dict) -> dict:
    """The batch with its character ids replaced by their embeddings."""
    inputs = {name: value for name, value in batch.items() if name != "input_ids"}
    inputs["inputs_embeds"] = model.get_input_embeddings()(batch["input_ids"])
    return inputs


def left_padded(batch: dict) -> dict:
    """The same words with the padding in front (the tokenizer pads on the right)."""
    lengths = batch["attention_mask"].sum(1)
    moved = {}
    for name, value in batch.items():
        rows = [torch.roll(row, int(row.shape[0] - length), dims=0) for row, length in zip(value, lengths)]
        moved[name] = torch.stack(rows)
    return moved


@pytest.mark.parametrize("padding_side", ["right", "left"])
@pytest.mark.parametrize("name", ["allennlp-elmo", "bilm-tf", "with_words"])
def test_every_output_equals_the_one_from_the_ids(converted, converted_elmoformanylangs, name, padding_side):
    folder = converted_elmoformanylangs[name] if name == "with_words" else converted[name]
    tokenizer, model = ElmoTokenizer.from_pretrained(folder), ElmoModel.from_pretrained(folder).eval()
    batch = dict(tokenizer(SENTENCES, padding=True, return_tensors="pt"))
    if name == "with_words":
        assert "input_word_ids" in batch  # (the word input is exercised)
    if padding_side == "left":
        batch = left_padded(batch)
    with torch.no_grad():
        expected, found = model(**batch), model(**embedded(model, batch))
    for layer, (want, got) in enumerate(zip(expected.hidden_states, found.hidden_states)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=f"layer {layer}")
    torch.testing.assert_close(found.elmo_representations[0], expected.elmo_representations[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(found.final_states, expected.final_states, rtol=1e-5, atol=1e-5)
    assert torch.equal(found.attention_mask, expected.attention_mask)


def test_what_padding_words_hold_is_not_read(converted):
    folder = converted["allennlp-elmo"]
    tokenizer, model = ElmoTokenizer.from_pretrained(folder), ElmoModel.from_pretrained(folder).eval()
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    inputs = embedded(model, batch)
    with torch.no_grad():
        expected = model(**inputs).elmo_representations[0]
        padding = batch["attention_mask"] == 0
        assert padding.any()
        inputs["inputs_embeds"] = inputs["inputs_embeds"].masked_fill(padding[..., None, None], float("nan"))
        found = model(**inputs).elmo_representations[0]
    assert torch.equal(found, expected)


def test_the_gradients_are_those_of_the_character_embedding(converted):
    """Attribution reads the gradient at each embedded character. Added up per character id (and the boundary words'
    share, which the model embeds itself), they are the character embedding's gradient that the ids give."""
    folder = converted["allennlp-elmo"]
    tokenizer, model = ElmoTokenizer.from_pretrained(folder), ElmoModel.from_pretrained(folder)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    weight = model.get_input_embeddings().weight

    model(**batch).elmo_representations[0].square().sum().backward()
    expected = weight.grad.clone()
    weight.grad = None
    inputs = embedded(model, batch)
    inputs["inputs_embeds"] = inputs["inputs_embeds"].detach().requires_grad_()
    model(**inputs).elmo_representations[0].square().sum().backward()
    gradient = inputs["inputs_embeds"].grad
    assert gradient[batch["attention_mask"] == 0].abs().max() == 0  # padding words
    assert gradient[batch["attention_mask"] == 1].abs().amax((1, 2)).min() > 0  # every word
    found = weight.grad.index_add(0, batch["input_ids"].flatten(), gradient.flatten(0, 2))
    torch.testing.assert_close(found, expected, rtol=1e-4, atol=1e-5 * expected.abs().max().item())


@pytest.mark.parametrize("head", [ElmoForSequenceClassification, ElmoForTokenClassification])
def test_the_task_heads_read_them(converted, head):
    folder = converted["allennlp-elmo"]
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    torch.manual_seed(0)
    model = head.from_pretrained(folder, num_labels=3).eval()
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    labels = (torch.tensor([0, 2, 1]) if head is ElmoForSequenceClassification
              else batch["attention_mask"].masked_fill(batch["attention_mask"] == 0, -100))
    with torch.no_grad():
        expected, found = model(**batch, labels=labels), model(**embedded(model, batch), labels=labels)
    torch.testing.assert_close(found.logits, expected.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(found.loss, expected.loss, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("name", ["allennlp-elmo", "with_words"])
def test_the_pretraining_model_reads_them(converted, converted_elmoformanylangs, name, mode):
    """The loss (full softmax in evaluation, the sampled one in training, from the same seed), every layer (0 at
    padding) and the char CNN's gradient; what padding words hold is not read (NaN embeddings, any word ids)."""
    folder = converted_elmoformanylangs[name] if name == "with_words" else converted[name]
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    torch.manual_seed(0)
    model = ElmoForPreTraining.from_pretrained(folder, lm_vocab_size=40, lm_negative_samples=8).train(mode == "train")
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    padding = batch["attention_mask"] == 0
    if "input_word_ids" in batch:
        batch["input_word_ids"] = batch["input_word_ids"].masked_fill(padding, -5)
    labels = torch.randint(40, padding.shape).masked_fill(padding, -100)
    backward_labels = torch.randint(40, padding.shape).masked_fill(padding, -100)
    inputs = embedded(model, batch)
    inputs["inputs_embeds"] = inputs["inputs_embeds"].detach().masked_fill(padding[..., None, None], float("nan"))
    outputs, gradients = [], []
    for given in (dict(batch), inputs):
        torch.manual_seed(1)
        model.zero_grad()
        outputs.append(model(**given, labels=labels, backward_labels=backward_labels, output_hidden_states=True))
        outputs[-1].loss.backward()
        gradients.append(model.elmo.char_encoder.char_cnn[0].weight.grad.clone())
    expected, found = outputs
    assert expected.hidden_states[0][padding].abs().max() == 0
    for layer, (want, got) in enumerate(zip(expected.hidden_states, found.hidden_states, strict=True)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=f"layer {layer}")
    torch.testing.assert_close(found.loss, expected.loss, rtol=1e-5, atol=1e-5)
    # (the first filter's gradient, which NaN at padding would reach; the embedding's differs by design: see above)
    torch.testing.assert_close(gradients[1], gradients[0], rtol=1e-4, atol=1e-6)


def test_bad_inputs_embeds_are_refused_by_name(converted):
    folder = converted["allennlp-elmo"]
    tokenizer, model = ElmoTokenizer.from_pretrained(folder), ElmoModel.from_pretrained(folder).eval()
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    embeds, mask = model.get_input_embeddings()(batch["input_ids"]).detach(), batch["attention_mask"]
    cases = [
        ({"input_ids": batch["input_ids"], "inputs_embeds": embeds}, "pass input_ids .* or inputs_embeds .*, not both"),
        ({"attention_mask": mask}, r"pass input_ids \(character ids\) or inputs_embeds$"),
        ({"inputs_embeds": embeds}, "inputs_embeds need an attention_mask"),
        ({"inputs_embeds": embeds[..., :3], "attention_mask": mask},
         r"inputs_embeds must be \[batch, words, 50, 4\] embedded characters, .* got \[3, 5, 50, 3\]"),
        ({"inputs_embeds": embeds[0], "attention_mask": mask}, r"got \[5, 50, 4\]"),
        ({"inputs_embeds": embeds.tolist(), "attention_mask": mask}, "got list"),
        ({"inputs_embeds": embeds.double(), "attention_mask": mask},
         "inputs_embeds is torch.float64, and the model's character embedding torch.float32"),
        ({"inputs_embeds": embeds, "attention_mask": mask[:, :4]}, r"attention_mask must be \[3, 5\], got \[3, 4\]"),
    ]
    for inputs, message in cases:
        with pytest.raises(ValueError, match=message):
            model(**inputs)
    pretraining = ElmoForPreTraining.from_pretrained(folder, lm_vocab_size=40).eval()
    with pytest.raises(ValueError, match="backward_input_ids go with input_ids"):
        pretraining(inputs_embeds=embeds, attention_mask=mask, backward_input_ids=batch["input_ids"])
    with pytest.raises(ValueError, match="inputs_embeds need an attention_mask"):
        pretraining(inputs_embeds=embeds)
    with pytest.raises(ValueError, match="attention_mask must be 1 on a prefix of each row"):
        pretraining(inputs_embeds=embeds, attention_mask=left_padded(dict(batch))["attention_mask"])


def test_an_adapted_character_embedding_embeds_them(converted):
    """PEFT's LoRA on the character embedding (a module without `embedding_dim`) and the char CNN: the adapted
    embedding's output, read as inputs_embeds, gives the adapted model's outputs (it failed on the missing
    attribute)."""
    from peft import LoraConfig, get_peft_model

    folder = converted["allennlp-elmo"]
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    model = get_peft_model(ElmoModel.from_pretrained(folder), LoraConfig(
        r=4, target_modules=r".*char_encoder\.(char_embedding|char_cnn\.\d+)", init_lora_weights=False)).eval()
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected, found = model(**batch), model(**embedded(model, batch))
        plain = model.get_base_model().char_encoder.char_embedding.base_layer(batch["input_ids"])
        assert (embedded(model, batch)["inputs_embeds"] - plain).abs().max() > 1e-3  # (the adapter is in them)
    torch.testing.assert_close(found.elmo_representations[0], expected.elmo_representations[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(0, 3), (2, 0)], ids=["no rows", "no words"])
def test_an_empty_batch_gives_empty_outputs(converted, shape):
    folder = converted["allennlp-elmo"]
    model = ElmoForPreTraining.from_pretrained(folder, lm_vocab_size=40).eval()
    base = ElmoModel.from_pretrained(folder).eval()
    embeds = torch.zeros(*shape, 50, 4)
    mask = torch.zeros(shape, dtype=torch.long)
    with torch.no_grad():
        assert model(inputs_embeds=embeds, attention_mask=mask).last_hidden_state.shape == (*shape, 32)
        assert base(inputs_embeds=embeds, attention_mask=mask).elmo_representations[0].shape == (*shape, 32)


def test_reentrant_activation_checkpointing_gives_the_bilstm_its_gradients(converted):
    """A frozen character encoder, embedded characters that need no gradient and reentrant checkpointing: the
    biLSTM's weights got none (torch's warning the only sign), where the ids get them through transformers' hook on
    the character embedding, which inputs_embeds skip."""
    folder = converted["allennlp-elmo"]
    tokenizer = ElmoTokenizer.from_pretrained(folder)
    torch.manual_seed(0)
    model = ElmoForPreTraining.from_pretrained(folder, lm_vocab_size=40).train()
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": True})
    model.elmo.char_encoder.requires_grad_(False)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    padding = batch["attention_mask"] == 0
    labels = torch.randint(40, padding.shape).masked_fill(padding, -100)
    gradients = []
    for inputs in (dict(batch), embedded(model, batch)):
        model.zero_grad()
        with torch.no_grad():
            inputs = {name: value.detach() for name, value in inputs.items()}
        model(**inputs, labels=labels, backward_labels=labels).loss.backward()
        gradients.append([layer.input_weight.grad for layer in model.elmo.layers])
    for expected, found in zip(*gradients, strict=True):
        assert expected is not None and found is not None
        torch.testing.assert_close(found, expected, rtol=1e-4, atol=1e-6)


def test_the_encoders_own_method_refuses_what_it_cannot_read(converted):
    encoder = ElmoModel.from_pretrained(converted["allennlp-elmo"]).char_encoder
    chars = torch.zeros(3, 50, 4)
    assert encoder.from_embeddings(chars).shape == (3, 16)
    for bad, message in ((chars.double(), "embedded characters are torch.float64, and the model torch.float32"),
                         (chars.tolist(), r"must be \[words, characters >= \d+, 4\], got list"),
                         (chars[:, :1], r"got \[3, 1, 4\]"), (chars[..., :2], r"got \[3, 50, 2\]")):
        with pytest.raises(ValueError, match=message):
            encoder.from_embeddings(bad)
