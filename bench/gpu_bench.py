"""BASS vs regular decoding vs transformers on one GPU, at 7B shapes with synthetic acceptance.

    python -m bench.gpu_bench --out DIR        (one table printed last; JSON, PNG, profile in DIR)

Workload (docs/design.md §7, `bench.synthetic`): a target with Llama-7B shapes and a 2-block draft of the same
width sharing its embedding and LM head (~0.5B-class bytes per step), random bf16 weights whose
block-output scale is calibrated on this GPU to per-token acceptance alpha ~ 0.6 / 0.8 / 0.9. One
128-token random prompt shared by the k sequences, 256 new tokens each, no EOS, so every method does
the same work. Sampling at temperature 1 (--greedy for argmax): with one shared prompt, greedy decoding
would make the k sequences identical and hide the raggedness BASS exists for.

Methods: BASS with the ragged / pad / split attention backends, our regular batched decoding, our
single-sequence speculative decoding (the k sequences one after another), transformers `generate`
(num_return_sequences=k; the cache/compile configuration picked by --hf-config, or the best of a probe)
and transformers assisted generation (`assistant_model=`, batch 1: sequences one after another,
timed on --hf-assisted-seqs of them and extrapolated). Every configuration is run once untimed (CUDA
graph capture, Triton and inductor compilation) before the timed run, with the same seed.

Columns (docs/design.md §5): per-sequence ms/token (mean over sequences of finish time / tokens, prefill
excluded), alpha (per-token acceptance, `bench.synthetic.per_token_acceptance`), acc (accepted /
proposed), tokens per round, throughput, GPU utilisation (target FLOPs/token x tok/s / measured bf16
peak), speed-ups over our regular and over HF regular decoding at the same k, and `floor`: the
memory-bandwidth limit of the same passes (bytes of weights and KV each pass must read, over the
measured copy bandwidth; see `floor_ms_per_token`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

import torch

from bass.config import DraftLengthConfig, EngineConfig, SamplingParams
from bass.engine.tuning import Tuning
from bass.metrics import decoder_flops_per_token
from bass.runtime.attention import resolve_backend
from bass.runtime.device import device_line as engine_device_line
from bass.runtime.graphs import decoding_captures
from bench.plot_gpu import (
    add_derived,
    floor_ms_per_token,
    format_table,
    hf_ms_per_token,
    kv_bytes_per_token,
    pass_bytes,
    plot,
    sequential_ms_per_token,
)
from bench.profile.rounds import profile_round
from bench.synthetic import (
    TARGETS,
    Calibration,
    build_pair,
    calibrate,
    hf_model,
    measure_alpha,
    per_token_acceptance,
    random_prompt,
)

ALPHAS = (0.6, 0.8, 0.9)
KS = (1, 2, 4, 8, 16, 32)
HF_CONFIGS = {"dynamic": {}, "static": {"cache_implementation": "static", "disable_compile": True},
              "static+compile": {"cache_implementation": "static"}}


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of the weights one forward pass reads: all but the embedding (only B rows of it are read)."""
    return sum(p.numel() * p.element_size() for n, p in model.named_parameters() if "embed_tokens" not in n)


# ---- measuring ------------------------------------------------------------------------------------------
def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn) -> float:
    """Wall seconds of fn() with the device idle before and after."""
    sync()
    t = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t


