"""A user's own verifiers, loaded by "module:function" in the verifier tests."""
from rollart.rewards.verifiers import math_verify, with_format

NOT_A_FUNCTION = 42


def contains_reference(text, reference, **extra):
    return 1.0 if reference.lower() in text.lower() else 0.0


math_with_format = with_format(math_verify, 0.1)
