"""TRAIN's embedding update strategy (`embedding_update.for_training`): one type per way, picked once per loop. The
updates' values are checked by the estimator tests (test_embedding_estimator.py: immediate and pipelined against
NumPy oracles; tests/cluster/test_host_embeddings.py: exchanged)."""

import types

from tpu_estimator.embedding_stage import embedding_update


def _bridge(pipelined: bool):
    return types.SimpleNamespace(pipelined=pipelined)


def test_the_strategy_follows_the_bridge_and_the_exchange():
    assert embedding_update.for_training(None, None) is None
    assert type(embedding_update.for_training(_bridge(False), None)) is embedding_update.ImmediateUpdate
    assert type(embedding_update.for_training(_bridge(True), None)) is embedding_update.PipelinedUpdate
    exchange = object()
    assert type(embedding_update.for_training(_bridge(False), exchange)) is embedding_update.ExchangedUpdate


def test_only_the_pipelined_update_carries_loop_state():
    assert embedding_update.ImmediateUpdate(_bridge(False)).initial_pending() == []
    assert embedding_update.ExchangedUpdate(object()).pending_shape_invariants() == []
    carried = types.SimpleNamespace(
        pipelined=True, empty_pending=lambda: ["ids", "grads"], pending_shape_invariants=lambda: ["s1", "s2"]
    )
    pipelined = embedding_update.PipelinedUpdate(carried)
    assert pipelined.initial_pending() == ["ids", "grads"]
    assert pipelined.pending_shape_invariants() == ["s1", "s2"]
