"""Embedding optimizers against the NumPy reference (docs/SEMANTICS.md 9), TF kernels and upstream's checks."""

import numpy as np
import pytest
import tensorflow as tf

import embedding
from embedding import optimizers as opt_lib
from tests.oracles import optimizers as ref

TOL = dict(rtol=1e-5, atol=1e-5)
N, DIM, STEPS = 5, 3, 4


def _rows(seed, scale=1.0, shape=(N, DIM)):
    return (np.random.RandomState(seed).randn(*shape) * scale).astype(np.float32)


def _run_ours(opt, kind_state, grads_per_step, mode="eager"):
    """Runs apply_rows for len(grads_per_step) steps; returns final {'params', slots} as numpy."""
    params = kind_state["params"].astype(np.float32)
    slots = {k: v.astype(np.float32) for k, v in kind_state.items() if k != "params"}
    if mode == "eager":
        for g in grads_per_step:
            params, slots = opt.apply_rows(params, slots, g, opt.learning_rate_tensor())
    elif mode == "function":

        @tf.function
        def one(p, s, g):
            return opt.apply_rows(p, s, g, opt.learning_rate_tensor())

        for g in grads_per_step:
            params, slots = one(tf.constant(params), {k: tf.constant(v) for k, v in slots.items()}, g)
    out = {"params": np.asarray(params)}
    out.update({k: np.asarray(v) for k, v in slots.items()})
    return out


def _run_reference(kind, hparams, state, grads_per_step, lrs):
    state = {k: v.astype(np.float64) for k, v in state.items()}
    for g, lr in zip(grads_per_step, lrs):
        state = ref.step(kind, state, g, lr, **hparams)
    return state


def _assert_states_close(ours, theirs):
    assert sorted(ours) == sorted(theirs)
    for k in theirs:
        np.testing.assert_allclose(ours[k], theirs[k], err_msg=k, **TOL)


