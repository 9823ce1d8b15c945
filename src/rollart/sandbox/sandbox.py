"""One sandbox = one workspace + an isolated way to run commands in it, torn down after the episode.

    with Sandbox(SandboxConfig()) as sb:
        sb.copy_in("envs/swe/tasks/x/repo")
        result = sb.run("python -m pytest -q")
        print(result.observation())

Each ``run`` starts a fresh isolated process tree (see ``isolation``) under the sandbox's rlimits,
uid and cgroups; when it ends, or its wall-clock timeout or output cap is hit, every process of the
sandbox is killed. Only the workspace files persist between commands.
"""
from __future__ import annotations

import itertools
import logging
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rollart.sandbox import isolation, layout, safefs
from rollart.sandbox.bwrap import bwrap_argv
from rollart.sandbox.config import SandboxConfig
from rollart.sandbox.limits import Cgroups, UidLease, kill_everything, kill_namespace, make_preexec
from rollart.sandbox.output import BoundedOutput
from rollart.sandbox.toolchain import claim_sandbox_dir, prepare_toolchain
from rollart.sandbox.unshare import unshare_argv

log = logging.getLogger(__name__)
_counter = itertools.count()
_logged_modes: set[str] = set()
OUTPUT_KILL_FACTOR = 256  # a command printing more than this many times the kept output is killed


@dataclass
class RunResult:
    """What one command did. ``output`` is stdout and stderr merged, already truncated with a marker."""

    exit_code: int | None
    output: str
    duration_s: float
    timed_out: bool = False
    killed_reason: str = ""
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.killed_reason

    def observation(self) -> str:
        """Text for the agent: the output plus a status line (exit code, signal or timeout)."""
        if self.timed_out:
            status = f"[killed: timed out after {self.duration_s:.1f}s]"
        elif self.killed_reason:
            status = f"[killed: {self.killed_reason}]"
        elif self.exit_code is not None and self.exit_code < 0:
            status = f"[terminated by signal {_signame(-self.exit_code)}]"
        elif self.exit_code is not None and 128 < self.exit_code < 128 + 65:  # shell/bwrap: 128 + signal
            status = f"[exit code {self.exit_code} (killed by {_signame(self.exit_code - 128)})]"
        else:
            status = f"[exit code {self.exit_code}]"
        return f"{self.output.rstrip()}\n{status}" if self.output.strip() else status


