"""The Figure 1 measurements (chapter 9): known answers on hand-made states, padding, any checkpoint
including transformers' ALBERT and BERT, and clear errors."""

import math

import pytest
import torch
import transformers

from albert_edu import AlbertConfig, AlbertModel, to_transformers_config
from albert_edu.analysis import (figure1_curves, layer_states, layer_transitions, roughness, text_batch,
                                 unrolled_transitions)
from albert_edu.experiments import experiment_model


def test_known_distances_and_angles_and_padding_is_ignored():
    x = torch.tensor([[[3.0, 4.0], [1.0, 0.0], [100.0, 100.0]]])  # the last position is padding
    y = torch.tensor([[[6.0, 8.0], [0.0, 1.0], [-5.0, 7.0]]])
    z = torch.tensor([[[-6.0, -8.0], [0.0, 1.0], [0.0, 0.0]]])
    curves = layer_transitions([x, y, z], torch.tensor([[1, 1, 0]]))
    assert curves["l2"] == pytest.approx([(5.0 + math.sqrt(2)) / 2, 20.0 / 2])
    assert curves["angle"] == pytest.approx([(0.0 + 90.0) / 2, (180.0 + 0.0) / 2], abs=1e-4)
    with pytest.raises(ValueError, match="got 1 hidden states"):
        layer_transitions([x], torch.ones(1, 3))


def test_roughness():
    assert roughness([2.0, 2.0, 2.0]) == 0.0
    assert roughness([8.0, 4.0, 2.0, 1.0]) == pytest.approx(0.0)  # the same factor at every layer: smooth
    assert roughness([1.0, 3.0, 1.0, 3.0]) > roughness([1.0, 1.5, 2.0, 2.5]) > 0
    assert roughness([1.0, 2.0, 1.0]) == pytest.approx(2 * math.log(2))
    assert roughness([3.0, 6.0, 3.0]) == pytest.approx(roughness([1.0, 2.0, 1.0]))  # scale-free
    with pytest.raises(ValueError, match="at least 3"):
        roughness([1.0, 2.0])
    with pytest.raises(ValueError, match="expected positive values"):
        roughness([1.0, 0.0, 2.0])


@pytest.fixture(scope="module")
def batch(validation_documents, tokenizer):
    return text_batch(validation_documents, tokenizer, max_seq_len=32, count=16)


def test_text_batch_is_unmasked_held_out_text(batch, tokenizer, validation_documents):
    assert batch["input_ids"].shape[0] == 16 and batch["input_ids"].shape[1] <= 32
    assert not (batch["input_ids"] == tokenizer.mask_id).any()
    assert (batch["input_ids"][:, 0] == tokenizer.cls_id).all()
    with pytest.raises(ValueError, match="count=0"):
        text_batch(validation_documents, tokenizer, count=0)


def test_transformers_checkpoints_measure_the_same_both_ways(tmp_path, batch):
    config = AlbertConfig.from_preset("tiny", hidden_size=128, num_hidden_layers=3, num_attention_heads=2,
                                      intermediate_size=256)
    torch.manual_seed(0)
    model = transformers.AlbertModel(to_transformers_config(config))
    for p in model.parameters():
        p.data += 0.02 * torch.randn_like(p)
    model.save_pretrained(tmp_path)
    theirs = layer_transitions(layer_states(transformers.AlbertModel.from_pretrained(tmp_path), batch),
                               batch["attention_mask"])
    ours = layer_transitions(layer_states(AlbertModel.from_pretrained(tmp_path), batch), batch["attention_mask"])
    for key in ("l2", "angle"):
        assert ours[key] == pytest.approx(theirs[key], abs=1e-4)
    assert len(figure1_curves(tmp_path, count=8)["l2"]) == 3


def test_unrolled_transitions_repeat_the_shared_layer(tmp_path):
    config = AlbertConfig.from_preset("tiny", hidden_size=64, num_hidden_layers=3, num_attention_heads=2,
                                      intermediate_size=128)
    torch.manual_seed(0)
    AlbertModel(config).save_pretrained(tmp_path / "shared")
    at_trained_depth = unrolled_transitions(tmp_path / "shared", 3, count=8)
    assert at_trained_depth == figure1_curves(tmp_path / "shared", count=8)  # same weights, same depth: same curve
    deeper = unrolled_transitions(tmp_path / "shared", 7, count=8)
    assert len(deeper["l2"]) == 7 and deeper["l2"][:3] == pytest.approx(at_trained_depth["l2"])
    with pytest.raises(ValueError, match="depth=0"):
        unrolled_transitions(tmp_path / "shared", 0, count=8)
    AlbertModel(AlbertConfig.from_preset("tiny", hidden_size=64, num_hidden_layers=3, num_attention_heads=2,
                                         intermediate_size=128, sharing="none")).save_pretrained(tmp_path / "unshared")
    with pytest.raises(ValueError, match="sharing='none'"):
        unrolled_transitions(tmp_path / "unshared", 6, count=8)


def test_layer_states_of_a_bert_model_and_of_a_model_in_training_mode(batch):
    bert = transformers.BertModel(transformers.BertConfig(vocab_size=8000, hidden_size=64, num_hidden_layers=2,
                                                          num_attention_heads=2, intermediate_size=128))
    assert len(layer_states(bert, batch)) == 3
    model = AlbertModel(experiment_model("all"))
    model.train()
    states = layer_states(model, batch)
    assert len(states) == 7 and model.training  # measured in eval mode, then restored


def test_a_model_without_hidden_states_is_refused(batch):
    class Plain(torch.nn.Module):
        def forward(self, **inputs):
            return torch.zeros(1)

    with pytest.raises(TypeError, match="returned no hidden_states"):
        layer_states(Plain(), batch)
