#include "kerasfile.h"
#include "childprocess.h"

#include "atomicfile.h"
#include "chatbench/error.h"
#include "jsondoc.h"
#include "text.h"

#include <H5Cpp.h>
#include <nlohmann/json.hpp>
#include <zip.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using nlohmann::json;

namespace chatbench {

namespace {

// Sizes no chatbot has: a file declaring more is refused before anything is allocated.
constexpr int64_t kMaxDim = int64_t(1) << 24;
constexpr int64_t kMaxElements = int64_t(1) << 30;
constexpr uint64_t kMaxConfigBytes = 64ull << 20;
constexpr uint64_t kMaxWeightsBytes = 2ull << 30;

std::string shapeText(const std::vector<int64_t>& s)
{
    std::string out = "(";
    for (size_t i = 0; i < s.size(); ++i)
        out += (i ? ", " : "") + std::to_string(s[i]);
    return out + ")";
}

// ---- the container: zip (Keras 3) or HDF5 (legacy) ---------------------------------------------

enum class Container { Zip, Hdf5, Other };

Container sniff(const std::string& path)
{
    errno = 0;
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw Error(path, 0,
            "cannot open the model file" + (errno ? " (" + std::string(std::strerror(errno)) + ")" : std::string()));
    char head[8] = {};
    in.read(head, sizeof head);
    if (in.gcount() >= 4 && std::memcmp(head, "PK\x03\x04", 4) == 0)
        return Container::Zip;
    if (in.gcount() == 8 && std::memcmp(head, "\x89HDF\r\n\x1a\n", 8) == 0)
        return Container::Hdf5;
    return Container::Other;
}

// One member of a zip archive, read whole after checking its declared size.
class ZipArchive {
public:
    explicit ZipArchive(const std::string& path)
        : m_path(path)
    {
        int err = 0;
        m_zip = zip_open(path.c_str(), ZIP_RDONLY, &err);
        if (!m_zip) {
            zip_error_t e;
            zip_error_init_with_code(&e, err);
            const std::string why = zip_error_strerror(&e);
            zip_error_fini(&e);
            throw Error(path, 0, "not a readable .keras (zip) file: " + why);
        }
        // Two members of one name: this reader would take the first and Keras (Python's zipfile)
        // the last, so the model imported would not be the one Keras loads.
        std::set<std::string> names;
        const zip_int64_t count = zip_get_num_entries(m_zip, 0);
        for (zip_int64_t i = 0; i < count; ++i) {
            const char* name = zip_get_name(m_zip, static_cast<zip_uint64_t>(i), 0);
            if (name && !names.insert(name).second) {
                const std::string twice = name; // the archive's memory goes with it
                zip_discard(m_zip);
                throw Error(path, 0,
                    "the archive holds two members named '" + printable(twice)
                        + "' (Keras would read the last): an edited or corrupt .keras file");
            }
        }
    }
    ~ZipArchive() { zip_discard(m_zip); }
    ZipArchive(const ZipArchive&) = delete;
    ZipArchive& operator=(const ZipArchive&) = delete;

    bool has(const std::string& name) const { return zip_name_locate(m_zip, name.c_str(), 0) >= 0; }