# (id, our optimizer factory, reference kind, reference hyper-parameters, learning rate)
CASES = [
    ("sgd", lambda: embedding.SGD(0.1), "sgd", {}, 0.1),
    (
        "sgd_clipvalue",
        lambda: embedding.SGD(0.1, clipvalue=0.5),
        "sgd",
        dict(clip_gradient_min=-0.5, clip_gradient_max=0.5),
        0.1,
    ),
    (
        "sgd_clip_tuple_one_sided",
        lambda: embedding.SGD(0.1, clipvalue=(None, 0.3)),
        "sgd",
        dict(clip_gradient_max=0.3),
        0.1,
    ),
    ("sgd_decay", lambda: embedding.SGD(0.1, weight_decay_factor=0.05), "sgd", dict(weight_decay_factor=0.05), 0.1),
    (
        "sgd_decay_times_lr",
        lambda: embedding.SGD(0.1, weight_decay_factor=0.05, multiply_weight_decay_factor_by_learning_rate=True),
        "sgd",
        dict(weight_decay_factor=0.05, multiply_weight_decay_factor_by_learning_rate=True),
        0.1,
    ),
    (
        "sgd_weight_clip",
        lambda: embedding.SGD(0.5, clip_weight_min=-0.4, clip_weight_max=0.6),
        "sgd",
        dict(clip_weight_min=-0.4, clip_weight_max=0.6),
        0.5,
    ),
    ("adagrad", lambda: embedding.Adagrad(0.2), "adagrad", {}, 0.2),
    (
        "adagrad_all_options",
        lambda: embedding.Adagrad(
            0.2,
            initial_accumulator_value=0.5,
            clipvalue=(-0.7, 0.4),
            weight_decay_factor=0.1,
            multiply_weight_decay_factor_by_learning_rate=True,
            clip_weight_min=-1.0,
            clip_weight_max=1.2,
        ),
        "adagrad",
        dict(
            clip_gradient_min=-0.7,
            clip_gradient_max=0.4,
            weight_decay_factor=0.1,
            multiply_weight_decay_factor_by_learning_rate=True,
            clip_weight_min=-1.0,
            clip_weight_max=1.2,
        ),
        0.2,
    ),
    (
        "adagrad_momentum",
        lambda: embedding.AdagradMomentum(0.1, momentum=0.9),
        "adagrad_momentum",
        dict(momentum=0.9),
        0.1,
    ),
    (
        "adagrad_momentum_nesterov",
        lambda: embedding.AdagradMomentum(0.1, momentum=0.8, use_nesterov=True),
        "adagrad_momentum",
        dict(momentum=0.8, use_nesterov=True),
        0.1,
    ),
    (
        "adagrad_momentum_beta2_exponent",
        lambda: embedding.AdagradMomentum(0.1, momentum=0.5, beta2=0.9, exponent=4, epsilon=1e-3, use_nesterov=True),
        "adagrad_momentum",
        dict(momentum=0.5, beta2=0.9, exponent=4, epsilon=1e-3, use_nesterov=True),
        0.1,
    ),
    (
        "adagrad_momentum_decay_clip",
        lambda: embedding.AdagradMomentum(
            0.1, momentum=0.9, clipvalue=0.5, weight_decay_factor=0.02, clip_weight_max=0.8
        ),
        "adagrad_momentum",
        dict(
            momentum=0.9, clip_gradient_min=-0.5, clip_gradient_max=0.5, weight_decay_factor=0.02, clip_weight_max=0.8
        ),
        0.1,
    ),
    ("adam_sum_inside_sqrt", lambda: embedding.Adam(0.05), "adam", {}, 0.05),
    (
        "adam_sqrt_plus_eps",
        lambda: embedding.Adam(0.05, sum_inside_sqrt=False, epsilon=1e-3),
        "adam",
        dict(sum_inside_sqrt=False, adam_epsilon=1e-3),
        0.05,
    ),
    (
        "adam_eps_inside",
        lambda: embedding.Adam(0.05, epsilon=1e-2, beta_1=0.5, beta_2=0.7),
        "adam",
        dict(adam_epsilon=1e-2, beta_1=0.5, beta_2=0.7),
        0.05,
    ),
    (
        "adam_decay_clip",
        lambda: embedding.Adam(
            0.05,
            clipvalue=0.3,
            weight_decay_factor=0.1,
            multiply_weight_decay_factor_by_learning_rate=True,
            clip_weight_min=-0.9,
        ),
        "adam",
        dict(
            clip_gradient_min=-0.3,
            clip_gradient_max=0.3,
            weight_decay_factor=0.1,
            multiply_weight_decay_factor_by_learning_rate=True,
            clip_weight_min=-0.9,
        ),
        0.05,
    ),
    ("ftrl", lambda: embedding.FTRL(0.1), "ftrl", {}, 0.1),
    (
        "ftrl_l1_l2_beta",
        lambda: embedding.FTRL(0.1, l1_regularization_strength=0.05, l2_regularization_strength=0.2, beta=0.3),
        "ftrl",
        dict(l1=0.05, l2=0.2, beta=0.3),
        0.1,
    ),
    (
        "ftrl_multiply_linear_l1_l2_beta",
        lambda: embedding.FTRL(
            0.1,
            l1_regularization_strength=0.05,
            l2_regularization_strength=0.2,
            beta=0.3,
            multiply_linear_by_learning_rate=True,
        ),
        "ftrl",
        dict(l1=0.05, l2=0.2, beta=0.3, multiply_linear_by_learning_rate=True),
        0.1,
    ),
    (
        "ftrl_power_initial_acc",
        lambda: embedding.FTRL(
            0.3, learning_rate_power=-0.3, initial_accumulator_value=0.5, l1_regularization_strength=0.01
        ),
        "ftrl",
        dict(learning_rate_power=-0.3, l1=0.01),
        0.3,
    ),
    (
        "ftrl_power_zero",
        lambda: embedding.FTRL(0.3, learning_rate_power=0.0, l2_regularization_strength=0.1),
        "ftrl",
        dict(learning_rate_power=0.0, l2=0.1),
        0.3,
    ),
    (
        "ftrl_decay_clip",
        lambda: embedding.FTRL(
            0.1,
            l1_regularization_strength=0.02,
            clipvalue=(-0.4, 0.6),
            weight_decay_factor=0.1,
            clip_weight_min=-0.5,
            clip_weight_max=0.5,
            multiply_linear_by_learning_rate=True,
        ),
        "ftrl",
        dict(
            l1=0.02,
            clip_gradient_min=-0.4,
            clip_gradient_max=0.6,
            weight_decay_factor=0.1,
            clip_weight_min=-0.5,
            clip_weight_max=0.5,
            multiply_linear_by_learning_rate=True,
        ),
        0.1,
    ),
]


def _initial_state(kind, opt, seed=0):
    params = _rows(seed)
    state = ref.init_state(kind, params, initial_accumulator_value=getattr(opt, "initial_accumulator_value", 0.1))
    # Check our slot initializers agree with the reference's initial state.
    for name, init in zip(opt.slot_names(), opt.slot_initializers()):
        np.testing.assert_allclose(init([N, DIM], tf.float32).numpy(), state[name], **TOL)
    return state


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_apply_rows_matches_numpy_reference(case):
    _, factory, kind, hparams, lr = case
    opt = factory()
    state = _initial_state(kind, opt)
    grads = [_rows(100 + i) for i in range(STEPS)]
    ours = _run_ours(opt, state, grads)
    theirs = _run_reference(kind, hparams, state, grads, [lr] * STEPS)
    _assert_states_close(ours, theirs)


