"""Benchmark worker for AllenNLP 2.10.1's ELMo, run by `run.py` with AllenNLP's own interpreter.

    python allennlp_worker.py OPTIONS.json WEIGHTS.hdf5 INPUTS.json THREADS

This is the path `allennlp elmo` used (`_ElmoBiLm` + `batch_to_ids` + `remove_sentence_boundaries`), with
the LSTM state reset before every batch so that each batch starts from zeros, as hf_elmo does by default.
"""

import sys
import time

from bench_common import Channel, load_inputs, memory_mb, run_batches, timed

channel = Channel()
options_file, weight_file, inputs_file, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
start = time.perf_counter()
import torch  # noqa: E402

torch.set_num_threads(threads)
from allennlp.modules.elmo import _ElmoBiLm, batch_to_ids  # noqa: E402
from allennlp.nn.util import remove_sentence_boundaries  # noqa: E402

imported = memory_mb()
load_seconds, bilm = timed(lambda: _ElmoBiLm(options_file, weight_file).eval())
loaded = memory_mb()
inputs = load_inputs(inputs_file)


def embed(sentences):
    bilm._elmo_lstm.reset_states()
    output = bilm(batch_to_ids(sentences))
    return [remove_sentence_boundaries(layer, output["mask"])[0] for layer in output["activations"]]


def run(case: str, save: str | None = None) -> dict:
    def layers_of(batch, layers):  # [B, T, 2P] per layer -> per sentence [words, 2P] per layer
        return [[values[row, : len(words)].numpy() for values in layers] for row, words in enumerate(batch)]

    return run_batches(embed, inputs[case], layers_of, save)


channel.send({"imported": imported, "loaded": loaded, "load_seconds": load_seconds,
              "versions": {"torch": torch.__version__, "allennlp": __import__("allennlp").__version__}})
channel.serve({"run": run})