    std::string read(const std::string& name, uint64_t limit) const
    {
        const zip_int64_t index = zip_name_locate(m_zip, name.c_str(), 0);
        if (index < 0)
            throw Error(m_path, 0, "the archive has no " + name + " (not a Keras 3 .keras file)");
        zip_stat_t st;
        zip_stat_init(&st);
        if (zip_stat_index(m_zip, static_cast<zip_uint64_t>(index), 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE))
            throw Error(m_path, 0, name + ": cannot read its size in the archive");
        if ((st.valid & ZIP_STAT_COMP_METHOD) && (st.valid & ZIP_STAT_COMP_SIZE) && st.comp_method == ZIP_CM_STORE
            && st.comp_size != st.size)
            throw Error(m_path, 0,
                name + " is stored uncompressed but declares " + std::to_string(st.size) + " bytes for "
                    + std::to_string(st.comp_size) + " (corrupt archive)");
        if (st.size > limit)
            throw Error(m_path, 0,
                name + " declares " + std::to_string(st.size) + " bytes, more than the " + std::to_string(limit)
                    + " a chatbot model can need");
        zip_file_t* f = zip_fopen_index(m_zip, static_cast<zip_uint64_t>(index), 0);
        if (!f)
            throw Error(m_path, 0, name + ": " + zip_strerror(m_zip));
        std::string out(static_cast<size_t>(st.size), '\0');
        zip_uint64_t done = 0;
        while (done < st.size) {
            const zip_int64_t n = zip_fread(f, out.data() + done, st.size - done);
            if (n <= 0) {
                const std::string why = n < 0 ? zip_file_strerror(f) : "the member ends early";
                zip_fclose(f);
                throw Error(m_path, 0, name + ": " + why + " (truncated or corrupt archive)");
            }
            done += static_cast<zip_uint64_t>(n);
        }
        zip_fclose(f);
        // libzip does not check a stored member's CRC-32; Keras (Python's zipfile) refuses a
        // mismatch, and flipped bits in the weights would otherwise import as other weights.
        if ((st.valid & ZIP_STAT_CRC) && text::crc32(out) != st.crc)
            throw Error(m_path, 0, name + ": CRC-32 mismatch (corrupt archive)");
        return out;
    }

private:
    std::string m_path;
    zip_t* m_zip = nullptr;
};

constexpr const char* kWeightsCopied = "the weights of a .keras file are copied there to be read";

// A file in the temporary folder, removed however reading ends.
class TempFile {
public:
    // `model`: the file the bytes come from, which an error names.
    TempFile(const std::string& bytes, const std::string& model)
    {
        static std::atomic<int> counter { 0 };
        m_path = (fs::path(temporaryFolder(kWeightsCopied))
            / processScratchName("chatbench-keras-", static_cast<uint64_t>(counter++), ".h5"))
                     .string();
        // Written with the system's calls, whose errors say why ("Permission denied", "No space
        // left on device"); a copy cut short is removed before the error leaves.
        const int fd = ::open(m_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        int error = fd < 0 ? errno : 0;
        // Readable by this user whatever the umask (444 made it write-only, and HDF5 then could
        // not open the copy: found by an outside pass).
        if (fd >= 0 && ::fchmod(fd, 0600) != 0)
            error = errno;
        for (size_t done = 0; fd >= 0 && error == 0 && done < bytes.size();) {
            const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
            if (n < 0 && errno != EINTR)
                error = errno;
            else if (n > 0)
                done += static_cast<size_t>(n);
        }
        if (fd >= 0 && ::close(fd) != 0 && error == 0)
            error = errno;
        if (error != 0) {
            if (fd >= 0)
                remove();
            throw Error(model, 0,
                "cannot write a temporary copy of its weights to " + printable(m_path) + " ("
                    + std::string(std::strerror(error)) + "): "
                    + (error == EFBIG ? "the file-size limit (ulimit -f) is below its size; raise the limit"
                                      : "set TMPDIR to a writable folder with room"));
        }
    }
    ~TempFile() { remove(); }
    void remove()
    {
        std::error_code ec;
        fs::remove(m_path, ec);
    }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
    const std::string& path() const { return m_path; }

private:
    std::string m_path;
};

// Copies of the weights left by importers that were killed (named chatbench-keras-<pid>-N.h5):
// removed when their process is gone.
void removeStaleTempFiles()
{
    removeDeadProcessesFiles(temporaryFolder(kWeightsCopied), "chatbench-keras-", ".h5");
}

// ---- HDF5 ----------------------------------------------------------------------------------------

bool pathExists(const H5::H5File& f, const std::string& path)
{
    // Every component must exist for H5Lexists on the next one.
    std::string cur;
    size_t start = 0;
    while (start <= path.size()) {
        const size_t slash = path.find('/', start);
        cur = path.substr(0, slash);
        if (H5Lexists(f.getId(), cur.c_str(), H5P_DEFAULT) <= 0)
            return false;
        if (slash == std::string::npos)
            return true;
        start = slash + 1;
    }
    return true;
}

std::string readStringAttribute(const H5::H5Object& obj, const std::string& name)
{
    H5::Attribute a = obj.openAttribute(name);
    std::string s;
    a.read(a.getStrType(), s);
    return s;
}

// A 1-D attribute of strings, variable-length (h5py's str) or fixed-length (numpy bytes).
std::vector<std::string> readStringsAttribute(const H5::H5Object& obj, const std::string& name)
{
    H5::Attribute a = obj.openAttribute(name);
    H5::DataSpace space = a.getSpace();
    const hssize_t n = space.getSimpleExtentNpoints();
    if (n < 0 || n > 1'000'000)
        throw Error("attribute '" + name + "' has an unreasonable size");
    std::vector<std::string> out;
    if (n == 0)
        return out;
    H5::StrType type = a.getStrType();
    if (type.isVariableStr()) {
        std::vector<char*> buf(static_cast<size_t>(n), nullptr);
        a.read(type, buf.data());
        for (char* p : buf)
            out.emplace_back(p ? p : "");
        H5Dvlen_reclaim(type.getId(), space.getId(), H5P_DEFAULT, buf.data());
    } else {
        const size_t len = type.getSize();
        if (len == 0 || len > 65536)
            throw Error("attribute '" + name + "' has an unreasonable string length");
        std::vector<char> buf(static_cast<size_t>(n) * len);
        a.read(type, buf.data());
        for (hssize_t i = 0; i < n; ++i) {
            const char* p = buf.data() + static_cast<size_t>(i) * len;
            out.emplace_back(p, strnlen(p, len));
        }
    }
    return out;
}

// A float dataset whose shape must be `expected` exactly.
KerasTensor readTensor(const H5::H5File& f, const std::string& file, const std::string& path,
    const std::vector<int64_t>& expected, const std::string& what)
{
    H5::DataSet ds = f.openDataSet(path);
    if (ds.getTypeClass() != H5T_FLOAT)
        throw Error(file, 0, what + " (" + path + ") is not a floating-point array");
    H5::DataSpace space = ds.getSpace();
    const int rank = space.getSimpleExtentNdims();
    std::vector<int64_t> shape;
    if (rank > 0 && rank <= 8) {
        std::vector<hsize_t> dims(static_cast<size_t>(rank));
        space.getSimpleExtentDims(dims.data());
        for (hsize_t d : dims)
            shape.push_back(static_cast<int64_t>(std::min<hsize_t>(d, static_cast<hsize_t>(kMaxElements) + 1)));
    }
    if (shape != expected)
        throw Error(file, 0,
            what + " (" + path + ") has shape " + shapeText(shape) + ", the config says " + shapeText(expected));
    KerasTensor t;
    t.shape = shape;
    int64_t n = 1;
    for (int64_t d : shape)
        n *= d;
    t.data.resize(static_cast<size_t>(n));
    ds.read(t.data.data(), H5::PredType::NATIVE_FLOAT);
    for (float v : t.data)
        if (!std::isfinite(v))
            throw Error(file, 0, what + " (" + path + ") holds NaN or infinite values");
    return t;
}

// Where each layer's weights are, in the layer's own order (kernel, recurrent kernel, bias, …).
using WeightIndex = std::map<std::string, std::vector<std::string>>;

// Keras 3 model.weights.h5: layers/<object>/vars/<i> (LSTM: layers/<object>/cell/vars/<i>); the
// layer's name is the "name" attribute of its vars group.
WeightIndex indexKeras3(const H5::H5File& f)
{
    WeightIndex index;
    if (!pathExists(f, "layers"))
        return index;
    H5::Group layers = f.openGroup("layers");
    for (hsize_t i = 0; i < layers.getNumObjs(); ++i) {
        const std::string object = layers.getObjnameByIdx(i);
        const std::string base = "layers/" + object;
        if (!pathExists(f, base + "/vars"))
            continue;
        std::string name = object;
        H5::Group vars = f.openGroup(base + "/vars");
        if (vars.attrExists("name"))
            name = readStringAttribute(vars, "name");
        // Every dataset in a "vars" group under the layer, by path with numeric indices.
        std::vector<std::pair<std::string, int>> found;
        std::function<void(const std::string&, int)> walk = [&](const std::string& group, int depth) {
            if (depth > 6)
                return;
            H5::Group g = f.openGroup(group);
            for (hsize_t k = 0; k < g.getNumObjs(); ++k) {
                const std::string child = g.getObjnameByIdx(k);
                const std::string path = group + "/" + child;
                if (g.getObjTypeByIdx(k) == H5G_GROUP) {
                    walk(path, depth + 1);
                } else if (group.size() >= 5 && group.compare(group.size() - 5, 5, "/vars") == 0) {
                    int idx = -1;
                    try {
                        idx = std::stoi(child);
                    } catch (const std::exception&) {
                    }
                    found.emplace_back(path, idx);
                }
            }
        };
        walk(base, 0);
        std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
            const std::string ga = a.first.substr(0, a.first.rfind('/')), gb = b.first.substr(0, b.first.rfind('/'));
            return ga != gb ? ga < gb : a.second < b.second;
        });
        auto& paths = index[name];
        for (const auto& p : found)
            paths.push_back(p.first);
    }
    return index;
}

// Legacy .h5: model_weights/<layer> lists its datasets in the weight_names attribute.
WeightIndex indexLegacy(const H5::H5File& f)
{
    WeightIndex index;
    H5::Group root = f.openGroup("model_weights");
    for (hsize_t i = 0; i < root.getNumObjs(); ++i) {
        const std::string layer = root.getObjnameByIdx(i);
        H5::Group g = f.openGroup("model_weights/" + layer);
        if (!g.attrExists("weight_names"))
            continue;
        auto& paths = index[layer];
        for (const std::string& w : readStringsAttribute(g, "weight_names"))
            paths.push_back("model_weights/" + layer + "/" + w);
    }
    return index;
}

// ---- the config ----------------------------------------------------------------------------------

struct Ref {
    std::string layer;
    int node = 0;
    int tensor = 0;
};

struct Layer {
    std::string name;
    std::string type; // class_name
    json config;
    std::vector<Ref> inputs; // the first call's tensor inputs, in order (main input first)
    std::vector<Ref> states; // initial_state tensors (Keras 3 keeps them in kwargs)
};

void collectRefs(const json& j, std::vector<Ref>& out)
{
    if (j.is_object()) {
        if (j.contains("config") && j["config"].is_object() && j["config"].contains("keras_history")) {
            const json& h = j["config"]["keras_history"];
            if (h.is_array() && h.size() >= 3 && h[0].is_string() && h[1].is_number_integer()
                && h[2].is_number_integer())
                out.push_back({ h[0].get<std::string>(), h[1].get<int>(), h[2].get<int>() });
            return;
        }
        for (const auto& [k, v] : j.items())
            collectRefs(v, out);
    } else if (j.is_array()) {
        for (const auto& v : j)
            collectRefs(v, out);
    }
}

Layer parseLayer(const json& l, const std::string& file)
{
    Layer layer;
    if (!l.is_object() || !l.contains("class_name") || !l["class_name"].is_string() || !l.contains("config")
        || !l["config"].is_object())
        throw Error(file, 0, "a layer entry of the model config has no class_name or config");
    layer.type = l["class_name"].get<std::string>();
    layer.config = l["config"];
    if (l.contains("name") && l["name"].is_string())
        layer.name = l["name"].get<std::string>();
    else if (layer.config.contains("name") && layer.config["name"].is_string())
        layer.name = layer.config["name"].get<std::string>();
    else
        throw Error(file, 0, "a " + layer.type + " layer of the model config has no name");
    const json nodes = l.value("inbound_nodes", json::array());
    if (!nodes.is_array() || nodes.empty())
        return layer;
    const json& node = nodes[0];
    if (node.is_object()) {
        // Keras 3: {"args": [...], "kwargs": {"initial_state": [...], "mask": ..., ...}}
        collectRefs(node.value("args", json::array()), layer.inputs);
        const json kwargs = node.value("kwargs", json::object());
        if (kwargs.is_object() && kwargs.contains("initial_state"))
            collectRefs(kwargs["initial_state"], layer.states);
    } else if (node.is_array()) {
        // Keras 2: [[name, node, tensor, kwargs], ...]; tensors after the first are the states.
        for (const json& e : node) {
            if (!e.is_array() || e.size() < 3 || !e[0].is_string() || !e[1].is_number_integer()
                || !e[2].is_number_integer())
                throw Error(file, 0, "layer '" + layer.name + "': unreadable inbound node");
            Ref r { e[0].get<std::string>(), e[1].get<int>(), e[2].get<int>() };
            (layer.inputs.empty() ? layer.inputs : layer.states).push_back(r);
            if (e.size() >= 4 && e[3].is_object() && e[3].contains("initial_state"))
                collectRefs(e[3]["initial_state"], layer.states);
        }
    }
    return layer;
}

std::optional<int> declaredLength(const Layer& input)
{
    for (const char* key : { "batch_shape", "batch_input_shape" }) {
        if (!input.config.contains(key))
            continue;
        const json& s = input.config[key];
        if (s.is_array() && s.size() >= 2 && s[1].is_number_integer() && s[1].get<int64_t>() > 0
            && s[1].get<int64_t>() <= 100000)
            return s[1].get<int>();
    }
    return std::nullopt;
}

class Graph {
public:
    Graph(const json& root, const std::string& file)
        : m_file(file)
    {
        if (!root.is_object() || !root.contains("class_name") || !root.contains("config"))
            throw Error(file, 0, "the model config has no class_name/config");
        const std::string cls = root["class_name"].is_string() ? root["class_name"].get<std::string>() : "";
        if (cls == "Sequential")
            throw Error(file, 0,
                "a Sequential model has no encoder → decoder handoff; the seq2seq recipe is a functional Model "
                "with two inputs");
        if (cls != "Functional" && cls != "Model")
            throw Error(file, 0,
                "the model is a '" + cls
                    + "', not a functional Keras Model (a subclassed model saves no graph to read): build the recipe "
                      "with keras.Model(inputs, outputs), load the weights into it, and save that");
        const json& cfg = root["config"];
        if (!cfg.contains("layers") || !cfg["layers"].is_array())
            throw Error(file, 0, "the model config lists no layers");
        for (const json& l : cfg["layers"]) {
            Layer layer = parseLayer(l, file);
            m_layers[layer.name] = std::move(layer);
        }
        const json out = cfg.value("output_layers", json());
        if (out.is_array() && !out.empty() && out[0].is_string())
            m_output = out[0].get<std::string>();
        else if (out.is_array() && out.size() == 1 && out[0].is_array() && !out[0].empty() && out[0][0].is_string())
            m_output = out[0][0].get<std::string>();
        else
            throw Error(file, 0,
                "the model must have exactly one output (the decoder's softmax); the inference encoder or decoder "
                "model of the recipe? import the training model");
    }

