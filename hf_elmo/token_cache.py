"""A bounded cache of what inference computes from a word alone, keyed by the word's input row.

The character encoder gives every occurrence of a word the same vector (char CNN -> highway -> projection),
keyed by its character ids; the first biLSTM layer, whose inputs are those vectors, gives it the same input
half of the gates, keyed by the vector. So inference computes each distinct row of a batch once (exact) and
keeps the results of the most recently used `max_words` rows for later batches. A cache serves inference only
(no autograd, eval mode) and empties itself when a weight it depends on changes: it remembers each parameter (the
tensor object itself, since another tensor is another weight), its storage, its version counter, which every
in-place update (`load_state_dict`, `.to()`, most optimizer steps) advances, and the number of optimizer steps taken
on it, for the fused steps (torch's fused AdamW, Trainer's default optimizer) that write without advancing the
counter. Writes through `.data` bypass both: call the model's `weights_changed()` after them (which also drops the
fast paths' copies of the weights). A weight made under `torch.inference_mode` has no version counter: nothing
computed from it is kept from one call to the next.
"""

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import torch
import torch.optim.optimizer as optimizer_module
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.weak import WeakIdKeyDictionary

# 20,000 words cover most running text; at P = 512 their vectors take 41 MB.
DEFAULT_MAX_WORDS = 20_000
# The first layer's input gates take 32 KB a word per 1,024 cells (128 KB at the original size): the cache of
# each layer is bounded to this many bytes, 1,024 words at the original size (the most frequent 1,000 words
# are about two thirds of English running text).
DEFAULT_GATE_CACHE_BYTES = 128 * 2**20


class _OptimizerSteps:
    """The optimizer steps (of any torch.optim optimizer) taken on each parameter that a fingerprint has seen: a fused
    step writes the weights without advancing their version counters, so the fingerprint counts steps as well.

    One per process, kept on `torch.optim.optimizer` and counted by one global step hook: every copy of this file
    (the Hub's remote code loads one per model folder and revision) finds and shares it, so its interface (`watch`,
    `count`, `len`, `in`) stays as it is; the attribute's name carries a version (`_v2`), to be raised with any change
    of behaviour, so that a copy with other behaviour keeps a counter of its own. A step costs one look at each of
    the optimizer's parameters (their identities, to notice a change of its groups: a group added or removed, a
    parameter added, removed or replaced in place) and one count per watched parameter: which of them are watched is
    worked out again only when the groups change or a parameter is watched for the first time.
    """

    def __init__(self):
        self.steps = WeakIdKeyDictionary()  # watched parameter -> optimizer steps taken on it since then
        self.watched = 0  # parameters watched so far: a change makes the optimizers' lists below stale
        self._per_optimizer = WeakIdKeyDictionary()  # optimizer -> (its groups' layout, watched, its watched params)
        self._watching = threading.Lock()  # (modules in several threads may watch at once: no count may be lost)

    def __len__(self) -> int:
        return len(self.steps)

    def __contains__(self, parameter) -> bool:
        return parameter in self.steps

    def watch(self, parameter: torch.Tensor) -> int:
        """The steps taken on `parameter` since it was first watched (0 the first time)."""
        steps = self.steps.get(parameter)
        if steps is None:
            with self._watching:
                steps = self.steps.get(parameter)
                if steps is None:
                    self.steps[parameter] = steps = 0
                    self.watched += 1
        return steps

    def count(self, optimizer: torch.optim.Optimizer, args, kwargs) -> None:
        """The post-step hook: one step more on each watched parameter of `optimizer`."""
        if not self.steps:
            return
        parameters = [parameter for group in optimizer.param_groups for parameter in group["params"]]
        layout = tuple(map(id, parameters))
        known = self._per_optimizer.get(optimizer)
        if known is None or known[0] != layout or known[1] != self.watched:
            watched = [parameter for parameter in parameters if parameter in self.steps]
            known = self._per_optimizer[optimizer] = (layout, self.watched, watched)
        for parameter in known[2]:
            self.steps[parameter] += 1


def _shared_optimizer_steps() -> _OptimizerSteps:
    """The process's one step counter, registered as an optimizer step hook by the first copy of this file."""
    shared = getattr(optimizer_module, "_hf_elmo_optimizer_steps_v2", None)
    if shared is None:
        shared = _OptimizerSteps()
        register_optimizer_step_post_hook(shared.count)
        optimizer_module._hf_elmo_optimizer_steps_v2 = shared
    return shared


