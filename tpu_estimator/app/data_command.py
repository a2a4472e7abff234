"""`tpu-estimator data`: write synthetic Criteo-like rows, or convert Criteo TSV files to TFRecord.

    tpu-estimator data --rows=N --output=FILE [--held_out_rows=M] [--seed=S] [--max_vocab=V] [--overwrite]
    tpu-estimator data --input='day_*.tsv' --output=FILE.tfrecord [--skip_malformed] [--overwrite]

The format of `--output` follows its extension: `.tsv` (Criteo text, one example per line) or `.tfrecord`
(`tf.train.Example`s, keys in `tpu_estimator.app.data.criteo`). Synthetic rows are examples `[0, N)` of the
generator `SyntheticCriteoSpec(seed=S, cardinalities=criteo_cardinalities(V))`, the same rows a config with
`data: {source: synthetic, seed: S, max_vocab: V}` trains on; `--held_out_rows=M` also writes examples `[N, N + M)`
(disjoint from the training rows) to `held_out_path(FILE)`: `day_0.tsv` -> `day_0.held_out.tsv`.

Files are written whole or not at all (to temporary files renamed over the outputs once complete,
`output.replacing`): a command that fails part way leaves the outputs as they were. An existing output is replaced
only with `--overwrite`.

`check(flag_values)` validates the flags without importing TensorFlow; `run(flag_values)` does the work.
"""

import os
from typing import Any, Dict, List

from absl import flags

from tpu_estimator.app.errors import CliError

FORMATS = {".tsv": "tsv", ".tfrecord": "tfrecord"}


def output_format(path: str) -> str:
    """'tsv' or 'tfrecord' from the extension of `path`.

    Raises:
      CliError: another extension.
    """
    ext = os.path.splitext(path)[1]
    if ext not in FORMATS:
        raise CliError(f"--output: {path}: the extension says the format: .tsv or .tfrecord (got {ext or 'none'!r})")
    return FORMATS[ext]


def held_out_path(path: str) -> str:
    """Where `--held_out_rows` go: `day_0.tsv` -> `day_0.held_out.tsv`."""
    stem, ext = os.path.splitext(path)
    return f"{stem}.held_out{ext}"


def check(flag_values: flags.FlagValues) -> None:
    """Validates the data command's flags (no TensorFlow import).

    Raises:
      CliError: naming the flag.
    """
    from tpu_estimator.app.data import files

    if not flag_values.output:
        raise CliError("--output is required: the file to write (.tsv or .tfrecord)")
    fmt = output_format(flag_values.output)
    if os.path.isdir(flag_values.output):
        raise CliError(f"--output: {flag_values.output} is a directory; give a file name (.tsv or .tfrecord)")
    outputs = [flag_values.output]
    if not flag_values.input and flag_values.held_out_rows:
        outputs.append(held_out_path(flag_values.output))
    existing = [p for p in outputs if os.path.exists(p)]
    if existing and not flag_values.overwrite:
        raise CliError(
            f"--output: {', '.join(existing)} already exists; pass --overwrite to replace it (it is replaced only "
            "once the new file is complete)"
        )
    if flag_values.input:
        if flag_values.rows is not None or flag_values.held_out_rows:
            raise CliError("--input converts files; --rows/--held_out_rows write synthetic rows: give one of them")
        if fmt != "tfrecord":
            raise CliError(f"--output: {flag_values.output}: converting --input writes TFRecord: use a .tfrecord name")
        paths = files.expand(flag_values.input, "--input")
        if os.path.abspath(flag_values.output) in {os.path.abspath(p) for p in paths}:
            raise CliError(f"--output: {flag_values.output} is also an --input file")
        files.check_files(paths, "tsv", "--input", allow_empty=True)
        return
    if flag_values.rows is None:
        raise CliError("give --rows=N (synthetic rows) or --input=FILES (TSV files to convert)")
    if flag_values.rows < 1:
        raise CliError(f"--rows: must be positive, got {flag_values.rows}")
    if flag_values.held_out_rows < 0:
        raise CliError(f"--held_out_rows: must be non-negative, got {flag_values.held_out_rows}")
    if flag_values.seed < 0:
        raise CliError(f"--seed: must be non-negative, got {flag_values.seed}")
    if flag_values.max_vocab < 1:
        raise CliError(f"--max_vocab: must be positive, got {flag_values.max_vocab}")


def _write_tfrecord(path: str, batches) -> int:
    import tensorflow as tf

    from tpu_estimator.app.data import criteo

    count = 0
    with tf.io.TFRecordWriter(path) as writer:
        for batch in batches:
            for row in range(len(batch)):
                example = criteo.raw_to_example(
                    batch.label[row], batch.dense[row], batch.dense_present[row], batch.categorical[row]
                )
                writer.write(example.SerializeToString())
                count += 1
    return count


def _write_synthetic(path: str, fmt: str, rows: int, start: int, seed: int, max_vocab: int) -> int:
    from tpu_estimator.app.data import schema, synthetic

    generator = synthetic.SyntheticCriteo(
        synthetic.SyntheticCriteoSpec(seed=seed, cardinalities=tuple(schema.criteo_cardinalities(max_vocab)))
    )
    if fmt == "tsv":
        generator.write_tsv(path, rows, start)
        return rows
    return _write_tfrecord(path, generator.iter_blocks(rows, start))


def write_synthetic(path: str, rows: int, start: int, seed: int, max_vocab: int) -> int:
    """Writes synthetic examples `[start, start + rows)` to `path` (.tsv or .tfrecord), whole or not at all
    (replacing a file there); returns the row count."""
    from tpu_estimator.app.data import output as output_files

    with output_files.replacing([os.path.abspath(path)]) as (temporary,):
        return _write_synthetic(temporary, output_format(path), rows, start, seed, max_vocab)


def run(flag_values: flags.FlagValues) -> Dict[str, Any]:
    """Writes or converts as the (checked) flags say; prints one line per file written; returns a summary."""
    check(flag_values)
    output = flag_values.output
    if flag_values.input:
        from tpu_estimator.app.data import convert, criteo

        counter = criteo.MalformedLineCounter()
        n = convert.convert_tsv_to_tfrecord(
            flag_values.input, output, skip_malformed=flag_values.skip_malformed, malformed_counter=counter
        )
        skipped = f", skipped {counter.count} malformed lines" if flag_values.skip_malformed else ""
        print(f"wrote {n} records to {output}{skipped}")
        return {"rows": n, "output": output, "skipped": counter.count}
    from tpu_estimator.app.data import output as output_files

    written: List[str] = [output] + ([held_out_path(output)] if flag_values.held_out_rows else [])
    fmt, seed, max_vocab = output_format(output), flag_values.seed, flag_values.max_vocab
    with output_files.replacing([os.path.abspath(p) for p in written]) as temporaries:  # both files, or neither
        n = _write_synthetic(temporaries[0], fmt, flag_values.rows, 0, seed, max_vocab)
        if flag_values.held_out_rows:
            m = _write_synthetic(temporaries[1], fmt, flag_values.held_out_rows, n, seed, max_vocab)
    print(f"wrote {n} synthetic rows to {output} (seed {seed})")
    if flag_values.held_out_rows:
        print(f"wrote {m} held-out synthetic rows to {written[1]} (rows {n}..{n + m - 1} of seed {seed})")
    return {"rows": n, "held_out_rows": flag_values.held_out_rows, "output": written}
