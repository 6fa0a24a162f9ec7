"""torch.export of ELMo for inference, as the README shows it: the README's example runs as written (on the fixture
model), and the exported program gives the eager model's outputs on another batch, within 1e-5."""

import pytest
import torch
from torch.export import Dim
from transformers.exporters.utils import get_leaf_tensors

from conftest import readme_python_block

from hf_elmo import (ElmoForPreTraining, ElmoForSequenceClassification, ElmoForTokenClassification, ElmoModel,
                     ElmoModelOutput, ElmoTokenizer)


def test_the_readmes_export_example(converted, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = readme_python_block("## Exporting with `torch.export`").replace('"elmo-original"', repr(str(converted["allennlp-elmo"])))
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert (tmp_path / "elmo-16-words.pt2").exists()
    model, batch, output = namespace["model"], namespace["batch"], namespace["output"]
    assert type(output) is ElmoModelOutput and output.last_hidden_state.shape == (3, 16, 32)  # "an ElmoModelOutput"
    with torch.no_grad():
        expected = model(**batch)
    torch.testing.assert_close(get_leaf_tensors(output), get_leaf_tensors(expected), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
@pytest.mark.parametrize("head", [ElmoForSequenceClassification, ElmoForTokenClassification])
def test_heads_export_with_a_batch_axis(converted, head, strict):
    """Both export modes: non-strict (torch.export's default) and strict (TorchDynamo traces, and must take the plain
    computation rather than run hf-elmo's forwards eagerly as under torch.compile)."""
    model = head.from_pretrained(converted["allennlp-elmo"], num_labels=3).eval()
    tokenizer = ElmoTokenizer.from_pretrained(converted["allennlp-elmo"])

    def encode(texts):
        return dict(tokenizer(texts, padding="max_length", max_length=9, return_tensors="pt"))

    batch_axis = {0: Dim("batch")}
    with torch.no_grad():  # inference: where the fast paths would run
        program = torch.export.export(model, (), encode(["I eat an apple .", "Hello"]),
                                      dynamic_shapes={"input_ids": batch_axis, "attention_mask": batch_axis},
                                      strict=strict)
    batch = encode(["Apple is a company .", "So is IBM", "Yes", "Peter Blackburn"])
    with torch.no_grad():
        expected = model(**batch).logits
    torch.testing.assert_close(program.module()(**batch).logits, expected, atol=1e-5, rtol=1e-5)


def test_the_exported_program_does_not_check_its_inputs(converted):
    """README: the model refuses an attention mask that disagrees with the padding and ids outside the character
    alphabet; the exported program checks neither: such a mask gives other vectors without an error, and such ids
    fail inside torch, as do int32 ids, which the model reads as int64 ones."""
    model = ElmoModel.from_pretrained(converted["allennlp-elmo"]).eval()
    tokenizer = ElmoTokenizer.from_pretrained(converted["allennlp-elmo"])

    def encode(texts):
        return dict(tokenizer(texts, padding="max_length", max_length=8, return_tensors="pt"))

    with torch.no_grad():
        program = torch.export.export(model, (), encode(["I eat an apple .", "Hello"]),
                                      dynamic_shapes={name: {0: Dim("batch")} for name in ("input_ids", "attention_mask")})
        batch = encode(["a b c", "d"])
        expected = model(**batch).last_hidden_state
        unmasked = {**batch, "attention_mask": torch.ones_like(batch["attention_mask"])}
        with pytest.raises(ValueError, match="attention_mask"):
            model(**unmasked)
        found = program.module()(**unmasked).last_hidden_state
        assert (found - expected).abs().max() > 0.1
        too_large = {**batch, "input_ids": batch["input_ids"].masked_fill(batch["input_ids"] > 0, 10_000)}
        with pytest.raises(ValueError, match="input_ids"):
            model(**too_large)
        with pytest.raises(IndexError):
            program.module()(**too_large)
        # README: ids of another integer type than the example's (int32 here) fail inside torch; the model takes them.
        narrow = {**batch, "input_ids": batch["input_ids"].int()}
        assert torch.equal(model(**narrow).last_hidden_state, expected)
        with pytest.raises(RuntimeError):
            program.module()(**narrow)


def test_the_pretraining_model_exports_with_a_batch_axis(converted):
    """The biLM language model, read window after window: the program takes the previous window's final_states and
    gives the eager model's top layer, every layer and final_states (the softmax weights are new: no loss here)."""
    model = ElmoForPreTraining.from_pretrained(converted["allennlp-elmo"], lm_vocab_size=11).eval()
    tokenizer = ElmoTokenizer.from_pretrained(converted["allennlp-elmo"])

    def encode(texts, previous):  # right-padded windows, each row continuing the same row of `previous`
        with torch.no_grad():
            states = model(**dict(tokenizer(previous, padding=True, return_tensors="pt"))).final_states
        return {**tokenizer(texts, padding="max_length", max_length=9, return_tensors="pt"), "initial_states": states}

    batch_dim = Dim("batch")
    dynamic = {"input_ids": {0: batch_dim}, "attention_mask": {0: batch_dim}, "initial_states": ({1: batch_dim},) * 2,
               "output_hidden_states": None}
    example = encode(["I eat an apple .", "Hello"], ["<S> It is", "<S> Yes"])
    with torch.no_grad():
        program = torch.export.export(model, (), {**example, "output_hidden_states": True}, dynamic_shapes=dynamic)
    batch = encode(["Apple is a company .", "So is IBM", "Yes", "Peter Blackburn"],
                   ["<S> a", "<S> b c", "<S>", "<S> d"])
    with torch.no_grad():
        expected = model(**batch, output_hidden_states=True)
    output = program.module()(**batch, output_hidden_states=True)
    assert len(output.hidden_states) == 3 and output.last_hidden_state.shape == (4, 9, 32)
    torch.testing.assert_close(get_leaf_tensors(output), get_leaf_tensors(expected), atol=1e-5, rtol=1e-5)


def test_onnx_export_runs_in_onnxruntime(converted, tmp_path):
    """`torch.onnx.export(..., dynamo=True)` (through torch.export) of the model and of both heads, with a batch axis;
    ONNX Runtime gives the eager outputs on another batch size, left and right padding both, within 1e-5."""
    import onnxruntime

    tokenizer = ElmoTokenizer.from_pretrained(converted["allennlp-elmo"])

    def encode(texts, side="right"):
        tokenizer.padding_side = side
        try:
            return dict(tokenizer(texts, padding="max_length", max_length=9, return_tensors="pt"))
        finally:
            tokenizer.padding_side = "right"

    batch_axis = {0: Dim("batch")}
    for model_class in (ElmoModel, ElmoForSequenceClassification, ElmoForTokenClassification):
        options = {} if model_class is ElmoModel else {"num_labels": 3}
        model = model_class.from_pretrained(converted["allennlp-elmo"], **options).eval()
        path = tmp_path / "elmo.onnx"
        with torch.no_grad():
            # (output_names names the first outputs, as the README says: the model's first is last_hidden_state)
            names = ["last_hidden_state"] if model_class is ElmoModel else None
            torch.onnx.export(model, (), str(path), kwargs=encode(["I eat an apple .", "Hello"]), dynamo=True,
                              dynamic_shapes={"input_ids": batch_axis, "attention_mask": batch_axis}, output_names=names)
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        if names:
            assert session.get_outputs()[0].name == "last_hidden_state"
        for side in ("right", "left"):
            batch = encode(["Apple is a company .", "So is IBM", "Yes", "Peter Blackburn"], side)
            with torch.no_grad():
                expected = model(**batch)
            found = session.run(None, {name: batch[name].numpy() for name in ("input_ids", "attention_mask")})
            leaves = list(get_leaf_tensors(expected).values())  # (every output, in the exported program's order)
            assert len(found) == len(leaves), model_class.__name__
            torch.testing.assert_close([torch.from_numpy(array) for array in found], leaves, atol=1e-5, rtol=1e-5)
