"""Converts Criteo TSV files to TFRecord files of `tf.train.Example` (keys in `criteo`'s docstring).

On the command line: `tpu-estimator data --input='day_*.tsv' --output=/data/criteo.tfrecord`, or (with more
options) `python -m tpu_estimator.app.data.convert --input='day_*.tsv' --output=/data/criteo.tfrecord
[--num_output_files=8]`.

TensorFlow is imported when a conversion runs (quietly, from the command line), not with this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional

from absl import app, flags

if TYPE_CHECKING:
    from tpu_estimator.app.data import criteo


def output_paths(output: str, num_output_files: int) -> List[str]:
    """The files `convert_tsv_to_tfrecord` writes: `output` itself, or `output-00000-of-0000N` for N > 1."""
    if num_output_files < 1:
        raise ValueError(f"num_output_files must be positive, got {num_output_files}")
    if num_output_files == 1:
        return [output]
    return [f"{output}-{i:05d}-of-{num_output_files:05d}" for i in range(num_output_files)]


def convert_tsv_to_tfrecord(
    input_patterns: "criteo.FilePatterns",
    output: str,
    *,
    num_output_files: int = 1,
    skip_malformed: bool = False,
    malformed_counter: Optional["criteo.MalformedLineCounter"] = None,
    input_compression_type: Optional[str] = None,
    output_compression_type: Optional[str] = None,
    batch_size: int = 4096,
) -> int:
    """Converts Criteo TSV files to TFRecord `tf.train.Example` files.

    Records are written in input order (files sorted by name), dealt round-robin over the output files. The output
    files are written whole or not at all: to temporary files renamed over them (replacing existing ones) when
    every record is written.

    Args:
      input_patterns: TSV path(s) or glob pattern(s).
      output: output path (with `num_output_files > 1`, the prefix of `output-0000i-of-0000N`).
      num_output_files: number of output files.
      skip_malformed: skip malformed lines instead of failing.
      malformed_counter: counts skipped lines.
      input_compression_type: compression of the TSV files (None, 'GZIP', 'ZLIB').
      output_compression_type: compression of the TFRecord files.
      batch_size: lines parsed per step.

    Returns:
      The number of records written.

    Raises:
      tf.errors.InvalidArgumentError: a malformed line (naming file and line), without `skip_malformed`.
    """
    import tensorflow as tf

    from tpu_estimator.app.data import criteo
    from tpu_estimator.app.data import output as output_files

    ds = criteo.tsv_raw_dataset(
        input_patterns,
        batch_size,
        skip_malformed=skip_malformed,
        malformed_counter=malformed_counter,
        compression_type=input_compression_type,
    )
    options = tf.io.TFRecordOptions(compression_type=output_compression_type or "")
    count = 0
    with output_files.replacing(output_paths(output, num_output_files)) as temporaries:
        writers = [tf.io.TFRecordWriter(p, options) for p in temporaries]
        try:
            for label, dense, present, categorical in ds.as_numpy_iterator():
                for row in range(len(label)):
                    example = criteo.raw_to_example(label[row], dense[row], present[row], categorical[row])
                    writers[count % len(writers)].write(example.SerializeToString())
                    count += 1
        finally:
            for w in writers:
                w.close()
    return count


FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """Defines the command-line flags of `python -m tpu_estimator.app.data.convert` on `flag_values`."""
    flags.DEFINE_list("input", None, "Criteo TSV file(s) or glob pattern(s), comma-separated.", flag_values=flag_values)
    flags.DEFINE_string(
        "output", None, "Output TFRecord path (prefix when --num_output_files > 1).", flag_values=flag_values
    )
    flags.DEFINE_integer("num_output_files", 1, "Number of output files.", lower_bound=1, flag_values=flag_values)
    flags.DEFINE_bool(
        "skip_malformed", False, "Skip (and count) malformed lines instead of failing.", flag_values=flag_values
    )
    flags.DEFINE_enum(
        "input_compression", "", ["", "GZIP", "ZLIB"], "Compression of the input files.", flag_values=flag_values
    )
    flags.DEFINE_enum(
        "output_compression", "", ["", "GZIP", "ZLIB"], "Compression of the output files.", flag_values=flag_values
    )
    flags.DEFINE_bool(
        "overwrite",
        False,
        "Replace existing output files (only once the new ones are complete).",
        flag_values=flag_values,
    )
    flags.mark_flags_as_required(["input", "output"], flag_values=flag_values)


def run(flag_values: flags.FlagValues = FLAGS) -> str:
    """Converts as the parsed flags say; returns the summary line the command prints (once).

    Raises:
      app.UsageError: an output file exists and --overwrite is not given.
    """
    import os

    from tpu_estimator.app import quiet

    existing = [p for p in output_paths(flag_values.output, flag_values.num_output_files) if os.path.exists(p)]
    if existing and not flag_values.overwrite:
        raise app.UsageError(f"--output: {', '.join(existing)} already exists; pass --overwrite to replace it")

    quiet.import_tensorflow()
    quiet.configure_logging()
    from tpu_estimator.app.data import criteo

    counter = criteo.MalformedLineCounter()
    n = convert_tsv_to_tfrecord(
        flag_values.input,
        flag_values.output,
        num_output_files=flag_values.num_output_files,
        skip_malformed=flag_values.skip_malformed,
        malformed_counter=counter,
        input_compression_type=flag_values.input_compression or None,
        output_compression_type=flag_values.output_compression or None,
    )
    return f"wrote {n} records, skipped {counter.count} malformed lines"


def main(argv: List[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    print(run(FLAGS))


if __name__ == "__main__":
    define_flags()
    app.run(main)
