"""The learning-rate sweep on the large corpus (section 2.5): short MLM-only runs of each geometry the book may
train, at several LAMB rates, the held-out MLM loss deciding; and the speed of a training step in fp32 and under
bf16 autocast for each geometry (on a GPU, where the two differ).

    python -m albert_edu.tools.large_sweep --device cuda --parallel 8 --out data/results/sweep-large.json
    python -m albert_edu.tools.large_sweep --runs E64-H128-L6/b32/lamb/4e-3/6000 E128-H256-L6/b128/adamw/1e-3/4500

Each run is `training.pretrain` with a TrainingConfig and a model configuration written out below, in a folder of
--runs-dir named after its geometry, optimizer, rate, batch and steps; a finished one is read back, not trained
again. A run is the grid's (--geometries x --rates, at --batch, --optimizer, --steps) or one of --runs, each
written geometry/bBATCH/OPTIMIZER/RATE/STEPS."""

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


def training_config(lr: float, steps: int = STEPS, evaluations: int = 3, batch_size: int = BATCH,
                    optimizer: str = "lamb"):
    from albert_edu.training import TrainingConfig

    return TrainingConfig(objective="none", steps=steps, batch_size=batch_size, max_seq_len=MAX_SEQ_LEN, lr=lr,
                          optimizer=optimizer, warmup_steps=max(1, steps // 15), eval_every=steps // evaluations,
                          log_every=10)


def parse_run(spec: str) -> dict:
    """geometry/bBATCH/OPTIMIZER/RATE/STEPS, as --runs takes it, as keyword arguments of sweep_run."""
    from albert_edu.training import OPTIMIZERS

    parts = spec.split("/")
    try:
        geometry, batch, optimizer, lr, steps = parts
        run = {"geometry": geometry, "batch_size": int(batch.removeprefix("b")), "optimizer": optimizer,
               "lr": float(lr), "steps": int(steps)}
    except ValueError:
        raise ValueError(f"run {spec!r}: expected GEOMETRY/bBATCH/OPTIMIZER/RATE/STEPS, as in "
                         f"E64-H128-L6/b128/lamb/8e-3/4000") from None
    if geometry not in GEOMETRIES or optimizer not in OPTIMIZERS:
        raise ValueError(f"run {spec!r}: expected a geometry of {sorted(GEOMETRIES)} and an optimizer of "
                         f"{sorted(OPTIMIZERS)}")
    return run


def _log(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "log.jsonl").read_text().splitlines()]


def sweep_run(geometry: str, lr: float, runs_dir: Path, data_dir: Path, device: str, steps: int = STEPS,
              batch_size: int = BATCH, optimizer: str = "lamb", precision: str = "auto", threads: int = 0,
              evaluations: int = 3) -> dict:
    """One run of the sweep, trained now or read from its folder: its evaluations and training loss.
    threads: the CPU threads of this process (0: PyTorch's default)."""
    from albert_edu.tokenizer import Tokenizer
    from albert_edu.training import pretrain

    if threads:
        torch.set_num_threads(threads)
    out = Path(runs_dir) / f"{geometry}-{optimizer}{lr:g}-b{batch_size}-{steps}"
    started = time.perf_counter()
    if not (out / "model.safetensors").exists():
        vocab = Tokenizer.load(Path(data_dir) / "tokenizer").vocab_size
        pretrain(model_config(geometry, vocab), training_config(lr, steps, evaluations, batch_size, optimizer), out,
                 resume=(out / "log.jsonl").exists(), data_dir=data_dir, progress=False, device=device,
                 precision=precision)
    records = _log(out)
    return {"geometry": geometry, "optimizer": optimizer, "lr": lr, "steps": steps, "batch_size": batch_size,
            "max_seq_len": MAX_SEQ_LEN, "precision": precision,
            "seconds": round(time.perf_counter() - started, 1),
            "evaluations": [{"step": r["step"], **r["eval"]} for r in records if "eval" in r],
            "loss": [[r["step"], r["loss"]] for r in records if "loss" in r and r["step"] % 50 == 0],
            "tokens_per_s": [r for r in records if "loss" in r][-1]["tokens_per_s"]}


class _Replay:
    """Stands in for a run's example stream: hands out batches made in advance, in turn, so that a timed step
    does no example creation (tokenizing and masking a pass of the corpus happens on the CPU whenever the
    stream starts a new pass, which makes some timed rounds of a small corpus slow and others not)."""

    def __init__(self, batches: list):
        if not batches:
            raise ValueError("no batches to replay: expected at least one made in advance")
        self.batches, self.taken = batches, 0

    def take(self, n: int) -> list:
        batch = self.batches[self.taken % len(self.batches)]
        if len(batch) != n:
            raise ValueError(f"a batch of {n} asked for, but the batches made in advance hold {len(batch)}")
        self.taken += 1
        return batch


