"""A pretraining step as a CUDA graph records it: `static_shapes()` (hf_elmo/static_shapes.py) and the recorded step
(modeling/graphed_step.py). On CPU the same computation runs unrecorded: it must read no device value (what a
recording cannot do) and give the usual step's numbers; on CUDA the recording itself is held to the unrecorded
step."""

import contextlib
import copy
import shutil
import threading

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import DEVICES, FIXTURES, relative_error
from hf_elmo import ElmoConfig, ElmoForPreTraining
from hf_elmo.static_shapes import has_static_shapes, static_batch_is_full, static_shapes
from modeling.data import EncodedText, StreamBatches, WordTable, load_sentences, sentence_batch
from modeling.graphed_step import GraphedTrainingStep, assign_learning_rates, graph_unsupported_reason, is_full
from modeling.presets import TINY_MODEL
from modeling.vocabulary import Vocabulary

TRAIN_TEXT = FIXTURES / "bilm-tf" / "train" / "data.txt"


@pytest.fixture(scope="module")
def corpus():
    sentences = load_sentences([str(TRAIN_TEXT)])
    vocabulary = Vocabulary.from_file(FIXTURES / "bilm-tf" / "train" / "vocab.txt")
    table = WordTable(50)
    return EncodedText.encode(sentences, table, vocabulary), table, vocabulary


def stream(corpus, rows=3, unroll=8) -> StreamBatches:
    text, table, vocabulary = corpus
    return StreamBatches(text, table, vocabulary, rows, unroll, seed=1)


def tiny_model(vocabulary, **overrides) -> ElmoForPreTraining:
    config = ElmoConfig(**{**TINY_MODEL, "lm_vocab_size": len(vocabulary), "lm_negative_samples": 0,
                           "lm_dropout": 0.2, **overrides})
    torch.manual_seed(0)
    return ElmoForPreTraining(config).train()


# What reads a value back from the device (or makes a shape from one): a CUDA graph cannot record any of it.
HOST_READS = {"aten::_local_scalar_dense", "aten::nonzero", "aten::_unique2", "aten::unique_dim", "aten::masked_select",
              "aten::unique_consecutive", "aten::masked_scatter"}


class NoHostReads(TorchDispatchMode):
    """Fails on an operation that reads the device's values on the host, or whose result's shape depends on them;
    `tolist` and `numpy` (which do not go through the dispatcher) are caught by name."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._schema.name in HOST_READS:
            raise AssertionError(f"{func._schema.name} reads the device")
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        self.patched = {name: getattr(torch.Tensor, name) for name in ("tolist", "numpy")}
        for name in self.patched:
            setattr(torch.Tensor, name, lambda *a, name=name, **k: (_ for _ in ()).throw(AssertionError(f"{name}()")))
        return super().__enter__()

    def __exit__(self, *exc):
        for name, method in self.patched.items():
            setattr(torch.Tensor, name, method)
        return super().__exit__(*exc)


def loss_and_gradients(model, batch, static: bool, states=None, guard=False, full=False):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(3)  # the same dropout masks on both
    with static_shapes(full) if static else contextlib.nullcontext(), NoHostReads() if guard else contextlib.nullcontext():
        output = model(**batch, initial_states=states)
        output.loss.backward()
    return output, {name: p.grad.clone() for name, p in model.named_parameters()}


def padded_batch(corpus) -> dict:
    """Whole sentences, right-padded, -100 past each row's end: the masked positions of static_shapes()."""
    text, table, vocabulary = corpus
    return sentence_batch(text, [0, 2, 4], table, vocabulary)


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "plain-path"])
@pytest.mark.parametrize("kind", ["stream", "stream-full", "padded", "word-input"])
def test_static_shapes_give_the_usual_loss_and_gradients(corpus, fast, kind):
    """Every position encoded instead of each distinct word once, the LSTM masking every step, every position
    scored: the same loss, gradients and final states to float32 rounding, dropout included where every position
    is a word (with padding the softmax's dropout draws a mask for every position in static_shapes(), for the words
    only otherwise: other masks, equally random)."""
    text, table, vocabulary = corpus
    overrides = {"padded": {"lm_dropout": 0.0},
                 "word-input": {"word_vocab_size": 40, "word_embedding_dim": 8, "bos_word_id": 1, "eos_word_id": 2},
                 }.get(kind, {})
    model = tiny_model(vocabulary, **overrides)
    model.set_fast_path(fast)
    batch = padded_batch(corpus) if kind == "padded" else stream(corpus).batch(3)
    assert is_full(batch) == (kind != "padded")
    if kind == "word-input":
        batch["input_word_ids"] = batch["input_ids"][..., 1] % 40
        batch["backward_input_word_ids"] = batch["backward_input_ids"][..., 1] % 40
    states = None
    if kind.startswith("stream"):
        torch.manual_seed(1)
        config = model.config
        states = (torch.randn(2, 3, 2 * config.projection_dim), torch.randn(2, 3, 2 * config.cell_size))
    if kind == "padded":
        assert not bool((batch["labels"] != -100).all())
    usual, usual_gradients = loss_and_gradients(model, batch, static=False, states=states)
    static, static_gradients = loss_and_gradients(model, batch, static=True, states=states, full=kind == "stream-full")
    assert abs(static.loss.item() - usual.loss.item()) <= 1e-6 * usual.loss.item()
    worst = max((relative_error(static_gradients[n], g), n) for n, g in usual_gradients.items())
    assert worst[0] <= 1e-5, worst
    for a, b in zip(static.final_states, usual.final_states):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "plain-path"])
