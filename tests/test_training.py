"""LAMB against an independent implementation of the reference update; the training loop: it learns,
resumes after SIGKILL to exactly the weights of an uninterrupted run, agrees across 1 and 2 processes under
torchrun, and rejects bad command lines with clear errors."""

import inspect
import json
from dataclasses import replace
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from albert_edu import AlbertConfig
from albert_edu.optim import Lamb, parameter_groups, warmup_then_linear_decay
import albert_edu.training as training
from albert_edu.tools.cli import command_parser, main, training_config
from albert_edu.training import TrainingConfig, pretrain, validation_examples

# pre-training's final evaluation on 32 held-out examples per task (tests/conftest.py); the CLI runs evaluate in full
pytestmark = pytest.mark.usefixtures("small_validation")


def reference_lamb_step(w, g, m, v, lr, wd, b1=0.9, b2=0.999, eps=1e-6, adapt=True):
    """ALBERT's lamb_optimizer.py for one tensor, in NumPy (float64)."""
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    update = m / (np.sqrt(v) + eps)
    if adapt:  # tensors that take weight decay
        update = update + wd * w
        w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(update)
        ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
    else:
        ratio = 1.0
    return w - lr * ratio * update, m, v


def test_lamb_follows_the_reference_update_over_several_steps():
    rng = np.random.default_rng(0)
    matrix, bias = rng.normal(size=(5, 4)), rng.normal(size=4)
    w = [torch.tensor(matrix, requires_grad=True), torch.tensor(bias, requires_grad=True)]
    optimizer = Lamb([{"params": [w[0]], "weight_decay": 0.01}, {"params": [w[1]], "weight_decay": 0.0}], lr=0.05)
    state = [(matrix.copy(), np.zeros_like(matrix), np.zeros_like(matrix)), (bias.copy(), np.zeros(4), np.zeros(4))]
    for _ in range(6):
        grads = [rng.normal(size=matrix.shape), rng.normal(size=bias.shape)]
        for p, g in zip(w, grads):
            p.grad = torch.tensor(g)
        optimizer.step()
        state = [reference_lamb_step(*state[0][:1], grads[0], *state[0][1:], lr=0.05, wd=0.01),
                 reference_lamb_step(*state[1][:1], grads[1], *state[1][1:], lr=0.05, wd=0.0, adapt=False)]
    assert np.allclose(w[0].detach().numpy(), state[0][0], atol=1e-10)
    assert np.allclose(w[1].detach().numpy(), state[1][0], atol=1e-10)


def test_trust_ratio_is_one_when_the_weights_are_zero():
    w = torch.zeros(3, requires_grad=True)
    w.grad = torch.tensor([1.0, -1.0, 2.0])
    Lamb([w], lr=0.1, weight_decay=0.01).step()
    expected, _, _ = reference_lamb_step(np.zeros(3), np.array([1.0, -1.0, 2.0]), np.zeros(3), np.zeros(3), 0.1, 0.01)
    assert np.allclose(w.detach().numpy(), expected, atol=1e-6)


def test_biases_and_layernorms_take_neither_decay_nor_trust_ratio():
    from albert_edu import AlbertModel

    model = AlbertModel(AlbertConfig.from_preset("tiny", vocab_size=100))
    decay, no_decay = parameter_groups(model, 0.01)
    names = {id(p): name for name, p in model.named_parameters()}
    exempt = {names[id(p)] for p in no_decay["params"]}
    assert exempt == {n for n in names.values() if n.endswith("bias") or "LayerNorm" in n}
    assert no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == 0.01


@pytest.mark.parametrize("kwargs, message", [(dict(lr=0.0), "lr=0.0"), (dict(lr=1.0, betas=(0.9, 1.0)), "betas"),
                                             (dict(lr=1.0, eps=0.0), "eps=0.0")])
def test_lamb_rejects_impossible_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Lamb([torch.zeros(1, requires_grad=True)], **kwargs)


def test_training_config_refuses_an_unknown_pair_recipe_by_name():
    with pytest.raises(ValueError, match="pairs='balanced': expected one of"):
        TrainingConfig(pairs="balanced")


def test_schedule_warms_up_linearly_then_decays_to_zero():
    factors = [warmup_then_linear_decay(s, 10, 100) for s in (0, 5, 10, 55, 100, 120)]
    assert factors == pytest.approx([0.0, 0.5, 0.9, 0.45, 0.0, 0.0])