    const Layer& layer(const std::string& name) const
    {
        auto it = m_layers.find(name);
        if (it == m_layers.end())
            throw Error(m_file, 0, "the config refers to a layer '" + name + "' it does not define");
        return it->second;
    }
    const Layer& output() const { return layer(m_output); }
    // The first layer whose class name contains `part` ("Attention", "Bidirectional"), or null.
    const Layer* find(const std::string& part) const
    {
        for (const auto& [name, l] : m_layers)
            if (l.type.find(part) != std::string::npos)
                return &l;
        return nullptr;
    }

    // The layer feeding `l`'s main input, looking through Dropout layers (no effect when answering).
    const Layer& mainInput(const Layer& l, std::vector<std::string>& notes) const
    {
        if (l.inputs.empty())
            throw Error(m_file, 0, "layer '" + l.name + "' (" + l.type + ") has no input");
        const Layer* cur = &layer(l.inputs.front().layer);
        int hops = 0;
        while (cur->type == "Dropout" || cur->type == "SpatialDropout1D") {
            // Once, however many times the walk passes it.
            if (std::string note
                = "layer '" + cur->name + "' (" + cur->type + ") skipped: it does nothing when answering";
                std::find(notes.begin(), notes.end(), note) == notes.end())
                notes.push_back(std::move(note));
            if (cur->inputs.empty() || ++hops > 16)
                throw Error(m_file, 0, "layer '" + cur->name + "' has no input");
            cur = &layer(cur->inputs.front().layer);
        }
        return *cur;
    }
    // The tensor `l`'s main input is (layer, call, output), looking through Dropout layers as
    // mainInput does: two layers reading the same one read the same sequence.
    Ref mainRef(const Layer& l) const
    {
        const Layer* cur = &l;
        for (int hops = 0; !cur->inputs.empty() && hops <= 16; ++hops) {
            const Layer& below = layer(cur->inputs.front().layer);
            if (below.type != "Dropout" && below.type != "SpatialDropout1D")
                return cur->inputs.front();
            cur = &below;
        }
        return {};
    }
    // Which output of mainInput(l) it reads (0: the sequence; an LSTM with return_state also has
    // 1 and 2, its state_h and state_c), looking through Dropout layers as mainInput does.
    int mainTensor(const Layer& l) const
    {
        const Layer* cur = &l;
        for (int hops = 0; !cur->inputs.empty() && hops <= 16; ++hops) {
            const Layer& below = layer(cur->inputs.front().layer);
            if (below.type != "Dropout" && below.type != "SpatialDropout1D")
                return cur->inputs.front().tensor;
            cur = &below;
        }
        return 0;
    }

private:
    std::string m_file;
    std::map<std::string, Layer> m_layers;
    std::string m_output;
};

const std::string kSupported = "chatbench imports the recipe: Embedding → LSTM encoder, Embedding → LSTM decoder "
                               "started from the encoder's states, Dense softmax (one or more LSTM layers)";

[[noreturn]] void unsupported(const std::string& file, const Layer& l, const std::string& why)
{
    throw Error(file, 0, "layer '" + l.name + "' (" + l.type + ") " + why + "; " + kSupported);
}

// `l` reads the sequence (output 0) of the layer below it, `below`: not an LSTM's state, nor an
// output the layer does not have.
void requireSequence(const std::string& file, const Layer& l, const Layer& below, int tensor)
{
    if (tensor == 0)
        return;
    const bool states = below.type == "LSTM" && below.config.value("return_state", false) == true;
    if (states && (tensor == 1 || tensor == 2))
        unsupported(file, l,
            std::string("reads the ") + (tensor == 1 ? "state_h" : "state_c") + " of '" + below.name
                + "' instead of its sequence");
    unsupported(file, l,
        "reads output " + std::to_string(tensor) + " of '" + below.name + "' (" + below.type + "), which has "
            + (states ? "3 outputs (0-2)" : "one output (0)"));
}

int64_t positive(const std::string& file, const Layer& l, const char* key)
{
    if (!l.config.contains(key) || !l.config[key].is_number_integer())
        throw Error(file, 0, "layer '" + l.name + "' has no integer '" + key + "'");
    const int64_t v = l.config[key].get<int64_t>();
    if (v < 1 || v > kMaxDim)
        throw Error(file, 0, "layer '" + l.name + "': " + key + " = " + std::to_string(v) + " is out of range");
    return v;
}

// A layer that model.quantize() rewrote (Keras 3: int8, int4 or float8 weights with their scales)
// holds other arrays than the float ones the recipe has.
void checkNotQuantized(const std::string& file, const Layer& l, const json& config)
{
    const json dtype = config.value("dtype", json());
    if (!dtype.is_object() || !dtype.value("class_name", json("")).is_string())
        return;
    const std::string policy = dtype.value("class_name", "");
    if (policy.rfind("Quantized", 0) != 0)
        return;
    const json inner = dtype.value("config", json());
    const json mode = inner.is_object() ? inner.value("mode", json()) : json();
    unsupported(file, l,
        "is quantized (" + (mode.is_string() ? mode.get<std::string>() : policy)
            + ", by model.quantize()); chatbench imports float weights: import the model as saved before quantize()");
}

// The dtype policy a layer computes in ("mixed_float16"; Keras 3 writes {"class_name":
// "DTypePolicy", "config": {"name": …}}, Keras 2 a name or {"class_name": "Policy", …}); empty
// when it says none.
std::string dtypePolicy(const Layer& l)
{
    const json dtype = l.config.value("dtype", json());
    if (dtype.is_string())
        return dtype.get<std::string>();
    const json inner = dtype.is_object() ? dtype.value("config", json()) : json();
    const json name = inner.is_object() ? inner.value("name", json()) : json();
    return name.is_string() ? name.get<std::string>() : "";
}

void checkLstm(const std::string& file, const Layer& l)
{
    if (l.type != "LSTM")
        unsupported(file, l, "is not an LSTM");
    checkNotQuantized(file, l, l.config);
    auto str = [&](const char* key, const char* fallback) {
        const json v = l.config.value(key, json(fallback));
        return v.is_string() ? v.get<std::string>() : std::string("?");
    };
    if (str("activation", "tanh") != "tanh")
        unsupported(file, l, "uses activation '" + str("activation", "tanh") + "' (only tanh is supported)");
    if (str("recurrent_activation", "sigmoid") != "sigmoid")
        unsupported(file, l,
            "uses recurrent_activation '" + str("recurrent_activation", "sigmoid")
                + "' (only sigmoid is supported; old Keras defaulted to hard_sigmoid)");
    for (const char* flag : { "go_backwards", "stateful", "time_major" })
        if (l.config.value(flag, false))
            unsupported(file, l, std::string("has ") + flag + " = true");
}

void checkEmbedding(const std::string& file, const Layer& l)
{
    if (l.type != "Embedding")
        unsupported(file, l, "is where an Embedding was expected");
    checkNotQuantized(file, l, l.config);
}

// Where the weights are: the HDF5 file and where each layer's arrays are in it.
struct WeightSource {
    const H5::H5File& f;
    const WeightIndex& index;
};

// The expected shapes of a layer's weights, in the order Keras stores them.
std::vector<KerasTensor> readWeights(const WeightSource& w, const std::string& file, const Layer& l,
    const std::vector<std::pair<std::string, std::vector<int64_t>>>& expected)
{
    const H5::H5File& f = w.f;
    const WeightIndex& index = w.index;
    auto it = index.find(l.name);
    if (it == index.end())
        throw Error(file, 0, "no weights for layer '" + l.name + "' in the file");
    if (it->second.size() != expected.size())
        throw Error(file, 0,
            "layer '" + l.name + "' has " + std::to_string(it->second.size()) + " weight arrays, expected "
                + std::to_string(expected.size()));
    std::vector<KerasTensor> out;
    for (size_t i = 0; i < expected.size(); ++i)
        out.push_back(
            readTensor(f, file, it->second[i], expected[i].second, "layer '" + l.name + "' " + expected[i].first));
    return out;
}

KerasLstm readLstm(const WeightSource& weights, const std::string& file, const Layer& l, int64_t input, int64_t units)
{
    const bool bias = l.config.value("use_bias", true);
    std::vector<std::pair<std::string, std::vector<int64_t>>> expected
        = { { "kernel", { input, 4 * units } }, { "recurrent_kernel", { units, 4 * units } } };
    if (bias)
        expected.push_back({ "bias", { 4 * units } });
    auto w = readWeights(weights, file, l, expected);
    KerasLstm out;
    out.name = l.name;
    out.kernel = std::move(w[0]);
    out.recurrent = std::move(w[1]);
    if (bias)
        out.bias = std::move(w[2]);
    else
        out.bias = { { 4 * units }, std::vector<float>(static_cast<size_t>(4 * units), 0.0f) };
    return out;
}

// The model `config` describes, its weights read from `weights` (none read when null: the tensors
// stay empty).
KerasSeq2Seq readModel(const json& config, const std::string& file, const WeightSource* weights)
{
    KerasSeq2Seq m;
    m.file = file;
    const Graph g(config, file);
    std::vector<std::string>& notes = m.notes;

    // The output: Dense softmax, possibly wrapped in TimeDistributed.
    const Layer& out = g.output();
    Layer dense = out;
    if (out.type == "TimeDistributed") {
        const json inner = out.config.value("layer", json());
        if (!inner.is_object() || inner.value("class_name", "") != "Dense")
            unsupported(file, out, "does not wrap a Dense layer");
        dense.type = "Dense";
        dense.config = inner["config"];
    }
    if (dense.type != "Dense")
        unsupported(file, out, "is the output; the recipe ends in a Dense softmax");
    const std::string act = dense.config.value("activation", json("linear")).is_string()
        ? dense.config.value("activation", json("linear")).get<std::string>()
        : "?";
    if (act != "softmax")
        unsupported(file, out, "has activation '" + act + "'; the recipe's output is softmax");
    checkNotQuantized(file, out, dense.config);

    // Down the decoder: LSTMs, each started from an encoder LSTM's (h, c).
    std::vector<const Layer*> dec, enc;
    const Layer* cur = &g.mainInput(out, notes);
    requireSequence(file, out, *cur, g.mainTensor(out));
    // An LSTM's outputs: [output, state_h, state_c]; without return_sequences its output is state_h.
    const auto lstmOutput = [&](const Ref& r) -> std::string {
        const Layer& src = g.layer(r.layer);
        if (src.type != "LSTM" || r.tensor < 0 || r.tensor > 2)
            return "layer '" + src.name + "' (" + src.type + ")";
        return std::string(r.tensor == 0 ? "the output"
                       : r.tensor == 1   ? "state_h"
                                         : "state_c")
            + " of '" + src.name + "'";
    };
    const auto isStateH = [&](const Ref& r) {
        const Layer& src = g.layer(r.layer);
        return r.tensor == 1 || (r.tensor == 0 && src.type == "LSTM" && !src.config.value("return_sequences", false));
    };
    while (cur->type == "LSTM") {
        checkLstm(file, *cur);
        if (cur->states.size() != 2 || cur->states[0].layer != cur->states[1].layer || !isStateH(cur->states[0])
            || cur->states[1].tensor != 2) {
            // Name where its state comes from, and a layer kind that explains it.
            std::string from;
            if (!cur->states.empty()) {
                const Layer& src = g.layer(cur->states[0].layer);
                from = " (its initial_state is [";
                for (size_t i = 0; i < cur->states.size(); ++i)
                    from += (i ? ", " : "") + lstmOutput(cur->states[i]);
                from += "])";
                if (cur->states.size() == 2 && cur->states[1].layer == src.name && cur->states[0].tensor == 2
                    && cur->states[1].tensor == 1)
                    from = " (its initial_state is encoder LSTM '" + src.name
                        + "''s [state_c, state_h], the two swapped: Keras' LSTM takes [h, c])";
            }
            if (const Layer* bi = g.find("Bidirectional"))
                from += "; the encoder '" + bi->name + "' is Bidirectional, which is not supported";
            throw Error(file, 0,
                "decoder LSTM '" + cur->name
                    + "' is not started from an encoder LSTM's [state_h, state_c] (initial_state)" + from + "; "
                    + kSupported);
        }
        if (!cur->config.value("return_sequences", false))
            unsupported(file, *cur, "has return_sequences = false inside the decoder");
        const Layer& e = g.layer(cur->states[0].layer);
        if (std::find(enc.begin(), enc.end(), &e) != enc.end())
            throw Error(file, 0,
                "decoder LSTMs '" + cur->name + "' and '" + dec.front()->name + "' both start from encoder LSTM '"
                    + e.name + "'; chatbench needs decoder layer k started from encoder layer k");
        checkLstm(file, e);
        if (!e.config.value("return_state", false))
            unsupported(file, e, "hands its states to the decoder but has return_state = false");
        dec.insert(dec.begin(), cur);
        enc.insert(enc.begin(), &e);
        if (dec.size() > 16)
            throw Error(file, 0, "more than 16 stacked LSTM layers");
        const Layer& below = g.mainInput(*cur, notes);
        requireSequence(file, *cur, below, g.mainTensor(*cur));
        cur = &below;
    }
    if (dec.empty()) {
        const Layer* attention = g.find("Attention");
        const bool otherRnn = cur->type == "GRU" || cur->type == "SimpleRNN";
        unsupported(file, *cur,
            "feeds the output; the recipe's Dense reads a decoder LSTM"
                + (otherRnn ? "; " + cur->type + " layers are not supported (LSTM only)" : std::string())
                + (attention ? "; the model has an attention layer '" + attention->name + "' (" + attention->type
                            + "), which is not supported"
                             : std::string()));
    }
    checkEmbedding(file, *cur);
    const Layer& decEmb = *cur;
    const Layer& decInput = g.mainInput(decEmb, notes);
    if (decInput.type != "InputLayer")
        unsupported(file, decEmb, "does not read a model input");
    requireSequence(file, decEmb, decInput, g.mainTensor(decEmb));

    // Up the encoder: each LSTM reads the sequence of the one below; the bottom one an Embedding.
    for (size_t i = 0; i < enc.size(); ++i) {
        const Layer& below = g.mainInput(*enc[i], notes);
        requireSequence(file, *enc[i], below, g.mainTensor(*enc[i]));
        if (i == 0) {
            if (below.type == "LSTM") { // more encoder LSTMs than decoder ones: say so, not "an Embedding"
                std::vector<std::string> names = { enc.front()->name };
                for (const Layer* l = &below; l->type == "LSTM" && names.size() <= 16; l = &g.mainInput(*l, notes))
                    names.insert(names.begin(), l->name);
                std::string decNames;
                for (const Layer* l : dec)
                    decNames += (decNames.empty() ? "'" : ", '") + l->name + "'";
                throw Error(file, 0,
                    "the encoder has " + std::to_string(names.size()) + " stacked LSTM layers ('" + names.front()
                        + "' … '" + names.back() + "') and the decoder " + std::to_string(dec.size()) + " (" + decNames
                        + "); chatbench needs as many decoder layers as encoder layers, decoder layer k "
                        + "started from encoder layer k");
            }
            checkEmbedding(file, below);
            const Layer& encInput = g.mainInput(below, notes);
            if (encInput.type != "InputLayer")
                unsupported(file, below, "does not read a model input");
            requireSequence(file, below, encInput, g.mainTensor(below));
            m.encoderMask = below.config.value("mask_zero", false);
            m.sharedEmbedding = below.name == decEmb.name;
            // The encoder's Embedding layer; read below.
            if (!m.sharedEmbedding)
                checkEmbedding(file, below);
        } else {
            if (below.name != enc[i - 1]->name || g.mainTensor(*enc[i]) != 0)
                unsupported(file, *enc[i], "does not read the sequence of the encoder LSTM below it");
            if (!enc[i - 1]->config.value("return_sequences", false))
                unsupported(file, *enc[i - 1], "feeds another LSTM but has return_sequences = false");
        }
    }
    const Layer& encEmb = g.mainInput(*enc.front(), notes);
    // The prompt must reach the encoder: an encoder reading the decoder's own embedded sequence
    // (or an embedding of the decoder's input) leaves the model's other input unused, and what it
    // answers does not depend on the question.
    const Ref encRef = g.mainRef(*enc.front()), decRef = g.mainRef(*dec.front());
    const std::string encInputName = g.mainInput(encEmb, notes).name, decInputName = decInput.name;
    if ((encRef.layer == decRef.layer && encRef.node == decRef.node)
        || (!m.sharedEmbedding && encInputName == decInputName))
        throw Error(file, 0,
            "encoder LSTM '" + enc.front()->name + "' reads the decoder's input ('" + decInputName
                + "'), so the prompt never reaches the model; the encoder must read the embedded prompt input. "
                + kSupported);

    // Sizes: one vocabulary, one embedding width, one LSTM width throughout.
    m.layers = static_cast<int>(dec.size());
    m.vocabulary = positive(file, encEmb, "input_dim");
    m.embed = positive(file, encEmb, "output_dim");
    m.hidden = positive(file, *dec.front(), "units");
    if (positive(file, decEmb, "input_dim") != m.vocabulary || positive(file, decEmb, "output_dim") != m.embed)
        throw Error(file, 0,
            "the encoder and decoder embeddings differ in size ('" + encEmb.name + "' vs '" + decEmb.name
                + "'); chatbench's model has one vocabulary and one embedding width");
    for (const Layer* l : dec)
        if (positive(file, *l, "units") != m.hidden)
            throw Error(file, 0, "LSTM layers of different widths ('" + l->name + "'); all must have the same units");
    for (const Layer* l : enc)
        if (positive(file, *l, "units") != m.hidden)
            throw Error(file, 0, "LSTM layers of different widths ('" + l->name + "'); all must have the same units");
    Layer denseLayer = dense;
    if (positive(file, denseLayer, "units") != m.vocabulary)
        throw Error(file, 0,
            "the output layer '" + out.name + "' has " + std::to_string(positive(file, denseLayer, "units"))
                + " units but the vocabulary has " + std::to_string(m.vocabulary) + " words");
    const int64_t V = m.vocabulary, E = m.embed, H = m.hidden;
    if (V * std::max(E, H) > kMaxElements)
        throw Error(file, 0, "the model's sizes exceed what a chatbot can need (vocabulary × width > 2^30)");
    m.sourceLength = declaredLength(g.mainInput(encEmb, notes));
    m.targetLength = declaredLength(g.mainInput(decEmb, notes));
    // Weights saved as float32 by a model that computes in half precision (mixed_float16): the
    // import computes in fp32, a little apart from Keras' own answers.
    for (const Layer* l : { &encEmb, &decEmb, enc.front(), dec.front(), &out })
        if (const std::string policy = dtypePolicy(*l); policy.find("float16") != std::string::npos) {
            notes.push_back("layer '" + l->name + "' computes in " + policy
                + " in Keras; chatbench computes in fp32 from the same weights, so its probabilities can differ "
                  "from Keras' in the fourth or fifth decimal");
            break;
        }
    // The decoder's masking does not change a reply (one real token a step); the encoder's does.
    if (!m.encoderMask)
        notes.push_back("the encoder's embedding '" + encEmb.name + "' has mask_zero off: "
            + (m.sourceLength
                    ? "its input has a fixed length of " + std::to_string(*m.sourceLength)
                        + ", so in Keras a prompt is padded to " + std::to_string(*m.sourceLength)
                        + " ids and the encoder runs over the padding; chatbench encodes the prompt's words only, "
                          "and its replies can differ from that model's in Keras"
                    : std::string("chatbench encodes the prompt's words only, as Keras does for an unpadded prompt; "
                                  "a loop that pads prompts gets other replies")));
    notes.insert(notes.begin(),
        std::to_string(m.layers) + " LSTM layer(s) of " + std::to_string(H) + " units over a " + std::to_string(E)
            + "-wide embedding of " + std::to_string(V) + " ids" + (m.sharedEmbedding ? " (shared)" : "")
            + "; decoder '" + dec.front()->name + "' starts from encoder '" + enc.front()->name + "' states; output '"
            + out.name + "'");
    if (!weights)
        return m;

    // The weights, every shape checked against the sizes above.
    m.encoderEmbedding = std::move(readWeights(*weights, file, encEmb, { { "embeddings", { V, E } } })[0]);
    m.decoderEmbedding = m.sharedEmbedding
        ? m.encoderEmbedding
        : std::move(readWeights(*weights, file, decEmb, { { "embeddings", { V, E } } })[0]);
    for (size_t i = 0; i < enc.size(); ++i) {
        m.encoder.push_back(readLstm(*weights, file, *enc[i], i == 0 ? E : H, H));
        m.decoder.push_back(readLstm(*weights, file, *dec[i], i == 0 ? E : H, H));
    }
    const bool bias = dense.config.value("use_bias", true);
    std::vector<std::pair<std::string, std::vector<int64_t>>> denseShapes = { { "kernel", { H, V } } };
    if (bias)
        denseShapes.push_back({ "bias", { V } });
    auto dw = readWeights(*weights, file, out, denseShapes);
    m.denseKernel = std::move(dw[0]);
    m.denseBias = bias ? std::move(dw[1]) : KerasTensor { { V }, std::vector<float>(static_cast<size_t>(V), 0.0f) };
    return m;
}

json parseJson(const std::string& bytes, const std::string& file, const std::string& what)
{
    // `what` is a member of the archive or a string inside a file, so its own line is named in the
    // message rather than as the file's.
    const auto at = [&](size_t offset) { return " (line " + std::to_string(text::lineOfOffset(bytes, offset)) + ")"; };
    try {
        return parseUniqueKeys(bytes);
    } catch (const RefusedJson& e) {
        throw Error(file, 0, what + at(e.offset) + ": " + e.what());
    } catch (const json::parse_error& e) {
        throw Error(file, 0, what + at(e.byte) + " is not valid JSON: " + jsonMessage(e));
    } catch (const json::exception& e) {
        throw Error(file, 0, what + " is not valid JSON: " + jsonMessage(e));
    }
}

} // namespace

