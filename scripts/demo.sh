#!/usr/bin/env bash
# Sets up, builds, trains the seed preset (the Keras recipe) on the bundled corpus, then chats.
# Run it again and it continues the same run (finished runs go straight to the chat).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
CLI="${CHATBENCH_BUILD_DIR:-build}/app/chatbench-cli"
RUN="${CHATBENCH_RUN:-runs/demo}"
if [ -f "$RUN/state.json" ]; then
  "$CLI" train --resume --run "$RUN"
else
  "$CLI" train --preset seed --corpus datasets/chatbench --run "$RUN"
fi
for q in "hello" "what is an lstm?" "how do i start training?"; do
  printf 'you> %s\nbot> ' "$q"
  "$CLI" chat --run "$RUN" --once "$q" --checks
done
"$CLI" chat --run "$RUN" --checks
