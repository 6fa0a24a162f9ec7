"""PEFT's LoRA on the converted fixture ELMo: adapters on the character encoder's layers (`target_modules`) and on the
biLSTM's weights (`target_parameters`) compute what the merged model computes, train only themselves (and the task's
classifier and scalar mix), save and load, train with Trainer, and merge into a model that runs the fast paths."""

import copy

import pytest
import torch
from peft import LoraConfig, PeftModel, TaskType, get_peft_model
from safetensors import safe_open
from transformers import DataCollatorForTokenClassification, Trainer, TrainingArguments

from conftest import readme_python_block
from test_heads import base_path, encode, ner_dataset, padded_tags, tokenizer  # noqa: F401 (fixtures)

from hf_elmo import ElmoForSequenceClassification, ElmoForTokenClassification
from hf_elmo.fast_bilstm import built_derived_weights
from hf_elmo.modeling_elmo import ElmoBiLstmLayer

ENCODER_LORA = dict(target_modules=r".*char_encoder\.(char_cnn\.\d+|highway\.\d+\.(transform|carry)|projection)")
BILSTM_LORA = dict(target_modules=[], target_parameters=[
    f"layers.{i}.{name}" for i in (0, 1) for name in ("input_weight", "recurrent_weight", "projection_weight")
])
TASK_MODULES = ["classifier", "scalar_mixes.0"]  # (trained in full, as without PEFT)


def add_adapters(model, targets):
    """`model` with LoRA adapters whose B factors are random (PEFT starts them at zero: they would add nothing)."""
    torch.manual_seed(0)
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, modules_to_save=TASK_MODULES, **targets))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.05)
    return model


def adapted(base_path, head, targets, num_labels=9):
    torch.manual_seed(0)  # (the same classifier every time)
    return add_adapters(head.from_pretrained(base_path, num_labels=num_labels), targets)


def logits(model, batch):
    with torch.no_grad():
        return model(**batch).logits


def merged_logits(model, batch):
    """The same model with its adapters merged into the weights: a plain ELMo head, run by hf-elmo's fast paths."""
    merged = copy.deepcopy(model).merge_and_unload().eval()
    assert not any("lora" in name for name, _ in merged.named_parameters())
    return logits(merged, batch)


@pytest.mark.parametrize("head, task_type", [(ElmoForSequenceClassification, TaskType.SEQ_CLS),
                                             (ElmoForTokenClassification, TaskType.TOKEN_CLS)])
def test_a_peft_task_model_runs_the_head_it_wraps(base_path, tokenizer, head, task_type):
    """PEFT's task models (LoraConfig(task_type=...), the usual set-up for classification heads) pass every model
    inputs_embeds=None and output_attentions=None: the heads refused them as unexpected keywords, with and without
    labels. Read as not asked for, they give the wrapped head's logits and loss; output_attentions asked for is
    refused, and inputs_embeds beside input_ids."""
    torch.manual_seed(0)
    model = get_peft_model(head.from_pretrained(base_path, num_labels=3),
                           LoraConfig(task_type=task_type, r=4, modules_to_save=TASK_MODULES, **ENCODER_LORA)).eval()
    batch = encode(tokenizer)
    labels = (torch.tensor([0, 2, 1, 0]) if head is ElmoForSequenceClassification
              else batch["attention_mask"].masked_fill(batch["attention_mask"] == 0, -100))
    with torch.no_grad():
        found = model(**batch, labels=labels)
        expected = model.base_model.model(**batch, labels=labels)
    torch.testing.assert_close(found.logits, expected.logits)
    torch.testing.assert_close(found.loss, expected.loss)
    with pytest.raises(ValueError, match=r"got unexpected keyword argument\(s\) 'output_attentions'"):
        model.base_model.model(**batch, output_attentions=True)
    with pytest.raises(ValueError, match="pass input_ids .* or inputs_embeds .*, not both"):
        model.base_model.model(**batch, inputs_embeds=torch.zeros(4, 9, 50, 16))


