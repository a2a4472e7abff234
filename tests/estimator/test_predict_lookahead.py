"""PREDICT with embeddings looks up the next batch while the current one runs (issue 21; `predict_step.py`).

The model checks the lookahead itself: a batch's step waits (up to a bound) until the input has read the batch after
it. Without the lookahead the next batch is read only by the next `Session.run`, so the wait runs out.
"""

import threading
import time

import numpy as np
import pytest
import tensorflow as tf

import tpu_estimator as te
from tpu_estimator import estimator as tf_estimator
from tpu_estimator import experimental as tex

RNG = np.random.RandomState(11)
G = 8  # global predict batch
BATCHES = 5
N = G * BATCHES - 3  # the last batch is partial (padded, its padding dropped)
IDS = RNG.randint(0, 10, size=(N,)).astype(np.int64)
TABLE = RNG.randn(10, 4).astype(np.float32)
READOUT = np.array([0.5, -1.0, 2.0, 0.25], np.float32)
WAIT_SECS = 5.0


class _BatchesRead(object):
    """Counts the batches the input has produced (a Python counter behind the dataset)."""

    def __init__(self):
        self.count = 0
        self.lock = threading.Condition()

    def produced(self, batch_index):
        with self.lock:
            self.count = max(self.count, int(batch_index) + 1)
            self.lock.notify_all()
        return batch_index

    def wait_for(self, batch_index) -> bool:
        """Whether batch `batch_index + 1` (or the end of the input) was read within WAIT_SECS."""
        wanted = min(int(batch_index) + 2, BATCHES)
        with self.lock:
            return self.lock.wait_for(lambda: self.count >= wanted, timeout=WAIT_SECS)


def _input_fn(reads: _BatchesRead, ids=IDS):
    def input_fn(params):
        rows = tf.data.Dataset.from_tensor_slices({"ids": ids, "row": np.arange(len(ids), dtype=np.int64)})
        batches = rows.batch(params["batch_size"])

        def count(features):
            index = tf.numpy_function(reads.produced, [features["row"][0] // params["batch_size"]], tf.int64)
            features["batch_index"] = tf.fill(tf.shape(features["row"]), tf.reshape(index, []))
            return features

        options = tf.data.Options()
        options.autotune.enabled = False
        options.experimental_optimization.inject_prefetch = False  # the input itself must not read ahead
        return batches.map(count).with_options(options)

    return input_fn


def _model_fn(reads: _BatchesRead):
    def model_fn(features, labels, mode, params):
        bias = tf.compat.v1.get_variable("bias", [], initializer=tf.compat.v1.zeros_initializer())
        logit = tf.linalg.matvec(features["ids"], tf.constant(READOUT)) + bias
        if mode == tf_estimator.ModeKeys.TRAIN:
            # A zero learning rate everywhere: the checkpoint holds TABLE and bias 0.
            loss = tf.reduce_mean(tf.square(logit - labels))
            optimizer = te.CrossShardOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.0))
            return te.TPUEstimatorSpec(
                mode, loss=loss, train_op=optimizer.minimize(loss, tf.compat.v1.train.get_global_step())
            )
        index = features["batch_index"][0]
        ahead = tf.reshape(tf.numpy_function(reads.wait_for, [index], tf.bool), [])
        rows = tf.shape(logit)[0]
        return te.TPUEstimatorSpec(
            mode,
            predictions={
                "logit": logit,
                "row": features["row"],
                "next_batch_read_during_step": tf.fill([rows], ahead),
            },
        )

    return model_fn


class _RunCounter(tf.compat.v1.train.SessionRunHook):
    def __init__(self):
        self.runs = 0

    def after_run(self, run_context, run_values):
        self.runs += 1


def _estimator(tmp_path, reads, num_shards=1):
    spec = tex.EmbeddingConfigSpec(
        table_to_config_dict={"t": tex.TableConfig(10, 4, initializer=tf.compat.v1.constant_initializer(TABLE))},
        feature_to_config_dict={"ids": tex.FeatureConfig("t")},
        optimization_parameters=tex.StochasticGradientDescentParameters(0.0),
    )
    # Each replica's wait blocks one of the session's inter-op threads: leave the input threads to run. The session
    # gets a pool of its own (the process-wide pool is sized by the process's first session, e.g. an earlier test's).
    session_config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=8, use_per_session_threads=True)
    config = te.RunConfig(
        model_dir=str(tmp_path), session_config=session_config, tpu_config=te.TPUConfig(num_shards=num_shards)
    )
    estimator = te.TPUEstimator(
        model_fn=_model_fn(reads),
        config=config,
        train_batch_size=G,
        predict_batch_size=G,
        embedding_config_spec=spec,
    )

    def train_input_fn(params):
        rows = tf.data.Dataset.from_tensor_slices(({"ids": IDS}, np.ones(N, np.float32)))
        return rows.repeat().batch(params["batch_size"], drop_remainder=True)

    estimator.train(train_input_fn, max_steps=1)
    return estimator