namespace {
KerasTokenizer readTokenizerJson(const std::string& path);
} // namespace

// The Keras version metadata.json names ("" when it names none).
std::string kerasVersion(const ZipArchive& zip, const std::string& path)
{
    try {
        const json meta = parseJson(zip.read("metadata.json", kMaxConfigBytes), path, "metadata.json");
        const auto v = meta.find("keras_version");
        return v != meta.end() && v->is_string() ? v->get<std::string>() : std::string();
    } catch (const Error&) {
        return {};
    }
}

void requireModelFile(const std::string& path)
{
    std::error_code ec;
    if (path.empty())
        throw Error("no model file given");
    const fs::file_status st = fs::status(path, ec);
    if (const std::string why = text::unreachable(path); !why.empty())
        throw Error(path, 0, why == text::kNotThere ? "no such model file" : why);
    if (fs::is_directory(st))
        throw Error(path, 0, "is a folder, not a model file (.keras or .h5)");
    if (!fs::is_regular_file(st))
        throw Error(path, 0, "is not a regular file (a pipe or a device?): give a .keras or .h5 model file");
}

KerasSeq2Seq readKerasSeq2SeqInProcess(const std::string& path)
{
    H5::Exception::dontPrint();
    requireModelFile(path);
    try {
        switch (sniff(path)) {
        case Container::Zip: {
            const ZipArchive zip(path);
            const json config = parseJson(zip.read("config.json", kMaxConfigBytes), path, "config.json");
            if (const std::string version = kerasVersion(zip, path); version.rfind("2.", 0) == 0)
                throw Error(path, 0,
                    "a .keras file written by Keras " + version
                        + " (tf_keras), whose weights are laid out by layer class, not name: save the model as .h5 "
                          "with that Keras and import the .h5");
            TempFile weights(zip.read("model.weights.h5", kMaxWeightsBytes), path);
            if (sniff(weights.path()) != Container::Hdf5)
                throw Error(path, 0, "model.weights.h5 in the archive is not an HDF5 file");
            const H5::H5File f(weights.path(), H5F_ACC_RDONLY);
            weights.remove(); // open: the name is no longer needed, and a kill now leaves nothing behind
            const WeightIndex index = indexKeras3(f);
            const WeightSource source { f, index };
            return readModel(config, path, &source);
        }
        case Container::Hdf5: {
            const H5::H5File f(path, H5F_ACC_RDONLY);
            if (!f.attrExists("model_config"))
                throw Error(path, 0,
                    "an HDF5 file without a model_config attribute: weights only (save_weights), not a whole "
                    "model — save it with model.save()");
            if (!pathExists(f, "model_weights"))
                throw Error(path, 0, "an HDF5 model file without model_weights");
            const json config = parseJson(readStringAttribute(f, "model_config"), path, "the model_config attribute");
            const WeightIndex index = indexLegacy(f);
            const WeightSource source { f, index };
            return readModel(config, path, &source);
        }
        case Container::Other: break;
        }
    } catch (const H5::Exception& e) {
        throw Error(path, 0, "unreadable HDF5 data (" + e.getDetailMsg() + "): truncated or corrupt file?");
    } catch (const json::exception& e) { // a config field of an unexpected type
        throw Error(path, 0, "the model config: " + jsonMessage(e));
    }
    throw Error(path, 0, "neither a Keras 3 .keras archive (zip) nor a legacy .h5 (HDF5) model file");
}

