"""A mode in which the model computes only what a CUDA graph can record: `with static_shapes(): ...`.

A CUDA graph records the kernels that a block of code launches and replays them on the same buffers; the code may
therefore neither read a value back from the device (a host read waits for the GPU, which a recording cannot do)
nor choose a shape from data (the recorded kernels are fixed). The usual training path does both for speed: it
encodes each distinct word of a batch once (`torch.unique`, whose result's size the host must read), cuts the
characters after the longest word, checks the inputs' values, and skips the LSTM's masking where every row is full.
Inside `static_shapes()` it does none of that: every position is encoded, the LSTM masks every step, and the input
values are the caller's to check (`modeling/graphed_step.py` checks each batch on the host before copying it in).
The results are the same to float32 rounding. Outside CUDA the same computation runs eagerly, which is how the
tests hold it to the usual path.
"""

import contextlib
import threading

# Per thread: a recording in one thread (a training step) leaves the model as it is in the others (a server's
# inference, say), which would otherwise lose their caches and mask every step while the recording runs.
_state = threading.local()


@contextlib.contextmanager
def static_shapes(full: bool = False):
    """Within the block, in this thread, the model's shapes follow from its inputs' shapes alone, and it reads no
    device value. `full`: the caller has checked that every position of the batch is a word with a target (stream
    windows always are), so that nothing needs masking."""
    outer = (getattr(_state, "depth", 0), getattr(_state, "full", False))
    _state.depth, _state.full = outer[0] + 1, full
    try:
        yield
    finally:
        _state.depth, _state.full = outer


def has_static_shapes() -> bool:
    return getattr(_state, "depth", 0) > 0


def static_batch_is_full() -> bool:
    """In `static_shapes(full=True)`: every position is a word with a target."""
    return has_static_shapes() and _state.full