def step_speed(geometry: str, data_dir: Path, device: str, steps: int, rounds: int = 5, batch_size: int = BATCH,
               runs_dir: Path | None = None, premade: bool = False) -> dict:
    """Tokens per second of the library's training step (`training.train_step`: the batch taken from the stream,
    forward, backward, LAMB) in fp32 and under bf16 autocast, warm and interleaved: one model, `steps` steps in
    each precision to warm up, then `rounds` rounds of `steps` steps in each, the order alternating from round
    to round, each timed with the device synchronized; the medians over the rounds and every round's figure.
    As in `training.start_run`, the bf16 path lets the products autocast leaves in fp32 use TF32, fp32 does not.
    premade: make `steps` batches before timing and replay them (`_Replay`), so that the rounds time the step
    (collating, the copy to the device, forward, backward, the update) without example creation."""
    import statistics
    import tempfile

    from albert_edu.tokenizer import Tokenizer
    from albert_edu.training import start_run, train_step

    tokenizer = Tokenizer.load(Path(data_dir) / "tokenizer")
    config = training_config(1e-3, steps * (2 * rounds + 2) + 1, batch_size=batch_size)
    with tempfile.TemporaryDirectory(dir=runs_dir) as out:
        run = start_run(model_config(geometry, tokenizer.vocab_size), config, Path(out), False, Path(data_dir),
                        tokenizer, device=device, precision="fp32")
        dtypes = {"fp32": None, "bf16": torch.bfloat16}
        if premade:
            run.stream = _Replay([run.stream.take(batch_size) for _ in range(steps)])

        def timed(precision: str) -> float:
            run.dtype = dtypes[precision]
            if run.device.type == "cuda":
                torch.backends.cuda.matmul.fp32_precision = "tf32" if precision == "bf16" else "ieee"
                torch.cuda.synchronize()
            started, tokens = time.perf_counter(), 0
            for _ in range(steps):
                tokens += train_step(run, config)["tokens"]
            if run.device.type == "cuda":
                torch.cuda.synchronize()
            return tokens / (time.perf_counter() - started)

        for precision in dtypes:
            timed(precision)
        rounds_seen = {precision: [] for precision in dtypes}
        for r in range(rounds):
            for precision in (("fp32", "bf16") if r % 2 == 0 else ("bf16", "fp32")):
                rounds_seen[precision].append(round(timed(precision)))
    return {"geometry": geometry, "batch_size": batch_size, "steps": steps, "premade": premade, "rounds": rounds_seen,
            **{f"{p}_tokens_per_s": round(statistics.median(v)) for p, v in rounds_seen.items()}}


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
    p.add_argument("--rates", nargs="*", type=float, default=list(RATES), help="none: the --runs alone")
    p.add_argument("--steps", type=int, default=STEPS)
    p.add_argument("--batch", type=int, default=BATCH, help="the grid's batch size")
    p.add_argument("--optimizer", default="lamb", help="the grid's optimizer")
    p.add_argument("--runs", nargs="*", default=[], metavar="SPEC",
                   help="runs beside the grid, each GEOMETRY/bBATCH/OPTIMIZER/RATE/STEPS (--rates none: these alone)")
    p.add_argument("--evaluations", type=int, default=3, help="held-out evaluations a run, evenly spaced")
    p.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"))
    p.add_argument("--threads", type=int, default=0, help="CPU threads a run (0: PyTorch's default)")
    p.add_argument("--parallel", type=int, default=1, help="runs at a time (processes; on a GPU they share it)")
    p.add_argument("--speed", nargs="*", default=[], choices=sorted(GEOMETRIES),
                   help="also time fp32 and bf16 steps of these geometries, one at a time, before the sweep")
    p.add_argument("--speed-data-dir", type=Path, default=DATA_DIR, help="the corpus the timed runs read")
    p.add_argument("--speed-steps", type=int, default=20, help="steps a timed round")
    p.add_argument("--speed-rounds", type=int, default=5)
    p.add_argument("--speed-premade", action="store_true",
                   help="time batches made in advance (the step without example creation) instead of the stream's")
    args = p.parse_args(argv)
    started = time.perf_counter()
    args.runs_dir.mkdir(parents=True, exist_ok=True)
    speed = [step_speed(g, args.speed_data_dir, args.device, args.speed_steps, args.speed_rounds,
                        runs_dir=args.runs_dir, premade=args.speed_premade) for g in args.speed]
    grid = [] if args.rates == [] else [dict(geometry=g, lr=lr, steps=args.steps, batch_size=args.batch,
                                             optimizer=args.optimizer) for g in args.geometries for lr in args.rates]
    jobs = grid + [parse_run(spec) for spec in args.runs]
    shared = dict(runs_dir=args.runs_dir, data_dir=args.data_dir, device=args.device, precision=args.precision,
                  threads=args.threads, evaluations=args.evaluations)
    if args.parallel == 1:
        runs = [sweep_run(**job, **shared) for job in jobs]
    else:  # spawned, not forked: a fork after the timed runs (or after CUDA starts) inherits locked thread pools
        with ProcessPoolExecutor(args.parallel, mp_context=multiprocessing.get_context("spawn")) as pool:
            runs = [f.result() for f in [pool.submit(sweep_run, **job, **shared) for job in jobs]]
    command = "python -m albert_edu.tools.large_sweep " + " ".join(argv if argv is not None else sys.argv[1:])
    result = {"command": command, **_machine(args.device), "minutes": round((time.perf_counter() - started) / 60, 2),
              "data": json.loads((args.data_dir / "prepared" / "stats.json").read_text())["inputs"],
              "speed": speed, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    for r in runs:
        final = r["evaluations"][-1]
        print(f"{r['geometry']:14s} b{r['batch_size']:<4d} {r['optimizer']} {r['lr']:<7g} held-out MLM loss {final['mlm_loss']:.3f} "
              f"accuracy {final['mlm_accuracy']:.3f}  {r['tokens_per_s']:,} tokens/s")
    for s in speed:
        print(f"{s['geometry']:14s} fp32 {s['fp32_tokens_per_s']:,} bf16 {s['bf16_tokens_per_s']:,} tokens/s "
              f"(medians of {args.speed_rounds} warm interleaved rounds)")


if __name__ == "__main__":
    main()
