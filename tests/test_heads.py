"""The task heads on the converted fixture ELMo: freezing, pooling, losses, Trainer's contracts, checkpointing, and what a
config changed after building them must not silently change."""

import logging
import re

import numpy as np
import pytest
import torch
from datasets import Dataset
from torch.nn import functional as F
from transformers import (
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    DataCollatorForTokenClassification,
    Trainer,
    TrainingArguments,
)

from hf_elmo import (
    ElmoConfig,
    ElmoForPreTraining,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoTokenizer,
)

SENTENCES = [
    ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."],
    ["Peter", "Blackburn"],
    ["BRUSSELS", "1996-08-22"],
    ["The", "European", "Commission", "said", "on", "Thursday", "it", "disagreed", "."],
]
TAGS = [[3, 0, 7, 0, 0, 0, 7, 0, 0], [1, 2], [5, 0], [0, 3, 4, 0, 0, 0, 0, 0, 0]]
HEADS = (ElmoForSequenceClassification, ElmoForTokenClassification)


@pytest.fixture(scope="module")
def base_path(converted):
    return converted["allennlp-elmo"]


@pytest.fixture(scope="module")
def tokenizer(base_path):
    return ElmoTokenizer.from_pretrained(base_path)


def encode(tokenizer, sentences=SENTENCES):
    return tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")


def padded_tags(tags=TAGS):
    width = max(map(len, tags))
    return torch.tensor([row + [-100] * (width - len(row)) for row in tags])


def trainable(model):
    return [name for name, parameter in model.named_parameters() if parameter.requires_grad]


@pytest.mark.parametrize("head", HEADS)
def test_feature_based_by_default_and_after_loading(base_path, tokenizer, tmp_path, head):
    """Only the task mix and the classifier train; the biLM stays frozen through save and reload."""
    model = head.from_pretrained(base_path, num_labels=9)
    expected = ["elmo.scalar_mixes.0.scalar_parameters", "elmo.scalar_mixes.0.gamma", "classifier.weight", "classifier.bias"]
    assert trainable(model) == expected
    assert trainable(head(model.config)) == expected
    model.save_pretrained(tmp_path)
    reloaded = head.from_pretrained(tmp_path)
    assert trainable(reloaded) == expected
    assert torch.equal(reloaded.classifier.weight, model.classifier.weight)

    labels = padded_tags() if head is ElmoForTokenClassification else torch.tensor([1, 0, 2, 1])
    reloaded.train()
    reloaded(**encode(tokenizer), labels=labels).loss.backward()
    for name, parameter in reloaded.named_parameters():
        # Every trainable parameter gets a gradient (DDP waits for exactly these), the frozen ones none.
        assert (parameter.grad is not None) == (name in expected), name
    assert torch.isfinite(reloaded.classifier.weight.grad).all()


@pytest.mark.parametrize("head", HEADS)
def test_finetune_bilm_trains_every_parameter(base_path, tokenizer, head):
    model = head.from_pretrained(base_path, num_labels=9, finetune_bilm=True).train()
    labels = padded_tags() if head is ElmoForTokenClassification else torch.tensor([1, 0, 2, 1])
    model(**encode(tokenizer), labels=labels).loss.backward()
    missing = [name for name, parameter in model.named_parameters() if not parameter.requires_grad or parameter.grad is None]
    assert missing == []


@pytest.mark.parametrize("finetune_bilm", [False, True])
def test_inputs_require_gradients_only_where_the_bilm_trains(base_path, tokenizer, finetune_bilm):
    """transformers' `enable_input_require_grads` (activation checkpointing calls it) hooks the character embedding so
    that its output requires gradients: a frozen biLM needs none, so its head adds no hook and its token layer stays
    without gradients."""
    model = ElmoForTokenClassification.from_pretrained(base_path, num_labels=9, finetune_bilm=finetune_bilm).train()
    model.enable_input_require_grads()
    assert bool(model.get_input_embeddings()._forward_hooks) == finetune_bilm
    assert model(**encode(tokenizer), output_hidden_states=True).hidden_states[0].requires_grad == finetune_bilm


def test_heads_use_the_base_models_scalar_mix(base_path, tokenizer):
    base = ElmoModel.from_pretrained(base_path).eval()
    with torch.no_grad():
        base.scalar_mixes[0].scalar_parameters.copy_(torch.tensor([0.5, -1.0, 2.0]))
        base.scalar_mixes[0].gamma.fill_(0.7)
    model = ElmoForTokenClassification(base.config)
    model.elmo.load_state_dict(base.state_dict())
    model.eval()
    batch = encode(tokenizer)
    with torch.no_grad():
        mix = base(**batch).elmo_representations[0]
        logits = model(**batch).logits
    expected = mix @ model.classifier.weight.T + model.classifier.bias
    assert torch.allclose(logits, expected, atol=1e-6)


