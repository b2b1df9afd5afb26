"""FeCAM against the authors' ViT script's formula, task by task == at once, any class order, thread bits, refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tosca_foundation.errors import UserError
from tosca_heads.method.baselines.fecam import FeCAM


def blobs(
    classes: int = 6, per_class: int = 20, dim: int = 8, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(classes), per_class)
    x = np.abs(rng.normal(size=(len(y), dim))) + (y[:, None] == np.arange(dim) % classes) * 0.8
    return x.astype(np.float32), y


def authors_distances(x: np.ndarray, y: np.ndarray, test: np.ndarray) -> np.ndarray:
    """FeCAM_vit_cifar100.py's arithmetic: normalise, np.cov, + mean(diag) I, to correlations, pinv."""
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    tn = test / np.linalg.norm(test, axis=1, keepdims=True)
    found = []
    for c in np.unique(y):
        cov = np.cov(xn[y == c].T)
        cov = cov + np.mean(np.diagonal(cov)) * np.eye(len(cov))
        sd = np.sqrt(np.diagonal(cov))
        corr = cov / np.outer(sd, sd)
        diff = tn - xn[y == c].mean(0)
        found.append(np.einsum("ij,jk,ik->i", diff, np.linalg.pinv(corr), diff))
    return np.stack(found, 1)


def test_scores_are_minus_the_authors_mahalanobis_distances() -> None:
    x, y = blobs()
    model = FeCAM().partial_fit(x[:40], y[:40]).partial_fit(x[40:], y[40:])
    expected = authors_distances(x, y, x)
    np.testing.assert_allclose(-model.decision_function(x), expected, rtol=2e-5)
    assert model.state_bytes() == 6 * 8 * 8 * 4 + 2 * 6 * 8 * 8 + 6 * 8
    assert model.factors_.dtype == torch.float32


def test_tasks_in_another_order_and_increment_give_the_same_scores() -> None:
    x, y = blobs()
    at_once = FeCAM().partial_fit(x, y).decision_function(x)
    order = np.array([4, 1, 5, 0, 3, 2])  # incremental id i is original class order[i]
    ids = np.argsort(order)[y]
    model = FeCAM()
    for task in ([0, 1, 2], [3], [4, 5]):
        rows = np.isin(ids, task)
        model.partial_fit(x[rows], ids[rows])
    np.testing.assert_array_equal(model.decision_function(x)[:, np.argsort(order)], at_once)


def test_early_scores_cover_only_the_classes_seen() -> None:
    x, y = blobs()
    scores = FeCAM().partial_fit(x[:40], y[:40]).decision_function(x)
    assert scores.shape == (len(x), 2) and np.isfinite(scores).all()