def _tree_bytes(root: Path) -> int:
    total = 0
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def _signame(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


class Sandbox:
    """A workspace directory plus the means to run hostile commands in it."""

    def __init__(self, config: SandboxConfig | None = None, *, name: str = "sbx") -> None:
        self.config = cfg = config or SandboxConfig()
        self.mode = isolation.resolve_mode(cfg.mode)
        if self.mode not in _logged_modes:  # once per process, so once at the start of every run
            _logged_modes.add(self.mode)
            if self.mode == "rlimit":
                log.warning(isolation.RLIMIT_WARNING)
            else:
                log.info("sandbox isolation mode=%s", self.mode)
        self.root = Path(cfg.root_dir or os.path.join(tempfile.gettempdir(), "rollart-sandbox"))
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)
        self.toolchain = prepare_toolchain(self.root, cfg.python_packages)
        if not cfg.python_home and not os.path.exists("/usr/bin/python3"):
            log.warning("sandbox: no /usr/bin/python3; commands cannot run python (apt-get install python3, "
                        "or set sandbox python_home)")
        self.is_root = os.geteuid() == 0
        self._lease = UidLease(self.root / "uids", cfg) if self.is_root else None
        self.uid = self._lease.uid if self._lease else None
        safe_name = "".join(c if c.isalnum() or c in "-_" else "_" for c in name)[:40]
        self.dir = self.root / f"{safe_name}-{os.getpid()}-{next(_counter)}"
        self.dir.mkdir(mode=0o711)
        self._claim = claim_sandbox_dir(self.dir)  # held while we live: no sweeper deletes this dir
        (self.dir / "root").mkdir(mode=0o755)  # the unshare mode mounts the sandbox's root over it
        self.workspace = self.dir / "ws"
        self.workspace.mkdir(mode=0o700)
        self._mounted = False
        if self.is_root and cfg.workspace_tmpfs:
            r = subprocess.run(["mount", "-t", "tmpfs", "-o",
                                f"size={cfg.disk_mb}m,nr_inodes=65536,mode=0700,nosuid,nodev,uid={self.uid},gid={self.uid}",
                                "tmpfs", str(self.workspace)], capture_output=True)
            self._mounted = r.returncode == 0
            if not self._mounted:
                log.debug("workspace tmpfs unavailable: %s", r.stderr.decode(errors="replace").strip())
        if self.uid is not None:
            os.chown(self.workspace, self.uid, self.uid)
        self._write_etc()
        self.cgroups = Cgroups(self.dir.name, cfg)
        self.closed = False
        self.last_pgid: int | None = None

    # -- files -----------------------------------------------------------------------------------
    @property
    def paths(self) -> isolation.Paths:
        """Where the command sees the workspace, site packages and harness, in this mode."""
        if self.mode != "rlimit":
            return isolation.Paths(layout.WORKSPACE, layout.SITE, layout.HARNESS)
        return isolation.Paths(str(self.workspace), str(self.toolchain / "site"), str(self.toolchain / "harness"))

    def copy_in(self, src: str | Path) -> int:
        """Copy a directory tree into the workspace (symlinks stay links); returns bytes copied."""
        return safefs.copy_tree(src, self.workspace, uid=self.uid, max_bytes=self.config.disk_mb << 20)

    def read_file(self, path: str, max_bytes: int) -> tuple[bytes, int]:
        return safefs.read_file(str(self.workspace), path, max_bytes)

    def write_file(self, path: str, data: bytes, *, replace_any: bool = False) -> None:
        safefs.write_file(str(self.workspace), path, data, uid=self.uid,
                          max_bytes=self.config.file_size_mb << 20, replace_any=replace_any)

    def _write_etc(self) -> None:
        etc = self.dir / "etc"
        etc.mkdir()
        uid = self.uid if self.uid is not None else os.getuid()
        (etc / "passwd").write_text(f"root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n"
                                    f"agent:x:{uid}:{uid}:agent:/workspace:/bin/bash\n")
        (etc / "group").write_text(f"root:x:0:\nagent:x:{uid}:\n")
        (etc / "hosts").write_text("127.0.0.1 localhost sandbox\n")
        for f in etc.iterdir():
            f.chmod(0o644)

    # -- commands --------------------------------------------------------------------------------
    def _env(self, extra: dict[str, str] | None) -> dict[str, str]:
        p = self.paths
        path = "/usr/local/bin:/usr/bin:/bin"
        if self.config.python_home:
            path = f"{self._python_home_inside}/bin:{path}"
        env = {"PATH": path, "HOME": p.workspace, "WORKSPACE": p.workspace,
               "PYTHONPATH": p.site, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8",
               "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": "/tmp", "TERM": "dumb"}
        env.update(extra or {})
        return env

    @property
    def _python_home_inside(self) -> str:
        """Where ``python_home`` appears to the command: /opt/python in namespaces, its own path otherwise."""
        return self.config.python_home if self.mode == "rlimit" else layout.PYTHON_HOME

    def _argv(self, command: list[str], env: dict[str, str],
              extra_ro_binds: dict) -> tuple[list[str], dict[str, str], tuple[int, ...]]:
        """(argv, env, fds to pass and then close) that run ``command`` in this sandbox's mode."""
        if self.mode == "rlimit":
            return command, env, ()
        binds = {**self.config.extra_ro_binds, **extra_ro_binds}
        if self.config.python_home:
            binds[self.config.python_home] = self._python_home_inside
        mounts = layout.sandbox_layout(workspace=str(self.workspace), site=str(self.toolchain / "site"),
                                       harness=str(self.toolchain / "harness"), etc_dir=str(self.dir / "etc"),
                                       tmp_bytes=self.config.tmp_mb << 20, extra_ro_binds=binds)
        if self.mode == "bwrap":
            argv, fd = bwrap_argv(mounts, workdir=layout.WORKSPACE, env=env, command=command)
            return [isolation.tool("bwrap"), *argv[1:]], env, (fd,)
        argv, setup = unshare_argv(mounts, newroot=str(self.dir / "root"), workdir=layout.WORKSPACE,
                                   command=command)
        return [isolation.tool("unshare"), *argv[1:]], {**env, **setup}, ()

    def run(self, command: str | list[str], *, timeout_s: float | None = None, stdin: bytes = b"",
            env: dict[str, str] | None = None, extra_ro_binds: dict | None = None) -> RunResult:
        """Run a shell command string (``bash -c``) or an argv list; never raises for what it does."""
        if self.closed:
            raise RuntimeError("sandbox already closed")
        cfg = self.config
        timeout = cfg.timeout_s if timeout_s is None else timeout_s
        cmd = ["/bin/bash", "-c", command] if isinstance(command, str) else list(command)
        full_env = self._env(env)
        argv, proc_env, fds = self._argv(cmd, full_env, extra_ro_binds or {})
        out = BoundedOutput(cfg.output_limit_bytes)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=str(self.workspace),
                                    env=proc_env, preexec_fn=make_preexec(cfg, self.uid, self.cgroups.procs_files),
                                    start_new_session=True, close_fds=True, pass_fds=fds)
        finally:
            for fd in fds:
                os.close(fd)
        self.last_pgid = proc.pid
        if stdin:
            try:
                proc.stdin.write(stdin)
                proc.stdin.close()
            except BrokenPipeError:
                pass
        killed = ""
        deadline = start + timeout
        grace_end: float | None = None
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while True:
                now = time.monotonic()
                if now >= deadline:
                    killed = "timeout"
                    break
                if grace_end is None and proc.poll() is not None:
                    grace_end = now + 0.5  # background children may still hold the pipe
                if grace_end is not None and now >= grace_end:
                    break
                wait = min(deadline, grace_end or deadline) - now
                if not sel.select(timeout=max(0.0, min(wait, 0.5))):
                    continue
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                out.feed(chunk)
                if out.total > cfg.output_limit_bytes * OUTPUT_KILL_FACTOR:
                    killed = f"output exceeded {cfg.output_limit_bytes * OUTPUT_KILL_FACTOR} bytes"
                    break
        if not killed:  # the output ended: let the command exit by itself (killing it now would misreport it)
            try:
                proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
        if self.mode != "rlimit":  # the wrapper outlives its namespace, so it, not the host's PID 1, reaps it
            kill_namespace(proc)
        kill_everything(proc.pid, self.uid, self.cgroups)
        proc.stdout.close()
        exit_code = proc.wait()
        duration = time.monotonic() - start
        if not killed and not self._mounted:  # no tmpfs quota: check the disk budget after the fact
            used = _tree_bytes(self.workspace)
            if used > cfg.disk_mb << 20:
                killed = f"workspace holds {used >> 20} MB, over the {cfg.disk_mb} MB limit; delete files"
        return RunResult(exit_code=None if killed else exit_code, output=out.text(), duration_s=duration,
                         timed_out=killed == "timeout", killed_reason=killed, truncated=out.truncated)

    # -- teardown --------------------------------------------------------------------------------
    def close(self) -> None:
        """Kill everything the sandbox started, unmount and delete its workspace, free its uid/cgroups."""
        if self.closed:
            return
        self.closed = True
        kill_everything(self.last_pgid, self.uid, self.cgroups)
        if self._mounted:
            subprocess.run(["umount", "-l", str(self.workspace)], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.close(self._claim)
        self.cgroups.remove()
        if self._lease:
            self._lease.release()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
