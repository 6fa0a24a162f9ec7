"""Training-step worker for AllenNLP 2.10.1's trainable ELMo biLM, run by `train_bench.py` with AllenNLP's own
interpreter.

    python allennlp_train_worker.py OPTIONS.json WEIGHTS.hdf5 INPUTS.json THREADS

One training step of `_ElmoBiLm(requires_grad=True)` in train mode, as `hf_train_worker.py` runs hf_elmo's: the
windows through `batch_to_ids`, the LSTM state reset first (each step starts from zeros, as hf_elmo's does), the
loss the sum of every layer's outputs at the words (`remove_sentence_boundaries`), backward through every layer.
"""

import sys

from bench_common import Channel, load_inputs, step_reply, timed

channel = Channel()
options_file, weight_file, inputs_file, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
import torch  # noqa: E402

torch.set_num_threads(threads)
from allennlp.modules.elmo import _ElmoBiLm, batch_to_ids  # noqa: E402
from allennlp.nn.util import remove_sentence_boundaries  # noqa: E402

load_seconds, bilm = timed(lambda: _ElmoBiLm(options_file, weight_file, requires_grad=True).train())
windows = load_inputs(inputs_file)["windows"]
char_ids = batch_to_ids(windows)


def step(mode: str = "allennlp") -> dict:
    def one_step():
        bilm._elmo_lstm.reset_states()
        output = bilm(char_ids)
        loss = sum(remove_sentence_boundaries(layer, output["mask"])[0].sum() for layer in output["activations"])
        loss.backward()
        return loss.item()

    seconds, loss = timed(one_step)
    reply = step_reply(seconds, loss, windows, bilm._token_embedder._char_embedding_weights.grad)
    bilm.zero_grad(set_to_none=True)
    return reply


channel.send({"load_seconds": load_seconds,
              "versions": {"torch": torch.__version__, "allennlp": __import__("allennlp").__version__}})
channel.serve({"step": step})
