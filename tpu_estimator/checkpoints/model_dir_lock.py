"""Exclusive ownership of a `model_dir` by one training process (`ModelDirLock`).

Two trainers writing checkpoints into one directory interleave their steps and leave a checkpoint that belongs to
neither run. `ModelDirLock` makes `train()` the only writer: it holds the lock file `LOCK_FILE_NAME` in
`model_dir` for the whole run. The file holds the holder's host, pid, process start (`/proc/<pid>/stat` on Linux),
boot id, start time and a heartbeat time that a daemon thread refreshes every `heartbeat_secs`.

What this relies on (no `flock`/`fcntl` locks, which network filesystems often do not honour):

- `open(O_CREAT | O_EXCL)` is atomic: exactly one of several processes creating the same path succeeds (POSIX;
  NFSv3 and later, and the usual cluster filesystems, implement it on the server).
- `rename` within a directory is atomic: the heartbeat rewrites the file by renaming a complete temporary file
  over it, so a reader sees the old or the new content, never a partial one.
- Clocks of the hosts sharing the directory agree to well within `stale_after_secs` (default 120 s): a holder on
  another host is declared gone only when its heartbeat is older than that.

A lock whose holder is provably gone is taken over (with a warning naming it): on the same machine (host and boot)
only when its pid is not running or is now another process (its start differs), however old its heartbeat (a
stopped or swapped-out trainer is alive); on another machine when its heartbeat is older than `stale_after_secs`.
Taking over is itself serialised by a second `O_EXCL` file (`<lock>.takeover`), so that two contenders never both
remove a stale lock and one of them a fresh one. Other holders make `acquire` raise `ModelDirLockedError` at once,
naming the directory, the holder and what to do.

The heartbeat touches the lock file (its modification time), never rewrites it: a holder paused between reading the
file and writing it could otherwise overwrite the lock of the process that took over meanwhile. A holder that lost
its lock (its machine paused beyond `stale_after_secs`, or the file removed) stops before its next checkpoint:
`check_held` raises `ModelDirLockLostError` naming the new holder, and `train_guard` calls it before every save
(`HeldLockListener`).

Paths with a URL scheme (`gs://...`, `s3://...`) are object stores without atomic exclusive create: no lock is
taken there, and a warning says so.
"""

import datetime
import errno
import json
import os
import socket
import threading
import time
import uuid
from typing import Any, Dict, Optional

import tensorflow as tf

from tpu_estimator import _environment

LOCK_FILE_NAME = ".tpu_estimator_train.lock"
_TAKEOVER_SUFFIX = ".takeover"
# A takeover file older than this was left by a contender that died while breaking a stale lock.
_TAKEOVER_STALE_SECS = 30.0
# How long an empty lock file (between its O_EXCL create and the write of its content) is waited for.
_CONTENT_WAIT_SECS = 2.0

_log = tf.get_logger()


class ModelDirLockedError(RuntimeError):
    """Another live process holds the training lock of the `model_dir`."""


class ModelDirLockLostError(ModelDirLockedError):
    """This process held the training lock of the `model_dir` and another process has taken it over."""


# Shortens how long a holder on another machine may stay silent before its lock is taken over (tests; a machine
# whose clock differs from the others' by more than this must not set it lower).
STALE_AFTER_ENV = "TPU_ESTIMATOR_LOCK_STALE_SECS"
DEFAULT_STALE_AFTER_SECS = 120.0
DEFAULT_HEARTBEAT_SECS = 10.0


def _stale_after_secs_from_environment() -> float:
    return _environment.positive_secs(STALE_AFTER_ENV, DEFAULT_STALE_AFTER_SECS)


def _boot_id() -> Optional[str]:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None


def _process_start(pid: int) -> Optional[str]:
    """The start of process `pid` in clock ticks since boot (Linux), or None when unknown or not running."""
    try:
        with open("/proc/{}/stat".format(pid)) as f:
            stat = f.read()
    except OSError:
        return None
    # Field 22 (starttime), counted after the parenthesised command name, which may contain spaces.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # Exists, owned by another user.
        return True
    return True


