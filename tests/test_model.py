"""The model against transformers' ALBERT on the same weights, in both directions of loading, and the
model's own contracts: parameter counts, input validation, labels and losses."""

import pytest
import torch
import transformers

from albert_edu import (PRESETS, AlbertConfig, AlbertForPreTraining, AlbertForSequenceClassification, AlbertModel,
                        count_parameters, to_transformers_config)
from albert_edu.params import pretraining_head_parameters

transformers.utils.logging.disable_progress_bar()

SHAPES = {  # name: (vocab, E, H, L, groups, heads, F)
    "E<H, one group": (300, 32, 64, 4, 1, 4, 128),
    "E<H, two groups": (300, 16, 64, 4, 2, 2, 96),
    "E<H, a group per layer": (257, 24, 48, 3, 3, 3, 100),
    "E=H": (200, 64, 64, 2, 1, 4, 128),
}


def transformers_model(shape, seed: int) -> transformers.AlbertForPreTraining:
    V, E, H, L, G, A, F = shape
    torch.manual_seed(seed)
    model = transformers.AlbertForPreTraining(to_transformers_config(AlbertConfig(
        vocab_size=V, embedding_size=E, hidden_size=H, num_hidden_layers=L, num_hidden_groups=G,
        num_attention_heads=A, intermediate_size=F, max_position_embeddings=64))).eval()
    with torch.no_grad():  # move every weight off its initial value: no LayerNorm exactly 1, no bias exactly 0
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def batch(vocab: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (3, 20), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 15:] = 0
    mask[2, 6:] = 0
    types = (torch.arange(20) >= 10).long().expand(3, 20)
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True)


def max_differences(ours, theirs, mask) -> list[float]:
    real = mask.bool()
    hidden = [(a[real] - b[real]).abs().max().item() for a, b in zip(ours.hidden_states, theirs.hidden_states)]
    return hidden + [(ours.prediction_logits[real] - theirs.prediction_logits[real]).abs().max().item(),
                     (ours.sop_logits - theirs.sop_logits).abs().max().item()]


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_transformers_checkpoint_loads_with_equal_outputs(shape, tmp_path):
    theirs = transformers_model(shape, seed=1)
    theirs.save_pretrained(tmp_path)
    ours = AlbertForPreTraining.from_pretrained(tmp_path).eval()
    inputs = batch(shape[0])
    with torch.no_grad():
        differences = max_differences(ours(**inputs), theirs(**inputs), inputs["attention_mask"])
    assert len(differences) == shape[3] + 3 and max(differences) <= 1e-5


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_our_checkpoint_loads_into_transformers_with_equal_outputs(shape, tmp_path):
    ours = AlbertForPreTraining.from_pretrained(_saved(transformers_model(shape, seed=2), tmp_path / "a")).eval()
    with torch.no_grad():
        for p in ours.parameters():
            p.add_(0.01 * torch.randn_like(p))
    ours.save_pretrained(tmp_path / "b")
    theirs = transformers.AlbertForPreTraining.from_pretrained(tmp_path / "b").eval()
    inputs = batch(shape[0], seed=3)
    with torch.no_grad():
        assert max(max_differences(ours(**inputs), theirs(**inputs), inputs["attention_mask"])) <= 1e-5


def _saved(model, path):
    model.save_pretrained(path)
    return path


def test_losses_equal_transformers_losses(tmp_path):
    shape = SHAPES["E<H, two groups"]
    theirs = transformers_model(shape, seed=4)
    ours = AlbertForPreTraining.from_pretrained(_saved(theirs, tmp_path)).eval()
    inputs = batch(shape[0])
    labels = torch.full_like(inputs["input_ids"], -100)
    labels[0, [1, 4]] = inputs["input_ids"][0, [1, 4]]
    labels[2, 3] = 7
    order = torch.tensor([0, 1, 1])
    with torch.no_grad():
        a = ours(**inputs, labels=labels, sentence_order_label=order)
        b = theirs(**inputs, labels=labels, sentence_order_label=order)
    assert abs(a.loss.item() - b.loss.item()) <= 1e-5


def test_mlm_logits_with_labels_are_the_full_logits_at_labelled_positions():
    model = AlbertForPreTraining(AlbertConfig.from_preset("tiny", vocab_size=500)).eval()
    ids = torch.randint(5, 500, (2, 12))
    labels = torch.full_like(ids, -100)
    labels[0, 3], labels[1, 0], labels[1, 11] = 9, 10, 11
    with torch.no_grad():
        full = model(ids).prediction_logits
        with_labels = model(ids, labels=labels)
        compact = with_labels.masked_lm_logits
    assert full.shape == (2, 12, 500) and with_labels.prediction_logits is None  # never another shape
    assert compact.shape == (3, 500)
    assert torch.allclose(compact, full[labels != -100], atol=1e-6)


