"""Load a model by spec: an embedded name, an HF-format folder, a .gguf file or a hub id.

Every route ends in an HF-format folder (config.json + *.safetensors + tokenizer files) that is read into
our own implementation (`bass.models.llama.Transformer` or `bass.models.gemma3.Gemma3`); GGUF files
are dequantized once into such a folder under `$BASS_CACHE` (see `bass.models.embedded`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from bass.models.advice import folder_advice, hub_advice
from bass.models.config import ModelConfig
from bass.models.embedded import EMBEDDED, Progress, prepare, prepare_gguf
from bass.models.gemma3 import Gemma3
from bass.models.layers import fuse_hf_state_dict
from bass.models.llama import Transformer

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to run: our module (eval mode, no grad), its tokenizer, config and display name."""

    model: nn.Module
    tokenizer: object  # a transformers PreTrainedTokenizerBase
    config: ModelConfig
    name: str


def model_class(config: ModelConfig) -> Callable[[ModelConfig], nn.Module]:
    """The implementation of a config's family."""
    return Gemma3 if config.family == "gemma3" else Transformer


def load_model(spec: str, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
               progress: Progress | None = None) -> LoadedModel:
    """Load `spec`: "embedded", "gemma3-270m", an HF-format folder, a .gguf file, or a hub id.

    Raises ValueError saying what to do when the spec names nothing loadable.
    """
    folder, name = _resolve(spec, progress)
    config = read_config(folder)
    # transformers parses a large tokenizer.json in Python (seconds for Gemma's 262k tokens): do it while
    # the weights are read, which mostly runs outside the GIL.
    with ThreadPoolExecutor(max_workers=1) as pool:
        tokenizer_job = pool.submit(_load_tokenizer, folder, spec)
        model = _build_empty(config)
        state = fuse_hf_state_dict(_read_safetensors(folder, dtype, torch.device(device), progress), config)
        try:
            model.load_state_dict(state, strict=True, assign=True)
        except RuntimeError as err:
            raise ValueError(f"the weights in {folder} do not fit its config.json ({config.family}): {err}") from err
        model = model.eval().requires_grad_(False)
        tokenizer = tokenizer_job.result()
    if tokenizer.eos_token_id is not None:
        config = config.with_(eos_token_ids=tuple(sorted({*config.eos_token_ids, tokenizer.eos_token_id})))
    model.config = config
    return LoadedModel(model=model, tokenizer=tokenizer, config=config, name=name)


def read_config(folder: str | Path) -> ModelConfig:
    """ModelConfig of an HF folder; end-of-sequence ids also from generation_config.json."""
    folder = Path(folder)
    hf = json.loads((folder / "config.json").read_text())
    config = ModelConfig.from_hf(hf)
    gen_path = folder / "generation_config.json"
    if gen_path.exists():
        gen_eos = json.loads(gen_path.read_text()).get("eos_token_id")
        if gen_eos is not None:
            gen_eos = gen_eos if isinstance(gen_eos, list) else [gen_eos]
            config = config.with_(eos_token_ids=tuple(sorted(set(config.eos_token_ids) | set(gen_eos))))
    return config


def check_same_vocab(target: LoadedModel, draft: LoadedModel) -> None:
    """Refuse a draft whose tokenizer differs from the target's (its token ids would mean other things).

    The tokenizers are compared, not `vocab_size`: a family's large models often pad the embedding
    (Qwen2.5-7B: 152064 rows, 0.5B: 151936) while sharing one tokenizer; the engine should compare
    logits over the first min(V_target, V_draft) columns.
    """
    if target.tokenizer.get_vocab() != draft.tokenizer.get_vocab():
        raise ValueError(
            f"draft vocabulary ({len(draft.tokenizer)}, {draft.name}) differs from target vocabulary "
            f"({len(target.tokenizer)}, {target.name}): choose a draft from the target's family")


def build_random(config: ModelConfig, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                 seed: int = 0) -> nn.Module:
    """Our model with random weights, drawn on `device` (reproducible for a given device and seed).

    Linear and embedding weights ~ N(0, 0.02^2), biases 0, norm weights at their identity (1, or 0 for
    Gemma's (1 + w) norms): transformers' own initialisation, so `to_hf_state_dict` gives the same model.
    """
    model = _build_empty(config).to_empty(device=device).to(dtype)
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.fill_(0.0 if config.family == "gemma3" else 1.0)
            elif name.endswith("bias"):
                param.zero_()
            else:
                param.normal_(0.0, 0.02, generator=generator)
    return model.eval().requires_grad_(False)


