"""The one transformer implementation shared by the engine and the trainer: ``transformer`` (CausalLM),
``config`` (ModelConfig), ``checkpoint`` (HF-format folders), and the engine's paths ``paged`` (packed batches
over a paged KV cache), ``paged_triton`` (its CUDA kernel) and ``cpu_linear`` (oneDNN linears on the CPU).

    from rollart.models import load_model, load_tokenizer, save_model, ModelConfig, CausalLM
    model = load_model(path)        # HF-format folder: config.json + *.safetensors
    logits = model(input_ids)       # (B, T) -> (B, T, V)
"""
from rollart.models.checkpoint import load_model, load_state_dict, load_tokenizer, load_weights, save_model
from rollart.models.config import ModelConfig
from rollart.models.transformer import CausalLM

__all__ = ["CausalLM", "ModelConfig", "load_model", "load_state_dict", "load_tokenizer", "load_weights", "save_model"]