TINY = AlbertConfig.from_preset("tiny")


def test_training_lowers_the_loss_and_reports_held_out_metrics(tmp_path):
    config = TrainingConfig(objective="sop", steps=40, batch_size=16, max_seq_len=48, warmup_steps=4, log_every=1)
    result = pretrain(TINY, config, tmp_path / "run", progress=False)
    losses = [r["loss"] for r in map(json.loads, (tmp_path / "run" / "log.jsonl").read_text().splitlines())
              if "loss" in r]
    assert len(losses) == 40 and np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.8
    assert set(result) >= {"mlm_accuracy", "sop_accuracy", "nsp_accuracy"}
    assert all(0 <= result[k] <= 1 for k in ("mlm_accuracy", "sop_accuracy", "nsp_accuracy"))


def test_an_objective_none_run_leaves_the_pair_head_untouched(tmp_path):
    config = TrainingConfig(objective="none", steps=3, batch_size=8, max_seq_len=32, warmup_steps=1)
    torch.manual_seed(config.seed)
    from albert_edu import AlbertForPreTraining

    initial = AlbertForPreTraining(TINY).sop_classifier.classifier.weight.detach().clone()
    pretrain(TINY, config, tmp_path / "run", progress=False)
    trained = AlbertForPreTraining.from_pretrained(tmp_path / "run")
    assert torch.equal(trained.sop_classifier.classifier.weight, initial)


COMMAND = [sys.executable, "-m", "albert_edu", "pretrain", "--preset", "tiny", "--objective", "sop", "--steps", "14",
           "--batch-size", "8", "--max-seq-len", "48", "--warmup-steps", "2", "--seed", "3"]


# what COMMAND trains (the tokenizer's 8,000 pieces are the preset's), read by the command line's own parser, for
# the runs these tests compare against or resume, trained here so that their final evaluation is the small one (the
# command's runs evaluate in full)
COMMAND_CONFIG = training_config(command_parser("pretrain").parse_args([*COMMAND[4:], "--out", "unused"]))
assert (COMMAND_CONFIG.steps, COMMAND_CONFIG.seed) == (14, 3)


def _weights(directory):
    return load_file(directory / "model.safetensors")