def median_s(fn, reps: int) -> float:
    fn()
    return sorted(timed(fn) for _ in range(reps))[reps // 2]


def copy_bandwidth(device: str, numel: int = 2**30) -> float:
    """Bytes read + written per second by a large device-to-device copy (2 GiB of bf16 on the GPU)."""
    src = torch.empty(numel, dtype=torch.bfloat16, device=device).normal_()
    dst = torch.empty_like(src)
    return 2 * src.numel() * 2 / median_s(lambda: dst.copy_(src), 10)


def matmul_peak(device: str, n: int = 8192) -> float:
    """bf16 FLOP/s of an n^3 product on random data."""
    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
    return 2 * n**3 / median_s(lambda: a @ b, 10)


class Bench:
    """The models, engines and settings shared by every measurement of one run."""

    def __init__(self, args: argparse.Namespace):
        from bass.engine import Engine

        self.args, self.N, self.P = args, args.new_tokens, args.prompt_len
        cfg, dev = TARGETS[args.target], args.device
        self.fast = resolve_backend("auto", dev)  # the CPU dry run (tests) has no Triton
        self.pair = build_pair(cfg, args.draft_layers, device=dev, dtype=torch.bfloat16, seed=args.seed)
        self.prompt = random_prompt(cfg.vocab_size, args.prompt_len, args.seed)
        self.params = SamplingParams(temperature=0.0 if args.greedy else 1.0, max_new_tokens=self.N, seed=args.seed)
        def engine(backend: str, graphs: bool) -> Engine:
            # (--stepwise-proposals: one graph per draft step, as before proposals were chained)
            tuning = Tuning(tune_projections=graphs, proposal_graphs=not args.stepwise_proposals)
            return Engine(EngineConfig(target="synthetic", draft="synthetic-draft", drafter="model", device=dev,
                                       dtype="bfloat16", backend=backend, cuda_graphs=graphs),
                          target=self.pair.target, draft=self.pair.draft, tuning=tuning)

        self.graphed = engine(self.fast, not args.no_graphs)
        self.eager = engine(self.fast, False)  # pad / split read lengths on the host: not capturable
        self.hf = self.hf_draft = None

    def prime(self, k: int) -> None:
        """Size the graphed engine's persistent KV arenas for the largest request before anything else.

        A larger later request reallocates them, and the engine then recaptures its graphs into the old
        memory pool, which trips PyTorch's allocator assert (use_count > 0) on torch 2.11.
        """
        for ev in self.graphed.stream([self.prompt], k=k, params=self.params, method="bass"):
            if ev.kind == "round":  # prefill and draft prefill are done: both arenas are allocated
                break

    def engine_row(self, method: str, k: int, backend: str, label: str, alpha_target: float | None,
                   eager: bool = False, draft_length: DraftLengthConfig | None = None) -> dict:
        backend = self.fast if backend == "ragged" else backend
        eng = self.eager if eager or backend != self.fast else self.graphed
        kw = dict(k=k, params=self.params, method=method, backend=backend, draft_length=draft_length)
        for _ in eng.stream([self.prompt], **kw):  # warm-up: same seed, same rounds, every graph captured
            pass
        sync()
        pairs, result, captured = [], None, decoding_captures()
        for ev in eng.stream([self.prompt], **kw):
            pairs += [(u.proposed, u.accepted) for u in ev.updates]
            result = ev.result or result
        # the graphs its stream captured after "done" (`bass.runtime.graphs`) are in no clock of the run: not counted
        st, captured = result.stats, decoding_captures() - captured
        spec = method != "regular"
        return dict(method=label, k=k, alpha_target=alpha_target if spec else None,
                    alpha=per_token_acceptance(pairs) if spec else None,
                    acceptance=st.acceptance_rate if spec else None,
                    ms_per_token=st.mean_ms_per_token, tokens_per_round=st.tokens_per_round,
                    throughput=st.throughput_tok_s, prefill_ms=1e3 * st.prefill_s, decode_s=st.decode_s,
                    target_passes=len(st.draft_lengths), draft_passes=sum(st.draft_lengths),
                    sequential=k if method == "single" else 1, mean_draft_length=(
                        sum(st.draft_lengths) / max(1, len(st.draft_lengths))),
                    # graphs captured inside the timed run's decoding: each one is a one-off cost in its ms/token
                    captures=captured, policy_state=st.policy)

    # ---- transformers ----
    def hf_models(self):
        if self.hf is None:
            self.hf, self.hf_draft = hf_model(self.pair.target.model), hf_model(self.pair.draft.model)
        return self.hf, self.hf_draft

    def hf_generate(self, k: int, n: int, config: str | None, assistant: bool = False, seed: int = 0) -> float:
        import transformers

        hf, hfd = self.hf_models()
        sample = not self.args.greedy
        gc = transformers.GenerationConfig(max_new_tokens=n, do_sample=sample, temperature=1.0 if sample else None,
                                           top_k=0 if sample else None, top_p=1.0 if sample else None,
                                           num_return_sequences=k, pad_token_id=0, eos_token_id=None,
                                           **(HF_CONFIGS[config] if config else {}))
        inp = torch.tensor([self.prompt], device=self.args.device)
        torch.manual_seed(seed)
        return timed(lambda: hf.generate(inp, generation_config=gc, assistant_model=hfd if assistant else None))

    def hf_regular_row(self, k: int, config: str, n: int | None = None) -> dict:
        n = n or self.N
        compile_s = self.hf_generate(k, n, config)  # warm-up (compiles when the cache is static)
        t1, tn = self.hf_generate(k, 1, config), self.hf_generate(k, n, config)
        ms = hf_ms_per_token(tn, t1, n)
        return dict(method=f"HF generate ({config})", k=k, ms_per_token=ms, tokens_per_round=1.0,
                    throughput=k * n / (tn - t1), prefill_ms=1e3 * t1, warmup_s=compile_s, target_passes=self.N - 1,
                    draft_passes=0, sequential=1, new_tokens=n)

    def hf_assisted_rows(self, ks: list[int], seqs: int) -> list[dict]:
        self.hf_generate(1, self.N, None, assistant=True)  # warm-up
        t_pre = self.hf_generate(1, 1, None, assistant=True)
        each = [self.hf_generate(1, self.N, None, assistant=True, seed=s) for s in range(seqs)]
        t = sum(each) / len(each)
        return [dict(method="HF assisted (per seq)", k=k, ms_per_token=sequential_ms_per_token(t, t_pre, k, self.N),
                     throughput=k * self.N / (k * t - t_pre), prefill_ms=1e3 * t_pre, seconds_per_seq=each,
                     note=f"timed {seqs} sequence(s), k sequences extrapolated") for k in ks]


def device_line(device: str) -> str:
    """The engine's device line (`bass.runtime.device.device_line`) plus what kernel timings also depend on."""
    import transformers

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "-"
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        driver = "-"
    return (f"{engine_device_line(torch.device(device))} | driver {driver}, triton {triton_version}, "
            f"transformers {transformers.__version__}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (sys.argv's when `argv` is None)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "bench/results/tmp"))
    p.add_argument("--device", default="cuda", help="cpu: a dry run of the plumbing with --target tiny")
    p.add_argument("--target", default="llama-7b", choices=sorted(TARGETS))
    p.add_argument("--draft-layers", type=int, default=2)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--greedy", action="store_true")
    p.add_argument("--no-graphs", action="store_true")
    p.add_argument("--stepwise-proposals", action="store_true", help="each draft step its own graph, not each "
                   "proposal one (`Tuning.proposal_graphs`)")
    p.add_argument("--ks", default=",".join(map(str, KS)), help="batch sizes of the main sweep")
    p.add_argument("--side-ks", default="1,8", help="batch sizes for pad/split/single/HF")
    p.add_argument("--alphas", default=",".join(map(str, ALPHAS)))
    p.add_argument("--methods", default="ragged,regular,alpha,hf,assisted,single,pad,split,eager,profile")
    p.add_argument("--hf-config", default="static+compile", help=f"one of {sorted(HF_CONFIGS)}, or 'probe'")
    p.add_argument("--hf-assisted-seqs", type=int, default=2)
    p.add_argument("--fixed-l", default="4,6", help="extra BASS-ragged rows at k=8 with a fixed draft length")
    p.add_argument("--calib-grid", default="3e-5,6e-5,1.2e-4,2.5e-4,5e-4,1e-3,2e-3")
    p.add_argument("--calib-tokens", type=int, default=96)
    p.add_argument("--budget-s", type=float, default=500.0, help="skip what would not finish within this")
    p.add_argument("--quick", action="store_true", help="k=8 only, 64 tokens: a smoke test")
    args = p.parse_args(argv)
    if args.quick:
        args.ks, args.side_ks, args.new_tokens, args.calib_grid = "8", "8", 64, "1e-4,5e-4,2e-3"
    return args


def main() -> None:
    args = parse_args()
    t_start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ks = sorted({int(k) for k in args.ks.split(",")}, reverse=True)  # largest first: one arena, no regrowth
    side = sorted({int(k) for k in args.side_ks.split(",")}, reverse=True)
    alphas = [float(a) for a in args.alphas.split(",")]
    methods = set(args.methods.split(","))
    info: dict = dict(device=device_line(args.device), args=vars(args), skipped=[], errors=[])
    print(info["device"], flush=True)
    small = args.device == "cpu"
    info["bandwidth"] = copy_bandwidth(args.device, 2**22 if small else 2**30)
    info["peak_flops"] = matmul_peak(args.device, 256 if small else 8192)
    b = Bench(args)
    print(f"copy bandwidth {info['bandwidth'] / 1e12:.2f} TB/s, bf16 peak {info['peak_flops'] / 1e12:.0f} TFLOP/s; "
          f"models built in {time.perf_counter() - t_start:.0f} s", flush=True)

    main_alpha = 0.8 if 0.8 in alphas else alphas[0]
    b.prime(max(ks + side))
    cal: Calibration = calibrate(
        b.pair.knob, lambda: measure_alpha(b.graphed, b.prompt, 8, args.calib_tokens, b.params), alphas,
        [float(s) for s in args.calib_grid.split(",")])
    info["calibration"] = dict(points=cal.points, scales={str(a): s for a, s in cal.scales.items()})
    if b.graphed.projection_report:  # the eager engine runs the same choices (`bass.models.linear` is global)
        from bass.models.linear import describe

        info["projections"] = b.graphed.projection_report
        print("projections (bass.models.linear.tune, at load):\n" + describe(b.graphed.projection_report), flush=True)
    print("calibration (scale, alpha):", ", ".join(f"({s:.2e}, {a:.3f})" for s, a in cal.points), flush=True)

    rows: list[dict] = []

    def run(name: str, est_s: float, fn, alpha: float | None = main_alpha) -> None:
        left = args.budget_s - (time.perf_counter() - t_start)
        if est_s > left:
            info["skipped"].append(f"{name} (needs ~{est_s:.0f} s, {left:.0f} s left)")
            return
        if alpha is not None:
            b.pair.knob.set(cal.scales[alpha])
        t = time.perf_counter()
        try:
            got = fn() or []
        except Exception as err:  # one failing configuration must not cost the rest of the run
            info["errors"].append(f"{name}: {type(err).__name__}: {err}")
            print(f"  {name}: FAILED {type(err).__name__}: {err}", flush=True)
            return
        got = got if isinstance(got, list) else [got]
        rows.extend(got)
        what = f"{got[0]['ms_per_token']:.2f} ms/token/seq, " if got else ""
        print(f"  {name}: {what}{time.perf_counter() - t:.1f} s", flush=True)

    sn = args.new_tokens / 256  # the cost guesses below are for 256 tokens on the H100
    for k in ks:
        if "ragged" in methods:
            run(f"BASS-ragged k={k}", 6 * sn, lambda k=k: b.engine_row("bass", k, "ragged", "BASS-ragged", main_alpha))
        if "regular" in methods:
            run(f"regular k={k}", 8 * sn, lambda k=k: b.engine_row("regular", k, "ragged", "regular (ours)", None))
    for a in alphas if "alpha" in methods else ():
        if a != main_alpha:
            run(f"BASS-ragged k=8 alpha={a}", 6 * sn, lambda a=a: b.engine_row("bass", 8, "ragged", "BASS-ragged", a),
                alpha=a)
    for n in [int(x) for x in args.fixed_l.split(",") if x] if "ragged" in methods else ():
        run(f"BASS-ragged k=8 fixed L={n}", 6 * sn, lambda n=n: b.engine_row(
            "bass", 8, "ragged", f"BASS-ragged fixed L={n}", main_alpha, draft_length=DraftLengthConfig("fixed", l0=n)))
    if "profile" in methods:
        for m in ("bass", "regular"):
            run(f"profile {m}", 20, lambda m=m: profile_round(b.graphed, b.prompt, 8, b.params, 64, out, info, m))
    for k in side:
        if "hf" in methods:
            hf_est = max(r.get("warmup_s", 0) for r in rows if r["method"].startswith("HF gen")) + 20 \
                if any(r["method"].startswith("HF gen") for r in rows) else 150
            run(f"HF generate k={k}", hf_est * sn, lambda k=k: hf_rows(b, info, k))
        if "assisted" in methods and k == side[0]:
            run("HF assisted", 40 * sn * (args.hf_assisted_seqs + 2),
                lambda: b.hf_assisted_rows(side, args.hf_assisted_seqs))
        if "single" in methods:
            run(f"single k={k}", 6 * k * sn, lambda k=k: b.engine_row("single", k, "ragged", "single-seq spec (ours)",
                                                                     main_alpha))
        for be in [m for m in ("pad", "split") if m in methods]:
            run(f"BASS-{be} k={k}", 20 * sn, lambda k=k, be=be: b.engine_row("bass", k, be, f"BASS-{be} (eager)",
                                                                              main_alpha))
        if "eager" in methods:
            run(f"BASS-ragged eager k={k}", 15 * sn,
                lambda k=k: b.engine_row("bass", k, "ragged", "BASS-ragged (eager)", main_alpha, eager=True))

    finish(b, rows, info, out)
    print(f"total {time.perf_counter() - t_start:.0f} s")


def hf_rows(b: Bench, info: dict, k: int) -> dict:
    """HF regular decoding at k in the configured way; 'probe' times every configuration at the first k
    asked for and keeps the best for the others."""
    if b.args.hf_config != "probe":
        return b.hf_regular_row(k, b.args.hf_config)
    if "hf_best" in info:
        return b.hf_regular_row(k, info["hf_best"])
    probe, best = {}, None
    for name in HF_CONFIGS:
        # uncompiled configurations cost the same every step: 32 tokens tell; a compiled static cache
        # has its length baked in, so it runs at the real length
        r = b.hf_regular_row(k, name, n=None if name == "static+compile" else 32)
        probe[name] = dict(ms_per_token=r["ms_per_token"], warmup_s=r["warmup_s"], new_tokens=r["new_tokens"])
        print(f"    HF {name} k={k}: {r['ms_per_token']:.2f} ms/step (warm-up {r['warmup_s']:.0f} s)", flush=True)
        best = r if best is None or r["ms_per_token"] < best["ms_per_token"] else best
    info.setdefault("hf_probe", {})[str(k)] = probe
    info["hf_best"] = best["method"][len("HF generate ("):-1]
    return best if best["new_tokens"] == b.N else b.hf_regular_row(k, info["hf_best"])


def finish(b: Bench, rows: list[dict], info: dict, out: Path) -> None:
    """Floors, utilisation and speed-ups; the JSON, the plot, and the table printed last."""
    t, d = b.pair.target, b.pair.draft
    wt, wd = weight_bytes(t.model), weight_bytes(d.model)
    kvt = kv_bytes_per_token(t.config.num_layers, t.config.num_kv_heads, t.config.head_dim)
    kvd = kv_bytes_per_token(d.config.num_layers, d.config.num_kv_heads, d.config.head_dim)
    for r in rows:
        if "target_passes" in r:
            batch = 1 if r["sequential"] > 1 else r["k"]
            r["floor_ms"] = floor_ms_per_token(r["target_passes"], r["draft_passes"],
                                               pass_bytes(wt, kvt, b.P, batch, b.N / 2),
                                               pass_bytes(wd, kvd, b.P, batch, b.N / 2), info["bandwidth"], b.N,
                                               r["sequential"])
    matmul_params = wt // 2
    flops = decoder_flops_per_token(matmul_params, t.config.num_layers, t.config.hidden_size, b.P + b.N // 2)
    add_derived(rows, peak_flops=info["peak_flops"], flops_per_token=flops)
    info.update(target_weight_bytes=wt, draft_weight_bytes=wd, target_flops_per_token=flops,
                regular_floor_ms_k8=floor_ms_per_token(b.N - 1, 0, pass_bytes(wt, kvt, b.P, 8, b.N / 2), 0,
                                                       info["bandwidth"], b.N))
    rows.sort(key=lambda r: (r["method"], r["k"], r.get("alpha_target") or 0))
    table = format_table(rows)
    (out / "gpu_bench.json").write_text(json.dumps(dict(info=info, rows=rows), indent=1, default=str))
    try:
        plot(dict(info=info, rows=rows), out / "gpu_bench.png")
    except Exception as err:  # the numbers matter more than the picture
        info["errors"].append(f"plot: {err}")
    header = (f"{info['device']}\nsynthetic acceptance: random bf16 weights, {b.args.target} target + "
              f"{b.args.draft_layers}-block draft, prompt {b.P}, {b.N} new tokens, "
              f"{'greedy' if b.args.greedy else 'sampling T=1'}; copy bandwidth {info['bandwidth'] / 1e12:.2f} TB/s")
    text = "\n".join([header, table, *(f"skipped: {s}" for s in info["skipped"]),
                      *(f"error: {e}" for e in info["errors"])])
    (out / "gpu_bench.txt").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
