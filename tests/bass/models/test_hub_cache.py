"""A hub id served offline from a Hugging Face cache in the hub's own layout, through the code that downloads it online.

The cache is written as `huggingface_hub` writes it (`models--ORG--NAME/blobs/<sha256>`, `snapshots/<rev>/<file>`
linking to the blob, `refs/main` naming the revision) with two revisions of a tiny random model; a fresh process
with HF_HUB_OFFLINE=1 (read by `huggingface_hub` at import) then loads the hub id with `load_model` and serves it
with the `Engine`. Both must see the revision `refs/main` names, token for token the model saved there.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from tiny import make_model

REPO = Path(__file__).resolve().parents[3]
HUB_ID = "bass-tests/tiny-coder"
OLD_REV, MAIN_REV = "1" * 40, "2" * 40

# Runs in a fresh process, so that huggingface_hub reads HF_HUB_OFFLINE and HF_HUB_CACHE at import.
CHILD = """
import json, sys
import torch
from bass import Engine, EngineConfig, SamplingParams
from bass.models.loader import _resolve, load_model

hub_id, folder, missing = sys.argv[1:4]
resolved, name = _resolve(hub_id, None)
by_id, by_folder = load_model(hub_id), load_model(folder)
same = all(torch.equal(a, b) for a, b in zip(by_id.model.state_dict().values(), by_folder.model.state_dict().values()))
params = SamplingParams(temperature=0.0, max_new_tokens=12)
tokens = [Engine(EngineConfig(target=t, draft=None, drafter="ngram", device="cpu")).generate(
    "def add(a, b):", k=1, params=params).candidates[0].token_ids for t in (hub_id, folder)]
try:
    load_model(missing)
    error = ""
except ValueError as err:
    error = str(err)
print(json.dumps({"resolved": str(resolved), "name": name, "same_weights": same, "tokens": [list(t) for t in tokens],
                  "missing_error": error}))
"""


def write_hub_cache(cache: Path, repo_id: str, revisions: dict[str, Path], main: str) -> Path:
    """Lay `revisions` (revision → a model folder) out as the hub's cache of `repo_id`; `refs/main` names `main`."""
    storage = cache / f"models--{repo_id.replace('/', '--')}"
    (storage / "blobs").mkdir(parents=True)
    for revision, source in revisions.items():
        snapshot = storage / "snapshots" / revision
        snapshot.mkdir(parents=True)
        for file in sorted(source.iterdir()):
            data = file.read_bytes()
            blob = storage / "blobs" / hashlib.sha256(data).hexdigest()
            blob.write_bytes(data)
            (snapshot / file.name).symlink_to(os.path.relpath(blob, snapshot))
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text(main)
    return storage


def test_a_hub_id_loads_and_serves_offline_from_the_cache_revision_main_names(tmp_path):
    old, new = make_model(tmp_path / "old", seed=1), make_model(tmp_path / "new", seed=2)
    storage = write_hub_cache(tmp_path / "hub", HUB_ID, {OLD_REV: old, MAIN_REV: new}, main=MAIN_REV)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home"),
           "HF_HUB_CACHE": str(tmp_path / "hub"), "BASS_CACHE": str(tmp_path / "bass-cache")}
    env.pop("SPACE_ID", None)
    done = subprocess.run([sys.executable, "-c", CHILD, HUB_ID, str(new), "bass-tests/not-in-the-cache"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(got["resolved"]) == storage / "snapshots" / MAIN_REV and got["name"] == "tiny-coder"
    assert got["same_weights"], "the hub id loaded other weights than the revision refs/main names"
    by_id, by_folder = got["tokens"]
    assert by_id == by_folder and len(by_id) > 0
    # a hub id the cache lacks: the advice is a command the pinned huggingface_hub installs
    assert "could not reach hub model 'bass-tests/not-in-the-cache'" in got["missing_error"]
    assert "`hf download bass-tests/not-in-the-cache --local-dir DIR`" in got["missing_error"]