@pytest.mark.parametrize("head", HEADS)
def test_layer_norm_and_dropout_set_through_from_pretrained_act_on_the_heads_mix(base_path, tokenizer, head):
    """The README's options `do_layer_norm` and `dropout` (on the mix), given to a head's `from_pretrained`."""
    batch = encode(tokenizer)
    plain = head.from_pretrained(base_path, num_labels=3).eval()
    normed = head.from_pretrained(base_path, num_labels=3, do_layer_norm=True).eval()
    dropped = head.from_pretrained(base_path, num_labels=3, dropout=0.5)
    for model in (normed, dropped):
        model.classifier.load_state_dict(plain.classifier.state_dict())
    with torch.no_grad():
        logits = plain(**batch).logits
        assert not torch.allclose(normed(**batch).logits, logits, atol=1e-3)
        if head is ElmoForTokenClassification:  # the layer-normalised mix of the base model, classified
            mix = ElmoModel.from_pretrained(base_path, do_layer_norm=True).eval()(**batch).elmo_representations[0]
            assert torch.allclose(normed(**batch).logits, mix @ plain.classifier.weight.T + plain.classifier.bias,
                                  atol=1e-5)
        plain.train()
        assert torch.equal(plain(**batch).logits, plain(**batch).logits)  # (no other randomness in training)
        first, second = dropped.train()(**batch).logits, dropped(**batch).logits
        assert not torch.allclose(first, second, atol=1e-3)
        assert torch.allclose(dropped.eval()(**batch).logits, logits, atol=1e-6)


def test_token_loss_ignores_minus_100_and_padding(base_path, tokenizer):
    model = ElmoForTokenClassification.from_pretrained(base_path, num_labels=9).eval()
    batch = encode(tokenizer)
    labels = padded_tags()
    labels[0, 2] = -100
    with torch.no_grad():
        output = model(**batch, labels=labels)
        # A label under a padding position must not count either.
        garbage = labels.masked_fill(batch["attention_mask"] == 0, 99)  # (not even a label id: never read)
        assert torch.equal(model(**batch, labels=garbage).loss, output.loss)
    valid = labels != -100
    expected = F.cross_entropy(output.logits[valid], labels[valid])
    assert torch.allclose(output.loss, expected, atol=1e-6)
    assert output.logits.shape == (4, 9, 9)
    # Under Trainer (num_items_in_batch, its count of labels other than -100), padding must hold -100, or the loss
    # is divided by the padding positions too (7/12 of itself for rows of 6 and 1 words): refused, naming labels.
    padded = labels.masked_fill(batch["attention_mask"] == 0, -100)
    counted = padded.ne(-100).sum()
    with torch.no_grad():
        assert torch.allclose(model(**batch, labels=padded, num_items_in_batch=counted).loss, output.loss, atol=1e-6)
        with pytest.raises(ValueError, match=r"^labels: padding positions hold labels other than -100, which Trainer "
                                             r"counts in num_items_in_batch"):
            model(**batch, labels=labels.masked_fill(batch["attention_mask"] == 0, 0), num_items_in_batch=counted)
        # A whole accumulation window without a label: a loss of 0, not NaN.
        nothing = torch.full_like(labels, -100)
        assert model(**batch, labels=nothing, num_items_in_batch=torch.tensor(0)).loss.item() == 0.0


