"""Benchmark worker for ELMoForManyLangs (PyPI elmoformanylangs 0.0.4.post2), run by `elmoformanylangs_bench.py` with
the package's own interpreter.

    python elmoformanylangs_worker.py MODEL_DIR INPUTS.json THREADS

This is how the package's users embed text: `Embedder(MODEL_DIR).sents2elmo(sentences, output_layer=-2)` (every
layer, without `<bos>`/`<eos>`), with the LSTM state reset before every batch so that each batch starts from zeros,
as hf_elmo does by default.
"""

import sys
import time

from bench_common import Channel, load_inputs, memory_mb, run_batches, timed

channel = Channel()
model_dir, inputs_file, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
start = time.perf_counter()
import logging  # noqa: E402
from importlib.metadata import version  # noqa: E402

import torch  # noqa: E402

torch.set_num_threads(threads)
from elmoformanylangs import Embedder  # noqa: E402

logging.getLogger("elmoformanylangs").setLevel(logging.WARNING)  # it logs every batch
imported = memory_mb()
load_seconds, embedder = timed(lambda: Embedder(model_dir, batch_size=64))
loaded = memory_mb()
inputs = load_inputs(inputs_file)


def embed(sentences):
    embedder.model.encoder.reset_states()
    return embedder.sents2elmo(sentences, output_layer=-2)  # [layers, words, 2P] per sentence, in input order


def run(case: str, save: str | None = None) -> dict:
    return run_batches(embed, inputs[case], lambda batch, sentences: sentences, save)


channel.send({"imported": imported, "loaded": loaded, "load_seconds": load_seconds,
              "versions": {"torch": torch.__version__, "elmoformanylangs": version("elmoformanylangs")}})
channel.serve({"run": run})
