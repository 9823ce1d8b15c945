"""The fault-suite tests: fault_actors importable here and in the actor processes they start."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
