"""What makes a pre-training run resumable and parallel: an example stream that knows its position, checkpoints
of everything a run needs to continue exactly, and the process setup under torchrun.

Bookkeeping rather than ALBERT, so a plain module that the book uses without walking through it: chapter 7
(section 7.4) states what each piece guarantees and shows it, and section 7.6 shows a run killed and resumed
bit for bit. `config` below is chapter 7's TrainingConfig (any dataclass of the run's settings)."""

import errno
import json
import os
import random
import shutil
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from albert_edu.checkpoint import transformers_expressible
from albert_edu.pretraining_data import create_examples
from albert_edu.tokenizer import Tokenizer


class ExampleStream:
    """The training examples in a fixed order: epoch e is a fresh pass of example creation (its own seed),
    shuffled. A position (epoch, index) says exactly where the stream is, so a resumed run continues with
    the very batch an uninterrupted run would see."""

    def __init__(self, documents, tokenizer: Tokenizer, objective: str, max_seq_len: int, seed: int,
                 pairs: str = "reference"):
        self.documents, self.tokenizer = documents, tokenizer
        self.objective, self.max_seq_len, self.seed, self.pairs = objective, max_seq_len, seed, pairs
        self.epoch, self.index, self._examples = 0, 0, None

    def _epoch_examples(self):
        if self._examples is None:
            seed = self.seed * 1_000_003 + self.epoch
            self._examples = create_examples(self.documents, self.tokenizer, self.objective, self.max_seq_len, seed,
                                             self.pairs)
            random.Random(seed).shuffle(self._examples)
        return self._examples

    def prepare(self) -> int:
        """Make the examples of the epoch the stream is in now rather than at the first take(), so that a run can
        refuse data that make none before it writes anything; return how many there are."""
        return len(self._epoch_examples())

    def take(self, n: int) -> list:
        """The next n examples, crossing into the next epoch when this one runs out."""
        batch = []
        while len(batch) < n:
            examples = self._epoch_examples()
            if not examples:  # without this check, a wait for ever
                raise ValueError(f"the {len(self.documents)} training documents make no {self.objective} examples: "
                                 f"expected documents of at least two sentences")
            chunk = examples[self.index:self.index + n - len(batch)]
            batch += chunk
            self.index += len(chunk)
            if self.index >= len(examples):
                self.epoch, self.index, self._examples = self.epoch + 1, 0, None
        return batch

    def position(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def epochs(self) -> float:
        """Passes over the training documents taken so far, e.g. 2.5 in the middle of the third."""
        return self.epoch + (self.index / len(self._examples) if self._examples else 0.0)

    def seek(self, position: dict) -> None:
        self.epoch, self.index, self._examples = position["epoch"], position["index"], None


def save_checkpoint(out_dir: Path, step: int, model, optimizer, stream: ExampleStream, config) -> Path:
    """Everything a run needs to continue exactly: weights (transformers' layout), the optimizer's moments, the
    schedule's step, the random state and the data position. Written to a temporary directory that is then
    renamed; `latest` is replaced last, so a kill at any moment leaves the previous checkpoint intact."""
    root = out_dir / "checkpoints"
    final, tmp = root / f"step-{step:07d}", root / f"step-{step:07d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp, layout=layout(model.config))
        moments = {f"{i}.{name}": value for i, p in enumerate(_parameters(optimizer))
                   for name, value in optimizer.state.get(p, {}).items() if torch.is_tensor(value)}
        rng = {"torch_rng_state": torch.get_rng_state()}
        if any(p.is_cuda for p in _parameters(optimizer)):  # dropout on a GPU draws from the GPU's generator
            rng["cuda_rng_state"] = torch.cuda.get_rng_state()
        save_file({**{k: v.detach().cpu() for k, v in moments.items()}, **rng}, tmp / "optimizer.safetensors")
        meta = {"step": step, "stream": stream.position(), "run": run_identity(model.config, config, stream)}
        (tmp / "state.json").write_text(json.dumps(meta, indent=2) + "\n")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        (root / "latest.tmp").write_text(final.name)
        os.replace(root / "latest.tmp", root / "latest")
    except (OSError, SafetensorError) as error:  # a full disk, most often: leave no half-written checkpoint
        shutil.rmtree(tmp, ignore_errors=True)
        (root / "latest.tmp").unlink(missing_ok=True)
        cause = error.__cause__ if isinstance(error.__cause__, (OSError, SafetensorError)) else error
        kept = (root / "latest").read_text().strip() if (root / "latest").is_file() else None
        space = getattr(cause, "errno", None) in NO_ROOM or any(f"os error {n})" in str(cause) for n in NO_ROOM)
        raise OSError(f"could not write the checkpoint of step {step} in {root} ({cause}); "
                      + (f"the last complete one, {root / kept}, is intact and a resumed run continues from it"
                         if kept else "no checkpoint was saved")
                      + ("; free some space first" if space else "")) from None
    for old in root.glob("step-*"):
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


NO_ROOM = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)  # a full disk, a file past a size limit, a full quota


