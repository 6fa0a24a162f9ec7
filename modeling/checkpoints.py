"""The checkpoint folders of a pretraining run's output folder (`pretrain.py` writes them, `evaluate.py` reads their
records too)."""

import re
from pathlib import Path

CHECKPOINT_NAME = re.compile(r"checkpoint-([0-9]+)")


def in_folder(checkpoint: Path, output_dir: Path) -> bool:
    """Whether `checkpoint` is one of `output_dir`'s checkpoints (by their real paths)."""
    return checkpoint.resolve().parent == output_dir.resolve()


def list_checkpoints(output_dir: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints, oldest first (incomplete ones only ever exist under a hidden name)."""
    found = []
    for path in output_dir.glob("checkpoint-*"):
        match = CHECKPOINT_NAME.fullmatch(path.name)
        if match and (path / "trainer_state.json").is_file():
            found.append((int(match.group(1)), path))
    return sorted(found)
