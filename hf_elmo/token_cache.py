"""A bounded cache of context-free word vectors (char CNN -> highway -> projection), keyed by character ids.

The character encoder gives every occurrence of a word the same vector, so inference computes each distinct
word of a batch once (exact) and keeps the most recently used `max_words` vectors for later batches. The
cache serves inference only (no autograd, eval mode) and empties itself when any encoder weight changes:
it remembers each parameter's storage and version counter, which every in-place update (optimizer steps,
`load_state_dict`, `.to()`) changes. Writes through `.data` bypass that counter: call `clear()` after them.
"""

from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import torch

# 20,000 words cover most running text; at P = 512 they take 41 MB.
DEFAULT_MAX_WORDS = 20_000


class ElmoTokenCache:
    """Least-recently-used store of word vectors [P], at most `max_words` of them (0 turns caching off)."""

    def __init__(self, max_words: int = DEFAULT_MAX_WORDS):
        self.max_words = max_words
        self.hits = 0
        self.misses = 0
        self._slots: OrderedDict[bytes, int] = OrderedDict()  # word key -> row of _vectors, oldest first
        self._vectors: torch.Tensor | None = None  # [capacity, P]
        self._free: list[int] = []  # rows of _vectors that hold no word
        self._fingerprint: tuple | None = None

    def __len__(self) -> int:
        return len(self._slots)

    def clear(self) -> None:
        self._slots.clear()
        self._free.clear()
        self._vectors = None
        self._fingerprint = None

    def encode(
        self,
        encode: Callable[[torch.Tensor], torch.Tensor],
        char_ids: torch.Tensor,
        parameters: list[torch.Tensor],
        use_cache: bool = True,
    ) -> torch.Tensor:
        """[N, K] character ids -> [N, P], calling `encode` once on the distinct words (only on those not in
        the cache when `use_cache`)."""
        if char_ids.shape[0] == 0:
            return encode(char_ids)
        # Distinct words; ids are < 262, so 16 bits hold them and a row's bytes are its key.
        rows = np.ascontiguousarray(char_ids.detach().cpu().numpy().astype(np.uint16))
        keys_view = rows.view(np.dtype((np.void, rows.shape[1] * rows.itemsize))).ravel()
        unique, first, inverse = np.unique(keys_view, return_index=True, return_inverse=True)
        inverse = torch.from_numpy(inverse.reshape(-1)).to(char_ids.device)

        if not use_cache or len(unique) > self.max_words:  # (the batch alone would overflow the cache)
            self.misses += len(unique) if use_cache else 0
            vectors = encode(char_ids[torch.from_numpy(first).to(char_ids.device)])
            return vectors[inverse]
        fingerprint = tuple((p.data_ptr(), p._version, p.dtype, p.device) for p in parameters)
        if fingerprint != self._fingerprint:
            self.clear()
            self._fingerprint = fingerprint
        keys = [key.tobytes() for key in unique]
        missing = [i for i, key in enumerate(keys) if key not in self._slots]
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        for key in keys:
            if key in self._slots:
                self._slots.move_to_end(key)  # most recently used last, so eviction spares this batch
        if missing:
            new_vectors = encode(char_ids[torch.from_numpy(first[missing]).to(char_ids.device)])
            self._store([keys[i] for i in missing], new_vectors)
        slots = torch.tensor([self._slots[key] for key in keys], device=self._vectors.device)
        return self._vectors.index_select(0, slots)[inverse]

    def _store(self, keys: list[bytes], vectors: torch.Tensor) -> None:
        """Put `vectors` [n, P] under `keys`, evicting the least recently used words beyond `max_words`."""
        for _ in range(len(self._slots) + len(keys) - self.max_words):
            self._free.append(self._slots.popitem(last=False)[1])
        if self._vectors is None:
            self._vectors = vectors.new_empty(0, vectors.shape[1])
        if len(self._free) < len(keys):  # grow geometrically, never past max_words rows
            capacity = self._vectors.shape[0]
            new_capacity = min(self.max_words, max(2 * capacity, capacity + len(keys) - len(self._free)))
            grown = vectors.new_empty(new_capacity, vectors.shape[1])
            grown[:capacity] = self._vectors
            self._vectors = grown
            self._free.extend(range(capacity, new_capacity))
        slots = [self._free.pop() for _ in keys]
        self._vectors[torch.tensor(slots, device=self._vectors.device)] = vectors
        self._slots.update(zip(keys, slots))
