"""rollart: disaggregated agentic RL training. Configuration lives in setup.cfg."""
from setuptools import find_packages, setup

# The library lives under src/; the shipped environments and recipes are top-level packages so that
# `python -m recipes.grpo_frozenlake` works from a checkout and `import envs` works once installed.
setup(
    packages=find_packages("src") + find_packages(".", include=["envs", "envs.*", "recipes", "recipes.*"]),
    package_dir={"": "src", "envs": "envs", "recipes": "recipes"},
)