def test_labels_of_another_shape_dtype_or_range_are_refused(base_path, tokenizer):
    """One line naming `labels`, never a broadcast across the batch nor an error from inside torch; a refused call
    leaves `problem_type` as it was."""
    batch, tags = encode(tokenizer), padded_tags()  # 4 sentences of up to 9 words
    token_model = ElmoForTokenClassification.from_pretrained(base_path, num_labels=9).eval()
    for labels, message in [
        (tags[0], r"labels must be \[4, 9\], got \[9\]"),  # one row for every sentence
        (tags[:, :1], r"labels must be \[4, 9\], got \[4, 1\]"),
        (tags[:2, :5], r"labels must be \[4, 9\], got \[2, 5\]"),
        (tags.tolist(), r"labels must be \[4, 9\], got list"),
        (tags.float(), r"labels must hold integer class ids \(torch.long or torch.int\), got torch.float32"),
        (tags.masked_fill(tags == 7, 9), r"labels holds 9, outside the label ids \[0, 9\) \(-100 = no target\)"),
        (tags.masked_fill(tags == 7, -1), r"labels holds -1, outside the label ids \[0, 9\) \(-100 = no target\)"),
        (tags.int()[:, :1], r"labels must be \[4, 9\], got \[4, 1\]"),
        (tags.int().masked_fill(tags == 7, 9), r"labels holds 9, outside the label ids \[0, 9\) \(-100 = no target\)"),
        (tags.int().masked_fill(tags == 7, -1), r"labels holds -1, outside the label ids \[0, 9\) \(-100 = no "
         r"target\)"),
        (tags.short(), r"labels must hold integer class ids \(torch.long or torch.int\), got torch.int16"),
    ]:
        with pytest.raises(ValueError, match=f"^{message}$"):
            token_model(**batch, labels=labels)
    with torch.no_grad():  # torch.int labels are read as torch.long ones
        assert torch.equal(token_model(**batch, labels=tags.int()).loss, token_model(**batch, labels=tags).loss)

    classifier = ElmoForSequenceClassification.from_pretrained(base_path, num_labels=3).eval()
    for labels, message in [
        (torch.tensor([1, 0, 2]), r"labels must be \[4\], got \[3\]"),
        (torch.tensor([1, 0, 3, 1]), r"labels holds 3, outside the label ids \[0, 3\)"),
        (torch.tensor([1, 0, 3, 1], dtype=torch.int), r"labels holds 3, outside the label ids \[0, 3\)"),
        (torch.tensor([1.0, 0.0, 2.0, 1.0]), r"labels must be \[4, 3\] 0/1 floats for multi-label classification "
         r"\(single-label class ids are int64 or int32\), got torch.float32 \[4\]"),
        # (integers of another type are read as multi-label 0/1s, as transformers reads them: the message said that
        # class ids "are integers", which these are)
        (torch.tensor([1, 0, 2, 1], dtype=torch.int16), r"labels must be \[4, 3\] 0/1 floats for multi-label "
         r"classification \(single-label class ids are int64 or int32\), got torch.int16 \[4\]"),
        (torch.full((4, 3), 2.0), r"labels holds 2.0: multi-label classification reads a 0/1"),
        (torch.full((4, 3), float("nan")), r"labels holds nan: multi-label classification reads a 0/1"),  # (a NaN loss)
        ([1, 0, 2, 1], r"labels must be a tensor, got list$"),
    ]:
        with pytest.raises(ValueError, match=f"^{message}"):
            classifier(**batch, labels=labels)
        assert classifier.config.problem_type is None
    with torch.no_grad():  # [B, 1] class ids are read as [B], as transformers reads them; torch.int as torch.long
        column = classifier(**batch, labels=torch.tensor([[1], [0], [2], [1]])).loss
        assert torch.equal(column, classifier(**batch, labels=torch.tensor([1, 0, 2, 1])).loss)
        assert torch.equal(column, classifier(**batch, labels=torch.tensor([1, 0, 2, 1], dtype=torch.int)).loss)
    regression = ElmoForSequenceClassification.from_pretrained(base_path, num_labels=1).eval()
    with pytest.raises(ValueError, match=r"^labels must be \[4\] or \[4, 1\] numbers for regression, got "
                       r"torch.float32 \[3\]$"):
        regression(**batch, labels=torch.tensor([0.5, 1.0, 2.0]))


def test_pretraining_reads_int32_labels_as_long_ones(base_path, tokenizer):
    """The full softmax (evaluation) and the sampled one (training, plain and fused), and the same refusals."""
    model = ElmoForPreTraining.from_pretrained(base_path, lm_vocab_size=10, lm_negative_samples=4)
    batch = encode(tokenizer)
    targets = padded_tags().clamp(max=8)  # (vocabulary ids, -100 at padding)
    backward_targets = targets.flip(1).masked_fill(targets == -100, -100)
    for mode, fused in (("eval", True), ("train", True), ("train", False)):
        model.train(mode == "train")
        model.set_fast_path(fused)
        losses = []
        for dtype in (torch.long, torch.int):
            torch.manual_seed(0)  # (the same negatives in training)
            losses.append(model(**batch, labels=targets.to(dtype), backward_labels=backward_targets.to(dtype)).loss)
        assert torch.isfinite(losses[0]) and torch.equal(losses[0], losses[1]), (mode, fused)
    wrong = backward_targets.int().masked_fill(backward_targets == 7, 10)
    with pytest.raises(ValueError, match=r"^backward_labels holds 10, outside the vocabulary \[0, 10\)"):
        model(**batch, labels=targets.int(), backward_labels=wrong)