def test_a_run_killed_with_sigkill_resumes_to_the_uninterrupted_weights(tmp_path):
    pretrain(TINY, COMMAND_CONFIG, tmp_path / "whole", progress=False)
    interrupted = COMMAND + ["--out", str(tmp_path / "killed"), "--save-every", "2"]
    process = subprocess.Popen(interrupted, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    latest = tmp_path / "killed" / "checkpoints" / "latest"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if latest.exists() and latest.read_text() >= "step-0000006":
            break
        time.sleep(0.01)
    assert process.poll() is None, "the run finished before it could be killed"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert not (tmp_path / "killed" / "model.safetensors").exists()
    subprocess.run(interrupted + ["--resume"], check=True, capture_output=True)
    a, b = _weights(tmp_path / "whole"), _weights(tmp_path / "killed")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_torchrun_with_two_processes_agrees_with_one(tmp_path):
    # without dropout: its masks depend on how the global batch is split between processes
    command = COMMAND + ["--no-dropout", "--accumulation", "2"]
    no_dropout = replace(TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0)
    pretrain(no_dropout, replace(COMMAND_CONFIG, accumulation=2), tmp_path / "one", progress=False)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    result = subprocess.run(torchrun + command[1:] + ["--out", str(tmp_path / "two")], capture_output=True, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5


def pretrain_command(*arguments: str, capsys) -> tuple[int, str]:
    """COMMAND with more arguments, run by the command line's own code in this process (a new Python process takes
    seconds to start; tests/test_cli.py runs the console script itself): its exit status and what it wrote to stderr."""
    try:
        code = main([*COMMAND[3:], *arguments])
    except SystemExit as usage:  # argparse's errors
        code = usage.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("arguments, message", [
    (["--preset", "albert-huge"], "argument --preset: invalid choice: 'albert-huge'"),
    (["--batch-size", "7", "--accumulation", "2"], "batch_size=7 must be a multiple"),
    (["--steps", "0"], "steps=0: expected a positive integer"),
    (["--lr", "-1"], "lr=-1.0: expected a positive finite learning rate"),
    (["--eval-every", "-2"], "eval_every=-2: expected a non-negative integer"),
    (["--max-seq-len", "600"], "max_seq_len=600 exceeds the model's max_position_embeddings=512"),
    (["--pairs", "balanced"], "argument --pairs: invalid choice: 'balanced'"),
])
def test_cli_rejects_bad_settings_with_a_clear_error(arguments, message, tmp_path, capsys):
    # argparse keeps the last value of a repeated option, so appending overrides COMMAND's settings
    code, stderr = pretrain_command("--out", str(tmp_path / "run"), *arguments, capsys=capsys)
    assert code != 0 and message in stderr
    assert not (tmp_path / "run").exists()  # nothing half-written that would block a corrected retry


def test_cli_refuses_a_non_empty_out_without_resume(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "something").write_text("x")
    code, stderr = pretrain_command("--out", str(tmp_path / "run"), capsys=capsys)
    assert code != 0 and "is not empty: resume the run in it, or choose a new directory" in stderr


def test_resuming_where_there_is_no_run_is_an_error_not_a_fresh_start(tmp_path, capsys):
    code, stderr = pretrain_command("--out", str(tmp_path / "typo"), "--resume", capsys=capsys)
    assert code == 1 and "holds no run to resume" in stderr
    assert not (tmp_path / "typo").exists()


def test_cli_reports_missing_data(tmp_path, capsys):
    code, stderr = pretrain_command("--out", str(tmp_path / "run"), "--data-dir", str(tmp_path / "nothing"), capsys=capsys)
    assert code != 0 and "train-tokenizer" in stderr


@pytest.mark.parametrize("split", ["train", "validation"])
def test_a_split_that_makes_no_examples_stops_the_command_before_it_writes_anything(split, tmp_path, capsys,
                                                                                   prepared_copy):
    """An empty training split made pretrain wait for ever for its first batch, and the log it had opened blocked a
    plain re-run; an empty held-out split failed only after the training."""
    data = prepared_copy(tmp_path / "data")
    (data / "prepared" / f"{split}.jsonl").write_text("")
    code, stderr = pretrain_command("--out", str(tmp_path / "run"), "--data-dir", str(data), capsys=capsys)
    made = "its 0 documents make no training examples" if split == "train" else "makes no held-out pairs"
    assert code == 1 and stderr.startswith(f"error: {data / 'prepared' / (split + '.jsonl')}")
    assert made in stderr and stderr.endswith("run `albert-edu prepare-data --force` to rebuild the prepared corpus\n")
    assert not (tmp_path / "run").exists()


def test_the_command_on_a_full_disk_exits_1_naming_the_checkpoint_with_no_partial_file(tmp_path):
    """The same with the operating system's own error, from a process whose files may not exceed 1 MB (the model's
    weights are 5.8 MB): RLIMIT_FSIZE stands in for a full disk, which an unprivileged test cannot make."""
    import resource

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so that a write past the limit fails instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, resource.RLIM_INFINITY))

    result = subprocess.run(COMMAND + ["--out", str(tmp_path / "run"), "--steps", "4", "--save-every", "2"],
                            capture_output=True, text=True, preexec_fn=small_files)
    error = result.stderr.splitlines()[-1]
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert error.startswith(f"error: could not write the checkpoint of step 2 in {tmp_path / 'run' / 'checkpoints'}")
    assert "File too large" in error and error.endswith("no checkpoint was saved; free some space first")
    assert not list((tmp_path / "run").rglob("*.tmp")) and not (tmp_path / "run" / "model.safetensors").exists()


SMALL = dict(steps=6, batch_size=8, max_seq_len=32, warmup_steps=1)
NO_DROPOUT = AlbertConfig.from_preset("tiny", classifier_dropout_prob=0.0)


def test_accumulating_micro_batches_equals_one_large_batch(tmp_path):
    pretrain(NO_DROPOUT, TrainingConfig(**SMALL), tmp_path / "one", progress=False)
    pretrain(NO_DROPOUT, TrainingConfig(**SMALL, accumulation=4), tmp_path / "four", progress=False)
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "four")
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5


