"""Benchmark: one pre-training step (forward + backward, MLM + SOP loss) of albert_edu against transformers'
AlbertForPreTraining on the same configuration and batch. A script that reports, not a test that asserts:
machines are shared and noisy, so the two models alternate step by step and we compare medians.

    .venv/bin/python tests/benchmarks/pretraining_step.py [--steps 20] [--threads 2]
"""

import argparse

import torch
import transformers

from albert_edu import AlbertConfig, AlbertForPreTraining, to_transformers_config
from albert_edu.notebook import time_interleaved

SHAPE = dict(vocab_size=8000, embedding_size=64, hidden_size=256, num_hidden_layers=6, num_attention_heads=4,
             intermediate_size=1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per model (default 20)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    ours = AlbertForPreTraining(AlbertConfig(**SHAPE))
    theirs = transformers.AlbertForPreTraining(to_transformers_config(AlbertConfig(**SHAPE), attn_implementation="sdpa"))
    ids = torch.randint(5, SHAPE["vocab_size"], (args.batch, args.length))
    labels = torch.where(torch.rand(ids.shape) < 0.15, ids, torch.full_like(ids, -100))
    order = torch.randint(0, 2, (args.batch,))

    def step(model):
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=labels, sentence_order_label=order).loss.backward()

    medians = time_interleaved({"albert_edu": lambda: step(ours), "transformers": lambda: step(theirs)},
                               repeats=args.steps)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {args.threads} threads, "
          f"batch {args.batch} x {args.length}, {int((labels != -100).sum())} labelled positions")
    for name, seconds in medians.items():
        print(f"  {name:13} median step {seconds * 1000:7.1f} ms")
    print(f"  albert_edu is {medians['transformers'] / medians['albert_edu']:.2f}x faster (ratio of medians, "
          f"{args.steps} interleaved steps each)")


if __name__ == "__main__":
    main()