@pytest.mark.parametrize(
    "case",
    [c for c in CASES if c[0] in ("adam_decay_clip", "ftrl_l1_l2_beta", "adagrad_momentum_nesterov")],
    ids=lambda c: c[0],
)
def test_apply_rows_in_tf_function(case):
    _, factory, kind, hparams, lr = case
    opt = factory()
    state = _initial_state(kind, opt)
    grads = [_rows(200 + i) for i in range(STEPS)]
    _assert_states_close(
        _run_ours(opt, state, grads, mode="function"), _run_reference(kind, hparams, state, grads, [lr] * STEPS)
    )


def test_apply_rows_in_tf1_while_loop_with_callable_lr():
    """TF1 graph, apply_rows inside tf.compat.v1.while_loop, learning rate from a placeholder-fed callable."""
    hparams = dict(l1=0.05, l2=0.2, beta=0.3)
    state = ref.init_state("ftrl", _rows(1))
    grads = _rows(2)
    with tf.Graph().as_default():
        lr_ph = tf.compat.v1.placeholder(tf.float32, [])
        opt = embedding.FTRL(lambda: lr_ph, l1_regularization_strength=0.05, l2_regularization_strength=0.2, beta=0.3)

        def body(i, p, acc, lin):
            new_p, new_s = opt.apply_rows(p, {"accumulators": acc, "linears": lin}, grads, opt.learning_rate_tensor())
            return i + 1, new_p, new_s["accumulators"], new_s["linears"]

        out = tf.compat.v1.while_loop(
            lambda i, *_: i < 3,
            body,
            [
                tf.constant(0),
                tf.constant(state["params"], tf.float32),
                tf.constant(state["accumulators"], tf.float32),
                tf.constant(state["linears"], tf.float32),
            ],
        )
        with tf.compat.v1.Session() as sess:
            _, p, acc, lin = sess.run(out, {lr_ph: 0.2})
    theirs = _run_reference("ftrl", hparams, state, [grads] * 3, [0.2] * 3)
    _assert_states_close({"params": p, "accumulators": acc, "linears": lin}, theirs)


def test_callable_learning_rate_is_called_every_step():
    schedule = iter([0.3, 0.2, 0.1, 0.05])
    opt = embedding.Adagrad(
        lambda: next(schedule), weight_decay_factor=0.1, multiply_weight_decay_factor_by_learning_rate=True
    )
    state = ref.init_state("adagrad", _rows(3))
    grads = [_rows(10 + i) for i in range(4)]
    _assert_states_close(
        _run_ours(opt, state, grads),
        _run_reference(
            "adagrad",
            dict(weight_decay_factor=0.1, multiply_weight_decay_factor_by_learning_rate=True),
            state,
            grads,
            [0.3, 0.2, 0.1, 0.05],
        ),
    )


def test_learning_rate_tensor_types():
    assert embedding.SGD(0.5).learning_rate_tensor().dtype == tf.float32
    lr = embedding.SGD(lambda: tf.constant(0.25, tf.float64)).learning_rate_tensor()
    assert lr.dtype == tf.float32 and lr.shape == [] and float(lr) == 0.25
    var = tf.Variable(0.125)
    assert float(embedding.Adam(lambda: var).learning_rate_tensor()) == 0.125


def test_lazy_flag():
    assert embedding.Adam().lazy
    assert not embedding.Adam(lazy_adam=False).lazy
    for cls in (embedding.SGD, embedding.Adagrad, embedding.AdagradMomentum, embedding.FTRL):
        assert cls().lazy


@pytest.mark.quick
def test_non_lazy_adam_table_step_touches_untouched_rows():
    """Non-lazy Adam = apply_rows on all rows with zero gradients for absent ids (checked on a full table)."""
    opt = embedding.Adam(0.1, lazy_adam=False)
    vocab = 6
    table = ref.init_state("adam", _rows(4, shape=(vocab, DIM)))
    table = ref.step("adam", table, _rows(5, shape=(vocab, DIM)), 0.1)  # give all rows non-zero moments
    ids = np.array([1, 4, 1])
    occ = _rows(6, shape=(3, DIM))
    theirs = ref.lazy_table_step("adam", table, ids, occ, 0.1, lazy=False)
    dense = np.zeros((vocab, DIM), np.float32)
    np.add.at(dense, ids, occ)
    p, s = opt.apply_rows(
        table["params"].astype(np.float32), {k: table[k].astype(np.float32) for k in opt.slot_names()}, dense, 0.1
    )
    _assert_states_close({"params": p.numpy(), **{k: v.numpy() for k, v in s.items()}}, theirs)
    lazy = ref.lazy_table_step("adam", table, ids, occ, 0.1, lazy=True)
    assert not np.allclose(lazy["params"][0], theirs["params"][0])  # the untouched row moved only when non-lazy


