"""Behaviour of hf_elmo/token_cache.py that no other test held (found by mutation testing)."""

import torch

from test_token_cache import cache_and_computed_rows

from hf_elmo import ElmoConfig, ElmoModel, ElmoTokenizer


def test_a_limit_lowered_then_raised_never_gives_a_held_words_row_to_a_new_word():
    """The store grows geometrically, keeping spare rows; a lower `max_words` shrinks it to the words that remain,
    whose rows are renumbered, so the spare rows it had are no longer free. Raised again, the next new word gets a
    new row, never the row of a word still held (whose result it would overwrite)."""
    cache, computed, encode = cache_and_computed_rows(10)
    rows = torch.tensor([[1, word] for word in range(6)])
    cache.encode(encode, rows[:3], [])
    cache.encode(encode, rows[3:5], [])  # (the store grows to 6 rows, one of them spare)
    assert cache._vectors.shape[0] == 6 and len(cache) == 5
    cache.max_words = 4
    assert torch.equal(cache.encode(encode, rows[1:5], []), rows[1:5].double() * 10)  # (word 0 goes)
    assert len(cache) == 4 and cache._vectors.shape[0] == 4
    cache.max_words = 5
    assert torch.equal(cache.encode(encode, rows[5:], []), rows[5:].double() * 10)
    assert torch.equal(cache.encode(encode, rows[1:], []), rows[1:].double() * 10)  # every held word its own
    assert computed == [{0, 1, 2}, {3, 4}, {5}] and len(cache) == 5


def test_a_fused_step_before_the_caches_first_saw_the_weights_is_followed_by_steps_that_are_seen():
    """The step hook keeps, per optimizer, which of its parameters are watched. An optimizer that stepped before the
    model's caches first watched its weights (while another model's cache already watched its own, so the hook
    counts) must count the steps after: its list is worked out again once more parameters are watched. Otherwise a
    fused step (torch's fused AdamW, Trainer's default, advances no version counter) went unseen, and the cache kept
    serving the vectors of the weights from before the step."""
    small = dict(char_embedding_dim=4, char_cnn_filters=[[1, 8], [2, 8]], num_highway_layers=1, cell_size=32,
                 projection_dim=8)
    batch = ElmoTokenizer()([["a", "test"], ["another", "test", "here"]], is_split_into_words=True, padding=True,
                            return_tensors="pt")
    torch.manual_seed(0)
    other, model = ElmoModel(ElmoConfig(**small)).eval(), ElmoModel(ElmoConfig(**small)).eval()
    with torch.no_grad():
        other(**batch)  # (another model's weights watched: the hook counts from now on)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, fused=True)

    def step():  # (in evaluation mode, as from_pretrained leaves a model: a change of mode empties the caches)
        optimizer.zero_grad()
        model(**batch).last_hidden_state.pow(2).mean().backward()
        optimizer.step()

    step()  # (before the model's caches watch its weights)
    with torch.no_grad():
        before = model(**batch).last_hidden_state  # fills the caches
    versions = [parameter._version for parameter in model.parameters()]
    step()
    assert [parameter._version for parameter in model.parameters()] == versions  # (fused: what makes the case)
    with torch.no_grad():
        after = model(**batch).last_hidden_state
        model.clear_caches()
        expected = model(**batch).last_hidden_state
    assert (before - expected).abs().max() > 1e-3
    torch.testing.assert_close(after, expected, rtol=0, atol=1e-6)
