"""Train tiny Keras seq2seq chatbots and write them out as test fixtures.

What it makes (in tests/fixtures/keras/, all together well under 1 MB):

  recipe.keras, recipe.h5, recipe_tokenizer.json, recipe_expected.json
      one LSTM layer per side, Embedding(mask_zero=True), tokenizer with
      oov_token="<OOV>"; saved both as a Keras 3 native zip and as a legacy
      HDF5 file.
  stacked.keras, stacked_tokenizer.json, stacked_expected.json
      two LSTM layers per side (layer k of the decoder starts from the final
      states of layer k of the encoder), mask_zero=True, no oov_token.
  nomask.keras, nomask_tokenizer.json, nomask_expected.json
      one LSTM layer per side, mask_zero=False, no oov_token.
  keras2.h5, keras2_tokenizer.json, keras2_expected.json
      the recipe model (one LSTM layer per side, mask_zero=True, oov_token
      "<OOV>") built, trained and saved with Keras 2 (the tf_keras package) as
      a legacy HDF5 file with a Keras-2-style config (inbound_nodes as nested
      lists, weight names like "lstm_cell/kernel:0"). Skipped, with a message,
      when tf_keras is not installed.

All four follow the classic Keras chatbot recipe: an encoder Embedding+LSTM
whose final (h, c) states start a decoder Embedding+LSTM, then a softmax
Dense over the vocabulary. Answers are wrapped as "<START> ... <END>" before
the legacy Keras Tokenizer is fitted (its default filters strip "<" and ">",
so the markers become the words "start" and "end").

Each *_expected.json holds Keras' own numbers for a few prompts, computed with
the encoder run on the unpadded source ids (batch 1): the encoder states per
layer, the decoder softmax at the first step (fed the start id), and the
greedy reply. For recipe, keras2 and nomask the states for the source post-padded
with zeros to the training length are recorded too (recipe and keras2 assert they
equal the unpadded ones, as masking promises; nomask's differ and are only stored).

How to run (by hand, not part of CI), from the repository root:

    ~/.cache/chatbench/keras-venv/bin/python tools/make_keras_fixtures.py [NAME ...]

With names (recipe, stacked, nomask, keras2) only those fixtures are rebuilt;
without, all of them.

The virtual environment holds TensorFlow (the CPU build, tensorflow-cpu from
PyPI), Keras 3, h5py and, for keras2, tf_keras 2.21. tf_keras declares a
dependency on the "tensorflow" package, which would pull the full build over
tensorflow-cpu, so install it without dependencies:

    ~/.cache/chatbench/keras-venv/bin/pip install --no-deps "tf-keras~=2.21.0"

(`bench/peers/run.sh CORPUS --keras` creates that environment with TensorFlow
CPU from PyPI.) Seeds are fixed and TensorFlow runs single-threaded
with deterministic ops, so a rerun with the same versions writes the same
weights, tokenizers and expected outputs (the .keras zips still differ in the
save date in metadata.json and the Python object ids Keras puts into
config.json as "shared_object_id").
"""

import collections
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_DETERMINISTIC_OPS", "1")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

try:
    from tensorflow.keras.preprocessing.text import Tokenizer  # noqa: E402
except ImportError:  # older/newer layouts keep it only here
    from keras.src.legacy.preprocessing.text import Tokenizer  # noqa: E402

SEED = 20240611
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "keras")

START_MARK = "<START>"
END_MARK = "<END>"
START_WORD = "start"
END_WORD = "end"

# A small weather dialog: (prompt, answer). Prompts and answers are 2-9 words.
DIALOG = [
    ("hello there", "hi what weather do you want"),
    ("what's the weather today", "sunny and warm all day"),
    ("will it rain tomorrow", "yes expect light rain after noon"),
    ("is it cold outside", "a bit chilly so wear a jacket"),
    ("how hot will it get", "about thirty degrees this afternoon"),
    ("do i need an umbrella", "yes take one with you"),
    ("is it windy", "strong gusts from the north"),
    ("any snow this week", "no snow until next month"),
    ("what about the weekend", "clear skies on saturday and sunday"),
    ("is there a storm coming", "thunder is likely tonight"),
    ("should i wear sunscreen", "yes the sun is strong today"),
    ("how humid is it", "very humid and sticky"),
    ("what is the forecast for monday", "cloudy with a chance of showers"),
    ("can i go hiking today", "good day for a long hike"),
    ("is it foggy this morning", "thick fog near the river"),
    ("when does the sun set", "around eight in the evening"),
    ("when does the sun rise", "just before six"),
    ("will the roads be icy", "watch for ice on bridges"),
    ("is it a good beach day", "perfect beach weather today"),
    ("how cold is it tonight", "near freezing after midnight"),
    ("thank you", "you are welcome"),
    ("goodbye", "bye and stay dry"),
    ("what should i wear", "light clothes and a hat"),
    ("is the air clean", "air quality is good"),
    ("will there be hail", "small hail is possible later"),
    ("does it feel like spring", "yes mild and breezy"),
    ("how long will the rain last", "the rain stops by evening"),
    ("is it safe to fly a kite", "yes the wind is just right"),
    ("can we have a picnic", "the park is dry and sunny"),
    ("what is the temperature now", "twenty one degrees right now"),
]

