#!/usr/bin/env bash
# Builds the libFuzzer harnesses in fuzz/ with clang (AddressSanitizer + UBSan) and runs each for
# SECONDS, seeded from the bundled corpus and the test fixtures plus the regression inputs kept in
# fuzz/regressions/. Prints executions and findings per harness; findings land in the build folder's findings/.
# Usage: scripts/fuzz.sh [SECONDS] [HARNESS ...]     (HARNESS: corpus_yaml, tokenizer, pickle, …; default all)
# FUZZ_MAX_LEN=N caps the input size (libFuzzer's -max_len; the longer seeds are cut). The YAML and
# Cornell parsers run ~4x more inputs a second at 1024 bytes with the same coverage; pairing it with
# ASAN_OPTIONS=malloc_context_size=0 saves the allocation stacks (a finding is then rerun without it
# for the full report).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH="${1:-60}"
[ $# -gt 0 ] && shift
# FUZZ_SANITIZE=undefined builds the harnesses without AddressSanitizer (in build-fuzz-undefined):
# the checkpoint harness then runs 6-10x more inputs a second, and a memory error shows only when it crashes.
# FUZZ_BUILD_DIR=DIR builds and works there instead (the test suite's check of this runner).
# FUZZ_JOBS=N runs the harnesses that fuzz in forked processes (keras_model, checkpoint) N at once.
SANITIZE="${FUZZ_SANITIZE:-address,undefined}"
BUILD=build-fuzz
[ "$SANITIZE" = address,undefined ] || BUILD="build-fuzz-${SANITIZE//,/-}"
BUILD="${FUZZ_BUILD_DIR:-$BUILD}"
ALL=(corpus_yaml corpus_tsv corpus_jsonl corpus_dialog corpus_cornell tokenizer config state bench_report keras_model
  keras_config keras_tokenizer pickle checkpoint)
HARNESSES=("$@")
if [ $# -eq 0 ]; then HARNESSES=("${ALL[@]}"); fi

command -v clang++ >/dev/null || { echo "fuzz: needs clang++ (Debian: apt-get install clang libclang-rt-14-dev)" >&2; exit 2; }
cmake -S fuzz -B "$BUILD" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFUZZ_SANITIZE="$SANITIZE" >/dev/null
cmake --build "$BUILD" >/dev/null

seed() { # harness → seed files
  case "$1" in
    corpus_yaml) ls datasets/chatbench/*.yml ;;
    corpus_tsv|corpus_dialog|corpus_jsonl|corpus_cornell) ls datasets/chatbench/* ;;
    tokenizer) ls tests/fixtures/keras/*.json ;;
    config|state) ls tests/fixtures/keras/*_tokenizer.json ;;
    keras_model) ls tests/fixtures/keras/*.keras tests/fixtures/keras/*.h5 | grep -v /fuzz- ;; # not its own findings
    keras_config) ls tests/fixtures/keras/unsupported/*.json ;;
    keras_tokenizer) ls tests/fixtures/keras/*_tokenizer.json ;;
    bench_report) find bench/reports -name '*.json' ! -name summary.json ;;
  esac
}

# Fork mode waits for each job without a limit, and a job can wait for ever: HDF5 overran the
# heap, glibc aborted, and libFuzzer's abort handler then waited on the allocator's lock. No job
# runs longer than 300 s (libFuzzer's own cap) plus its start and merge, so one past 420 s is
# stuck: it is killed, which keras_model's fork mode (-ignore_crashes) counts as a crash and goes
# on past; the checkpoint harness' campaign ends there, as on any crash. A job's own merge (its
# control file N.merge) can hang the same way (one held a campaign for 14 minutes) and is stopped
# alike; the corpus merge at the start (control file "merge", which may take longer under ASan) is
# left alone. Each kill is noted in HARNESS.stuck.
stop_stuck_jobs() { # PARENT HARNESS NOTES
  local level all p age
  while kill -0 "$1" 2>/dev/null; do
    sleep 15
    all=
    level=$(pgrep -P "$1" | tr '\n' ' ' || true)
    while [ -n "${level// /}" ]; do # the parent's descendants: a shell, then the job
      all+=" $level"
      level=$(for p in $level; do pgrep -P "$p" || true; done | tr '\n' ' ')
    done
    for p in $all; do
      age=$(ps -o etimes= -p "$p" 2>/dev/null | tr -d ' ' || true)
      if [ "${age:-0}" -gt 420 ] && [ "$(ps -o comm= -p "$p" 2>/dev/null)" = "$(echo "fuzz_$2" | cut -c1-15)" ] \
        && { ! ps -o args= -p "$p" 2>/dev/null | grep -q -- '-merge' \
          || ps -o args= -p "$p" 2>/dev/null | grep -qE -- '-merge_control_file=[^ ]*/[0-9]+\.merge'; }; then
        kill -9 "$p" 2>/dev/null && echo "$(date -u +%FT%TZ) job $p stopped after $age s" >>"$3"
      fi
    done
  done
}

mkdir -p "$BUILD/findings"
printf '%-16s %12s %10s %8s\n' harness executions exec/s findings
for h in "${HARNESSES[@]}"; do
  work="$BUILD/work/$h"
  mkdir -p "$work" "fuzz/regressions/$h"
  for f in $(seed "$h"); do cp -n "$f" "$work/" 2>/dev/null || true; done
  rm -f "$work"/fuzz-* # the Keras fixtures that are findings, seeds of runs before they were left out
  if [ "$h" = checkpoint ] || [ "$h" = pickle ]; then # the checkpoint harness writes a checkpoint of its model
    ckpt="$BUILD/work/checkpoint"
    mkdir -p "$ckpt"
    [ -f "$ckpt/seed.pt" ] || [ ! -x "$BUILD/fuzz_checkpoint" ] \
      || CHATBENCH_FUZZ_SEED_DIR="$ckpt" "$BUILD/fuzz_checkpoint" -runs=0 >/dev/null 2>&1
    if [ "$h" = pickle ] && [ -f "$ckpt/seed.pt" ]; then # its pickles, one file each
      python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for n in z.namelist():
    if n.endswith(".pkl"): open(sys.argv[2] + "/seed-" + n.replace("/", "-"), "wb").write(z.read(n))' "$ckpt/seed.pt" "$work"
    fi
  fi
  if [ "$h" = keras_config ]; then # the fixtures' model configs: config.json, or the .h5's model_config
    python3 -c 'import json, sys, zipfile
for f in sys.argv[2:]:
    out = sys.argv[1] + "/seed-" + f.rsplit("/", 1)[1] + ".json"
    if f.endswith(".keras"):
        open(out, "wb").write(zipfile.ZipFile(f).read("config.json"))
    else:  # the attribute is stored whole in the file
        b = open(f, "rb").read().decode("latin1")
        i = b.find("{\"class_name\"")
        if i >= 0:
            open(out, "w", encoding="latin1").write(b[i:i + json.JSONDecoder().raw_decode(b[i:])[1]])' \
      "$work" tests/fixtures/keras/*.keras tests/fixtures/keras/recipe.h5 tests/fixtures/keras/keras2.h5
  fi
  log="$BUILD/$h.log"
  mode=()
  # HDF5 itself crashes on some malformed files (the importer reads models in a child process,
  # which contains that): those crashes are recorded and fuzzing goes on past them.
  [ "$h" = keras_model ] && mode=(-fork="${FUZZ_JOBS:-1}" -ignore_crashes=1)
  # A model is read in about 3 ms; the inputs on which HDF5 loops for good cost the whole timeout
  # each (43 in 23 minutes once: a sixth of the campaign at 10 s), so this harness' timeout is 3 s.
  timeout=10
  [ "$h" = keras_model ] && timeout=3
  # LibTorch's archive reader leaks on malformed archives (fuzz/lsan.supp): one process grows by
  # about 1 KB an input, past any memory limit in a long campaign. In fork mode each job is a
  # process of its own that ends within 300 s.
  [ "$h" = checkpoint ] && mode=(-fork="${FUZZ_JOBS:-1}")
  rss=2048
  [ -n "${FUZZ_MAX_LEN:-}" ] && mode+=(-max_len="$FUZZ_MAX_LEN")
  [ "$h" = checkpoint ] && rss=4096 # LibTorch under ASan, and its archive reader leaking (lsan.supp)
  LSAN_OPTIONS="suppressions=$PWD/fuzz/lsan.supp:print_suppressions=0" \
  "$BUILD/fuzz_$h" "${mode[@]}" -max_total_time="$SECONDS_EACH" -timeout="$timeout" -rss_limit_mb="$rss" -print_final_stats=1 \
    -artifact_prefix="$BUILD/findings/$h-" "$work" "fuzz/regressions/$h" >"$log" 2>&1 &
  fuzzer=$!
  rm -f "$BUILD/$h.stuck"
  watcher=
  if [ ${#mode[@]} -gt 0 ] && [[ ${mode[0]} == -fork=* ]]; then
    stop_stuck_jobs "$fuzzer" "$h" "$BUILD/$h.stuck" &
    watcher=$!
  fi
  wait "$fuzzer" || true
  [ -z "$watcher" ] || kill "$watcher" 2>/dev/null || true
  if [ "$h" = keras_model ] || [ "$h" = checkpoint ]; then # fork mode: "#N: cov: … exec/s R …" lines
    execs=$(grep -oE '^#[0-9]+:' "$log" | tail -1 | tr -d '#:' || echo 0)
    rate=$(grep -oE 'exec/s [0-9]+' "$log" | tail -1 | grep -o '[0-9]*$' || echo 0)
  else
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
  fi
  found=$(ls "$BUILD/findings" | grep -c "^$h-" || true)
  printf '%-16s %12s %10s %8s\n' "$h" "${execs:-0}" "${rate:-0}" "$found"
  [ ! -s "$BUILD/$h.stuck" ] || echo "  $h: $(wc -l <"$BUILD/$h.stuck") stuck job(s) stopped (listed in $BUILD/$h.stuck)"
done
# Scratch folders of harnesses that have ended (another runner may be fuzzing beside this one).
for d in /dev/shm/chatbench-fuzz-*; do
  [ -d "$d" ] && ! kill -0 "${d##*-}" 2>/dev/null && rm -rf "$d"
done
true
