"""ElmoTokenCache on its own: least-recently-used results of at most `max_words` rows, in at most as much memory,
each row under one key."""

import copy
import io
from collections.abc import Callable

import numpy as np
import torch
from torch.func import functional_call

from hf_elmo import ElmoConfig, ElmoModel, ElmoTokenizer
from hf_elmo.token_cache import ElmoTokenCache


def cache_and_computed_rows(max_words: int) -> tuple[ElmoTokenCache, list[set[int]], Callable]:
    """A cache, the last id of each row computed, by call, and the encoder that notes them."""
    cache, computed = ElmoTokenCache(max_words=max_words), []

    def encode(rows: torch.Tensor) -> torch.Tensor:
        computed.append(set(rows[:, -1].tolist()))
        return rows.double() * 10

    return cache, computed, encode


def test_the_store_holds_the_last_words_in_at_most_max_words_rows():
    """Batches of new rows and rows seen before: every result is the encoder's, each row not held is computed once,
    and the store grows (geometrically) to `max_words` rows and no further, reusing the rows of evicted words."""
    cache, computed, encode = cache_and_computed_rows(5)
    for start in range(0, 24, 3):
        rows = torch.tensor([[1, start], [1, start + 1], [1, start + 2], [1, start + 1], [1, max(start - 1, 0)]])
        assert torch.equal(cache.encode(encode, rows, []), rows.double() * 10)
        assert cache._vectors.shape[0] <= 5 and len(cache) <= 5
    assert computed == [set(range(start, start + 3)) for start in range(0, 24, 3)]
    assert cache._vectors.shape[0] == len(cache) == 5


def test_a_lower_limit_shrinks_the_store_and_zero_empties_it():
    """max_words lowered: at the next call the least recently used words beyond it go and the store shrinks to the
    rest, whose results are still served (not computed again); 0 (caching off) empties it. Both kept every row."""
    cache, computed, encode = cache_and_computed_rows(50)
    rows = torch.tensor([[1, word] for word in range(40)])
    cache.encode(encode, rows, [])
    cache.encode(encode, rows[30:], [])  # (words 30-39: the most recently used)
    cache.max_words = 10
    assert torch.equal(cache.encode(encode, rows[30:], []), rows[30:].double() * 10)
    assert len(cache) == 10 and cache._vectors.shape[0] == 10
    assert computed == [set(range(40))]  # (the ten kept were served)
    assert torch.equal(cache.encode(encode, rows[:2], []), rows[:2].double() * 10)  # (evicted: computed anew)
    assert computed[-1] == {0, 1} and len(cache) == 10 and cache._vectors.shape[0] == 10
    cache.max_words = 0
    assert torch.equal(cache.encode(encode, rows[:3], []), rows[:3].double() * 10)
    assert len(cache) == 0 and cache._vectors is None


def test_a_row_has_one_key_whatever_else_is_in_its_batch():
    """A word's row (character ids and, with word input, its word id, which can pass 65,535) is found again in a
    later batch that holds a larger id: nothing is computed or kept twice."""
    cache, computed, encode = cache_and_computed_rows(10)
    small, large = [259, 66, 260, 7], [259, 67, 260, 70_000]
    cache.encode(encode, torch.tensor([small]), [])
    cache.encode(encode, torch.tensor([small, large]), [])
    cache.encode(encode, torch.tensor([small]), [])
    assert computed == [{7}, {70_000}] and len(cache) == 2 and cache.hits == 2


def test_a_store_made_under_inference_mode_takes_new_words_outside_it():
    """A full cache filled under `torch.inference_mode` (ElmoEmbedder's) takes new words under `torch.no_grad`
    (the README's way of calling the model), and goes on giving the encoder's results, with every row in use."""
    cache, computed, encode = cache_and_computed_rows(3)
    with torch.inference_mode():
        cache.encode(encode, torch.tensor([[1, 0], [1, 1], [1, 2]]), [])
    assert cache._vectors.is_inference()
    with torch.no_grad():
        for rows in ([[1, 3], [1, 0]], [[1, 4]], [[1, 5], [1, 6], [1, 4]]):
            rows = torch.tensor(rows)
            assert torch.equal(cache.encode(encode, rows, []), rows.double() * 10)
    with torch.inference_mode():
        assert torch.equal(cache.encode(encode, torch.tensor([[1, 7]]), []), torch.tensor([[10.0, 70.0]], dtype=torch.double))
    assert computed == [{0, 1, 2}, {3}, {4}, {5, 6}, {7}]
    assert len(cache) == cache._vectors.shape[0] == 3