# Prompts for the expected-output files: training prompts, one with a word the
# tokenizer never saw ("mars"), one with mixed case and punctuation.
CASE_PROMPTS = [
    "what's the weather today",
    "will it rain tomorrow",
    "will it snow on mars",
    "What's the WEATHER, today?!",
    "thank you",
]

EMBED_DIM = 16
UNITS = 16


def make_tokenizer(use_oov):
    kwargs = {"lower": True}
    if use_oov:
        kwargs["oov_token"] = "<OOV>"
    tok = Tokenizer(**kwargs)
    prompts = [p for p, _ in DIALOG]
    answers = [f"{START_MARK} {a} {END_MARK}" for _, a in DIALOG]
    tok.fit_on_texts(prompts + answers)
    # fit_on_texts fills word_docs/index_docs by iterating a set, so their
    # order (and thus to_json()) follows Python's string hash seed. Put them
    # in word-index order so the JSON is the same on every run.
    order = sorted(tok.word_docs, key=lambda w: tok.word_index[w])
    tok.word_docs = collections.defaultdict(int, ((w, tok.word_docs[w]) for w in order))
    tok.index_docs = collections.defaultdict(int, sorted(tok.index_docs.items()))
    return tok


def encode_corpus(tok):
    prompts = [p for p, _ in DIALOG]
    answers = [f"{START_MARK} {a} {END_MARK}" for _, a in DIALOG]
    src = tok.texts_to_sequences(prompts)
    tgt = tok.texts_to_sequences(answers)
    max_src = max(len(s) for s in src)
    max_tgt = max(len(t) for t in tgt)
    enc_x = keras.utils.pad_sequences(src, maxlen=max_src, padding="post")
    dec_x = keras.utils.pad_sequences(tgt, maxlen=max_tgt, padding="post")
    dec_y = np.zeros_like(dec_x)
    dec_y[:, :-1] = dec_x[:, 1:]  # next word at every step, 0 after the end
    return enc_x, dec_x, dec_y, max_src, max_tgt


class Seq2Seq:
    """Training model plus inference sub-models that share its layers."""

    def __init__(self, vocab, layers, mask, K=keras):
        # K is the Keras module: keras (Keras 3) or tf_keras (Keras 2).
        self.layers = layers
        self.to_numpy = keras.ops.convert_to_numpy if K is keras else np.asarray
        L = K.layers
        enc_in = K.Input(shape=(None,), name="encoder_inputs")
        dec_in = K.Input(shape=(None,), name="decoder_inputs")
        self.enc_emb = L.Embedding(vocab, EMBED_DIM, mask_zero=mask, name="encoder_embedding")
        self.dec_emb = L.Embedding(vocab, EMBED_DIM, mask_zero=mask, name="decoder_embedding")
        self.dense = L.Dense(vocab, activation="softmax", name="decoder_dense")
        if layers == 1:
            self.enc_lstms = [L.LSTM(UNITS, return_state=True, name="encoder_lstm")]
            self.dec_lstms = [L.LSTM(UNITS, return_sequences=True, return_state=True,
                                     name="decoder_lstm")]
        else:
            self.enc_lstms = [
                L.LSTM(UNITS, return_sequences=(k + 1 < layers), return_state=True,
                       name=f"encoder_lstm_{k + 1}")
                for k in range(layers)
            ]
            self.dec_lstms = [
                L.LSTM(UNITS, return_sequences=True, return_state=True,
                       name=f"decoder_lstm_{k + 1}")
                for k in range(layers)
            ]

        states = self._encode(enc_in)
        probs, _ = self._decode(dec_in, states)
        self.model = K.Model([enc_in, dec_in], probs)

        # Inference: encoder inputs -> [h1, c1, h2, c2, ...]
        self.encoder = K.Model(enc_in, [t for hc in states for t in hc], name="encoder")
        # One decoder step: (token, states) -> (probs, new states)
        tok_in = K.Input(shape=(None,), name="step_token")
        state_ins = [(K.Input(shape=(UNITS,), name=f"step_h{k}"),
                      K.Input(shape=(UNITS,), name=f"step_c{k}")) for k in range(layers)]
        step_probs, step_states = self._decode(tok_in, state_ins)
        self.decoder_step = K.Model(
            [tok_in] + [t for hc in state_ins for t in hc],
            [step_probs] + [t for hc in step_states for t in hc],
            name="decoder_step")

    def _encode(self, x):
        x = self.enc_emb(x)
        states = []
        for lstm in self.enc_lstms:
            x, h, c = lstm(x)
            states.append((h, c))
        return states

    def _decode(self, x, init_states):
        x = self.dec_emb(x)
        states = []
        for lstm, (h0, c0) in zip(self.dec_lstms, init_states):
            x, h, c = lstm(x, initial_state=[h0, c0])
            states.append((h, c))
        return self.dense(x), states

    # ---- numpy helpers (batch 1) ----

    def encode_ids(self, ids):
        x = np.asarray([ids], dtype="int32")
        outs = self.encoder(x, training=False)
        outs = [self.to_numpy(o)[0] for o in outs]
        return [(outs[2 * k], outs[2 * k + 1]) for k in range(self.layers)]

    def step(self, token, states):
        x = np.asarray([[token]], dtype="int32")
        ins = [x] + [s[None, :] for hc in states for s in hc]
        outs = self.decoder_step(ins, training=False)
        outs = [self.to_numpy(o) for o in outs]
        probs = outs[0][0, -1]
        new = [(outs[1 + 2 * k][0], outs[2 + 2 * k][0]) for k in range(self.layers)]
        return probs, new

    def greedy(self, ids, start_id, end_id, max_steps):
        states = self.encode_ids(ids)
        token, out, first = start_id, [], None
        for _ in range(max_steps):
            probs, states = self.step(token, states)
            if first is None:
                first = probs
            token = int(np.argmax(probs))
            if token == end_id:
                break
            out.append(token)
        return states, first, out