_OPTIMIZER_STEPS = _shared_optimizer_steps()


def weights_fingerprint(parameters) -> tuple:
    """Changes whenever one of `parameters` is replaced, moved, modified in place by an operation that advances its
    version counter, or updated by an optimizer step (fused ones included)."""
    return tuple(None if p is None else _parameter_state(p) for p in parameters)


class _SameTensor:
    """Equal to another only for the very same tensor object while it lives. A new tensor at a freed one's address
    (which allocators hand out again at once: CUDA's caching allocator first of all) has the same storage and version
    0, yet other values: a weight that `torch.func.functional_call` is given afresh, say, or one that a
    parametrization computes at each call."""

    __slots__ = ("_ref", "_id")

    def __init__(self, tensor: torch.Tensor):
        self._ref, self._id = weakref.ref(tensor), id(tensor)

    def __eq__(self, other) -> bool:
        tensor = self._ref()
        return isinstance(other, _SameTensor) and tensor is not None and other._ref() is tensor

    def __hash__(self) -> int:
        return self._id


def _parameter_state(p: torch.Tensor) -> object:
    if p.is_inference():
        # Made under torch.inference_mode (a model built there), it has no version counter, so an update in place is
        # not seen: its state never equals a former one, and what depends on it is computed anew at every call.
        return object()
    return _SameTensor(p), p.data_ptr(), p._version, p.dtype, p.device, _OPTIMIZER_STEPS.watch(p)