@pytest.mark.parametrize("pooling", ["mean", "max", "mean_max"])
def test_sequence_pooling(base_path, tokenizer, pooling):
    model = ElmoForSequenceClassification.from_pretrained(base_path, num_labels=3, sequence_pooling=pooling).eval()
    sentences = SENTENCES + [[]]
    batch = encode(tokenizer, sentences)
    with torch.no_grad():
        mix = model.elmo(**batch).elmo_representations[0]
        logits = model(**batch).logits
    pooled = []
    for row, words in enumerate(sentences):
        vectors = mix[row, : len(words)]
        parts = {
            "mean": vectors.mean(0) if words else torch.zeros(32),
            "max": vectors.amax(0) if words else torch.zeros(32),
        }
        pooled.append(torch.cat([parts[name] for name in pooling.split("_")]))
    expected = torch.stack(pooled) @ model.classifier.weight.T + model.classifier.bias
    assert model.classifier.in_features == (64 if pooling == "mean_max" else 32)
    assert torch.allclose(logits, expected, atol=1e-5)
    with torch.no_grad():  # a batch of sentences without words (no word axis at all) pools to 0 too
        logits = model(**encode(tokenizer, [[], []])).logits
    assert torch.equal(logits, model.classifier.bias.expand(2, -1))


def test_sequence_problem_types(base_path, tokenizer):
    batch = encode(tokenizer)
    regression = ElmoForSequenceClassification.from_pretrained(base_path, num_labels=1).eval()
    targets = torch.tensor([0.5, -1.0, 2.0, 0.0])
    with torch.no_grad():
        output = regression(**batch, labels=targets)
    assert regression.config.problem_type == "regression"
    assert torch.allclose(output.loss, F.mse_loss(output.logits.squeeze(-1), targets), atol=1e-6)
    multi = ElmoForSequenceClassification.from_pretrained(base_path, num_labels=3).eval()
    targets = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    with torch.no_grad():
        output = multi(**batch, labels=targets)
    assert multi.config.problem_type == "multi_label_classification"
    assert torch.allclose(output.loss, F.binary_cross_entropy_with_logits(output.logits, targets), atol=1e-6)


def test_l2_penalty_on_the_mix_weights(base_path, tokenizer):
    batch, labels = encode(tokenizer), torch.tensor([1, 0, 2, 1])
    losses = {}
    for coef in (0.0, 0.01):
        model = ElmoForSequenceClassification.from_pretrained(base_path, num_labels=3, scalar_mix_l2_coef=coef).eval()
        torch.manual_seed(0)
        model.classifier.reset_parameters()
        with torch.no_grad():
            model.elmo.scalar_mixes[0].scalar_parameters.copy_(torch.tensor([1.0, -2.0, 3.0]))
        losses[coef] = model(**batch, labels=labels).loss
    assert torch.allclose(losses[0.01] - losses[0.0], torch.tensor(0.01 * 14.0), atol=1e-6)


def ner_dataset(tokenizer, repeat=1):
    data = Dataset.from_dict({"words": SENTENCES * repeat, "labels": TAGS * repeat})
    return data.map(lambda b: tokenizer(b["words"], is_split_into_words=True), batched=True, remove_columns=["words"])


def one_sgd_step(base_path, tokenizer, tmp_path, batch_size, accumulation, **config):
    torch.manual_seed(0)
    model = ElmoForTokenClassification.from_pretrained(base_path, num_labels=9, **config)
    with torch.no_grad():  # a trained mix: the L2 penalty and its gradient are not zero
        model.elmo.scalar_mixes[0].scalar_parameters.copy_(torch.tensor([1.0, -2.0, 3.0]))
    before = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
    args = TrainingArguments(
        output_dir=str(tmp_path / f"ga{accumulation}"), per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulation, max_steps=1, learning_rate=1.0, optim="sgd",
        lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=0.0, report_to="none", use_cpu=True,
        save_strategy="no", logging_steps=1, seed=0, include_num_input_tokens_seen="non_padding",
    )
    trainer = Trainer(model=model, args=args, train_dataset=ner_dataset(tokenizer),
                      data_collator=DataCollatorForTokenClassification(tokenizer))
    logged = trainer.train().training_loss
    updates = {name: p.detach() - before[name] for name, p in model.named_parameters() if p.requires_grad}
    return updates, logged, trainer.state.num_input_tokens_seen


