"""Checkpoint directories: round trips in every sharing mode, transformers' layout, and clear errors for
directories that are incomplete, corrupt, pickled or made for another model."""

import json

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from albert_edu import AlbertConfig, AlbertForPreTraining, AlbertModel, to_transformers_config

transformers.utils.logging.disable_progress_bar()
TINY = AlbertConfig.from_preset("tiny", vocab_size=120, num_hidden_layers=4)


def equal_state(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("sharing, groups", [("all", 1), ("all", 2), ("attention", 2), ("ffn", 1), ("none", 1)])
def test_round_trip_is_exact_in_every_sharing_mode(sharing, groups, tmp_path):
    model = AlbertForPreTraining(AlbertConfig(**{**TINY.to_dict(), "sharing": sharing, "num_hidden_groups": groups}))
    model.save_pretrained(tmp_path)
    assert equal_state(AlbertForPreTraining.from_pretrained(tmp_path), model)


def test_saved_tensors_have_transformers_names_and_no_tied_duplicates(tmp_path):
    AlbertForPreTraining(TINY).save_pretrained(tmp_path)
    names = set(load_file(tmp_path / "model.safetensors"))
    expected = set(transformers.AlbertForPreTraining(to_transformers_config(TINY)).state_dict()) - \
        {"predictions.decoder.weight", "predictions.decoder.bias"}
    assert names == expected


def test_a_config_json_that_is_not_an_object_is_refused(tmp_path):
    AlbertModel(TINY).save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("null")
    with pytest.raises(ValueError, match="config.json holds a JSON NoneType; expected an object"):
        AlbertModel.from_pretrained(tmp_path)


def test_a_config_json_that_is_not_utf8_is_an_error_naming_it(tmp_path):
    AlbertModel(TINY).save_pretrained(tmp_path)
    text = (tmp_path / "config.json").read_bytes()
    (tmp_path / "config.json").write_bytes(text.replace(b'"albert"', b'"alb\xe9rt"'))
    with pytest.raises(ValueError, match=f"{tmp_path / 'config.json'} is not UTF-8 text \\(byte \\d+\\): expected"):
        AlbertModel.from_pretrained(tmp_path)


def test_a_save_that_runs_out_of_disk_leaves_the_earlier_files_and_no_partial_one(tmp_path, monkeypatch):
    import albert_edu.checkpoint as checkpoint

    AlbertModel(TINY).save_pretrained(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def disk_full(tensors, path, metadata=None):
        open(path, "wb").write(b"\0" * 100)  # part of the file, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint, "save_file", disk_full)
    with pytest.raises(OSError, match=f"could not write the model to {tmp_path} \\(.*No space left on device\\); "
                                      f"expected room for [0-9,]+ bytes of weights"):
        AlbertModel(TINY).save_pretrained(tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_saving_in_our_own_layout_by_default_says_so(tmp_path):
    model = AlbertModel(AlbertConfig(**{**TINY.to_dict(), "sharing": "ffn"}))
    with pytest.warns(UserWarning, match="sharing='ffn' cannot be expressed in transformers' layout"):
        model.save_pretrained(tmp_path)


def test_shared_attention_cannot_be_saved_for_transformers(tmp_path):
    model = AlbertModel(AlbertConfig(**{**TINY.to_dict(), "sharing": "attention"}))
    with pytest.raises(ValueError, match="sharing='attention' cannot be expressed in transformers' ALBERT format"):
        model.save_pretrained(tmp_path, layout="transformers")
    assert not (tmp_path / "model.safetensors").exists()


def test_a_layout_is_one_of_three_names_and_ours_keeps_our_tensor_names(tmp_path):
    model = AlbertModel(TINY)
    with pytest.raises(ValueError, match="layout='hf': expected one of"):
        model.save_pretrained(tmp_path, layout="hf")
    assert not any(tmp_path.iterdir())
    model.save_pretrained(tmp_path, layout="transformers")
    model.save_pretrained(tmp_path, layout="ours")  # over an earlier save in the other layout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["albert_edu.safetensors", "config.json"]
    assert set(load_file(tmp_path / "albert_edu.safetensors")) == set(model.state_dict())
    assert AlbertModel.from_pretrained(tmp_path).state_dict().keys() == model.state_dict().keys()


def test_transformers_refuses_our_own_layout_instead_of_loading_a_random_encoder(tmp_path):
    model = AlbertModel(AlbertConfig(**{**TINY.to_dict(), "sharing": "attention"}))
    model.save_pretrained(tmp_path, layout="ours")
    with pytest.raises(OSError, match="model.safetensors|pytorch_model.bin"):
        transformers.AlbertModel.from_pretrained(tmp_path)
    save_file({}, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="holds both model.safetensors and albert_edu.safetensors"):
        AlbertModel.from_pretrained(tmp_path)


def test_model_without_projection_saves_an_identity_map_and_loads_back_without_it(tmp_path):
    c = AlbertConfig(**{**TINY.to_dict(), "embedding_size": 256, "sharing": "none"})
    model = AlbertForPreTraining(c)
    model.save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    assert torch.equal(tensors["albert.encoder.embedding_hidden_mapping_in.weight"], torch.eye(256))
    again = AlbertForPreTraining.from_pretrained(tmp_path)
    assert again.albert.embeddings.projection is None and equal_state(again, model)


def test_model_declared_without_projection_round_trips(tmp_path):
    c = AlbertConfig(**{**TINY.to_dict(), "embedding_size": 256, "embedding_projection": False})
    model = AlbertModel(c)
    model.save_pretrained(tmp_path)
    assert equal_state(AlbertModel.from_pretrained(tmp_path), model)


def test_transformers_checkpoint_with_a_real_projection_at_E_equal_H_keeps_it(tmp_path):
    transformers.AlbertModel(to_transformers_config(AlbertConfig(
        vocab_size=50, embedding_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64))).save_pretrained(tmp_path)
    ours = AlbertModel.from_pretrained(tmp_path)
    assert ours.config.embedding_projection is True and ours.embeddings.projection is not None


def test_base_model_loads_from_a_pretraining_checkpoint_and_back(tmp_path):
    pretraining = AlbertForPreTraining(TINY)
    pretraining.save_pretrained(tmp_path / "full")
    base = AlbertModel.from_pretrained(tmp_path / "full")
    assert equal_state(base, pretraining.albert)
    base.save_pretrained(tmp_path / "base")
    assert equal_state(AlbertModel.from_pretrained(tmp_path / "base"), base)


def test_missing_directory_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json not found"):
        AlbertModel.from_pretrained(tmp_path)
    AlbertModel(TINY).save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").rename(tmp_path / "pytorch_model.bin")
    with pytest.raises(FileNotFoundError, match="pickles, which albert_edu never loads"):
        AlbertModel.from_pretrained(tmp_path)


def test_truncated_weights_are_reported(tmp_path):
    AlbertModel(TINY).save_pretrained(tmp_path)
    data = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        AlbertModel.from_pretrained(tmp_path)


def test_missing_extra_and_misshaped_tensors_are_listed(tmp_path):
    AlbertModel(TINY).save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    del tensors["pooler.weight"]
    tensors["encoder.surprise.weight"] = torch.zeros(3)
    tensors["embeddings.position_embeddings.weight"] = torch.zeros(10, 64)
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(ValueError) as error:
        AlbertModel.from_pretrained(tmp_path)
    message = str(error.value)
    assert "missing ['pooler.weight']" in message and "unexpected ['encoder.surprise.weight']" in message
    assert "embeddings.position_embeddings.weight (10, 64) != (512, 64)" in message


def test_config_for_another_architecture_is_refused(tmp_path):
    AlbertModel(TINY).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**data, "model_type": "bert"}))
    with pytest.raises(ValueError, match="model_type='bert'"):
        AlbertModel.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**data, "inner_group_num": 2}))
    with pytest.raises(ValueError, match="inner_group_num=2"):
        AlbertModel.from_pretrained(tmp_path)
    del data["hidden_size"]
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="lacks \\['hidden_size'\\]"):
        AlbertModel.from_pretrained(tmp_path)


@pytest.mark.parametrize("field, value, message", [
    ("hidden_size", "64", "hidden_size='64': expected a positive integer"),
    ("num_hidden_layers", 2.5, "num_hidden_layers=2.5: expected a positive integer"),
    ("sharing", "some", "sharing='some': expected one of"),
])
def test_a_mistyped_config_field_is_an_error_naming_the_file_and_the_field(field, value, message, tmp_path):
    AlbertModel(TINY).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**data, field: value}))
    with pytest.raises(ValueError, match=f"config.json: AlbertConfig.{message}"):
        AlbertModel.from_pretrained(tmp_path)


@pytest.mark.parametrize("content", [b"", b"\x00" * 64, b'{"not": "safetensors"}'])
def test_weights_that_are_not_safetensors_are_reported(content, tmp_path):
    AlbertModel(TINY).save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(content)
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        AlbertModel.from_pretrained(tmp_path)


def test_an_untied_decoder_is_refused(tmp_path):
    AlbertForPreTraining(TINY).save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    tensors["predictions.decoder.weight"] = torch.randn(120, 64)
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="predictions.decoder.weight differs"):
        AlbertForPreTraining.from_pretrained(tmp_path)
