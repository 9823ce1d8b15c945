"""The fault suite: an alias of ``python -m rollart.faults`` (``--quick``, ``--only NAME``; ``--help``)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rollart.config import exit_on_config_error  # noqa: E402
from rollart.faults.cli import main  # noqa: E402

if __name__ == "__main__":
    with exit_on_config_error():
        main()
