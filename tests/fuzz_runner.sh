#!/usr/bin/env bash
# The fuzz runner as a user runs it (scripts/fuzz.sh): every harness is built with clang and runs
# for a few seconds. Fails when a harness does not build or runs no input, or when one other than
# keras_model finds anything (keras_model's findings are HDF5's own crashes, contained by the
# importer's child process: docs/reliability.md). Skipped (77) without clang++.
set -euo pipefail
command -v clang++ >/dev/null || { echo "clang++ not found: the fuzz harnesses are not built here"; exit 77; }
cd "$(dirname "$0")/.."
rm -rf "${FUZZ_BUILD_DIR:?}/findings"
table=$(scripts/fuzz.sh "${1:-3}")
echo "$table"
expected="corpus_yaml corpus_tsv corpus_jsonl corpus_dialog corpus_cornell tokenizer config state bench_report
  keras_model keras_config keras_tokenizer pickle checkpoint"
status=0
for h in $expected; do
  row=$(echo "$table" | awk -v h="$h" '$1 == h')
  if [ -z "$row" ]; then echo "FAIL: $h did not run"; status=1; continue; fi
  read -r _ execs _ found <<<"$row"
  [ "$execs" -gt 0 ] || { echo "FAIL: $h ran no input (see $FUZZ_BUILD_DIR/$h.log)"; status=1; }
  [ "$h" = keras_model ] || [ "$found" -eq 0 ] || { echo "FAIL: $h found $found input(s): $FUZZ_BUILD_DIR/findings"; status=1; }
done
exit $status
