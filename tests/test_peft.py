"""PEFT's LoRA on the converted fixture ELMo: adapters on the character encoder's layers (`target_modules`) and on the
biLSTM's weights (`target_parameters`) compute what the merged model computes, train only themselves, save and load,
and train with Trainer."""

import copy

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import DataCollatorForTokenClassification, Trainer, TrainingArguments

from hf_elmo import ElmoForSequenceClassification, ElmoForTokenClassification, ElmoTokenizer
from hf_elmo.modeling_elmo import ElmoBiLstmLayer

from conftest import readme_python_block
from test_heads import encode, ner_dataset, padded_tags

ENCODER_LORA = dict(target_modules=r".*char_encoder\.(char_cnn\.\d+|highway\.\d+\.(transform|carry)|projection)")
BILSTM_LORA = dict(target_modules=[], target_parameters=[
    f"layers.{i}.{name}" for i in (0, 1) for name in ("input_weight", "recurrent_weight", "projection_weight")
])


@pytest.fixture(scope="module")
def base_path(converted):
    return converted["allennlp-elmo"]


@pytest.fixture(scope="module")
def tokenizer(base_path):
    return ElmoTokenizer.from_pretrained(base_path)


def adapted(base_path, head, targets, num_labels=9):
    """A head with LoRA adapters whose B factors are random (PEFT starts them at zero: the adapter would add nothing)."""
    torch.manual_seed(0)
    model = get_peft_model(head.from_pretrained(base_path, num_labels=num_labels),
                           LoraConfig(r=4, lora_alpha=8, modules_to_save=["classifier"], **targets))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.05)
    return model


def logits(model, batch):
    with torch.no_grad():
        return model(**batch).logits


def merged_logits(model, batch):
    """The same model with its adapters merged into the weights: a plain ELMo head, run by hf-elmo's fast paths."""
    merged = copy.deepcopy(model).merge_and_unload().eval()
    assert not any("lora" in name for name, _ in merged.named_parameters())
    return logits(merged, batch)


@pytest.mark.parametrize("targets", [ENCODER_LORA, BILSTM_LORA], ids=["encoder", "bilstm"])
@pytest.mark.parametrize("head", [ElmoForSequenceClassification, ElmoForTokenClassification])
def test_an_adapted_model_computes_what_its_merged_model_computes(base_path, tokenizer, head, targets):
    """In evaluation: the adapted model's logits are the merged model's, and not the model's without the adapters
    (their classifier the same). After the adapters change in place, again (the caches of per-word results and the
    fast paths' copies of the weights follow), and after a switch to training mode and back."""
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


@pytest.mark.parametrize("targets", [ENCODER_LORA, BILSTM_LORA], ids=["encoder", "bilstm"])
def test_training_updates_only_the_adapters_with_the_plain_paths_gradients(base_path, tokenizer, targets):
    """Only the LoRA factors and the classifier train, each with the gradient that the plain computation
    (`use_fast_path = False` everywhere) gives; the frozen ELMo weights keep their values."""
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
    assert all("lora_" in name or "classifier" in name for name in fast)
    for name in fast:
        assert fast[name] is not None and fast[name].abs().max() > 0, name
        torch.testing.assert_close(fast[name], plain[name], rtol=1e-5, atol=1e-6, msg=name)


def test_an_adapter_saves_loads_and_trains_with_trainer(base_path, tokenizer, tmp_path):
    """LoRA on every adaptable layer (both targets at once) trained by Trainer for a few steps: the loss falls, the
    ELMo weights are unchanged, and the saved adapter (a few MB at most: no ELMo weights) loaded onto a new model
    gives the trained model's logits."""
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
    saved = {path.name: path.stat().st_size for path in (tmp_path / "adapter").iterdir()}
    assert "adapter_model.safetensors" in saved and "adapter_config.json" in saved
    loaded = PeftModel.from_pretrained(ElmoForTokenClassification.from_pretrained(base_path, num_labels=9),
                                       tmp_path / "adapter").eval()
    batch = encode(tokenizer)
    torch.testing.assert_close(logits(loaded, batch), logits(model.eval(), batch), rtol=1e-6, atol=1e-6)


def test_the_bilstm_layers_are_found_inside_peft_wrappers(base_path, tokenizer):
    """PEFT's LoRA over a layer's parameters puts a wrapper in the layer's place in `ElmoModel.layers`: emptying the
    caches (`clear_caches()`, and on a change of mode) still reaches every layer."""
    model = adapted(base_path, ElmoForTokenClassification, BILSTM_LORA).eval()
    elmo = model.base_model.model.elmo
    assert not any(isinstance(layer, ElmoBiLstmLayer) for layer in elmo.layers)
    first = next(module for module in elmo.modules() if isinstance(module, ElmoBiLstmLayer))
    logits(model, encode(tokenizer))
    assert len(first.input_gate_cache) > 0  # (the first layer's input gates of the words)
    elmo.clear_caches()
    assert len(first.input_gate_cache) == 0


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
