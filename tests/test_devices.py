"""The loop on any device: the CPU results do not change with --device cpu or auto, asking for CUDA without it is
a clear error, bf16 autocast trains and resumes, checkpoints hold no device, and every batch goes through one
function that moves it to the model's device. The tests marked gpu (tests/test_gpu.py) run where CUDA is."""

import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file

import albert_edu.training as training
from albert_edu import AlbertConfig
from albert_edu.experiments import Run, experiment_model, run_key
from albert_edu.training import TrainingConfig, autocast_dtype, pretrain, resolve_device

# smaller than the tiny preset (H 256, 6 layers): bf16 autocast on a CPU without bf16 instructions is slow, and what
# these tests check (resuming, devices, compiling) does not depend on the size
TINY = AlbertConfig.from_preset("tiny", hidden_size=64, num_attention_heads=2, intermediate_size=256, num_hidden_layers=3)
SMALL = dict(objective="sop", steps=6, batch_size=8, max_seq_len=48, warmup_steps=2)
NO_GPU = not torch.cuda.is_available()
pytestmark = pytest.mark.usefixtures("small_validation")  # final evaluations on 32 examples a task (conftest.py)


def _weights(directory):
    return load_file(directory / "model.safetensors")


def test_auto_is_the_cpu_where_there_is_no_gpu_and_the_gpu_where_there_is_one():
    # a CUDA device always carries its index (torch.cuda.set_device and DDP need one): cuda:0, never a bare cuda
    gpu = torch.cuda.is_available() and torch.device("cuda", torch.cuda.current_device())
    assert resolve_device("auto") == (gpu or torch.device("cpu"))
    assert resolve_device("cpu") == resolve_device(torch.device("cpu")) == torch.device("cpu")


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU")
def test_asking_for_cuda_without_a_gpu_names_the_problem_and_the_fix():
    with pytest.raises(ValueError, match=r"sees no CUDA GPU.*CUDA build of the same torch release.*--device cpu"):
        resolve_device("cuda")


def test_an_unknown_device_or_precision_is_refused_by_name():
    with pytest.raises(ValueError, match="device='tpu': expected 'auto', 'cpu' or 'cuda'"):
        resolve_device("tpu")
    with pytest.raises(ValueError, match="precision='fp16': expected one of"):
        autocast_dtype(torch.device("cpu"), "fp16")


def test_auto_precision_is_fp32_on_the_cpu_and_bf16_on_a_gpu():
    assert autocast_dtype(torch.device("cpu")) is None and autocast_dtype(torch.device("cpu"), "bf16") == torch.bfloat16
    assert autocast_dtype(torch.device("cuda"), "auto") == torch.bfloat16
    assert autocast_dtype(torch.device("cuda"), "fp32") is None


@pytest.mark.skipif(not NO_GPU, reason="on a GPU machine auto trains on the GPU")
def test_without_a_gpu_auto_trains_exactly_as_the_default_cpu_does(tmp_path):
    config = TrainingConfig(**SMALL)
    pretrain(TINY, config, tmp_path / "default", progress=False)
    for device in ("cpu", "auto"):
        pretrain(TINY, config, tmp_path / device, progress=False, device=device)
        a, b = _weights(tmp_path / "default"), _weights(tmp_path / device)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), device


@pytest.mark.skipif(not NO_GPU, reason="checks the error where there is no GPU")
def test_the_cli_refuses_device_cuda_without_a_gpu_in_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "albert_edu", "pretrain", "--preset", "tiny", "--steps", "2",
                             "--out", str(tmp_path / "run"), "--device", "cuda"], capture_output=True, text=True)
    assert result.returncode == 1 and "sees no CUDA GPU" in result.stderr and "--device cpu" in result.stderr
    assert not (tmp_path / "run").exists()


def test_a_run_with_bf16_autocast_trains_resumes_and_can_resume_in_fp32(tmp_path):
    config = TrainingConfig(**SMALL, save_every=2)
    whole = pretrain(TINY, config, tmp_path / "whole", progress=False, precision="bf16")
    assert whole["step"] == 6 and 0 <= whole["mlm_accuracy"] <= 1
    pretrain(TINY, config, tmp_path / "stopped", stop_after=4, progress=False, precision="bf16")
    pretrain(TINY, config, tmp_path / "stopped", resume=True, progress=False, precision="bf16")
    a, b = _weights(tmp_path / "whole"), _weights(tmp_path / "stopped")
    assert all(torch.equal(a[k], b[k]) for k in a)  # on the CPU, bf16 autocast is deterministic too
    assert all(v.dtype == torch.float32 for v in a.values())  # the weights stay fp32 under autocast
    pretrain(TINY, config, tmp_path / "switched", stop_after=4, progress=False, precision="bf16")
    result = pretrain(TINY, config, tmp_path / "switched", resume=True, progress=False, precision="fp32")
    assert result["step"] == 6  # precision is how a run computes, not what it trains: a checkpoint does not pin it


