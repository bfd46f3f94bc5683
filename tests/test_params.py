"""count_parameters against two independent references: transformers' models and a structural count of
modules built from the architecture's description (for the sharing modes transformers cannot express)."""

from dataclasses import replace

import pytest
import torch
import transformers
from torch import nn

from albert_edu import AlbertConfig, count_parameters, parameter_breakdown, to_transformers_config
from albert_edu.params import budget_summary, pretraining_head_parameters

ALBERT_PRESETS = ["albert-base", "albert-large", "albert-xlarge", "albert-xxlarge", "tiny"]


def transformers_albert(c: AlbertConfig) -> nn.Module:
    """transformers' AlbertModel with c's geometry (it always has an E -> H map)."""
    return transformers.AlbertModel(to_transformers_config(c))


def numel(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())  # parameters() yields a shared tensor once


@pytest.mark.parametrize("name, expected", [
    ("albert-base", 11_683_584), ("albert-large", 17_683_968),
    ("albert-xlarge", 58_724_864), ("albert-xxlarge", 222_595_584),
])
def test_albert_presets_have_the_counts_transformers_reports(name, expected):
    assert count_parameters(AlbertConfig.from_preset(name)) == expected


@pytest.mark.parametrize("name", ALBERT_PRESETS)
@pytest.mark.parametrize("groups", [1, 2, 3, 6])
def test_count_equals_transformers_albert_model(name, groups):
    c = AlbertConfig.from_preset(name, num_hidden_groups=groups)
    with torch.device("meta"):
        assert count_parameters(c) == numel(transformers_albert(c))


@pytest.mark.parametrize("name", ["bert-base", "bert-large"])
def test_bert_presets_equal_transformers_bert_model_with_pooler(name):
    c = AlbertConfig.from_preset(name)
    with torch.device("meta"):
        reference = transformers.BertModel(transformers.BertConfig(
            vocab_size=c.vocab_size, hidden_size=c.hidden_size, num_hidden_layers=c.num_hidden_layers,
            num_attention_heads=c.num_attention_heads, intermediate_size=c.intermediate_size))
    assert count_parameters(c) == numel(reference)


def test_pretraining_heads_equal_transformers_albert_for_pretraining():
    c = AlbertConfig.from_preset("albert-base")
    with torch.device("meta"):
        model = transformers.AlbertForPreTraining(to_transformers_config(c))
    assert count_parameters(c) + pretraining_head_parameters(c) == numel(model)


def structural_encoder(c: AlbertConfig) -> nn.Module:
    """Modules laid out as the paper describes them, sharing by reusing module objects."""
    E, H, F, L, G = c.embedding_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_hidden_groups

    def attention():
        return nn.ModuleList([nn.Linear(H, H) for _ in range(4)] + [nn.LayerNorm(H)])

    def ffn():
        return nn.ModuleList([nn.Linear(H, F), nn.Linear(F, H), nn.LayerNorm(H)])

    def per_layer(make, shared: bool):
        if not shared:
            return [make() for _ in range(L)]
        group_blocks = [make() for _ in range(G)]
        return [group_blocks[layer * G // L] for layer in range(L)]

    parts = [nn.Embedding(c.vocab_size, E), nn.Embedding(c.max_position_embeddings, E),
             nn.Embedding(c.type_vocab_size, E), nn.LayerNorm(E), nn.Linear(H, H)]
    if c.projects_embeddings:
        parts.append(nn.Linear(E, H))
    parts += per_layer(attention, c.sharing in ("all", "attention"))
    parts += per_layer(ffn, c.sharing in ("all", "ffn"))
    return nn.ModuleList(parts)


SHARING_AND_GROUPS = [(s, g) for s in ("all", "attention", "ffn") for g in (1, 2, 4, 12)] + [("none", 1)]


@pytest.mark.parametrize("sharing, groups", SHARING_AND_GROUPS)
@pytest.mark.parametrize("E", [64, 128, 768])
def test_count_equals_a_structural_count_in_every_sharing_mode(sharing, groups, E):
    c = AlbertConfig(embedding_size=E, sharing=sharing, num_hidden_groups=groups)
    with torch.device("meta"):
        assert count_parameters(c) == numel(structural_encoder(c))


def test_at_E_equal_H_transformers_counts_one_projection_more_unless_we_keep_it_too():
    c = AlbertConfig(embedding_size=768)
    with torch.device("meta"):
        theirs = numel(transformers_albert(c))
    assert theirs - count_parameters(c) == 768 * 768 + 768
    assert theirs == count_parameters(replace(c, embedding_projection=True))


def test_breakdown_sums_to_the_total_and_has_no_projection_when_E_equals_H():
    bert = AlbertConfig.from_preset("bert-base")
    assert sum(parameter_breakdown(bert).values()) == count_parameters(bert)
    assert parameter_breakdown(bert)["projection"] == 0


def test_sharing_modes_order_the_budget_as_table_4():
    counts = {s: count_parameters(AlbertConfig(sharing=s)) for s in ("all", "attention", "ffn", "none")}
    assert counts["all"] < counts["ffn"] < counts["attention"] < counts["none"]


def test_groups_equal_to_layers_count_like_no_sharing():
    base = AlbertConfig()
    assert count_parameters(replace(base, num_hidden_groups=12)) == count_parameters(replace(base, sharing="none"))


def test_budget_summary_of_albert_base_compares_with_bert_of_the_same_geometry():
    summary = budget_summary(30000, 128, 768, 12)
    assert summary["total"] == 11_683_584
    assert summary["bert_total"] == 109_081_344  # BertModel with V = 30000
    assert summary["fraction_of_bert"] == pytest.approx(11_683_584 / 109_081_344)
    assert summary["breakdown"] == parameter_breakdown(AlbertConfig())


def test_budget_summary_of_an_unshared_model_with_E_equal_H_is_bert():
    summary = budget_summary(30000, 768, 768, 12, sharing="none")
    assert summary["total"] == summary["bert_total"] and summary["fraction_of_bert"] == 1.0


@pytest.mark.parametrize("args, message", [
    ((30000, 128, 100, 12), "hidden_size=100: expected a multiple of 64"),
    ((30000, 128, 768, 12, "all", 5), "num_hidden_groups=5"),
    ((30000, 128, 768, 12, "every"), "sharing='every'"),
])
def test_budget_summary_rejects_impossible_models(args, message):
    with pytest.raises(ValueError, match=message):
        budget_summary(*args)
