"""Importing rollart has no side effects: every package and module leaves sys.excepthook and the root logger alone."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
DATA_DIRS = {"rollart.sandbox.harness"}
"""Scripts copied into sandboxes and run there, never imported."""


def library_modules() -> list[str]:
    """Every package and module under src/rollart by dotted name, found on disk (importing would change what is
    measured), packages before their modules."""
    names = []
    for path in sorted((SRC / "rollart").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__main__" or ".".join(parts[:-1]) in DATA_DIRS:
            continue
        if parts[-1] == "__init__":
            parts.pop()
        names.append(".".join(parts))
    return sorted(names, key=lambda n: (n.count("."), n))


PROBE = textwrap.dedent("""
    import importlib, json, logging, sys

    def state():
        root = logging.getLogger()
        return {"excepthook": repr(sys.excepthook), "level": root.level,
                "handlers": [repr(h) for h in root.handlers], "disabled": logging.root.manager.disable}

    before, changed, absent = state(), {}, {}
    for name in json.loads(sys.argv[1]):
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name is None or e.name.split(".")[0] == "rollart":
                raise
            absent[name] = e.name  # an optional dependency not installed here
        after = state()
        if after != before:
            changed[name] = {k: (before[k], after[k]) for k in after if after[k] != before[k]}
            before = after
    print(json.dumps({"changed": changed, "absent": absent}))
""")


def probe(modules: list[str], path: Path) -> dict:
    """Import ``modules`` in turn in a fresh interpreter; each change is blamed on the import that made it."""
    env = {**os.environ, "PYTHONPATH": str(path), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(modules)], capture_output=True, text=True,
                          timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_package_and_module_is_probed():
    modules = library_modules()
    assert modules[0] == "rollart" and len(modules) > 100
    assert {"rollart.pipeline", "rollart.config", "rollart.loader", "rollart.rollout.env_manager"} <= set(modules)


def test_importing_rollart_changes_no_global_state():
    found = probe(library_modules(), SRC)
    assert found["changed"] == {}, f"importing these changed sys.excepthook or the root logger: {found['changed']}"
    assert len(found["absent"]) < 10, found["absent"]  # only modules of optional extras may be left out


def test_the_probe_catches_a_module_that_installs_a_hook(tmp_path):
    (tmp_path / "noisy.py").write_text("import logging, sys\nsys.excepthook = print\nlogging.basicConfig()\n")
    found = probe(["json", "noisy"], tmp_path)
    assert set(found["changed"]) == {"noisy"} and set(found["changed"]["noisy"]) == {"excepthook", "handlers"}
