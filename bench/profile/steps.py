"""What a decode step and a BASS round cost on this device, piece by piece (real weights).

    python -m bench.profile steps --target embedded --k 8 --out bench/results/
    python -m bench.profile steps --target tiny-folder --k 2 --max-new-tokens 8 (CPU plumbing)

Four views of the same engine, one model load:

  forward     the target's forward at batch k and width T = 1 .. (a verify of L = T - 1 drafts), replayed
              back to back with no host sync: the device time of the (graphed) forward alone;
  rule        top-p processing + the accept/resample rule of those logits launched eagerly (host-bound on
              a GPU), and forward + rule as the round runs them (one graph on CUDA); the rule alone in a
              graph of its own, as `VerifyRule` computes it (over the sorted top-p candidates,
              `bass.decode.verify.verify_top_p`) and as the dense reference does (`verify_sampled` over the
              processed vocabulary), side by side;
  rounds      `profile_round.round_breakdown` of whole rounds (wall = drafter + verify + host) for regular
              decoding and BASS under fixed L = 1 and L = 3 (the default), with torch.profiler tables per config;
  pipelined   `profile_round.pipelined_round`: rounds as the engine really runs them (look-ahead at its
              default, no syncs inside), at each k of --pipelined-ks, for regular decoding and BASS under
              fixed L = 1 and fixed L = 3: wall ms per round of the decode, the GPU's busy ms per round
              (the union of its kernel / copy intervals: overlaps count once) and idle = wall - busy, the
              time the GPU waits for the host; ms/tok/seq = wall ms / (new tokens / sequences); ahead = the
              share of rounds launched before the round before them was read (`launches_counted`). Top
              kernels and host ops per round go to profile_pipelined_<config>_k<k>.txt.

The difference between a round's wall time and (forward + rule) is what the host adds on the
critical path of rounds run one after another (look-ahead off: `round_breakdown` synchronises around each
forward): launches not hidden behind the GPU, the round's sync, bookkeeping, Python. Look-ahead hides
some of it behind the previous round's device work: what it cannot hide is the pipelined view's idle time.
The profiler's own per-op cost lands in idle too: the "plain" column is the unprofiled run's ms/round.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from bass.config import DraftLengthConfig, EngineConfig, SamplingParams
from bass.decode.rules import run_then, verify_rule
from bass.decode.sampling import process_logits_deferred
from bass.decode.verify import verify_sampled
from bass.engine import Engine
from bass.runtime.attention import get_backend
from bass.runtime.device import device_line
from bass.runtime.prefill_graphs import prefill
from bench.common import engine_parser, graphed, profiler_tables, timed_ms
from bench.profile.rounds import pipelined_round, round_breakdown


def dense_rule(params: SamplingParams):
    """The verify rule computed over the whole processed vocabulary (`verify_sampled`, the reference that
    `VerifyRule` computed before it moved to the sorted candidates)."""
    def rule(logits, drafts, draft_len, u_accept, u_sample, draft_probs=None, draft_ids=None):
        probs = process_logits_deferred(logits, params)[0]
        return verify_sampled(drafts, draft_len, draft_probs, probs, u_accept, u_sample, draft_ids)
    return rule


def forward_and_sampling(engine: Engine, prompt: str, k: int, params: SamplingParams, widths: list[int],
                         reps: int, out: Path) -> list[dict]:
    """Per width T, ms of: the target forward [k, T] on a prefilled cache; the verify rule (top-p and
    accept/resample, `bass.decode.rules.VerifyRule`) on its logits, launched eagerly; and both together as the round
    runs them (`run_then`: one graph on CUDA). torch.profiler's tables of ten eager steps at T = 1 go to
    `out/profile_step_eager.txt`."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    attn = get_backend(engine.backend, engine.device)
    rule, dense, dev = verify_rule(params), dense_rule(params), engine.device
    rows = []
    with torch.inference_mode():
        ids = engine.encode(prompt)
        _, prefilled, _ = prefill(engine.target.model, engine.prefill_graphs, ids, attn)
        cache = engine.arena.fork(prefilled, k, 64, width=len(ids[0]))
        start = cache.suffix_len.clone()
        fwd = engine.target_forward
        for T in widths:
            tokens = torch.randint(0, min(1000, engine.target.config.vocab_size), (k, T), device=dev)
            q_len = torch.full((k,), T, dtype=torch.int32, device=dev)
            u = torch.rand(k, T, device=dev)
            args = (tokens[:, 1:], torch.full((k,), T - 1, device=dev), u[:, 1:], u[:, 0], None)

            def forward(tokens=tokens, q_len=q_len):
                logits = fwd(tokens, cache, q_len, attn)
                cache.truncate(start)
                return logits

            def verify(tokens=tokens, q_len=q_len, args=args):
                verdict = run_then(fwd, rule, args, tokens, cache, q_len, attn)
                cache.truncate(start)
                return verdict

            logits = forward()
            row = dict(k=k, width=T, forward_ms=timed_ms(forward, reps),
                       rule_eager_ms=timed_ms(lambda logits=logits, args=args: rule(logits, *args), reps),
                       verify_ms=timed_ms(verify, reps),
                       rule_graph_ms=timed_ms(graphed(lambda logits=logits, args=args: rule(logits, *args)), reps),
                       dense_rule_graph_ms=timed_ms(graphed(lambda logits=logits, args=args: dense(logits, *args)),
                                                  reps))
            rows.append(row)
            print(f"  k={k} T={T}: forward {row['forward_ms']:.3f} ms, rule (eager) {row['rule_eager_ms']:.3f} ms, "
                  f"forward + rule {row['verify_ms']:.3f} ms; rule alone, graphed: {row['rule_graph_ms']:.3f} ms "
                  f"(dense reference {row['dense_rule_graph_ms']:.3f} ms)", flush=True)
            if T == 1:  # the kernels of one step, eager (a graph replays the same ones without the launch gaps)
                with profile(activities=activities) as prof:
                    for _ in range(10):
                        rule(engine.target.model(tokens, cache, q_len, attn), *args)
                        cache.truncate(start)
                (out / "profile_step_eager.txt").write_text(profiler_tables(prof, rows=40))
    return rows


