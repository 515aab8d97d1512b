#!/usr/bin/env python3
"""The seed user's own recipe: the well-known Keras "chatbot from scratch" seq2seq.

Keras Tokenizer (lowercase, default filters), consecutive turns as (prompt, response) pairs with
<start>/<end> around responses, every sequence padded to the corpus maxima (prompts cut to 22
words, responses to 74 tokens, as chatbench's seed preset); Embedding(200, mask_zero) + LSTM(200,
return_state) encoder; decoder Embedding(200, mask_zero) + LSTM(200) started from the encoder's
[state_h, state_c]; Dense softmax over the vocabulary; RMSprop (Keras defaults), batch 50. The
loss is sparse categorical cross-entropy, masked by mask_zero, i.e. per real token like
chatbench's (the original recipe's one-hot targets give the same loss with a larger tensor).

Writes a `chatbench-bench` report (unit "epoch" and the loss-vs-time race) for the Compare view.
"""

import argparse
import json
import os
import random
import sys
import time

import numpy as np
import yaml

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402
from tensorflow import keras  # noqa: E402

from machine import cpu_model  # noqa: E402

FILTERS = '!"#$%&()*+,-./:;<=>?@[\\]^_`{|}~\t\n'


def words(text):
    text = str(text).lower().translate(str.maketrans({c: " " for c in FILTERS}))
    return text.split()


def load_pairs(path):
    if path.endswith(".tsv"):  # prompt<TAB>response lines, as `chatbench-cli corpus export` writes them
        rows = [l.rstrip("\n").split("\t") for l in open(path, encoding="utf-8") if l.strip() and l[0] != "#"]
        return [(r[0].strip(), r[1].strip()) for r in rows if len(r) == 2]
    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith((".yml", ".yaml")))
    pairs = []
    for f in files:
        try:
            doc = yaml.safe_load(open(f, encoding="utf-8"))
        except yaml.YAMLError:
            continue
        for conv in (doc or {}).get("conversations", []) or []:
            if isinstance(conv, list):
                turns = [str(t) for t in conv if t is not None]
                pairs += [(a, b) for a, b in zip(turns, turns[1:])]
    return pairs


class EpochClock(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.times, self.race, self.elapsed = [], [], 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self.t0 = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        dt = time.perf_counter() - self.t0
        self.elapsed += dt
        self.times.append(dt)
        self.race.append({"seconds": self.elapsed, "loss": float(logs["loss"]),
                          "validation_loss": float(logs.get("val_loss", float("nan")))})
        print(f"epoch {epoch + 1:3d}  train loss {logs['loss']:.4f}  val loss {logs.get('val_loss', float('nan')):.4f}"
              f"  {dt:.2f} s", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if a.threads > 0:
        tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    keras.utils.set_random_seed(a.seed)

    pairs = [(words(p)[:22], words(r)[:72]) for p, r in load_pairs(a.corpus)]
    pairs = [(p, r) for p, r in pairs if p and r]
    random.Random(a.seed).shuffle(pairs)
    n_val = max(1, len(pairs) // 10)
    counts = {}
    for p, r in pairs[n_val:]:
        for w in p + r:
            counts[w] = counts.get(w, 0) + 1
    vocab = ["<pad>", "<unk>", "<start>", "<end>"] + sorted(counts, key=lambda w: (-counts[w], w))
    ids = {w: i for i, w in enumerate(vocab)}
    V = len(vocab)

    def arrays(subset):
        S = max(len(p) for p, _ in pairs)
        T = max(len(r) for _, r in pairs) + 1
        enc = np.zeros((len(subset), S), "int32")
        dec = np.zeros((len(subset), T), "int32")
        out = np.zeros((len(subset), T), "int32")
        for k, (p, r) in enumerate(subset):
            src = [ids.get(w, 1) for w in p]
            tgt = [2] + [ids.get(w, 1) for w in r] + [3]
            enc[k, :len(src)] = src
            dec[k, :len(tgt) - 1] = tgt[:-1]
            out[k, :len(tgt) - 1] = tgt[1:]
        return enc, dec, out

    train_enc, train_dec, train_out = arrays(pairs[n_val:])
    val_enc, val_dec, val_out = arrays(pairs[:n_val])

    enc_in = keras.Input(shape=(None,))
    enc_emb = keras.layers.Embedding(V, 200, mask_zero=True)(enc_in)
    _, h, c = keras.layers.LSTM(200, return_state=True)(enc_emb)
    dec_in = keras.Input(shape=(None,))
    dec_emb = keras.layers.Embedding(V, 200, mask_zero=True)(dec_in)
    dec_out, _, _ = keras.layers.LSTM(200, return_state=True, return_sequences=True)(dec_emb, initial_state=[h, c])
    probs = keras.layers.Dense(V, activation="softmax")(dec_out)
    model = keras.Model([enc_in, dec_in], probs)
    model.compile(optimizer=keras.optimizers.RMSprop(), loss="sparse_categorical_crossentropy")

    clock = EpochClock()
    model.fit([train_enc, train_dec], train_out, batch_size=50, epochs=a.epochs,
              validation_data=([val_enc, val_dec], val_out), callbacks=[clock], verbose=0)

    timed = sorted(clock.times[1:] or clock.times)
    median = float(np.median(timed))
    print(f"Keras: median epoch {median:.3f} s over {len(timed)} epochs, {len(train_enc)} training pairs, "
          f"vocabulary {V}")
    if a.out:
        report = {
            "format": "chatbench-bench", "schema_version": 1,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "label": "Keras",
            "machine": {"cpu_model": cpu_model(), "cores": os.cpu_count(),
                        "tensorflow": tf.__version__, "python": sys.version.split()[0]},
            "preset": "seed",
            "model": {"vocab_size": V, "embed_dim": 200, "hidden": 200, "layers": 1, "attention": False,
                      "max_source_length": 22, "max_target_length": 74},
            "corpus": {"name": os.path.basename(os.path.normpath(a.corpus)), "pairs": len(pairs)},
            "gemm": [],
            "rows": [{"device": "cpu", "precision": "fp32", "threads": a.threads or os.cpu_count(), "batch": 50,
                      "unit": "epoch",
                      "time": {"median_s": median, "p10_s": float(np.percentile(timed, 10)),
                               "p90_s": float(np.percentile(timed, 90)), "min_s": timed[0], "max_s": timed[-1],
                               "samples_s": timed},
                      "tokens_per_second": 0, "gflops": 0, "gemm_fraction": 0, "peak_memory_bytes": 0,
                      "energy_joules": None, "energy_source": "not available"}],
            "races": [{"device": "cpu", "precision": "fp32", "threads": a.threads or os.cpu_count(),
                       "points": clock.race}],
            "notes": ["the Keras recipe (bench/peers/keras_peer.py), TensorFlow " + tf.__version__],
        }
        with open(a.out, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