def test_no_labelled_position_gives_zero_mlm_loss_not_nan():
    model = AlbertForPreTraining(AlbertConfig.from_preset("tiny", vocab_size=100))
    out = model(torch.randint(5, 100, (2, 8)), labels=torch.full((2, 8), -100))
    assert out.mlm_loss.item() == 0.0 and out.loss.item() == 0.0


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("sharing", ["all", "attention", "ffn", "none"])
def test_model_stores_exactly_the_counted_parameters(name, sharing):
    c = AlbertConfig.from_preset(name, sharing=sharing)
    with torch.device("meta"):
        assert sum(p.numel() for p in AlbertModel(c).parameters()) == count_parameters(c)
        assert sum(p.numel() for p in AlbertForPreTraining(c).parameters()) == (
            count_parameters(c) + pretraining_head_parameters(c))


@pytest.mark.parametrize("sharing, groups", [("all", 3), ("attention", 2), ("ffn", 6)])
def test_grouped_sharing_stores_the_counted_parameters(sharing, groups):
    c = AlbertConfig.from_preset("tiny", sharing=sharing, num_hidden_groups=groups)
    assert sum(p.numel() for p in AlbertModel(c).parameters()) == count_parameters(c)


def test_decoder_is_tied_to_the_word_embeddings():
    model = AlbertForPreTraining(AlbertConfig.from_preset("tiny", vocab_size=100))
    ids = torch.full((1, 6), 7)
    model(ids, labels=ids).loss.backward()
    # token 50 is not in the input, so only the tied decoder can give its embedding a gradient
    assert model.albert.embeddings.word_embeddings.weight.grad[50].abs().sum() > 0
    assert not any(p.shape == (100, 64) for name, p in model.named_parameters() if "word_embeddings" not in name)


def test_hidden_states_are_the_input_and_every_layer_output():
    c = AlbertConfig.from_preset("tiny", vocab_size=100)
    out = AlbertModel(c).eval()(torch.randint(5, 100, (2, 7)), output_hidden_states=True)
    assert len(out.hidden_states) == c.num_hidden_layers + 1
    assert torch.equal(out.hidden_states[-1], out.last_hidden_state)


def test_no_mask_equals_an_all_true_mask_in_the_encoder():
    model = AlbertModel(AlbertConfig.from_preset("tiny", vocab_size=100)).eval()
    x = model.embeddings(torch.randint(5, 100, (2, 9)))
    with torch.no_grad():
        unmasked, _ = model.encoder(x, None)
        masked, _ = model.encoder(x, torch.ones(2, 1, 1, 9, dtype=torch.bool))
    assert torch.allclose(unmasked, masked, atol=1e-6)


def test_padding_does_not_change_real_positions():
    model = AlbertModel(AlbertConfig.from_preset("tiny", vocab_size=100)).eval()
    ids = torch.randint(5, 100, (1, 6))
    padded = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    mask = torch.tensor([[1] * 6 + [0] * 4])
    with torch.no_grad():
        alone = model(ids).last_hidden_state
        with_padding = model(padded, mask).last_hidden_state[:, :6]
    assert torch.allclose(alone, with_padding, atol=1e-5)


