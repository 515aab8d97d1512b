#include "trainstep.h"

#include "chatbench/error.h"
#include "chatbench/tokenizer.h"
#include "cpugemm.h"
#include "kernels.h"
#include "projectedloss.h"
#include "scopedthreads.h"
#include "sparselookup.h"
#include "torchutil.h"

#include <ATen/Parallel.h>

#include <fstream>
#include <sstream>

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <optional>
#include <utility>

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

static Stepper makeStepperOn(const TrainConfig& cfg, const torch::Device& device, Precision precision);

// What this process may still take, in bytes: the kernel's MemAvailable, or the control group's
// limit less its use when that is lower; 0 when neither can be read.
int64_t availableMemory()
{
    auto readNumber = [](const char* path, const std::string& key) -> int64_t {
        std::ifstream in(path);
        std::string word;
        while (in >> word) {
            if (key.empty() || word == key) {
                if (!key.empty())
                    in >> word;
                try {
                    return std::stoll(word);
                } catch (const std::exception&) {
                    return 0; // "max": no limit
                }
            }
        }
        return 0;
    };
    int64_t avail = readNumber("/proc/meminfo", "MemAvailable:") * 1024;
    const int64_t limit = readNumber("/sys/fs/cgroup/memory.max", "");
    if (limit > 0) {
        // The group's use counts the page cache of files it read; the inactive part is given
        // back before the group's limit is hit.
        const int64_t used = readNumber("/sys/fs/cgroup/memory.current", "")
            - readNumber("/sys/fs/cgroup/memory.stat", "inactive_file");
        const int64_t left = std::max<int64_t>(0, limit - std::max<int64_t>(0, used));
        avail = avail > 0 ? std::min(avail, left) : left;
    }
    return avail;
}

std::string gigabytes(double bytes)
{
    std::ostringstream o;
    o.precision(bytes < 1e10 ? 2 : 3);
    o << bytes / 1e9 << " GB";
    return o.str();
}

namespace {

std::string modelSizes(const ModelConfig& m)
{
    return " (" + std::to_string(parameterCount(m)) + " parameters: vocabulary " + std::to_string(m.vocabSize)
        + ", embed " + std::to_string(m.embedDim) + ", hidden " + std::to_string(m.hidden) + ", "
        + std::to_string(m.layers) + " layer(s))";
}

} // namespace

void requireMemoryFor(const ModelConfig& model, double bytesPerParameter, const std::string& doing,
    const std::string& fix, const std::string& file)
{
    const double need = bytesPerParameter * static_cast<double>(parameterCount(model));
    if (const int64_t avail = availableMemory(); avail > 0 && need > static_cast<double>(avail))
        throw Error(file, 0,
            doing + " this model needs about " + gigabytes(need) + " of memory" + modelSizes(model) + ", and "
                + gigabytes(static_cast<double>(avail)) + " is available: " + fix);
}

Stepper makeStepper(const TrainConfig& cfg, const torch::Device& device, Precision precision)
{
    // Weights, gradients and RMSprop's averages (fp32 each), and the second core's gradients: a
    // model that cannot have those is refused before LibTorch's allocator says so in its words.
    const std::string sizes = modelSizes(cfg.model);
    if (device.is_cpu())
        requireMemoryFor(cfg.model, 16.0, "training", "lower --hidden, --embed or --layers");
    try {
        return makeStepperOn(cfg, device, precision);
    } catch (const c10::Error& e) {
        const std::string what = e.what_without_backtrace();
        if (what.find("can't allocate memory") == std::string::npos && what.find("out of memory") == std::string::npos)
            throw;
        throw Error("out of memory building the model" + sizes + " on " + device.str()
            + ": lower --hidden, --embed or --layers (" + inWords(what) + ")");
    } catch (const std::bad_alloc&) {
        throw Error("out of memory building the model" + sizes + ": lower --hidden, --embed or --layers");
    }
}