def _iso(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def describe_holder(holder: Dict[str, Any], now: Optional[float] = None) -> str:
    """`host H, pid P, since <start> (last heartbeat N s ago)` for a parsed lock file."""
    now = time.time() if now is None else now
    text = "host {}, pid {}".format(holder.get("host", "?"), holder.get("pid", "?"))
    if isinstance(holder.get("start_time"), (int, float)):
        text += ", since {}".format(_iso(holder["start_time"]))
    if isinstance(holder.get("heartbeat"), (int, float)):
        text += " (last heartbeat {:.0f} s ago)".format(max(0.0, now - holder["heartbeat"]))
    return text


class ModelDirLock(object):
    """The training lock of one `model_dir` (see the module docstring); a context manager.

    Args:
      model_dir: the directory (created if missing).
      heartbeat_secs: period of the heartbeat refresh while held (default 10 s, or a quarter of
        `stale_after_secs` when that is shorter).
      stale_after_secs: a heartbeat older than this means a holder on another machine is gone (must exceed
        `heartbeat_secs` plus the largest clock difference between hosts sharing the directory); default 120 s or
        `$TPU_ESTIMATOR_LOCK_STALE_SECS`.

    Raises:
      ValueError: `stale_after_secs` not larger than `heartbeat_secs`, or non-positive periods.
    """

    def __init__(
        self, model_dir: str, heartbeat_secs: Optional[float] = None, stale_after_secs: Optional[float] = None
    ):
        if stale_after_secs is None:
            stale_after_secs = _stale_after_secs_from_environment()
        if heartbeat_secs is None:
            heartbeat_secs = min(DEFAULT_HEARTBEAT_SECS, stale_after_secs / 4)
        if heartbeat_secs <= 0 or stale_after_secs <= heartbeat_secs:
            raise ValueError(
                "ModelDirLock needs 0 < heartbeat_secs < stale_after_secs; got heartbeat_secs={}, "
                "stale_after_secs={}.".format(heartbeat_secs, stale_after_secs)
            )
        self.model_dir = str(model_dir)
        self.path = os.path.join(self.model_dir, LOCK_FILE_NAME)
        self._heartbeat_secs = float(heartbeat_secs)
        self._stale_after_secs = float(stale_after_secs)
        self._token = None
        self._start_time = None
        self._stop = threading.Event()
        self._thread = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._token is not None

    # ---- acquire / release -----------------------------------------------------------------------------------

    def acquire(self) -> "ModelDirLock":
        """Takes the lock, or takes it over from a holder that is provably gone.

        Returns:
          self.

        Raises:
          ModelDirLockedError: a live process holds it (the message names it and says what to do).
          RuntimeError: already held by this object.
        """
        if self.held:
            raise RuntimeError("ModelDirLock of {} is already held by this object.".format(self.model_dir))
        if "://" in self.model_dir:
            _log.warning(
                "Not locking model_dir %s: filesystems with a URL scheme have no atomic exclusive create; make "
                "sure a single process trains into it.",
                self.model_dir,
            )
            return self
        os.makedirs(self.model_dir, exist_ok=True)
        token = uuid.uuid4().hex
        self._start_time = time.time()
        for _ in range(3):
            if self._create(token):
                self._token = token
                self._start_heartbeat()
                return self
            holder = self._read_holder()
            if holder is None:  # Released meanwhile: try again.
                continue
            reason = self._gone_reason(holder)
            if reason is None:
                raise ModelDirLockedError(self._locked_message(holder))
            self._take_over(holder, reason)
        holder = self._read_holder() or {}
        raise ModelDirLockedError(self._locked_message(holder))

    def release(self) -> None:
        """Stops the heartbeat and removes the lock file if it is still ours (no-op when not held)."""
        if not self.held:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        holder = self._read_holder(wait=False)
        if holder is not None and holder.get("token") == self._token:
            _remove(self.path)
        else:
            _log.warning("The training lock %s is no longer ours at release (taken over); leaving it.", self.path)
        self._token = None

    def __enter__(self) -> "ModelDirLock":
        return self.acquire()

    def __exit__(self, *exc_info) -> None:
        self.release()

    # ---- lock file -------------------------------------------------------------------------------------------

    def _content(self, token: str) -> bytes:
        pid = os.getpid()
        return json.dumps(
            {
                "host": socket.gethostname(),
                "pid": pid,
                "process_start": _process_start(pid),
                "boot_id": _boot_id(),
                "start_time": self._start_time,
                "heartbeat": time.time(),
                "token": token,
            }
        ).encode("utf-8")

    def _create(self, token: str) -> bool:
        """Creates the lock file with our content; False if it exists."""
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, self._content(token))
            os.fsync(fd)
        finally:
            os.close(fd)
        return True

    def _read_holder(self, wait: bool = True) -> Optional[Dict[str, Any]]:
        """The parsed lock file; None if there is none. An unparseable one is waited for (being written), then
        reported as an unknown holder aged by the file's modification time."""
        deadline = time.time() + (_CONTENT_WAIT_SECS if wait else 0.0)
        while True:
            try:
                with open(self.path, "rb") as f:
                    raw = f.read()
                mtime = os.stat(self.path).st_mtime
            except FileNotFoundError:
                return None
            try:
                holder = json.loads(raw.decode("utf-8"))
                if isinstance(holder, dict):
                    # The heartbeat touches the file: its last beat is the file's modification time.
                    if isinstance(holder.get("heartbeat"), (int, float)):
                        holder["heartbeat"] = max(holder["heartbeat"], mtime)
                    return holder
            except ValueError:
                pass
            if time.time() >= deadline:
                return {"host": "unknown (unreadable lock file)", "pid": "?", "heartbeat": mtime}
            time.sleep(0.1)

    def _gone_reason(self, holder: Dict[str, Any]) -> Optional[str]:
        """Why the holder is provably gone, or None if it may be alive."""
        pid = holder.get("pid")
        same_machine = holder.get("host") == socket.gethostname() and holder.get("boot_id") == _boot_id()
        if same_machine and isinstance(pid, int):
            if not _pid_running(pid):
                return "its process is not running"
            start = holder.get("process_start")
            if start is not None and _process_start(pid) not in (None, start):
                return "its pid now belongs to another process"
            # Alive on this machine, however old its heartbeat: stopped (SIGSTOP, a debugger) or swapped out.
            return None
        heartbeat = holder.get("heartbeat")
        if isinstance(heartbeat, (int, float)) and time.time() - heartbeat > self._stale_after_secs:
            return "its heartbeat is older than {:.0f} s".format(self._stale_after_secs)
        return None

    def _take_over(self, stale: Dict[str, Any], reason: str) -> None:
        """Removes the stale lock `stale`, if it is still the one in place, under the takeover file."""
        takeover = self.path + _TAKEOVER_SUFFIX
        try:
            fd = os.open(takeover, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            try:
                if time.time() - os.stat(takeover).st_mtime > _TAKEOVER_STALE_SECS:
                    _remove(takeover)
            except FileNotFoundError:
                pass
            time.sleep(0.2)  # Another contender is taking over; the caller retries.
            return
        os.close(fd)
        try:
            current = self._read_holder(wait=False)
            if current is not None and current.get("token") == stale.get("token") and current == stale:
                _log.warning(
                    "Taking over the training lock of %s from %s: %s.", self.model_dir, describe_holder(stale), reason
                )
                _remove(self.path)
        finally:
            _remove(takeover)

    def _locked_message(self, holder: Dict[str, Any]) -> str:
        return (
            "model_dir {dir} is being trained by another process: {holder}. Two trainers in one model_dir would mix "
            "their checkpoints. Wait for that run to finish or stop it, or train into another model_dir; if that "
            "process is gone for good (e.g. its host died), delete the lock file {path}. (Readers such as evaluate, "
            "predict and export need no lock.)".format(
                dir=self.model_dir, holder=describe_holder(holder), path=self.path
            )
        )

    # ---- heartbeat -------------------------------------------------------------------------------------------

    def _start_heartbeat(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._heartbeat_loop, name="model_dir_lock_heartbeat", daemon=True)
        self._thread.start()

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self._heartbeat_secs):
            try:
                self._refresh()
            except OSError as e:  # A transient filesystem error: the next beat retries.
                _log.warning("Could not refresh the training lock %s: %s", self.path, e)

    def _refresh(self) -> None:
        holder = self._read_holder(wait=False)
        if holder is None or holder.get("token") != self._token:
            _log.error(
                "The training lock %s was taken over by %s while this process trains: this process stops before its "
                "next checkpoint.",
                self.path,
                describe_holder(holder) if holder else "nobody (removed)",
            )
            self._stop.set()
            return
        # Touched, not rewritten: if another process took the lock over since the read, this touches its file.
        os.utime(self.path)

    def check_held(self, before: str = "writing") -> None:
        """Raises unless the lock file is still this object's (no-op for an unlocked URL `model_dir`).

        Args:
          before: what the caller is about to do, for the error ("writing the checkpoint of step 5").

        Raises:
          ModelDirLockLostError: another process holds the lock now, or the lock file is gone (naming the holder).
        """
        if not self.held:
            return
        holder = self._read_holder(wait=False)
        if holder is not None and holder.get("token") == self._token:
            return
        raise ModelDirLockLostError(
            "Stopped before {before}: this process no longer holds the training lock of model_dir {dir}; {holder}. "
            "A process whose machine was paused or unreachable for more than {stale:.0f} s loses its lock to the "
            "next trainer; two trainers in one model_dir would mix their checkpoints, so this run writes nothing more. "
            "Let the other run finish (or stop it), then train again: training resumes from the latest checkpoint."
            "".format(
                before=before,
                dir=self.model_dir,
                holder="it is held by " + describe_holder(holder) if holder else "the lock file was removed",
                stale=self._stale_after_secs,
            )
        )


class HeldLockListener(tf.compat.v1.train.CheckpointSaverListener):
    """Before each checkpoint: the lock is still this process's (`ModelDirLock.check_held`), else the save and the
    run stop with `ModelDirLockLostError`."""

    def __init__(self, lock: ModelDirLock):
        self._lock = lock

    def before_save(self, session, global_step_value) -> None:
        self._lock.check_held("writing the checkpoint of step {}".format(global_step_value))


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError as e:
        if e.errno != errno.ENOENT:
            raise
