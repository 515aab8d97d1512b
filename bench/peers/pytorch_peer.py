#!/usr/bin/env python3
"""The seed recipe written the way a PyTorch user would: the peer chatbench is measured against.

Same model and loop as `chatbench-cli train --preset seed`: Keras-style word tokenizer, consecutive
turns as (prompt, response) pairs, a 10% validation split, prompts cut to 22 words and responses
to 74 tokens with <start>/<end>; separate encoder/decoder embeddings (200), one LSTM layer (200)
each, the decoder started from the encoder's final (h, c) (packed encoder, so padding never moves
the state); masked summed cross-entropy divided by the batch's real tokens; RMSprop with Keras'
defaults (lr 1e-3, rho 0.9, eps 1e-7), gradient-norm clip 5, batches of 50 bucketed by length;
validation and a torch.save checkpoint after every epoch (epoch time = train + validation, the
way chatbench's epoch times are taken).

Writes a `chatbench-bench` report (unit "epoch", and the loss-vs-time race) so the Compare view
shows it beside chatbench's own rows.
"""

import argparse
import json
import os
import random
import re
import sys
import tempfile
import time

import torch
import torch.nn as nn
import yaml

from machine import cpu_model

PAD, UNK, START, END = 0, 1, 2, 3
KERAS_FILTERS = '!"#$%&()*+,-./:;<=>?@[\\]^_`{|}~\t\n'


def words(text):
    text = str(text).lower()
    text = text.translate(str.maketrans({c: " " for c in KERAS_FILTERS}))
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
            if not isinstance(conv, list):
                continue  # a malformed record: skip it, keep the rest
            turns = [str(t) for t in conv if t is not None]
            pairs += [(a, b) for a, b in zip(turns, turns[1:])]
    return pairs


class Seq2Seq(nn.Module):
    def __init__(self, vocab, embed=200, hidden=200):
        super().__init__()
        self.enc_emb = nn.Embedding(vocab, embed)
        self.dec_emb = nn.Embedding(vocab, embed)
        self.encoder = nn.LSTM(embed, hidden, batch_first=True)
        self.decoder = nn.LSTM(embed, hidden, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, src, lengths, dec_in):
        packed = nn.utils.rnn.pack_padded_sequence(self.enc_emb(src), lengths, batch_first=True,
                                                   enforce_sorted=False)
        _, (h, c) = self.encoder(packed)
        y, _ = self.decoder(self.dec_emb(dec_in), (h, c))
        return self.out(y)


def batches(examples, size, rng):
    """Bucketing: shuffle, sort pools of 50 batches by length, cut, shuffle the batches."""
    idx = list(range(len(examples)))
    rng.shuffle(idx)
    out = []
    pool = size * 50
    for p in range(0, len(idx), pool):
        chunk = sorted(idx[p:p + pool], key=lambda i: (len(examples[i][0]), len(examples[i][1])))
        out += [chunk[k:k + size] for k in range(0, len(chunk), size)]
    rng.shuffle(out)
    return out