def test_bf16_autocast_changes_the_arithmetic_but_not_the_outcome(tmp_path):
    config = TrainingConfig(**SMALL)
    pretrain(TINY, config, tmp_path / "fp32", progress=False)
    pretrain(TINY, config, tmp_path / "bf16", progress=False, precision="bf16")
    a, b = _weights(tmp_path / "fp32"), _weights(tmp_path / "bf16")
    differences = [(a[k] - b[k]).abs().max().item() for k in a]
    assert max(differences) > 0  # autocast really ran in another precision
    assert max(differences) < 0.05  # and six steps of it land near the fp32 weights


def test_a_checkpoint_records_no_device_or_precision_so_either_may_change_on_resume(tmp_path):
    config = TrainingConfig(**SMALL, save_every=3)
    pretrain(TINY, config, tmp_path / "run", stop_after=3, progress=False, precision="bf16")
    state = (tmp_path / "run" / "checkpoints" / "step-0000003" / "state.json").read_text()
    assert "device" not in state and "precision" not in state
    assert pretrain(TINY, config, tmp_path / "run", resume=True, progress=False, device="auto")["step"] == 6


def test_every_batch_reaches_the_model_through_to_device(tmp_path, monkeypatch):
    seen = []

    def spy(batch, device):
        seen.append(device)
        return batch

    monkeypatch.setattr(training, "to_device", spy)
    config = TrainingConfig(**SMALL, accumulation=2)
    pretrain(TINY, config, tmp_path / "run", progress=False)
    held_out = len(training.validation_examples(
        training.load_documents("validation"), training.Tokenizer.load(), config.max_seq_len)["sop"])
    steps_batches = config.steps * config.accumulation
    assert len(seen) >= steps_batches + 2 * (held_out // 64)  # training micro-batches and evaluation batches
    assert set(seen) == {torch.device("cpu")}


def test_a_gpu_trained_run_is_cached_apart_from_the_cpu_one():
    run = Run("x", experiment_model(), TrainingConfig(**SMALL))
    assert run_key(run) == run_key(run, device="cpu") != run_key(run, device="cuda") == run_key(run, device="cuda:1")


def test_the_gpu_recipe_trains_a_larger_model_longer_and_leaves_the_cpu_recipes_as_they_were():
    from albert_edu import AlbertForPreTraining
    from albert_edu.experiments import diagnostic_runs, figure1_runs, table5_runs, trunk_run

    runs = table5_runs("gpu")
    assert len(runs) == 15 and all(r.start == trunk_run("gpu") for r in runs)
    assert all((r.model.hidden_size, r.model.num_hidden_layers, r.training.batch_size) == (256, 12, 128) for r in runs)
    assert figure1_runs("gpu", 4)["BERT-style"].model.sharing == "none" and len(diagnostic_runs("gpu")) == 1
    assert trunk_run("gpu").training.steps == 12000 and runs[0].training.max_seq_len == 128
    AlbertForPreTraining(runs[0].model)  # a geometry the model accepts
    for recipe in ("book", "full", "neutral"):  # the recipes behind the stored results are unchanged
        assert all(r.model == experiment_model("all") and r.training.batch_size == 32 for r in table5_runs(recipe))


def test_the_gpu_recipe_is_refused_on_the_cpu_with_a_pointer_to_the_full_one(tmp_path):
    result = subprocess.run([sys.executable, "-m", "albert_edu", "experiment", "--recipe", "gpu", "--device", "cpu",
                             "--out", str(tmp_path / "gpu.json")], capture_output=True, text=True)
    assert result.returncode == 1 and "--recipe gpu is sized for a GPU" in result.stderr
    assert "--device cuda" in result.stderr
    assert "--recipe full" in result.stderr and not (tmp_path / "gpu.json").exists()


def test_a_compiled_model_trains_to_the_eager_weights_within_rounding(tmp_path):
    # without dropout: compiled code draws its random masks differently (with dropout they differ by ~0.07)
    model = replace(TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0)
    config = TrainingConfig(**{**SMALL, "steps": 3})
    pretrain(model, config, tmp_path / "eager", progress=False)
    pretrain(model, config, tmp_path / "compiled", progress=False, compile=True)
    a, b = _weights(tmp_path / "eager"), _weights(tmp_path / "compiled")
    assert a.keys() == b.keys() and max((a[k] - b[k]).abs().max().item() for k in a) < 1e-4
