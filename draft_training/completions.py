"""Stage 2: the target's own completions of the corpus prompts, sampled as the app samples (T 0.8, top-p 0.95).

A draft is judged on what the target writes, so it is trained on that too: each prompt (completion or chat
style) is run through the project's engine with regular batched decoding, and prompt + completion ids are
appended to `completions.bin` (uint32, separated by the end-of-text id), the format of the corpus.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from bass import Engine, SamplingParams
from bass.config import HUMANEVAL_STOPS
from draft_training.prompts import read_prompts


def generate_completions(engine: Engine, prompts_path: Path, out: Path, *, samples: int = 2,
                         max_new_tokens: int = 160, batch_rows: int = 64, seed: int = 0,
                         end_of_text: int | None = None, limit: int | None = None) -> dict:
    """Write `out` (ids) and `out`.jsonl (a readable sample); return counts and timings.

    Each batch holds `batch_rows // samples` prompts, so that `samples` completions of each fill `batch_rows`
    sequences: decoding is bound by reading the weights, so more completions per prompt cost little more time
    as long as the batch stays within the engine's largest captured bucket (`bass.runtime.graphs.BATCH_BUCKETS`).
    """
    if samples < 1 or batch_rows < 1:
        raise ValueError(f"samples and batch_rows must be >= 1, got {samples} and {batch_rows}")
    batch_prompts = max(1, batch_rows // samples)
    t0 = time.perf_counter()
    prompts = read_prompts(prompts_path)
    if limit is not None:  # half of each style, as the corpus stage chose them
        prompts = ([p for p in prompts if p["style"] == "completion"][:limit // 2]
                   + [p for p in prompts if p["style"] == "chat"][:limit - limit // 2])
    eot = end_of_text if end_of_text is not None else engine.tokenizer.eos_token_id
    chunks: list[np.ndarray] = []
    texts, generated = [], 0
    for style in ("completion", "chat"):
        group = [p["prompt"] for p in prompts if p["style"] == style]
        stop = HUMANEVAL_STOPS if style == "completion" else ()
        for i in range(0, len(group), batch_prompts):
            batch = group[i:i + batch_prompts]
            params = SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=max_new_tokens, stop=stop,
                                    seed=seed + i)
            ids = [p[-768:] for p in engine.encode(batch, chat=style == "chat")]  # bound prefill memory
            result = engine.generate(ids, k=samples, params=params, method="regular")
            for cand in result.candidates:
                chunks.append(np.asarray(ids[cand.prompt_index] + list(cand.token_ids) + [eot], dtype=np.uint32))
                generated += len(cand.token_ids)
            if len(texts) < 32:
                texts.append({"style": style, "prompt": batch[0], "completion": result.candidates[0].text})
    ids = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.uint32)
    ids.tofile(out)
    out.with_suffix(".jsonl").write_text("".join(json.dumps(t) + "\n" for t in texts))
    return {"prompts": len(prompts), "samples": samples, "tokens": int(ids.size), "generated_tokens": generated,
            "seconds": round(time.perf_counter() - t0, 1)}
