"""modeling/graphed_step.py, the parts that run on the CPU: what mutations showed no test held there (the CUDA test
alone held the optimizer's set-up and the learning rate filled in place). A batch is full only with every position a
word, every target set and no masked position; a batch with other names does not fit the recording; a recording
step's optimizer gets a capturable AdamW with a tensor learning rate, which assign_learning_rates fills in place; the
step is recorded once, after the warm-up steps on a side stream."""

import contextlib

import torch

from modeling.graphed_step import WARMUP_STEPS, GraphedTrainingStep, assign_learning_rates, is_full

from test_graphed_step import corpus, graphed_steps, stream, tiny_model  # noqa: F401 (corpus: a fixture)


def test_a_batch_is_full_only_with_every_position_a_word_and_unmasked(corpus):  # noqa: F811
    batch = stream(corpus).batch(0)
    assert is_full(batch)
    assert is_full({**batch, "attention_mask": torch.ones(batch["labels"].shape, dtype=torch.long)})
    mask = torch.ones(batch["labels"].shape, dtype=torch.long)
    mask[1, -1] = 0
    assert not is_full({**batch, "attention_mask": mask})
    for name in ("input_ids", "backward_input_ids"):
        padded = {key: value.clone() for key, value in batch.items()}
        padded[name][2, 3] = 0  # (a padding position: no character ids), its target still set
        assert not is_full(padded), name


def test_a_batch_with_other_names_does_not_fit_the_recording(corpus):  # noqa: F811
    """The first batch fixes the names as well as the shapes: one without backward_labels (the others of the same
    shapes) does not fit."""
    model = tiny_model(corpus[2])
    graphed = GraphedTrainingStep(model, torch.optim.AdamW(model.parameters()), 5.0, None, record=False)
    batches = stream(corpus)
    graphed.step(batches.batch(0), None)
    assert graphed.fits(batches.batch(1))
    batch = batches.batch(1)
    del batch["backward_labels"]
    assert not graphed.fits(batch)


def test_a_recording_step_makes_the_learning_rate_a_tensor_that_is_filled_in_place(corpus):  # noqa: F811
    """record=True (its set-up runs anywhere): every parameter group capturable, its learning rate a float32 tensor
    on the model's device with the group's value; assign_learning_rates fills that tensor (the recording reads it),
    and a float learning rate is replaced."""
    model = tiny_model(corpus[2])
    optimizer = torch.optim.AdamW([{"params": list(model.parameters())[:2], "lr": 0.5},
                                   {"params": list(model.parameters())[2:], "lr": 0.25}])
    GraphedTrainingStep(model, optimizer, 5.0, None, record=True)
    rates = [group["lr"] for group in optimizer.param_groups]
    for group, rate, value in zip(optimizer.param_groups, rates, (0.5, 0.25)):
        assert group["capturable"] is True
        assert isinstance(rate, torch.Tensor) and rate.dtype == torch.float32 and rate.item() == value
        assert rate.device == next(model.parameters()).device
    assign_learning_rates(optimizer, [0.125, 0.0625])
    assert [group["lr"] for group in optimizer.param_groups] == rates  # (the same tensors)
    assert [rate.item() for rate in rates] == [0.125, 0.0625]
    plain = torch.optim.AdamW(model.parameters(), lr=0.5)
    assign_learning_rates(plain, [0.75])
    assert plain.param_groups[0]["lr"] == 0.75


def test_the_step_is_recorded_once_after_the_warm_up_steps_on_a_side_stream(corpus, monkeypatch):  # noqa: F811
    """Recorded after WARMUP_STEPS eager steps on a side stream (the optimizer's state, library handles and
    workspaces are made there, as CUDA graphs require), once, then only replayed. The recording needs CUDA:
    torch.cuda's streams and graph are stood in for (as in test_graphed_step.py's test of a step that cannot be
    recorded) and what the step does with them is recorded."""
    events = []

    class Stream:
        def wait_stream(self, other):
            pass

    @contextlib.contextmanager
    def on_stream(stream):
        events.append("side stream")
        yield

    class Graph:
        def replay(self):
            events.append("replay")

    @contextlib.contextmanager
    def recording(graph):
        events.append("record")
        yield

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: Stream())
    monkeypatch.setattr(torch.cuda, "stream", on_stream)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", recording)
    _, _, graphed = graphed_steps(tiny_model(corpus[2]), stream(corpus), 5, record=True)
    assert WARMUP_STEPS == 2
    # Steps 1-2 warm up on the side stream; step 3 is recorded, then replayed for its batch; steps 4-5 replay.
    assert events == ["side stream", "side stream", "record", "replay", "replay", "replay"], events
    assert graphed.failure is None and isinstance(graphed.graph, Graph) and graphed.steps == 5