def test_resuming_a_finished_run_rewrites_its_final_weights(tmp_path):
    config = TrainingConfig(**SMALL, save_every=2)
    pretrain(TINY, config, tmp_path / "run", progress=False)
    before = _weights(tmp_path / "run")
    (tmp_path / "run" / "model.safetensors").unlink()  # as if killed after the last checkpoint
    result = pretrain(TINY, config, tmp_path / "run", resume=True, progress=False)
    after = _weights(tmp_path / "run")
    assert result["step"] == 6 and "mlm_accuracy" in result
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_saving_checkpoints_changes_no_weight(tmp_path):
    """save_every only says when a checkpoint is written (chapter 8 compares recipes without it)."""
    pretrain(TINY, TrainingConfig(**SMALL), tmp_path / "none", progress=False)
    pretrain(TINY, TrainingConfig(**SMALL, save_every=2), tmp_path / "every2", progress=False)
    a, b = _weights(tmp_path / "none"), _weights(tmp_path / "every2")
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("optimizer", ["lamb", "adamw"])
def test_a_stopped_run_resumes_to_the_uninterrupted_weights_with_either_optimizer(optimizer, tmp_path):
    config = TrainingConfig(**SMALL, optimizer=optimizer, lr=1e-3 if optimizer == "adamw" else 1e-2, save_every=2)
    pretrain(TINY, config, tmp_path / "whole", progress=False)
    pretrain(TINY, config, tmp_path / "stopped", stop_after=4, progress=False)
    pretrain(TINY, config, tmp_path / "stopped", resume=True, progress=False)
    a, b = _weights(tmp_path / "whole"), _weights(tmp_path / "stopped")
    assert all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(ValueError, match="training.optimizer"):
        pretrain(TINY, replace(config, optimizer="lamb" if optimizer == "adamw" else "adamw"), tmp_path / "stopped",
                 resume=True, progress=False)


def test_the_log_holds_both_losses_and_the_epochs_and_evaluation_the_held_out_mlm_loss(tmp_path):
    result = pretrain(TINY, TrainingConfig(**SMALL, log_every=1), tmp_path / "run", progress=False)
    records = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    steps = [r for r in records if "loss" in r]
    assert all(abs(r["mlm_loss"] + r["pair_loss"] - r["loss"]) < 1e-4 and r["pair_loss"] > 0 for r in steps)
    assert all(0 < a["epochs"] < b["epochs"] for a, b in zip(steps, steps[1:]))
    assert 0 < result["mlm_loss"] < 2 * np.log(TINY.vocab_size) and result["mlm_loss"] == records[-1]["eval"]["mlm_loss"]


def test_resume_refuses_a_changed_model_and_keeps_one_log_line_per_step(tmp_path):
    config = TrainingConfig(**SMALL, save_every=2, log_every=1)
    pretrain(TINY, config, tmp_path / "run", stop_after=3, progress=False)  # last checkpoint: step 2
    with pytest.raises(ValueError, match="model.classifier_dropout_prob"):
        pretrain(NO_DROPOUT, config, tmp_path / "run", resume=True, progress=False)
    pretrain(TINY, config, tmp_path / "run", resume=True, progress=False)
    steps = [r["step"] for r in map(json.loads, (tmp_path / "run" / "log.jsonl").read_text().splitlines())
             if "loss" in r]
    assert steps == [1, 2, 3, 4, 5, 6]


def test_gradients_are_clipped_to_norm_one_every_step(tmp_path, monkeypatch):
    calls = []
    clip = torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda params, max_norm: calls.append(max_norm) or clip(
        params, max_norm))
    pretrain(TINY, TrainingConfig(**SMALL), tmp_path / "run", progress=False)
    assert calls == [1.0] * SMALL["steps"]


def test_pretraining_asks_for_the_default_held_out_examples_512_a_task(tmp_path, monkeypatch):
    """What the small_validation fixture changes for the other tests here: pretrain itself takes the default."""
    calls = []

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return validation_examples(*args, **{**kwargs, "max_examples": 4})

    monkeypatch.setattr(training, "validation_examples", spy)
    result = pretrain(TINY, TrainingConfig(**{**SMALL, "steps": 1}), tmp_path / "run", progress=False)
    assert calls == [{"pairs": "reference"}] and result["step"] == 1
    assert inspect.signature(validation_examples).parameters["max_examples"].default == 512


def test_evaluate_counts_correct_predictions(tmp_path):
    from albert_edu import AlbertForPreTraining
    from albert_edu.corpus import load_documents
    from albert_edu.pretraining_data import collate
    from albert_edu.tokenizer import Tokenizer
    from albert_edu.training import evaluate, validation_examples

    model = AlbertForPreTraining(TINY).eval()
    examples = validation_examples(load_documents("validation"), Tokenizer.load(), 32, max_examples=20)
    scores = evaluate(model, examples, batch_size=7)
    batch = collate(examples["nsp"])
    del batch["labels"]
    pairs = batch.pop("sentence_order_label")
    with torch.no_grad():
        expected = (model(**batch).sop_logits.argmax(-1) == pairs).float().mean().item()
    assert scores["nsp_accuracy"] == pytest.approx(expected)
    assert scores["nsp_majority"] == pytest.approx(max(pairs.float().mean().item(), 1 - pairs.float().mean().item()))


