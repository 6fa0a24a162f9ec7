"""torch.compile of the ELMo classes, on the converted fixture ELMo. hf-elmo's own computation runs as eager code
inside a compiled model (`modeling_elmo._eager_under_compile`; TorchDynamo cannot trace its caches), so a compiled
model gives the eager model's outputs and gradients bit for bit, a compiled module around one still compiles its own
layers, and Trainer's `torch_compile` trains as without it."""

import pytest
import torch
from torch._dynamo.testing import CompileCounter
from transformers import DataCollatorForTokenClassification, Trainer, TrainingArguments

from test_heads import SENTENCES, encode, ner_dataset, padded_tags

from hf_elmo import (ElmoForPreTraining, ElmoForSequenceClassification, ElmoForTokenClassification, ElmoModel,
                     ElmoTokenizer)


def fixture_batches(tokenizer):
    """Three batches of other shapes (rows, words), padded."""
    return [encode(tokenizer, SENTENCES[:rows]) for rows in (4, 1, 3)]


def test_a_compiled_model_gives_the_eager_outputs(converted):
    """`torch.compile(model)` with its default backend, as users call it, over batches of three shapes; the
    caches are emptied before the first, so the compiled model fills them."""
    model = ElmoModel.from_pretrained(converted["allennlp-elmo"]).eval()
    tokenizer = ElmoTokenizer.from_pretrained(converted["allennlp-elmo"])
    batches = fixture_batches(tokenizer)
    with torch.no_grad():
        expected = [model(**batch) for batch in batches]
        model.clear_caches()
        compiled = torch.compile(model)
        for batch, eager in zip(batches, expected):
            output = compiled(**batch)
            for got, want in zip((output.last_hidden_state, *output.hidden_states, *output.elmo_representations,
                                  *output.final_states),
                                 (eager.last_hidden_state, *eager.hidden_states, *eager.elmo_representations,
                                  *eager.final_states)):
                assert torch.equal(got, want)


def test_fullgraph_compilation_is_refused_with_the_reason(converted):
    """`torch.compile(model, fullgraph=True)` cannot hold the eager parts: TorchDynamo's error gives hf-elmo's
    reason, which names torch.export."""
    model = ElmoModel.from_pretrained(converted["allennlp-elmo"]).eval()
    batch = encode(ElmoTokenizer.from_pretrained(converted["allennlp-elmo"]))
    torch._dynamo.reset()  # (the other tests' compiled frames, with their graph breaks, would be reused)
    with torch.no_grad(), pytest.raises(torch._dynamo.exc.Unsupported, match=r"\(reason: hf-elmo's fast paths and "
                                        r"per-word caches run eagerly .*fullgraph=True\), export it: torch.export"):
        torch.compile(model, fullgraph=True)(**batch)


def test_a_compiled_module_around_elmo_compiles_its_own_layers(converted):
    """A downstream module that reads ELMo's mix: its classifier is compiled (TorchDynamo hands a graph to the
    backend), ELMo runs eagerly inside, and the result is the eager module's."""

    class Probe(torch.nn.Module):
        def __init__(self, elmo):
            super().__init__()
            self.elmo = elmo
            self.classifier = torch.nn.Linear(2 * elmo.config.projection_dim, 3)

        def forward(self, **batch):
            return self.classifier(self.elmo(**batch).elmo_representations[0]).log_softmax(-1)

    probe = Probe(ElmoModel.from_pretrained(converted["allennlp-elmo"])).eval()
    batch = encode(ElmoTokenizer.from_pretrained(converted["allennlp-elmo"]))
    backend = CompileCounter()
    with torch.no_grad():
        expected = probe(**batch)
        got = torch.compile(probe, backend=backend)(**batch)
    assert torch.equal(got, expected)
    assert backend.frame_count >= 1 and backend.op_count >= 2  # (the linear layer and the log-softmax at least)


def test_the_character_encoder_and_a_bilstm_layer_compiled_alone_run_eagerly(converted):
    """Each forward that holds a cache or a fast path reads data on the host: compiled alone, it runs eagerly
    (TorchDynamo gives the backend no graph) and gives its eager output. torch.export still traces the same
    forwards (test_export.py)."""
    model = ElmoModel.from_pretrained(converted["allennlp-elmo"]).eval()
    char_ids = encode(ElmoTokenizer.from_pretrained(converted["allennlp-elmo"]))["input_ids"].flatten(0, 1)
    layer, config = model.layers[0], model.config
    torch.manual_seed(0)
    rows, steps = 3, 5
    layer_inputs = (torch.randn(2, rows, steps, config.projection_dim), torch.ones(rows, steps, dtype=torch.bool),
                    torch.zeros(2, rows, config.projection_dim), torch.zeros(2, rows, config.cell_size))
    for module, inputs in ((model.char_encoder, (char_ids,)), (layer, layer_inputs)):
        backend = CompileCounter()
        with torch.no_grad():
            expected = module(*inputs)
            model.clear_caches()
            got = torch.compile(module, backend=backend)(*inputs)
        for want, have in zip(expected if isinstance(expected, tuple) else (expected,),
                              got if isinstance(got, tuple) else (got,)):
            assert torch.equal(have, want), type(module).__name__
        assert backend.frame_count == 0, type(module).__name__


