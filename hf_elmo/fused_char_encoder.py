"""The character encoder's fast training path: `ElmoCharacterEncoder._plain_forward` and its gradient, reorganised.

* Each distinct word of the batch is encoded once and its vector gathered back to every occurrence, so its
  gradients add up there (the gather's backward), exactly as the occurrences' separate gradients would.
* The convolutions and their max over positions are one autograd Function (`_CharFilters`): each filter is one
  matrix multiply over the character windows of a block of words (cut after the block's longest word, as in
  `fast_char_encoder.py`), and only the position of each maximum is kept for backward. The max passes its
  gradient to that one window, so a filter's gradient is a sum over words of the winning windows' characters:
  backward counts, per character offset, how much gradient each character id receives (one scatter-add into a
  [characters, filters] table) and multiplies that table by the embedding (the filters' gradient) and by the
  filters (the embedding's gradient). Dense convolution backward, with its cost of a second and third
  convolution over every position, is never run.
* The bias, the activation, the highway layers, the word embedding (with word input, concatenated in front of the
  highway's output) and the projection are ordinary autograd, through `ElmoCharacterEncoder.highway_and_projection`.

Where several windows of a word share a filter's maximum, autograd's max splits the gradient evenly among them and
this path gives it to one. Windows with the same characters (repeated letters, the padding after a word) give the
same gradient either way; windows with different characters tie only by accident of rounding or with degenerate
filters (exactly repeated weights), where either choice is a valid subgradient. The tests hold the gradients to
autograd's of the plain path within 1e-5.
"""

import numpy as np
import torch
from torch.nn import functional as F

from .fast_char_encoder import BLOCK_WORDS, blocks_by_length, filter_matrix, window_products
from .fused_bilstm import multiply_dtype, uncovered_dtype
from .static_shapes import has_static_shapes


def fused_char_encoder_fallback(encoder) -> str | None:
    """Why `encoder` must train through the plain path, or None where this path covers it."""
    if not encoder.use_fast_path:
        return "use_fast_path is False"
    reason = encoder.modules_must_run()
    if reason is not None:
        return reason
    return uncovered_dtype(encoder.char_embedding.weight)


