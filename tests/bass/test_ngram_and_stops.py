"""Prompt-lookup drafting and the stop rule, on hand-made token streams."""

import torch

from bass.config import SamplingParams
from bass.decode.sequences import Sequence, StopRule
from bass.drafters.ngram import NgramDrafter
from bass.runtime.cache import KVCache


def test_ngram_takes_latest_longest_match():
    d = NgramDrafter(ngram_max=3, ngram_min=1)
    #        0  1  2  3  4  5  6  7  8  9
    hist = [5, 6, 7, 8, 1, 5, 6, 7, 9, 2, 5, 6, 7]
    # trigram (5,6,7) occurs at 0 and 5; the latest earlier one (5) continues with 9, 2, 5
    assert d.lookup(hist, 3) == [9, 2, 5]
    assert d.lookup(hist, 10) == [9, 2, 5, 6, 7]  # continuation stops at the history's end
    # no trigram or bigram match: falls back to the unigram 8 -> 4
    assert d.lookup([8, 4, 3, 2, 8], 2) == [4, 3]
    assert d.lookup([1, 2, 3], 4) == []  # nothing matches: propose nothing


def test_ngram_proposal_is_padded_and_ragged():
    cache = KVCache.allocate(1, 2, 8, 1, 4, torch.float32, "cpu")
    d = NgramDrafter(2, 1)
    prop = d.propose([[1, 2, 3, 1, 2], [7, 8, 9]], [2, 2], SamplingParams(), torch.zeros(2, 2), cache)
    assert prop.tokens.shape == (2, 2) and prop.lengths.tolist() == [2, 0] and prop.probs is None
    assert prop.tokens[0].tolist() == [3, 1]


class CharTokenizer:
    """Token i is chr(i); 0 is a special token that decodes to nothing."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids if i != 0)


def _seq(prompt="ab"):
    ids = [ord(c) for c in prompt]
    return Sequence(seq=0, prompt_index=0, sample_index=0, prompt_len=len(ids), history=ids)


def test_stop_string_cuts_tokens_and_text():
    rule = StopRule(CharTokenizer(), [0], SamplingParams(max_new_tokens=50, stop=("\ndef ",)))
    s = _seq()
    rule.extend(s, [ord(c) for c in "x = 1\n"])
    assert not s.finished and s.text == "x = 1\n"
    new = rule.extend(s, [ord(c) for c in "def f(): pass"])  # the stop string straddles two rounds
    assert s.finish_reason == "stop" and s.text == "x = 1" and new == ""
    assert "".join(map(chr, s.generated)) == "x = 1\ndef "  # tokens up to the one completing the stop


def test_eos_and_length():
    rule = StopRule(CharTokenizer(), [0], SamplingParams(max_new_tokens=4))
    s = _seq()
    rule.extend(s, [ord("y"), 0, ord("z")])
    assert s.finish_reason == "eos" and s.generated == [ord("y"), 0] and s.text == "y"
    s2 = _seq()
    rule.extend(s2, [ord(c) for c in "abcdef"])
    assert s2.finish_reason == "length" and len(s2.generated) == 4


def test_ignore_eos_runs_every_sequence_to_the_token_limit():
    rule = StopRule(CharTokenizer(), [0], SamplingParams(max_new_tokens=12, stop=("\ndef ",), ignore_eos=True))
    s = _seq()
    rule.extend(s, [ord("y"), 0, ord("z")])  # an EOS mid-round
    assert not s.finished and s.generated == [ord("y"), 0, ord("z")]
    rule.extend(s, [ord(c) for c in "\ndef g(): pass"])  # a stop string, and past the limit
    assert s.finish_reason == "length" and len(s.generated) == 12 and s.text == "yz\ndef g():"


def test_padded_ids_pads_ragged_rows_with_zeros():
    from bass.runtime.transfer import padded_ids

    got = padded_ids([[5, 6, 7], [8], []])
    assert got.dtype == torch.long and got.tolist() == [[5, 6, 7], [8, 0, 0], [0, 0, 0]]
    assert padded_ids([[1], [2, 3]], width=4).tolist() == [[1, 0, 0, 0], [2, 3, 0, 0]]
    assert padded_ids([[], []]).shape == (2, 0)
