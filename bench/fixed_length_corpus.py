#!/usr/bin/env python3
"""Writes a TSV corpus whose every pair has the same lengths, for timing a training step at one
exact shape (the E = H = 512, B = 64, T = 25 row of docs/performance.md): PROMPT_WORDS prompt
words and RESPONSE_WORDS response words (+ <end> = T target tokens), drawn from WORDS distinct
words with a fixed seed.

Usage: bench/fixed_length_corpus.py OUT.tsv [--pairs 2046] [--prompt-words 22] [--response-words 24] [--words 2283]
"""
import argparse
import random


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--pairs", type=int, default=2046)
    ap.add_argument("--prompt-words", type=int, default=22, help="the seed preset keeps 22 prompt words")
    ap.add_argument("--response-words", type=int, default=24)
    ap.add_argument("--words", type=int, default=2283, help="distinct words (the vocabulary adds 4 specials)")
    ap.add_argument("--seed", type=int, default=5)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    words = [f"w{i}" for i in range(a.words)]
    with open(a.out, "w", encoding="utf-8") as f:
        for _ in range(a.pairs):
            prompt = " ".join(rng.choice(words) for _ in range(a.prompt_words))
            response = " ".join(rng.choice(words) for _ in range(a.response_words))
            f.write(f"{prompt}\t{response}\n")


if __name__ == "__main__":
    main()