def test_a_full_disk_during_a_checkpoint_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    import albert_edu.resume as resume

    config = TrainingConfig(**SMALL, save_every=2)
    pretrain(TINY, config, tmp_path / "run", stop_after=2, progress=False)  # checkpoint of step 2
    saved = resume.save_file

    def full_disk(tensors, path, **kwargs):
        saved(tensors, path, **kwargs)
        raise OSError(28, "No space left on device")

    checkpoints = tmp_path / "run" / "checkpoints"
    with monkeypatch.context() as patched, pytest.raises(
            OSError, match=f"could not write the checkpoint of step 4 in {checkpoints} \\(.*No space left on device"
                           f"\\); the last complete one, {checkpoints / 'step-0000002'}, is intact and a resumed "
                           f"run continues from it; free some space first"):
        patched.setattr(resume, "save_file", full_disk)
        pretrain(TINY, config, tmp_path / "run", resume=True, progress=False)  # fails saving step 4
    assert sorted(p.name for p in checkpoints.iterdir()) == ["latest", "step-0000002"]  # no step-0000004.tmp
    assert (checkpoints / "latest").read_text() == "step-0000002"
    with open(tmp_path / "run" / "log.jsonl", "a") as log:  # and the disk filled in the middle of a log line
        log.write('{"step": 5, "lo')
    result = pretrain(TINY, config, tmp_path / "run", resume=True, progress=False)  # resumes from step 2
    assert result["step"] == 6
    steps = [json.loads(line).get("step") for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and None not in steps  # every line whole, one record per step and evaluation


def test_a_damaged_log_line_before_the_last_is_an_error_naming_the_file_and_line(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1}\n{"step": 2, "lo\n{"step": 3}\n')
    with pytest.raises(ValueError, match=f"{log}, line 2 is not a JSON record; expected the log that pretrain writes"):
        training.logged_lines(log)
    log.write_text('{"step": 1}\n{"step": 2, "lo')
    assert training.logged_lines(log) == ['{"step": 1}']


def test_a_log_line_that_cannot_be_written_names_the_file():
    class FullDisk:
        name = "run/log.jsonl"

        def write(self, text):
            raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match=r"could not write run/log.jsonl \(No space left on device\)"):
        training._write_line(FullDisk(), {"step": 1})


@pytest.mark.parametrize("changes, message", [
    (dict(lr=float("inf")), "lr=inf: expected a positive finite learning rate"),
    (dict(weight_decay=float("nan")), "weight_decay=nan: expected a finite number >= 0"),
    (dict(weight_decay=-0.01), "weight_decay=-0.01: expected a finite number >= 0"),
    (dict(mlm_weight=float("inf")), "mlm_weight=inf with objective='sop': expected a finite weight >= 0"),
])
def test_training_settings_must_be_finite(changes, message):
    with pytest.raises(ValueError, match=message):
        TrainingConfig(**changes)


def test_an_example_stream_with_no_examples_refuses_to_wait_for_ever(tokenizer):
    from albert_edu.resume import ExampleStream

    stream = ExampleStream([], tokenizer, "sop", 32, seed=0)
    assert stream.prepare() == 0
    with pytest.raises(ValueError, match="the 0 training documents make no sop examples"):
        stream.take(8)


def test_the_log_file_is_closed_when_a_run_stops(tmp_path, monkeypatch):
    import albert_edu.training as training

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(training, "train_step", interrupted)
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda *a, **k: opened.append(real_open(*a, **k)) or opened[-1])
    with pytest.raises(KeyboardInterrupt):
        pretrain(TINY, TrainingConfig(**SMALL), tmp_path / "run", progress=False)
    logs = [f for f in opened if str(f.name).endswith("log.jsonl")]
    assert logs and all(f.closed for f in logs)


