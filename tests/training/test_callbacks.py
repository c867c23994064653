import math

import pytest

from acceltrain.training.callbacks import DivergenceCheck


class _Model:
    stop_training = False
    optimizer = None


def _run(losses, num_classes=10):
    check = DivergenceCheck(num_classes)
    check.set_model(_Model())
    for epoch, loss in enumerate(losses):
        check.on_epoch_end(epoch, {"loss": loss})
        if check.model.stop_training:
            return check, epoch
    return check, None


LN10 = math.log(10)


@pytest.mark.parametrize(
    "losses, stops_at",
    [
        ([0.8, 0.3, 0.2, 0.15], None),  # healthy
        ([0.8, float("nan")], 1),
        ([0.8, float("inf")], 1),
        ([0.5, LN10, LN10 + 0.001, LN10], 2),  # the seed's diverged run: stuck at ln(10)
        ([0.5, 8.0, 9.0, 9.5], 2),  # worse than chance and rising
        ([2.35, 2.33, 2.31, 2.29, 2.2], None),  # learning slowly from chance: still falling
        ([LN10, 0.5, LN10, 0.4, LN10], None),  # not two epochs in a row
    ],
)
def test_divergence_check(losses, stops_at):
    check, stopped = _run(losses)
    assert stopped == stops_at
    assert (check.message is not None) == (stops_at is not None)


def test_a_regression_loss_is_only_checked_for_nan():
    check, stopped = _run([5.0, 5.0, 5.0, 5.0], num_classes=None)
    assert stopped is None


def test_the_message_names_the_likely_cause():
    check, _ = _run([0.5, LN10, LN10])
    with pytest.raises(Exception, match=r"diverged at epoch 3.*ln\(10\) = 2.3026.*learning rate too high"):
        check.raise_if_diverged()