def distinct_words(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] rows (character ids, and the word id last with word input) -> the distinct rows [M, K] and, for each
    of the N, its index among them [N].

    On CPU through numpy's unique of each row's bytes, several times faster than torch.unique(dim=0) there."""
    if rows.device.type != "cpu":
        return torch.unique(rows, dim=0, return_inverse=True)
    array = np.ascontiguousarray(rows.numpy().astype(np.int32))
    keys = array.view(np.dtype((np.void, array.itemsize * array.shape[1]))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return rows[torch.from_numpy(first)], torch.from_numpy(inverse.reshape(-1))


def fused_char_encoder(encoder, rows: torch.Tensor) -> torch.Tensor:
    """[N, K] character ids (or [N, K + 1], the word id last, with word input: see `ElmoCharacterEncoder.split_rows`)
    -> [N, P] word vectors, as `ElmoCharacterEncoder._plain_forward`, under autograd. In `static_shapes()` every row
    is encoded, in one block of all its characters (finding the distinct words and their lengths reads the device)."""
    if has_static_shapes():
        char_ids, word_ids = encoder.split_rows(rows)
        order, inverse = None, None
        blocks = [(0, char_ids.shape[0], char_ids.shape[1])]
    else:
        distinct, inverse = distinct_words(rows)
        char_ids, word_ids = encoder.split_rows(distinct)
        # Shortest words first, so that each block is cut after its own longest word; on a GPU one block (every
        # distinct word), which keeps the number of launches and host syncs down.
        block_words = BLOCK_WORDS if char_ids.device.type == "cpu" else max(char_ids.shape[0], 1)
        order, blocks = blocks_by_length(encoder, char_ids, block_words)
        char_ids = char_ids.index_select(0, order)
        word_ids = None if word_ids is None else word_ids.index_select(0, order)

    weight = encoder.char_embedding.weight
    pooled = _CharFilters.apply(char_ids, tuple(blocks), multiply_dtype(weight), weight,
                                *(conv.weight for conv in encoder.char_cnn))
    bias = torch.cat([conv.bias for conv in encoder.char_cnn])
    x = encoder.highway_and_projection(encoder.activation(pooled + bias), word_ids)
    if order is None:
        return x
    # Back from length order to the distinct words' order, then to every occurrence (index_select: its backward
    # is an index_add, several times faster on CPU than the index_put of x[index]).
    return x.index_select(0, torch.argsort(order)[inverse])


class _CharFilters(torch.autograd.Function):
    """char ids [N, K] (in blocks), embedding [V, D], one Conv1d weight [n, D, w] per filter -> [N, F], each
    filter's largest product over the windows of each word (without the bias)."""

    @staticmethod
    def forward(ctx, char_ids, blocks, multiply_dtype, embedding, *filters):
        with torch.autocast(char_ids.device.type, enabled=False):
            matrices = [filter_matrix(w).to(multiply_dtype) for w in filters]
            total = sum(w.shape[0] for w in filters)
            pooled = embedding.new_empty(char_ids.shape[0], total)
            winners = char_ids.new_empty(char_ids.shape[0], total)  # the window (start position) of each maximum
            table = embedding.to(multiply_dtype)
            for start, stop, kept in blocks:
                chars = F.embedding(char_ids[start:stop, :kept], table)  # [n, kept, D]
                column = 0
                for matrix in matrices:
                    count = matrix.shape[1]
                    values, positions = window_products(chars, matrix).max(dim=1)
                    pooled[start:stop, column : column + count] = values
                    winners[start:stop, column : column + count] = positions
                    column += count
        ctx.save_for_backward(char_ids, winners, embedding, *filters)
        return pooled

    @staticmethod
    def backward(ctx, grad_pooled):
        if torch.is_grad_enabled():
            raise RuntimeError(
                "ElmoCharacterEncoder's fused training path computes first-order gradients only (create_graph=True "
                "was asked for); for double backward set use_fast_path = False on the character encoder "
                "(model.set_fast_path(False)) so that the plain path runs"
            )
        char_ids, winners, embedding, *filters = ctx.saved_tensors
        vocabulary, dim = embedding.shape
        # Only the gradients asked for (a frozen embedding or filter gets none, and costs nothing).
        embedding_needed, filters_needed = ctx.needs_input_grad[3], ctx.needs_input_grad[4:]
        grad_embedding = torch.zeros_like(embedding) if embedding_needed else None
        grad_filters = []
        column = 0
        for weight, filter_needed in zip(filters, filters_needed, strict=True):
            count, _, width = weight.shape
            if not (embedding_needed or filter_needed):
                grad_filters.append(None)
                column += count
                continue
            grad = grad_pooled[:, column : column + count].to(embedding.dtype)
            start = winners[:, column : column + count]
            # The id of the character at each offset of each winning window: [N, w, n].
            offsets = torch.arange(width, device=start.device).view(1, width, 1)
            ids = char_ids.gather(1, (start.unsqueeze(1) + offsets).flatten(1)).view(-1, width, count)
            # received[o, v, f]: the gradient that filter f's offset o passes to character id v.
            received = grad.new_zeros(width * vocabulary, count)
            index = (ids + offsets * vocabulary).flatten(0, 1)
            received.scatter_add_(0, index, grad.unsqueeze(1).expand(-1, width, -1).flatten(0, 1))
            received = received.view(width, vocabulary, count)
            # d weight[f, d, o] = sum_v received[o, v, f] embedding[v, d]; d embedding = sum_o received[o] weight[:, :, o]
            if filter_needed:  # (in the weight's own layout: DDP's buckets copy a gradient of other strides, and warn)
                grad_filters.append(torch.empty_like(weight).copy_(torch.einsum("ovf,vd->fdo", received, embedding)))
            else:
                grad_filters.append(None)
            if embedding_needed:
                grad_embedding += torch.einsum("ovf,fdo->vd", received, weight)
            column += count
        return (None, None, None, grad_embedding, *grad_filters)
