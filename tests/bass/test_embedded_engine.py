"""Greedy exactness on the embedded default (Qwen2.5-Coder-1.5B-Instruct): BASS == regular decoding."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.embedded


def test_bass_equals_regular_on_the_embedded_model(embedded_engine, embedded_greedy):
    prompts, params, regular = embedded_greedy  # (the shipped draft's case: test_shipped_draft.py)
    assert "return" in regular.candidates[0].text or "if" in regular.candidates[0].text  # real code
    for drafter in ("ngram", "layer-skip"):
        bass = embedded_engine.generate(prompts, k=1, params=params, method="bass", drafter=drafter)
        assert bass.token_ids == regular.token_ids, drafter


def test_cli_prints_one_json_object(tmp_path):
    prompt = tmp_path / "p.py"
    prompt.write_text('def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n')
    # the small model: a second copy of the 1.5B model beside the fixture's would double the memory
    out = subprocess.run([sys.executable, "-m", "bass", "generate", "--prompt-file", str(prompt), "-k", "2",
                          "--target", "gemma3-270m", "--max-new-tokens", "8", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)  # exactly one JSON document
    assert set(data) == {"candidates", "stats"}
    assert [(c["prompt_index"], c["sample_index"]) for c in data["candidates"]] == [(0, 0), (0, 1)]
    for c in data["candidates"]:
        assert 1 <= len(c["token_ids"]) <= 8 and c["finish_reason"] in ("length", "eos", "stop")
        assert set(c["stats"]) >= {"tokens", "rounds", "acceptance_rate", "ms_per_token"}
    assert data["stats"]["method"] == "bass" and data["stats"]["num_sequences"] == 2


def test_cli_reports_bad_input_without_a_traceback(tmp_path):
    empty = tmp_path / "empty.py"
    empty.write_text("   \n")
    out = subprocess.run([sys.executable, "-m", "bass", "generate", "--prompt-file", str(empty), "--target",
                          "gemma3-270m", "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 2
    assert "prompt 0 is empty" in out.stderr and "Traceback" not in out.stderr

