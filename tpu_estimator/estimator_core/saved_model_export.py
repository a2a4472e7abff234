"""Adding one mode's graph to a SavedModel: signatures from the `EstimatorSpec`, variables from a checkpoint."""

import os
from typing import Any, Dict

import tensorflow as tf

from tpu_estimator.estimator_core import _tf_internal
from tpu_estimator.estimator_core.mode_keys import ModeKeys


def graph_saver(scaffold: tf.compat.v1.train.Scaffold) -> tf.compat.v1.train.Saver:
    """The scaffold's saver (a `tf.train.Checkpoint` made a name-based one), or a sharded `Saver`."""
    if _tf_internal.is_object_checkpoint(scaffold.saver):
        return tf.compat.v1.train.Saver(var_list=_tf_internal.checkpoint_saveables(scaffold.saver), sharded=True)
    return scaffold.saver or tf.compat.v1.train.Saver(sharded=True)


def add_meta_graph(
    builder,
    input_receiver,
    estimator_spec,
    checkpoint_path: str,
    session_config,
    mode: str,
    export_tags,
    save_variables: bool,
    check_variables: bool,
    strip_default_attrs: bool,
) -> None:
    """Adds the current graph to `builder` with the signatures of `estimator_spec` for `mode`.

    Raises:
      ValueError: `save_variables` without `check_variables`, or the checkpoint lacks variables the graph has.
    """
    export_outputs = _tf_internal.export_outputs_for_mode(
        mode=estimator_spec.mode,
        serving_export_outputs=estimator_spec.export_outputs,
        predictions=estimator_spec.predictions,
        loss=estimator_spec.loss,
        metrics=estimator_spec.eval_metric_ops,
    )
    signature_def_map = _tf_internal.build_all_signature_defs(
        input_receiver.receiver_tensors,
        export_outputs,
        getattr(input_receiver, "receiver_tensors_alternatives", None),
        serving_only=(mode == ModeKeys.PREDICT),
    )
    with tf.compat.v1.Session(config=session_config) as session:
        local_init_op = estimator_spec.scaffold.local_init_op
        if local_init_op is None:
            local_init_op = tf.compat.v1.train.Scaffold.default_local_init_op()
        saver = graph_saver(estimator_spec.scaffold)
        if save_variables and not check_variables:
            raise ValueError("If `save_variables` is `True, `check_variables`must not be `False`.")
        if check_variables:
            try:
                saver.restore(session, checkpoint_path)
            except tf.errors.NotFoundError as e:
                raise ValueError(
                    "Could not load all requested variables from checkpoint. Please make sure your model_fn does not "
                    "expect variables that were not saved in the checkpoint.\n\n"
                    "Encountered error with mode `{}` while restoring checkpoint from: `{}`. Full Traceback:\n\n"
                    "{}".format(mode, checkpoint_path, e)
                )
        # The train op goes into the SavedModel's collection so TRAIN graphs can be resumed.
        _tf_internal.add_train_op_to_saved_model(builder, estimator_spec.train_op)
        kwargs = dict(
            tags=export_tags,
            signature_def_map=signature_def_map,
            assets_collection=tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.ASSET_FILEPATHS),
            main_op=local_init_op,
            saver=saver,
            strip_default_attrs=strip_default_attrs,
        )
        if save_variables:
            builder.add_meta_graph_and_variables(session, **kwargs)
        else:
            builder.add_meta_graph(**kwargs)


def copy_assets_extra(export_dir: str, assets_extra: Dict[str, Any]) -> None:
    """Copies `{relative destination: source path}` into `<export_dir>/assets.extra`."""
    base = os.path.join(tf.compat.as_bytes(export_dir), tf.compat.as_bytes("assets.extra"))
    for dest_relative, source in assets_extra.items():
        dest_absolute = os.path.join(base, tf.compat.as_bytes(dest_relative))
        tf.compat.v1.gfile.MakeDirs(os.path.dirname(dest_absolute))
        tf.compat.v1.gfile.Copy(source, dest_absolute)