@pytest.mark.parametrize("threads", [1, 3])
def test_same_bits_on_any_thread_count(threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = blobs(dim=40, per_class=50)
    before = torch.get_num_threads()

    def scores(count: int) -> np.ndarray:
        monkeypatch.setenv("TOSCA_LINALG_THREADS", str(count))
        torch.set_num_threads(count)
        try:
            return FeCAM().partial_fit(x[:100], y[:100]).partial_fit(x[100:], y[100:]).decision_function(x)
        finally:
            torch.set_num_threads(before)

    assert np.array_equal(scores(2), scores(threads))


def test_a_class_met_with_one_image_is_held_unscored_until_its_second() -> None:
    """One image has no covariance (the authors' np.cov gives NaN): a class met once so far is kept
    as its mean and count and scored -inf (never answered); its second image, in a later call,
    makes it the class two images in one call make (a blurry stream can bring a class's first
    image alone). A class-incremental plan refuses such a class at its edge (test_bad_input)."""
    x, y = blobs()
    keep = np.r_[0, 20 : len(y)]  # class 0 keeps one image
    model = FeCAM().partial_fit(x[keep], y[keep])
    scores = model.decision_function(x)
    assert np.isneginf(scores[:, 0]).all() and np.isfinite(scores[:, 1:]).all()
    assert model.counts_[0] == 1 and not model.seen_[0]
    model.partial_fit(x[1:3], y[1:3])
    together = FeCAM().partial_fit(x[keep], y[keep]).partial_fit(x[1:3], y[1:3])
    whole = FeCAM().partial_fit(x[np.r_[0:3, 20 : len(y)]], y[np.r_[0:3, 20 : len(y)]])
    np.testing.assert_allclose(model.decision_function(x), whole.decision_function(x), rtol=1e-5)
    np.testing.assert_array_equal(model.decision_function(x), together.decision_function(x))


def test_a_class_split_over_calls_is_the_authors_covariance_of_all_its_rows() -> None:
    """Pooling: each class's rows in three calls (one of them a single image) score as the authors'
    formula on all of its rows at once."""
    x, y = blobs()
    model = FeCAM()
    for part in (np.r_[0:7, 20:27, 40:47, 60:67, 80:87, 100:107], np.r_[7, 27, 47, 67, 87, 107]):
        model.partial_fit(x[part], y[part])
    rest = np.setdiff1d(np.arange(len(y)), np.r_[0:8, 20:28, 40:48, 60:68, 80:88, 100:108])
    model.partial_fit(x[rest], y[rest])
    np.testing.assert_allclose(-model.decision_function(x), authors_distances(x, y, x), rtol=1e-4)


def test_a_class_of_identical_images_is_refused_in_one_line() -> None:
    x, y = blobs()
    x[20:40] = x[20]  # class 1: twenty copies of one image
    with pytest.raises(UserError, match="class 1's training images all point one way"):
        FeCAM().partial_fit(x, y)


def test_a_class_of_one_direction_is_not_said_to_be_one_vector() -> None:
    """Issue 57, point 2: rows that are multiples of one another are distinct feature vectors with
    one direction: the refusal says what is true of them (FeCAM normalises first), not "one vector"."""
    x, y = blobs()
    x[20:40] = x[20] * (np.float32(2.0) ** np.arange(20, dtype=np.float32))[:, None]  # normalised: exact
    with pytest.raises(UserError) as refused:
        FeCAM().partial_fit(x, y)
    assert "point one way" in str(refused.value) and "have one feature vector" not in str(refused.value)


@pytest.mark.parametrize("scale", [1e30, 1e-30, 1e8])
def test_fecam_at_any_scale_gives_what_x1_gives(scale: float) -> None:
    """L2 normalisation is FeCAM's first step: features x1e30 (whose squares overflow float32) and
    x1e-30 (whose squares underflow it) give the scores of x1 (issue 57, point 2)."""
    x, y = blobs()
    base = FeCAM().partial_fit(x, y).decision_function(x)
    scaled = FeCAM().partial_fit(x * np.float32(scale), y).decision_function(x * np.float32(scale))
    np.testing.assert_allclose(scaled, base, rtol=1e-5, atol=1e-4)


def test_too_many_class_matrices_are_refused_before_any_work() -> None:
    FeCAM.check_fits(768, classes=10)
    with pytest.raises(UserError, match="fewer classes"):
        FeCAM.check_fits(768, classes=10**7)


def test_fecam_at_200_classes_of_768_features_is_refused_where_it_cannot_fit(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case, on a machine with 256 MiB to spare: 200 inverses of 768 x 768 (472 MB) are
    refused by `tosca baselines` in one line naming what to lower, before any work (no folder)."""
    from support.stores import synthetic_store
    from typer.testing import CliRunner

    from cli import app

    store = synthetic_store(tmp_path / "s.zarr", classes=200, per_class=2, test_per_class=1, dim=768)
    monkeypatch.setenv("TOSCA_MEMORY_LIMIT", str(256 << 20))
    out = tmp_path / "out"
    args = ["baselines", "--store", str(store.path), "--no-tosca", "--methods", "fecam", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--init-cls", "100", "--increment", "100"])
    assert result.exit_code == 2, result.output
    line = result.output.strip().splitlines()[-1]  # after the protocol's lines, before any work
    assert line.startswith("error: FeCAM on 200 classes of 768 features") and "use fewer classes" in line
    assert not (out / "fecam" / "metrics.json").exists()


def test_a_call_with_no_rows_changes_nothing() -> None:
    x, y = blobs()
    model = FeCAM().partial_fit(x, y)
    before = model.decision_function(x)
    model.partial_fit(x[:0], y[:0])
    np.testing.assert_array_equal(model.decision_function(x), before)


def test_the_estimator_refuses_a_class_of_one_image_in_a_class_incremental_task() -> None:
    """A class-incremental task gives all of a class's rows: a class FeCAM would hold for a second
    image that never comes is refused in one line, naming its label (never learned and unanswered)."""
    from tosca_heads.applied.estimators import BaselineClassifier

    x, y = blobs()
    keep = np.r_[0, 20 : len(y)]  # class 0 keeps one image
    with pytest.raises(
        UserError, match=r"FeCAM needs 2 or more training images of each class: class 0 has 1 in task \d+$"
    ) as refused:
        BaselineClassifier(method="fecam", init_cls=2, increment=2, order_seed=0).fit(x[keep], y[keep] * 1)
    assert "\n" not in str(refused.value)