def test_weights_made_under_inference_mode_are_never_taken_as_unchanged():
    """A weight made under `torch.inference_mode` has no version counter: the cache neither fails on it nor keeps
    results across an update in place that nothing can see; a model built there runs, and sees its new weights."""
    cache, computed, encode = cache_and_computed_rows(10)
    rows = torch.tensor([[1, 2]])
    with torch.inference_mode():
        weight = torch.ones(1, dtype=torch.double)
        assert torch.equal(cache.encode(lambda rows: encode(rows) * weight, rows, [weight]), rows.double() * 10)
        weight.mul_(3)
        assert torch.equal(cache.encode(lambda rows: encode(rows) * weight, rows, [weight]), rows.double() * 30)
        model = ElmoModel(ElmoConfig(char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 4]], num_highway_layers=1,
                                     cell_size=16, projection_dim=8)).eval()
        batch = ElmoTokenizer()(["a b a", "c"], padding=True, return_tensors="pt")
        first = model(**batch).last_hidden_state
        for parameter in model.parameters():
            parameter.mul_(0.5)
        second = model(**batch).last_hidden_state
    model.char_encoder.token_cache.max_words = 0
    model.layers[0].input_gate_cache.max_words = 0
    with torch.no_grad():
        assert torch.equal(model(**batch).last_hidden_state, second) and not torch.equal(first, second)


def test_a_new_weight_at_the_address_of_a_freed_one_is_another_weight():
    """Allocators hand a freed block out again at once (CUDA's caching allocator above all), so a new tensor may have
    the storage and the version counter (0) of the weight before it, and other values: a weight that
    `torch.func.functional_call` is given afresh, or one that a parametrization computes at each forward (PEFT's
    LoRA over the biLSTM's parameters). The caches and the fast paths' copies of the weights take it as a new one.
    (Two tensors over one NumPy buffer make the address the same here, whatever the allocator does.)"""
    cache, computed, encode = cache_and_computed_rows(10)
    rows, buffer = torch.tensor([[1, 2]]), np.ones(1)
    weight = torch.from_numpy(buffer)
    assert torch.equal(cache.encode(lambda rows: encode(rows) * weight, rows, [weight]), rows.double() * 10)
    del weight
    buffer[0] = 3
    weight = torch.from_numpy(buffer)
    assert torch.equal(cache.encode(lambda rows: encode(rows) * weight, rows, [weight]), rows.double() * 30)
    assert computed == [{2}, {2}]

    config = ElmoConfig(char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 4]], num_highway_layers=1,
                        cell_size=16, projection_dim=6)  # (8 filters: a char projection)
    torch.manual_seed(0)
    model = ElmoModel(config).eval()
    batch = ElmoTokenizer()(["a b a", "c b"], padding=True, return_tensors="pt")
    names = ("char_encoder.projection.weight", "layers.0.input_weight", "layers.1.recurrent_weight")
    parameters = dict(model.named_parameters())
    buffers = {name: parameters[name].detach().numpy().copy() for name in names}
    for scale in (1.0, 0.5, 2.0):
        for name in names:
            buffers[name] *= scale
        expected = ElmoModel(config).eval()
        expected.load_state_dict({**model.state_dict(), **{name: torch.from_numpy(b) for name, b in buffers.items()}})
        with torch.no_grad():
            given = {name: torch.from_numpy(b) for name, b in buffers.items()}
            output = functional_call(model, given, kwargs=dict(batch)).hidden_states
            for layer, expected_layer in zip(output, expected(**batch).hidden_states):
                torch.testing.assert_close(layer, expected_layer, rtol=1e-6, atol=1e-6)


def test_a_model_pickles_and_copies_after_inference_with_empty_caches():
    """After a forward has filled the caches, `torch.save` of the whole model (pickle) and `copy.deepcopy` work; the
    copies' caches start empty (their results came from other tensors), and the copies give the model's outputs, and
    a copy whose weights then change gives the new weights' outputs."""
    torch.manual_seed(0)
    model = ElmoModel(ElmoConfig(char_embedding_dim=4, char_cnn_filters=[[1, 4], [2, 4]], num_highway_layers=1,
                                 cell_size=16, projection_dim=6)).eval()
    batch = ElmoTokenizer()(["a b a", "c b"], padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = model(**batch).last_hidden_state
    assert len(model.char_encoder.token_cache) > 0 and len(model.layers[0].input_gate_cache) > 0
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    for copied in (torch.load(buffer, weights_only=False), copy.deepcopy(model)):
        caches = (copied.char_encoder.token_cache, copied.layers[0].input_gate_cache)
        assert all(len(cache) == 0 and cache._vectors is None and cache._fingerprint is None for cache in caches)
        with torch.no_grad():
            assert torch.equal(copied(**batch).last_hidden_state, expected)
            for parameter in copied.parameters():
                parameter.mul_(0.5)
            changed = copied(**batch).last_hidden_state
        copied.clear_caches()
        with torch.no_grad():
            assert torch.equal(copied(**batch).last_hidden_state, changed) and not torch.equal(changed, expected)
