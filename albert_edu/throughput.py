"""Chapter 11's timing harness, the plumbing behind section 11.2's Table 2 and section 11.6's step costs: one
training step of a fresh model on a fixed batch, Table 2's geometries, the machine a timing ran on, every timing
`albert-edu throughput` writes to data/results/throughput.json (rounds taken in turn, medians read later), and
reading that file back. albert_edu.ablations re-exports every name."""

import json
import time
from dataclasses import replace
from pathlib import Path

import torch

from albert_edu.ablation_grid import ABLATION_LENGTH, STRATEGY_E, ablation_model
from albert_edu.config import AlbertConfig
from albert_edu.model import AlbertForPreTraining
from albert_edu.notebook import time_rounds
from albert_edu.optim import Lamb


def training_step(config: AlbertConfig, batch: int, length: int, seed: int = 0):
    """A function that runs one forward and backward pass (MLM on 15% of the positions, plus SOP) of a fresh
    model of `config` on a fixed random batch, and the model: for timing, not for learning."""
    generator = torch.Generator().manual_seed(seed)
    model = AlbertForPreTraining(config).train()
    ids = torch.randint(5, config.vocab_size, (batch, length), generator=generator)
    labels = torch.where(torch.rand(ids.shape, generator=generator) < 0.15, ids, torch.full_like(ids, -100))
    order = torch.randint(0, 2, (batch,), generator=generator)

    def step():
        model.zero_grad(set_to_none=True)  # fresh gradients every step, as chapter 7's training loop
        model(input_ids=ids, labels=labels, sentence_order_label=order).loss.backward()

    return step, model


THROUGHPUT_MODELS = ("bert-base", "bert-large", "albert-base", "albert-large", "albert-xlarge", "albert-xxlarge")
THROUGHPUT_FILE = "throughput.json"  # in experiments.RESULTS_DIR, written by `albert-edu throughput`


def throughput_models(names=THROUGHPUT_MODELS) -> dict[str, AlbertConfig]:
    """Table 2's geometries as the chapter times them: without dropout, so that only shapes and sharing differ."""
    return {name: replace(AlbertConfig.from_preset(name), hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
            for name in names}


def machine() -> dict:
    """What a timing depends on: the processor, its cores and last-level cache, PyTorch's version and threads."""
    import os
    import platform

    cpuinfo = Path("/proc/cpuinfo")  # Linux; elsewhere platform's name for the processor
    names = [line.split(":", 1)[1].strip() for line in (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
             if line.startswith("model name")]
    cpu = names[0] if names else platform.processor()
    cache = Path("/sys/devices/system/cpu/cpu0/cache/index3/size")
    return {"cpu": cpu or platform.machine(), "cores": os.cpu_count(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "l3_cache": cache.read_text().strip() if cache.exists() else "unknown"}


def measure_throughput(rounds: int = 5, length: int = 16, models: dict[str, AlbertConfig] | None = None,
                       forward_pair=(("bert-base", "albert-base"), ("bert-large", "albert-large")),
                       reuse_sizes=(768, 1024, 2048), lamb_pair=("bert-large", "albert-large"),
                       wide_batch: int = 32) -> dict:
    """Every timing of section 11.2 and 11.6, with each round's seconds (time_rounds): one training step
    (forward and backward, batch 1 of `length` pieces) of each model; the encoder's forward pass alone, without
    gradients, for the pairs of equal shape; a "layer" of three H x 4H matrices applied twelve times to `length`
    rows, the same three each time (as a shared layer) or 36 different ones (as twelve unshared layers), for each
    H in reuse_sizes; one LAMB update of each model of lamb_pair; and, on one thread as the grid trains, one step of
    Table 6's BERT-style and wide models on `wide_batch` sequences of ABLATION_LENGTH. What `albert-edu
    throughput` writes to data/results/throughput.json; the chapter reads the file, not this machine's clock."""
    models = throughput_models() if models is None else models
    started = time.perf_counter()
    steps, built = {}, {}
    for name, c in models.items():
        steps[name], built[name] = training_step(c, batch=1, length=length)
    out = {"rounds": rounds, "length": length, "models": {name: c.to_dict() for name, c in models.items()},
           "step_seconds": time_rounds(steps, rounds)}
    ids = torch.randint(5, min(c.vocab_size for c in models.values()), (1, length),
                        generator=torch.Generator().manual_seed(0))
    encoders = {name: (lambda m=built[name]: m.albert(ids)) for pair in forward_pair for name in pair}
    with torch.no_grad():
        out["forward_seconds"] = time_rounds(encoders, rounds)
    optimizers = {name: Lamb(built[name].parameters(), lr=1e-3) for name in lamb_pair}  # gradients of the steps
    out["lamb_seconds"] = time_rounds({name: optimizers[name].step for name in lamb_pair}, rounds)
    del steps, built, optimizers, encoders  # a few GB of weights, gradients and optimizer state
    out["reuse"] = []
    for h in reuse_sizes:
        x = torch.randn(length, h, generator=torch.Generator().manual_seed(h))
        weights = [torch.randn(h, 4 * h, generator=torch.Generator().manual_seed(h + i)) / h**0.5 for i in range(36)]

        def apply(layers, x=x):
            y = x
            for layer in layers:
                for w in layer:
                    y = (y @ w)[:, :h]
            return y

        shared, unshared = [weights[:3]] * 12, [weights[3 * i:3 * i + 3] for i in range(12)]
        seconds = time_rounds({"shared": lambda: apply(shared), "unshared": lambda: apply(unshared)}, rounds)
        out["reuse"].append({"hidden_size": h, **seconds})
        del weights
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        wide = {name: training_step(config, batch=wide_batch, length=ABLATION_LENGTH)[0]
                for name, config in (("BERT-style", ablation_model(128, "none")),
                                     ("wide", ablation_model(STRATEGY_E, "all", wide=True)))}
        out["wide_step_seconds"] = time_rounds(wide, rounds)
    finally:
        torch.set_num_threads(threads)
    return {"command": "albert-edu throughput" + (f" --rounds {rounds}" if rounds != 5 else ""), "machine": machine(),
            **out, "minutes": round((time.perf_counter() - started) / 60, 1)}


def load_throughput(path: Path | None = None) -> dict:
    """The committed timings (measure_throughput), checked to be of today's geometries."""
    from albert_edu.experiments import RESULTS_DIR

    path = Path(path) if path is not None else RESULTS_DIR / THROUGHPUT_FILE
    timings = json.loads(path.read_text())
    expected = {name: c.to_dict() for name, c in throughput_models().items()}
    if timings["models"] != expected:
        changed = sorted(n for n in expected if timings["models"].get(n) != expected[n])
        raise ValueError(f"{path} times other geometries than today's presets ({', '.join(changed) or 'names'}): "
                         f"run `albert-edu throughput` again")
    return timings
