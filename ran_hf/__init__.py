"""ran_hf: the Recurrent Attention Network (RAN) for Hugging Face Transformers."""

from transformers import AutoConfig, AutoModel

from .configuration_ran import RANConfig
from .modeling_ran import RANModel, RANModelOutput, RANPreTrainedModel


AutoConfig.register(RANConfig.model_type, RANConfig, exist_ok=True)
AutoModel.register(RANConfig, RANModel, exist_ok=True)

__version__ = "0.1.0"
__all__ = ["RANConfig", "RANModel", "RANModelOutput", "RANPreTrainedModel"]
