"""A whole pretraining step (forward, backward, gradient clipping, AdamW) recorded once as a CUDA graph and replayed.

Stream batching gives every step the same shapes, so on one GPU the step is recorded after two warm-up steps and
then replayed: one launch for the few thousand kernels that Python would otherwise launch one by one, and no host
read inside the step, so that the host prepares the next batch while the GPU computes. `pretrain.py` uses it where
`graph_unsupported_reason` finds nothing against it, and says so. The model runs in `static_shapes()` (see
`hf_elmo/static_shapes.py`): the same numbers to float32 rounding as the usual step, on any device.

What replaying needs, and how it is met:
* fixed buffers: each batch is copied into the recorded input tensors (through pinned host memory, so that the copy
  does not wait for the GPU), the LSTM state is carried in two recorded tensors that the step itself updates, the
  gradients live in the graph's memory and are overwritten by each replay;
* nothing fixed at recording time that must change: the learning rate is a tensor on the GPU (`assign_learning_rates`
  fills it), AdamW runs with `capturable=True`, dropout draws from the CUDA generator, which advances per replay;
* no host reads: the model's checks of the input values run here, on the host, before the batch is copied in
  (`ElmoForPreTraining.check_inputs`).

`record=False` runs the same code on the same buffers without recording (any device): the tests compare it with the
usual step on CPU.
"""

import torch

from hf_elmo.static_shapes import static_shapes

# Eager steps before the recording: library handles, workspaces and the optimizer's state are made in them.
WARMUP_STEPS = 2


def graph_unsupported_reason(device: torch.device, num_processes: int, accumulation: int, stateful: bool,
                             optimizer: str, negative_samples: int, vocab_size: int,
                             mixed_precision: str) -> str | None:
    """Why a run's steps cannot be recorded as one CUDA graph, or None where they can."""
    reasons = [
        (device.type != "cuda", "it runs on the CPU"),
        (num_processes > 1, "it runs in several processes"),
        (accumulation > 1, "it accumulates gradients over several batches"),
        (not stateful, "sentence batches change shape from step to step"),
        (optimizer != "adamw", "Adagrad has no recordable (capturable) implementation in torch"),
        (0 < negative_samples < vocab_size, "the sampled softmax draws its negatives on the host"),
        (mixed_precision == "fp16", "fp16's loss scaling reads the gradients' finiteness on the host"),
    ]
    return next((reason for found, reason in reasons if found), None)


def is_full(batch: dict[str, torch.Tensor]) -> bool:
    """Every position of the batch a word with a target (stream windows always are: nothing needs masking)."""
    words = [(batch[name] > 0).any(-1).all() for name in ("input_ids", "backward_input_ids") if name in batch]
    targets = [(batch[name] != -100).all() for name in ("labels", "backward_labels")]
    mask = batch.get("attention_mask")
    return all(bool(found) for found in [*words, *targets]) and (mask is None or bool((mask == 1).all()))