@pytest.mark.parametrize("kwargs, message", [
    (dict(input_ids=torch.tensor([[2, 100, 3]])), "input_ids contains 100, outside \\[0, 100\\)"),
    (dict(input_ids=torch.tensor([[2, -1, 3]])), "input_ids contains -1"),
    (dict(input_ids=torch.zeros(1, 513, dtype=torch.long)), "sequence length 513 exceeds max_position_embeddings=512"),
    (dict(input_ids=torch.zeros(2, 4, dtype=torch.long), attention_mask=torch.ones(2, 5)), "attention_mask is \\(2, 5\\); expected a tensor of shape \\(2, 4\\)"),
    (dict(input_ids=torch.zeros(2, 4, dtype=torch.long), token_type_ids=torch.full((2, 4), 2)), "token_type_ids contains 2"),
    (dict(input_ids=torch.zeros(4, dtype=torch.long)), "input_ids must be a \\(batch, length\\) integer tensor"),
    (dict(input_ids=torch.zeros(1, 4)), "integer tensor"),
    (dict(input_ids=torch.zeros(1, 4, dtype=torch.long), labels=torch.full((1, 4), 100)), "labels contains 100"),
    (dict(input_ids=torch.zeros(1, 4, dtype=torch.long), labels=torch.zeros(1, 3, dtype=torch.long)), "labels has shape"),
    (dict(input_ids=torch.zeros(2, 4, dtype=torch.long), sentence_order_label=torch.tensor([0, 2])), "sentence_order_label contains 2"),
    (dict(input_ids=torch.zeros(2, 4, dtype=torch.long), token_type_ids=torch.full((2, 4), -1)), "token_type_ids contains -1"),
    (dict(input_ids=torch.zeros(0, 4, dtype=torch.long)), "input_ids has shape \\(0, 4\\): expected at least one sequence"),
    (dict(input_ids=torch.zeros(2, 0, dtype=torch.long)), "input_ids has shape \\(2, 0\\): expected at least one sequence"),
    (dict(input_ids=torch.zeros(2, 4, dtype=torch.long), attention_mask=torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0]])),
     "attention_mask row 1 is all zeros"),
    (dict(input_ids=torch.zeros(2, 4, dtype=torch.long), attention_mask=torch.tensor([[1, 1, 2, 0], [1, 1, 1, 1]])),
     "attention_mask holds values other than 0 and 1"),
    (dict(input_ids=torch.zeros(2, 4, dtype=torch.long), attention_mask=torch.full((2, 4), 0.3)),
     "attention_mask holds values other than 0 and 1"),
    (dict(input_ids=torch.zeros(2, 4, dtype=torch.long), token_type_ids=torch.zeros(2, 4)),
     "token_type_ids has dtype torch.float32; expected an integer tensor"),
    (dict(input_ids=[[2, 5, 3]]), "input_ids must be a \\(batch, length\\) integer tensor; got a list"),
    (dict(input_ids=torch.zeros(2, 4, dtype=torch.long), token_type_ids=torch.zeros(0, dtype=torch.long)),
     "token_type_ids has shape \\(0,\\); expected \\(2, 4\\) like input_ids"),
    (dict(input_ids=torch.zeros(2, 4, dtype=torch.long), token_type_ids=[[0] * 4] * 2),
     "token_type_ids must be an integer tensor like input_ids; got a list"),
    (dict(input_ids=torch.zeros(1, 4, dtype=torch.long), labels=torch.full((1, 4), -100.0)),
     "labels has dtype torch.float32; expected torch.long \\(int64\\) class ids"),
    (dict(input_ids=torch.zeros(1, 4, dtype=torch.long), labels=torch.full((1, 4), -100, dtype=torch.int32)),
     "labels has dtype torch.int32; expected"),
    (dict(input_ids=torch.zeros(2, 4, dtype=torch.long), sentence_order_label=torch.tensor([0.0, 1.0])),
     "sentence_order_label has dtype torch.float32; expected"),
    (dict(input_ids=torch.zeros(2, 4, dtype=torch.long), sentence_order_label=[0, 1]),
     "sentence_order_label is a list; expected a tensor of class ids"),
])
def test_bad_inputs_raise_value_errors_naming_the_value(kwargs, message):
    model = AlbertForPreTraining(AlbertConfig.from_preset("tiny", vocab_size=100))
    with pytest.raises(ValueError, match=message):
        model(**kwargs)


def test_a_classifier_refuses_float_labels_unless_it_regresses():
    config = AlbertConfig.from_preset("tiny", vocab_size=100, num_hidden_layers=2)
    ids = torch.randint(5, 100, (2, 5))
    with pytest.raises(ValueError, match="labels has dtype torch.float32; expected torch.long"):
        AlbertForSequenceClassification(config, 2)(ids, labels=torch.tensor([1.0, 0.0]))
    assert AlbertForSequenceClassification(config, 1)(ids, labels=torch.tensor([0.5, 2.0])).loss.item() > 0
    with pytest.raises(ValueError, match="labels is a list; expected a tensor of one value per sequence"):
        AlbertForSequenceClassification(config, 1)(ids, labels=[0.5, 2.0])


def test_sequence_classification_fine_tunes_from_a_pretraining_checkpoint(tmp_path):
    pretrained = AlbertForPreTraining(AlbertConfig.from_preset("tiny", vocab_size=100))
    pretrained.save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match=r"no \['classifier'\]; initialized them randomly"):
        classifier = AlbertForSequenceClassification.from_pretrained(tmp_path)
    assert torch.equal(classifier.albert.pooler.weight, pretrained.albert.pooler.weight)
    out = classifier(torch.randint(5, 100, (3, 5)), labels=torch.tensor([0, 1, 1]))
    assert out.logits.shape == (3, 2) and out.loss.item() > 0


