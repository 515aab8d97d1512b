#pragma once
// Run-folder checkpoints (private: Torch types): ckpt-<step>.pt and the state.json naming it.

#include "model.h"
#include "runstate.h"

#include <torch/torch.h>

#include <string>

namespace chatbench {

// Writes ckpt-<step>.pt, then state.json naming it, then removes the previous checkpoint.
void saveCheckpoint(const std::string& runDir, Seq2Seq& model, torch::optim::Optimizer& optimizer, RunState& state);
// Loads model weights (and the optimizer's state when given) from the state's checkpoint, checking
// every tensor's shape against the model built from config.json.
void loadCheckpoint(
    const std::string& runDir, const RunState& state, Seq2Seq& model, torch::optim::Optimizer* optimizer);

} // namespace chatbench