class GraphedTrainingStep:
    """`step(batch, states)` trains `model` on one batch of CPU tensors as the usual loop does (forward in
    `autocast_dtype` if given, backward, gradient norm clipped at `max_grad_norm` if set, `optimizer.step()`), and
    returns the losses [3] (loss, forward, backward; float64, on the model's device), the gradient norm before
    clipping (or None) and the final LSTM states, which the next step takes as `states` (None: start from zero).

    The returned tensors are the recording's own: read them before the next step. The parameters' gradients stay in
    place after a step (the recording's own, too): a step outside it must set them to None first. With `record`,
    `optimizer` must be a torch AdamW on CUDA: it is switched to `capturable`, with a tensor learning rate
    (`assign_learning_rates` fills it); `record=False` (any device) runs the same step unrecorded."""

    def __init__(self, model, optimizer: torch.optim.Optimizer, max_grad_norm: float | None,
                 autocast_dtype: torch.dtype | None, record: bool = True):
        self.model, self.optimizer, self.max_grad_norm = model, optimizer, max_grad_norm
        self.autocast_dtype, self.record = autocast_dtype, record
        self.device = next(model.parameters()).device
        if record:
            for group in optimizer.param_groups:
                group["capturable"] = True
                group["lr"] = torch.tensor(float(group["lr"]), dtype=torch.float32, device=self.device)
        self.parameters = [p for group in optimizer.param_groups for p in group["params"]]
        self.inputs = self.states = self.results = self.full = None
        self.graph, self.steps, self.failure = None, 0, None
        self._staging, self._copied, self._turn = None, None, 0

    def fits(self, batch: dict[str, torch.Tensor]) -> bool:
        """Whether `batch` has the shapes (and names) of the recorded inputs, and is full if the first was (the first
        batch fixes both; see `is_full`)."""
        return self.inputs is None or (batch.keys() == self.inputs.keys()
                                       and all(batch[k].shape == self.inputs[k].shape for k in batch)
                                       and (not self.full or is_full(batch)))

    def step(self, batch: dict[str, torch.Tensor], states: tuple[torch.Tensor, torch.Tensor] | None):
        self.model.check_inputs(**batch)
        if self.inputs is None:
            self._allocate(batch)
        self._copy_in(batch)
        if states is None:
            for state in self.states:
                state.zero_()
        elif states[0] is not self.states[0]:  # (a step outside the recording gave them)
            for mine, given in zip(self.states, states):
                mine.copy_(given)
        if not self.record or self.steps < WARMUP_STEPS or self.failure is not None:
            if self.record and self.failure is None:  # warm-up, as CUDA graphs require, on a side stream
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    self.results = self._body()
                torch.cuda.current_stream().wait_stream(side)
            else:
                self.results = self._body()
        elif self.graph is None:
            self._record()
        else:
            self.graph.replay()
        self.steps += 1
        losses, grad_norm = self.results
        return losses, grad_norm, self.states

    def _allocate(self, batch: dict[str, torch.Tensor]) -> None:
        self.full = is_full(batch)
        self.inputs = {name: torch.empty_like(tensor, device=self.device) for name, tensor in batch.items()}
        config = self.model.config
        rows, layers = batch["input_ids"].shape[0], config.num_lstm_layers
        self.states = (torch.zeros(layers, rows, 2 * config.projection_dim, device=self.device),
                       torch.zeros(layers, rows, 2 * config.cell_size, device=self.device))
        if self.device.type == "cuda":  # two sets of pinned buffers: one is filled while the other's copy is in flight
            self._staging = [{name: torch.empty_like(t).pin_memory() for name, t in batch.items()} for _ in range(2)]
            self._copied = [None, None]

    def _copy_in(self, batch: dict[str, torch.Tensor]) -> None:
        if self._staging is None:
            for name, tensor in batch.items():
                self.inputs[name].copy_(tensor)
            return
        turn = self._turn
        if self._copied[turn] is not None:
            self._copied[turn].synchronize()  # the copy out of this staging set two steps ago has finished
        for name, tensor in batch.items():
            self._staging[turn][name].copy_(tensor)
            self.inputs[name].copy_(self._staging[turn][name], non_blocking=True)
        self._copied[turn] = torch.cuda.Event()
        self._copied[turn].record()
        self._turn = 1 - turn

    def _body(self):
        """The step on the recorded buffers; every tensor it reads or writes outside its own stays in place."""
        # The model's own forward, not the one Accelerate wraps in an autocast that caches casts (which a recording
        # must not: torch's note on CUDA graphs and autocast).
        forward = type(self.model).forward.__get__(self.model)
        # (Recorded, the gradients are then allocated in the graph's memory, and each replay writes them anew.)
        self.optimizer.zero_grad(set_to_none=True)
        autocast = torch.autocast(self.device.type, dtype=self.autocast_dtype or torch.float32,
                                  enabled=self.autocast_dtype is not None, cache_enabled=False)
        with static_shapes(full=self.full), autocast:
            output = forward(**self.inputs, initial_states=self.states)
        output.loss.backward()
        grad_norm = None
        if self.max_grad_norm:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.parameters, self.max_grad_norm, foreach=True)
        self.optimizer.step()
        with torch.no_grad():
            for state, final in zip(self.states, output.final_states):
                state.copy_(final)
        losses = torch.stack([output.loss, output.forward_loss, output.backward_loss]).detach().double()
        return losses, grad_norm

    def _record(self) -> None:
        """Record the step (the recording does not run it), then replay it for this batch. If recording fails, the
        run goes on without a graph, and `failure` says why."""
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                results = self._body()
        except RuntimeError as error:
            self.failure = f"{type(error).__name__}: {error}".splitlines()[0]
            torch.cuda.synchronize()
            self.results = self._body()
            return
        self.graph, self.results = graph, results
        self.graph.replay()


def assign_learning_rates(optimizer: torch.optim.Optimizer, rates: list[float]) -> None:
    """Each parameter group's learning rate; a tensor rate (a recorded step's) is filled in place."""
    for group, rate in zip(optimizer.param_groups, rates):
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(rate)
        else:
            group["lr"] = rate