def test_sequence_classification_with_one_label_is_regression():
    model = AlbertForSequenceClassification(AlbertConfig.from_preset("tiny", vocab_size=100), num_labels=1).eval()
    ids, targets = torch.randint(5, 100, (3, 5)), torch.tensor([0.5, 1.0, -1.0])
    out = model(ids, labels=targets)
    assert out.logits.shape == (3, 1)
    assert out.loss.item() == pytest.approx(((out.logits.view(-1) - targets) ** 2).mean().item())
    assert model(ids, labels=targets.view(3, 1)).loss.item() == pytest.approx(out.loss.item())
    with pytest.raises(ValueError, match="one value per sequence"):
        model(ids, labels=torch.zeros(3, 3))


@pytest.mark.parametrize("num_labels", [1, 2, 3])
def test_transformers_classifier_loads_with_equal_logits_and_back(num_labels, tmp_path):
    torch.manual_seed(num_labels)
    theirs = transformers.AlbertForSequenceClassification(to_transformers_config(AlbertConfig(
        vocab_size=100, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64), num_labels=num_labels)).eval()
    theirs.save_pretrained(tmp_path / "theirs")
    ours = AlbertForSequenceClassification.from_pretrained(tmp_path / "theirs").eval()
    ids = torch.randint(5, 100, (3, 7))
    with torch.no_grad():
        assert ours.num_labels == num_labels
        assert torch.allclose(ours(ids).logits, theirs(ids).logits, atol=1e-5)
        ours.save_pretrained(tmp_path / "ours")
        back = transformers.AlbertForSequenceClassification.from_pretrained(tmp_path / "ours").eval()
        assert torch.allclose(ours(ids).logits, back(ids).logits, atol=1e-5)
        again = AlbertForSequenceClassification.from_pretrained(tmp_path / "ours")
        assert again.num_labels == num_labels


def test_transformers_base_model_checkpoint_loads_with_equal_outputs(tmp_path):
    shape = SHAPES["E<H, two groups"]
    theirs = transformers_model(shape, seed=5).albert
    theirs.save_pretrained(tmp_path)
    ours = AlbertModel.from_pretrained(tmp_path).eval()
    inputs = batch(shape[0])
    real = inputs["attention_mask"].bool()
    with torch.no_grad():
        a, b = ours(**inputs), theirs(**inputs)
    assert (a.last_hidden_state[real] - b.last_hidden_state[real]).abs().max() <= 1e-5
    assert (a.pooler_output - b.pooler_output).abs().max() <= 1e-5


def test_masked_lm_checkpoint_without_pooler_loads_with_a_warning(tmp_path):
    torch.manual_seed(0)
    theirs = transformers.AlbertForMaskedLM(to_transformers_config(AlbertConfig(
        vocab_size=100, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64))).eval()
    theirs.save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="initialized them randomly"):
        ours = AlbertForPreTraining.from_pretrained(tmp_path).eval()
    ids = torch.randint(5, 100, (2, 6))
    with torch.no_grad():
        assert torch.allclose(ours(ids).prediction_logits, theirs(ids).logits, atol=1e-5)


@pytest.mark.parametrize("dropout", ["hidden_dropout_prob", "attention_probs_dropout_prob"])
def test_dropout_is_active_only_in_training(dropout):
    c = AlbertConfig.from_preset("tiny", vocab_size=100, **{dropout: 0.5})
    model, ids = AlbertModel(c), torch.randint(5, 100, (1, 8))
    model.train()
    assert not torch.equal(model(ids).last_hidden_state, model(ids).last_hidden_state)
    model.eval()
    assert torch.equal(model(ids).last_hidden_state, model(ids).last_hidden_state)


@pytest.mark.parametrize("allowed", [torch.ones(2, 1, 1, 5), torch.ones(2, 1, 1, 5, dtype=torch.long),
                                     torch.ones(2, 5, dtype=torch.bool), torch.ones(2, 1, 1, 4, dtype=torch.bool)],
                         ids=["float", "long", "two-dimensional", "too-short"])
def test_a_layer_refuses_a_mask_that_is_not_boolean_b_1_1_t(allowed):
    from albert_edu import AlbertLayer

    layer = AlbertLayer(AlbertConfig.from_preset("tiny"))
    with pytest.raises(ValueError, match=r"expected a boolean tensor of shape \(B, 1, 1, 5\)"):
        layer(torch.randn(2, 5, 256), allowed)
    assert layer(torch.randn(2, 5, 256), torch.ones(2, 1, 1, 5, dtype=torch.bool)).shape == (2, 5, 256)
