"""The default ELMo that ships inside the package (`make pretrain-default` trains it; its card is in the folder)."""

from pathlib import Path

DEFAULT_MODEL_DIR = Path(__file__).resolve().parent / "default-model"


def default_model_path() -> str:
    """The folder of the default model, for `from_pretrained`; it loads offline."""
    if not (DEFAULT_MODEL_DIR / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"the default ELMo is missing from {DEFAULT_MODEL_DIR}: reinstall hf-elmo, or train it with "
            "`make pretrain-default` in the repository"
        )
    return str(DEFAULT_MODEL_DIR)
