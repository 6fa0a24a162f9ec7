"""hf-elmo: ELMo (Peters et al. 2018) in transformers, exact to the original weights."""

from transformers import AutoConfig, AutoModel, AutoModelForPreTraining, AutoTokenizer

from .configuration_elmo import ElmoConfig
from .modeling_elmo import ElmoForPreTraining, ElmoForPreTrainingOutput, ElmoModel, ElmoModelOutput, ElmoPreTrainedModel
from .tokenization_elmo import ElmoTokenizer

AutoConfig.register(ElmoConfig.model_type, ElmoConfig)
AutoModel.register(ElmoConfig, ElmoModel)
AutoModelForPreTraining.register(ElmoConfig, ElmoForPreTraining)
AutoTokenizer.register(ElmoConfig, ElmoTokenizer)

# Saved folders carry the code and an auto_map, so they load with trust_remote_code and no hf_elmo.
ElmoConfig.register_for_auto_class()
ElmoModel.register_for_auto_class("AutoModel")
ElmoForPreTraining.register_for_auto_class("AutoModelForPreTraining")
ElmoTokenizer.register_for_auto_class("AutoTokenizer")

__all__ = [
    "ElmoConfig",
    "ElmoForPreTraining",
    "ElmoForPreTrainingOutput",
    "ElmoModel",
    "ElmoModelOutput",
    "ElmoPreTrainedModel",
    "ElmoTokenizer",
]
