"""Training-step worker for hf_elmo, run by `train_bench.py` with the project's interpreter.

    python hf_train_worker.py MODEL_DIR INPUTS.json THREADS

One training step: `ElmoModel` in train mode reads the windows (it adds `<S>` and `</S>` to each), the loss is the
sum of every layer's outputs at the words, and backward runs through every layer down to the character
embedding. "fast" runs the fused training paths (the default), "plain" the plain computation that defines the
model (`set_fast_path(False)`).
"""

import sys
from pathlib import Path

from bench_common import Channel, load_inputs, step_reply, timed

channel = Channel()
model_dir, inputs_file, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch  # noqa: E402

torch.set_num_threads(threads)
from hf_elmo import ElmoModel, ElmoTokenizer  # noqa: E402

load_seconds, model = timed(lambda: ElmoModel.from_pretrained(model_dir).train())
tokenizer = ElmoTokenizer.from_pretrained(model_dir)
windows = load_inputs(inputs_file)["windows"]
batch = tokenizer(windows, is_split_into_words=True, padding=True, return_tensors="pt")


def step(mode: str) -> dict:
    model.set_fast_path(mode == "fast")

    def one_step():
        outputs = model(**batch, output_final_states=False)
        loss = sum(layer.sum() for layer in outputs.hidden_states)
        loss.backward()
        return loss.item()

    seconds, loss = timed(one_step)
    reply = step_reply(seconds, loss, windows, model.char_encoder.char_embedding.weight.grad)
    model.zero_grad(set_to_none=True)
    return reply


channel.send({"load_seconds": load_seconds,
              "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__}})
channel.serve({"step": step})