def load_checkpoint(out_dir: Path, model, optimizer, stream: ExampleStream, config) -> int:
    """Restore the state saved by save_checkpoint; return its step (0 when there is no checkpoint yet)."""
    pointer = out_dir / "checkpoints" / "latest"
    if not pointer.exists():
        return 0
    directory = out_dir / "checkpoints" / pointer.read_text().strip()
    meta = json.loads((directory / "state.json").read_text())
    now = run_identity(model.config, config, stream)
    if meta["run"] != now:
        changed = sorted(k for k in now if meta["run"].get(k) != now[k])
        raise ValueError(f"{out_dir} was started with different settings ({changed}); "
                         f"resume with the same command, or use a new --out")
    model.load_state_dict(type(model).from_pretrained(directory).state_dict())
    tensors = load_file(directory / "optimizer.safetensors")
    torch.set_rng_state(tensors.pop("torch_rng_state"))
    cuda_rng = tensors.pop("cuda_rng_state", None)
    parameters = _parameters(optimizer)
    if cuda_rng is not None and any(p.is_cuda for p in parameters):  # saved on a GPU, resumed on one
        torch.cuda.set_rng_state(cuda_rng)
    for key, value in tensors.items():  # "3.m": LAMB's first moment of parameter 3 (AdamW's are "3.exp_avg", ...)
        i, name = key.split(".", 1)
        # any device to any; a step counter (AdamW's) stays on the CPU, where PyTorch keeps it
        optimizer.state[parameters[int(i)]][name] = value if name == "step" else value.to(parameters[int(i)].device)
    stream.seek(meta["stream"])
    return meta["step"]


def run_identity(model_config, config, stream: ExampleStream) -> dict:
    """What must not change between a run and its resumption: the model, the training settings (but not how
    often it logs, evaluates or saves) and the data."""
    training = {k: v for k, v in asdict(config).items() if k not in ("log_every", "eval_every", "save_every")}
    data = {"documents": len(stream.documents), "sentences": sum(len(d.sentences) for d in stream.documents),
            "vocab_size": stream.tokenizer.vocab_size}
    return {**{f"training.{k}": v for k, v in training.items()},
            **{f"model.{k}": v for k, v in model_config.to_dict().items()}, **{f"data.{k}": v for k, v in data.items()}}


def _parameters(optimizer) -> list:
    return [p for group in optimizer.param_groups for p in group["params"]]


def layout(config) -> str:
    """transformers' tensor names when they can express the model, ours otherwise (chosen, so no warning)."""
    return "transformers" if transformers_expressible(config) else "ours"


def distributed_setup(device: torch.device = torch.device("cpu")) -> tuple[int, int]:
    """(rank, world size): from torchrun's environment variables, or (0, 1) in a single process. Processes
    talk through NCCL when they train on GPUs (each bound to its own, `device`) and through gloo on the CPU."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        if device.type == "cuda":
            dist.init_process_group("nccl", device_id=device)
        else:
            dist.init_process_group("gloo")
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
