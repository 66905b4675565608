"""Our compact decoders (Llama family, Gemma 3), their loader and the offline embedded models.

    loaded = load_model("embedded")            # or "gemma3-270m", a folder, a .gguf file, a hub id
    cache = loaded.model.new_cache(batch, capacity)
    logits = loaded.model(tokens, cache, q_len, attn)
"""

from bass.models.config import ModelConfig
from bass.models.loader import LoadedModel, build_random, check_same_vocab, load_model

__all__ = ["LoadedModel", "ModelConfig", "build_random", "check_same_vocab", "load_model"]
