"""The character encoder's fast inference path: the computation of `ElmoCharacterEncoder._plain_forward`,
with each convolution done as one matrix multiply over its character windows.

A char CNN filter has only `width * char_embedding_dim` inputs (at most 7 x 16 here), which the generic
convolution kernels handle poorly; laid out as [windows, width * dim] x [width * dim, filters], a block of
words becomes one well-shaped multiply whose result still fits in cache for the max over positions. The
bias is added after the max, which is exact: adding a constant is monotone, so it cannot change which
window is largest. Results equal the plain path to float32 rounding.
"""

import torch

from .fast_bilstm import derived_weights

# Words per block: their window products for the widest filter (64 x 44 x 1024 floats) stay in cache.
BLOCK_WORDS = 64


def _filter_matrices(encoder) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Per filter: its Conv1d weight [n, D, w] as a [w * D, n] matrix (rows by offset, then channel); and
    every filter's bias, concatenated [F]."""
    matrices = [conv.weight.detach().permute(2, 1, 0).reshape(-1, conv.out_channels).contiguous()
                for conv in encoder.char_cnn]
    return matrices, torch.cat([conv.bias.detach() for conv in encoder.char_cnn])


def fast_char_encoder(encoder, char_ids: torch.Tensor) -> torch.Tensor:
    """[N, K] character ids -> [N, P] word vectors, as `ElmoCharacterEncoder._plain_forward` computes them."""
    if char_ids.shape[0] == 1:  # one word: computed as two, for alignment-independent rounding (see two_rows)
        return fast_char_encoder(encoder, char_ids.expand(2, -1))[:1]
    parameters = [p for conv in encoder.char_cnn for p in (conv.weight, conv.bias)]
    matrices, bias = derived_weights(encoder, "char_cnn", _filter_matrices, parameters)
    chars = encoder.char_embedding(char_ids)  # [N, K, D]
    words, length, dim = chars.shape
    pooled = chars.new_empty(words, bias.shape[0])
    for start in range(0, words, BLOCK_WORDS):
        block = chars[start : start + BLOCK_WORDS]
        column = 0
        for conv, matrix in zip(encoder.char_cnn, matrices):
            width, count = conv.kernel_size[0], conv.out_channels
            windows = block.unfold(1, width, 1).transpose(2, 3).reshape(block.shape[0], length - width + 1, width * dim)
            torch.amax(windows @ matrix, dim=1, out=pooled[start : start + block.shape[0], column : column + count])
            column += count
    x = encoder.activation(pooled.add_(bias))
    for layer in encoder.highway:
        x = layer(x)
    if encoder.projection is not None:
        x = encoder.projection(x)
    return x