def test_static_shapes_read_no_device_value(corpus, fast):
    """Forward and backward of a stream window in static_shapes() never read a value back, full or not (the guard
    fails on the usual step, which does: so it can fail)."""
    model = tiny_model(corpus[2])
    model.set_fast_path(fast)
    batch = stream(corpus).batch(0)
    for full in (False, True):
        loss_and_gradients(model, batch, static=True, guard=True, full=full)
    with pytest.raises(AssertionError, match="reads the device|tolist|numpy"):
        loss_and_gradients(model, batch, static=False, guard=True)


def test_static_shapes_refuse_the_sampled_softmax(corpus):
    model = tiny_model(corpus[2], lm_negative_samples=8)
    with static_shapes(), pytest.raises(ValueError, match="sampled softmax draws its negatives on the host"):
        model(**stream(corpus).batch(0))
    assert not has_static_shapes()  # (left on leaving the block, also by an error)


def test_static_shapes_hold_in_their_own_thread_only():
    """A recording in one thread leaves the model as it is in the others: their inference keeps its caches and its
    unmasked full rows. Nested blocks restore the outer one's `full`."""
    seen, inside, leave = [], threading.Event(), threading.Event()

    def record():
        with static_shapes(full=True):
            with static_shapes(full=False):
                seen.append(("nested", has_static_shapes(), static_batch_is_full()))
            seen.append(("outer", has_static_shapes(), static_batch_is_full()))
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=record)
    thread.start()
    assert inside.wait(10)
    seen.append(("other thread", has_static_shapes(), static_batch_is_full()))
    leave.set()
    thread.join()
    assert seen == [("nested", True, False), ("outer", True, True), ("other thread", False, False)]
    assert not has_static_shapes()


def usual_steps(model, batches, steps, max_grad_norm=5.0, rates=None, autocast_dtype=None):
    """pretrain.py's step (AdamW, clipping, carried state, the forward under autocast in `autocast_dtype`), the
    reference."""
    torch.manual_seed(0)  # (dropout)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, fused=model.device.type == "cuda")
    states, losses = None, []
    for step in range(steps):
        if rates:
            assign_learning_rates(optimizer, [rates[step]])
        with torch.autocast(model.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            output = model(**{k: v.to(model.device) for k, v in batches.batch(step).items()}, initial_states=states)
        output.loss.backward()
        states = tuple(s.detach() for s in output.final_states)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(output.loss.item())
    return losses, states


def graphed_steps(model, batches, steps, record, max_grad_norm=5.0, rates=None, restart_at=None, autocast_dtype=None):
    torch.manual_seed(0)  # (dropout)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, fused=record or model.device.type == "cuda")
    graphed = GraphedTrainingStep(model, optimizer, max_grad_norm, autocast_dtype=autocast_dtype, record=record)
    states, losses = None, []
    for step in range(steps):
        if rates:
            assign_learning_rates(optimizer, [rates[step]])
        batch = batches.batch(step)
        assert graphed.fits(batch)
        if step == restart_at:
            states = None
        step_losses, _, states = graphed.step(batch, states)
        losses.append(step_losses[0].item())
    return losses, states, graphed


def test_unrecorded_graphed_step_is_the_usual_step(corpus):
    """Six steps with the learning rate changing each step: the same losses and final states as pretrain.py's loop,
    dropout included; states=None starts the carried state from zero again."""
    batches = stream(corpus)
    rates = [2e-3 * (1 - step / 10) for step in range(6)]
    model = tiny_model(corpus[2])
    expected, expected_states = usual_steps(copy.deepcopy(model), batches, 6, rates=rates)
    found, found_states, graphed = graphed_steps(copy.deepcopy(model), batches, 6, record=False, rates=rates)
    assert max(abs(a - b) for a, b in zip(found, expected)) <= 1e-5, (found, expected)
    for a, b in zip(found_states, expected_states):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)
    assert graphed.graph is None and graphed.failure is None
    restarted, _, _ = graphed_steps(copy.deepcopy(model), batches, 3, record=False, restart_at=2)
    assert abs(restarted[2] - found[2]) > 1e-4  # the third step from zero state, not the carried one
    assert graphed.full and not graphed.fits({**batches.batch(0), "labels": batches.batch(0)["labels"][:2]})
    unfinished = batches.batch(0)
    unfinished["labels"][1, -1] = -100  # (the shapes of the recording, but a position without a target)
    assert not graphed.fits(unfinished)