def test_a_loss_computed_outside_the_head_is_said_to_leave_out_the_mix_penalty(base_path, tokenizer, tmp_path, caplog):
    """Trainer's label smoothing takes the labels out and computes the loss from the logits, so the L2 penalty on the
    mix (part of the head's own loss) was dropped without a word: the mix weights were no longer pulled back. Said
    once, where the penalty is asked for; not without it, nor in evaluation."""
    message = ("ElmoForTokenClassification is training without labels, so its loss is computed outside it (by "
               "Trainer's label smoothing or compute_loss_func, say), without the L2 penalty on the mix that "
               "scalar_mix_l2_coef=1.0 asks for: it is part of the loss the head computes from labels")
    for coef in (1.0, 0.0):
        model = ElmoForTokenClassification.from_pretrained(base_path, num_labels=9, scalar_mix_l2_coef=coef)
        args = TrainingArguments(output_dir=str(tmp_path / str(coef)), per_device_train_batch_size=2, max_steps=2,
                                 label_smoothing_factor=0.1, report_to="none", use_cpu=True, save_strategy="no")
        caplog.clear()
        trainer = Trainer(model=model, args=args, train_dataset=ner_dataset(tokenizer), eval_dataset=ner_dataset(tokenizer),
                          data_collator=DataCollatorForTokenClassification(tokenizer))
        trainer.train()
        trainer.evaluate()
        warned = [record.getMessage() for record in caplog.records if "training without labels" in record.getMessage()]
        assert warned == ([message] if coef else []), warned


def test_gradient_accumulation_matches_one_large_batch(base_path, tokenizer, tmp_path):
    """GA=2 x 2 sentences gives the update and the logged loss of one batch of 4 (the sentences have 9, 2, 2
    and 9 labelled words, so averaging per micro-batch would not), from mix weights [1, -2, 3], so that an L2
    penalty counted on every micro-batch would double its gradient. README: Trainer's
    `include_num_input_tokens_seen="non_padding"` counts the words (its default counts `input_ids`' numel, 50 per
    word position)."""
    config = dict(scalar_mix_l2_coef=0.1, finetune_bilm=True)
    large, large_loss, large_words = one_sgd_step(base_path, tokenizer, tmp_path, 4, 1, **config)
    accumulated, accumulated_loss, accumulated_words = one_sgd_step(base_path, tokenizer, tmp_path, 2, 2, **config)
    assert large_words == accumulated_words == 9 + 2 + 2 + 9
    for name, update in large.items():
        assert update.abs().max() > 0, name
        ratio = accumulated[name].norm() / update.norm()
        assert abs(ratio.item() - 1.0) < 1e-4, (name, ratio.item())
        assert torch.allclose(accumulated[name], update, atol=1e-5, rtol=1e-4), name
    assert abs(accumulated_loss - large_loss) < 1e-5 * abs(large_loss)


def test_activation_checkpointing_per_bilstm_layer(base_path, tokenizer):
    """Checkpointing keeps none of the biLSTM layers' activations for backward and gives the same gradients."""
    batch, labels = encode(tokenizer), padded_tags()
    gradients, saved, in_layers = {}, {}, {}
    for checkpointing in (False, True):
        model = ElmoForTokenClassification.from_pretrained(base_path, num_labels=9, finetune_bilm=True)
        torch.manual_seed(0)
        model.classifier.reset_parameters()
        if checkpointing:
            model.activation_checkpointing_enable()
            assert all(layer.gradient_checkpointing for layer in model.elmo.layers)
        model.train()
        count, inside = [0, 0], [False]  # everything kept, and what the biLSTM layers keep

        def pack(tensor):
            count[0] += tensor.numel()
            count[1] += tensor.numel() if inside[0] else 0
            return tensor

        for layer in model.elmo.layers:
            layer.register_forward_pre_hook(lambda *_: inside.__setitem__(0, True))
            layer.register_forward_hook(lambda *_: inside.__setitem__(0, False))
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            loss = model(**batch, labels=labels).loss
        loss.backward()
        saved[checkpointing], in_layers[checkpointing] = count
        gradients[checkpointing] = {name: p.grad for name, p in model.named_parameters()}
    assert in_layers[False] > 0.3 * saved[False] and in_layers[True] < 0.05 * in_layers[False], (saved, in_layers)
    assert saved[True] <= saved[False] - in_layers[False] + in_layers[True], (saved, in_layers)
    for name, gradient in gradients[False].items():
        assert torch.allclose(gradients[True][name], gradient, atol=1e-6), name