static Stepper makeStepperOn(const TrainConfig& cfg, const torch::Device& device, Precision precision)
{
    Stepper s;
    s.device = device;
    s.precision = precision;
    s.teacherForcing = cfg.teacherForcing;
    s.clipNorm = cfg.clipNorm;
    torch::manual_seed(cfg.seed);
    s.model = Seq2Seq(cfg.model);
    s.model->to(device);
    // The engine's LSTM layer and projected loss on the CPU: fp32, or bf16 products with fp32
    // state and master weights (autocast's nn::LSTM runs the packed per-step path in bf16).
    s.model->setMaskedLstm(device.is_cpu() && precision != Precision::FP16,
        precision == Precision::BF16 ? torch::kBFloat16 : torch::kFloat32);
    s.lossScaling = precision == Precision::FP16;
    s.optimizer = makeOptimizer(cfg, s.model->parameters());
    return s;
}

namespace {

// The decoder's states (B, T, H) as rows, and each real position's row (positions b·T + t):
// the engine's LSTM layer leaves them time-major ((T, B, H) seen as (B, T, H)), and they are read
// there, the positions renumbered t·B + b, rather than copied batch-major.
std::pair<torch::Tensor, torch::Tensor> stateRows(const torch::Tensor& top, const torch::Tensor& positions)
{
    const int64_t B = top.size(0), T = top.size(1), H = top.size(2);
    if (const auto timeMajor = top.transpose(0, 1); !top.is_contiguous() && timeMajor.is_contiguous())
        return { timeMajor.view({ T * B, H }), positions.remainder(T) * B + positions.div(T, "floor") };
    return { top.reshape({ B * T, H }), positions };
}

} // namespace