# ---- slots --------------------------------------------------------------------------------------------------------

UPSTREAM = tf.tpu.experimental.embedding


@pytest.mark.parametrize(
    "ours,theirs",
    [
        (embedding.SGD(), UPSTREAM.SGD()),
        (embedding.Adagrad(initial_accumulator_value=0.3), UPSTREAM.Adagrad(initial_accumulator_value=0.3)),
        (embedding.AdagradMomentum(), UPSTREAM.AdagradMomentum()),
        (embedding.Adam(), UPSTREAM.Adam()),
        (embedding.FTRL(initial_accumulator_value=0.2), UPSTREAM.FTRL(initial_accumulator_value=0.2)),
    ],
    ids=["SGD", "Adagrad", "AdagradMomentum", "Adam", "FTRL"],
)
def test_slot_names_and_initializers_match_upstream(ours, theirs):
    assert ours.slot_names() == theirs._slot_names()
    for mine, up in zip(ours.slot_initializers(), theirs._slot_initializers()):
        np.testing.assert_array_equal(mine([3, 2], tf.float32).numpy(), up([3, 2], tf.float32).numpy())


def test_estimator_slot_variable_names():
    assert embedding.Adagrad().estimator_slot_variable_names("t") == {"accumulators": "t/Adagrad"}
    assert embedding.Adam().estimator_slot_variable_names("t") == {"momenta": "t/Adam/m", "velocities": "t/Adam/v"}
    assert embedding.FTRL().estimator_slot_variable_names("t") == {"accumulators": "t/Ftrl", "linears": "t/Ftrl_1"}
    assert embedding.RMSProp().slot_names() == ["ms", "mom"]
    assert embedding.SGD().estimator_slot_variable_names("t") == {}


# ---- argument checks (message equality with upstream) ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("SGD", dict(use_gradient_accumulation=False, clipvalue=1.0)),
        ("Adagrad", dict(initial_accumulator_value=0.0)),
        ("Adagrad", dict(slot_variable_creation_fn=3)),
        ("AdagradMomentum", dict(epsilon=0.0)),
        ("AdagradMomentum", dict(exponent=0)),
        ("Adam", dict(beta_1=1.0)),
        ("Adam", dict(epsilon=0.0)),
        ("Adam", dict(lazy_adam=False, use_gradient_accumulation=False)),
        ("FTRL", dict(initial_accumulator_value=-1.0)),
    ],
)
def test_argument_checks_match_upstream_messages(name, kwargs):
    with pytest.raises(ValueError) as theirs:
        getattr(UPSTREAM, name)(**kwargs)
    with pytest.raises(ValueError) as ours:
        getattr(embedding, name)(**kwargs)
    assert str(ours.value) == str(theirs.value)


def test_adam_beta_2_message_names_the_bad_value():
    with pytest.raises(ValueError, match=r"Argument `beta_2` must be >= 0 and < 1. Received: 1.5."):
        embedding.Adam(beta_2=1.5)


V1 = tf.compat.v1.tpu.experimental


@pytest.mark.upstream
@pytest.mark.parametrize(
    "name,args,kwargs",
    [
        ("AdagradParameters", (0.1,), dict(initial_accumulator=0.0)),
        ("AdagradParameters", (0.1,), dict(use_gradient_accumulation=False, clip_gradient_min=-1.0)),
        ("AdamParameters", (0.1,), dict(beta1=-0.1)),
        ("AdamParameters", (0.1,), dict(beta2=1.0)),
        ("AdamParameters", (0.1,), dict(epsilon=0.0)),
        ("AdamParameters", (0.1,), dict(lazy_adam=False, use_gradient_accumulation=False)),
        ("FtrlParameters", (0.1,), dict(learning_rate_power=0.5)),
        ("FtrlParameters", (0.1,), dict(initial_accumulator_value=-0.1)),
        ("FtrlParameters", (0.1,), dict(l1_regularization_strength=-0.1)),
        ("FtrlParameters", (0.1,), dict(l2_regularization_strength=-0.1)),
    ],
)
def test_estimator_argument_checks_match_upstream_messages(name, args, kwargs):
    with pytest.raises(ValueError) as theirs:
        getattr(V1, name)(*args, **kwargs)
    with pytest.raises(ValueError) as ours:
        getattr(embedding, name)(*args, **kwargs)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.upstream
