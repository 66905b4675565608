"""Each family's tiny random transformers model, as the family tests build it (test_families*.py; the `pair`
fixture that loads one into our loader is in conftest.py)."""

from __future__ import annotations

import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers
from torch import nn

VOCAB = 160
TOL = 1e-4
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=256, eos_token_id=2, bos_token_id=1, pad_token_id=None)
CASES = {
    "llama": lambda: transformers.LlamaConfig(**COMMON, rope_theta=10000.0),
    "llama-tied-bias-rope3": lambda: transformers.LlamaConfig(
        **{**COMMON, "num_key_value_heads": 1}, tie_word_embeddings=True, attention_bias=True,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 16}),
    "mistral-window": lambda: transformers.MistralConfig(**COMMON, sliding_window=6),
    "qwen2": lambda: transformers.Qwen2Config(**COMMON, tie_word_embeddings=True),
    "qwen3": lambda: transformers.Qwen3Config(**COMMON, head_dim=24),
    "gemma3": lambda: transformers.Gemma3TextConfig(
        **COMMON, head_dim=16, sliding_window=5, query_pre_attn_scalar=24,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}}),
    "gemma3-softcap": lambda: transformers.Gemma3TextConfig(
        **COMMON, head_dim=16, sliding_window=4, query_pre_attn_scalar=16, final_logit_softcapping=5.0),
}


def save_tiny(folder, hf_config: transformers.PretrainedConfig, seed: int) -> nn.Module:
    """Random transformers model + a word-level tokenizer saved to `folder`; returns the model (eval)."""
    torch.manual_seed(seed)
    hf = transformers.AutoModelForCausalLM.from_config(hf_config, attn_implementation="eager").eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name:  # Gemma's (1 + w) norms start at w = 0: move them off it
                p.add_(0.3 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.3 * torch.randn_like(p))
            else:
                p.normal_(0.0, 0.15)
    hf.save_pretrained(folder)
    vocab = {f"w{i}": i for i in range(VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", bos_token="w1",
                                        eos_token="w2").save_pretrained(folder)
    return hf


def hf_logits(hf: nn.Module, seq: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf(torch.tensor([seq])).logits[0].float()  # [T, V]


def pad(rows: list[list[int]], gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad with random token ids (padding must not matter); returns tokens [B, T], q_len [B]."""
    T = max(1, max(len(r) for r in rows))
    tokens = torch.randint(0, VOCAB, (len(rows), T), generator=gen)
    for b, r in enumerate(rows):
        tokens[b, : len(r)] = torch.tensor(r, dtype=torch.long)
    return tokens, torch.tensor([len(r) for r in rows], dtype=torch.int32)
