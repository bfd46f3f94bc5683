"""AlbertConfig: presets follow the paper's Table 1 and invalid configurations fail with a clear message."""

from dataclasses import FrozenInstanceError, replace

import pytest

from albert_edu import PRESETS, AlbertConfig


def test_default_config_is_albert_base():
    assert AlbertConfig() == AlbertConfig.from_preset("albert-base")


@pytest.mark.parametrize("name, L, H, E", [
    ("bert-base", 12, 768, 768), ("bert-large", 24, 1024, 1024), ("albert-base", 12, 768, 128),
    ("albert-large", 24, 1024, 128), ("albert-xlarge", 24, 2048, 128), ("albert-xxlarge", 12, 4096, 128),
])
def test_presets_have_the_geometry_of_table_1(name, L, H, E):
    c = AlbertConfig.from_preset(name)
    assert (c.num_hidden_layers, c.hidden_size, c.embedding_size) == (L, H, E)
    assert c.intermediate_size == 4 * H and c.num_attention_heads == H // 64


def test_bert_presets_keep_the_wordpiece_vocabulary_and_share_nothing():
    for name in ("bert-base", "bert-large"):
        c = AlbertConfig.from_preset(name)
        assert (c.vocab_size, c.sharing, c.hidden_act) == (30522, "none", "gelu")


def test_albert_presets_use_30000_tokens_and_share_all_layers():
    for name in ("albert-base", "albert-large", "albert-xlarge", "albert-xxlarge"):
        c = AlbertConfig.from_preset(name)
        assert (c.vocab_size, c.sharing, c.hidden_act) == (30000, "all", "gelu_new")


def test_there_is_a_tiny_preset_for_laptops():
    assert AlbertConfig.from_preset("tiny").hidden_size <= 256


def test_from_preset_applies_overrides():
    assert AlbertConfig.from_preset("tiny", vocab_size=5000).vocab_size == 5000


def test_from_preset_rejects_unknown_names_and_fields():
    with pytest.raises(ValueError, match="albert-huge"):
        AlbertConfig.from_preset("albert-huge")
    with pytest.raises(ValueError, match="hiden_size"):
        AlbertConfig.from_preset("tiny", hiden_size=64)


def test_replace_returns_a_validated_copy():
    base = AlbertConfig()
    assert replace(base, num_hidden_groups=3).num_hidden_groups == 3
    with pytest.raises(ValueError, match="num_hidden_groups=5"):
        replace(base, num_hidden_groups=5)


def test_config_is_immutable():
    with pytest.raises(FrozenInstanceError):
        AlbertConfig().hidden_size = 1024


def test_to_dict_round_trips():
    c = AlbertConfig.from_preset("albert-large")
    assert AlbertConfig(**c.to_dict()) == c


@pytest.mark.parametrize("changes, message", [
    (dict(hidden_size=770), "hidden_size=770 is not divisible by num_attention_heads=12"),
    (dict(num_hidden_layers=12, num_hidden_groups=5), "num_hidden_layers=12 is not divisible by num_hidden_groups=5"),
    (dict(sharing="some"), "sharing='some'"),
    (dict(sharing="none", num_hidden_groups=2), "num_hidden_groups=2 with sharing='none'"),
    (dict(vocab_size=0), "vocab_size=0: expected a positive integer"),
    (dict(embedding_size=-128), "embedding_size=-128"),
    (dict(hidden_size=768.0), "hidden_size=768.0"),
    (dict(num_hidden_layers=True), "num_hidden_layers=True"),
    (dict(hidden_dropout_prob=1.0), "hidden_dropout_prob=1.0: expected a probability"),
    (dict(layer_norm_eps=0), "layer_norm_eps=0"),
    (dict(layer_norm_eps=float("nan")), "layer_norm_eps=nan: expected a positive finite number"),
    (dict(initializer_range=float("inf")), "initializer_range=inf: expected a positive finite number"),
    (dict(initializer_range=True), "initializer_range=True: expected a positive finite number"),
    (dict(hidden_act="swish"), "hidden_act='swish'"),
    (dict(pad_token_id=30000), "pad_token_id=30000"),
])
def test_invalid_configs_name_the_field_and_value(changes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        AlbertConfig(**changes)


@pytest.mark.parametrize("changes, message", [
    (dict(embedding_projection="yes"), "embedding_projection='yes'"),
    (dict(embedding_size=128, embedding_projection=False), "embedding_projection=False with embedding_size=128"),
])
def test_embedding_projection_must_be_a_possible_choice(changes, message):
    with pytest.raises(ValueError, match=message):
        AlbertConfig(**changes)


def test_projection_is_present_exactly_when_E_differs_from_H_unless_asked_for():
    assert AlbertConfig().projects_embeddings
    assert not AlbertConfig.from_preset("bert-base").projects_embeddings
    assert AlbertConfig.from_preset("bert-base", embedding_projection=True).projects_embeddings


def test_presets_table_has_the_six_models_of_table_1_and_tiny():
    assert set(PRESETS) == {"bert-base", "bert-large", "albert-base", "albert-large", "albert-xlarge",
                            "albert-xxlarge", "tiny"}