def test_estimator_only_argument_checks():
    from tensorflow.python.tpu import tpu_embedding as upstream_v1

    for name, kwargs in [
        ("ProximalAdagradParameters", dict(initial_accumulator=0.0)),
        ("ProximalAdagradParameters", dict(l1_regularization_strength=-1.0)),
        ("AdagradMomentumParameters", dict(momentum=0.9, epsilon=-1.0)),
    ]:
        with pytest.raises(ValueError) as theirs:
            getattr(upstream_v1, name)(0.1, **kwargs)
        with pytest.raises(ValueError) as ours:
            getattr(embedding, name)(0.1, **kwargs)
        assert str(ours.value) == str(theirs.value)


def test_estimator_adam_epsilon_default_differs_from_mid_level():
    assert embedding.AdamParameters(0.1).to_optimizer().epsilon == 1e-8
    assert embedding.Adam().epsilon == 1e-7


# ---- to_optimizer ----------------------------------------------------------------------------------------------------


def _fields(opt):
    return {k: v for k, v in opt.__dict__.items()}


def test_to_optimizer_on_upstream_mid_level_objects():
    lr_fn = lambda: 0.5  # noqa: E731
    slot_fn = lambda table, names, inits: {}  # noqa: E731
    # Each mid-level optimizer built by upstream and by us from the same arguments.
    arguments = [
        (
            "SGD",
            (0.2,),
            dict(
                clipvalue=(None, 1.0),
                weight_decay_factor=0.1,
                multiply_weight_decay_factor_by_learning_rate=True,
                clip_weight_min=-2.0,
            ),
        ),
        ("Adagrad", (lr_fn,), dict(initial_accumulator_value=0.4, slot_variable_creation_fn=slot_fn, clipvalue=2.0)),
        (
            "AdagradMomentum",
            (0.1,),
            dict(momentum=0.7, use_nesterov=True, exponent=3, beta2=0.9, epsilon=1e-4, clip_weight_max=3.0),
        ),
        ("Adam", (0.1,), dict(beta_1=0.8, beta_2=0.95, epsilon=1e-5, lazy_adam=False, sum_inside_sqrt=False)),
        (
            "FTRL",
            (0.1,),
            dict(
                learning_rate_power=-0.2,
                l1_regularization_strength=0.1,
                l2_regularization_strength=0.2,
                beta=0.3,
                initial_accumulator_value=0.4,
                multiply_linear_by_learning_rate=True,
                allow_zero_accumulator=True,
                low_dimensional_packing_status=True,
            ),
        ),
    ]
    pairs = [
        (getattr(UPSTREAM, name)(*args, **kwargs), getattr(embedding, name)(*args, **kwargs))
        for name, args, kwargs in arguments
    ]
    for upstream_obj, expected in pairs:
        converted = embedding.to_optimizer(upstream_obj)
        assert type(converted) is type(expected)
        assert _fields(converted) == _fields(expected)
        assert converted == expected


@pytest.mark.upstream
def test_to_optimizer_on_estimator_parameters_ours_and_upstream():
    from tensorflow.python.tpu import tpu_embedding as upstream_v1

    cases = [
        (
            "StochasticGradientDescentParameters",
            (0.1,),
            dict(clip_gradient_min=-1.0, weight_decay_factor=0.2),
            embedding.SGD,
            dict(clip_gradient_min=-1.0, clip_gradient_max=None, weight_decay_factor=0.2),
        ),
        (
            "AdagradParameters",
            (0.1,),
            dict(initial_accumulator=0.3, clip_weight_max=2.0),
            embedding.Adagrad,
            dict(initial_accumulator_value=0.3, clip_weight_max=2.0),
        ),
        (
            "AdagradMomentumParameters",
            (0.1, 0.9),
            dict(use_nesterov=True, beta2=0.5),
            embedding.AdagradMomentum,
            dict(momentum=0.9, use_nesterov=True, beta2=0.5),
        ),
        (
            "ProximalAdagradParameters",
            (0.1,),
            dict(l1_regularization_strength=0.1),
            embedding.ProximalAdagrad,
            dict(l1_regularization_strength=0.1, initial_accumulator_value=0.1),
        ),
        (
            "AdamParameters",
            (0.1,),
            dict(beta1=0.5, lazy_adam=False, sum_inside_sqrt=False),
            embedding.Adam,
            dict(beta_1=0.5, beta_2=0.999, epsilon=1e-8, lazy_adam=False, sum_inside_sqrt=False),
        ),
        (
            "FtrlParameters",
            (0.1,),
            dict(initial_accumulator_value=0.0, beta=0.2, allow_zero_accumulator=True),
            embedding.FTRL,
            dict(initial_accumulator_value=0.0, beta=0.2, allow_zero_accumulator=True),
        ),
        (
            "MomentumParameters",
            (0.1, 0.9),
            dict(use_nesterov=True),
            embedding.Momentum,
            dict(momentum=0.9, use_nesterov=True),
        ),
        ("RMSPropParameters", (0.1, 0.9, 0.5, 1e-6), {}, embedding.RMSProp, dict(rho=0.9, momentum=0.5, epsilon=1e-6)),
    ]
    for name, args, kwargs, cls, expected in cases:
        for source in (getattr(embedding, name)(*args, **kwargs), getattr(upstream_v1, name)(*args, **kwargs)):
            opt = embedding.to_optimizer(source)
            assert type(opt) is cls, name
            assert opt.learning_rate == 0.1
            for key, value in expected.items():
                assert getattr(opt, key) == value, (name, key)


