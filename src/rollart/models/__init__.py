"""The one transformer implementation shared by the engine and the trainer: ``transformer`` (CausalLM),
``config`` (ModelConfig: the llama, qwen2 and qwen3 families it runs, and the refusal of the rest), ``rope``
(rotary tables, Llama 3 scaling), ``checkpoint`` (HF-format folders), and the engine's paths ``paged`` (packed
batches over a paged KV cache), ``paged_triton`` (its CUDA kernel) and ``cpu_linear`` (oneDNN linears on the CPU).

    from rollart.models import load_model, load_tokenizer, save_model, ModelConfig, CausalLM
    model = load_model(path)        # HF-format folder: config.json + *.safetensors
    logits = model(input_ids)       # (B, T) -> (B, T, V)
"""
from rollart.models.checkpoint import load_model, load_state_dict, load_tokenizer, load_weights, save_model
from rollart.models.config import ModelConfig, UnsupportedModel
from rollart.models.transformer import CausalLM

__all__ = ["CausalLM", "ModelConfig", "UnsupportedModel", "load_model", "load_state_dict", "load_tokenizer",
           "load_weights", "save_model"]