torch::Tensor lossSum(Stepper& s, const Batch& batch, bool training, double teacherForcing, int64_t* correct)
{
    AutocastScope autocast(s.device, s.precision);
    EncoderOutput enc = s.model->encode(batch.source, batch.lengths);
    if (!training || teacherForcing >= 1.0) {
        // Teacher forced: project and score only the real target tokens. With buckets of mixed
        // response lengths about half the (B, T) positions are padding, and the projection to the
        // vocabulary is the largest matrix product of the step.
        auto rows = batch.mask.reshape({ -1 }).nonzero().squeeze(1).contiguous(); // (N) real positions b·T + t
        auto target = batch.target.reshape({ -1 }).index_select(0, rows); // (N)
        auto [top, at] = stateRows(s.model->decodeHidden(batch.input, enc.h, enc.c, enc).top, rows);
        if (training && !correct && s.model->maskedLstm()) // fp32 rows (bf16 autocast makes attention's bf16)
            return projectedCrossEntropy(top.to(torch::kFloat32).contiguous(), at.to(torch::kCPU),
                s.model->output->weight, s.model->output->bias, target, s.model->gemmType());
        auto hidden = top.index_select(0, at); // (N, H)
        if (!training && s.model->maskedLstm()) { // scoring on the CPU: chunk by chunk, no (N, V) logits
            int64_t hits = 0;
            auto sum = projectedCrossEntropyScore(hidden.to(torch::kFloat32), s.model->output->weight,
                s.model->output->bias, target, s.model->gemmType(), &hits);
            if (correct)
                *correct = hits;
            return sum;
        }
        auto logits = s.model->output(hidden).to(torch::kFloat32); // (N, V)
        if (correct)
            *correct = (logits.argmax(-1) == target).sum().item<int64_t>();
        return torch::nn::functional::cross_entropy(
            logits, target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
    }
    torch::Tensor logits; // (B, T, V)
    {
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

namespace {

// A plain RMSprop (one group; no weight decay, momentum or centring; every parameter with a
// gradient CPU fp32 and contiguous, its gradient dense or, for a (V, E) table, sparse rows), seen
// as the raw arrays its update runs over.
struct PlainRmsprop {
    std::vector<float*> w; // each parameter with a gradient
    std::vector<const float*> g; // its gradient (sparse: the touched rows' values, row after row)
    std::vector<float*> squareAvg; // its optimizer state
    std::vector<int64_t> n; // its element count
    std::vector<int64_t> gn; // its gradient's (n, or the touched rows' values)
    std::vector<const int64_t*> rows; // a sparse gradient's touched rows, sorted; null: dense
    std::vector<int64_t> width; // a sparse gradient's elements per row
    std::vector<uint32_t*> owed; // a sparse gradient's table: the decays each row is owed
    std::vector<torch::optim::RMSpropParamState*> states;
    float alpha = 0, eps = 0, lr = 0;
};

// s's optimizer when it is an RMSprop of one group without weight decay, momentum or centring.
torch::optim::RMSprop* plainRmspropOptimizer(const Stepper& s)
{
    auto* rms = dynamic_cast<torch::optim::RMSprop*>(s.optimizer.get());
    if (!rms || rms->param_groups().size() != 1)
        return nullptr;
    const auto& o = static_cast<const torch::optim::RMSpropOptions&>(rms->param_groups().front().options());
    return o.weight_decay() == 0 && o.momentum() == 0 && !o.centered() ? rms : nullptr;
}

// Multiplies a row's running squares by alpha `times` times, one rounding each, as that many
// updates of a zero gradient would have.
void payDecays(float* sa, int64_t width, float alpha, uint32_t& times)
{
    for (; times > 0; --times)
        kernels::scaleSquares(sa, width, alpha);
}

void settle(Stepper::OwedDecays& d)
{
    const int64_t rows = static_cast<int64_t>(d.steps.size());
    if (rows == 0)
        return;
    const int64_t width = d.squares.numel() / rows;
    float* sa = d.squares.data_ptr<float>();
    for (int64_t row = 0; row < rows; ++row)
        payDecays(sa + row * width, width, d.alpha, d.steps[static_cast<size_t>(row)]);
}

// The decays owed to `squares` (an optimizer's square_avg), or null.
Stepper::OwedDecays* findOwed(Stepper& s, const torch::Tensor& squares)
{
    for (auto& d : s.owedDecays)
        if (d.squares.is_same(squares))
            return &d;
    return nullptr;
}

// The decays owed to `squares` (a (rows, width) square_avg), made all zero on first use; what
// was owed at another alpha is settled first.
uint32_t* owedDecays(Stepper& s, const torch::Tensor& squares, float alpha)
{
    Stepper::OwedDecays* d = findOwed(s, squares);
    if (!d)
        d = &s.owedDecays.emplace_back(
            Stepper::OwedDecays { squares, alpha, std::vector<uint32_t>(static_cast<size_t>(squares.size(0)), 0) });
    if (d->alpha != alpha)
        settle(*d);
    d->alpha = alpha;
    return d->steps.data();
}

// The arrays of s's optimizer when it is a plain RMSprop (its state made where missing; a sparse
// gradient coalesced where it is not); nullopt when it is anything else, which torch::optim then
// steps.
std::optional<PlainRmsprop> plainRmsprop(Stepper& s)
{
    auto* rms = plainRmspropOptimizer(s);
    if (!rms)
        return std::nullopt;
    auto& group = rms->param_groups().front();
    const auto& o = static_cast<const torch::optim::RMSpropOptions&>(group.options());
    std::vector<torch::Tensor> params;
    for (const auto& p : group.params()) {
        if (!p.grad().defined())
            continue;
        if (!p.device().is_cpu() || p.scalar_type() != torch::kFloat32 || !p.is_contiguous())
            return std::nullopt;
        const auto& g = p.grad();
        if (g.is_sparse()) {
            if (p.dim() != 2 || p.size(1) == 0 || g.sparse_dim() != 1 || g.dense_dim() != 1
                || g.scalar_type() != torch::kFloat32)
                return std::nullopt;
            if (!g._indices().is_contiguous() || !g._values().is_contiguous()) {
                p.mutable_grad() = sumSparseRows({ g });
            } else if (!g.is_coalesced()) {
                // backward() stores a lookup's gradient as a new tensor, unmarked; two lookups of
                // one table (a shared embedding) or several passes leave the rows of each side by
                // side.
                const int64_t* rows = g._indices().data_ptr<int64_t>();
                const int64_t touched = g._indices().numel();
                bool increasing = true;
                for (int64_t k = 1; k < touched && increasing; ++k)
                    increasing = rows[k - 1] < rows[k];
                if (increasing)
                    g._coalesced_(true);
                else
                    p.mutable_grad() = sumSparseRows({ g });
            }
        } else if (!g.is_contiguous() || g.scalar_type() != torch::kFloat32) {
            return std::nullopt;
        }
        params.push_back(p);
    }
    PlainRmsprop r;
    r.alpha = static_cast<float>(o.alpha());
    r.eps = static_cast<float>(o.eps());
    r.lr = static_cast<float>(o.lr());
    auto& state = rms->state();
    // Decays owed to a state the optimizer no longer holds (loaded anew) are void.
    std::erase_if(s.owedDecays, [&](const Stepper::OwedDecays& d) {
        return std::none_of(state.begin(), state.end(), [&](const auto& kv) {
            return static_cast<const torch::optim::RMSpropParamState&>(*kv.second).square_avg().is_same(d.squares);
        });
    });
    for (auto& p : params) {
        auto key = p.unsafeGetTensorImpl();
        auto it = state.find(key);
        if (it == state.end()) {
            auto fresh = std::make_unique<torch::optim::RMSpropParamState>();
            fresh->step(0);
            fresh->square_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
            it = state.emplace(key, std::move(fresh)).first;
        }
        auto* st = static_cast<torch::optim::RMSpropParamState*>(it->second.get());
        r.w.push_back(p.data_ptr<float>());
        r.squareAvg.push_back(st->square_avg().data_ptr<float>());
        r.n.push_back(p.numel());
        r.states.push_back(st);
        const auto& g = p.grad();
        if (g.is_sparse()) {
            r.g.push_back(g._values().data_ptr<float>());
            r.gn.push_back(g._values().numel());
            r.rows.push_back(g._indices().data_ptr<int64_t>());
            r.width.push_back(p.size(1));
            r.owed.push_back(owedDecays(s, st->square_avg(), r.alpha));
        } else {
            r.g.push_back(g.data_ptr<float>());
            r.gn.push_back(p.numel());
            r.rows.push_back(nullptr);
            r.width.push_back(0);
            r.owed.push_back(nullptr);
            // A dense gradient updates every row: the decays owed come first.
            if (auto* d = findOwed(s, st->square_avg()))
                settle(*d);
        }
    }
    return r;
}

// clip_grad_norm_'s factor for a gradient whose squares sum to `sumSquares`.
float clipFactor(double clipNorm, double sumSquares)
{
    if (clipNorm <= 0)
        return 1.0f;
    return static_cast<float>(std::min(1.0, clipNorm / (std::sqrt(sumSquares) + 1e-6)));
}

// RMSprop's update of elements [begin, end) of parameter i, the gradient scaled by `clip`.
void rmspropRange(const PlainRmsprop& r, size_t i, int64_t begin, int64_t end, float clip)
{
    kernels::rmspropUpdate(
        r.w[i] + begin, r.g[i] + begin, r.squareAvg[i] + begin, end - begin, r.alpha, r.eps, r.lr, clip);
}

// RMSprop's update of rows [begin, end) of parameter i, whose gradient is sparse: the touched
// rows get the whole update, after the decays they were owed; the rows between them only owe
// one more decay of their running squares (the update of a zero gradient: sa × alpha, w as it
// was).
void rmspropRows(const PlainRmsprop& r, size_t i, int64_t begin, int64_t end, float clip)
{
    const int64_t E = r.width[i];
    if (E <= 0)
        return;
    const int64_t touched = r.gn[i] / E;
    const int64_t* rows = r.rows[i];
    uint32_t* owed = r.owed[i];
    int64_t j = std::lower_bound(rows, rows + touched, begin) - rows;
    int64_t next = begin; // the first row not yet updated
    for (; j < touched && rows[j] < end; ++j) {
        for (int64_t row = next; row < rows[j]; ++row)
            ++owed[row];
        float* sa = r.squareAvg[i] + rows[j] * E;
        payDecays(sa, E, r.alpha, owed[rows[j]]);
        kernels::rmspropUpdate(r.w[i] + rows[j] * E, r.g[i] + j * E, sa, E, r.alpha, r.eps, r.lr, clip);
        next = rows[j] + 1;
    }
    for (int64_t row = next; row < end; ++row)
        ++owed[row];
}

void countRmspropStep(const PlainRmsprop& r)
{
    for (auto* st : r.states)
        st->step(st->step() + 1);
}

// Gradient-norm clipping and RMSprop in two passes over the parameters instead of about ten:
// one pass sums the squared gradients, one updates every element (square average, step) with
// the clip factor folded in. Same maths and the same optimizer state (so checkpoints are
// unchanged); false when the optimizer or a tensor is not the plain case it handles.
bool fusedClipRmsprop(Stepper& s)
{
    const auto r = plainRmsprop(s);
    if (!r)
        return false;
    double sumsq = 0;
    if (s.clipNorm > 0)
        for (size_t i = 0; i < r->g.size(); ++i)
            sumsq += at::parallel_reduce(
                0, r->gn[i], 65536, 0.0,
                [&](int64_t begin, int64_t end, double acc) {
                    return acc + kernels::sumSquares(r->g[i] + begin, end - begin);
                },
                std::plus<double>());
    const float clip = clipFactor(s.clipNorm, sumsq);
    countRmspropStep(*r);
    for (size_t i = 0; i < r->g.size(); ++i) {
        if (r->rows[i])
            at::parallel_for(0, r->n[i] / r->width[i], std::max<int64_t>(1, 16384 / r->width[i]),
                [&](int64_t begin, int64_t end) { rmspropRows(*r, i, begin, end, clip); });
        else
            at::parallel_for(
                0, r->n[i], 16384, [&](int64_t begin, int64_t end) { rmspropRange(*r, i, begin, end, clip); });
    }
    return true;
}

} // namespace

// At B = 50 on two cores the LSTM steps' element loops, the small operations and their dispatch,
// which run on one core while the other waits, are each half as long and run at once. Only where
// a step draws no random numbers (no dropout, teacher forcing throughout), so the slices cannot
// race for the generator, and on the CPU's own LSTM layer.
int64_t stepParts(const Stepper& s, const Batch& batch)
{
    constexpr int64_t kMinRows = 8; // a floor, so that each slice's products keep some rows (not tuned)
    if (!s.device.is_cpu() || !s.model->maskedLstm() || s.lossScaling || s.teacherForcing < 1.0
        || s.model->config().dropout > 0 || s.beforePass || s.passRows > 0)
        return 1;
    const int64_t threads = at::get_num_threads();
    return std::max<int64_t>(1, std::min(threads, batch.source.size(0) / kMinRows));
}

void onCores(Stepper& s, int64_t tasks, int64_t cores, const std::function<void(int64_t)>& task)
{
    cores = std::clamp<int64_t>(cores, 1, std::max<int64_t>(1, tasks));
    std::vector<std::exception_ptr> errors(static_cast<size_t>(tasks));
    // The caller's threads shared out among the lanes (one each on two cores; on more cores than
    // lanes, each lane's products and element loops spread over its share).
    const int64_t threads = std::max<int64_t>(cores, at::get_num_threads());
    auto lane = [&](int64_t first) {
        std::optional<ScopedThreads> share;
        if (cores > 1)
            share.emplace(static_cast<int>(threads / cores + (first < threads % cores ? 1 : 0)));
        for (int64_t k = first; k < tasks; k += cores) {
            try {
                task(k);
            } catch (...) {
                errors[static_cast<size_t>(k)] = std::current_exception();
            }
        }
    };
    if (cores == 1) {
        lane(0);
    } else {
        if (!s.partThreads || s.partThreads->size() < cores - 1)
            s.partThreads = std::make_shared<LaneTeam>(static_cast<int>(cores - 1));
        s.partThreads->run(cores, lane);
    }
    for (const auto& e : errors)
        if (e)
            std::rethrow_exception(e);
}

// A bf16 step's weight forms (StepBf16Weights) into `forms`, made on `cores` of the caller's;
// nothing in fp32.
void makeStepBf16Weights(Stepper& s, int64_t cores, std::optional<StepBf16Weights>& forms)
{
    if (!s.model->maskedLstm() || s.model->gemmType() != torch::kBFloat16)
        return;
    std::vector<torch::Tensor> plain, recurrent;
    for (auto* lstm : { &s.model->encoder, &s.model->decoder })
        for (const auto& p : (*lstm)->named_parameters(/*recurse=*/false))
            if (p.key().rfind("weight_ih", 0) == 0)
                plain.push_back(p.value());
            else if (p.key().rfind("weight_hh", 0) == 0)
                recurrent.push_back(p.value());
    forms.emplace(plain, recurrent, std::vector<torch::Tensor> { s.model->output->weight },
        [&](int64_t tasks, const std::function<void(int64_t)>& task) { onCores(s, tasks, cores, task); });
}

int64_t evaluationCores(const Stepper& s, int64_t batches)
{
    if (!s.device.is_cpu() || !s.model->maskedLstm() || s.beforePass || s.passRows > 0)
        return 1;
    return std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), batches));
}

