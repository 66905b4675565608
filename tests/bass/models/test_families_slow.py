"""Each family against transformers' own implementation: incremental decoding through the KV cache (fork, ragged
steps, truncate, select) gives the logits of the full forward. The slow part of test_families.py."""

from __future__ import annotations

import pytest
import torch
from families import TOL, VOCAB, hf_logits, pad

from kernels.reference import ragged_attention_ref

pytestmark = pytest.mark.slow  # incremental decoding through the cache, every family


def test_incremental_decoding_matches_full_forward(pair):
    """Prefill 2 prompts, fork 3 samples each, decode ragged steps with a rollback and an eviction."""
    name, hf, loaded, folder = pair
    model = loaded.model
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31 - 1, ())))
    prompts = [torch.randint(0, VOCAB, (n,), generator=gen).tolist() for n in (9, 3)]
    cache = model.new_cache(2, 16)
    tokens, q_len = pad(prompts, gen)
    last = model(tokens, cache, q_len, ragged_attention_ref, last_only=True)
    for b, prompt in enumerate(prompts):
        torch.testing.assert_close(last[b, 0], hf_logits(hf, prompt)[-1], atol=TOL, rtol=0)

    cache = cache.fork(3, 24)
    seqs = [list(prompts[b // 3]) for b in range(6)]

    def step(q_lens: list[int]) -> None:
        new = [torch.randint(0, VOCAB, (q,), generator=gen).tolist() for q in q_lens]
        tokens, q_len = pad(new, gen)
        out = model(tokens, cache, q_len, ragged_attention_ref)
        for b, toks in enumerate(new):
            seqs[b] += toks
            if toks:
                ref = hf_logits(hf, seqs[b])[-len(toks):]
                torch.testing.assert_close(out[b, : len(toks)], ref, atol=TOL, rtol=0, msg=f"{name} seq {b}")

    step([3, 1, 2, 4, 1, 2])
    step([1, 1, 1, 1, 1, 1])
    step([2, 5, 1, 1, 3, 1])
    # Verify rejected some draft tokens: roll back each sequence by 0..3 suffix tokens.
    prompt_len = [len(prompts[b // 3]) for b in range(6)]
    keep = [max(0, len(s) - p - r) for s, p, r in zip(seqs, prompt_len, (0, 2, 3, 1, 0, 3))]
    cache.truncate(torch.tensor(keep, dtype=torch.int32))
    seqs = [s[: p + k] for s, p, k in zip(seqs, prompt_len, keep)]
    step([2, 1, 4, 1, 2, 3])
    # Sequences 1 and 4 finished: they leave the batch; a finished-but-not-yet-evicted row has q_len 0.
    live = [0, 2, 3, 5]
    cache = cache.select(torch.tensor(live))
    seqs = [seqs[i] for i in live]
    step([2, 0, 1, 3])
    step([1, 1, 1, 1])
    assert cache.suffix_len.tolist() == [len(s) - len(prompts[b // 3]) for s, b in zip(seqs, live)]