def to_hf_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Our weights under transformers' names (q/k/v and gate/up split again), for `*ForCausalLM.load_state_dict`."""
    config: ModelConfig = model.config
    out: dict[str, torch.Tensor] = {}
    q_size, kv_size = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    for name, tensor in model.state_dict().items():
        hf_name = name if name.startswith("lm_head") else f"model.{name}"
        if ".qkv_proj." in name:
            for proj, part in zip("qkv", tensor.split((q_size, kv_size, kv_size), dim=0)):
                out[hf_name.replace("qkv_proj", f"{proj}_proj")] = part
        elif ".gate_up_proj." in name:
            gate, up = tensor.chunk(2, dim=0)
            out[hf_name.replace("gate_up_proj", "gate_proj")] = gate
            out[hf_name.replace("gate_up_proj", "up_proj")] = up
        else:
            out[hf_name] = tensor
    if config.tie_word_embeddings:
        out["lm_head.weight"] = out["model.embed_tokens.weight"]
    return out


def _build_empty(config: ModelConfig) -> nn.Module:
    with torch.device("meta"):  # no memory and no init: the weights are assigned right after
        return model_class(config)(config)


def _resolve(spec: str, progress: Progress | None) -> tuple[Path, str]:
    """(HF folder, display name) of a spec, preparing or downloading it when needed."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"model spec must be a non-empty string, got {spec!r}")
    if spec in EMBEDDED:
        return prepare(spec, progress=progress), spec
    path = Path(spec).expanduser()
    if path.is_dir():
        _check_folder(path, spec)
        return path, path.name
    if path.is_file():
        if path.suffix != ".gguf":
            raise ValueError(f"model spec {spec!r} is a file but not a .gguf: pass a .gguf file or an HF-format "
                             f"folder (config.json + *.safetensors + tokenizer files)")
        return prepare_gguf(path, progress=progress), path.stem
    if spec.startswith(("/", ".", "~")) or spec.endswith(".gguf") or spec.count("/") > 1:
        raise ValueError(f"model path {spec!r} does not exist: pass an existing HF-format folder or .gguf file, "
                         f"or one of {sorted(EMBEDDED)}")
    if HUB_ID.match(spec):
        folder = _download(spec)
        _check_folder(folder, spec)
        return folder, spec.split("/")[-1]
    raise ValueError(f"model spec {spec!r} is not one of {sorted(EMBEDDED)}, an existing folder or .gguf file, "
                     f"or a hub id like 'Qwen/Qwen2.5-Coder-0.5B-Instruct'")


def _check_folder(folder: Path, spec: str) -> None:
    missing = []
    if not (folder / "config.json").exists():
        missing.append("config.json")
    if not any(folder.glob("*.safetensors")):
        missing.append("*.safetensors")
    if not any((folder / f).exists() for f in TOKENIZER_FILES):
        missing.append("tokenizer files (tokenizer.json or tokenizer_config.json + vocabulary)")
    if missing:
        raise ValueError(f"model folder {spec!r} lacks {', '.join(missing)}: {folder_advice(spec)}")


def _download(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, allow_patterns=["*.json", "*.safetensors", "tokenizer*", "*.txt",
                                                                "*.model", "*.tiktoken"]))
    except Exception as err:  # offline, unknown repo, gated repo: all end the same way for the user
        reason = str(err).splitlines()[0] if str(err) else ""
        raise ValueError(f"could not reach hub model {repo_id!r} ({type(err).__name__}: {reason}): "
                         f"{hub_advice(repo_id)}") from err


def _load_tokenizer(folder: Path, spec: str) -> object:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder))
    except Exception as err:
        raise ValueError(f"could not load the tokenizer of model {spec!r} from {folder} ({err}): copy the "
                         f"tokenizer files (tokenizer.json, tokenizer_config.json) next to config.json") from err


def _read_safetensors(folder: Path, dtype: torch.dtype, device: torch.device,
                      progress: Progress | None = None) -> dict[str, torch.Tensor]:
    """All tensors of the folder's safetensors file(s), copied onto `device` in `dtype`; `progress` hears
    ("loading weights", share of the files' bytes read) from 0 to 1, at most every percent.

    The copy is deliberate even on the CPU: left memory-mapped, weights can be evicted from the page
    cache under memory pressure and silently re-read from disk on every forward. Each tensor is read
    through a mapping of its own, closed once it is copied: a mapping held over the whole file keeps
    every page read resident in this process beside the copies, twice the model's size at the end of the
    read (14 GB for the embedded target in float32).
    """
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))  # one file or the shards of an index
    total = sum(f.stat().st_size for f in files) or 1
    report = progress or (lambda stage, fraction: None)
    report("loading weights", 0.0)
    state: dict[str, torch.Tensor] = {}
    done, told = 0, 0.0
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            names = list(f.keys())
        for name in names:
            with safe_open(str(file), framework="pt") as f:
                tensor = f.get_tensor(name)
                state[name] = tensor.to(device=device, dtype=dtype, copy=True)
            done += tensor.numel() * tensor.element_size()
            del tensor
            if done / total - told >= 0.01:
                told = min(1.0, done / total)
                report("loading weights", told)
    report("loading weights", 1.0)
    return state