def collate(examples, ids):
    src = [examples[i][0] for i in ids]
    tgt = [examples[i][1] for i in ids]
    S, T = max(map(len, src)), max(map(len, tgt)) - 1
    s = torch.zeros(len(ids), S, dtype=torch.long)
    d = torch.zeros(len(ids), T, dtype=torch.long)
    y = torch.zeros(len(ids), T, dtype=torch.long)
    for k, (a, b) in enumerate(zip(src, tgt)):
        s[k, :len(a)] = torch.tensor(a)
        d[k, :len(b) - 1] = torch.tensor(b[:-1])
        y[k, :len(b) - 1] = torch.tensor(b[1:])
    return s, torch.tensor([len(a) for a in src]), d, y


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--out", default="")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (cuDNN's LSTM, fp32 without TF32)")
    a = ap.parse_args()
    dev = torch.device(a.device)
    if dev.type == "cuda":  # IEEE fp32, as chatbench trains "fp32" unless asked for TF32
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)

    pairs = [(words(p)[:22], words(r)[:72]) for p, r in load_pairs(a.corpus)]
    pairs = [(p, r) for p, r in pairs if p and r]
    rng.shuffle(pairs)
    n_val = max(1, len(pairs) // 10)
    val_pairs, train_pairs = pairs[:n_val], pairs[n_val:]
    counts = {}
    for p, r in train_pairs:
        for w in p + r:
            counts[w] = counts.get(w, 0) + 1
    vocab = ["<pad>", "<unk>", "<start>", "<end>"] + sorted(counts, key=lambda w: (-counts[w], w))
    ids = {w: i for i, w in enumerate(vocab)}
    enc = lambda ws: [ids.get(w, UNK) for w in ws]
    train = [(enc(p), [START] + enc(r) + [END]) for p, r in train_pairs]
    val = [(enc(p), [START] + enc(r) + [END]) for p, r in val_pairs]

    model = Seq2Seq(len(vocab)).to(dev)
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-3, alpha=0.9, eps=1e-7)
    loss_fn = nn.CrossEntropyLoss(ignore_index=PAD, reduction="sum")
    ckpt = os.path.join(tempfile.mkdtemp(prefix="pytorch-peer-"), "ckpt.pt")
    epochs, race, elapsed = [], [], 0.0
    for epoch in range(a.epochs):
        t0 = time.perf_counter()
        model.train()
        total, tokens = 0.0, 0
        for b in batches(train, 50, rng):
            s, lengths, d, y = collate(train, b)
            n = int((y != PAD).sum())
            s, d, y = s.to(dev), d.to(dev), y.to(dev)
            loss = loss_fn(model(s, lengths, d).reshape(-1, len(vocab)), y.reshape(-1))
            opt.zero_grad()
            (loss / n).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            total += float(loss)
            tokens += n
        model.eval()
        vsum, vtok = 0.0, 0
        with torch.no_grad():
            for k in range(0, len(val), 50):
                s, lengths, d, y = collate(val, list(range(k, min(k + 50, len(val)))))
                s, d, y = s.to(dev), d.to(dev), y.to(dev)
                vsum += float(loss_fn(model(s, lengths, d).reshape(-1, len(vocab)), y.reshape(-1)))
                vtok += int((y != PAD).sum())
        dt = time.perf_counter() - t0  # train + validation (float() waited for the device); the checkpoint is not timed
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, ckpt)
        elapsed += dt
        epochs.append(dt)
        race.append({"seconds": elapsed, "loss": total / tokens, "validation_loss": vsum / vtok})
        print(f"epoch {epoch + 1:3d}  train loss {total / tokens:.4f}  val loss {vsum / vtok:.4f}  {dt:.2f} s",
              flush=True)

    timed = sorted(epochs[1:] or epochs)  # the first epoch pays for warm-up
    median = timed[len(timed) // 2] if len(timed) % 2 else 0.5 * (timed[len(timed) // 2 - 1] + timed[len(timed) // 2])
    print(f"PyTorch-Python: median epoch {median:.3f} s over {len(timed)} epochs, {len(train)} training pairs, "
          f"vocabulary {len(vocab)}")
    if a.out:
        threads = torch.get_num_threads()
        where = "cpu" if dev.type == "cpu" else f"cuda:{dev.index or 0}"
        gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else ""
        q = lambda f: timed[min(len(timed) - 1, int(round(f * (len(timed) - 1))))]
        report = {
            "format": "chatbench-bench", "schema_version": 1,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "label": "PyTorch-Python",
            "machine": {"cpu_model": cpu_model(), "cores": os.cpu_count(),
                        "torch": torch.__version__, "python": sys.version.split()[0],
                        **({"gpu_name": gpu} if gpu else {})},
            "preset": "seed",
            "model": {"vocab_size": len(vocab), "embed_dim": 200, "hidden": 200, "layers": 1, "attention": False,
                      "max_source_length": 22, "max_target_length": 74},
            "corpus": {"name": os.path.basename(os.path.normpath(a.corpus)), "pairs": len(pairs)},
            "gemm": [],
            "rows": [{"device": where, "precision": "fp32", "threads": threads, "batch": 50, "unit": "epoch",
                      "time": {"median_s": median, "p10_s": q(0.1), "p90_s": q(0.9), "min_s": timed[0],
                               "max_s": timed[-1], "samples_s": timed},
                      "tokens_per_second": 0, "gflops": 0, "gemm_fraction": 0, "peak_memory_bytes": 0,
                      "energy_joules": None, "energy_source": "not available"}],
            "races": [{"device": where, "precision": "fp32", "threads": threads, "points": race}],
            "notes": ["the same recipe in PyTorch-Python (bench/peers/pytorch_peer.py)"],
        }
        with open(a.out, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
