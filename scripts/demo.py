"""`make demo`: DLRM with TPU embeddings trained on 2 CPU shards, evaluated, exported and served.

Steps: write synthetic Criteo-like TSV files (training + held-out), train DLRM (configs/dlrm_demo.yaml) on 2
logical CPU shards reading them with the real TSV reader, evaluate on the held-out file, export a SavedModel,
load it with `tf.saved_model.load` and compare its predictions with `TPUEstimator.predict` for a few rows.

Usage: python scripts/demo.py [--work_dir=DIR] [--keep] [--set=key.path=value ...]
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

# Before TensorFlow loads: level 3 also hides the CUDA plugin registration errors printed at level 2.
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"

import numpy as np
import tensorflow as tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # run from a fresh clone even before `pip install -e .`

from tpu_estimator.app import config_file, models
from tpu_estimator.app import predict as cli_predict
from tpu_estimator.app import progress as cli_progress
from tpu_estimator.app.data import criteo
from tpu_estimator.app.models import inputs

CONFIG = os.path.join(REPO, "tpu_estimator", "app", "configs", "dlrm_demo.yaml")
NUM_TRAIN_FILES = 4
# Training examples written to TSV (2000 steps of 512 read them 2.6 times).
NUM_TRAIN_EXAMPLES = 393216
NUM_SHOWN_ROWS = 5


def say(text: str = "") -> None:
    print(text, flush=True)


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (rank statistic)."""
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    positives = labels == 1
    n1, n0 = positives.sum(), (~positives).sum()
    return float((ranks[positives].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def write_data(config: config_file.Config, work_dir: str):
    """Training files with examples [0, N) and a held-out file with the next eval_num_examples."""
    generator = inputs.synthetic_generator(config.data)
    n_train, n_eval = config.data.num_examples, config.data.eval_num_examples
    train_paths = generator.write_tsv_files(os.path.join(work_dir, "train"), n_train, NUM_TRAIN_FILES)
    eval_path = generator.write_tsv(os.path.join(work_dir, "heldout.tsv"), n_eval, start=n_train)
    held_out = generator.generate(n_eval, start=n_train)
    bayes_auc = auc(held_out.label, generator.click_probability(held_out))
    return train_paths, eval_path, bayes_auc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--work_dir",
        help="where data, checkpoints and the export go (default: a temporary directory, removed at the end)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary work directory")
    parser.add_argument("--set", action="append", default=[], help="config override key.path=value")
    args = parser.parse_args()
    tf.get_logger().setLevel("ERROR")

    config = config_file.load_config(CONFIG, [f"data.num_examples={NUM_TRAIN_EXAMPLES}"] + args.set)
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="tpu_estimator_demo_")
    keep = args.keep or args.work_dir is not None
    t_start = time.time()
    say(f"tpu-estimator demo: DLRM with TPU embeddings on {config.tpu.num_shards} CPU shards")
    say(f"work directory: {work_dir}")
    try:
        # 1. Data.
        t = time.time()
        train_paths, eval_path, bayes_auc = write_data(config, work_dir)
        say(
            f"\n[1/5] data: {config.data.num_examples:,} training examples in {len(train_paths)} TSV files, "
            f"{config.data.eval_num_examples:,} held-out examples ({time.time() - t:.1f}s)"
        )
        config = config_file.apply_overrides(
            config,
            [
                "data.source=tsv",
                f"data.train_paths={train_paths}",
                f"data.eval_paths=[{eval_path}]",
                f"model_dir={os.path.join(work_dir, 'model')}",
                "eval.steps=null",
            ],
        )

        # 2. Train.
        vocab = sum(config.table_settings(f)["vocab_size"] for f in criteo.CATEGORICAL_FEATURE_NAMES)
        say(
            f"\n[2/5] train: 26 embedding tables ({vocab:,} rows of dim {config.model.embedding_dim}, "
            f"{config.optimizer.embedding.name}), bottom MLP {config.model.bottom_mlp}, top MLP "
            f"{config.model.top_mlp} ({config.optimizer.dense.name}); {config.train.steps} steps of "
            f"{config.train.batch_size} examples"
        )
        estimator = models.make_estimator(config)
        hook = cli_progress.ProgressHook(
            config.train.batch_size,
            last_step=config.train.steps,
            every_secs=10,
            printer=lambda line: say("      " + line),
        )
        t = time.time()
        estimator.train(models.make_input_fn(config, "train"), max_steps=config.train.steps, hooks=[hook])
        say(
            f"      trained in {time.time() - t:.0f}s, {hook.examples_per_sec() or 0:,.0f} examples/s, "
            f"final loss {hook.last_loss:.4f}"
        )

        # 3. Evaluate.
        t = time.time()
        metrics = estimator.evaluate(models.make_input_fn(config, "eval"), steps=models.eval_steps(config))
        say(
            f"\n[3/5] evaluate on held-out data: AUC {metrics['auc']:.4f}, log loss {metrics['log_loss']:.4f}, "
            f"accuracy {metrics['accuracy']:.4f} ({time.time() - t:.0f}s)"
        )
        say(f"      (random guessing: AUC 0.5; the generator's own click probabilities: AUC {bayes_auc:.4f})")

        # 4. Export.
        export_base = os.path.join(work_dir, "export")
        export_dir = estimator.export_saved_model(export_base, models.serving_input_receiver_fn(config)).decode()
        say(f"\n[4/5] export: SavedModel in {export_dir}")

        # 5. Serve the export and compare with predict().
        rows = lambda batch: cli_predict.rows_dataset(config, batch, [eval_path], "tsv", NUM_SHOWN_ROWS)
        served = cli_predict.predict_from_export(export_dir, rows(config.eval.batch_size))
        predicted = cli_predict.predict_from_checkpoint(config, config.model_dir, rows)
        labels = cli_predict.labels_of(rows(config.eval.batch_size))
        say(
            f"\n[5/5] serve: tf.saved_model.load(export) vs TPUEstimator.predict() on the first {NUM_SHOWN_ROWS} "
            "held-out rows"
        )
        say("      row  label  served probability  predict() probability")
        for i in range(NUM_SHOWN_ROWS):
            say(
                f"      {i:3d}  {int(labels[i]):5d}  {served['probability'][i]:18.6f}  {predicted['probability'][i]:21.6f}"
            )
        diff = float(np.max(np.abs(served["probability"] - predicted["probability"])))
        match = np.allclose(served["probability"], predicted["probability"], rtol=1e-5, atol=1e-6)
        say(f"      max |difference| = {diff:.2e}: {'match' if match else 'MISMATCH'}")
        say(f"\ndone in {time.time() - t_start:.0f}s")
        ok = match and metrics["auc"] > 0.5
        return 0 if ok else 1
    finally:
        if keep:
            say(f"kept {work_dir}")
        else:
            shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