KerasSeq2Seq readKerasConfig(const std::string& configJson, const std::string& file)
{
    try {
        return readModel(parseJson(configJson, file, "the model config"), file, nullptr);
    } catch (const json::exception& e) { // a config field of an unexpected type
        throw Error(file, 0, "the model config: " + jsonMessage(e));
    }
}

KerasTokenizer readKerasTokenizer(const std::string& path)
{
    try {
        return readTokenizerJson(path);
    } catch (const json::exception& e) { // a field of an unexpected type
        throw Error(path, 0, "the tokenizer: " + jsonMessage(e));
    }
}

// ---- the reader in a child process ---------------------------------------------------------------
//
// HDF5 (Debian's 1.10) reads past its buffers on some malformed files (found by fuzzing:
// H5HG_read, reading a variable-length string attribute). Such a file must not take the window
// down with it, so the model is read in a forked child that sends the result back as CBOR; a
// child killed by a signal becomes an Error naming the file, and so does one that HDF5 keeps
// looping (a global heap object's size changed by one byte: found by fuzzing too).

namespace {

json tensorJson(const KerasTensor& t)
{
    const auto* bytes = reinterpret_cast<const uint8_t*>(t.data.data());
    return { { "shape", t.shape },
        { "data", json::binary(std::vector<uint8_t>(bytes, bytes + t.data.size() * sizeof(float))) } };
}

KerasTensor tensorFrom(const json& j)
{
    KerasTensor t;
    t.shape = j.at("shape").get<std::vector<int64_t>>();
    const auto& bytes = j.at("data").get_binary();
    t.data.resize(bytes.size() / sizeof(float));
    std::memcpy(t.data.data(), bytes.data(), t.data.size() * sizeof(float));
    return t;
}

json lstmsJson(const std::vector<KerasLstm>& layers)
{
    json out = json::array();
    for (const KerasLstm& l : layers)
        out.push_back({ { "name", l.name }, { "kernel", tensorJson(l.kernel) },
            { "recurrent", tensorJson(l.recurrent) }, { "bias", tensorJson(l.bias) } });
    return out;
}

std::vector<KerasLstm> lstmsFrom(const json& j)
{
    std::vector<KerasLstm> out;
    for (const json& l : j)
        out.push_back({ l.at("name").get<std::string>(), tensorFrom(l.at("kernel")), tensorFrom(l.at("recurrent")),
            tensorFrom(l.at("bias")) });
    return out;
}

json modelJson(const KerasSeq2Seq& m)
{
    return { { "file", m.file }, { "vocabulary", m.vocabulary }, { "embed", m.embed }, { "hidden", m.hidden },
        { "layers", m.layers }, { "shared_embedding", m.sharedEmbedding }, { "encoder_mask", m.encoderMask },
        { "source_length", m.sourceLength ? json(*m.sourceLength) : json() },
        { "target_length", m.targetLength ? json(*m.targetLength) : json() },
        { "encoder_embedding", tensorJson(m.encoderEmbedding) },
        { "decoder_embedding", tensorJson(m.decoderEmbedding) }, { "encoder", lstmsJson(m.encoder) },
        { "decoder", lstmsJson(m.decoder) }, { "dense_kernel", tensorJson(m.denseKernel) },
        { "dense_bias", tensorJson(m.denseBias) }, { "notes", m.notes } };
}

KerasSeq2Seq modelFrom(const json& j)
{
    KerasSeq2Seq m;
    m.file = j.at("file").get<std::string>();
    m.vocabulary = j.at("vocabulary").get<int64_t>();
    m.embed = j.at("embed").get<int64_t>();
    m.hidden = j.at("hidden").get<int64_t>();
    m.layers = j.at("layers").get<int>();
    m.sharedEmbedding = j.at("shared_embedding").get<bool>();
    m.encoderMask = j.at("encoder_mask").get<bool>();
    if (!j.at("source_length").is_null())
        m.sourceLength = j["source_length"].get<int>();
    if (!j.at("target_length").is_null())
        m.targetLength = j["target_length"].get<int>();
    m.encoderEmbedding = tensorFrom(j.at("encoder_embedding"));
    m.decoderEmbedding = tensorFrom(j.at("decoder_embedding"));
    m.encoder = lstmsFrom(j.at("encoder"));
    m.decoder = lstmsFrom(j.at("decoder"));
    m.denseKernel = tensorFrom(j.at("dense_kernel"));
    m.denseBias = tensorFrom(j.at("dense_bias"));
    m.notes = j.at("notes").get<std::vector<std::string>>();
    return m;
}

// The child's reply: the model, or the error it met, as CBOR.
std::vector<uint8_t> readForParent(const std::string& path, uint64_t memory)
{
    json reply;
    try {
        reply = { { "model", modelJson(readKerasSeq2SeqInProcess(path)) } };
    } catch (const std::bad_alloc&) {
        reply = { { "error",
            { { "file", path }, { "line", 0 },
                { "message",
                    "reading it ran out of memory (a model file of its size may take " + std::to_string(memory >> 20)
                        + " MiB): it is corrupt, or the machine is short of memory" } } } };
    } catch (const Error& e) {
        reply = { { "error", { { "file", e.file() }, { "line", e.line() }, { "message", e.message() } } } };
    } catch (const std::exception& e) {
        reply = { { "error", { { "file", path }, { "line", 0 }, { "message", e.what() } } } };
    } catch (...) {
        reply = { { "error", { { "file", path }, { "line", 0 }, { "message", "an unknown failure reading it" } } } };
    }
    return json::to_cbor(reply);
}

std::string seconds(std::chrono::milliseconds d)
{
    return std::to_string((d.count() + 999) / 1000) + " s";
}

std::string tenths(std::chrono::milliseconds d)
{
    return std::to_string(d.count() / 1000) + "." + std::to_string(d.count() / 100 % 10) + " s";
}

} // namespace