def test_unrecorded_graphed_step_in_bf16_is_the_usual_step_under_autocast(corpus):
    """--mixed-precision bf16: the step's forward runs under bf16 autocast, as pretrain.py's loop does (a step that
    left it out trained in float32 with no sign of it): the first step's loss is the loop's to the bit, 1.7e-4 from
    float32's. (Later steps part by up to 4e-4 here, of the order of bf16's own difference from float32.)"""
    batches = stream(corpus)
    model = tiny_model(corpus[2])
    (expected,), _ = usual_steps(copy.deepcopy(model), batches, 1, autocast_dtype=torch.bfloat16)
    (found,), _, _ = graphed_steps(copy.deepcopy(model), batches, 1, record=False, autocast_dtype=torch.bfloat16)
    (float32,), _, _ = graphed_steps(copy.deepcopy(model), batches, 1, record=False)
    assert found == expected and abs(found - float32) > 1e-5, (found, expected, float32)


def test_graphed_step_checks_each_batch_on_the_host(corpus):
    """What the model cannot check inside a recording is checked before the batch is copied in."""
    model = tiny_model(corpus[2])
    graphed = GraphedTrainingStep(model, torch.optim.AdamW(model.parameters()), 5.0, None, record=False)
    batch = stream(corpus).batch(0)
    batch["labels"][0, 0] = len(corpus[2])
    with pytest.raises(ValueError, match="labels holds .* outside the vocabulary"):
        graphed.step(batch, None)
    batch = stream(corpus).batch(0)
    batch["input_ids"][0, 0, 0] = 999
    with pytest.raises(ValueError, match="input_ids holds 999, outside the character alphabet"):
        graphed.step(batch, None)


@pytest.mark.skipif("cuda" not in DEVICES, reason="a CUDA graph records on a GPU only (the CPU's refusal: "
                    "test_graph_unsupported_reasons)")
def test_recorded_step_replays_the_unrecorded_one_on_cuda(corpus):
    """Warm-up, recording and replays give the unrecorded step's losses (no dropout: the recording draws its own
    masks), with the learning rate changed between replays."""
    device = "cuda"
    batches = stream(corpus, rows=4, unroll=10)
    rates = [2e-3 * (1 - step / 12) for step in range(8)]
    model = tiny_model(corpus[2], lm_dropout=0.0).to(device)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    expected, expected_states, _ = graphed_steps(copy.deepcopy(model), batches, 8, record=False, rates=rates)
    found, found_states, graphed = graphed_steps(copy.deepcopy(model), batches, 8, record=True, rates=rates)
    assert graphed.failure is None and graphed.graph is not None
    assert max(abs(a - b) for a, b in zip(found, expected)) <= 1e-5, (found, expected)
    for a, b in zip(found_states, expected_states):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)


def test_graph_unsupported_reasons():
    cuda = torch.device("cuda")
    usual = dict(device=cuda, num_processes=1, accumulation=1, stateful=True, optimizer="adamw", negative_samples=0,
                 vocab_size=100, mixed_precision="bf16")
    assert graph_unsupported_reason(**usual) is None
    assert graph_unsupported_reason(**{**usual, "negative_samples": 100}) is None  # as many as the vocabulary: full
    for change, reason in [({"device": torch.device("cpu")}, "CPU"), ({"num_processes": 2}, "several processes"),
                           ({"accumulation": 2}, "accumulates"), ({"stateful": False}, "sentence batches"),
                           ({"optimizer": "adagrad"}, "Adagrad"), ({"negative_samples": 8}, "sampled softmax"),
                           ({"mixed_precision": "fp16"}, "fp16")]:
        assert reason in graph_unsupported_reason(**{**usual, **change})