@pytest.mark.parametrize("targets", [ENCODER_LORA, BILSTM_LORA], ids=["encoder", "bilstm"])
@pytest.mark.parametrize("head", [ElmoForSequenceClassification, ElmoForTokenClassification])
def test_an_adapted_model_computes_what_its_merged_model_computes(base_path, tokenizer, head, targets):
    """In evaluation: the adapted model's logits are the merged model's, and not the model's without the adapters
    (their classifier the same); again after the adapters change in place, and after a switch to training mode and
    back (which empties the caches of every biLSTM layer, found inside PEFT's wrappers). An adapted layer runs the
    plain computation in inference: no copies of its weights are derived, no word's input gates kept."""
    model = adapted(base_path, head, targets).eval()
    batch = encode(tokenizer)
    unadapted = head.from_pretrained(base_path, num_labels=9).eval()
    unadapted.classifier.load_state_dict(model.base_model.model.classifier.modules_to_save["default"].state_dict())
    torch.testing.assert_close(logits(model, batch), merged_logits(model, batch), rtol=1e-5, atol=1e-5)
    assert (logits(model, batch) - logits(unadapted, batch)).abs().max() > 1e-3
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_A" in name:
                parameter.mul_(-1.5)
    torch.testing.assert_close(logits(model, batch), merged_logits(model, batch), rtol=1e-5, atol=1e-5)
    model.train()
    model.eval()
    torch.testing.assert_close(logits(model, batch), merged_logits(model, batch), rtol=1e-5, atol=1e-5)
    elmo = model.base_model.model.elmo
    layers = [module for module in elmo.modules() if isinstance(module, ElmoBiLstmLayer)]
    if targets is BILSTM_LORA:
        assert all(built_derived_weights(layer, "exact") is None for layer in layers)
        assert len(layers[0].input_gate_cache) == 0
    else:  # (the biLSTM runs its fast path; the character encoder, adapted, its plain one)
        assert all(built_derived_weights(layer, "exact") is not None for layer in layers)
        assert elmo.char_encoder.modules_must_run() is not None and len(elmo.char_encoder.token_cache) == 0


@pytest.mark.parametrize("targets", [ENCODER_LORA, BILSTM_LORA], ids=["encoder", "bilstm"])
def test_training_updates_only_the_adapters_with_the_plain_paths_gradients(base_path, tokenizer, targets):
    """Only the LoRA factors, the classifier and the task's scalar mix train, each with the gradient that the plain
    computation (`use_fast_path = False` everywhere) gives."""
    batch, labels = encode(tokenizer), padded_tags()
    gradients = []
    for fast in (True, False):
        model = adapted(base_path, ElmoForTokenClassification, targets).train()
        for module in model.modules():
            if hasattr(module, "use_fast_path"):
                module.use_fast_path = fast
        model(**batch, labels=labels).loss.backward()
        gradients.append({name: p.grad for name, p in model.named_parameters() if p.requires_grad})
    fast, plain = gradients
    assert sorted(fast) == sorted(plain) and fast
    assert all("lora_" in name or "classifier" in name or "scalar_mixes" in name for name in fast)
    assert any("scalar_mixes.0.modules_to_save" in name for name in fast)
    for name in fast:
        assert fast[name] is not None and fast[name].abs().max() > 0, name
        torch.testing.assert_close(fast[name], plain[name], rtol=1e-5, atol=1e-6, msg=name)


