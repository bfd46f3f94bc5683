"""The loop on a CUDA GPU: it learns under bf16 autocast, a run saved on the GPU resumes on the CPU (and the
reverse) to within rounding, and two processes under torchrun talk through NCCL. Skipped where PyTorch sees no
GPU (CI has none); on a GPU machine: pytest -m gpu tests/test_gpu.py."""

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from albert_edu import AlbertConfig
from albert_edu.training import TrainingConfig, pretrain

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")]
TINY = AlbertConfig.from_preset("tiny")


def _weights(directory):
    return load_file(directory / "model.safetensors")


def test_the_loop_learns_on_a_gpu_under_bf16_autocast(tmp_path):
    config = TrainingConfig(objective="sop", steps=40, batch_size=16, max_seq_len=48, warmup_steps=4, log_every=1)
    result = pretrain(TINY, config, tmp_path / "run", progress=False, device="cuda")
    losses = [r["loss"] for r in map(json.loads, (tmp_path / "run" / "log.jsonl").read_text().splitlines()) if "loss" in r]
    assert len(losses) == 40 and sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.8
    assert all(0 <= result[k] <= 1 for k in ("mlm_accuracy", "sop_accuracy", "nsp_accuracy"))
    assert all(t.dtype == torch.float32 and t.device.type == "cpu" for t in _weights(tmp_path / "run").values())


def test_an_mlm_only_run_trains_on_a_gpu(tmp_path):  # its pair loss is a zero that must live on the GPU too
    config = TrainingConfig(objective="none", steps=4, batch_size=8, max_seq_len=48, warmup_steps=1)
    assert pretrain(TINY, config, tmp_path / "run", progress=False, device="cuda")["step"] == 4


@pytest.mark.parametrize("first, then", [("cuda", "cpu"), ("cpu", "cuda")])
def test_a_run_saved_on_one_device_resumes_on_the_other(first, then, tmp_path):
    config = TrainingConfig(objective="sop", steps=8, batch_size=8, max_seq_len=48, warmup_steps=2, save_every=4)
    pretrain(TINY, config, tmp_path / "whole", progress=False, device=first, precision="fp32")
    pretrain(TINY, config, tmp_path / "moved", stop_after=4, progress=False, device=first, precision="fp32")
    result = pretrain(TINY, config, tmp_path / "moved", resume=True, progress=False, device=then, precision="fp32")
    assert result["step"] == 8
    a, b = _weights(tmp_path / "whole"), _weights(tmp_path / "moved")
    # the dropout masks after the move come from the other device's generator, so the runs differ a little
    assert a.keys() == b.keys() and max((a[k] - b[k]).abs().max().item() for k in a) < 0.05


def test_a_stopped_gpu_run_resumes_to_the_uninterrupted_weights_within_rounding(tmp_path):
    config = TrainingConfig(objective="sop", steps=8, batch_size=8, max_seq_len=48, warmup_steps=2, save_every=4)
    pretrain(TINY, config, tmp_path / "whole", progress=False, device="cuda")
    pretrain(TINY, config, tmp_path / "stopped", stop_after=4, progress=False, device="cuda")
    pretrain(TINY, config, tmp_path / "stopped", resume=True, progress=False, device="cuda")
    a, b = _weights(tmp_path / "whole"), _weights(tmp_path / "stopped")
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-3  # not bit for bit: CUDA kernels may not be


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL between two processes needs two GPUs")
def test_torchrun_with_two_gpus_agrees_with_one(tmp_path):
    command = ["-m", "albert_edu", "pretrain", "--preset", "tiny", "--objective", "sop", "--steps", "14",
               "--batch-size", "8", "--max-seq-len", "48", "--warmup-steps", "2", "--seed", "3", "--no-dropout",
               "--device", "cuda", "--precision", "fp32"]
    subprocess.run([sys.executable, *command, "--out", str(tmp_path / "one")], check=True, capture_output=True)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    result = subprocess.run(torchrun + command + ["--out", str(tmp_path / "two")], capture_output=True, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-4