KerasSeq2Seq readKerasSeq2Seq(const std::string& path, const ChildLimits& limits)
{
    try {
        removeStaleTempFiles();
    } catch (const Error& e) { // TMPDIR names no folder: said for this file
        throw Error(path, 0, e.message());
    }
    // Memory for a model of the file's size several times over (its weights are read, copied out and
    // sent back); a malformed file can ask HDF5 for gigabytes (found by fuzzing: 6 GB for 140 KB).
    ChildLimits bounded = limits;
    std::error_code unsized;
    if (const auto size = fs::file_size(path, unsized); !unsized) {
        if (bounded.memory == 0)
            bounded.memory = (uint64_t(1) << 30) + 8 * static_cast<uint64_t>(size);
        // Reading it, a copy of its weights, and the reply: a few times its size earn time.
        if (bounded.creditedBytes == 0)
            bounded.creditedBytes = (uint64_t(1) << 20) + 8 * static_cast<uint64_t>(size);
    }
    ChildOutcome child;
    try {
        child = runInChild([&] { return readForParent(path, bounded.memory); }, bounded);
    } catch (const std::system_error& e) {
        throw Error(path, 0, std::string("cannot start a process to read the model: ") + e.what());
    }
    std::vector<uint8_t>& bytes = child.reply;
    if (child.end != ChildOutcome::End::Replied || bytes.empty()) {
        // The child's temporary copy of the weights (named after its process id) stays behind.
        std::error_code ec;
        const std::string prefix = "chatbench-keras-" + std::to_string(child.pid) + "-";
        for (const auto& e : fs::directory_iterator(temporaryFolder(kWeightsCopied), ec)) // checked before the child
            if (e.path().filename().string().rfind(prefix, 0) == 0)
                fs::remove(e.path(), ec);
        if (child.end == ChildOutcome::End::TimedOut)
            throw Error(path, 0,
                "reading this file took over " + seconds(limits.total)
                    + " and was stopped: it is corrupt, or far larger than a chatbot");
        if (child.end == ChildOutcome::End::Looping)
            throw Error(path, 0,
                "the HDF5 or zip library used " + tenths(child.cpu)
                    + " of CPU time reading this file, more than a file of its size needs (stopped): it is corrupt, "
                      "or not a Keras model file");
        if (child.end == ChildOutcome::End::Idle)
            throw Error(path, 0,
                "the HDF5 or zip library stopped responding reading this file (no progress for " + seconds(limits.idle)
                    + "; stopped): it is corrupt, or not a Keras model file");
        const int status = child.status;
        const std::string how = status < 0 ? std::string("lost track of the reading process")
            : WIFSIGNALED(status)
            ? std::string("signal ") + std::to_string(WTERMSIG(status)) + ", " + ::strsignal(WTERMSIG(status))
            : "exit status " + std::to_string(WEXITSTATUS(status));
        throw Error(path, 0,
            "the HDF5 or zip library failed reading this file (" + how + "): it is corrupt, or not a Keras model file");
    }
    try {
        const json reply = json::from_cbor(bytes);
        bytes = {};
        if (reply.contains("error")) {
            const json& e = reply["error"];
            throw Error(e.at("file").get<std::string>(), e.at("line").get<long>(), e.at("message").get<std::string>());
        }
        return modelFrom(reply.at("model"));
    } catch (const json::exception& e) {
        throw Error(path, 0, "reading the model went wrong: " + jsonMessage(e));
    }
}