namespace {

// Each parameter's elements in blocks of this many (each summed and squared while in L1); lane k
// of `lanes` takes the blocks [k·nb/lanes, (k + 1)·nb/lanes) of every parameter.
constexpr int64_t kLaneBlock = 4096;

std::pair<int64_t, int64_t> laneShare(int64_t n, int64_t lane, int64_t lanes)
{
    const int64_t blocks = (n + kLaneBlock - 1) / kLaneBlock;
    return { std::min(n, blocks * lane / lanes * kLaneBlock), std::min(n, blocks * (lane + 1) / lanes * kLaneBlock) };
}

struct PartsOutcome {
    torch::Tensor loss; // summed over the batch's real target tokens
    // The squares of the summed gradients, added up (in a fixed order of blocks, so the same on
    // any number of cores); nullopt when the sums were not made in the lanes.
    std::optional<double> gradSquares;
};

// The loss and gradients of `batch` as `parts` row slices, each forward and backward on a thread
// of its own, the gradients summed in slice order into the parameters' grad (the same sums as
// one pass up to rounding, and the same every time: the slices and the order of the sums are
// fixed). The sums, and the squares clipping needs, are made by the lanes too, each over its
// share of every parameter's elements: nothing of the step runs as a parallel region of the
// caller's own OpenMP team, whose worker would otherwise spin on one core into the next step's
// lanes.
PartsOutcome lossInParts(Stepper& s, const Batch& batch, int64_t parts, double tokens)
{
    const auto params = s.model->parameters();
    std::vector<std::vector<torch::Tensor>> grads(static_cast<size_t>(parts));
    std::vector<torch::Tensor> sums(static_cast<size_t>(parts));
    {
        // bf16: the weights' bf16 forms made once for the step, shared out among the lanes,
        // instead of by every lane in every pass.
        std::optional<StepBf16Weights> bf16Weights;
        makeStepBf16Weights(s, parts, bf16Weights);
        onCores(s, parts, parts, [&](int64_t k) {
            const size_t i = static_cast<size_t>(k);
            auto partSum = lossSum(s, rowStride(batch, k, parts), true, 1.0, nullptr);
            grads[i] = torch::autograd::grad({ partSum / tokens }, params, {}, /*retain_graph=*/false,
                /*create_graph=*/false, /*allow_unused=*/true);
            sums[i] = partSum.detach();
        });
    }
    // Each parameter's gradient: the first slice's, the others added to it in slice order; sparse
    // ones (the embeddings') as one sparse gradient of the rows any slice touched.
    std::vector<torch::Tensor> total(params.size());
    std::vector<torch::Tensor> summed(params.size()); // what the lanes add into and square
    std::vector<std::vector<torch::Tensor>> addends(params.size());
    bool raw = true; // every sum over plain fp32 arrays (else ATen adds them)
    for (size_t i = 0; i < params.size(); ++i) {
        std::vector<torch::Tensor> sparse;
        for (auto& part : grads)
            if (part[i].defined() && part[i].is_sparse())
                sparse.push_back(part[i]);
        if (!sparse.empty()) {
            total[i] = sumSparseRows(sparse);
            summed[i] = total[i]._values();
            continue;
        }
        for (const auto& part : grads) {
            const auto& g = part[i];
            if (!g.defined())
                continue;
            if (!total[i].defined()) {
                // A parameter's grad is a dense tensor of its own, as backward() leaves it: the
                // optimizer detaches it in place, which a view (attention's weights) refuses.
                total[i] = g.is_view() || !g.is_contiguous() ? g.clone(torch::MemoryFormat::Contiguous) : g;
                summed[i] = total[i];
                raw = raw && total[i].scalar_type() == torch::kFloat32;
            } else {
                addends[i].push_back(g);
                raw = raw && g.is_contiguous() && g.scalar_type() == torch::kFloat32 && g.numel() == total[i].numel();
            }
        }
    }
    PartsOutcome out;
    if (raw) {
        std::vector<size_t> firstBlock(params.size() + 1, 0);
        for (size_t i = 0; i < params.size(); ++i)
            firstBlock[i + 1] = firstBlock[i]
                + (summed[i].defined() ? static_cast<size_t>((summed[i].numel() + kLaneBlock - 1) / kLaneBlock) : 0);
        std::vector<double> squares(firstBlock.back(), 0.0);
        onCores(s, parts, parts, [&](int64_t k) {
            for (size_t i = 0; i < params.size(); ++i) {
                if (!summed[i].defined())
                    continue;
                float* dst = summed[i].data_ptr<float>();
                const auto [begin, end] = laneShare(summed[i].numel(), k, parts);
                for (int64_t b = begin; b < end; b += kLaneBlock) {
                    const int64_t n = std::min(kLaneBlock, end - b);
                    for (const auto& g : addends[i])
                        kernels::addInto(dst + b, g.data_ptr<float>() + b, n);
                    squares[firstBlock[i] + static_cast<size_t>(b / kLaneBlock)] = kernels::sumSquares(dst + b, n);
                }
            }
        });
        double sumsq = 0;
        for (double q : squares)
            sumsq += q;
        out.gradSquares = sumsq;
    } else {
        for (size_t i = 0; i < params.size(); ++i)
            for (const auto& g : addends[i])
                total[i].add_(g);
    }
    for (size_t i = 0; i < params.size(); ++i)
        if (total[i].defined())
            params[i].mutable_grad() = total[i];
    out.loss = sums[0];
    for (size_t i = 1; i < sums.size(); ++i)
        out.loss = out.loss + sums[i];
    return out;
}

} // namespace