@pytest.mark.parametrize("num_shards", [1, 2])
def test_next_batch_is_read_and_looked_up_while_the_current_one_runs(tmp_path, num_shards):
    reads = _BatchesRead()
    estimator = _estimator(tmp_path, reads, num_shards)
    runs = _RunCounter()
    predictions = list(estimator.predict(_input_fn(reads), hooks=[runs]))
    assert [p["row"] for p in predictions] == list(range(N))
    np.testing.assert_allclose([p["logit"] for p in predictions], TABLE[IDS] @ READOUT, rtol=1e-5)
    # Every batch's step found the next batch already read (the wait never ran out).
    assert all(p["next_batch_read_during_step"] for p in predictions)
    # Hooks see one batch per Session.run.
    assert runs.runs == BATCHES


def _infeed_threads():
    return {t for t in threading.enumerate() if t.name == "tensor_infeed" and t.is_alive()}


def test_stopping_early_ends_the_lookahead_and_predict_runs_again(tmp_path):
    reads = _BatchesRead()
    estimator = _estimator(tmp_path, reads)
    long_ids = np.tile(IDS, 10)  # 47 batches: the thread fills its queue and waits to enqueue the next
    before = _infeed_threads()
    generator = estimator.predict(_input_fn(reads, ids=long_ids))
    first = next(generator)
    assert first["row"] == 0
    np.testing.assert_allclose(first["logit"], TABLE[IDS[0]] @ READOUT, rtol=1e-5)
    started = _infeed_threads() - before
    assert len(started) == 1 and reads.count < 47  # blocked on the full queue, not at the end of the input
    generator.close()
    thread = started.pop()
    thread.join(timeout=10)
    assert not thread.is_alive()
    reads.count = 0  # the model's waits read this counter: the second call's input counts from 0 again
    predictions = list(estimator.predict(_input_fn(reads)))
    assert [p["row"] for p in predictions] == list(range(N))
    assert all(p["next_batch_read_during_step"] for p in predictions)


class _StopAfterFirstBatch(tf.compat.v1.train.SessionRunHook):
    """Stops predict after the first batch, once the input has read the bad batch 3 (so the thread failed on it)."""

    def __init__(self, reads: _BatchesRead):
        self._reads = reads

    def after_run(self, run_context, run_values):
        with self._reads.lock:
            self._reads.lock.wait_for(lambda: self._reads.count >= 4, timeout=WAIT_SECS)
        time.sleep(0.5)  # the thread's run that read batch 3 fails in its id check
        run_context.request_stop()


def _bad_ids():
    bad = IDS.copy()
    bad[3 * G + 1] = 10  # batch 3 reads past the table's 10 rows
    return bad


def test_a_bad_id_in_a_later_batch_names_its_feature_after_the_earlier_predictions(tmp_path):
    reads = _BatchesRead()
    estimator = _estimator(tmp_path, reads)
    bad = _bad_ids()
    rows = []
    start = time.perf_counter()
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"Feature .+ids.+ \(table .+t.+\): ids must be in \[0, 10\)"
    ):
        for prediction in estimator.predict(_input_fn(reads, ids=bad)):
            rows.append(prediction["row"])
    assert time.perf_counter() - start < 30
    # The batches before the bad one were predicted, however far the lookahead had read when the error came.
    assert rows == list(range(3 * G))


def test_a_caller_that_stops_before_a_bad_batch_gets_no_error_for_it(tmp_path):
    reads = _BatchesRead()
    estimator = _estimator(tmp_path, reads)
    predictions = list(estimator.predict(_input_fn(reads, ids=_bad_ids()), hooks=[_StopAfterFirstBatch(reads)]))
    assert reads.count >= 4  # the lookahead did read the bad batch
    assert [p["row"] for p in predictions] == list(range(G))
