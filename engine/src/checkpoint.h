#pragma once
// Run-folder checkpoints (private: Torch types): ckpt-<step>.pt and the state.json naming it.

#include "model.h"
#include "runstate.h"

#include <torch/torch.h>

#include <string>

namespace chatbench {

// Writes ckpt-<step>.pt and its CRC-32, then ckpt-<step>.json (the state as of it), then
// state.json naming it; then removes all but the `keep` newest checkpoints.
void saveCheckpoint(
    const std::string& runDir, Seq2Seq& model, torch::optim::Optimizer& optimizer, RunState& state, int keep = 2);
// Loads model weights (and, when an optimizer is given, i.e. resuming: its state and the training
// device's random generator) from the state's checkpoint: the checksum verified, every tensor's
// shape checked against the model built from config.json, and non-finite weights refused; the
// LSTMs' weights are flattened again for cuDNN. Throws Error naming the checkpoint file.
void loadCheckpoint(
    const std::string& runDir, const RunState& state, Seq2Seq& model, torch::optim::Optimizer* optimizer);
// loadCheckpoint, falling back to the newest older checkpoint that loads when the state's own is
// corrupt or missing; returns the state that goes with the checkpoint loaded. `note` (when given)
// says what was fallen back from and to; empty when the state's own checkpoint loaded. An older
// state saved with another vocabulary than `state`'s (both recorded) is not fallen back to.
RunState loadUsableCheckpoint(const std::string& runDir, const RunState& state, Seq2Seq& model,
    torch::optim::Optimizer* optimizer, std::string* note);

// Keeps the checkpoint `state` names as the run's best weights (by validation loss):
// best-<step>.pt (a hard link to it, or a copy where links are not possible), then best.json (the
// state as of it, checksum included), then removes older best-*.pt. A kill at any point leaves
// best.json naming a complete file.
void keepBestCheckpoint(const std::string& runDir, const RunState& state);
// Loads the best weights into `model` (checksum verified as for any checkpoint); returns their
// state. Throws Error naming best.json when the run has no best weights yet.
RunState loadBestCheckpoint(const std::string& runDir, Seq2Seq& model);

} // namespace chatbench
