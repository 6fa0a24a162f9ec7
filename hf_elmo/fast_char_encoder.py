"""The character encoder's fast inference path: the computation of `ElmoCharacterEncoder._plain_forward`,
with each convolution done as one matrix multiply over its character windows, on fewer characters.

* A char CNN filter has only `width * char_embedding_dim` inputs (at most 7 x 16 here), which the generic
  convolution kernels handle poorly; laid out as [windows, width * dim] x [width * dim, filters], a block of
  words becomes one well-shaped multiply whose result still fits in cache for the max over positions.
* Words are taken shortest first, in blocks, and each block's characters are cut after its longest word's
  end plus the widest filter's width. What is cut are windows of padding characters only: every word's
  such windows have one same value per filter, and the cut keeps one of them, so the max is unchanged.
* The bias is added after the max, which is exact: adding a constant is monotone, so it cannot change
  which window is largest.
* Each highway layer's two products (transform and carry) are one, and each highway and projection product
  takes the kernel measured fastest for it on CPU (`fast_linear.py`).

Results equal the plain path to float32 rounding.
"""

import torch

from .cuda_graphs import exact_float32_matmul
from .fast_bilstm import derived_weights
from .fast_linear import exact_linear

# Words per block: their window products for the widest filter (64 x 44 x 1024 floats) stay in cache.
BLOCK_WORDS = 64


def filter_matrix(weight: torch.Tensor) -> torch.Tensor:
    """A filter's Conv1d weight [n, D, w] as a [w * D, n] matrix, rows by offset, then channel: the layout of a
    window's characters in `window_products`."""
    return weight.permute(2, 1, 0).reshape(-1, weight.shape[0])


def window_products(chars: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """chars [n, K, D] (a block of words' embedded characters), a filter as `filter_matrix` gives it -> the
    filter's products with every window of each word [n, K - w + 1, filters], as one matrix multiply."""
    words, _, dim = chars.shape
    width = matrix.shape[0] // dim
    windows = chars.unfold(1, width, 1).transpose(2, 3).reshape(-1, width * dim)  # [n * positions, w * D]
    return (windows @ matrix).view(words, -1, matrix.shape[1])


def blocks_by_length(encoder, char_ids: torch.Tensor, block_words: int) -> tuple[torch.Tensor, list[tuple]]:
    """The order of the words [N, K] shortest first, and blocks of up to `block_words` of them in that order,
    each (first word, last word + 1, characters kept): cut after the block's longest word plus the widest
    filter, since what lies beyond is padding whose windows every word shares (see the module docstring)."""
    words, length = char_ids.shape
    positions = torch.arange(1, length + 1, device=char_ids.device)
    ends = ((char_ids != encoder.pad_char_id) * positions).amax(dim=1)  # where padding starts for good (0: all padding)
    ends, order = torch.sort(ends, stable=True)
    ends = ends.tolist()
    widest = max(conv.kernel_size[0] for conv in encoder.char_cnn)
    starts = range(0, words, block_words)
    stops = [min(start + block_words, words) for start in starts]
    return order, [(start, stop, min(length, ends[stop - 1] + widest)) for start, stop in zip(starts, stops)]


def _filter_matrices(encoder) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Per filter its `filter_matrix`; and every filter's bias, concatenated [F]."""
    matrices = [filter_matrix(conv.weight.detach()).contiguous() for conv in encoder.char_cnn]
    return matrices, torch.cat([conv.bias.detach() for conv in encoder.char_cnn])


def _linears(encoder) -> tuple[list, object | None]:
    """Per highway layer, the product with its transform and carry weights stacked [2F, F] (and their biases);
    the projection's product."""
    highway = [(exact_linear(torch.cat([layer.transform.weight, layer.carry.weight])),
                torch.cat([layer.transform.bias, layer.carry.bias]).detach()) for layer in encoder.highway]
    return highway, None if encoder.projection is None else exact_linear(encoder.projection.weight)


def fast_char_encoder(encoder, char_ids: torch.Tensor, word_ids: torch.Tensor | None = None) -> torch.Tensor:
    """[N, K] character ids (and [N] word ids, with word input) -> [N, P] word vectors, as
    `ElmoCharacterEncoder._plain_forward` computes them (on a GPU without TF32, see
    `cuda_graphs.exact_float32_matmul`)."""
    if char_ids.is_cuda:
        with exact_float32_matmul():
            return _encode(encoder, char_ids, word_ids)
    return _encode(encoder, char_ids, word_ids)


def _encode(encoder, char_ids: torch.Tensor, word_ids: torch.Tensor | None) -> torch.Tensor:
    # One word is computed as two: in some builds of torch (2.10's here) one row takes other kernels, which round
    # otherwise than the same word among others, and a word's vector would depend on what else was new in its batch.
    if char_ids.shape[0] == 1:
        return _encode(encoder, char_ids.expand(2, -1), None if word_ids is None else word_ids.expand(2))[:1]
    parameters = [p for conv in encoder.char_cnn for p in (conv.weight, conv.bias)]
    matrices, bias = derived_weights(encoder, "char_cnn", _filter_matrices, parameters)
    order, blocks = blocks_by_length(encoder, char_ids, BLOCK_WORDS)
    chars = encoder.char_embedding(char_ids.index_select(0, order))  # [N, K, D], shortest word first
    pooled = chars.new_empty(char_ids.shape[0], bias.shape[0])
    for start, stop, kept in blocks:
        column = 0
        for matrix in matrices:
            count = matrix.shape[1]
            products = window_products(chars[start:stop, :kept], matrix)
            torch.amax(products, dim=1, out=pooled[start:stop, column : column + count])
            column += count
    x = encoder.activation(pooled.add_(bias))
    parameters = [p for module in [*encoder.highway, encoder.projection] if module is not None for p in module.parameters()]
    highway, projection = derived_weights(encoder, "linears", _linears, parameters)
    for linear, stacked_bias in highway:  # ElmoHighway: g * relu(W_t x + b_t) + (1 - g) * x, g = sigmoid(W_c x + b_c)
        transformed, gate = linear(x, stacked_bias).chunk(2, dim=1)
        torch.sigmoid_(gate)
        x = torch.relu_(transformed).mul_(gate).addcmul_(gate.neg_().add_(1.0), x)
    if encoder.word_embedding is not None:  # ELMoForManyLangs' order: word first
        x = torch.cat([encoder.word_embedding(word_ids.index_select(0, order)), x], dim=-1)
    if projection is not None:
        x = projection(x, encoder.projection.bias)
    return x.index_select(0, torch.argsort(order))
