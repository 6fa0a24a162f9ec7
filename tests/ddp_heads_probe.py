"""Run by tests/test_ddp.py under `torchrun --nproc_per_node 2` with ACCELERATE_USE_CPU=1.

    ddp_heads_probe.py MODEL_DIR OUTPUT_DIR

Trains each head for 2 steps with Trainer in DDP, feature-based and fine-tuned, with activation checkpointing on:
Trainer then builds DDP with find_unused_parameters=False, which fails if a trainable parameter gets no
gradient. Each rank checks that the flag took effect (every biLSTM layer checkpointed; a rank where one is not exits
with an error, so the run fails). Rank 0 writes the trained parameters' names, the layers' checkpointing and the
final losses to OUTPUT_DIR/result.json.
"""

import gc
import json
import sys
from pathlib import Path

import torch.distributed as dist
from datasets import Dataset
from torch.nn.parallel import DistributedDataParallel
from transformers import DataCollatorForTokenClassification, DataCollatorWithPadding, Trainer, TrainingArguments

from hf_elmo import ElmoForSequenceClassification, ElmoForTokenClassification, ElmoTokenizer

WORDS = [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"], ["BRUSSELS", "1996-08-22"], ["It", "rained", "."]]
TAGS = [[3, 0, 7, 0], [1, 2], [5, 0], [0, 0, 0]]

model_dir, output_dir = sys.argv[1], Path(sys.argv[2])
tokenizer = ElmoTokenizer.from_pretrained(model_dir)


def train_head(head, labels, collator, finetune_bilm: bool) -> dict:
    """Two steps of HEAD in DDP; what this rank saw. The Trainer and its DDP model go with this function's locals,
    before the process group (a DDP reducer alive then becomes the group's last owner, see pretrain.py's train)."""
    data = Dataset.from_dict({"words": WORDS * 2, "labels": labels * 2})
    data = data.map(lambda b: tokenizer(b["words"], is_split_into_words=True), batched=True, remove_columns=["words"])
    model = head.from_pretrained(model_dir, num_labels=9, finetune_bilm=finetune_bilm)
    args = TrainingArguments(
        output_dir=str(output_dir / f"{head.__name__}-{finetune_bilm}"), per_device_train_batch_size=2, max_steps=2,
        activation_checkpointing=True, use_cpu=True, report_to="none", save_strategy="no", logging_steps=1,
    )
    trainer = Trainer(model=model, args=args, train_dataset=data, data_collator=collator)
    output = trainer.train()
    checkpointed = [layer.gradient_checkpointing for layer in model.elmo.layers]
    if not all(checkpointed):
        sys.exit(f"{head.__name__} finetune_bilm={finetune_bilm}: activation_checkpointing=True left biLSTM "
                 f"layers without checkpointing: {checkpointed}")
    ddp = trainer.model_wrapped
    return {
        "world_size": dist.get_world_size(),
        "wrapped": type(ddp).__name__,
        "find_unused_parameters": getattr(ddp, "find_unused_parameters", None),
        "trained": [name for name, p in model.named_parameters() if p.requires_grad],
        "checkpointed": checkpointed,
        "loss": output.training_loss,
    }


result = {}
for head, labels, collator in (
    (ElmoForTokenClassification, TAGS, DataCollatorForTokenClassification(tokenizer)),
    (ElmoForSequenceClassification, [0, 1, 1, 0], DataCollatorWithPadding(tokenizer)),
):
    for finetune_bilm in (False, True):
        result[f"{head.__name__} finetune_bilm={finetune_bilm}"] = train_head(head, labels, collator, finetune_bilm)
alive = sum(isinstance(thing, DistributedDataParallel) for thing in gc.get_objects())
if alive:
    sys.exit(f"{alive} DDP models alive after train_head returned: the process group would not be their last owner")
if dist.get_rank() == 0:
    (output_dir / "result.json").write_text(json.dumps(result, indent=1))
# Both ranks done before the group goes: a rank that exits with the group alive while the other still uses it can
# abort in gloo's threads ("terminate called without an active exception", seen once in CI).
dist.barrier()
dist.destroy_process_group()