def test_cli_reports_an_out_directory_that_cannot_be_made(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    result = subprocess.run(COMMAND + ["--out", str(tmp_path / "file" / "run")], capture_output=True, text=True)
    assert result.returncode == 1 and result.stderr.startswith("error: ") and "file/run" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("flag, value, changed", [("--lr", "0.003", "training.lr"),
                                                  ("--objective", "nsp", "training.objective"),
                                                  ("--max-seq-len", "32", "training.max_seq_len")])
def test_cli_resume_with_other_settings_is_refused_naming_them(flag, value, changed, tmp_path, capsys):
    pretrain(TINY, replace(COMMAND_CONFIG, steps=2, save_every=2), tmp_path / "run", progress=False)
    code, stderr = pretrain_command("--out", str(tmp_path / "run"), "--save-every", "2", "--steps", "2", "--resume",
                                    flag, value, capsys=capsys)
    assert code == 1 and "was started with different settings" in stderr and changed in stderr


def test_continued_pretraining_starts_from_the_trunk_with_a_fresh_pair_head(tmp_path):
    from albert_edu import AlbertForPreTraining
    from albert_edu.training import continue_from

    trunk = TrainingConfig(objective="none", steps=3, batch_size=8, max_seq_len=32, warmup_steps=1, seed=5)
    pretrain(TINY, trunk, tmp_path / "trunk", progress=False)
    start = AlbertForPreTraining.from_pretrained(tmp_path / "trunk")
    torch.manual_seed(1)
    model = AlbertForPreTraining(TINY)
    head = model.sop_classifier.classifier.weight.detach().clone()
    continue_from(model, tmp_path / "trunk")
    for name, value in model.state_dict().items():
        if name.startswith("sop_classifier."):
            continue
        assert torch.equal(value, start.state_dict()[name]), name
    assert torch.equal(model.sop_classifier.classifier.weight, head)  # the pair head is not taken
    with pytest.raises(ValueError, match="another configuration"):
        continue_from(AlbertForPreTraining(replace(TINY, intermediate_size=TINY.intermediate_size * 2)),
                      tmp_path / "trunk")
    # a continued run is a run like any other: it resumes to the weights of an uninterrupted one
    sop = TrainingConfig(objective="sop", steps=4, batch_size=8, max_seq_len=32, warmup_steps=1, save_every=2)
    pretrain(TINY, sop, tmp_path / "whole", progress=False, init_from=tmp_path / "trunk")
    pretrain(TINY, sop, tmp_path / "cut", progress=False, init_from=tmp_path / "trunk", stop_after=2)
    pretrain(TINY, sop, tmp_path / "cut", progress=False, init_from=tmp_path / "trunk", resume=True)
    whole, cut = _weights(tmp_path / "whole"), _weights(tmp_path / "cut")
    assert all(torch.equal(whole[name], cut[name]) for name in whole)
    scratch = TrainingConfig(objective="sop", steps=4, batch_size=8, max_seq_len=32, warmup_steps=1)
    pretrain(TINY, scratch, tmp_path / "scratch", progress=False)
    assert not torch.equal(_weights(tmp_path / "scratch")["albert.embeddings.word_embeddings.weight"],
                           whole["albert.embeddings.word_embeddings.weight"])


def test_an_mlm_weight_of_zero_trains_the_pair_head_alone(tmp_path):
    config = TrainingConfig(objective="sop", steps=3, batch_size=8, max_seq_len=32, warmup_steps=1, log_every=1,
                            mlm_weight=0.0)
    torch.manual_seed(config.seed)
    from albert_edu import AlbertForPreTraining

    initial = {k: v.clone() for k, v in AlbertForPreTraining(TINY).state_dict().items()}
    pretrain(TINY, config, tmp_path / "run", progress=False)
    trained = AlbertForPreTraining.from_pretrained(tmp_path / "run").state_dict()
    changed = {name for name in initial if not torch.equal(initial[name], trained[name])}
    assert any(name.startswith("sop_classifier.") for name in changed)
    # the MLM head's own weights (its decoder is the embedding table, which the pair loss reaches) get no
    # gradient at all, so not even weight decay moves them
    assert not any(name.startswith("predictions.") for name in changed), sorted(changed)
    records = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert all(r["loss"] == pytest.approx(r["pair_loss"]) and r["mlm_loss"] > 0 for r in records if "loss" in r)
    for bad in ({"mlm_weight": -1.0}, {"mlm_weight": 0.0, "objective": "none"}):
        with pytest.raises(ValueError, match="mlm_weight"):
            TrainingConfig(**bad)