def test_training_through_a_compiled_model_gives_the_eager_gradients(converted):
    """The pretraining model in training mode (the fused training path, the sampled softmax's negatives and LM
    dropout from the same seed), a fine-tuned classifier, and a fine-tuned tagger with activation checkpointing
    (each biLSTM layer recomputed in backward): the same loss and every parameter's gradient."""
    tokenizer = ElmoTokenizer.from_pretrained(converted["allennlp-elmo"])
    batch = encode(tokenizer)
    targets = padded_tags().clamp(max=8)
    backward_targets = targets.flip(1).masked_fill(targets == -100, -100)
    models = {
        "pretraining": (ElmoForPreTraining.from_pretrained(converted["allennlp-elmo"], lm_vocab_size=10,
                                                           lm_negative_samples=4, lm_dropout=0.3),
                        dict(batch, labels=targets, backward_labels=backward_targets)),
        "classifier": (ElmoForSequenceClassification.from_pretrained(converted["allennlp-elmo"], num_labels=3,
                                                                     finetune_bilm=True),
                       dict(batch, labels=torch.tensor([0, 2, 1, 1]))),
        "tagger, checkpointed": (ElmoForTokenClassification.from_pretrained(converted["allennlp-elmo"], num_labels=9,
                                                                            finetune_bilm=True),
                                 dict(batch, labels=padded_tags())),
    }
    models["tagger, checkpointed"][0].activation_checkpointing_enable()
    for name, (model, inputs) in models.items():
        model.train()
        results = []
        for run in (model, torch.compile(model)):
            model.zero_grad(set_to_none=True)
            torch.manual_seed(0)
            loss = run(**inputs).loss
            loss.backward()
            gradients = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
            results.append((loss.detach(), gradients))
        (eager_loss, eager_grads), (compiled_loss, compiled_grads) = results
        assert torch.equal(compiled_loss, eager_loss), name
        assert eager_grads.keys() == compiled_grads.keys() and len(eager_grads) > 10, name
        for parameter, gradient in eager_grads.items():
            assert torch.equal(compiled_grads[parameter], gradient), (name, parameter)
        # ("every ELMo class" gives the eager outputs: in eval mode too, where the fast inference paths run)
        model.eval()
        with torch.no_grad():
            eager, compiled = model(**inputs), torch.compile(model)(**inputs)
        for field in ("loss", "last_hidden_state" if name == "pretraining" else "logits"):
            assert torch.equal(compiled[field], eager[field]), (name, field)


def test_trainer_with_torch_compile_trains_as_without_it(converted, tmp_path):
    """Trainer's `torch_compile=True` (the model compiled with the default backend): one SGD step of a fine-tuned
    tagger gives the update and the logged loss of the same step without it."""
    tokenizer = ElmoTokenizer.from_pretrained(converted["allennlp-elmo"])
    updates, losses = [], []
    for compile_model in (False, True):
        torch.manual_seed(0)
        model = ElmoForTokenClassification.from_pretrained(converted["allennlp-elmo"], num_labels=9, finetune_bilm=True)
        before = {name: p.detach().clone() for name, p in model.named_parameters() if p.requires_grad}
        args = TrainingArguments(
            output_dir=str(tmp_path / str(compile_model)), per_device_train_batch_size=4, max_steps=1,
            learning_rate=1.0, optim="sgd", lr_scheduler_type="constant", max_grad_norm=0.0, report_to="none",
            use_cpu=True, save_strategy="no", seed=0, torch_compile=compile_model,
        )
        trainer = Trainer(model=model, args=args, train_dataset=ner_dataset(tokenizer),
                          data_collator=DataCollatorForTokenClassification(tokenizer))
        losses.append(trainer.train().training_loss)
        updates.append({name: p.detach() - before[name] for name, p in model.named_parameters() if p.requires_grad})
    assert losses[0] == losses[1]
    for name, update in updates[0].items():
        assert update.abs().max() > 0, name
        assert torch.equal(updates[1][name], update), name
