#pragma once
// The environment doctor: versions, devices and precisions, the handoff checks on a tiny model
// trained on the spot, and CPU↔CUDA parity where a GPU is present.
//
//   chatbench::DoctorReport d = chatbench::runDoctor();
//   std::cout << chatbench::describe(d);          // the CLI's text; toJson(d) for --json
//   return d.healthy ? 0 : 1;
//
// The tiny model trains in a temporary folder that is removed however runDoctor ends.

#include "chatbench/chatbot.h"
#include "chatbench/devices.h"

#include <cstdint>
#include <string>
#include <vector>

namespace chatbench {

struct DoctorParity {
    bool ran = false; // false without a CUDA device
    std::string skipped; // why it did not run
    double maxLogitDiff = 0; // over the decoder steps until the replies diverge
    bool repliesAgree = false;
    std::string cpuReply;
    std::string cudaReply;
    bool tf32 = false; // the second device ran TF32 maths (cuBLAS or cuDNN), so a looser tolerance
    double tolerance = 0; // the largest |Δlogit| that passes
    bool passed = false; // logits within tolerance, and the replies agree or part at a near tie
    std::string verdict; // one line: what passed or failed and by how much
};

// |Δlogit| allowed between two devices running the same weights: relative to the logits' size,
// 1e-4 in IEEE fp32 (different summation orders), 1e-2 when TF32 (10-bit mantissa) took part.
double parityTolerance(bool tf32, double largestLogit);
// The verdict on two replies to the same question from the same weights on two devices (both
// decoded with DecodeOptions::recordLogits): the logits are compared step by step until the
// chosen tokens differ; differing replies pass only when they part at a near tie (the first
// device's top two logits within the tolerance), where rounding may pick either.
DoctorParity compareParity(const Reply& first, const Reply& second, bool tf32);

struct DoctorReport {
    EnvironmentInfo environment;
    std::vector<DeviceInfo> devices; // cpu first, then each CUDA device
    int64_t tinySteps = 0; // optimizer steps the tiny model trained for
    double tinyLoss = 0; // its final training loss
    std::string question; // what it was asked
    std::string reply; // its greedy reply with the correct handoff
    TraceChecks correct; // the checks with the handoff (all must pass)
    TraceChecks zeroInit; // the checks with the decoder started from zeros (must fail)
    DoctorParity parity;
    // The checks pass with the handoff and catch the zero-state bug, and CPU↔CUDA parity passed
    // where it ran. The CLI's exit code.
    bool healthy = false;
};

// Throws Error when the temporary folder cannot be created or the tiny model cannot train.
DoctorReport runDoctor();

std::string toJson(const DoctorReport& report);
std::string describe(const DoctorReport& report);

} // namespace chatbench
