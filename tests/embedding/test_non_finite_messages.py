"""The engine's finiteness checks say which non-finite values they found: NaN, Inf, or both."""

import numpy as np
import pytest
import tensorflow as tf

from embedding.engine import check_finite

CASES = [
    ([1.0, np.nan], "Tensor had NaN values"),
    ([1.0, np.inf], "Tensor had Inf values"),
    ([-np.inf, 1.0], "Tensor had Inf values"),
    ([np.nan, np.inf], "Tensor had Inf and NaN values"),
]


@pytest.mark.parametrize("poisoned, said", CASES)
def test_eager_messages_distinguish_nan_and_inf(poisoned, said):
    values = [tf.constant([[1.0, 2.0]]), tf.constant(poisoned)]
    with pytest.raises(tf.errors.InvalidArgumentError, match="table 't' : " + said):
        check_finite(values, "table 't'")
    assert float(check_finite([tf.constant([1e38, -1e38])], "finite")) == 0.0


@pytest.mark.parametrize("poisoned, said", CASES)
def test_graph_messages_distinguish_nan_and_inf_inside_a_loop(poisoned, said):
    with tf.Graph().as_default():
        bad = tf.compat.v1.placeholder(tf.float32, [2])

        def body(i):
            with tf.control_dependencies([check_finite([bad * tf.cast(i + 1, tf.float32)], "gradient of 't'")]):
                return i + 1

        loop = tf.compat.v1.while_loop(lambda i: i < 2, body, [tf.constant(0)])
        with tf.compat.v1.Session() as session:
            assert session.run(loop, {bad: [1.0, 2.0]}) == 2
            with pytest.raises(tf.errors.InvalidArgumentError, match="gradient of 't' : " + said):
                session.run(loop, {bad: poisoned})