def test_trainers_activation_checkpointing_recomputes_every_bilstm_layer(base_path, tokenizer, tmp_path, monkeypatch):
    """The README's `activation_checkpointing=True` in TrainingArguments, one Trainer step: Trainer turns
    checkpointing on in every biLSTM layer, each layer's forward runs again in backward (twice in the step, against
    once without), and every parameter's gradient is the one of the step without checkpointing."""
    from hf_elmo import modeling_elmo

    fallback, calls = modeling_elmo.fused_training_fallback, []

    def counted(layer, *args):  # a biLSTM layer's forward with autograd on asks this first, whichever path it takes
        calls.append(layer)
        return fallback(layer, *args)

    monkeypatch.setattr(modeling_elmo, "fused_training_fallback", counted)
    runs = {}
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = ElmoForTokenClassification.from_pretrained(base_path, num_labels=9, finetune_bilm=True)
        gradients = {}
        for name, parameter in model.named_parameters():  # the gradient backward computes, before any clipping
            parameter.register_hook(lambda gradient, name=name: gradients.__setitem__(name, gradient.clone()))
        args = TrainingArguments(
            output_dir=str(tmp_path / f"checkpointing-{checkpointing}"), per_device_train_batch_size=4, max_steps=1,
            activation_checkpointing=checkpointing, report_to="none", use_cpu=True, save_strategy="no", seed=0,
        )
        calls.clear()
        Trainer(model=model, args=args, train_dataset=ner_dataset(tokenizer),
                data_collator=DataCollatorForTokenClassification(tokenizer)).train()
        layers = list(model.elmo.layers)
        runs[checkpointing] = ([layer.gradient_checkpointing for layer in layers],
                               [sum(call is layer for call in calls) for layer in layers], gradients)
    count = len(model.elmo.layers)
    assert count >= 2 and runs[False][:2] == ([False] * count, [1] * count), runs[False][:2]
    assert runs[True][:2] == ([True] * count, [2] * count), runs[True][:2]
    plain, checkpointed = runs[False][2], runs[True][2]
    assert plain.keys() == checkpointed.keys() == {name for name, _ in model.named_parameters()}
    for name, gradient in plain.items():
        assert gradient.abs().max() > 0, name
        assert torch.allclose(checkpointed[name], gradient, atol=1e-6), name


def test_evaluation_keeps_only_the_logits(base_path, tokenizer, tmp_path):
    """keys_to_ignore_at_inference: even with output_hidden_states on, predict() gathers logits alone."""
    model = ElmoForTokenClassification.from_pretrained(base_path, num_labels=9, output_hidden_states=True)
    batch = encode(tokenizer)
    with torch.no_grad():
        assert len(model(**batch).hidden_states) == 3
    args = TrainingArguments(output_dir=str(tmp_path), per_device_eval_batch_size=2, report_to="none", use_cpu=True)
    trainer = Trainer(model=model, args=args, data_collator=DataCollatorForTokenClassification(tokenizer))
    prediction = trainer.predict(ner_dataset(tokenizer))
    assert isinstance(prediction.predictions, np.ndarray) and prediction.predictions.shape == (4, 9, 9)
    assert prediction.label_ids.shape == (4, 9)


def test_auto_classes_load_the_heads(base_path):
    token_model = AutoModelForTokenClassification.from_pretrained(base_path, num_labels=5)
    sequence_model = AutoModelForSequenceClassification.from_pretrained(base_path, num_labels=2)
    assert type(token_model) is ElmoForTokenClassification and type(sequence_model) is ElmoForSequenceClassification
    # The body is the converted biLM, unchanged.
    base = ElmoModel.from_pretrained(base_path)
    for name, tensor in base.state_dict().items():
        assert torch.equal(token_model.elmo.state_dict()[name], tensor), name


def test_head_config_is_checked(base_path):
    for field, value in [("sequence_pooling", "attention"), ("scalar_mix_l2_coef", -1.0), ("finetune_bilm", "yes")]:
        with pytest.raises(ValueError, match=field):
            ElmoConfig(**{field: value})
    with pytest.raises(ValueError, match="num_output_representations must be 1"):
        ElmoForTokenClassification(ElmoConfig(num_output_representations=2))


