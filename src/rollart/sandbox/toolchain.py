"""The read-only toolchain a sandbox sees besides /usr: a few pure-Python packages and our harness.

They are copied once per machine into ``<sandbox root>/toolchain-<hash>/`` (world-readable), so a
sandbox never binds anything from the project tree or the virtualenv (both under /work here), and
the dropped-privilege sandbox uid can read them.
"""
from __future__ import annotations

import compileall
import functools
import hashlib
import importlib.util
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from rollart.sandbox.limits import cleanup_stale_cgroups

HARNESS_DIR = Path(__file__).with_name("harness")
log = logging.getLogger(__name__)
LAYOUT_VERSION = 2  # bump when the toolchain's layout or contents change


def _package_paths(names: tuple[str, ...]) -> list[Path]:
    paths = []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None and not spec.submodule_search_locations:
            log.warning("sandbox python_packages: %r is not installed here; sandboxed code cannot import it "
                        "(pip install %s)", name, name)
            continue
        if spec.submodule_search_locations:
            paths.append(Path(list(spec.submodule_search_locations)[0]))
        else:
            paths.append(Path(spec.origin))
    return paths


@functools.lru_cache(maxsize=None)
def prepare_toolchain(root: Path, packages: tuple[str, ...]) -> Path:
    """Return the toolchain dir for these packages, building it on first use (atomic rename)."""
    cleanup_stale(root)
    sources = _package_paths(packages)
    digest = hashlib.sha256(f"v{LAYOUT_VERSION}".encode())
    for p in sources + sorted(HARNESS_DIR.iterdir()):
        digest.update(str(p).encode())
        digest.update(str(p.stat().st_mtime_ns).encode())
    target = root / f"toolchain-{digest.hexdigest()[:16]}"
    if target.is_dir():
        return target
    tmp = Path(tempfile.mkdtemp(prefix=".toolchain-", dir=root))
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    (tmp / "site").mkdir()
    for src in sources:
        if src.is_dir():
            shutil.copytree(src, tmp / "site" / src.name, ignore=ignore)
        else:
            shutil.copy2(src, tmp / "site" / src.name)
    shutil.copytree(HARNESS_DIR, tmp / "harness", ignore=ignore)
    # precompile: sandboxed runs cannot write bytecode, and compiling pytest on every run costs ~1 s
    compileall.compile_dir(str(tmp / "site"), quiet=1, workers=1)
    for dirpath, dirnames, filenames in os.walk(tmp):
        os.chmod(dirpath, 0o755)
        for f in filenames:
            os.chmod(os.path.join(dirpath, f), 0o644)
    try:
        os.rename(tmp, target)
    except OSError:  # another process won the race
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def cleanup_stale(root: Path) -> None:
    """Remove sandboxes (and their cgroups) left behind by processes that died without tearing them down."""
    cleanup_stale_cgroups()
    for entry in root.iterdir() if root.is_dir() else []:
        parts = entry.name.rsplit("-", 2)
        if len(parts) != 3 or not parts[1].isdigit() or not entry.is_dir():
            continue
        pid = int(parts[1])
        try:
            os.kill(pid, 0)
            continue
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        ws = entry / "ws"
        if os.path.ismount(ws):
            subprocess.run(["umount", "-l", str(ws)], capture_output=True)
        shutil.rmtree(entry, ignore_errors=True)
