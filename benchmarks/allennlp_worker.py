"""Benchmark worker for AllenNLP 2.10.1's ELMo, run by `run.py` with AllenNLP's own interpreter.

    python allennlp_worker.py OPTIONS.json WEIGHTS.hdf5 INPUTS.json THREADS

This is the path `allennlp elmo` used (`_ElmoBiLm` + `batch_to_ids` + `remove_sentence_boundaries`), with
the LSTM state reset before every batch so that each batch starts from zeros, as hf_elmo does by default.
"""

import sys
import time

from bench_common import Channel, load_inputs, memory_mb, timed

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
    batches = inputs[case]
    with torch.no_grad():
        seconds, outputs = timed(lambda: [embed(batch) for batch in batches])
    if save:
        import numpy as np

        arrays = {}
        for b, (batch, layers) in enumerate(zip(batches, outputs)):
            for layer, values in enumerate(layers):
                for row, words in enumerate(batch):
                    arrays[f"b{b}_r{row}_l{layer}"] = values[row, : len(words)].numpy()
        np.savez(save, **arrays)
    words = sum(len(sentence) for batch in batches for sentence in batch)
    return {"seconds": seconds, "words": words, "memory": memory_mb()}


channel.send({"imported": imported, "loaded": loaded, "load_seconds": load_seconds,
              "versions": {"torch": torch.__version__, "allennlp": __import__("allennlp").__version__}})
channel.serve({"run": run})