@pytest.mark.upstream
def test_to_optimizer_rejects_unsupported_upstream_parameters():
    from tensorflow.python.tpu import tpu_embedding as upstream_v1

    with pytest.raises(TypeError, match="ProximalYogiParameters"):
        embedding.to_optimizer(upstream_v1.ProximalYogiParameters())


def test_to_optimizer_identity_unsupported_and_learning_rate_fn():
    ours = embedding.SGD(0.1)
    assert embedding.to_optimizer(ours) is ours
    with pytest.raises(TypeError, match="str"):
        embedding.to_optimizer("sgd")
    with pytest.raises(TypeError, match="SGD"):  # same class name as the embedding SGD, but a Keras optimizer
        embedding.to_optimizer(tf.keras.optimizers.SGD(0.1))
    step = tf.Variable(10, dtype=tf.int64)
    dyn = embedding.to_optimizer(
        embedding.AdagradParameters(0.1), learning_rate_fn=lambda s: 0.01 * tf.cast(s, tf.float32), global_step=step
    )
    assert float(dyn.learning_rate_tensor()) == pytest.approx(0.1)
    step.assign(20)
    assert float(dyn.learning_rate_tensor()) == pytest.approx(0.2)
    assert isinstance(dyn, embedding.Adagrad) and dyn.initial_accumulator_value == 0.1
    with tf.Graph().as_default():
        gs = tf.compat.v1.train.get_or_create_global_step()
        lazy_step = embedding.to_optimizer(embedding.SGD(1.0), learning_rate_fn=lambda s: tf.cast(s, tf.float32) + 1)
        lr = lazy_step.learning_rate_tensor()
        with tf.compat.v1.Session() as sess:
            sess.run(gs.initializer)
            assert sess.run(lr) == 1.0
    assert ours.learning_rate == 0.1  # the original is not modified


def test_learning_rate_fn_without_global_step_is_a_clear_error():
    with tf.Graph().as_default():
        opt = embedding.to_optimizer(embedding.SGD(1.0), learning_rate_fn=lambda s: s)
        with pytest.raises(ValueError, match="global step"):
            opt.learning_rate_tensor()


def test_estimator_ftrl_zero_accumulator_gives_finite_values():
    opt = embedding.FtrlParameters(0.1, initial_accumulator_value=0.0, allow_zero_accumulator=True).to_optimizer()
    params, slots = opt.apply_rows(
        np.zeros([2, 2], np.float32),
        {"accumulators": np.zeros([2, 2], np.float32), "linears": np.zeros([2, 2], np.float32)},
        np.array([[0.0, 1.0], [0.0, -2.0]], np.float32),
        0.1,
    )
    assert np.all(np.isfinite(params.numpy()))
    state = ref.step(
        "ftrl",
        {"params": np.zeros([1, 1]), "accumulators": np.zeros([1, 1]), "linears": np.zeros([1, 1])},
        np.array([[1.0]]),
        0.1,
    )
    np.testing.assert_allclose(params.numpy()[0, 1], state["params"][0, 0], **TOL)


# ---- fused kernels -----------------------------------------------------------------------------------------------

FUSED = [
    ("sgd", lambda: embedding.SGD(0.3)),
    ("adagrad", lambda: embedding.Adagrad(0.3, initial_accumulator_value=0.2)),
    ("ftrl", lambda: embedding.FTRL(0.3, l1_regularization_strength=0.05, l2_regularization_strength=0.1)),
    ("ftrl_power", lambda: embedding.FTRL(0.3, learning_rate_power=-0.3, l1_regularization_strength=0.05)),
    (
        "ftrl_multiply_linear",
        lambda: embedding.FTRL(
            0.3, l1_regularization_strength=0.05, l2_regularization_strength=0.1, multiply_linear_by_learning_rate=True
        ),
    ),
    (
        "proximal_adagrad_l1",
        lambda: embedding.ProximalAdagrad(0.3, l1_regularization_strength=0.1, l2_regularization_strength=0.2),
    ),
    ("proximal_adagrad_l2_only", lambda: embedding.ProximalAdagrad(0.3, l2_regularization_strength=0.2)),
    ("momentum", lambda: embedding.Momentum(0.3, momentum=0.9)),
    ("momentum_nesterov", lambda: embedding.Momentum(0.3, momentum=0.9, use_nesterov=True)),
    ("rmsprop", lambda: embedding.RMSProp(0.3, rho=0.8, momentum=0.5, epsilon=1e-3)),
]