def floats(a):
    return [float(v) for v in np.asarray(a, dtype=np.float32).ravel()]


def reply_text(tok, ids):
    return " ".join(tok.index_word.get(i, "") for i in ids)


def train(name, layers, mask, use_oov, epochs, K=keras):
    K.utils.set_random_seed(SEED)
    tok = make_tokenizer(use_oov)
    vocab = len(tok.word_index) + 1
    enc_x, dec_x, dec_y, max_src, max_tgt = encode_corpus(tok)
    net = Seq2Seq(vocab, layers, mask, K)
    net.model.compile(optimizer=K.optimizers.RMSprop(learning_rate=0.01),
                      loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"])
    hist = net.model.fit([enc_x, dec_x], dec_y, batch_size=8, epochs=epochs,
                         shuffle=True, verbose=0)
    acc = hist.history["accuracy"][-1]
    loss = hist.history["loss"][-1]

    start_id = tok.word_index[START_WORD]
    end_id = tok.word_index[END_WORD]
    hits = hits_padded = 0
    for (prompt, answer), src in zip(DIALOG, tok.texts_to_sequences([p for p, _ in DIALOG])):
        _, _, ids = net.greedy(src, start_id, end_id, max_tgt)
        hits += reply_text(tok, ids) == answer
        _, _, ids = net.greedy(src + [0] * (max_src - len(src)), start_id, end_id, max_tgt)
        hits_padded += reply_text(tok, ids) == answer
    print(f"{name}: vocab={vocab} max_src={max_src} max_tgt={max_tgt} "
          f"params={net.model.count_params()} loss={loss:.4f} acc={acc:.4f} "
          f"greedy exact: unpadded source {hits}/{len(DIALOG)}, "
          f"padded source {hits_padded}/{len(DIALOG)}")
    return net, tok, dict(vocab=vocab, max_src=max_src, max_tgt=max_tgt,
                          acc=float(acc), loss=float(loss), hits=hits)


def expected(name, net, tok, info, padded_states, assert_padded_equal, model_file=None):
    start_id = tok.word_index[START_WORD]
    end_id = tok.word_index[END_WORD]
    cases = []
    for prompt in CASE_PROMPTS:
        ids = tok.texts_to_sequences([prompt])[0]
        states = net.encode_ids(ids)
        _, first, greedy = net.greedy(ids, start_id, end_id, info["max_tgt"])
        case = {
            "prompt": prompt,
            "source_ids": [int(i) for i in ids],
            "encoder_h": [floats(h) for h, _ in states],
            "encoder_c": [floats(c) for _, c in states],
            "first_step_probs": floats(first),
            "greedy_ids": greedy,
            "greedy_reply": reply_text(tok, greedy),
        }
        if padded_states:
            padded = ids + [0] * (info["max_src"] - len(ids))
            pstates = net.encode_ids(padded)
            if assert_padded_equal:
                for (h, c), (ph, pc) in zip(states, pstates):
                    np.testing.assert_allclose(ph, h, rtol=0, atol=1e-6)
                    np.testing.assert_allclose(pc, c, rtol=0, atol=1e-6)
            case["encoder_h_padded"] = [floats(h) for h, _ in pstates]
            case["encoder_c_padded"] = [floats(c) for _, c in pstates]
        cases.append(case)
        print(f"  {prompt!r} -> {case['greedy_reply']!r}")
    return {
        "model": model_file or f"{name}.keras",
        "tokenizer": f"{name}_tokenizer.json",
        "start_word": START_WORD,
        "end_word": END_WORD,
        "max_source_length": info["max_src"],
        "max_target_length": info["max_tgt"],
        "cases": cases,
    }


def check_reload(path, net, tok, info):
    """The saved file must give the in-memory model's outputs."""
    enc_x, dec_x, _, _, _ = encode_corpus(tok)
    want = keras.ops.convert_to_numpy(net.model([enc_x, dec_x], training=False))
    # With mask_zero=True the saved graph holds the Embedding's mask as a
    # "NotEqual" op node feeding the encoder LSTM's `mask` argument. The
    # native .keras loader knows that op; the legacy HDF5 loader does not
    # ("Unknown layer: 'NotEqual'") unless it is named here.
    from keras.src.ops.numpy import NotEqual
    loaded = keras.models.load_model(path, compile=False,
                                     custom_objects={"NotEqual": NotEqual})
    got = keras.ops.convert_to_numpy(loaded([enc_x, dec_x], training=False))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def make_keras2():
    """The recipe model again, but built, trained and saved with Keras 2."""
    name = "keras2"
    try:
        import tf_keras
    except ImportError:
        print(f"{name}: skipped, tf_keras (Keras 2) is not installed; install it with\n"
              f"  {sys.executable} -m pip install --no-deps \"tf-keras~=2.21.0\"")
        return
    print(f"{name}: tf_keras {tf_keras.__version__}")
    net, tok, info = train(name, 1, True, True, 150, K=tf_keras)
    h5_path = os.path.join(OUT_DIR, f"{name}.h5")
    net.model.save(h5_path)  # Keras 2 writes legacy HDF5 for .h5
    # The saved file must give the in-memory model's outputs. Keras 2 keeps
    # the Embedding mask inside its layers, so no custom objects are needed.
    enc_x, dec_x, _, _, _ = encode_corpus(tok)
    want = np.asarray(net.model([enc_x, dec_x], training=False))
    loaded = tf_keras.models.load_model(h5_path, compile=False)
    got = np.asarray(loaded([enc_x, dec_x], training=False))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    with open(os.path.join(OUT_DIR, f"{name}_tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tok.to_json())
        f.write("\n")
    write_json(os.path.join(OUT_DIR, f"{name}_expected.json"),
               expected(name, net, tok, info, True, True, model_file=f"{name}.h5"))
    tf_keras.backend.clear_session()


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


def main():
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.experimental.enable_op_determinism()
    os.makedirs(OUT_DIR, exist_ok=True)
    print(f"python {sys.version.split()[0]}, tensorflow {tf.__version__}, keras {keras.__version__}")

    specs = [
        # name, layers, mask_zero, oov_token, epochs, padded states, assert padded == unpadded
        ("recipe", 1, True, True, 150, True, True),
        ("stacked", 2, True, False, 150, False, False),
        ("nomask", 1, False, False, 300, True, False),
    ]
    only = set(sys.argv[1:])
    unknown = only - {spec[0] for spec in specs} - {"keras2"}
    if unknown:
        sys.exit(f"unknown fixture name(s): {', '.join(sorted(unknown))}")
    for name, layers, mask, use_oov, epochs, padded, assert_eq in specs:
        if only and name not in only:
            continue
        net, tok, info = train(name, layers, mask, use_oov, epochs)
        keras_path = os.path.join(OUT_DIR, f"{name}.keras")
        net.model.save(keras_path)
        check_reload(keras_path, net, tok, info)
        if name == "recipe":
            h5_path = os.path.join(OUT_DIR, f"{name}.h5")
            net.model.save(h5_path)  # Keras 3 writes the legacy HDF5 format for .h5
            check_reload(h5_path, net, tok, info)
        with open(os.path.join(OUT_DIR, f"{name}_tokenizer.json"), "w", encoding="utf-8") as f:
            f.write(tok.to_json())
            f.write("\n")
        write_json(os.path.join(OUT_DIR, f"{name}_expected.json"),
                   expected(name, net, tok, info, padded, assert_eq))
        keras.backend.clear_session()
    if not only or "keras2" in only:
        make_keras2()

    total = 0
    for fn in sorted(os.listdir(OUT_DIR)):
        size = os.path.getsize(os.path.join(OUT_DIR, fn))
        total += size
        print(f"{size:8d}  {fn}")
    print(f"{total:8d}  total")
    assert total < 1_000_000, "fixtures must stay under 1 MB"


if __name__ == "__main__":
    main()
