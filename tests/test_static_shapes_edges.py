"""Behaviour of hf_elmo/static_shapes.py that no other test held (found by mutation testing)."""

import pytest

from hf_elmo.static_shapes import has_static_shapes, static_batch_is_full, static_shapes


def test_an_error_inside_the_block_leaves_the_mode_as_it_was_before():
    """A step that fails while recording (an error raised inside `static_shapes()`, not caught there) leaves the
    thread as it was: off after an outermost block, the outer block's own mode after a nested one. Left on, every
    later call of the model in the thread would encode every position and mask every step, without its caches."""
    with pytest.raises(RuntimeError, match="^recording failed$"):
        with static_shapes(full=True):
            raise RuntimeError("recording failed")
    assert not has_static_shapes() and not static_batch_is_full()
    with static_shapes(full=True):
        with pytest.raises(RuntimeError):
            with static_shapes(full=False):
                assert has_static_shapes() and not static_batch_is_full()
                raise RuntimeError("recording failed")
        assert has_static_shapes() and static_batch_is_full()
    assert not has_static_shapes() and not static_batch_is_full()
