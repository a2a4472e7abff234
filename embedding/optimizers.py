"""Embedding optimizers with TPU semantics: hyper-parameters, slots and one update rule each.

Two families share one implementation:

* Mid-level optimizers (`SGD`, `Adagrad`, `AdagradMomentum`, `Adam`, `FTRL`) with the arguments, defaults,
  argument checks and slot names of `tf.tpu.experimental.embedding.*` in TensorFlow 2.15, plus `ProximalAdagrad`,
  `Momentum` and `RMSProp` (no mid-level upstream class; they exist so the estimator-style parameters below have an
  optimizer to become).
* Estimator-style parameter classes (`AdagradParameters`, `AdamParameters`, ...) with the constructor arguments
  and checks of `tf.compat.v1.tpu.experimental.*Parameters`. They hold hyper-parameters only;
  `to_optimizer` turns them (and upstream objects of either family) into an optimizer of the first family.

Every optimizer exposes the contract the sharded tables use: `slot_names()`, `slot_initializers()`,
`learning_rate_tensor()`, the pure row update `apply_rows(params, slots, grads, learning_rate)`, `lazy`, and the
optional fused kernel path `fused_sparse_apply(...)`.

Order of operations in `apply_rows` (one call per step on the rows of the unique ids of the step, with the
gradient already summed over every occurrence of each id):

1. gradient clipping to `[clip_gradient_min, clip_gradient_max]` (`clipvalue`);
2. decoupled weight decay `w <- w - decay * w` with `decay = weight_decay_factor` (times the learning rate when
   `multiply_weight_decay_factor_by_learning_rate`). The TPU proto defers to `weight_decay_optimizers.py`
   (`DecoupledWeightDecayExtension`), which decays the weights *before* the gradient update and lets the update
   read the decayed weights. Only FTRL's rule reads the weights, so for every other optimizer this equals
   `w_new = rule(w) - decay * w`. (Upstream's SGD docstring says "multiplying the weight by this factor"; the
   proto and the weight-decay optimizers subtract `factor * w`, which is what we do.)
3. the optimizer's update rule (docs/SEMANTICS.md section 9);
4. weight clipping to `[clip_weight_min, clip_weight_max]`.

`use_gradient_accumulation=False` is accepted (and its argument checks are kept) but the engine always
accumulates, i.e. it computes the exact result a TPU computes with accumulation enabled.
"""

import abc
import copy
import inspect
import textwrap
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import tensorflow as tf

from embedding import graph_constants

ClipValueType = Union[float, Tuple[Optional[float], Optional[float]]]
LearningRateType = Union[float, Callable[[], Any]]
Initializer = Callable[..., tf.Tensor]

__all__ = [
    "ConstantInitializer",
    "SGD",
    "Adagrad",
    "AdagradMomentum",
    "Adam",
    "FTRL",
    "ProximalAdagrad",
    "Momentum",
    "RMSProp",
    "StochasticGradientDescentParameters",
    "AdagradParameters",
    "AdagradMomentumParameters",
    "AdamParameters",
    "FtrlParameters",
    "ProximalAdagradParameters",
    "MomentumParameters",
    "RMSPropParameters",
    "GlobalStepLearningRate",
    "to_optimizer",
    "is_optimizer",
]


class ConstantInitializer:
    """Initializer filling a tensor with one value; called as `init(shape, dtype)`.

    Args:
      value: The fill value.
    """

    def __init__(self, value: float = 0.0):
        self.value = value

    def __call__(self, shape: Sequence[int], dtype: tf.DType = tf.float32, **kwargs) -> tf.Tensor:
        del kwargs  # partition/shard info is irrelevant for a constant.
        if tf.executing_eagerly():
            dims = shape if tf.is_tensor(shape) else tf.TensorShape(shape).as_list()
            return tf.fill(dims, tf.constant(self.value, dtype=dtype))
        # In graphs, Grappler would fold Fill(const, const) into a Const node that keeps the full tensor alive, and the
        # variable, aliasing that buffer, would copy itself on its first sparse update: one extra table of memory per
        # slot. A placeholder_with_default value cannot be folded. The value and the dims are shared by the
        # initialisers built in one `graph_constants.sharing()` block (every shard of every table).
        dims = shape if tf.is_tensor(shape) else graph_constants.constant(tf.TensorShape(shape).as_list(), tf.int32)
        return tf.fill(dims, graph_constants.unfoldable(self.value, dtype))

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ConstantInitializer) and other.value == self.value

    def __hash__(self) -> int:
        return hash((ConstantInitializer, self.value))

    def __repr__(self) -> str:
        return f"ConstantInitializer(value={self.value!r})"


# ---- constructors: the arguments every optimizer shares, declared and documented once ------------------------------

_REQUIRED = inspect.Parameter.empty


class _Arg(NamedTuple):
    """One constructor argument: name, default (`_REQUIRED`: none), annotation, and its line in the docstring."""

    name: str
    default: Any
    annotation: Any
    doc: str


def _learning_rate(default: float) -> _Arg:
    """The mid-level optimizers' first argument."""
    return _Arg("learning_rate", default, LearningRateType, "float or zero-argument callable.")


_LEARNING_RATE = _Arg("learning_rate", _REQUIRED, float, "the learning rate.")  # the estimator-style classes' first


def _shared_args(accumulation: str = "accepted; the engine always accumulates.") -> Tuple[_Arg, ...]:
    """The five arguments every class takes after its own ones, in upstream's order."""
    return (
        _Arg("use_gradient_accumulation", True, bool, accumulation),
        _Arg("clip_weight_min", None, Optional[float], "lower bound for weights after the update; None means -inf."),
        _Arg("clip_weight_max", None, Optional[float], "upper bound for weights after the update; None means +inf."),
        _Arg("weight_decay_factor", None, Optional[float], "decoupled weight decay per step; None/0 disables it."),
        _Arg(
            "multiply_weight_decay_factor_by_learning_rate",
            None,
            Optional[bool],
            "multiply the decay factor by the learning rate.",
        ),
    )


_SHARED_ARGS = _shared_args()
_SLOT_FN = _Arg(
    "slot_variable_creation_fn",
    None,
    Optional[Callable[..., Any]],
    "optional `fn(table_variable, slot_names, slot_initializers) -> dict`.",
)
_CLIPVALUE = _Arg(
    "clipvalue",
    None,
    Optional[ClipValueType],
    "gradient clipping: `c` means `(-c, c)`, or a `(min, max)` pair (either may be None).",
)
_LOW_DIM = _Arg(
    "low_dimensional_packing_status",
    False,
    bool,
    "accepted for compatibility; a TPU memory-layout option with no effect here.",
)
_CLIP_GRADIENT_MIN = _Arg(
    "clip_gradient_min", None, Optional[float], "gradient lower bound; needs gradient accumulation."
)
_CLIP_GRADIENT_MAX = _Arg(
    "clip_gradient_max", None, Optional[float], "gradient upper bound; needs gradient accumulation."
)


def _constructor(*args: _Arg) -> Callable[[type], type]:
    """Class decorator: the class's `__init__(self, *args)`, with upstream's names, order, defaults and annotations
    (positional or keyword, as upstream declares them), passes every argument to `self._configure` by name; the
    `{args}` line of the class docstring becomes the arguments' lines.
    """
    parameters = [
        inspect.Parameter(a.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=a.default, annotation=a.annotation)
        for a in args
    ]
    signature = inspect.Signature(parameters)
    lines = [
        textwrap.fill("{}: {}".format(a.name, a.doc), 114, initial_indent="      ", subsequent_indent="        ")
        for a in args
    ]

    def decorate(cls: type) -> type:
        def __init__(self, *positional: Any, **keywords: Any) -> None:
            try:
                bound = signature.bind(*positional, **keywords)
            except TypeError as error:  # named as Python names a call's missing or unexpected arguments
                raise TypeError("{}.__init__() {}".format(cls.__name__, error)) from None
            bound.apply_defaults()
            self._configure(**bound.arguments)

        self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        __init__.__signature__ = signature.replace(parameters=[self_parameter] + parameters)
        __init__.__qualname__ = cls.__qualname__ + ".__init__"
        __init__.__module__ = cls.__module__
        cls.__init__ = __init__
        cls.__doc__ = cls.__doc__.replace("      {args}", "\n".join(lines))
        return cls

    return decorate