void countStep(double& epochLossSum, int64_t& epochTokens, const StepOutcome& step, int64_t tokens)
{
    if (!step.applied)
        return;
    epochLossSum += step.lossSum;
    epochTokens += tokens;
}

void seedStep(uint64_t seed, int64_t step)
{
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(seed + 0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(step + 1));
}

torch::Tensor rngState(const torch::Device& device)
{
    auto gen = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    return gen.get_state();
}

void setRngState(const torch::Device& device, const torch::Tensor& state)
{
    auto gen = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(state);
}

void inPasses(
    Stepper& s, const Batch& batch, const std::function<void()>& restart, const std::function<void(const Batch&)>& pass)
{
    const int64_t B = batch.source.size(0);
    for (;;) {
        const int64_t rows = s.passRows > 0 ? std::min(s.passRows, B) : B;
        try {
            for (int64_t begin = 0; begin < B; begin += rows) {
                const int64_t end = std::min(B, begin + rows);
                if (s.beforePass)
                    s.beforePass(end - begin);
                pass(rows == B ? batch : rowSlice(batch, begin, end));
            }
            return;
        } catch (const c10::Error& e) {
            // CUDA's out of memory, or the CPU allocator's refusal (an address-space or cgroup
            // limit): the batch runs as smaller passes, down to one pair. Anything else goes on.
            const bool cpu = std::string(e.what()).find("can't allocate memory") != std::string::npos;
            if (!cpu && dynamic_cast<const c10::OutOfMemoryError*>(&e) == nullptr)
                throw;
            releaseCachedMemory(s.device);
            if (rows <= 1)
                throw Error("out of memory on " + s.device.str() + " with one pair per pass (" + inWords(e.what())
                    + "); use a smaller model, a shorter --max-target" + (cpu ? "" : ", or the CPU"));
            s.passRows = (rows + 1) / 2;
        }
        restart();
    }
}

