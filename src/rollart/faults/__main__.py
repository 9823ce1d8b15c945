"""``python -m rollart.faults``: see :mod:`rollart.faults.cli`."""
from rollart.faults.cli import main

if __name__ == "__main__":
    main()
