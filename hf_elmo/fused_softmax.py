"""The sampled softmax's fast training path: the loss of `modeling_elmo.sampled_softmax_loss` and its gradient as
one autograd Function.

Autograd of the plain loss passes a dozen times over the [tokens, negatives] logits (the log-Q correction, a
copy to mask the accidental hits, logsumexp and logaddexp and their backward), and its gathers of softmax rows
scatter back with index_put. Here the corrected logits come out of one multiply (the bias minus log Q is its
added term), the hits are masked in place, the normaliser takes a max and one exp pass, and forward keeps the
exponentials: backward scales them once into the logits' gradient, then three multiplies and one index_add into
the softmax's [V, P] gradient. Same sampled words, same loss and gradients to float32 rounding (the tests hold
them within 1e-5 of autograd's of the plain loss).
"""

import torch

from .fused_bilstm import multiply_dtype, uncovered_dtype


def fused_softmax_fallback(weight: torch.Tensor) -> str | None:
    """Why the sampled softmax over `weight` must train through the plain loss, or None where this path covers it."""
    return uncovered_dtype(weight)


def fused_sampled_softmax_loss(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, words: torch.Tensor, log_q: torch.Tensor,
    hit_rows: torch.Tensor, hit_columns: torch.Tensor,
) -> torch.Tensor:
    """Per-token loss [T] of the true words among [true, negatives]: hidden [T, P]; softmax weight [V, P] and bias
    [V]; words [T + S] (the T targets, then the S negatives); log_q [T + S], the log of each word's expected count
    among the samples; (hit_rows, hit_columns): the negatives that are a token's own target, left out."""
    return _SampledSoftmax.apply(hidden, weight, bias, words, log_q, hit_rows, hit_columns, multiply_dtype(weight))


class _SampledSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, words, log_q, hit_rows, hit_columns, multiply_dtype):
        with torch.autocast(hidden.device.type, enabled=False):
            tokens = hidden.shape[0]
            # The logits' dtype: float32, or float64 for float64 weights, as the plain loss's (`_for_the_loss`).
            dtype = torch.promote_types(weight.dtype, torch.float32)
            rows = weight.index_select(0, words)
            corrected_bias = bias.index_select(0, words).to(dtype) - log_q.to(dtype)
            true_logits = (hidden.to(dtype) * rows[:tokens].to(dtype)).sum(-1) + corrected_bias[:tokens]
            logits = torch.mm(hidden.to(multiply_dtype), rows[tokens:].to(multiply_dtype).t()).to(dtype)
            logits += corrected_bias[tokens:]
            logits.index_put_((hit_rows, hit_columns), logits.new_tensor(float("-inf")))
            # log(exp(true) + sum exp(negatives)), shifted by each row's largest logit.
            shift = torch.maximum(logits.amax(dim=1), true_logits)
            exponentials = logits.sub_(shift.unsqueeze(1)).exp_()
            true_exponential = (true_logits - shift).exp_()
            normaliser = exponentials.sum(dim=1).add_(true_exponential)
            losses = normaliser.log() + shift - true_logits
        ctx.save_for_backward(hidden, rows, words, exponentials, true_exponential, normaliser)
        ctx.multiply_dtype, ctx.vocabulary = multiply_dtype, weight.shape[0]
        ctx.weight_dtype, ctx.bias_dtype = weight.dtype, bias.dtype
        return losses

    @staticmethod
    def backward(ctx, grad_losses):
        if torch.is_grad_enabled():
            raise RuntimeError(
                "the fused sampled softmax computes first-order gradients only (create_graph=True was asked for); "
                "for double backward set model.set_fast_path(False) so that the plain loss runs"
            )
        hidden, rows, words, exponentials, true_exponential, normaliser = ctx.saved_tensors
        tokens, multiply_dtype = hidden.shape[0], ctx.multiply_dtype
        with torch.autocast(hidden.device.type, enabled=False):
            scale = grad_losses / normaliser
            grad_logits = exponentials * scale.unsqueeze(1)  # d loss / d negative logit = its softmax probability
            grad_true = true_exponential * scale - grad_losses  # probability of the true word, minus 1
            grad_logits_m = grad_logits.to(multiply_dtype)
            grad_hidden = torch.mm(grad_logits_m, rows[tokens:].to(multiply_dtype)).to(grad_true.dtype)
            grad_hidden.addcmul_(grad_true.unsqueeze(1), rows[:tokens].to(grad_true.dtype))
            grad_rows = torch.cat([grad_true.unsqueeze(1) * hidden.to(grad_true.dtype),
                                   torch.mm(grad_logits_m.t(), hidden.to(multiply_dtype)).to(grad_true.dtype)])
            grad_row_bias = torch.cat([grad_true, grad_logits.sum(dim=0)])
            grad_weight = rows.new_zeros(ctx.vocabulary, rows.shape[1], dtype=grad_rows.dtype)
            grad_weight.index_add_(0, words, grad_rows)
            grad_bias = grad_row_bias.new_zeros(ctx.vocabulary).index_add_(0, words, grad_row_bias)
        return (grad_hidden.to(hidden.dtype), grad_weight.to(ctx.weight_dtype), grad_bias.to(ctx.bias_dtype),
                None, None, None, None, None)
