"""hf-elmo: ELMo (Peters et al. 2018) in transformers, exact to the original weights."""

import importlib.metadata

import transformers

from . import modeling_elmo
from .configuration_elmo import ELMO_AUTO_MAP, ElmoConfig
from .embedder import ElmoEmbedder
from .modeling_elmo import (
    ElmoForPreTraining,
    ElmoForPreTrainingOutput,
    ElmoForSequenceClassification,
    ElmoForTokenClassification,
    ElmoModel,
    ElmoModelOutput,
    ElmoPreTrainedModel,
    ElmoTaskModel,
)
from .pipelines import ElmoFeatureExtractionPipeline, ElmoTokenClassificationPipeline
from .tokenization_elmo import ElmoTokenizer

transformers.AutoConfig.register(ElmoConfig.model_type, ElmoConfig)
transformers.AutoTokenizer.register(ElmoConfig, ElmoTokenizer)
ElmoConfig.register_for_auto_class()
# Every model class named in ELMO_AUTO_MAP (the one list) loads through its Auto class, here and as remote code.
for _auto_class, _reference in ELMO_AUTO_MAP.items():
    if _auto_class.startswith("AutoModel"):
        _model_class = getattr(modeling_elmo, _reference.split(".")[-1])
        getattr(transformers, _auto_class).register(ElmoConfig, _model_class)
        _model_class.register_for_auto_class(_auto_class)
# (configuration_elmo registers the ELMo-aware pipelines on import; see pipelines.py)

try:
    __version__ = importlib.metadata.version("hf-elmo")
except importlib.metadata.PackageNotFoundError:  # (the source tree imported without being installed)
    __version__ = "unknown"


def library_versions() -> dict[str, str]:
    """The releases whose kernels and code decide a result's last bits: recorded with `hf-elmo embed`'s runs and
    pretraining checkpoints, whose resumes repeat an uninterrupted run bit for bit only under the same ones."""
    import torch

    return {"hf_elmo": __version__, "torch": torch.__version__}


__all__ = [
    "ELMO_AUTO_MAP",
    "ElmoConfig",
    "ElmoEmbedder",
    "ElmoFeatureExtractionPipeline",
    "ElmoForPreTraining",
    "ElmoForPreTrainingOutput",
    "ElmoForSequenceClassification",
    "ElmoForTokenClassification",
    "ElmoModel",
    "ElmoModelOutput",
    "ElmoPreTrainedModel",
    "ElmoTaskModel",
    "ElmoTokenClassificationPipeline",
    "ElmoTokenizer",
    "library_versions",
]
