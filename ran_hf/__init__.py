"""ran_hf: the Recurrent Attention Network (RAN) for Hugging Face Transformers."""

from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from . import chain_compiled, chain_cuda_graphs
from .cache_ran import RANCache, RANCacheLayer, RANLayerState
from .configuration_ran import RANConfig
from .modeling_ran import (
    RANLayer,
    RANForCausalLM,
    RANForMaskedLM,
    RANForQuestionAnswering,
    RANForSequenceClassification,
    RANForTokenClassification,
    RANModel,
    RANModelOutput,
    RANPreTrainedModel,
)
from .configuration_sentence import RANSentenceConfig
from .modeling_sentence import RANSentenceForSequenceClassification, RANSentencePreTrainedModel
from .processing_sentences import DocumentClassificationPipeline, DocumentSentenceProcessor


AUTO_CLASSES = {
    AutoModel: RANModel,
    AutoModelForMaskedLM: RANForMaskedLM,
    AutoModelForCausalLM: RANForCausalLM,
    AutoModelForSequenceClassification: RANForSequenceClassification,
    AutoModelForTokenClassification: RANForTokenClassification,
    AutoModelForQuestionAnswering: RANForQuestionAnswering,
}

AutoConfig.register(RANConfig.model_type, RANConfig, exist_ok=True)
RANConfig.register_for_auto_class()
for _auto_class, _model_class in AUTO_CLASSES.items():
    _auto_class.register(RANConfig, _model_class, exist_ok=True)
    _model_class.register_for_auto_class(_auto_class.__name__)
AutoConfig.register(RANSentenceConfig.model_type, RANSentenceConfig, exist_ok=True)
RANSentenceConfig.register_for_auto_class()
AutoModelForSequenceClassification.register(RANSentenceConfig, RANSentenceForSequenceClassification, exist_ok=True)
RANSentenceForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")

__version__ = "0.1.0"
__all__ = [
    "RANConfig",
    "RANModel",
    "RANModelOutput",
    "RANPreTrainedModel",
    "RANForMaskedLM",
    "RANForCausalLM",
    "RANCache",
    "RANCacheLayer",
    "RANLayer",
    "RANLayerState",
    "RANForSequenceClassification",
    "RANForTokenClassification",
    "RANForQuestionAnswering",
    "RANSentenceConfig",
    "RANSentencePreTrainedModel",
    "RANSentenceForSequenceClassification",
    "DocumentSentenceProcessor",
    "DocumentClassificationPipeline",
]
