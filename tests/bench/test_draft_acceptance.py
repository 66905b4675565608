"""bench/draft_acceptance.py on tiny CPU models: its rows, its arithmetic, and a draft that cannot miss."""

import json

from tiny import make_model


def test_a_copy_of_the_target_accepts_every_greedy_draft(tmp_path, capsys):
    """A draft with the target's own weights proposes the target's argmax, so greedy acceptance is exactly 1
    and a round emits L + 1 tokens until the token limit cuts it; a second draft temperature adds a sampled
    row of its own; every row's acceptance is its accepted over proposed counts."""
    import draft_acceptance as da

    target = make_model(tmp_path / "target", seed=0)
    copy = make_model(tmp_path / "copy", seed=0)
    other = make_model(tmp_path / "other", seed=3)
    out = tmp_path / "acceptance.json"
    L, tokens = 2, 7
    da.main(["--target", str(target), "--drafts", f"copy={copy}", f"other={other}", "--baselines", "ngram",
             "--draft-length", str(L), "--max-new-tokens", str(tokens), "--limit", "2", "--batch-seqs", "8",
             "--backend", "torch", "--draft-temperatures", "1,0.5", "--out", str(out)])
    res = json.loads(out.read_text())
    assert res["draft_length"] == L and res["device"].startswith("CPU")
    rows = {(r["prompts"], r["mode"], r["drafter"]): r for r in res["rows"]}
    sets = {r["prompts"] for r in res["rows"]}
    assert sets == {"humaneval", "heldout-code"} and all(r["n"] == 2 for r in res["rows"])
    for s in sets:
        assert {d for p, m, d in rows if p == s and m == "greedy"} == {"copy", "other", "ngram"}
        assert {d for p, m, d in rows if p == s and m != "greedy"} == {"copy", "copy x0.5T", "other",
                                                                       "other x0.5T", "ngram"}
        greedy = rows[(s, "greedy", "copy")]
        assert greedy["proposed"] > 0 and greedy["accepted"] == greedy["proposed"] and greedy["acceptance"] == 1.0
        assert 1.0 < greedy["tokens_per_round"] <= L + 1
    for r in res["rows"]:
        assert r["acceptance"] == (r["accepted"] / r["proposed"] if r["proposed"] else 0.0)
        assert r["draft_temperature"] == ({"copy": 1.0, "other": 1.0}.get(r["drafter"])
                                          or (0.5 if r["drafter"].endswith("x0.5T") else None))
    assert any(rows[k]["acceptance"] < 1.0 for k in rows if k[2] == "other")  # another model does miss
    assert capsys.readouterr().out.splitlines()[-1].split()[0] in sets  # the table is printed last
