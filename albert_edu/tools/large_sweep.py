"""The learning-rate sweep on the large corpus (section 2.5): short MLM-only runs of each geometry the book may
train, at several LAMB rates, the held-out MLM loss deciding; and the speed of a training step in fp32 and under
bf16 autocast for each geometry (on a GPU, where the two differ).

    python -m albert_edu.tools.large_sweep --device cuda --parallel 8 --out data/results/sweep-large.json

Each run is `training.pretrain` with a TrainingConfig and a model configuration written out below, in a folder of
--runs-dir named after its geometry and rate; a finished one is read back, not trained again."""

import argparse
import json
import multiprocessing
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

GEOMETRIES = {
    "E64-H128-L6": dict(embedding_size=64, hidden_size=128, num_hidden_layers=6, num_attention_heads=2,
                        intermediate_size=512),  # the experiments' model (chapters 8-11)
    "E128-H256-L6": dict(embedding_size=128, hidden_size=256, num_hidden_layers=6, num_attention_heads=4,
                         intermediate_size=1024),
    "E128-H256-L12": dict(embedding_size=128, hidden_size=256, num_hidden_layers=12, num_attention_heads=4,
                          intermediate_size=1024),  # the gpu recipe's model
    "E128-H768-L12": dict(embedding_size=128, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                          intermediate_size=3072),  # ALBERT-base
}
RATES = (1e-3, 2e-3, 4e-3, 8e-3)
STEPS, BATCH, MAX_SEQ_LEN = 600, 128, 128


def model_config(geometry: str, vocab_size: int):
    from albert_edu.config import AlbertConfig

    return AlbertConfig.from_preset("tiny", vocab_size=vocab_size, sharing="all", **GEOMETRIES[geometry])


def training_config(lr: float, steps: int = STEPS, evaluations: int = 3):
    from albert_edu.training import TrainingConfig

    return TrainingConfig(objective="none", steps=steps, batch_size=BATCH, max_seq_len=MAX_SEQ_LEN, lr=lr,
                          warmup_steps=max(1, steps // 15), eval_every=steps // evaluations, log_every=10)


def _log(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "log.jsonl").read_text().splitlines()]


def sweep_run(geometry: str, lr: float, runs_dir: Path, data_dir: Path, device: str, steps: int = STEPS) -> dict:
    """One run of the sweep, trained now or read from its folder: its evaluations and training loss."""
    from albert_edu.tokenizer import Tokenizer
    from albert_edu.training import pretrain

    out = Path(runs_dir) / f"{geometry}-lr{lr:g}-{steps}"
    started = time.perf_counter()
    if not (out / "model.safetensors").exists():
        vocab = Tokenizer.load(Path(data_dir) / "tokenizer").vocab_size
        pretrain(model_config(geometry, vocab), training_config(lr, steps), out, resume=(out / "log.jsonl").exists(),
                 data_dir=data_dir, progress=False, device=device)
    records = _log(out)
    return {"geometry": geometry, "lr": lr, "steps": steps, "batch_size": BATCH, "max_seq_len": MAX_SEQ_LEN,
            "seconds": round(time.perf_counter() - started, 1),
            "evaluations": [{"step": r["step"], **r["eval"]} for r in records if "eval" in r],
            "loss": [[r["step"], r["loss"]] for r in records if "loss" in r and r["step"] % 50 == 0],
            "tokens_per_s": [r for r in records if "loss" in r][-1]["tokens_per_s"]}


def step_speed(geometry: str, precision: str, runs_dir: Path, data_dir: Path, device: str, steps: int) -> dict:
    """Tokens per second of `steps` training steps (the library's loop: batches, the step, its log line; the
    examples are made before the clock starts), in a fresh folder each time."""
    from albert_edu.tokenizer import Tokenizer
    from albert_edu.training import pretrain

    out = Path(runs_dir) / f"speed-{geometry}-{precision}-{time.time_ns()}"
    vocab = Tokenizer.load(Path(data_dir) / "tokenizer").vocab_size
    pretrain(model_config(geometry, vocab), training_config(1e-3, steps, evaluations=steps + 1), out,
             data_dir=data_dir, progress=False, device=device, precision=precision)  # evaluated after the last step only
    return {"geometry": geometry, "precision": precision, "steps": steps,
            "tokens_per_s": [r for r in _log(out) if "loss" in r][-1]["tokens_per_s"]}


def _machine(device: str) -> dict:
    from albert_edu.sources import code_commit

    return {"commit": code_commit(), "device": torch.cuda.get_device_name() if device == "cuda" else platform.processor(),
            "torch": torch.__version__}


def main(argv: list[str] | None = None) -> None:
    from albert_edu.corpus import DATA_DIR
    from albert_edu.sources import LARGE_DIR

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--data-dir", type=Path, default=LARGE_DIR)
    p.add_argument("--runs-dir", type=Path, default=LARGE_DIR / "runs")
    p.add_argument("--out", type=Path, default=DATA_DIR / "results" / "sweep-large.json")
    p.add_argument("--geometries", nargs="+", default=["E64-H128-L6", "E128-H256-L6"], choices=sorted(GEOMETRIES))
    p.add_argument("--rates", nargs="+", type=float, default=list(RATES))
    p.add_argument("--steps", type=int, default=STEPS)
    p.add_argument("--parallel", type=int, default=1, help="runs at a time (processes; on a GPU they share it)")
    p.add_argument("--speed", nargs="*", default=[], choices=sorted(GEOMETRIES),
                   help="also time fp32 and bf16 steps of these geometries, one at a time, before the sweep")
    p.add_argument("--speed-data-dir", type=Path, default=DATA_DIR, help="the corpus the timed runs read")
    p.add_argument("--speed-steps", type=int, default=150)
    args = p.parse_args(argv)
    started = time.perf_counter()
    speed = [step_speed(g, precision, args.runs_dir, args.speed_data_dir, args.device, args.speed_steps)
             for g in args.speed for precision in ("fp32", "bf16")]
    jobs = [(g, lr) for g in args.geometries for lr in args.rates]
    columns = [*zip(*jobs), *([x] * len(jobs) for x in (args.runs_dir, args.data_dir, args.device, args.steps))]
    if args.parallel == 1:
        runs = list(map(sweep_run, *columns))
    else:  # spawned, not forked: a fork after the timed runs (or after CUDA starts) inherits locked thread pools
        with ProcessPoolExecutor(args.parallel, mp_context=multiprocessing.get_context("spawn")) as pool:
            runs = list(pool.map(sweep_run, *columns))
    command = "python -m albert_edu.tools.large_sweep " + " ".join(argv if argv is not None else sys.argv[1:])
    result = {"command": command, **_machine(args.device), "minutes": round((time.perf_counter() - started) / 60, 2),
              "data": json.loads((args.data_dir / "prepared" / "stats.json").read_text())["inputs"],
              "speed": speed, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for r in runs:
        final = r["evaluations"][-1]
        print(f"{r['geometry']:14s} lr {r['lr']:<7g} held-out MLM loss {final['mlm_loss']:.3f} "
              f"accuracy {final['mlm_accuracy']:.3f}  {r['tokens_per_s']:,} tokens/s")
    for s in speed:
        print(f"{s['geometry']:14s} {s['precision']}: {s['tokens_per_s']:,} tokens/s")


if __name__ == "__main__":
    main()