def test_single_label_classification_over_one_label_is_said_to_learn_nothing(base_path, tokenizer, tmp_path, caplog):
    """A classifier saved after integer labels keeps problem_type 'single_label_classification'; reloaded with
    num_labels=1 to become a regressor, it trained silently on a cross-entropy over one class (loss 0, gradient 0).
    A warning says so and what to set (not an error: transformers' common tests run the combination); problem_type
    None or 'regression' trains the regressor."""
    batch = encode(tokenizer)
    classifier = ElmoForSequenceClassification.from_pretrained(base_path, num_labels=3)
    classifier(**batch, labels=torch.tensor([1, 0, 2, 1]))
    classifier.save_pretrained(tmp_path / "classifier")
    regressor = ElmoForSequenceClassification.from_pretrained(tmp_path / "classifier", num_labels=1,
                                                              ignore_mismatched_sizes=True)
    assert regressor.config.problem_type == "single_label_classification"
    caplog.clear()
    logging.Logger.warning_once.cache_clear()  # (transformers' common tests may have said it once in this process)
    assert regressor(**batch, labels=torch.tensor([0, 0, 0, 0])).loss.item() == 0.0
    warned = [record.getMessage() for record in caplog.records if "nothing learns" in record.getMessage()]
    assert warned == ["ElmoForSequenceClassification has problem_type 'single_label_classification' and num_labels 1: "
                      "the cross-entropy over one class is always 0, so nothing learns; for regression, set "
                      "config.problem_type to 'regression' (or None) and pass the labels as numbers"], caplog.text
    regressor.config.problem_type = None
    loss = regressor(**batch, labels=torch.tensor([0.5, 1.0, -1.0, 2.0])).loss
    assert regressor.config.problem_type == "regression" and loss.item() > 0


@pytest.mark.parametrize("problem_type", ["regresion", "single_label", "multilabel"])
def test_a_misspelt_problem_type_is_refused_rather_than_read_as_multi_label(base_path, problem_type):
    """`problem_type` decides the loss (the docstring); a value that is none of transformers' three was read as
    multi-label classification: float labels trained a binary cross-entropy silently, class ids were refused as
    "0/1 floats for multi-label classification". Now refused, at construction and from `from_pretrained`, naming it."""
    message = rf"^ElmoConfig\.problem_type must be one of 'regression', .* or None, got '{problem_type}'$"
    with pytest.raises(ValueError, match=message):
        ElmoConfig(num_labels=3, problem_type=problem_type)
    with pytest.raises(ValueError, match=message):
        ElmoForSequenceClassification.from_pretrained(base_path, num_labels=3, problem_type=problem_type)
    model = ElmoForSequenceClassification.from_pretrained(base_path, num_labels=3)
    model.config.problem_type = problem_type  # on a model already built
    with pytest.raises(ValueError, match=message):
        model(input_ids=torch.zeros(2, 1, 50, dtype=torch.long), labels=torch.tensor([[0.0, 1.0, 0.0], [1.0, 1.0, 0.0]]))


@pytest.mark.parametrize("head", HEADS)
def test_a_head_without_labels_is_refused(base_path, head):
    """num_labels=0 (or -1, which transformers turns into an empty id2label) built a classifier of no outputs, logits
    [B, 0] or [B, T, 0], silently; a sequence head needs a label (one, for regression), a word tagger two (over one
    label its cross-entropy is 0 whatever the weights, so a tagger of one label never learned): refused, naming
    num_labels."""
    tagger = head is ElmoForTokenClassification
    fewest = "two labels (the cross-entropy over one is always 0" if tagger else "one label (num_labels=1 for regression)"
    for num_labels in (0, -1, 1) if tagger else (0, -1):
        with pytest.raises(ValueError, match=rf"^{head.__name__} needs at least {re.escape(fewest)}.*num_labels is "
                                             f"{max(num_labels, 0)}$"):
            head(ElmoConfig(num_labels=num_labels, cell_size=16, projection_dim=8, char_cnn_filters=[[1, 4]]))
        with pytest.raises(ValueError, match=rf"^{head.__name__} needs at least {re.escape(fewest)}"):
            head.from_pretrained(base_path, num_labels=num_labels)
    fewest_allowed = 2 if tagger else 1
    assert head.from_pretrained(base_path, num_labels=fewest_allowed).classifier.out_features == fewest_allowed


