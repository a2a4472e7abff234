"""A TF2 TPU program that asks for model parallelism, as TensorFlow's TPUStrategy page shows it.

`--split`: data-parallel replicas, but the step splits its input over 2 logical devices
(`experimental_split_to_logical_devices`); otherwise the strategy gets a DeviceAssignment of 2 cores per replica.
Off a TPU both end in one line naming the call.
"""

import tensorflow as tf
from absl import app, flags

flags.DEFINE_bool("split", False, "Split the step's input over logical devices instead.")
FLAGS = flags.FLAGS


def main(argv):
    del argv
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="")
    tf.config.experimental_connect_to_cluster(resolver)
    topology = tf.tpu.experimental.initialize_tpu_system(resolver)
    if FLAGS.split:
        strategy = tf.distribute.TPUStrategy(resolver)
    else:
        device_assignment = tf.tpu.experimental.DeviceAssignment.build(
            topology, computation_shape=[1, 1, 1, 2], num_replicas=1
        )
        strategy = tf.distribute.TPUStrategy(resolver, experimental_device_assignment=device_assignment)

    @tf.function
    def step(images):
        def step_fn(images):
            images = strategy.experimental_split_to_logical_devices(images, [1, 2, 1, 1])
            return tf.reduce_sum(images)

        return strategy.run(step_fn, args=(images,))

    print(step(tf.ones([2, 4, 4, 1])))


if __name__ == "__main__":
    app.run(main)
