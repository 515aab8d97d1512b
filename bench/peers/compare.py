#!/usr/bin/env python3
"""Side by side: chatbench, the PyTorch-Python peer and (with --keras) the Keras recipe, training the
seed preset on one corpus on this machine, interleaved round by round so drift and noise hit all
of them alike. Prints the table of docs/performance.md and writes the figures as JSON; each
peer's own `chatbench-bench` report lands next to it for the Compare view.

Epoch time = training + validation of one epoch (the first epoch of every run is warm-up and not
counted); "÷ chatbench" = that tool's median epoch over chatbench's (how many times faster
chatbench is); loss = the last epoch's training loss per real target token.
"""

import argparse
import csv
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from machine import cpu_model

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run(cmd, env=None):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.stdout, time.perf_counter() - t0


def chatbench_run(cli, corpus, epochs, threads, scratch, extra, device):
    folder = tempfile.mkdtemp(dir=scratch)
    shutil.rmtree(folder)
    cmd = [cli, "train", "--preset", "seed", "--corpus", corpus, "--run", folder, "--epochs", str(epochs),
           "--quiet", "--threads", str(threads), "--device", device] + extra
    out, _ = run(cmd)
    pairs = int(re.search(r"\((\d+) pairs\)", out).group(1))
    with open(os.path.join(folder, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    with open(os.path.join(folder, "config.json")) as f:
        vocab = json.load(f)["model"]["vocab_size"]
    race = [{"seconds": float(r["elapsed_seconds"]), "loss": float(r["train_loss"]),
             "validation_loss": float(r["validation_loss"])} for r in rows]
    return [float(r["seconds"]) for r in rows], float(rows[-1]["train_loss"]), (race, vocab, pairs)


def time_stats(samples):
    """A report row's `time`: median, p10, p90, extremes and the samples."""
    s = sorted(samples)
    q = lambda f: s[min(len(s) - 1, int(round(f * (len(s) - 1))))]
    return {"median_s": statistics.median(s), "p10_s": q(0.1), "p90_s": q(0.9), "min_s": s[0], "max_s": s[-1],
            "samples_s": s}


def with_all_rounds(path, samples, rounds, corpus):
    """A peer writes its report for one run; its epoch row gets every round's epochs, as
    chatbench's does (the race stays the last run's curve), and its corpus the name of the one
    the user gave (not of the pairs exported from it), so Compare sees one workload."""
    with open(path) as f:
        report = json.load(f)
    report["corpus"]["name"] = os.path.basename(os.path.normpath(corpus))
    for row in report["rows"]:
        if row["unit"] == "epoch":
            row["time"] = time_stats(samples)
    report.setdefault("notes", []).append(f"epoch time over {rounds} interleaved rounds (bench/peers/compare.py)")
    with open(path, "w") as f:
        json.dump(report, f, indent=2)


def gpu_name(device):
    """{"gpu_name": ...} for a CUDA device, as nvidia-smi names it; {} for the CPU or without nvidia-smi."""
    if device == "cpu":
        return {}
    index = device.split(":")[1] if ":" in device else "0"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i", index],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    return {"gpu_name": out} if out else {}


def chatbench_report(path, samples, race, vocab, pairs, corpus, threads, device):
    """chatbench's side as a `chatbench-bench` report with the peers' definition of an epoch."""
    report = {
        "format": "chatbench-bench", "schema_version": 1,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "label": "chatbench",
        "machine": {"cpu_model": cpu_model(), "cores": os.cpu_count(), **gpu_name(device)},
        "preset": "seed",
        "model": {"vocab_size": vocab, "embed_dim": 200, "hidden": 200, "layers": 1, "attention": False,
                  "max_source_length": 22, "max_target_length": 74},
        "corpus": {"name": os.path.basename(os.path.normpath(corpus)), "pairs": pairs},
        "gemm": [],
        "rows": [{"device": device, "precision": "fp32", "threads": threads, "batch": 50, "unit": "epoch",
                  "time": time_stats(samples),
                  "tokens_per_second": 0, "gflops": 0, "gemm_fraction": 0, "peak_memory_bytes": 0,
                  "energy_joules": None, "energy_source": "not available"}],
        "races": [{"device": device, "precision": "fp32", "threads": threads, "points": race}],
        "notes": ["chatbench-cli train --preset seed, epoch = training + validation (bench/peers/compare.py)"],
    }
    with open(path, "w") as f:
        json.dump(report, f, indent=2)


def peer_corpus(cli, corpus, scratch):
    """What the peers read: a chatterbot YAML corpus as it is (they parse it themselves), any other
    format as the pairs chatbench loads from it, exported to TSV, so every tool trains on the same pairs."""
    out, _ = run([cli, "corpus", "validate", corpus])
    if re.search(r"format (\S+)", out).group(1) == "yaml":
        return corpus
    pairs = os.path.join(scratch, "pairs.tsv")
    run([cli, "corpus", "export", corpus, "--out", pairs])
    return pairs


def peer_run(python, script, corpus, epochs, threads, report, device="cpu"):
    out, _ = run([python, script, "--corpus", corpus, "--epochs", str(epochs), "--threads", str(threads),
                  "--out", report] + (["--device", device] if device != "cpu" else []))
    with open(report) as f:
        r = json.load(f)
    points = r["races"][0]["points"]
    times = [points[0]["seconds"]] + [b["seconds"] - a["seconds"] for a, b in zip(points, points[1:])]
    return times, points[-1]["loss"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True, help="a corpus file or folder in any format chatbench reads")
    ap.add_argument("--epochs", type=int, default=6, help="epochs per run (the first is not timed)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "app", "chatbench-cli"))
    ap.add_argument("--python", default=sys.executable, help="python with the torch chatbench links")
    ap.add_argument("--keras", default="", help="python of a virtual environment with TensorFlow (empty: skip)")
    ap.add_argument("--bf16", action="store_true",
                    help="also chatbench in bf16 (bf16 products, fp32 state; for CPUs with AVX512-BF16/AMX)")
    ap.add_argument("--device", default="cpu",
                    help="cpu or cuda:N: chatbench and the PyTorch peer train there (the Keras recipe is CPU only)")
    ap.add_argument("--out", default="peers.json")
    a = ap.parse_args()
    if a.device != "cpu" and (a.keras or a.bf16):
        ap.error("--keras and --bf16 compare CPU recipes; leave them out with --device " + a.device)

    scratch = tempfile.mkdtemp(prefix="chatbench-peers-")
    outdir = os.path.dirname(os.path.abspath(a.out))
    os.makedirs(outdir, exist_ok=True)
    tools = {"chatbench": [], "chatbench --nondeterministic": [], "PyTorch-Python": []}
    if a.bf16:
        tools["chatbench --precision bf16"] = []
    if a.keras:
        tools["Keras"] = []
    peers_read = peer_corpus(a.cli, a.corpus, scratch)
    losses = {k: [] for k in tools}
    last_race = None
    for r in range(a.rounds):
        for name in tools:
            if name.startswith("chatbench"):
                extra = name.split()[1:]  # the flags after the tool's name
                times, loss, last = chatbench_run(a.cli, a.corpus, a.epochs, a.threads, scratch, extra, a.device)
                if not extra:
                    last_race = last
            elif name == "PyTorch-Python":
                times, loss = peer_run(a.python, os.path.join(HERE, "pytorch_peer.py"), peers_read, a.epochs,
                                       a.threads, os.path.join(outdir, "peer-pytorch.json"), a.device)
            else:
                times, loss = peer_run(a.keras, os.path.join(HERE, "keras_peer.py"), peers_read, a.epochs, a.threads,
                                       os.path.join(outdir, "peer-keras.json"))
            tools[name] += times[1:]
            losses[name].append(loss)
            print(f"round {r + 1}/{a.rounds}  {name:30s} epochs {' '.join(f'{t:.2f}' for t in times[1:])} s  "
                  f"loss {loss:.4f}", file=sys.stderr, flush=True)
    shutil.rmtree(scratch, ignore_errors=True)

    chatbench_report(os.path.join(outdir, "peer-chatbench.json"), tools["chatbench"], *last_race, a.corpus,
                     a.threads, a.device)
    for name, file in (("PyTorch-Python", "peer-pytorch.json"), ("Keras", "peer-keras.json")):
        if name in tools:
            with_all_rounds(os.path.join(outdir, file), tools[name], a.rounds, a.corpus)
    base = statistics.median(tools["chatbench"])
    summary = {"corpus": os.path.basename(os.path.normpath(a.corpus)), "epochs": a.epochs, "rounds": a.rounds,
               "threads": a.threads, "device": a.device,
               "machine": cpu_model(), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                              time.gmtime()),
               "tools": {}}
    print(f"\nseed preset on {a.corpus}: {a.rounds} interleaved rounds × {a.epochs - 1} timed epochs, "
          f"{a.threads} threads, device {a.device}\n")
    print(f"{'':32s} {'median s/epoch':>15s} {'p10–p90':>13s} {'÷ chatbench':>12s} {'last loss':>10s}")
    for name, samples in tools.items():
        med = statistics.median(samples)
        q = statistics.quantiles(samples, n=10) if len(samples) > 1 else [med] * 9
        loss = statistics.median(losses[name])
        speed = med / base
        summary["tools"][name] = {"median_s": med, "p10_s": q[0], "p90_s": q[-1], "samples_s": samples,
                                  "last_loss": loss, "chatbench_speedup": speed}
        print(f"{name:32s} {med:15.3f} {q[0]:6.2f}–{q[-1]:<6.2f} {speed:11.2f}× {loss:10.4f}")
    with open(a.out, "w") as f:
        json.dump(summary, f, indent=2)
    print(f"\nwritten: {a.out}")


if __name__ == "__main__":
    main()
