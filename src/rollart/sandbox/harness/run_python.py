"""Run a Python program read from a file and, only if it finished normally, print a secret nonce.

Usage (inside the sandbox): ``python3 run_python.py PROGRAM.py`` with the nonce on stdin's first
line. Used for HumanEval-style checks: a program that calls ``exit(0)`` or ``os._exit`` early never
reaches the nonce line, so it cannot pass by leaving before the asserts.
"""
import sys



def main() -> None:
    nonce = sys.stdin.readline().strip()
    path = sys.argv[1]
    with open(path, encoding="utf-8") as f:
        source = f.read()
    namespace = {"__name__": "__main__", "__file__": path}
    exec(compile(source, path, "exec"), namespace)  # noqa: S102 - runs inside the sandbox by design
    sys.stdout.flush()
    sys.stdout.write(f"\n{nonce} passed\n")
    sys.stdout.flush()


main()
