"""Benchmark: one pre-training step (forward, backward, gradient clipping and a LAMB update; MLM + SOP loss) of
albert_edu against transformers' AlbertForPreTraining with the same configuration, weights' shapes, batch and
optimizer. A script that reports, not a test that asserts: machines are shared and noisy, so the two models
alternate step by step and we compare medians.

    .venv/bin/python tests/benchmarks/pretraining_step.py [--config experiment|wide] [--steps 20] [--threads 1]

`--config experiment` (the default) is the model, batch and length of chapter 8's full recipe (H = 128, 6 layers
sharing one, batch 32 x 128 tokens; its runs train on one thread each, two at a time); `wide` is a wider model
(H = 256) at batch 16 x 128.
"""

import argparse

import torch
import transformers

from albert_edu import AlbertConfig, AlbertForPreTraining, to_transformers_config
from albert_edu.experiments import experiment_model, recipe_training
from albert_edu.notebook import time_interleaved
from albert_edu.optim import Lamb

WIDE = dict(vocab_size=8000, embedding_size=64, hidden_size=256, num_hidden_layers=6, num_attention_heads=4,
            intermediate_size=1024)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", choices=("experiment", "wide"), default="experiment")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per model (default 20)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as a run of train_all)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.config == "experiment":
        config, training = experiment_model("all"), recipe_training("full", "sop", 0)
        batch, length, lr = training.batch_size, training.max_seq_len, training.lr
    else:
        config, batch, length, lr = AlbertConfig(**WIDE), 16, 128, 5e-3
    ours = AlbertForPreTraining(config)
    theirs = transformers.AlbertForPreTraining(to_transformers_config(config, attn_implementation="sdpa"))
    optimizers = {"albert_edu": Lamb(ours.parameters(), lr=lr), "transformers": Lamb(theirs.parameters(), lr=lr)}
    ids = torch.randint(5, config.vocab_size, (batch, length))
    labels = torch.where(torch.rand(ids.shape) < 0.15, ids, torch.full_like(ids, -100))
    order = torch.randint(0, 2, (batch,))

    def step(name, model):
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=labels, sentence_order_label=order).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizers[name].step()

    medians = time_interleaved({"albert_edu": lambda: step("albert_edu", ours),
                                "transformers": lambda: step("transformers", theirs)}, repeats=args.steps)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {args.threads} thread(s), "
          f"config {args.config}: H={config.hidden_size}, L={config.num_hidden_layers}, sharing={config.sharing}, "
          f"batch {batch} x {length}, {int((labels != -100).sum())} labelled positions")
    for name, seconds in medians.items():
        print(f"  {name:13} median step {seconds * 1000:7.1f} ms = {batch * length / seconds:8,.0f} tokens/s")
    print(f"  albert_edu is {medians['transformers'] / medians['albert_edu']:.2f}x as fast (ratio of medians, "
          f"{args.steps} interleaved steps each)")


if __name__ == "__main__":
    main()
