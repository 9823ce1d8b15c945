"""A light actor for the fault-suite tests (no torch in its process)."""


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def add(self, k: int) -> int:
        self.n += k
        return self.n
