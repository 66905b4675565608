"""The embedded target's shipped draft: loaded by default, exact under greedy decoding, and refused
with a rebuild hint when its file is missing or corrupt."""

import shutil

import pytest

from bass.models.draft import DRAFT_FILE, DRAFT_SHA256, shipped_draft
from bass.models.feature_draft import FeatureDraft

pytestmark = pytest.mark.embedded


@pytest.fixture
def engine(embedded_engine):
    return embedded_engine


def test_the_shipped_draft_is_the_default(engine):
    assert engine.draft is not None and engine.default_drafter == "model"
    assert engine.draft.config.vocab_size == engine.target.config.vocab_size
    assert isinstance(engine.draft.model, FeatureDraft)  # it reads the target's features and uses its tables
    assert sum(p.numel() for p in engine.draft.model.parameters()) < 10_000_000  # its own weights only


def test_greedy_bass_with_the_shipped_draft_equals_regular(engine, embedded_greedy):
    prompts, params, regular = embedded_greedy
    bass = engine.generate(prompts, k=1, params=params, method="bass", drafter="model")
    assert bass.token_ids == regular.token_ids
    assert bass.stats.drafter == "model" and bass.stats.accepted > 0  # the draft was used, and it helped


def test_missing_or_corrupt_draft_file_says_how_to_rebuild(engine, tmp_path):
    with pytest.raises(ValueError, match="missing.*draft_training"):
        shipped_draft(engine.target.model, tmp_path / "absent.safetensors", DRAFT_SHA256)
    bad = tmp_path / "draft.safetensors"
    shutil.copy(DRAFT_FILE, bad)
    with open(bad, "r+b") as f:  # flip one byte in the middle of the weights
        f.seek(bad.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ValueError, match="corrupt.*draft_training"):
        shipped_draft(engine.target.model, bad, DRAFT_SHA256)
