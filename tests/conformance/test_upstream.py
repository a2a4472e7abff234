"""Upstream's CPU path as an oracle of the oracle: `TPUEstimator(use_tpu=False)` from tensorflow_estimator trains the
conformance program to the NumPy reference's variables where the semantics agree (no embedding config, or feature
columns trained by SGD at the model's learning rate; dict configs have no CPU path upstream)."""

import numpy as np
import pytest
import tensorflow as tf

from tests.conformance import cases, programs

pytestmark = pytest.mark.upstream

_UPSTREAM_CASES = [
    dict(embedding="none", id_format="dense", combiner="sum"),
    dict(embedding="none", id_format="sparse", combiner="sqrtn"),
    dict(embedding="columns", id_format="sparse", combiner="mean"),
    dict(embedding="shared_columns", id_format="dense", combiner="sqrtn"),
    dict(embedding="weighted_columns", id_format="sparse", combiner="sum"),
]


@pytest.mark.skipif(not tf.__version__.startswith("2.15"), reason="upstream's TPUEstimator oracle is TF 2.15 only")
@pytest.mark.parametrize("overrides", _UPSTREAM_CASES, ids=lambda o: "{embedding}-{id_format}-{combiner}".format(**o))
def test_upstream_cpu_path_trains_to_the_reference(tmp_path, overrides):
    from tensorflow_estimator.python.estimator.tpu import tpu_estimator as upstream

    case = dict(cases.BASE_CASE, shards=1, optimizer="sgd", **overrides)
    columns = programs.columns_of(case)
    spec = None
    if columns is not None:
        spec = upstream.EmbeddingConfigSpec(
            feature_columns=columns,
            optimization_parameters=tf.compat.v1.tpu.experimental.StochasticGradientDescentParameters(
                programs.DENSE_LR
            ),
        )
    estimator = upstream.TPUEstimator(
        model_fn=programs.make_model_fn(case, columns, spec_cls=upstream.TPUEstimatorSpec),
        config=tf.compat.v1.estimator.tpu.RunConfig(model_dir=str(tmp_path)),
        use_tpu=False,
        train_batch_size=programs.G,
        embedding_config_spec=spec,
    )
    estimator.train(programs.make_input_fn(case, "train"), max_steps=programs.STEPS)
    expected = programs.train_oracle(case)
    np.testing.assert_allclose(estimator.get_variable_value("u"), expected["u"], atol=2e-5)
    for table, variable in programs.table_variable_names(case, estimator.get_variable_names()).items():
        np.testing.assert_allclose(
            estimator.get_variable_value(variable), expected["tables"][table]["params"], atol=2e-5, err_msg=variable
        )
    assert cases.expected_error(case) is None
