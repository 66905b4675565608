"""Incremental detokenization in the stop rule: the streamed text equals decoding everything at once.

Real tokenizers of both embedded models (byte-level BPE for Qwen, SentencePiece-style with byte fallback
for Gemma), text with multi-byte characters, tokens fed in random-sized rounds as the round loop does.
"""

import random

import pytest
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from bass.config import SamplingParams
from bass.decode.sequences import Sequence, StopRule, fast_decoder
from bass.models.embedded import prepare

pytestmark = pytest.mark.embedded

TEXT = ("def grüße(name: str) -> str:\n    # 你好, naïve café 🙂\n    return f'¡Hola {name}!'  # ünïcödé\n"
        "\n\nclass Ωmega:\n    pass\n")


def metaspace_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """Llama-style: SentencePiece's metaspace, whose decoder drops the space of a text's first token, so a
    slice decoded on its own loses a space that the whole text keeps."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
    tok.decoder = decoders.Metaspace(prepend_scheme="first")
    tok.train_from_iterator([TEXT] * 4, trainers.BpeTrainer(vocab_size=120, show_progress=False))
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok)


@pytest.fixture(scope="module", params=["embedded", "gemma3-270m", "metaspace"])
def tokenizer(request):
    if request.param == "metaspace":
        return metaspace_tokenizer()
    return transformers.AutoTokenizer.from_pretrained(prepare(request.param))


def _stream(tokenizer, ids, params, seed):
    rule = StopRule(tokenizer, [], params)
    seq = Sequence(seq=0, prompt_index=0, sample_index=0, prompt_len=0, history=[])
    rng, i, pieces = random.Random(seed), 0, []
    while i < len(ids) and not seq.finished:
        n = rng.randint(1, 6)
        pieces.append(rule.extend(seq, ids[i:i + n]))
        i += n
    return seq, pieces


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_streamed_text_equals_full_decode(tokenizer, seed):
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    seq, pieces = _stream(tokenizer, ids, SamplingParams(max_new_tokens=len(ids)), seed)
    full = tokenizer.decode(ids, skip_special_tokens=True)
    assert seq.text == full and "".join(pieces) == full
    assert "\ufffd" not in "".join(pieces)  # incomplete characters were held back, never shown broken


def test_stop_string_with_incremental_text(tokenizer):
    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    seq, _ = _stream(tokenizer, ids, SamplingParams(max_new_tokens=len(ids), stop=("\nclass ",)), 3)
    assert seq.finish_reason == "stop"
    assert seq.text == TEXT[:TEXT.index("\nclass ")]
    # the kept tokens are the shortest prefix whose text holds the stop string
    kept = seq.generated
    assert "\nclass " in tokenizer.decode(kept) and "\nclass " not in tokenizer.decode(kept[:-1])


def test_fast_decoder_gives_the_tokenizers_text(tokenizer):
    decode = fast_decoder(tokenizer)
    ids = tokenizer.encode(TEXT) + [t for t in (tokenizer.eos_token_id, tokenizer.bos_token_id) if t is not None]
    rng = random.Random(0)
    for _ in range(300):  # slices, special tokens included, and arbitrary ids (partial characters)
        a = rng.randrange(len(ids))
        piece = ids[a:a + rng.randint(1, 8)] + rng.sample(range(len(tokenizer)), 2)
        assert decode([piece]) == [tokenizer.decode(piece, skip_special_tokens=True)]
    pieces = [ids[:3], ids[3:9], [], ids[-2:]]  # several rows in one call: each its own text
    assert decode(pieces) == [tokenizer.decode(p, skip_special_tokens=True) for p in pieces]


def test_fast_decoder_falls_back_when_spaces_are_cleaned_up():
    tok = metaspace_tokenizer()
    tok.clean_up_tokenization_spaces = True  # not a plain Rust decode any more: go through transformers
    ids = tok.encode("a , b .")
    assert fast_decoder(tok)([ids]) == [tok.decode(ids, skip_special_tokens=True)]
    assert fast_decoder(tok).__name__ == "slow"
