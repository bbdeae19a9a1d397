"""A Spark standalone cluster on loopback, from the PySpark installation (no Docker).

For the tests, the demo and the benchmark: a master and workers started with
PySpark's own ``bin/spark-class``, so that pipeline workers (Spark drivers) run
with ``spark.master=spark://...`` and their executors in separate JVMs, as on a
real cluster, where an executor can be killed on its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from coordination.testing import free_port

__all__ = ["SparkStandalone"]

_EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


class SparkStandalone:
    """A Spark standalone master and workers, child processes of this one.

    Example:
        with SparkStandalone(work_dir=tmp, workers=1, cores_per_worker=2) as cluster:
            spark = spark_session(cluster.master_url)
            ...
            cluster.kill_executor()          # SIGKILL one executor JVM

    Daemons get 256 MB heaps; each worker offers ``cores_per_worker`` cores and
    ``worker_memory`` to executors. Logs go to ``work_dir``.
    """

    def __init__(
        self,
        work_dir: Path,
        *,
        workers: int = 1,
        cores_per_worker: int = 1,
        worker_memory: str = "1g",
        host: str = "127.0.0.1",
        start_timeout: float = 120.0,
    ) -> None:
        self.work_dir = Path(work_dir)
        self.workers = workers
        self.cores_per_worker = cores_per_worker
        self.worker_memory = worker_memory
        self.host = host
        self.start_timeout = start_timeout
        self.port = 0
        self.webui_port = 0
        self._processes: list[subprocess.Popen[bytes]] = []
        self._logs: list[Path] = []

    @property
    def master_url(self) -> str:
        """``spark://host:port`` of the master (after :meth:`start`)."""
        return f"spark://{self.host}:{self.port}"

    def start(self) -> None:
        """Start the master, then the workers; return once every worker registered.

        Raises:
            RuntimeError: PySpark's ``bin/spark-class`` is missing, or the cluster
                was not up within ``start_timeout`` (the logs' tails are in the message).
        """
        spark_class = _spark_class()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.port, self.webui_port = free_port(), free_port()
        env = {
            **os.environ,
            "SPARK_DAEMON_MEMORY": "256m",
            # Executors run Python (a user's UDF) with this interpreter and its packages.
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": self.host,
            "SPARK_LOG_DIR": str(self.work_dir),
            "SPARK_HOME": str(Path(spark_class).parents[1]),
        }
        self._spawn(
            "master",
            [
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                self.host,
                "--port",
                f"{self.port}",
                "--webui-port",
                f"{self.webui_port}",
            ],
            env,
        )
        for n in range(self.workers):
            work = self.work_dir / f"worker-{n}"
            work.mkdir(exist_ok=True)
            self._spawn(
                f"worker-{n}",
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    self.master_url,
                    "--host",
                    self.host,
                    "--cores",
                    f"{self.cores_per_worker}",
                    "--memory",
                    f"{self.worker_memory}",
                    "--work-dir",
                    f"{work}",
                    "--webui-port",
                    f"{free_port()}",
                ],
                env,
            )
        deadline = time.monotonic() + self.start_timeout
        while self.alive_workers() < self.workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in self._processes):
                self.stop()
                raise RuntimeError(
                    f"the Spark standalone cluster was not up within {self.start_timeout:.0f} s"
                    + "".join(f"\n--- {log.name}:\n{_tail(log)}" for log in self._logs)
                )
            time.sleep(0.5)

    def alive_workers(self) -> int:
        """Workers registered with the master as ALIVE (0 if it does not answer yet)."""
        try:
            url = f"http://{self.host}:{self.webui_port}/json/"
            with urllib.request.urlopen(url, timeout=2) as response:
                state = json.load(response)
        except (OSError, ValueError):
            return 0
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def executor_pids(self) -> list[int]:
        """The pids of this cluster's executor JVMs now running."""
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            text = [part.decode(errors="replace") for part in cmdline]
            # Executors are started with their worker's work directory as cwd and with
            # the driver's URL; the work dir tells this cluster's from another's.
            if _EXECUTOR_CLASS in text and self._is_ours(entry):
                pids.append(int(entry.name))
        return sorted(pids)

    def kill_executor(self, pid: int | None = None) -> int:
        """SIGKILL one executor JVM (the first if ``pid`` is None); returns its pid.

        Raises:
            RuntimeError: No executor of this cluster is running.
        """
        pids = self.executor_pids()
        if pid is None:
            if not pids:
                raise RuntimeError("no executor of this Spark cluster is running")
            pid = pids[0]
        os.kill(pid, signal.SIGKILL)
        return pid

    def stop(self) -> None:
        """Stop the workers, the master and any executor left. Idempotent."""
        for pid in self.executor_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for process in reversed(self._processes):
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        for process in reversed(self._processes):
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        self._processes.clear()

    def __enter__(self) -> SparkStandalone:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> None:
        log = self.work_dir / f"{name}.log"
        self._logs.append(log)
        with open(log, "ab") as out:
            self._processes.append(
                subprocess.Popen(
                    args,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,  # its own group: stop() signals the JVM and spark-class
                )
            )

    def _is_ours(self, proc: Path) -> bool:
        try:
            cwd = Path(os.readlink(proc / "cwd"))
        except OSError:
            return False
        return self.work_dir.resolve() in cwd.resolve().parents


def _spark_class() -> str:
    import pyspark

    home = Path(pyspark.__file__).parent
    script = home / "bin" / "spark-class"
    if not script.is_file():
        raise RuntimeError(
            f"{script} is missing: the Spark standalone cluster is started from the PySpark "
            "installation (pip install pyspark), which ships bin/spark-class"
        )
    if not os.access(script, os.X_OK):
        script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(script)


def _tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