def _config(label: str, drafter: str | None, cfg: str | None) -> tuple[str, dict]:
    """A config's file-safe name and its generate kwargs: regular decoding (cfg None), or BASS under "fixed L=<n>"."""
    if cfg is None:
        return label, {}
    dl = DraftLengthConfig(policy="fixed", l0=int(cfg.split("=")[1]))
    return f"{drafter}_{cfg.replace(' ', '').replace('=', '')}", {"draft_length": dl}


def _ms(x: float | None, width: int) -> str:
    """`x` to 2 decimals in `width` columns, "-" where unknown."""
    return f"{'-':>{width}s}" if x is None else f"{x:{width}.2f}"


def pipelined_table(rows: list[dict]) -> list[str]:
    """The pipelined view's lines of step_costs.txt (module docstring)."""
    lines = ["pipelined (look-ahead as the engine runs)",
             "config            k  ms/round  gpu busy   idle  tok/round  mean L  ms/tok/seq  plain  ahead"]
    return lines + [f"{r['label']:16s} {r['k']:2d} {r['wall_ms_per_round']:9.2f} {_ms(r['gpu_busy_ms_per_round'], 9)} "
                    f"{_ms(r['idle_ms_per_round'], 6)} {r['tokens_per_round']:10.2f} {r['mean_draft_length']:7.2f} "
                    f"{_ms(r['ms_per_token_per_seq'], 11)} {r['plain_ms_per_round']:6.2f} "
                    f"{r['launched_ahead']:5.0%}" for r in rows]