def _variables(opt, vocab=7, seed=0):
    params = tf.Variable(_rows(seed, shape=(vocab, DIM)))
    slots = {}
    for i, (name, init) in enumerate(zip(opt.slot_names(), opt.slot_initializers())):
        # Start from non-trivial slot values so every term of the rule is exercised.
        value = init([vocab, DIM], tf.float32) + np.abs(_rows(50 + i, 0.5, (vocab, DIM)))
        slots[name] = tf.Variable(value)
    return params, slots


@pytest.mark.parametrize("case", FUSED, ids=[c[0] for c in FUSED])
def test_fused_sparse_apply_equals_apply_rows(case):
    opt = case[1]()
    assert opt.supports_fused_sparse_apply()
    params, slots = _variables(opt)
    ids = tf.constant([5, 0, 3], tf.int64)
    for step in range(3):
        grads = _rows(300 + step, shape=(3, DIM))
        before_p = params.numpy()
        before_s = {k: v.numpy() for k, v in slots.items()}
        lr = opt.learning_rate_tensor()
        expected_p, expected_s = opt.apply_rows(
            tf.gather(before_p, ids), {k: tf.gather(v, ids) for k, v in before_s.items()}, grads, lr
        )
        assert opt.fused_sparse_apply(params, slots, ids, grads, lr) is not None
        np.testing.assert_allclose(tf.gather(params, ids).numpy(), expected_p.numpy(), rtol=2e-6, atol=2e-6)
        for k in slots:
            np.testing.assert_allclose(tf.gather(slots[k], ids).numpy(), expected_s[k].numpy(), rtol=2e-6, atol=2e-6)
        untouched = [1, 2, 4, 6]
        np.testing.assert_array_equal(params.numpy()[untouched], before_p[untouched])


@pytest.mark.parametrize(
    "opt",
    [
        embedding.SGD(0.1, clipvalue=1.0),
        embedding.Adagrad(0.1, weight_decay_factor=0.1),
        embedding.FTRL(0.1, beta=0.1),
        embedding.FTRL(0.1, clip_weight_max=1.0),
        embedding.Adam(0.1),
        embedding.AdagradMomentum(0.1),
    ],
    ids=["sgd_clip", "adagrad_decay", "ftrl_beta", "ftrl_weight_clip", "adam", "adagrad_momentum"],
)
def test_fused_sparse_apply_declines_when_not_exact(opt):
    assert not opt.supports_fused_sparse_apply()
    params, slots = _variables(opt)
    before = params.numpy()
    assert opt.fused_sparse_apply(params, slots, tf.constant([0]), _rows(1, shape=(1, DIM)), 0.1) is None
    np.testing.assert_array_equal(params.numpy(), before)


def test_fused_sparse_apply_returns_op_in_graph_mode():
    with tf.Graph().as_default():
        opt = embedding.Adagrad(0.5)
        params = tf.compat.v1.get_variable("p", initializer=tf.ones([4, 2]), use_resource=True)
        acc = tf.compat.v1.get_variable("a", initializer=tf.fill([4, 2], 0.1), use_resource=True)
        op = opt.fused_sparse_apply(
            params, {"accumulators": acc}, tf.constant([2]), tf.ones([1, 2]), opt.learning_rate_tensor()
        )
        assert isinstance(op, tf.Operation)
        ref_var = tf.compat.v1.get_variable("r", initializer=tf.ones([4, 2]), use_resource=False)
        assert opt.fused_sparse_apply(ref_var, {"accumulators": acc}, tf.constant([2]), tf.ones([1, 2]), 0.5) is None
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(op)
            np.testing.assert_allclose(sess.run(params)[2], 1 - 0.5 / np.sqrt(1.1), rtol=1e-6)


def test_clipping_composes_with_kernel_rules():
    """Extras on the kernel-defined optimizers: clip g, run the kernel rule, clip w."""
    opt = embedding.RMSProp(0.3, rho=0.8, momentum=0.5, epsilon=1e-3, clipvalue=0.2, clip_weight_min=-0.1)
    plain = embedding.RMSProp(0.3, rho=0.8, momentum=0.5, epsilon=1e-3)
    p, s = _rows(1), {"ms": np.abs(_rows(2)), "mom": _rows(3)}
    g = _rows(4)
    got_p, got_s = opt.apply_rows(p, s, g, 0.3)
    want_p, want_s = plain.apply_rows(p, s, np.clip(g, -0.2, 0.2), 0.3)
    np.testing.assert_allclose(got_p.numpy(), np.maximum(want_p.numpy(), -0.1), **TOL)
    np.testing.assert_allclose(got_s["mom"].numpy(), want_s["mom"].numpy(), **TOL)


