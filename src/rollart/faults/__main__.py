"""``python -m rollart.faults``: see :mod:`rollart.faults.cli`."""
from rollart.config import exit_on_config_error
from rollart.faults.cli import main

if __name__ == "__main__":
    with exit_on_config_error():  # e.g. a --recipe whose default_config() is refused: one line, no traceback
        main()
