"""Tiny random models of each family, saved in HF format with a small byte-level BPE tokenizer.

Weights are transformers' own random initialisation, with the LM head scaled up so the logits are
peaked like a trained code model's (greedy ties between tokens would make exactness tests flaky).
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "for i in range(10):\n    print(i * i)\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n",
] * 20

VOCAB = 384


def make_tokenizer(folder: Path, vocab: int = VOCAB) -> transformers.PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")
    fast.save_pretrained(folder)
    return fast


def hf_config(family: str, vocab: int = VOCAB) -> transformers.PretrainedConfig:
    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, eos_token_id=0,
                  bos_token_id=None, pad_token_id=None, tie_word_embeddings=False)
    if family == "llama":
        return transformers.LlamaConfig(**common)
    if family == "qwen2":
        return transformers.Qwen2Config(**common)
    if family == "qwen3":
        return transformers.Qwen3Config(head_dim=16, **common)
    if family == "gemma3":
        return transformers.Gemma3TextConfig(head_dim=16, sliding_window=8, query_pre_attn_scalar=16,
                                             layer_types=["sliding_attention", "full_attention"] * 2, **common)
    raise ValueError(family)


def make_model(folder: Path, family: str = "llama", seed: int = 0, head_scale: float = 30.0,
               vocab: int = VOCAB) -> Path:
    """Save a tiny random `family` model (with tokenizer) to `folder` and return it."""
    folder.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer(folder, vocab)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(hf_config(family, len(tok)))
    with torch.no_grad():
        model.lm_head.weight.mul_(head_scale)
    model.save_pretrained(folder)
    return folder
