"""`make demo`: DLRM with TPU embeddings trained on 2 CPU shards, evaluated, exported and served.

Steps: write synthetic Criteo-like TSV files (training + held-out), train DLRM (configs/dlrm_demo.yaml) on 2
logical CPU shards reading them with the real TSV reader, evaluate on the held-out file, export a SavedModel,
load it with `tf.saved_model.load` and compare its predictions with `TPUEstimator.predict` for a few rows.

Everything is kept in the work directory (default `./demo_output`): the data files, the model directory
(checkpoints, TensorBoard events) and the SavedModel. A rerun starts afresh in the same directory; a non-empty
directory the demo did not create is refused.

Usage: python scripts/demo.py [--work_dir=DIR] [--num_examples=N] [--set=key.path=value ...]
"""

import argparse
import os
import shutil
import sys
import threading
import time
from typing import Optional

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # run from a fresh clone even before `pip install -e .`

from tpu_estimator.app import quiet

# Before TensorFlow loads: level 3 also hides the CUDA plugin registration errors printed at level 2. The start-up
# lines TF 2.21 prints before its log settings apply are filtered by `quiet`.
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
tf = quiet.import_tensorflow()

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
DEFAULT_WORK_DIR = "demo_output"
# Written into the work directory: a rerun may empty a directory that holds it, and no other.
MARKER = ".tpu_estimator_demo"
HEARTBEAT_SECS = 4.0


class Console:
    """Prints flushed lines, and a heartbeat `... <phase> (12s)` when nothing was printed for a few seconds.

    Graph building and the first training loop take tens of seconds without output of their own: the heartbeat
    says what is happening meanwhile.
    """

    def __init__(self, heartbeat_secs: float = HEARTBEAT_SECS):
        self._heartbeat_secs = heartbeat_secs
        self._lock = threading.Lock()
        self._phase: Optional[str] = None
        self._phase_start = self._last_print = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()

    def say(self, text: str = "") -> None:
        with self._lock:
            print(text, flush=True)
            self._last_print = time.time()

    def phase(self, text: Optional[str]) -> None:
        """Starts a phase (printed now, repeated by the heartbeat while it lasts); None ends it."""
        with self._lock:
            self._phase, self._phase_start = text, time.time()
        if text:
            self.say(f"      {text} ...")

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(min(0.5, self._heartbeat_secs / 2)):
            with self._lock:
                now = time.time()
                if self._phase and now - self._last_print >= self._heartbeat_secs:
                    print(f"      ... {self._phase} ({now - self._phase_start:.0f}s)", flush=True)
                    self._last_print = now


class PhaseHook(tf.compat.v1.train.SessionRunHook):
    """Names the phases of `Estimator.train` up to the end of the first loop: graph, session, first loop."""

    def __init__(self, console: Console, iterations_per_loop: int):
        self._console = console
        self._iterations_per_loop = iterations_per_loop
        self._runs = 0

    def begin(self):
        self._console.phase("creating the session: initializing variables and the embedding tables")

    def after_create_session(self, session, coord):
        self._console.phase(f"running the first training loop ({self._iterations_per_loop} steps, includes warm-up)")

    def after_run(self, run_context, run_values):
        self._runs += 1
        if self._runs == 1:
            self._console.phase(None)  # from here on, the progress hook prints every few seconds


