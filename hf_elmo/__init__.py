"""hf-elmo: ELMo (Peters et al. 2018) in transformers, exact to the original weights."""

from transformers import AutoConfig, AutoModel, AutoTokenizer

from .configuration_elmo import ElmoConfig
from .modeling_elmo import ElmoModel, ElmoModelOutput, ElmoPreTrainedModel
from .tokenization_elmo import ElmoTokenizer

AutoConfig.register(ElmoConfig.model_type, ElmoConfig)
AutoModel.register(ElmoConfig, ElmoModel)
AutoTokenizer.register(ElmoConfig, ElmoTokenizer)

# Saved folders carry the code and an auto_map, so they load with trust_remote_code and no hf_elmo.
ElmoConfig.register_for_auto_class()
ElmoModel.register_for_auto_class("AutoModel")
ElmoTokenizer.register_for_auto_class("AutoTokenizer")

__all__ = ["ElmoConfig", "ElmoModel", "ElmoModelOutput", "ElmoPreTrainedModel", "ElmoTokenizer"]