namespace {

KerasTokenizer readTokenizerJson(const std::string& path)
{
    const std::string bytes = text::readFile(path, text::kMaxJsonFileBytes);
    json root = parseJson(bytes, path, "the tokenizer file");
    if (root.is_string()) // to_json() written with json.dump: a JSON string holding the JSON
        root = parseJson(root.get<std::string>(), path, "the tokenizer file");
    if (!root.is_object() || root.value("class_name", "") != "Tokenizer" || !root.contains("config")
        || !root["config"].is_object())
        throw Error(path, 0, "not a Keras tokenizer (tokenizer.to_json() output with class_name 'Tokenizer')");
    const json& c = root["config"];
    KerasTokenizer t;
    t.file = path;
    // Keras keeps these as strings or plain values depending on the version.
    auto field = [&](const char* key) -> json {
        if (!c.contains(key))
            return json();
        const json& v = c[key];
        if (v.is_string() && (key == std::string("word_index") || key == std::string("index_word")))
            return parseJson(v.get<std::string>(), path, std::string("config.") + key);
        return v;
    };
    // Each setting absent, null (Keras' None) or of its type: "lower": "yes" or "num_words": -1
    // would otherwise be passed over as if unset.
    auto expect = [&](const char* key, bool (json::*is)() const noexcept, const char* what) {
        const json v = field(key);
        if (!v.is_null() && !(v.*is)())
            throw Error(path, 0,
                std::string("config.") + key + " must be " + what + ", not "
                    + printable(v.dump(-1, ' ', false, json::error_handler_t::replace)).substr(0, 40));
    };
    expect("lower", &json::is_boolean, "true or false");
    expect("char_level", &json::is_boolean, "true or false");
    expect("split", &json::is_string, "a string");
    expect("filters", &json::is_string, "a string");
    expect("oov_token", &json::is_string, "a string");
    expect("num_words", &json::is_number_integer, "a whole number");
    if (field("num_words").is_number_integer() && field("num_words").get<int64_t>() < 0)
        throw Error(path, 0,
            "config.num_words is " + std::to_string(field("num_words").get<int64_t>())
                + "; it must be 0 or more (or None)");
    if (field("lower").is_boolean() && !field("lower").get<bool>())
        throw Error(path, 0, "config.lower is false; chatbench's Keras tokenizer lowercases (lower=True)");
    if (field("char_level").is_boolean() && field("char_level").get<bool>())
        throw Error(path, 0, "config.char_level is true; only word-level tokenizers are supported");
    if (field("split").is_string() && field("split").get<std::string>() != " ")
        throw Error(path, 0, "config.split is not ' '; chatbench's Keras tokenizer splits on spaces");
    const std::string defaults = "!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~\t\n";
    if (field("filters").is_string() && field("filters").get<std::string>() != defaults)
        throw Error(path, 0,
            "config.filters differ from Keras' default set; chatbench's Keras tokenizer removes exactly the "
            "default characters");
    if (field("num_words").is_number_integer())
        t.numWords = std::max<int64_t>(0, field("num_words").get<int64_t>());
    if (field("oov_token").is_string())
        t.oovToken = field("oov_token").get<std::string>();
    const json index = field("word_index");
    if (!index.is_object() || index.empty())
        throw Error(path, 0, "config.word_index is missing or empty");
    for (const auto& [w, i] : index.items()) {
        if (!i.is_number_integer() || i.get<int64_t>() < 1 || i.get<int64_t>() > kMaxDim)
            throw Error(path, 0, "config.word_index['" + w + "'] is not an index between 1 and 2^24");
        const int64_t k = i.get<int64_t>();
        if (w.empty())
            throw Error(path, 0, "config.word_index has an empty word");
        if (!t.words.emplace(k, w).second)
            throw Error(path, 0, "config.word_index gives index " + std::to_string(k) + " to two words");
        t.maxId = std::max(t.maxId, k);
    }
    // index_word is what Keras' sequences_to_texts reads (ids back to words), word_index what
    // texts_to_sequences reads. to_json() writes both from one dictionary; a file where they part
    // (edited by hand, or pieced from two tokenizers) would chat through other words than Keras.
    const json reverse = field("index_word");
    if (!reverse.is_null()) {
        if (!reverse.is_object())
            throw Error(path, 0, "config.index_word must be an object of ids and words");
        for (const auto& [k, w] : reverse.items()) {
            const bool digits = !k.empty() && k.size() <= 8
                && std::all_of(k.begin(), k.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
            const int64_t id = digits ? std::stoll(k) : -1;
            if (id < 1 || id > kMaxDim)
                throw Error(path, 0,
                    "config.index_word has the key '" + printable(k).substr(0, 40)
                        + "'; its keys are ids between 1 and 2^24");
            if (!w.is_string())
                throw Error(path, 0, "config.index_word['" + k + "'] is not a word (a string)");
            const std::string& word = w.get_ref<const std::string&>();
            const auto named = t.words.find(id);
            if (named == t.words.end() || named->second != word)
                throw Error(path, 0,
                    "config.index_word and config.word_index disagree: index_word gives id " + k + " to '"
                        + printable(word).substr(0, 40) + "', word_index "
                        + (named != t.words.end() ? "to '" + printable(named->second).substr(0, 40) + "'"
                                                  : std::string("to no word")));
        }
        if (reverse.size() != index.size())
            throw Error(path, 0,
                "config.index_word and config.word_index disagree: " + std::to_string(reverse.size()) + " ids against "
                    + std::to_string(index.size()) + " words");
    }
    return t;
}

} // namespace

} // namespace chatbench
