import numpy as np
import pytest
import torch

from albert_edu.tools import rank_probe


def synthetic(n=600, e=12, v=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    table, bias = torch.randn(v, e, generator=g), torch.randn(v, generator=g)
    vectors = torch.randn(n, e, generator=g, dtype=torch.float64)
    pieces = (vectors.float() @ table.T + bias).argmax(-1)  # pieces the full head gets right
    return vectors, pieces, table, bias


def test_the_halves_split_the_documents_and_every_piece_falls_in_exactly_one():
    documents = np.array(["b", "a", "c", "a", "d", "b", "c"])
    even, odd = rank_probe.halves(documents)
    assert (even ^ odd).all()
    assert set(documents[even]) == {"a", "c"} and set(documents[odd]) == {"b", "d"}


@pytest.mark.parametrize("rank", [0, 13, 2.0])
def test_a_cut_to_an_impossible_rank_is_refused(rank):
    with pytest.raises(ValueError, match="expected an integer from 1 to 12"):
        rank_probe.principal_cut(torch.randn(10, 12, dtype=torch.float64), rank)


def test_the_principal_cut_leaves_vectors_of_rank_at_most_r_and_a_full_cut_changes_nothing():
    vectors, *_ = synthetic()
    centre, directions = rank_probe.principal_cut(vectors, 4)
    cut = centre + (vectors - centre) @ directions.T @ directions
    assert torch.linalg.matrix_rank(torch.cat([cut, torch.ones(len(cut), 1, dtype=cut.dtype)], 1)) <= 4
    centre, directions = rank_probe.principal_cut(vectors, vectors.shape[1])
    full = centre + (vectors - centre) @ directions.T @ directions  # 11 of 12 directions: nearly all
    assert torch.linalg.matrix_rank(full - centre) == vectors.shape[1] - 1


def test_the_fitted_map_keeps_the_rank_and_is_never_worse_on_validation_than_its_principal_start():
    vectors, pieces, table, bias = synthetic()
    train, valid = (vectors[:400], pieces[:400]), (vectors[400:], pieces[400:])
    mapped, curve = rank_probe.fitted_cut(train, valid, table, bias, rank=3, steps=100, lr=1e-2)
    out = mapped(vectors[400:]).double()
    assert torch.linalg.matrix_rank(out - out.mean(0), tol=1e-4) <= 2  # an affine map through r - 1 directions
    with torch.no_grad():
        assert rank_probe.mean_loss(out, pieces[400:], table, bias) == pytest.approx(min(curve), rel=1e-5)
    assert min(curve) <= curve[0] and len(curve) == 1 + 100 // rank_probe.EVAL_EVERY


def test_a_checkpoint_that_is_not_the_committed_one_is_refused(tmp_path):
    bogus = tmp_path / "weights.safetensors"
    bogus.write_bytes(b"not the weights")
    with pytest.raises(ValueError, match="expected 1c85e113"):
        rank_probe.load_checkpoint(bogus)
