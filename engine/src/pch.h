#pragma once
// Precompiled header for the engine's LibTorch sources.
#include <torch/torch.h>