def test_equality_and_hash():
    assert embedding.Adam(0.1) == embedding.Adam(0.1)
    assert embedding.Adam(0.1) != embedding.Adam(0.2)
    assert hash(embedding.Adam(0.1)) == hash(embedding.Adam(0.1))
    assert embedding.SGD(0.1) != embedding.Adagrad(0.1)
    assert opt_lib.is_optimizer(embedding.SGD()) and not opt_lib.is_optimizer(embedding.AdagradParameters(0.1))


@pytest.mark.parametrize(
    "version, fused", [("2.15.1", True), ("2.18.0", True), ("2.19.1", True), ("2.20.0", False), ("2.21.0", False)]
)
def test_fused_kernels_are_preferred_before_tensorflow_2_20(monkeypatch, version, fused):
    """TF 2.20 made the sparse-apply kernels 2-4x slower per row: from there the table takes gather/rule/scatter."""
    monkeypatch.setattr(tf, "__version__", version)
    assert embedding.optimizers.prefer_fused_sparse_apply() is fused


@pytest.mark.parametrize("prefer_fused", [True, False])
def test_sharded_table_update_is_the_same_rule_on_either_path(monkeypatch, prefer_fused):
    """The table's Adagrad update equals the formula whether the fused kernel or gather/rule/scatter runs."""
    from embedding import optimizers as optimizers_lib
    from embedding.sharded_table import ShardedTable

    monkeypatch.setattr(optimizers_lib, "prefer_fused_sparse_apply", lambda: prefer_fused)
    with tf.Graph().as_default() as graph:
        table = ShardedTable(
            embedding.TableConfig(6, 2, initializer=tf.constant_initializer(1.0), name="t"),
            embedding.Adagrad(0.5, initial_accumulator_value=0.1),
            num_shards=2,
        )
        ids = tf.constant([1, 4], tf.int64)
        grads = tf.constant([[1.0, 2.0], [3.0, -1.0]])
        update = table.apply_gradients(ids, grads)
        op_types = {op.type for op in graph.get_operations()}
        assert ("ResourceSparseApplyAdagrad" in op_types) is prefer_fused
        with tf.compat.v1.Session() as sess:
            sess.run(table.initializer)
            sess.run(update)
            rows = sess.run(table.lookup(tf.constant([0, 1, 4], tf.int64)))
    accum = 0.1 + np.array([[1.0, 4.0], [9.0, 1.0]])
    expected = 1.0 - 0.5 * np.array([[1.0, 2.0], [3.0, -1.0]]) / np.sqrt(accum)
    np.testing.assert_allclose(rows, np.vstack([[1.0, 1.0], expected]), rtol=1e-6)


def _parameters(cls):
    import inspect

    return [(p.name, p.default, p.kind) for p in inspect.signature(cls).parameters.values()]


@pytest.mark.parametrize("name", ["SGD", "Adagrad", "AdagradMomentum", "Adam", "FTRL"])
def test_mid_level_signatures_are_tensorflows(name):
    """Names, order (positional or keyword), defaults: the constructors `_constructor` declares are TensorFlow's."""
    assert _parameters(getattr(opt_lib, name)) == _parameters(getattr(tf.tpu.experimental.embedding, name))


@pytest.mark.upstream
@pytest.mark.parametrize(
    "name",
    [
        "StochasticGradientDescentParameters",
        "AdagradParameters",
        "AdagradMomentumParameters",
        "ProximalAdagradParameters",
        "AdamParameters",
        "FtrlParameters",
        "MomentumParameters",
        "RMSPropParameters",
    ],
)
def test_estimator_style_signatures_are_upstreams(name):
    from tensorflow.python.tpu import tpu_embedding as upstream

    assert _parameters(getattr(opt_lib, name)) == _parameters(getattr(upstream, name))


def test_a_constructor_takes_positional_arguments_and_names_a_missing_one():
    opt = opt_lib.Adagrad(0.5, 0.2, True, -1.0, 1.0)
    assert (opt.learning_rate, opt.initial_accumulator_value, opt.clip_weight_min, opt.clip_weight_max) == (
        0.5,
        0.2,
        -1.0,
        1.0,
    )
    with pytest.raises(TypeError, match="MomentumParameters.__init__.. missing a required argument: 'momentum'"):
        opt_lib.MomentumParameters(0.1)
    with pytest.raises(TypeError, match="SGD.__init__.. got an unexpected keyword argument 'beta'"):
        opt_lib.SGD(beta=1.0)
