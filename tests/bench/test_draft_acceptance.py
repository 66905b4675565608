"""bench/draft_acceptance.py on tiny CPU models: its rows, its arithmetic, and a draft that cannot miss."""


import pytest


def test_positions_are_tallied_from_proposed_and_accepted_counts():
    """Position s is tested by a round that proposed at least s drafts and accepted the s - 1 before it, and
    passed when it accepted s or more; positions past the table's length are not counted."""
    import bench.draft_acceptance as da

    reached, passed = [0] * 3, [0] * 3
    # (proposed, accepted): all three accepted; the first rejected; the second rejected; two of two (a round cut
    # at the token limit); five proposed, four accepted, against a table of three positions
    da.tally_positions(reached, passed, [(3, 3), (3, 0), (3, 1), (2, 2), (5, 4)])
    assert reached == [5, 4, 2] and passed == [4, 3, 2]


def test_a_draft_length_below_one_is_refused(tmp_path, capsys):
    import bench.draft_acceptance as da

    for bad in ("0,2", "3,x"):
        with pytest.raises(SystemExit):
            da.main(["--draft-length", bad, "--out", str(tmp_path / "a.json")])
        assert f"--draft-length takes lengths of at least 1, e.g. 5 or 1,2,3; got {bad!r}" in capsys.readouterr().err