def prepare_work_dir(work_dir: str) -> str:
    """Creates `work_dir`, or empties it if a previous demo run made it; refuses any other non-empty directory."""
    work_dir = os.path.abspath(work_dir)
    if os.path.isdir(work_dir) and os.listdir(work_dir):
        if not os.path.exists(os.path.join(work_dir, MARKER)):
            raise SystemExit(
                f"demo: {work_dir} is not empty and was not created by the demo; "
                "pick another directory (make demo DEMO_DIR=... or --work_dir=...)"
            )
        shutil.rmtree(work_dir)
    os.makedirs(work_dir, exist_ok=True)
    with open(os.path.join(work_dir, MARKER), "w") as f:
        f.write("written by scripts/demo.py: a rerun of the demo empties this directory\n")
    return work_dir


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
        default=DEFAULT_WORK_DIR,
        help="where data, checkpoints and the export go, kept after the run (default: %(default)s)",
    )
    parser.add_argument(
        "--num_examples",
        type=int,
        default=NUM_TRAIN_EXAMPLES,
        help="training examples written to TSV files (default: %(default)s)",
    )
    parser.add_argument("--set", action="append", default=[], help="config override key.path=value (repeatable)")
    args = parser.parse_args()
    tf.get_logger().setLevel("ERROR")

    config = config_file.load_config(CONFIG, [f"data.num_examples={args.num_examples}"] + args.set)
    work_dir = prepare_work_dir(args.work_dir)
    console = Console()
    say = console.say
    t_start = time.time()
    say(f"tpu-estimator demo: DLRM with TPU embeddings on {config.tpu.num_shards} CPU shards")
    say(f"output directory: {work_dir} (kept; remove it with: rm -rf {work_dir})")
    try:
        # 1. Data.
        t = time.time()
        console.phase(
            f"writing {config.data.num_examples:,} training and {config.data.eval_num_examples:,} held-out rows"
        )
        train_paths, eval_path, bayes_auc = write_data(config, work_dir)
        console.phase(None)
        say(
            f"\n[1/5] data: {config.data.num_examples:,} training examples in {len(train_paths)} TSV files, "
            f"{config.data.eval_num_examples:,} held-out examples ({time.time() - t:.1f}s): "
            f"{os.path.join(work_dir, 'train')}/, {eval_path}"
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
            f"{config.train.batch_size} examples; model directory {config.model_dir}"
        )
        estimator = models.make_estimator(config)
        progress = cli_progress.ProgressHook(
            config.train.batch_size,
            last_step=config.train.steps,
            every_secs=5,
            printer=lambda line: say("      " + line),
            phases=False,  # PhaseHook names them, with a heartbeat
        )
        phases = PhaseHook(console, config.tpu.iterations_per_loop)
        console.phase(
            f"building the graph: TSV input pipeline, model_fn on each of {config.tpu.num_shards} shards, "
            "embedding engine"
        )
        t = time.time()
        estimator.train(models.make_input_fn(config, "train"), max_steps=config.train.steps, hooks=[phases, progress])
        console.phase(None)
        say(
            f"      trained in {time.time() - t:.0f}s, {progress.examples_per_sec() or 0:,.0f} examples/s, "
            f"final loss {progress.last_loss:.4f}"
        )

        # 3. Evaluate.
        t = time.time()
        console.phase("evaluating on the held-out file")
        metrics = estimator.evaluate(models.make_input_fn(config, "eval"), steps=models.eval_steps(config))
        console.phase(None)
        say(
            f"\n[3/5] evaluate on held-out data: AUC {metrics['auc']:.4f}, log loss {metrics['log_loss']:.4f}, "
            f"accuracy {metrics['accuracy']:.4f} ({time.time() - t:.0f}s)"
        )
        say(f"      (random guessing: AUC 0.5; the generator's own click probabilities: AUC {bayes_auc:.4f})")

        # 4. Export.
        console.phase("exporting a SavedModel")
        # The effective config, where the command line finds it: the model directory and the export's assets.
        config_path = os.path.join(config.model_dir, "config.yaml")
        with open(config_path, "w", encoding="utf-8") as f:
            f.write(config_file.dump_config(config))
        export_dir = estimator.export_saved_model(
            os.path.join(work_dir, "export"),
            models.serving_input_receiver_fn(config),
            assets_extra={cli_predict.CONFIG_ASSET: config_path},
        ).decode()
        console.phase(None)
        say(f"\n[4/5] export: SavedModel in {export_dir}")

        # 5. Serve the export and compare with predict().
        console.phase("serving the SavedModel and running predict()")
        rows = lambda batch: cli_predict.rows_dataset(config, batch, [eval_path], "tsv", NUM_SHOWN_ROWS)
        served = cli_predict.predict_from_export(export_dir, rows(config.eval.batch_size))
        predicted = cli_predict.predict_from_checkpoint(config, config.model_dir, rows)
        labels = cli_predict.labels_of(rows(config.eval.batch_size))
        console.phase(None)
        say(
            f"\n[5/5] serve: tf.saved_model.load(export, tags=['serve']) vs TPUEstimator.predict() on the first "
            f"{NUM_SHOWN_ROWS} held-out rows"
        )
        say("      row  label  served probability  predict() probability")
        for i in range(NUM_SHOWN_ROWS):
            say(
                f"      {i:3d}  {int(labels[i]):5d}  {served['probability'][i]:18.6f}  {predicted['probability'][i]:21.6f}"
            )
        diff = float(np.max(np.abs(served["probability"] - predicted["probability"])))
        match = np.allclose(served["probability"], predicted["probability"], rtol=1e-5, atol=1e-6)
        say(f"      max |difference| = {diff:.2e}: {'match' if match else 'MISMATCH'}")
        say(f"\ndone in {time.time() - t_start:.0f}s. Outputs kept in {work_dir}:")
        say(f"  TensorBoard:  .venv/bin/tensorboard --logdir={config.model_dir}")
        say(
            f"  serve again:  .venv/bin/tpu-estimator predict --export_dir={export_dir} --input={eval_path} "
            f"--output={os.path.join(work_dir, 'predictions.csv')}"
        )
        say(f"  clean up:     rm -rf {work_dir}")
        ok = match and metrics["auc"] > 0.5
        return 0 if ok else 1
    finally:
        console.close()


if __name__ == "__main__":
    sys.exit(main())
