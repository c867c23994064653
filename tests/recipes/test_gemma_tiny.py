import numpy as np
import pytest

from acceltrain import recipes
from acceltrain.recipes import gemma_tiny


def test_it_is_a_recipe():
    assert recipes.get("gemma-tiny") is gemma_tiny


def test_the_task_is_next_token_counting_and_repeats_per_seed():
    splits = gemma_tiny.make_splits(seed=3)
    vocabulary = gemma_tiny.CONFIG["vocabulary_size"]
    assert splits.x_train.shape == (gemma_tiny.TRAIN_SEQUENCES, gemma_tiny.SEQUENCE)
    np.testing.assert_array_equal(splits.y_train[:, :-1], splits.x_train[:, 1:])  # labels: the next tokens
    steps = (splits.x_train[:, 1] - splits.x_train[:, 0]) % vocabulary
    assert set(np.unique(steps)) == set(gemma_tiny.STEPS)
    np.testing.assert_array_equal((splits.x_train[:, 2:] - splits.x_train[:, 1:-1]) % vocabulary,
                                  np.broadcast_to(steps[:, None], (len(steps), gemma_tiny.SEQUENCE - 2)))
    np.testing.assert_array_equal(gemma_tiny.make_splits(seed=3).x_test, splits.x_test)


def test_preprocess_gives_gemma_its_inputs_and_refuses_other_shapes():
    splits = gemma_tiny.make_splits()
    x, y = gemma_tiny.preprocess(splits.x_test, splits.y_test)
    assert set(x) == {"token_ids", "padding_mask"} and x["padding_mask"].all() and y.dtype == np.int32
    with pytest.raises(ValueError, match="expected token ids"):
        gemma_tiny.preprocess(np.zeros((4, 784)), np.zeros(4))
