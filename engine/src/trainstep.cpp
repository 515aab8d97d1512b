#include "trainstep.h"

#include "chatbench/error.h"
#include "chatbench/tokenizer.h"
#include "torchutil.h"

#include <cmath>

namespace chatbench {

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const TrainConfig& cfg, std::vector<torch::Tensor> params)
{
    switch (cfg.optimizer) {
    case OptimizerKind::Adam:
        return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(cfg.learningRate));
    case OptimizerKind::RMSprop:
        // Keras' RMSprop defaults: rho 0.9, epsilon 1e-7.
        return std::make_unique<torch::optim::RMSprop>(
            params, torch::optim::RMSpropOptions(cfg.learningRate).alpha(0.9).eps(1e-7));
    case OptimizerKind::SGD:
        return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(cfg.learningRate));
    }
    throw Error("unknown optimizer");
}

Stepper makeStepper(const TrainConfig& cfg, const torch::Device& device, Precision precision)
{
    Stepper s;
    s.device = device;
    s.precision = precision;
    s.teacherForcing = cfg.teacherForcing;
    s.clipNorm = cfg.clipNorm;
    torch::manual_seed(cfg.seed);
    s.model = Seq2Seq(cfg.model);
    s.model->to(device);
    s.optimizer = makeOptimizer(cfg, s.model->parameters());
    return s;
}

torch::Tensor lossSum(Stepper& s, const Batch& batch, bool training, double teacherForcing, int64_t* correct)
{
    AutocastScope autocast(s.device, s.precision);
    EncoderOutput enc = s.model->encode(batch.source, batch.lengths);
    torch::Tensor logits; // (B, T, V)
    if (!training || teacherForcing >= 1.0) {
        logits = s.model->decode(batch.input, enc.h, enc.c, enc).logits;
    } else {
        // Scheduled sampling: each step feeds the true token with probability `teacherForcing`,
        // otherwise the model's own previous choice.
        const int64_t T = batch.input.size(1);
        auto h = enc.h, c = enc.c;
        auto input = batch.input.select(1, 0); // (B)
        std::vector<torch::Tensor> steps;
        for (int64_t t = 0; t < T; ++t) {
            DecoderOutput d = s.model->decode(input.unsqueeze(1), h, c, enc);
            steps.push_back(d.logits);
            h = d.h;
            c = d.c;
            if (t + 1 < T) {
                auto truth = batch.input.select(1, t + 1);
                auto guess = d.logits.squeeze(1).argmax(-1);
                auto useTruth
                    = torch::rand({ truth.size(0) }, torch::TensorOptions().device(s.device)) < teacherForcing;
                input = torch::where(useTruth, truth, guess);
            }
        }
        logits = torch::cat(steps, 1);
    }
    const int64_t V = logits.size(-1);
    auto flat = logits.reshape({ -1, V }).to(torch::kFloat32);
    auto target = batch.target.reshape({ -1 });
    if (correct) {
        auto hits = (flat.argmax(-1) == target) & batch.mask.reshape({ -1 });
        *correct = hits.sum().item<int64_t>();
    }
    return torch::nn::functional::cross_entropy(flat, target,
        torch::nn::functional::CrossEntropyFuncOptions().ignore_index(Tokenizer::kPad).reduction(torch::kSum));
}

StepOutcome trainStep(Stepper& s, const Batch& batch)
{
    const bool scaleLoss = s.precision == Precision::FP16;
    s.model->train();
    auto sum = lossSum(s, batch, true, s.teacherForcing, nullptr);
    auto loss = sum / static_cast<double>(batch.tokens);
    s.optimizer->zero_grad();
    (scaleLoss ? loss * s.lossScale : loss).backward();
    StepOutcome out;
    out.applied = true;
    if (scaleLoss) {
        for (auto& p : s.model->parameters())
            if (p.grad().defined())
                p.grad().div_(s.lossScale);
        bool finite = true;
        for (auto& p : s.model->parameters())
            if (p.grad().defined() && !torch::isfinite(p.grad()).all().item<bool>())
                finite = false;
        if (!finite) {
            s.lossScale /= 2;
            s.goodSteps = 0;
            out.applied = false;
        } else if (++s.goodSteps % 2000 == 0) {
            s.lossScale *= 2;
        }
    }
    out.loss = loss.item<double>();
    out.lossSum = sum.item<double>();
    if (!std::isfinite(out.loss) && !scaleLoss)
        out.applied = false; // the caller decides: training stops with an error naming the step
    if (out.applied) {
        if (s.clipNorm > 0)
            torch::nn::utils::clip_grad_norm_(s.model->parameters(), s.clipNorm);
        s.optimizer->step();
    }
    return out;
}

} // namespace chatbench
