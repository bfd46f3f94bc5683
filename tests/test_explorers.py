"""The explorers' logic (albert_edu.explorers), without a browser: each is a plain function of its controls."""

import pytest
import torch

from albert_edu.corpus import load_documents
from albert_edu.explorers import (budget_text, draw_layer_curves, layer_text, pair_html, pair_view, shown,
                                  token_path)
from albert_edu.params import budget_summary
from albert_edu.tokenizer import Tokenizer
from albert_edu.tools.explore import write_notebooks


def test_budget_text_reports_the_budget_and_rejects_bad_widths():
    s = budget_summary(30000, 128, 768, 12, "none", 1)
    assert budget_text(30000, 128, 768, 12, "none") == (
        f"this model: {s['total']:,} parameters | BERT with the same V, H, L: {s['bert_total']:,} | "
        f"{100 * s['fraction_of_bert']:.1f}% of BERT")
    assert budget_text(30000, 128, 768, 12).startswith("this model: 11,683,584 parameters")
    with pytest.raises(ValueError, match="hidden_size=100"):
        budget_text(30000, 128, 100, 12)


@pytest.fixture(scope="module")
def corpus(validation_documents, tokenizer):
    return validation_documents, tokenizer


@pytest.mark.parametrize("objective", ["sop", "nsp", "none"])
def test_pair_view_shows_a_masked_pair_of_the_chosen_document(corpus, objective):
    documents, tokenizer = corpus
    view = pair_view(documents, tokenizer, 3, objective, seed=5)
    assert view == pair_view(documents, tokenizer, 3, objective, seed=5)  # deterministic
    assert view["document"] == documents[3].title
    assert view["pieces"][0] == "[CLS]" and view["pieces"].count("[SEP]") == 2 and len(view["pieces"]) <= 64
    assert 0 < len(view["predict"]) <= 0.2 * len(view["pieces"])
    assert all(view["pieces"][p] != "[CLS]" and piece != "[SEP]" for p, piece in view["predict"].items())
    if objective == "none":
        assert view["label"] == 0
    text = pair_html(view)
    assert f"label {view['label']}: {view['meaning']}" in text and text.count("outline") == len(view["predict"])


def test_pair_view_rejects_bad_choices(corpus):
    documents, tokenizer = corpus
    with pytest.raises(ValueError, match=f"document=99: expected 0 <= document < {len(documents)}"):
        pair_view(documents, tokenizer, 99, "sop", 0)
    with pytest.raises(ValueError, match="objective='mlm'"):
        pair_view(documents, tokenizer, 0, "mlm", 0)
    with pytest.raises(ValueError, match="seed=-1: expected a non-negative integer"):
        pair_view(documents, tokenizer, 0, "sop", -1)
    empty = type(documents[0])(id="x", title="EMPTY", source="x", sentences=["", ""])
    with pytest.raises(ValueError, match="document=0 \\('EMPTY'\\) has no text"):
        pair_view([empty, *documents], tokenizer, 0, "sop", 0)


@pytest.mark.parametrize("render, named", [
    (lambda corpus: pair_html(pair_view(*corpus, 0, "sop", -1)), "seed=-1"),
    (lambda corpus: pair_html(pair_view(*corpus, 10_000, "sop", 0)), "document=10000"),
    (lambda corpus: budget_text(30000, 128, 100, 12), "hidden_size=100"),
    (lambda corpus: budget_text(30000, 128, 768, 12, "all", 5), "num_hidden_groups=5"),
])
def test_an_explorer_shows_a_message_instead_of_a_traceback(render, named, corpus):
    text = shown(lambda: render(corpus))
    assert text.startswith('<p class="explorer-result explorer-error">') and named in text
    assert shown(lambda: "<p>fine</p>") == "<p>fine</p>"


def test_token_path_and_layer_text():
    states = [torch.tensor([[[1.0, 0.0]]]), torch.tensor([[[0.0, 2.0]]]), torch.tensor([[[-1.0, 0.0]]])]
    path = token_path(states, 0, 0)
    assert path["l2"] == pytest.approx([5 ** 0.5, 5 ** 0.5])
    assert path["angle"] == pytest.approx([90.0, 90.0]) and path["turned"] == pytest.approx([90.0, 180.0])
    curves = {"l2": [1.0, 2.5], "angle": [10.0, 20.0]}
    assert layer_text(curves, path, 2, "▁cat") == ("layer 2: all tokens L2 2.50, angle 20.0 deg | token '▁cat': "
                                                   "L2 2.24, angle 90.0 deg, turned 180.0 deg from its input")
    with pytest.raises(ValueError, match="layer=3"):
        layer_text(curves, path, 3, "x")
    with pytest.raises(ValueError, match="row=0, position=5"):
        token_path(states, 0, 5)


def test_served_notebooks_call_each_explorer(tmp_path):
    paths = write_notebooks(tmp_path)
    assert [p.name for p in paths] == ["parameters.ipynb", "masking.ipynb", "layers.ipynb", "fill-mask.ipynb"]
    assert "fill_mask_explorer()" in paths[3].read_text()
    assert "parameter_explorer()" in paths[0].read_text()


def test_layer_curves_are_drawn_with_the_chosen_layer_marked(monkeypatch):
    import matplotlib.pyplot as plt

    monkeypatch.setattr(plt, "show", lambda: None)
    curves = {"l2": [3.0, 2.0, 1.0], "angle": [30.0, 20.0, 10.0]}
    path = {"l2": [2.0, 2.0, 1.0], "angle": [25.0, 20.0, 5.0], "turned": [25.0, 30.0, 31.0]}
    draw_layer_curves(curves, path, 2, "x")
    axes = plt.gcf().axes
    assert len(axes) == 2 and [list(line.get_ydata()) for line in axes[0].lines[:2]] == [curves["l2"], path["l2"]]
    assert list(axes[1].lines[2].get_xdata()) == [2, 2]  # the marker of the chosen layer
    plt.close("all")


def test_fill_mask_html_names_each_mask_and_its_best_pieces():
    from albert_edu.explorers import fill_mask_html

    text = fill_mask_html([[("\u2581capital", 0.5), ("\u2581city", 0.25)], [("s", 0.125)]])
    assert text.startswith('<p class="explorer-result">2 masks: [MASK] 1: \u2581capital 50.0%, \u2581city 25.0% | '
                           '[MASK] 2: s 12.5%</p>')
    assert text.count("<code") == 3 and "width:150px" in text  # bars scaled to the probability


def test_fill_mask_explorer_shows_a_message_for_a_text_without_a_mask(corpus):
    import torch

    from albert_edu.config import AlbertConfig
    from albert_edu.downstream import fill_mask
    from albert_edu.explorers import fill_mask_html
    from albert_edu.model import AlbertForPreTraining

    torch.manual_seed(0)
    model, tokenizer = AlbertForPreTraining(AlbertConfig.from_preset("tiny")), corpus[1]
    assert "2 masks" in shown(lambda: fill_mask_html(fill_mask(model, tokenizer, "the [MASK] of [MASK].")))
    text = shown(lambda: fill_mask_html(fill_mask(model, tokenizer, "no mask here")))
    assert text.startswith('<p class="explorer-result explorer-error">') and "has no [MASK]" in text