def test_pretrain_trains_through_the_step_as_it_would_record_it(tmp_path, capsys, monkeypatch):
    """pretrain.py's branch for a recorded step, run unrecorded on the CPU (the recording itself needs CUDA), every
    third batch through the usual loop in between: the same logged losses as the usual loop alone, a checkpoint in
    the middle, and a resume from it that ends as the run did."""
    import functools

    from modeling import pretrain
    from test_pretraining import TRAIN, losses, read_log, run_main

    arguments = ["--preset", "tiny", "--train-file", TRAIN / "data.txt", "--vocab-file", TRAIN / "vocab.txt",
                 "--negative-samples", 0, "--optimizer", "adamw", "--learning-rate", 0.01, "--lr-scheduler", "linear",
                 "--warmup-steps", 2, "--logging-steps", 1, "--seed", 7, "--max-steps", 8, "--save-steps", 4]
    code, _, err = run_main(capsys, *arguments, "--output-dir", tmp_path / "usual")
    assert code == 0, err
    steps = []
    monkeypatch.setattr(pretrain, "graph_unsupported_reason", lambda *args: None)
    monkeypatch.setattr(pretrain, "GraphedTrainingStep", functools.partial(GraphedTrainingStep, record=False))
    monkeypatch.setattr(GraphedTrainingStep, "step", lambda self, *a, step=GraphedTrainingStep.step: steps.append(1)
                        or step(self, *a))
    # Every third batch (as if it had not the recorded shapes) goes through the usual loop, in between recorded steps.
    calls = []
    monkeypatch.setattr(GraphedTrainingStep, "fits", lambda self, batch: calls.append(1) or len(calls) % 3 != 0)
    for folder in ("graphed", "resumed"):
        code, _, err = run_main(capsys, *arguments, "--output-dir", tmp_path / folder)
        assert code == 0, err
    expected = losses(tmp_path / "usual")
    assert len(steps) == 11 and sorted(losses(tmp_path / "graphed")) == sorted(expected) == list(range(1, 9))
    assert max(abs(losses(tmp_path / "graphed")[s] - expected[s]) for s in expected) <= 1e-5, (losses(tmp_path / "graphed"), expected)
    # Every logged number, not the mean loss alone: each direction's loss, the gradient norm, the learning rate.
    usual, graphed = ([record for record in read_log(tmp_path / name) if "loss" in record] for name in ("usual", "graphed"))
    assert {"forward_loss", "backward_loss", "grad_norm", "learning_rate"} <= usual[0].keys()
    for want, got in zip(usual, graphed, strict=True):
        assert want.keys() == got.keys(), want["step"]
        for key in want.keys() - {"words_per_second"}:
            assert got[key] == pytest.approx(want[key], abs=1e-5), (want["step"], key)
    shutil.rmtree(tmp_path / "resumed" / "checkpoint-8", ignore_errors=True)
    for name in ("model.safetensors", "trainer_state.json"):
        (tmp_path / "resumed" / name).unlink()
    code, out, err = run_main(capsys, *arguments, "--output-dir", tmp_path / "resumed", "--resume")
    assert code == 0 and "at step 4" in out, err
    assert abs(losses(tmp_path / "resumed")[8] - expected[8]) <= 1e-5


def test_a_step_that_cannot_be_recorded_trains_on_unrecorded_and_says_why(corpus, monkeypatch):
    """If recording fails (an operation a CUDA graph refuses), the run goes on with the same step unrecorded and
    `failure` names the error. The recording needs CUDA, so torch.cuda's streams are stood in for here and the
    recording itself fails as CUDA refuses one: the warm-up, the failed recording and the steps after it give the
    unrecorded step's losses."""
    class Stream:
        def wait_stream(self, other):
            pass

    refusal = "CUDA error: operation not permitted when stream is capturing"
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", object)
    monkeypatch.setattr(torch.cuda, "graph", lambda graph: (_ for _ in ()).throw(RuntimeError(refusal + "\nmore")))
    batches, model = stream(corpus), tiny_model(corpus[2])
    expected, expected_states, _ = graphed_steps(copy.deepcopy(model), batches, 5, record=False)
    found, found_states, graphed = graphed_steps(copy.deepcopy(model), batches, 5, record=True)
    assert graphed.graph is None and graphed.failure == f"RuntimeError: {refusal}"
    assert max(abs(a - b) for a, b in zip(found, expected)) <= 1e-5, (found, expected)
    for a, b in zip(found_states, expected_states):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)


def test_no_cuda_graph_trains_through_the_usual_loop(tmp_path, capsys, monkeypatch):
    """--no-cuda-graph: where the step could be recorded (stood in for here: the CPU's reason taken away), the run
    still goes through the usual loop."""
    from modeling import pretrain
    from test_pretraining import TRAIN, run_main

    monkeypatch.setattr(pretrain, "graph_unsupported_reason", lambda *args: None)
    made = []
    monkeypatch.setattr(pretrain, "GraphedTrainingStep", lambda *a, **k: made.append(1))
    arguments = ["--preset", "tiny", "--train-file", TRAIN / "data.txt", "--negative-samples", 0, "--optimizer",
                 "adamw", "--max-steps", 2, "--save-steps", 0, "--output-dir", tmp_path / "run"]
    code, _, err = run_main(capsys, *arguments, "--no-cuda-graph")
    assert code == 0 and made == [], err
    code, _, err = run_main(capsys, *arguments, "--overwrite-output-dir")
    assert code == 0 and made == [1], err  # without it, made (the stand-in gives None: the usual loop trains again)
