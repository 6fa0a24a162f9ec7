"""Run by tests/test_fsdp.py under `torchrun --nproc_per_node 2` on CPU (gloo).

    fsdp_probe.py OUTPUT_DIR {fast,plain}

FSDP2 as modeling/configs/fsdp.yaml asks for it (each module of the classes it names sharded as a unit, then the
whole model), on a small ElmoForPreTraining with a cell projection and clipping: 3 SGD steps of a stream (the LSTM
state carried from window to window, the sampled softmax), each rank training on 2 of the 4 rows. Each rank also
trains an unsharded copy, from the same weights, on all 4 rows. Rank 0 writes the steps' losses (the mean of the
ranks' and the unsharded copy's) and the largest difference of the trained weights to OUTPUT_DIR/result.json.
"""

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import yaml
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor

import hf_elmo.modeling_elmo as modeling
from hf_elmo import ElmoConfig, ElmoForPreTraining

REPO = Path(__file__).resolve().parents[1]
ROWS, WINDOW, VOCABULARY, STEPS = 4, 6, 50, 3

output_dir, path = Path(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
fsdp_config = yaml.safe_load((REPO / "modeling" / "configs" / "fsdp.yaml").read_text())["fsdp_config"]
wrapped = tuple(getattr(modeling, name) for name in fsdp_config["fsdp_transformer_layer_cls_to_wrap"].split(","))

config = ElmoConfig(char_cnn_filters=((1, 8), (2, 16)), num_highway_layers=1, cell_size=32, projection_dim=16,
                    cell_clip=3.0, proj_clip=3.0, lm_vocab_size=VOCABULARY, lm_negative_samples=10)
torch.manual_seed(0)
sharded = ElmoForPreTraining(config)
unsharded = ElmoForPreTraining(config)
unsharded.load_state_dict(sharded.state_dict())
for model in (sharded, unsharded):
    model.set_fast_path(path == "fast")
    model.train()
units = [module for module in sharded.modules() if isinstance(module, wrapped)]
for module in units:
    fully_shard(module)
fully_shard(sharded)

generator = torch.Generator().manual_seed(1)
windows = [
    (torch.randint(1, 200, (ROWS, WINDOW, 50), generator=generator),
     torch.randint(0, VOCABULARY, (ROWS, WINDOW), generator=generator),
     torch.randint(0, VOCABULARY, (ROWS, WINDOW), generator=generator))
    for _ in range(STEPS)
]
mine = slice(rank * ROWS // world, (rank + 1) * ROWS // world)


def train(model, rows: slice) -> list[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    losses, states = [], None
    for step, (ids, labels, backward_labels) in enumerate(windows):
        torch.manual_seed(100 + step)  # the same sampled negatives for every rank and the unsharded copy
        output = model(input_ids=ids[rows], labels=labels[rows], backward_labels=backward_labels[rows],
                       initial_states=states)
        output.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        states = tuple(state.detach() for state in output.final_states)
        losses.append(output.loss.item())
    return losses


initial = {name: parameter.detach().clone() for name, parameter in unsharded.named_parameters()}
expected = train(unsharded, slice(0, ROWS))
losses = torch.tensor(train(sharded, mine))
dist.all_reduce(losses)
trained = {name: parameter.full_tensor() for name, parameter in sharded.named_parameters()}
if rank == 0:
    reference = dict(unsharded.named_parameters())
    result = {
        "world_size": world,
        "sharded_units": sorted({type(module).__name__ for module in units}),
        "parameters_sharded": all(isinstance(parameter, DTensor) for parameter in sharded.parameters()),
        "losses": (losses / world).tolist(),
        "expected_losses": expected,
        "largest_weight_difference": max((trained[name] - reference[name]).abs().max().item() for name in reference),
        "largest_weight_change": max((reference[name] - value).abs().max().item() for name, value in initial.items()),
    }
    (output_dir / "result.json").write_text(json.dumps(result))
dist.barrier()
dist.destroy_process_group()
# Leave without the interpreter's teardown, where gloo's worker threads, still holding tensors, aborted the process
# now and then ("terminate called without an active exception", pytorch/pytorch#179291): torch's, after all the work.
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