def test_an_adapter_saves_loads_and_trains_with_trainer(base_path, tokenizer, tmp_path):
    """LoRA on every adaptable layer (both targets at once) trained by Trainer for a few steps: the loss falls, the
    ELMo weights are unchanged, and the saved adapter (the adapters and the task's modules, no ELMo weight) loaded
    onto a new model gives the trained model's logits."""
    model = adapted(base_path, ElmoForTokenClassification,
                    dict(target_modules=ENCODER_LORA["target_modules"],
                         target_parameters=BILSTM_LORA["target_parameters"]))
    frozen = {name: p.detach().clone() for name, p in model.named_parameters() if not p.requires_grad}
    args = TrainingArguments(
        output_dir=str(tmp_path / "run"), per_device_train_batch_size=4, num_train_epochs=6, learning_rate=0.01,
        report_to="none", use_cpu=True, save_strategy="no", logging_steps=1, seed=0,
    )
    trainer = Trainer(model=model, args=args, train_dataset=ner_dataset(tokenizer),
                      data_collator=DataCollatorForTokenClassification(tokenizer))
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 6 and losses[-1] < losses[0]
    for name, parameter in model.named_parameters():
        if name in frozen:
            assert torch.equal(parameter, frozen[name]), name

    model.save_pretrained(tmp_path / "adapter")
    with safe_open(tmp_path / "adapter" / "adapter_model.safetensors", "pt") as saved:
        names = list(saved.keys())
    assert names and all("lora_" in name or "classifier" in name or "scalar_mixes" in name for name in names)
    assert any("lora_" in name and "layers.1" in name for name in names)
    loaded = PeftModel.from_pretrained(ElmoForTokenClassification.from_pretrained(base_path, num_labels=9),
                                       tmp_path / "adapter").eval()
    batch = encode(tokenizer)
    torch.testing.assert_close(logits(loaded, batch), logits(model.eval(), batch), rtol=1e-6, atol=1e-6)


def test_clearing_the_caches_reaches_the_layers_inside_peft_wrappers(base_path, tokenizer):
    """PEFT's LoRA over a layer's parameters puts a wrapper in the layer's place in `ElmoModel.layers`: emptying the
    caches (`clear_caches()`, and on every change of mode) still reaches the layer inside it."""
    head = ElmoForTokenClassification.from_pretrained(base_path, num_labels=9).eval()
    logits(head, encode(tokenizer))
    first = head.elmo.layers[0]
    assert len(first.input_gate_cache) > 0  # (the first layer's input gates of the words)
    model = add_adapters(head, dict(target_modules=[], target_parameters=["layers.0.input_weight"]))
    elmo = model.base_model.model.elmo
    assert elmo.layers[0] is not first and elmo.layers[0].base_layer is first
    elmo.clear_caches()
    assert len(first.input_gate_cache) == 0


def test_merged_in_place_the_weights_must_be_said_changed(base_path, tokenizer):
    """README: PEFT merges (and unmerges) by writing through `.data`, which the caches cannot see. A model that ran
    before the adapters were added, and with them disabled (`disable_adapter()`, which runs the plain weights through
    the fast paths), gives the right outputs after `merge_adapter()`, `unmerge_adapter()` and `merge_and_unload()`,
    each followed by `weights_changed()`; the merged model through its fast paths (the character encoder's token
    cache and the biLSTM's copies of the weights in use)."""
    batch = encode(tokenizer)
    for targets in (ENCODER_LORA, BILSTM_LORA):
        head = ElmoForTokenClassification.from_pretrained(base_path, num_labels=9).eval()
        logits(head, batch)  # (caches filled from the weights before the merge)
        model = add_adapters(head, targets).eval()
        with model.disable_adapter():
            logits(model, batch)
        expected, adapted_logits = merged_logits(model, batch), logits(model, batch)
        model.merge_adapter()  # (merged, the adapters kept to be taken out again)
        model.base_model.model.elmo.weights_changed()
        torch.testing.assert_close(logits(model, batch), expected, rtol=1e-5, atol=1e-5)
        model.unmerge_adapter()
        model.base_model.model.elmo.weights_changed()
        torch.testing.assert_close(logits(model, batch), adapted_logits, rtol=1e-5, atol=1e-5)
        merged = model.merge_and_unload()
        merged.elmo.weights_changed()
        torch.testing.assert_close(logits(merged, batch), expected, rtol=1e-5, atol=1e-5)
        assert merged.elmo.char_encoder.modules_must_run() is None and len(merged.elmo.char_encoder.token_cache) > 0
        assert all(built_derived_weights(layer, "exact") is not None for layer in merged.elmo.layers)