def test_the_layer_norm_of_the_mix_holds_in_float16_over_a_large_batch():
    """The mix's layer norm counts every value of the batch: 5 x 20 words of the released width (1024) are 102,400
    values, past float16's largest number (65504), and the mix was NaN in float16. Its statistics are computed in
    float32, so a float16 mix is finite and near the float32 one; a float32 mix is computed as before."""
    from hf_elmo.modeling_elmo import ElmoScalarMix

    torch.manual_seed(0)
    layers = [torch.randn(5, 20, 1024) * scale + shift for scale, shift in ((1, 0), (3, 1), (0.5, -2))]
    mask = torch.ones(5, 20, dtype=torch.bool)
    mask[1, 15:] = False
    mix = ElmoScalarMix(3, do_layer_norm=True)
    full = mix(layers, mask)
    half = mix.half()([layer.half() for layer in layers], mask)
    assert half.dtype == torch.float16 and torch.isfinite(half).all()
    assert torch.allclose(half.float(), full, atol=2e-2)
    values = layers[1][mask]  # (AllenNLP's definition, over the unmasked words only)
    normalised = (layers[1] - values.mean()) / torch.sqrt(values.var(unbiased=False) + 1e-13)
    assert torch.allclose(ElmoScalarMix._normalize(layers[1], mask), normalised, atol=1e-5)
    # The variance divides by the count, not the count - 1: over 12 values the two differ by 4%, where over the
    # 97,000 above they agree within the tolerance.
    small, small_mask = torch.randn(2, 3, 4), torch.tensor([[True, True, False], [True, False, False]])
    values = small[small_mask]
    normalised = (small - values.mean()) / torch.sqrt(values.var(unbiased=False) + 1e-13)
    assert torch.allclose(ElmoScalarMix._normalize(small, small_mask), normalised, atol=1e-6)


# Found by mutating the heads: what no test above held.
@pytest.mark.parametrize("head", HEADS)
def test_a_negative_l2_coef_set_after_building_is_refused_by_the_loss(base_path, tokenizer, head):
    """`scalar_mix_l2_coef` set on a built model's config is checked where the loss reads it: a negative one would
    reward large mix weights silently."""
    model = head.from_pretrained(base_path, num_labels=3).eval()
    batch = encode(tokenizer)
    labels = torch.tensor([1, 0, 2, 1]) if head is ElmoForSequenceClassification else torch.zeros(4, 9, dtype=torch.long)
    model.config.scalar_mix_l2_coef = -0.5
    with pytest.raises(ValueError, match=r"^ElmoConfig.scalar_mix_l2_coef must be a finite number >= 0, got -0.5$"):
        model(**batch, labels=labels)


def test_sequence_labels_of_minus_100_are_ignored_and_not_counted(base_path, tokenizer):
    """Single-label class ids of -100 add nothing to the loss and are not counted in its mean, as in transformers
    (and as Trainer counts them in num_items_in_batch)."""
    model = ElmoForSequenceClassification.from_pretrained(base_path, num_labels=3).eval()
    batch = encode(tokenizer)
    labels = torch.tensor([1, -100, 2, -100])
    with torch.no_grad():
        output = model(**batch, labels=labels)
        expected = F.cross_entropy(output.logits, labels, ignore_index=-100)
        assert torch.allclose(output.loss, expected, atol=1e-6)
        # Under Trainer: its count of the labels other than -100 gives the same loss.
        assert torch.allclose(model(**batch, labels=labels, num_items_in_batch=torch.tensor(2)).loss, expected,
                              atol=1e-6)


def test_a_sequence_pooling_set_after_building_that_the_classifier_cannot_read_is_refused(base_path, tokenizer):
    """The classifier's size follows `sequence_pooling` when the model is built: switching to or from "mean_max"
    afterwards is refused naming the option, not a shape error from inside torch."""
    batch = encode(tokenizer)
    for built, changed in (("mean", "mean_max"), ("mean_max", "max")):
        model = ElmoForSequenceClassification.from_pretrained(base_path, num_labels=3, sequence_pooling=built).eval()
        model.config.sequence_pooling = changed
        with pytest.raises(ValueError, match=rf"^ElmoConfig.sequence_pooling is '{changed}', but the classifier was "
                                             r"built for \d+ inputs: set it before the model is built$"):
            model(**batch)


def test_sequence_loss_divides_by_trainers_count_of_the_whole_step(base_path, tokenizer):
    """Under gradient accumulation Trainer passes `num_items_in_batch`, the labels of the whole optimizer step: the
    sequence head divides its summed loss by it (and adds this batch's share of the L2 penalty), as the token head
    does, so that accumulated micro-batches give the gradient of one large batch."""
    model = ElmoForSequenceClassification.from_pretrained(base_path, num_labels=3, scalar_mix_l2_coef=0.1).eval()
    with torch.no_grad():
        model.elmo.scalar_mixes[0].scalar_parameters.copy_(torch.tensor([1.0, -2.0, 3.0]))
    batch, labels = encode(tokenizer), torch.tensor([1, 0, 2, 1])
    with torch.no_grad():
        logits = model(**batch).logits
        summed = F.cross_entropy(logits, labels, reduction="sum")
        loss = model(**batch, labels=labels, num_items_in_batch=torch.tensor(10)).loss
    assert torch.allclose(loss, summed / 10 + 0.1 * 14.0 * 4 / 10, atol=1e-6)