namespace {

// The parameters' sparse gradients made dense, for the steps that only take dense ones.
void denseGradients(Stepper& s)
{
    for (auto& p : s.model->parameters())
        if (p.grad().defined() && p.grad().is_sparse())
            p.mutable_grad() = p.grad().to_dense();
}

} // namespace

void settleOptimizer(Stepper& s)
{
    for (auto& d : s.owedDecays)
        settle(d);
}

StepOutcome trainStep(Stepper& s, const Batch& batch)
{
    const bool scaleLoss = s.lossScaling;
    s.model->train();
    // Sparse embedding gradients where the engine's own RMSprop steps the weights (it walks the
    // rows a batch did not touch with their running squares' decay alone).
    s.model->setSparseEmbedding(s.device.is_cpu() && !scaleLoss && plainRmspropOptimizer(s));
    const double tokens = static_cast<double>(batch.tokens);
    torch::Tensor sum; // summed over the passes, in the loss' own dtype (one pass: as it was)
    auto restart = [&] {
        s.optimizer->zero_grad();
        sum = torch::Tensor();
    };
    restart();
    const int64_t parts = stepParts(s, batch);
    std::optional<double> gradSquares; // made by the lanes
    if (parts > 1) {
        auto summed = lossInParts(s, batch, parts, tokens);
        sum = summed.loss;
        gradSquares = summed.gradSquares;
    } else {
        // One pass (or, after running out of memory, several) on the caller's threads; bf16's
        // weight forms made once for them all.
        std::optional<StepBf16Weights> bf16Weights;
        makeStepBf16Weights(s, 1, bf16Weights);
        inPasses(s, batch, restart, [&](const Batch& part) {
            auto partSum = lossSum(s, part, true, s.teacherForcing, nullptr);
            auto loss = partSum / tokens; // this pass's share of the batch's mean
            (scaleLoss ? loss * s.lossScale : loss).backward();
            sum = sum.defined() ? sum + partSum.detach() : partSum.detach();
        });
    }
    const auto loss = sum / tokens;
    StepOutcome out;
    out.applied = true;
    if (scaleLoss) {
        denseGradients(s);
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
    if (!out.applied)
        return out;
    if (gradSquares) {
        // The update in the lanes too, each over its share of the elements (of the rows, for a
        // sparse gradient).
        if (const auto r = plainRmsprop(s)) {
            const float clip = clipFactor(s.clipNorm, *gradSquares);
            countRmspropStep(*r);
            onCores(s, parts, parts, [&](int64_t k) {
                for (size_t i = 0; i < r->n.size(); ++i) {
                    if (r->rows[i]) {
                        const int64_t rows = r->n[i] / r->width[i];
                        if (rows * k / parts < rows * (k + 1) / parts)
                            rmspropRows(*r, i, rows * k / parts, rows * (k + 1) / parts, clip);
                        continue;
                    }
                    const auto [begin, end] = laneShare(r->n[i], k, parts);
                    if (begin < end)
                        rmspropRange(*r, i, begin, end, clip);
                }
            });
            return out;
        }
    }
    if (!fusedClipRmsprop(s)) {
        settleOptimizer(s);
        denseGradients(s);
        if (s.clipNorm > 0)
            torch::nn::utils::clip_grad_norm_(s.model->parameters(), s.clipNorm);
        s.optimizer->step();
    }
    return out;
}

} // namespace chatbench