def _scalar(value: Any, dtype: tf.DType) -> tf.Tensor:
    return tf.cast(tf.convert_to_tensor(value), dtype)


class _Optimizer(metaclass=abc.ABCMeta):
    """Base class: common hyper-parameters, clipping, weight decay and the row-update contract. Each optimizer's
    constructor is declared by `_constructor`; it checks and sets its own arguments in `_configure`."""

    def _configure(
        self,
        learning_rate: LearningRateType,
        use_gradient_accumulation: bool,
        clip_weight_min: Optional[float],
        clip_weight_max: Optional[float],
        weight_decay_factor: Optional[float],
        multiply_weight_decay_factor_by_learning_rate: Optional[bool],
        clipvalue: Optional[ClipValueType] = None,
        slot_variable_creation_fn: Optional[Callable[..., Any]] = None,
        low_dimensional_packing_status: bool = False,
    ):
        self.learning_rate = learning_rate
        self.use_gradient_accumulation = use_gradient_accumulation
        self.clip_weight_min = clip_weight_min
        self.clip_weight_max = clip_weight_max
        if not use_gradient_accumulation and clipvalue is not None:
            raise ValueError(
                f"When `use_gradient_accumulation` is False, gradient clipping "
                f"cannot be used and `clipvalue` should be left as None. "
                f"Received value {clipvalue} for argument `clipvalue`."
            )
        if clipvalue is None:
            clipvalue = (None, None)
        elif isinstance(clipvalue, (tuple, list)):
            if len(clipvalue) != 2:
                raise ValueError(f"Argument `clipvalue` must be a scalar or a (min, max) pair. Received: {clipvalue}")
            clipvalue = tuple(clipvalue)
        else:
            clipvalue = (-1.0 * clipvalue, clipvalue)
        self.clip_gradient_min, self.clip_gradient_max = clipvalue
        self.weight_decay_factor = weight_decay_factor
        self.multiply_weight_decay_factor_by_learning_rate = multiply_weight_decay_factor_by_learning_rate
        if slot_variable_creation_fn is not None and not callable(slot_variable_creation_fn):
            raise ValueError(
                f"Argument `slot_variable_creation_fn` must be either None or a "
                f"callable. Received: {slot_variable_creation_fn}"
            )
        self.slot_variable_creation_fn = slot_variable_creation_fn
        self.low_dimensional_packing_status = low_dimensional_packing_status

    # ---- slots -------------------------------------------------------------------------------------------------

    @abc.abstractmethod
    def slot_names(self) -> List[str]:
        """Returns the slot variable names in upstream order (the table itself is not a slot)."""

    @abc.abstractmethod
    def slot_initializers(self) -> List[Initializer]:
        """Returns initializers `(shape, dtype) -> Tensor`, parallel to `slot_names()`."""

    def estimator_slot_variable_names(self, table_name: str) -> Dict[str, str]:
        """Returns the variable names upstream's estimator-style TPUEmbedding gives the slots of `table_name`.

        Args:
          table_name: The table (variable) name.

        Returns:
          A dict slot name -> variable name, e.g. `{'accumulators': 'tbl/Adagrad'}`.
        """
        return {
            slot: f"{table_name}/{suffix}" for slot, suffix in zip(self.slot_names(), self._estimator_slot_suffixes())
        }

    def _estimator_slot_suffixes(self) -> List[str]:
        return []

    # ---- learning rate -----------------------------------------------------------------------------------------

    def learning_rate_tensor(self) -> tf.Tensor:
        """Returns the current learning rate as a float32 scalar tensor.

        A callable learning rate is called (with no arguments) every time this is called, so call it once per
        step. Works in eager mode, inside `tf.function` and in TF1 graphs.
        """
        lr = self.learning_rate() if callable(self.learning_rate) else self.learning_rate
        return _scalar(lr, tf.float32)

    # ---- update --------------------------------------------------------------------------------------------------

    @property
    def lazy(self) -> bool:
        """Whether only the rows of ids present in a step are updated (False only for non-lazy Adam)."""
        return True

    def apply_rows(
        self,
        params: tf.Tensor,
        slots: Mapping[str, tf.Tensor],
        grads: tf.Tensor,
        learning_rate: Union[tf.Tensor, float],
    ) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
        """Applies one optimizer step to dense row blocks; pure, it never touches variables.

        Args:
          params: `[n, dim]` current rows of the ids being updated.
          slots: slot name -> `[n, dim]` current slot rows, one entry per `slot_names()`.
          grads: `[n, dim]` gradient of each row, already summed over every occurrence of its id in the step.
          learning_rate: Scalar learning rate (usually `learning_rate_tensor()`).

        Returns:
          `(new_params, new_slots)` with the same shapes and keys.

        Raises:
          KeyError: if a slot of `slot_names()` is missing from `slots`.
        """
        params = tf.convert_to_tensor(params)
        dtype = params.dtype
        grads = tf.cast(tf.convert_to_tensor(grads), dtype)
        lr = _scalar(learning_rate, dtype)
        slots = {name: tf.cast(tf.convert_to_tensor(slots[name]), dtype) for name in self.slot_names()}
        grads = self._clip_gradients(grads)
        params = self._decay_weights(params, lr)
        new_params, new_slots = self._update_rows(params, slots, grads, lr)
        return self._clip_weights(new_params), new_slots

    @abc.abstractmethod
    def _update_rows(
        self, params: tf.Tensor, slots: Dict[str, tf.Tensor], grads: tf.Tensor, lr: tf.Tensor
    ) -> Tuple[tf.Tensor, Dict[str, tf.Tensor]]:
        """The update rule proper (no clipping, no decay)."""

    def _clip_gradients(self, grads: tf.Tensor) -> tf.Tensor:
        if self.clip_gradient_min is not None:
            grads = tf.maximum(grads, tf.cast(self.clip_gradient_min, grads.dtype))
        if self.clip_gradient_max is not None:
            grads = tf.minimum(grads, tf.cast(self.clip_gradient_max, grads.dtype))
        return grads

    def _decay_weights(self, params: tf.Tensor, lr: tf.Tensor) -> tf.Tensor:
        if not self.weight_decay_factor:
            return params
        decay = tf.cast(self.weight_decay_factor, params.dtype)
        if self.multiply_weight_decay_factor_by_learning_rate:
            decay = decay * lr
        return params - decay * params

    def _clip_weights(self, params: tf.Tensor) -> tf.Tensor:
        if self.clip_weight_min is not None:
            params = tf.maximum(params, tf.cast(self.clip_weight_min, params.dtype))
        if self.clip_weight_max is not None:
            params = tf.minimum(params, tf.cast(self.clip_weight_max, params.dtype))
        return params

    # ---- fused kernels -------------------------------------------------------------------------------------------

    def _has_extras(self) -> bool:
        return (
            self.clip_gradient_min is not None
            or self.clip_gradient_max is not None
            or bool(self.weight_decay_factor)
            or self.clip_weight_min is not None
            or self.clip_weight_max is not None
        )

    def supports_fused_sparse_apply(self) -> bool:
        """Whether `fused_sparse_apply` can run a TensorFlow kernel that computes exactly `apply_rows`."""
        return not self._has_extras() and self._fused_kernel_available()

    def _fused_kernel_available(self) -> bool:
        return False

    def fused_sparse_apply(
        self,
        params_var: tf.Variable,
        slot_vars: Mapping[str, tf.Variable],
        unique_indices: tf.Tensor,
        grads: tf.Tensor,
        learning_rate: Union[tf.Tensor, float],
    ) -> Optional[Any]:
        """Updates rows of resource variables in place with TensorFlow's fused sparse-apply kernels.

        Only used when the kernel's formula equals the TPU rule for the configured options (no gradient clipping,
        no weight decay, no weight clipping, and a kernel for the rule exists); otherwise nothing runs.

        Args:
          params_var: float32 resource variable of the table (shard).
          slot_vars: slot name -> resource variable, shaped like `params_var`.
          unique_indices: `[n]` int32/int64 row indices into the variables, without duplicates.
          grads: `[n, dim]` accumulated gradients of those rows.
          learning_rate: Scalar learning rate.

        Returns:
          None when the fused path does not apply (nothing was run). Otherwise the update op in graph mode and
          inside `tf.function`; in eager mode, where the kernel has already run, the bool scalar tensor `True`.
        """
        if not self.supports_fused_sparse_apply():
            return None
        handles = {}
        for name, var in [("params", params_var)] + [(n, slot_vars[n]) for n in self.slot_names()]:
            handle = _resource_handle(var)
            if handle is None:
                return None
            handles[name] = handle
        grads = tf.cast(tf.convert_to_tensor(grads), tf.float32)
        lr = _scalar(learning_rate, tf.float32)
        op = self._fused_apply(handles, tf.convert_to_tensor(unique_indices), grads, lr)
        if op is None and tf.executing_eagerly():
            return tf.constant(True)
        return op

    def _fused_apply(self, handles: Dict[str, Any], indices: tf.Tensor, grads: tf.Tensor, lr: tf.Tensor) -> Any:
        raise NotImplementedError

    # ---- misc --------------------------------------------------------------------------------------------------

    def _hyperparameters(self) -> Dict[str, Any]:
        return dict(self.__dict__)

    def __eq__(self, other: Any) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__

    def __hash__(self) -> int:
        return hash((type(self), tuple(sorted((k, repr(v)) for k, v in self.__dict__.items()))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._hyperparameters().items())
        return f"{type(self).__name__}({args})"


# TensorFlow 2.20 made the CPU kernels of the sparse updates of resource variables (`ResourceSparseApply*`,
# `ResourceScatterAdd/Sub`) 2-4x slower per row than 2.15-2.19 (measured per kernel on 2.15, 2.16, 2.18, 2.19,
# 2.20 and 2.21; BENCHMARKS.md), while `ResourceGather` and `ResourceScatterUpdate` kept their speed. From 2.20 on
# the gather -> `apply_rows` -> scatter-update path is the faster one for every optimizer at dim 16 and for most at
# dim 64.
_SLOW_SPARSE_APPLY_KERNELS_FROM = (2, 20)


def prefer_fused_sparse_apply() -> bool:
    """Whether the installed TensorFlow's fused sparse-apply kernels beat gather -> `apply_rows` -> scatter.

    Both compute the same rule (`fused_sparse_apply` is used only where the kernel's formula is the TPU rule);
    this only chooses the faster implementation for the TensorFlow version in use.
    """
    major, minor = (int(part) for part in tf.__version__.split(".")[:2])
    return (major, minor) < _SLOW_SPARSE_APPLY_KERNELS_FROM


def _resource_handle(var: Any) -> Optional[tf.Tensor]:
    """Returns the resource handle of a float32 resource variable, else None (e.g. TF1 ref variables)."""
    try:
        handle = var.handle
    except (AttributeError, ValueError, TypeError, NotImplementedError):
        return None
    if getattr(handle, "dtype", None) != tf.resource or var.dtype.base_dtype != tf.float32:
        return None
    return handle


def _pow(x: tf.Tensor, exponent: float) -> tf.Tensor:
    """x ** exponent with exact special cases for the common exponents."""
    if exponent == 0.5:
        return tf.sqrt(x)
    if exponent == 1.0:
        return x
    if exponent == 0.0:
        return tf.ones_like(x)
    return tf.pow(x, tf.cast(exponent, x.dtype))


# ==== mid-level optimizers (tf.tpu.experimental.embedding.*) ===========================================================


@_constructor(
    _learning_rate(0.01),
    *_SHARED_ARGS,
    _CLIPVALUE,
    _LOW_DIM,
)
class SGD(_Optimizer):
    """Stochastic gradient descent: `w -= lr * g`.

    Args:
      {args}

    Raises:
      ValueError: `clipvalue` set while `use_gradient_accumulation` is False.
    """

    def slot_names(self) -> List[str]:
        return []

    def slot_initializers(self) -> List[Initializer]:
        return []

    def _update_rows(self, params, slots, grads, lr):
        return params - lr * grads, {}

    def _fused_kernel_available(self) -> bool:
        return True

    def _fused_apply(self, handles, indices, grads, lr):
        return tf.raw_ops.ResourceScatterSub(resource=handles["params"], indices=indices, updates=lr * grads)


@_constructor(
    _learning_rate(0.001),
    _Arg("initial_accumulator_value", 0.1, float, "initial value of the `accumulators` slot; must be > 0."),
    *_SHARED_ARGS,
    _SLOT_FN,
    _CLIPVALUE,
    _LOW_DIM,
)
class Adagrad(_Optimizer):
    """Adagrad without epsilon: `a += g^2; w -= lr * g / sqrt(a)`.

    Args:
      {args}

    Raises:
      ValueError: `initial_accumulator_value <= 0`, or `clipvalue` without gradient accumulation.
    """

    def _configure(self, initial_accumulator_value, **shared) -> None:
        super()._configure(**shared)
        if initial_accumulator_value <= 0:
            raise ValueError(
                f"Argument `initial_accumulator_value` must be a positive float. Received: {initial_accumulator_value}"
            )
        self.initial_accumulator_value = initial_accumulator_value

    def slot_names(self) -> List[str]:
        return ["accumulators"]

    def slot_initializers(self) -> List[Initializer]:
        return [ConstantInitializer(self.initial_accumulator_value)]

    def _estimator_slot_suffixes(self) -> List[str]:
        return ["Adagrad"]

    def _update_rows(self, params, slots, grads, lr):
        accum = slots["accumulators"] + grads * grads
        return params - lr * grads * tf.math.rsqrt(accum), {"accumulators": accum}

    def _fused_kernel_available(self) -> bool:
        return True

    def _fused_apply(self, handles, indices, grads, lr):
        # ResourceSparseApplyAdagrad: accum += g^2; var -= lr * g * rsqrt(accum) -- the TPU rule exactly.
        return tf.raw_ops.ResourceSparseApplyAdagrad(
            var=handles["params"], accum=handles["accumulators"], lr=lr, grad=grads, indices=indices
        )


@_constructor(
    _learning_rate(0.001),
    _Arg("momentum", 0.0, float, "moving-average parameter of the `momenta` slot."),
    _Arg("use_nesterov", False, bool, "use the Nesterov variant."),
    _Arg("exponent", 2, float, "exponent of the accumulator preconditioner; must be > 0."),
    _Arg("beta2", 1, float, "moving-average parameter of the `accumulators` slot (1 means a plain sum)."),
    _Arg("epsilon", 1e-10, float, "added to the accumulator before the power; must be > 0."),
    *_SHARED_ARGS,
    _SLOT_FN,
    _CLIPVALUE,
    _LOW_DIM,
)
class AdagradMomentum(_Optimizer):
    """Adagrad with momentum.

    `a = a + g^2` if `beta2 == 1` else `beta2*a + (1-beta2)*g^2`; `s = (a + epsilon)^(-1/exponent) * g`;
    `m = momentum*m + s`; `w -= lr * (momentum*m + s if use_nesterov else m)`.

    Args:
      {args}

    Raises:
      ValueError: `epsilon <= 0`, `exponent <= 0`, or `clipvalue` without gradient accumulation.
    """

    def _configure(self, momentum, use_nesterov, exponent, beta2, epsilon, **shared) -> None:
        super()._configure(**shared)
        if epsilon <= 0:
            raise ValueError("Adagrad momentum: epsilon must be positive")
        if exponent <= 0:
            raise ValueError("Adagrad momentum: Precondition exponent must >0")
        self.momentum = momentum
        self.use_nesterov = use_nesterov
        self.exponent = exponent
        self.beta2 = beta2
        self.epsilon = epsilon

    def slot_names(self) -> List[str]:
        return ["accumulators", "momenta"]

    def slot_initializers(self) -> List[Initializer]:
        return [ConstantInitializer(0.0), ConstantInitializer(0.0)]

    def _estimator_slot_suffixes(self) -> List[str]:
        return ["AdagradMomentum/Accumulator", "AdagradMomentum/Momentum"]

    def _update_rows(self, params, slots, grads, lr):
        dtype = params.dtype
        g2 = grads * grads
        if self.beta2 == 1:
            accum = slots["accumulators"] + g2
        else:
            beta2 = tf.cast(self.beta2, dtype)
            accum = beta2 * slots["accumulators"] + (1 - beta2) * g2
        scaled = _pow(accum + tf.cast(self.epsilon, dtype), -1.0 / self.exponent) * grads
        momentum = tf.cast(self.momentum, dtype)
        m = momentum * slots["momenta"] + scaled
        step = momentum * m + scaled if self.use_nesterov else m
        return params - lr * step, {"accumulators": accum, "momenta": m}


@_constructor(
    _learning_rate(0.001),
    _Arg("beta_1", 0.9, float, "decay of the `momenta` slot, in [0, 1)."),
    _Arg("beta_2", 0.999, float, "decay of the `velocities` slot, in [0, 1)."),
    _Arg(
        "epsilon",
        1e-07,
        float,
        "numerical-stability constant, > 0 (1e-7; the estimator-style `AdamParameters` uses 1e-8).",
    ),
    _Arg("lazy_adam", True, bool, "update only the rows looked up in the step."),
    _Arg("sum_inside_sqrt", True, bool, "use `sqrt(v + eps^2)` instead of `sqrt(v) + eps`."),
    *_shared_args(accumulation="must be True when `lazy_adam` is False."),
    _SLOT_FN,
    _CLIPVALUE,
    _LOW_DIM,
)
class Adam(_Optimizer):
    """Adam without bias correction (the TPU rule).

    `m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
    w -= lr * m / (sqrt(v + eps^2) if sum_inside_sqrt else sqrt(v) + eps)`.
    Lazy by default: only rows present in the step change; with `lazy_adam=False` every row is updated each
    step (rows absent from the step with a zero gradient).

    Args:
      {args}

    Raises:
      ValueError: betas outside [0, 1), `epsilon <= 0`, non-lazy Adam or `clipvalue` without accumulation.
    """

    def _configure(
        self, beta_1, beta_2, epsilon, lazy_adam, sum_inside_sqrt, use_gradient_accumulation, **shared
    ) -> None:
        super()._configure(use_gradient_accumulation=use_gradient_accumulation, **shared)
        if beta_1 < 0.0 or beta_1 >= 1.0:
            raise ValueError(f"Argument `beta_1` must be >= 0 and < 1. Received: {beta_1}.")
        if beta_2 < 0.0 or beta_2 >= 1.0:
            # Upstream prints beta_1 here (a typo); we print the offending value.
            raise ValueError(f"Argument `beta_2` must be >= 0 and < 1. Received: {beta_2}.")
        if epsilon <= 0.0:
            raise ValueError("epsilon must be positive; got {}.".format(epsilon))
        if not use_gradient_accumulation and not lazy_adam:
            raise ValueError(
                "When disabling lazy Adam (`lazy_adam=False`), "
                "gradient accumulation must be used. "
                "Set `use_gradient_accumulation` to False."
            )
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.lazy_adam = lazy_adam
        self.sum_inside_sqrt = sum_inside_sqrt

    @property
    def lazy(self) -> bool:
        return bool(self.lazy_adam)

    def slot_names(self) -> List[str]:
        return ["momenta", "velocities"]

    def slot_initializers(self) -> List[Initializer]:
        return [ConstantInitializer(0.0), ConstantInitializer(0.0)]

    def _estimator_slot_suffixes(self) -> List[str]:
        return ["Adam/m", "Adam/v"]

    def _update_rows(self, params, slots, grads, lr):
        dtype = params.dtype
        b1 = tf.cast(self.beta_1, dtype)
        b2 = tf.cast(self.beta_2, dtype)
        eps = tf.cast(self.epsilon, dtype)
        m = b1 * slots["momenta"] + (1 - b1) * grads
        v = b2 * slots["velocities"] + (1 - b2) * grads * grads
        denom = tf.sqrt(v + eps * eps) if self.sum_inside_sqrt else tf.sqrt(v) + eps
        return params - lr * m / denom, {"momenta": m, "velocities": v}


@_constructor(
    _learning_rate(0.001),
    _Arg("learning_rate_power", -0.5, float, "`p`, <= 0 (0 means a fixed learning rate)."),
    _Arg("l1_regularization_strength", 0.0, float, "l1, >= 0."),
    _Arg("l2_regularization_strength", 0.0, float, "l2, >= 0."),
    _Arg("beta", 0.0, float, "the paper's beta."),
    _Arg("initial_accumulator_value", 0.1, float, "initial `accumulators`; must be > 0 (as upstream mid-level)."),
    *_SHARED_ARGS,
    _SLOT_FN,
    _CLIPVALUE,
    _Arg("multiply_linear_by_learning_rate", False, bool, "use the form where `linears` stores `linear * lr`."),
    _Arg(
        "allow_zero_accumulator",
        False,
        bool,
        "a zero denominator (zero accumulator and no l2/beta) gives weight 0 instead of NaN.",
    ),
    _LOW_DIM,
)
class FTRL(_Optimizer):
    """FTRL-proximal with the TPU's `beta` and `multiply_linear_by_learning_rate` forms.

    With `p = learning_rate_power`, accumulator `n` and linear `z`: `n' = n + g^2; d = n'^(-p) - n^(-p)`;
    standard: `z += g - d*w/lr; w = (clip(z, -l1, l1) - z) / ((n'^(-p) + beta)/lr + 2*l2)`;
    multiply_linear_by_learning_rate: `z += lr*g - d*w; w = (clip(z, -lr*l1, lr*l1) - z) / (n'^(-p) + 2*lr*l2
    + beta)`.

    Args:
      {args}

    Raises:
      ValueError: `initial_accumulator_value <= 0`, or `clipvalue` without gradient accumulation.
    """

    def _configure(
        self,
        learning_rate_power,
        l1_regularization_strength,
        l2_regularization_strength,
        beta,
        initial_accumulator_value,
        multiply_linear_by_learning_rate,
        allow_zero_accumulator,
        **shared,
    ) -> None:
        super()._configure(**shared)
        if initial_accumulator_value <= 0:
            raise ValueError(
                f"Argument `initial_accumulator_value` must be a positive float. Received: {initial_accumulator_value}"
            )
        self.initial_accumulator_value = initial_accumulator_value
        self.learning_rate_power = learning_rate_power
        self.l1_regularization_strength = l1_regularization_strength
        self.l2_regularization_strength = l2_regularization_strength
        self.beta = beta
        self.multiply_linear_by_learning_rate = multiply_linear_by_learning_rate
        self.allow_zero_accumulator = allow_zero_accumulator

    def slot_names(self) -> List[str]:
        return ["accumulators", "linears"]

    def slot_initializers(self) -> List[Initializer]:
        return [ConstantInitializer(self.initial_accumulator_value), ConstantInitializer(0.0)]

    def _estimator_slot_suffixes(self) -> List[str]:
        return ["Ftrl", "Ftrl_1"]

    def _update_rows(self, params, slots, grads, lr):
        dtype = params.dtype
        power = -float(self.learning_rate_power)
        l1 = tf.cast(self.l1_regularization_strength, dtype)
        l2 = tf.cast(self.l2_regularization_strength, dtype)
        beta = tf.cast(self.beta, dtype)
        accum = slots["accumulators"]
        new_accum = accum + grads * grads
        new_pow = _pow(new_accum, power)
        delta = new_pow - _pow(accum, power)
        if self.multiply_linear_by_learning_rate:
            linear = slots["linears"] + lr * grads - delta * params
            limit = lr * l1
            denom = new_pow + 2 * lr * l2 + beta
        else:
            linear = slots["linears"] + grads - delta * params / lr
            limit = l1
            denom = (new_pow + beta) / lr + 2 * l2
        numer = tf.clip_by_value(linear, -limit, limit) - linear
        if self.allow_zero_accumulator:
            new_params = tf.math.divide_no_nan(numer, denom)
        else:
            new_params = numer / denom
        return new_params, {"accumulators": new_accum, "linears": linear}

    def _fused_kernel_available(self) -> bool:
        # The kernel has no beta; folding it into l2 as beta/(2*lr) breaks at lr == 0, so fuse only without it.
        return not self.beta and not self.allow_zero_accumulator

    def _fused_apply(self, handles, indices, grads, lr):
        return tf.raw_ops.ResourceSparseApplyFtrl(
            var=handles["params"],
            accum=handles["accumulators"],
            linear=handles["linears"],
            grad=grads,
            indices=indices,
            lr=lr,
            l1=tf.constant(self.l1_regularization_strength, tf.float32),
            l2=tf.constant(self.l2_regularization_strength, tf.float32),
            lr_power=tf.constant(self.learning_rate_power, tf.float32),
            multiply_linear_by_lr=bool(self.multiply_linear_by_learning_rate),
        )


# ---- optimizers that only the estimator-style API names ------------------------------------------------------------


@_constructor(
    _learning_rate(0.001),
    _Arg("initial_accumulator_value", 0.1, float, "initial `accumulators`, > 0."),
    _Arg("l1_regularization_strength", 0.0, float, "l1, >= 0."),
    _Arg("l2_regularization_strength", 0.0, float, "l2, >= 0."),
    *_SHARED_ARGS,
    _CLIPVALUE,
)
class ProximalAdagrad(_Optimizer):
    """Proximal Adagrad (FOBOS), as TensorFlow's `ResourceSparseApplyProximalAdagrad` kernel computes it.

    `a += g^2; r = lr / sqrt(a); v = w - r*g; w = sign(v) * max(|v| - r*l1, 0) / (1 + r*l2)`. (The op
    documentation writes `lr*l1` and `lr*l2`; the kernel, and therefore this rule, uses the per-element rate `r`.)

    Args:
      {args}

    Raises:
      ValueError: invalid accumulator or regularization strengths.
    """

    def _configure(
        self, initial_accumulator_value, l1_regularization_strength, l2_regularization_strength, **shared
    ) -> None:
        super()._configure(**shared)
        _check_proximal_adagrad(initial_accumulator_value, l1_regularization_strength, l2_regularization_strength)
        self.initial_accumulator_value = initial_accumulator_value
        self.l1_regularization_strength = l1_regularization_strength
        self.l2_regularization_strength = l2_regularization_strength

    def slot_names(self) -> List[str]:
        return ["accumulators"]

    def slot_initializers(self) -> List[Initializer]:
        return [ConstantInitializer(self.initial_accumulator_value)]

    def _estimator_slot_suffixes(self) -> List[str]:
        return ["ProximalAdagrad"]

    def _update_rows(self, params, slots, grads, lr):
        dtype = params.dtype
        accum = slots["accumulators"] + grads * grads
        rate = lr * tf.math.rsqrt(accum)
        prox = params - grads * rate
        l2_scale = 1 + rate * tf.cast(self.l2_regularization_strength, dtype)
        if self.l1_regularization_strength > 0:
            l1 = tf.cast(self.l1_regularization_strength, dtype)
            new_params = tf.sign(prox) * tf.maximum(tf.abs(prox) - rate * l1, 0) / l2_scale
        else:
            new_params = prox / l2_scale
        return new_params, {"accumulators": accum}

    def _fused_kernel_available(self) -> bool:
        return True

    def _fused_apply(self, handles, indices, grads, lr):
        return tf.raw_ops.ResourceSparseApplyProximalAdagrad(
            var=handles["params"],
            accum=handles["accumulators"],
            lr=lr,
            l1=tf.constant(self.l1_regularization_strength, tf.float32),
            l2=tf.constant(self.l2_regularization_strength, tf.float32),
            grad=grads,
            indices=indices,
        )


@_constructor(
    _learning_rate(0.001),
    _Arg("momentum", 0.0, float, "the momentum."),
    _Arg("use_nesterov", False, bool, "use Nesterov momentum."),
    *_SHARED_ARGS,
    _CLIPVALUE,
)
class Momentum(_Optimizer):
    """Momentum, as TensorFlow's `ResourceSparseApplyMomentum` kernel computes it.

    `a = momentum*a + g`; `w -= lr*g + lr*momentum*a` with Nesterov, else `w -= lr*a`.

    Args:
      {args}"""

    def _configure(self, momentum, use_nesterov, **shared) -> None:
        super()._configure(**shared)
        self.momentum = momentum
        self.use_nesterov = use_nesterov

    def slot_names(self) -> List[str]:
        return ["momenta"]

    def slot_initializers(self) -> List[Initializer]:
        return [ConstantInitializer(0.0)]

    def _estimator_slot_suffixes(self) -> List[str]:
        return ["Momentum"]

    def _update_rows(self, params, slots, grads, lr):
        momentum = tf.cast(self.momentum, params.dtype)
        accum = slots["momenta"] * momentum + grads
        if self.use_nesterov:
            new_params = params - (grads * lr + accum * momentum * lr)
        else:
            new_params = params - accum * lr
        return new_params, {"momenta": accum}

    def _fused_kernel_available(self) -> bool:
        return True

    def _fused_apply(self, handles, indices, grads, lr):
        return tf.raw_ops.ResourceSparseApplyMomentum(
            var=handles["params"],
            accum=handles["momenta"],
            lr=lr,
            grad=grads,
            indices=indices,
            momentum=tf.constant(self.momentum, tf.float32),
            use_nesterov=bool(self.use_nesterov),
        )


@_constructor(
    _learning_rate(0.001),
    _Arg("rho", 0.9, float, "discount of the `ms` slot."),
    _Arg("momentum", 0.0, float, "momentum of the `mom` slot."),
    _Arg("epsilon", 1e-10, float, "added to `ms` inside the square root."),
    *_SHARED_ARGS,
    _CLIPVALUE,
)
class RMSProp(_Optimizer):
    """RMSProp, as TensorFlow's `ResourceSparseApplyRMSProp` kernel computes it.

    `ms = rho*ms + (1-rho)*g^2; mom = momentum*mom + lr*g/sqrt(ms + epsilon); w -= mom`.

    Args:
      {args}"""

    def _configure(self, rho, momentum, epsilon, **shared) -> None:
        super()._configure(**shared)
        self.rho = rho
        self.momentum = momentum
        self.epsilon = epsilon

    def slot_names(self) -> List[str]:
        return ["ms", "mom"]

    def slot_initializers(self) -> List[Initializer]:
        return [ConstantInitializer(0.0), ConstantInitializer(0.0)]

    def _estimator_slot_suffixes(self) -> List[str]:
        return ["RMSProp/ms", "RMSProp/mom"]

    def _update_rows(self, params, slots, grads, lr):
        dtype = params.dtype
        rho = tf.cast(self.rho, dtype)
        ms = slots["ms"] + (grads * grads - slots["ms"]) * (1 - rho)
        mom = (
            slots["mom"] * tf.cast(self.momentum, dtype) + tf.math.rsqrt(ms + tf.cast(self.epsilon, dtype)) * lr * grads
        )
        return params - mom, {"ms": ms, "mom": mom}

    def _fused_kernel_available(self) -> bool:
        return True

    def _fused_apply(self, handles, indices, grads, lr):
        return tf.raw_ops.ResourceSparseApplyRMSProp(
            var=handles["params"],
            ms=handles["ms"],
            mom=handles["mom"],
            lr=lr,
            rho=tf.constant(self.rho, tf.float32),
            momentum=tf.constant(self.momentum, tf.float32),
            epsilon=tf.constant(self.epsilon, tf.float32),
            grad=grads,
            indices=indices,
        )


def _check_proximal_adagrad(initial_accumulator: float, l1: float, l2: float) -> None:
    if initial_accumulator <= 0:
        raise ValueError(f"Adagrad initial_accumulator must be positive. Received: {initial_accumulator}.")
    _check_l1_l2(l1, l2)


def _check_l1_l2(l1: float, l2: float) -> None:
    if l1 < 0.0:
        raise ValueError("l1_regularization_strength must be greater than or equal to 0. got {}.".format(l1))
    if l2 < 0.0:
        raise ValueError("l2_regularization_strength must be greater than or equal to 0. got {}.".format(l2))


# ==== estimator-style parameters (tf.compat.v1.tpu.experimental.*Parameters) ===========================================


class _OptimizationParameters:
    """Common hyper-parameters of the estimator-style classes (no update rule of their own); constructors declared
    by `_constructor`, as the optimizers'."""

    def _configure(
        self,
        learning_rate: float,
        use_gradient_accumulation: bool,
        clip_weight_min: Optional[float],
        clip_weight_max: Optional[float],
        weight_decay_factor: Optional[float],
        multiply_weight_decay_factor_by_learning_rate: Optional[bool],
        clip_gradient_min: Optional[float] = None,
        clip_gradient_max: Optional[float] = None,
    ):
        self.learning_rate = learning_rate
        self.use_gradient_accumulation = use_gradient_accumulation
        self.clip_weight_min = clip_weight_min
        self.clip_weight_max = clip_weight_max
        self.weight_decay_factor = weight_decay_factor
        self.multiply_weight_decay_factor_by_learning_rate = multiply_weight_decay_factor_by_learning_rate
        self.clip_gradient_min = clip_gradient_min
        self.clip_gradient_max = clip_gradient_max
        if not use_gradient_accumulation and (clip_gradient_min is not None or clip_gradient_max is not None):
            raise ValueError("When using gradient clipping limits, gradient  accumulation must be enabled.")

    def _common(self) -> Dict[str, Any]:
        return dict(
            learning_rate=self.learning_rate,
            use_gradient_accumulation=self.use_gradient_accumulation,
            clip_weight_min=self.clip_weight_min,
            clip_weight_max=self.clip_weight_max,
            weight_decay_factor=self.weight_decay_factor,
            multiply_weight_decay_factor_by_learning_rate=self.multiply_weight_decay_factor_by_learning_rate,
        )

    def _clip_fields(self) -> Dict[str, Any]:
        return dict(clip_gradient_min=self.clip_gradient_min, clip_gradient_max=self.clip_gradient_max)

    def to_optimizer(self) -> _Optimizer:
        """Returns the optimizer (with update rule) these parameters describe."""
        raise NotImplementedError

    def _build(self, cls: type, **specific: Any) -> _Optimizer:
        # The estimator-style checks differ from the mid-level ones (e.g. FTRL allows a zero accumulator), so the
        # optimizer is built from a default instance and these already-validated fields.
        opt = cls()
        opt.__dict__.update(self._common())
        opt.__dict__.update(self._clip_fields())
        opt.__dict__.update(specific)
        return opt

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"{type(self).__name__}({args})"


@_constructor(
    _LEARNING_RATE,
    *_SHARED_ARGS,
    _CLIP_GRADIENT_MIN,
    _CLIP_GRADIENT_MAX,
)
class StochasticGradientDescentParameters(_OptimizationParameters):
    """Estimator-style SGD parameters.

    Args:
      {args}"""

    def to_optimizer(self) -> _Optimizer:
        return self._build(SGD)


@_constructor(
    _LEARNING_RATE,
    _Arg("initial_accumulator", 0.1, float, "initial accumulator value, > 0."),
    *_SHARED_ARGS,
    _CLIP_GRADIENT_MIN,
    _CLIP_GRADIENT_MAX,
)
class AdagradParameters(_OptimizationParameters):
    """Estimator-style Adagrad parameters (`initial_accumulator` > 0).

    Args:
      {args}

    Raises:
      ValueError: `initial_accumulator <= 0` or clipping without accumulation.
    """

    def _configure(self, initial_accumulator, **shared) -> None:
        super()._configure(**shared)
        if initial_accumulator <= 0:
            raise ValueError(f"Adagrad initial_accumulator must be greater than zero. Received: {initial_accumulator}.")
        self.initial_accumulator = initial_accumulator

    def to_optimizer(self) -> _Optimizer:
        return self._build(Adagrad, initial_accumulator_value=self.initial_accumulator)


@_constructor(
    _LEARNING_RATE,
    _Arg("momentum", _REQUIRED, float, "moving-average parameter of the momentum slot."),
    _Arg("use_nesterov", False, bool, "use the Nesterov variant."),
    _Arg("exponent", 2, float, "exponent of the accumulator preconditioner, > 0."),
    _Arg("beta2", 1, float, "moving-average parameter of the accumulator."),
    _Arg("epsilon", 1e-10, float, "added to the accumulator, > 0."),
    *_SHARED_ARGS,
    _CLIP_GRADIENT_MIN,
    _CLIP_GRADIENT_MAX,
)
class AdagradMomentumParameters(_OptimizationParameters):
    """Estimator-style Adagrad-with-momentum parameters (`momentum` is required).

    Args:
      {args}

    Raises:
      ValueError: `epsilon <= 0`, `exponent <= 0` or clipping without accumulation.
    """

    def _configure(self, momentum, use_nesterov, exponent, beta2, epsilon, **shared) -> None:
        super()._configure(**shared)
        if epsilon <= 0:
            raise ValueError("Adagrad momentum: epsilon must be positive")
        if exponent <= 0:
            raise ValueError("Adagrad momentum: Precondition exponent must >0")
        self.momentum = momentum
        self.use_nesterov = use_nesterov
        self.exponent = exponent
        self.beta2 = beta2
        self.epsilon = epsilon

    def to_optimizer(self) -> _Optimizer:
        return self._build(
            AdagradMomentum,
            momentum=self.momentum,
            use_nesterov=self.use_nesterov,
            exponent=self.exponent,
            beta2=self.beta2,
            epsilon=self.epsilon,
        )


@_constructor(
    _LEARNING_RATE,
    _Arg("initial_accumulator", 0.1, float, "initial accumulator value, > 0."),
    _Arg("l1_regularization_strength", 0.0, float, "l1, >= 0."),
    _Arg("l2_regularization_strength", 0.0, float, "l2, >= 0."),
    *_SHARED_ARGS,
    _CLIP_GRADIENT_MIN,
    _CLIP_GRADIENT_MAX,
)
class ProximalAdagradParameters(_OptimizationParameters):
    """Estimator-style proximal Adagrad parameters.

    Args:
      {args}

    Raises:
      ValueError: invalid accumulator or strengths, or clipping without accumulation.
    """

    def _configure(self, initial_accumulator, l1_regularization_strength, l2_regularization_strength, **shared) -> None:
        super()._configure(**shared)
        _check_proximal_adagrad(initial_accumulator, l1_regularization_strength, l2_regularization_strength)
        self.initial_accumulator = initial_accumulator
        self.l1_regularization_strength = l1_regularization_strength
        self.l2_regularization_strength = l2_regularization_strength

    def to_optimizer(self) -> _Optimizer:
        return self._build(
            ProximalAdagrad,
            initial_accumulator_value=self.initial_accumulator,
            l1_regularization_strength=self.l1_regularization_strength,
            l2_regularization_strength=self.l2_regularization_strength,
        )


@_constructor(
    _LEARNING_RATE,
    _Arg("beta1", 0.9, float, "decay of the first moment, in [0, 1)."),
    _Arg("beta2", 0.999, float, "decay of the second moment, in [0, 1)."),
    _Arg("epsilon", 1e-08, float, "numerical-stability constant, > 0."),
    _Arg("lazy_adam", True, bool, "update only rows looked up in the step."),
    _Arg("sum_inside_sqrt", True, bool, "use `sqrt(v + eps^2)` instead of `sqrt(v) + eps`."),
    *_shared_args(accumulation="must be True when `lazy_adam` is False."),
    _CLIP_GRADIENT_MIN,
    _CLIP_GRADIENT_MAX,
)
class AdamParameters(_OptimizationParameters):
    """Estimator-style Adam parameters (note `beta1`/`beta2` names and epsilon default 1e-8).

    Args:
      {args}

    Raises:
      ValueError: betas outside [0, 1), `epsilon <= 0`, non-lazy Adam or clipping without accumulation.
    """

    def _configure(
        self, beta1, beta2, epsilon, lazy_adam, sum_inside_sqrt, use_gradient_accumulation, **shared
    ) -> None:
        super()._configure(use_gradient_accumulation=use_gradient_accumulation, **shared)
        if beta1 < 0.0 or beta1 >= 1.0:
            raise ValueError("beta1 must be between 0. and 1; got {}.".format(beta1))
        if beta2 < 0.0 or beta2 >= 1.0:
            raise ValueError("beta2 must be between 0. and 1; got {}.".format(beta2))
        if epsilon <= 0.0:
            raise ValueError("epsilon must be positive; got {}.".format(epsilon))
        if not use_gradient_accumulation and not lazy_adam:
            raise ValueError("When disabling Lazy Adam, gradient accumulation must be used.")
        self.beta1 = beta1
        self.beta2 = beta2
        self.epsilon = epsilon
        self.lazy_adam = lazy_adam
        self.sum_inside_sqrt = sum_inside_sqrt

    def to_optimizer(self) -> _Optimizer:
        return self._build(
            Adam,
            beta_1=self.beta1,
            beta_2=self.beta2,
            epsilon=self.epsilon,
            lazy_adam=self.lazy_adam,
            sum_inside_sqrt=self.sum_inside_sqrt,
        )


@_constructor(
    _LEARNING_RATE,
    _Arg("learning_rate_power", -0.5, float, "<= 0."),
    _Arg("initial_accumulator_value", 0.1, float, ">= 0."),
    _Arg("l1_regularization_strength", 0.0, float, ">= 0."),
    _Arg("l2_regularization_strength", 0.0, float, ">= 0."),
    *_SHARED_ARGS,
    _Arg("multiply_linear_by_learning_rate", False, bool, "use the form where the linear slot stores `linear * lr`."),
    _Arg("beta", 0, float, "the paper's beta."),
    _Arg("allow_zero_accumulator", False, bool, "see `FTRL`."),
    _CLIP_GRADIENT_MIN,
    _CLIP_GRADIENT_MAX,
)
class FtrlParameters(_OptimizationParameters):
    """Estimator-style FTRL parameters (a zero `initial_accumulator_value` is allowed here).

    Args:
      {args}

    Raises:
      ValueError: out-of-range arguments or clipping without accumulation.
    """

    def _configure(
        self,
        learning_rate_power,
        initial_accumulator_value,
        l1_regularization_strength,
        l2_regularization_strength,
        multiply_linear_by_learning_rate,
        beta,
        allow_zero_accumulator,
        **shared,
    ) -> None:
        super()._configure(**shared)
        if learning_rate_power > 0.0:
            raise ValueError("learning_rate_power must be less than or equal to 0. got {}.".format(learning_rate_power))
        if initial_accumulator_value < 0.0:
            raise ValueError(
                "initial_accumulator_value must be greater than or equal to 0. got {}.".format(
                    initial_accumulator_value
                )
            )
        _check_l1_l2(l1_regularization_strength, l2_regularization_strength)
        self.learning_rate_power = learning_rate_power
        self.initial_accumulator_value = initial_accumulator_value
        self.initial_linear_value = 0.0
        self.l1_regularization_strength = l1_regularization_strength
        self.l2_regularization_strength = l2_regularization_strength
        self.multiply_linear_by_learning_rate = multiply_linear_by_learning_rate
        self.beta = beta
        self.allow_zero_accumulator = allow_zero_accumulator

    def to_optimizer(self) -> _Optimizer:
        return self._build(
            FTRL,
            learning_rate_power=self.learning_rate_power,
            initial_accumulator_value=self.initial_accumulator_value,
            l1_regularization_strength=self.l1_regularization_strength,
            l2_regularization_strength=self.l2_regularization_strength,
            beta=self.beta,
            multiply_linear_by_learning_rate=self.multiply_linear_by_learning_rate,
            allow_zero_accumulator=self.allow_zero_accumulator,
        )


@_constructor(
    _LEARNING_RATE,
    _Arg("momentum", _REQUIRED, float, "the momentum."),
    _Arg("use_nesterov", False, bool, "use Nesterov momentum."),
    *_SHARED_ARGS,
    _CLIP_GRADIENT_MIN,
    _CLIP_GRADIENT_MAX,
)
class MomentumParameters(_OptimizationParameters):
    """Estimator-style momentum parameters (`momentum` is required).

    Args:
      {args}"""

    def _configure(self, momentum, use_nesterov, **shared) -> None:
        super()._configure(**shared)
        self.momentum = momentum
        self.use_nesterov = use_nesterov

    def to_optimizer(self) -> _Optimizer:
        return self._build(Momentum, momentum=self.momentum, use_nesterov=self.use_nesterov)


@_constructor(
    _LEARNING_RATE,
    _Arg("rho", _REQUIRED, float, "discount of the mean square."),
    _Arg("momentum", _REQUIRED, float, "momentum."),
    _Arg("epsilon", _REQUIRED, float, "added to the mean square inside the square root."),
    *_SHARED_ARGS,
    _CLIP_GRADIENT_MIN,
    _CLIP_GRADIENT_MAX,
)
class RMSPropParameters(_OptimizationParameters):
    """Estimator-style RMSProp parameters (`rho`, `momentum`, `epsilon` are required).

    Args:
      {args}"""

    def _configure(self, rho, momentum, epsilon, **shared) -> None:
        super()._configure(**shared)
        self.rho = rho
        self.momentum = momentum
        self.epsilon = epsilon

    def to_optimizer(self) -> _Optimizer:
        return self._build(RMSProp, rho=self.rho, momentum=self.momentum, epsilon=self.epsilon)


# ==== conversion ===================================================================================================

_COMMON_FIELDS = (
    "learning_rate",
    "use_gradient_accumulation",
    "clip_weight_min",
    "clip_weight_max",
    "weight_decay_factor",
    "multiply_weight_decay_factor_by_learning_rate",
)

# Upstream class name -> (our class, attribute names to copy besides the common ones).
_UPSTREAM_MID_LEVEL = {
    "SGD": (SGD, ()),
    "Adagrad": (Adagrad, ("initial_accumulator_value", "slot_variable_creation_fn")),
    "AdagradMomentum": (
        AdagradMomentum,
        ("momentum", "use_nesterov", "exponent", "beta2", "epsilon", "slot_variable_creation_fn"),
    ),
    "Adam": (Adam, ("beta_1", "beta_2", "epsilon", "lazy_adam", "sum_inside_sqrt", "slot_variable_creation_fn")),
    "FTRL": (
        FTRL,
        (
            "learning_rate_power",
            "l1_regularization_strength",
            "l2_regularization_strength",
            "beta",
            "initial_accumulator_value",
            "multiply_linear_by_learning_rate",
            "allow_zero_accumulator",
            "slot_variable_creation_fn",
        ),
    ),
}
_UPSTREAM_ESTIMATOR = {
    "StochasticGradientDescentParameters": (StochasticGradientDescentParameters, ()),
    "AdagradParameters": (AdagradParameters, ("initial_accumulator",)),
    "AdagradMomentumParameters": (
        AdagradMomentumParameters,
        ("momentum", "use_nesterov", "exponent", "beta2", "epsilon"),
    ),
    "ProximalAdagradParameters": (
        ProximalAdagradParameters,
        ("initial_accumulator", "l1_regularization_strength", "l2_regularization_strength"),
    ),
    "AdamParameters": (AdamParameters, ("beta1", "beta2", "epsilon", "lazy_adam", "sum_inside_sqrt")),
    "FtrlParameters": (
        FtrlParameters,
        (
            "learning_rate_power",
            "initial_accumulator_value",
            "l1_regularization_strength",
            "l2_regularization_strength",
            "multiply_linear_by_learning_rate",
            "beta",
            "allow_zero_accumulator",
        ),
    ),
    "MomentumParameters": (MomentumParameters, ("momentum", "use_nesterov")),
    "RMSPropParameters": (RMSPropParameters, ("rho", "momentum", "epsilon")),
}
_NO_ATTR = object()


def _copy_attrs(obj: Any, names: Sequence[str]) -> Dict[str, Any]:
    kwargs = {}
    for name in names:
        value = getattr(obj, name, _NO_ATTR)
        if value is _NO_ATTR:
            raise TypeError(f"Cannot convert optimizer of type {type(obj).__name__}: it has no attribute `{name}`.")
        kwargs[name] = value
    return kwargs


def _from_upstream(obj: Any) -> Optional[_Optimizer]:
    name = type(obj).__name__
    if name in _UPSTREAM_MID_LEVEL and hasattr(obj, "clip_gradient_min"):
        cls, extra = _UPSTREAM_MID_LEVEL[name]
        kwargs = _copy_attrs(obj, _COMMON_FIELDS + tuple(extra))
        lo, hi = getattr(obj, "clip_gradient_min", None), getattr(obj, "clip_gradient_max", None)
        kwargs["clipvalue"] = None if lo is None and hi is None else (lo, hi)
        kwargs["low_dimensional_packing_status"] = getattr(obj, "low_dimensional_packing_status", False)
        return cls(**kwargs)
    if name in _UPSTREAM_ESTIMATOR:
        cls, extra = _UPSTREAM_ESTIMATOR[name]
        kwargs = _copy_attrs(obj, _COMMON_FIELDS + ("clip_gradient_min", "clip_gradient_max") + tuple(extra))
        return cls(**kwargs).to_optimizer()
    return None


class GlobalStepLearningRate:
    """Zero-argument learning rate `learning_rate_fn(global_step)` for estimator-style dynamic rates.

    Args:
      learning_rate_fn: `fn(global_step) -> scalar`.
      global_step: a tensor/variable, or None to use `tf.compat.v1.train.get_global_step()` when called.
    """

    def __init__(self, learning_rate_fn: Callable[[Any], Any], global_step: Optional[Any] = None):
        if not callable(learning_rate_fn):
            raise TypeError(f"`learning_rate_fn` must be callable. Received: {learning_rate_fn!r}")
        self.learning_rate_fn = learning_rate_fn
        self.global_step = global_step

    def __call__(self) -> Any:
        step = self.global_step
        if step is None:
            step = tf.compat.v1.train.get_global_step()
            if step is None:
                raise ValueError(
                    "`learning_rate_fn` needs a global step, but none was given and "
                    "`tf.compat.v1.train.get_global_step()` found none in the graph."
                )
        return self.learning_rate_fn(step)

    def __repr__(self) -> str:
        return f"GlobalStepLearningRate({self.learning_rate_fn!r})"


def is_optimizer(obj: Any) -> bool:
    """Returns True for our optimizers (the objects carrying an update rule)."""
    return isinstance(obj, _Optimizer)


def to_optimizer(
    obj: Any, learning_rate_fn: Optional[Callable[[Any], Any]] = None, global_step: Optional[Any] = None
) -> _Optimizer:
    """Converts any supported optimizer description into one of our optimizers.

    Accepts our optimizers (returned as they are unless `learning_rate_fn` is given), our estimator-style
    parameter classes, and upstream objects recognised by class name and attributes:
    `tf.tpu.experimental.embedding.{SGD, Adagrad, AdagradMomentum, Adam, FTRL}` and
    `tf.compat.v1.tpu.experimental.*Parameters` (SGD, Adagrad, AdagradMomentum, ProximalAdagrad, Adam, Ftrl,
    Momentum, RMSProp).

    Args:
      obj: the optimizer description.
      learning_rate_fn: optional estimator-style `fn(global_step) -> learning rate`; when given, the result is a
        copy whose learning rate is `learning_rate_fn(global_step)` evaluated on every `learning_rate_tensor()`.
      global_step: the step passed to `learning_rate_fn`; None means `tf.compat.v1.train.get_global_step()` at
        call time.

    Returns:
      An optimizer with `slot_names`, `slot_initializers`, `learning_rate_tensor`, `apply_rows`, `lazy`.

    Raises:
      TypeError: for an unsupported object (naming its type).
    """
    if isinstance(obj, _Optimizer):
        opt = obj
    elif isinstance(obj, _OptimizationParameters):
        opt = obj.to_optimizer()
    else:
        opt = _from_upstream(obj)
        if opt is None:
            raise TypeError(
                f"Unsupported embedding optimizer of type {type(obj).__module__}.{type(obj).__name__}: expected one "
                f"of embedding.SGD/Adagrad/AdagradMomentum/Adam/FTRL/ProximalAdagrad/Momentum/RMSProp, an "
                f"estimator-style *Parameters object, or the tf.tpu.experimental equivalents."
            )
    if learning_rate_fn is not None:
        opt = copy.copy(opt)
        opt.learning_rate = GlobalStepLearningRate(learning_rate_fn, global_step)
    return opt