def test_the_readmes_lora_configuration_is_the_one_tested_and_adapts_every_layer(base_path):
    """README "LoRA with PEFT": its configuration is the one these tests use, and it puts an adapter on every
    convolution, highway layer and the projection of the character encoder and on the six weight tensors of the
    biLSTM's two layers."""
    tagger = ElmoForTokenClassification.from_pretrained(base_path, num_labels=5)
    found = {"tagger": tagger}
    exec(compile(readme_python_block("### LoRA with PEFT"), "README.md", "exec"), found)
    lora, model = found["lora"], found["tagger"]
    assert lora.target_modules == ENCODER_LORA["target_modules"]
    assert sorted(lora.target_parameters) == sorted(BILSTM_LORA["target_parameters"])
    encoder = tagger.elmo.char_encoder
    expected = len(encoder.char_cnn) + 2 * len(encoder.highway) + 1
    adapted_modules = {name.split(".lora_A")[0] for name, _ in model.named_parameters() if ".lora_A" in name}
    assert sum("char_encoder" in name for name in adapted_modules) == expected
    assert sum("char_encoder" not in name for name in adapted_modules) == 6  # (nested wrappers, one per weight)


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_activation_checkpointing_with_adapters(base_path, tokenizer, use_reentrant):
    """With adapters on the character encoder, activation checkpointing gives the gradients of training without it.
    With adapters on the biLSTM's weights it is refused, naming the reason: the recomputation in backward would run
    the layer without PEFT's parametrization (reentrant checkpointing gave no gradient at all, silently)."""
    batch, labels = encode(tokenizer), padded_tags()
    gradients = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        head = ElmoForTokenClassification.from_pretrained(base_path, num_labels=9, dropout=0.0)
        if checkpointing:
            head.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": use_reentrant})
        model = add_adapters(head, ENCODER_LORA).train()
        model(**batch, labels=labels).loss.backward()
        gradients.append({name: p.grad for name, p in model.named_parameters() if p.requires_grad})
    for name, gradient in gradients[0].items():
        torch.testing.assert_close(gradients[1][name], gradient, rtol=1e-5, atol=1e-6, msg=name)

    torch.manual_seed(0)
    head = ElmoForTokenClassification.from_pretrained(base_path, num_labels=9)
    head.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": use_reentrant})
    model = add_adapters(head, BILSTM_LORA).train()
    with pytest.raises(ValueError, match="activation checkpointing would recompute a biLSTM layer .* turn activation"):
        model(**batch, labels=labels).loss.backward()
    with torch.no_grad():  # (in training mode without gradients nothing is checkpointed: nothing to refuse)
        model(**batch, labels=labels)


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_a_parametrization_that_stays_trains_with_activation_checkpointing(base_path, tokenizer, use_reentrant):
    """weight_norm on a biLSTM weight (a parametrization that stays, so that the recomputation in backward sees it)
    is not refused: activation checkpointing gives the gradients of training without it."""
    batch, labels = encode(tokenizer), padded_tags()
    gradients = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        head = ElmoForTokenClassification.from_pretrained(base_path, num_labels=9, dropout=0.0, finetune_bilm=True)
        torch.nn.utils.parametrizations.weight_norm(head.elmo.layers[1], "recurrent_weight")
        if checkpointing:
            head.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": use_reentrant})
        head.train()(**batch, labels=labels).loss.backward()
        gradients.append({name: p.grad for name, p in head.named_parameters()})
    for name, gradient in gradients[0].items():
        assert gradient is not None, name
        torch.testing.assert_close(gradients[1][name], gradient, rtol=1e-5, atol=1e-6, msg=name)
