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

_depth = 0
_full = False


@contextlib.contextmanager
def static_shapes(full: bool = False):
    """Within the block, the model's shapes follow from its inputs' shapes alone, and it reads no device value.
    `full`: the caller has checked that every position of the batch is a word with a target (stream windows always
    are), so that nothing needs masking."""
    global _depth, _full
    outer = _full
    _depth, _full = _depth + 1, full
    try:
        yield
    finally:
        _depth, _full = _depth - 1, outer


def has_static_shapes() -> bool:
    return _depth > 0


def static_batch_is_full() -> bool:
    """In `static_shapes(full=True)`: every position is a word with a target."""
    return _depth > 0 and _full