class ElmoTokenCache:
    """Least-recently-used store of per-word results (rows [...]), at most `max_words` of them (0 turns caching
    off), keyed by the bytes of the word's input row."""

    def __init__(self, max_words: int = DEFAULT_MAX_WORDS):
        self.max_words = max_words
        self.hits = 0
        self.misses = 0
        self._slots: OrderedDict[bytes, int] = OrderedDict()  # row key -> row of _vectors, oldest first
        self._vectors: torch.Tensor | None = None  # [capacity, ...]
        self._free: list[int] = []  # rows of _vectors that hold no word
        self._fingerprint: tuple | None = None
        # False: the cache holds exactly the rows it holds now, and rows it lacks are computed for the call only, so
        # a call's results depend only on its own rows and those (hf-elmo embed relies on it; see embed_file.py).
        self.add_new = True

    def __len__(self) -> int:
        return len(self._slots)

    def __getstate__(self) -> dict:
        # A pickled or deep-copied model holds other tensors than those the results came from: its cache starts empty
        # (and the fingerprint's weak references could not be pickled).
        return dict(self.__dict__, _slots=OrderedDict(), _vectors=None, _free=[], _fingerprint=None)

    def clear(self) -> None:
        self._slots.clear()
        self._free.clear()
        self._vectors = None
        self._fingerprint = None

    def encode(
        self,
        encode: Callable[[torch.Tensor], torch.Tensor],
        rows: torch.Tensor,
        parameters: list[torch.Tensor],
        use_cache: bool = True,
    ) -> torch.Tensor:
        """[N, K] input rows -> [N, ...], calling `encode` once on the distinct rows (only on those not in the
        cache when `use_cache`)."""
        table, index = self.lookup(encode, rows, parameters, use_cache)
        return table.index_select(0, index)

    def lookup(
        self,
        encode: Callable[[torch.Tensor], torch.Tensor],
        rows: torch.Tensor,
        parameters: list[torch.Tensor],
        use_cache: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """As `encode`, without gathering: a table [M, ...] and, per input row, the index [N] of its result in
        the table (the cache's own store when `use_cache`, so valid until the next call)."""
        self._fit_limit()
        if rows.shape[0] == 0:
            return encode(rows), torch.zeros(0, dtype=torch.long, device=rows.device)
        # Distinct rows, by their bytes. Integer rows (character ids, and a word id with word input) as 32 bits, which
        # hold every id a model can read: a width that is the same for every batch, so that a row has one key
        # whatever else its batch holds (16 bits would hold character ids, but not a word id of a word.dic of more
        # than 65,536 words, which would key every row of its batch otherwise). Floating rows are keyed by their
        # raw bytes, which numpy can hold for every dtype (bfloat16 included).
        keys = rows.detach().cpu().contiguous()
        if keys.is_floating_point():
            keys = keys.view(torch.uint8).view(rows.shape[0], -1)
        keys_array = keys.numpy()
        if keys_array.itemsize > 4 and keys_array.min() >= 0 and keys_array.max() < 2**32:
            keys_array = keys_array.astype(np.uint32)
        keys_array = np.ascontiguousarray(keys_array)
        keys_view = keys_array.view(np.dtype((np.void, keys_array.shape[1] * keys_array.itemsize))).ravel()
        unique, first, inverse = np.unique(keys_view, return_index=True, return_inverse=True)
        inverse = torch.from_numpy(inverse.reshape(-1)).to(rows.device)

        if not use_cache or len(unique) > self.max_words:  # (the batch alone would overflow the cache)
            self.misses += len(unique) if use_cache else 0
            return encode(rows[torch.from_numpy(first).to(rows.device)]), inverse
        fingerprint = weights_fingerprint(parameters)
        if fingerprint != self._fingerprint:
            self.clear()
            self._fingerprint = fingerprint
        keys = [key.tobytes() for key in unique]
        missing = [i for i, key in enumerate(keys) if key not in self._slots]
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        if missing and not self.add_new:
            held = [i for i, key in enumerate(keys) if key in self._slots]
            new_vectors = encode(rows[torch.from_numpy(first[missing]).to(rows.device)])
            if held:
                held_slots = torch.tensor([self._slots[keys[i]] for i in held], device=self._vectors.device)
                new_vectors = torch.cat([self._vectors.index_select(0, held_slots), new_vectors])
            position = torch.empty(len(keys), dtype=torch.long)
            position[held + missing] = torch.arange(len(keys))
            return new_vectors, position.to(new_vectors.device)[inverse]
        for key in keys:
            if key in self._slots:
                self._slots.move_to_end(key)  # most recently used last, so eviction spares this batch
        if missing:
            new_vectors = encode(rows[torch.from_numpy(first[missing]).to(rows.device)])
            self._store([keys[i] for i in missing], new_vectors)
        slots = torch.tensor([self._slots[key] for key in keys], device=self._vectors.device)
        return self._vectors, slots[inverse]

    def _fit_limit(self) -> None:
        """After `max_words` was lowered (0: caching off): the least recently used words beyond it go, and the store
        shrinks to the words that remain (it kept its rows, up to 41 MB at P = 512, for as long as it lived)."""
        if self._vectors is None or self._vectors.shape[0] <= self.max_words:
            return
        if self.max_words <= 0:
            self.clear()
            return
        while len(self._slots) > self.max_words:
            self._slots.popitem(last=False)
        kept = list(self._slots.items())
        rows = torch.tensor([slot for _, slot in kept], dtype=torch.long, device=self._vectors.device)
        self._vectors = self._vectors.index_select(0, rows)
        self._slots = OrderedDict((key, row) for row, (key, _) in enumerate(kept))
        self._free = []

    def _store(self, keys: list[bytes], vectors: torch.Tensor) -> None:
        """Put `vectors` [n, ...] under `keys`, evicting the least recently used words beyond `max_words`."""
        for _ in range(len(self._slots) + len(keys) - self.max_words):
            self._free.append(self._slots.popitem(last=False)[1])
        if self._vectors is None and len(keys) <= self.max_words:  # the first results become the store
            self._vectors = vectors
            self._slots.update(zip(keys, range(len(keys))))
            return
        if self._vectors is None:
            self._vectors = vectors.new_empty(0, *vectors.shape[1:])
        if len(self._free) < len(keys):  # grow geometrically, never past max_words rows
            capacity = self._vectors.shape[0]
            new_capacity = min(self.max_words, max(2 * capacity, capacity + len(keys) - len(self._free)))
            grown = vectors.new_empty(new_capacity, *vectors.shape[1:])
            grown[:capacity] = self._vectors
            self._vectors = grown
            self._free.extend(range(capacity, new_capacity))
        if self._vectors.is_inference() and not torch.is_inference_mode_enabled():
            # Made under torch.inference_mode (ElmoEmbedder's), the store cannot be written outside it.
            self._vectors = self._vectors.clone()
        slots = [self._free.pop() for _ in keys]
        self._vectors[torch.tensor(slots, device=self._vectors.device)] = vectors
        self._slots.update(zip(keys, slots))
