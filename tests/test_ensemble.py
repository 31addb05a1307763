import numpy as np
import pytest

from swe import EnsembleModel, StaticModel

WORDS = ["the", "cat", "dog", "sat", "ran", "on", "mat", "park"]


def _m(dim, seed):
    rng = np.random.default_rng(seed)
    return StaticModel.from_vectors(WORDS, rng.standard_normal((len(WORDS), dim)))


def test_ensemble_cosine_is_weighted_mean_of_member_cosines():
    a, b = _m(6, 1), _m(10, 2)
    ens = EnsembleModel([a, b], weights=[1.0, 3.0])
    x, y = ["the cat sat on the mat", "a dog ran"], ["the dog sat", "cat on park"]
    ex, ey = ens.encode(x), ens.encode(y)
    assert ex.shape == (2, 16)
    np.testing.assert_allclose(np.linalg.norm(ex, axis=1), 1.0, rtol=1e-5)
    cos = (ex * ey).sum(1)
    member = [(m.encode(x) * m.encode(y)).sum(1) for m in (a, b)]
    np.testing.assert_allclose(cos, (1 * member[0] + 9 * member[1]) / 10, rtol=1e-5)


def test_ensemble_save_load(tmp_path):
    ens = EnsembleModel([_m(4, 1), _m(4, 2)], weights=[2, 1])
    ens.save(tmp_path / "e")
    back = EnsembleModel.load(tmp_path / "e")
    np.testing.assert_allclose(back.encode(["cat sat"]), ens.encode(["cat sat"]), rtol=1e-6)
    assert back.encode("cat").shape == (8,)


@pytest.mark.parametrize(("models", "weights", "match"),
                         [([], None, "at least one"), ([1, 2], [1.0], "2 models"),
                          ([1], [-1.0], "positive")])
def test_ensemble_validates(models, weights, match):
    models = [_m(3, i) for i in models]
    with pytest.raises(ValueError, match=match):
        EnsembleModel(models, weights)