def main(argv: list[str] | None = None) -> dict:
    p = engine_parser(__doc__)
    p.add_argument("--widths", default="1,2,3,4,6")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--max-new-tokens", type=int, default=48, help="tokens of each profiled generation")
    p.add_argument("--drafters", default=None, help="default: every drafter the engine offers but layer-skip")
    p.add_argument("--pipelined-ks", default=None, help="k values of the pipelined view, e.g. 8,32 (default: --k; "
                   "empty: none)")
    p.add_argument("--out", default="bench/results/")
    a = p.parse_args(argv)
    engine = Engine(EngineConfig(target=a.target, draft=None if a.draft == "none" else a.draft, drafter="auto",
                                 backend=a.backend))
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    from sandbox import load_humaneval

    prompt = load_humaneval()[0].prompt
    params = SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=a.max_new_tokens, seed=0)
    print(device_line(engine.device), flush=True)
    steps = forward_and_sampling(engine, prompt, a.k, params, [int(w) for w in a.widths.split(",")], a.reps, out)
    drafters = a.drafters.split(",") if a.drafters else [d for d in engine.available_drafters() if d != "layer-skip"]
    configs = [("regular", None, None)] + [(d, d, cfg) for d in drafters for cfg in
                                           ("fixed L=1", "fixed L=3")]
    rounds = []
    for label, drafter, cfg in configs:
        name, kw = _config(label, drafter, cfg)
        r = round_breakdown(engine, prompt, a.k, params, "regular" if drafter is None else "bass", drafter, out,
                            name, **kw)
        rounds.append(dict(r, policy=cfg))
    # a correctness spot check of the whole GPU path (graphs with the rules inside): greedy BASS and regular
    # decoding; bf16 GEMMs of other widths may break a near-tie, so this counts, it does not assert
    greedy = SamplingParams(max_new_tokens=a.max_new_tokens)
    want = engine.generate(prompt, k=a.k, params=greedy, method="regular")
    same = {}
    for d in drafters:
        got = engine.generate(prompt, k=a.k, params=greedy, method="bass", drafter=d,
                              draft_length=DraftLengthConfig(policy="fixed", l0=3))
        same[d] = sum(x.token_ids == y.token_ids for x, y in zip(got.candidates, want.candidates, strict=True))
    ks = [a.k] if a.pipelined_ks is None else [int(x) for x in a.pipelined_ks.split(",") if x.strip()]
    pipelined = []
    for k in ks:  # regular decoding, then each drafter under fixed L = 1 and fixed L = 3
        for label, drafter, cfg in configs:
            name, kw = _config(label, drafter, cfg)
            r = pipelined_round(engine, prompt, k, params, "regular" if drafter is None else "bass", drafter, out,
                                name, **kw)
            pipelined.append(dict(r, policy=cfg))
    info = dict(device=device_line(engine.device), target=engine.target.name, k=a.k, steps=steps, rounds=rounds,
                greedy_identical=same, pipelined=pipelined)
    (out / "step_costs.json").write_text(json.dumps(info, indent=1))
    lines = [info["device"],
             "width  forward ms  rule eager ms  forward+rule ms  rule graphed ms  dense rule graphed ms"]
    lines += [f"{s['width']:5d}  {s['forward_ms']:10.3f}  {s['rule_eager_ms']:13.3f}  {s['verify_ms']:15.3f}  "
              f"{s['rule_graph_ms']:15.3f}  {s['dense_rule_graph_ms']:21.3f}" for s in steps]
    lines += ["config               ms/round  drafter  verify   host  mean L  tok/round"]
    lines += [f"{r['label']:20s} {r['wall_ms_per_round']:8.2f} {r['draft_ms_per_round']:8.2f} "
              f"{r['verify_ms_per_round']:7.2f} {r['host_ms_per_round']:6.2f} {r['mean_draft_length']:7.2f} "
              f"{r['tokens_per_round']:10.2f}" for r in rounds]
    lines += [f"greedy BASS ({d}, L=3) sequences identical to regular: {n}/{a.k}" for d, n in same.items()]
    lines += pipelined_table(pipelined) if pipelined else []
    (out / "step_costs.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return info


if __name__ == "__main__":
    main()
